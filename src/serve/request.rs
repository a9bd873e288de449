//! Reading a request body into what the engine runs: the messages, the tools, the
//! output format, the budget and the sampling. Every field is checked by hand, so a
//! wrong type is a 400 naming the parameter, and nothing the engine cannot honour is
//! dropped silently (images, `n > 1`, `stop`, `logprobs`, non-function tools are
//! refused).

use formwork_models::chat::ChatMessage;
use serde_json::{Map, Value};

use crate::engine::tools::{self, Call, Item, ToolChoice, ToolDef};

use super::error::{quote, ApiError};

/// What the answer must be (`response_format` / `text.format`).
#[derive(Clone, Debug, PartialEq)]
pub enum Format {
    /// `json_schema` (canonical or flat `schema` form).
    Schema { name: String, schema: Value },
    /// `json_object`: any JSON object.
    JsonObject,
    /// `text`, or no `response_format`: unconstrained.
    Text,
}

/// A parsed chat request (also what `/v1/responses` maps onto).
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub model: String,
    /// The conversation as the model reads it (tool calls and results rendered).
    pub messages: Vec<ChatMessage>,
    /// Function tools (empty: none).
    pub tools: Vec<ToolDef>,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    pub format: Format,
    /// The budget asked for, and which parameter gave it (for messages).
    pub max_tokens: Option<(usize, &'static str)>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    /// Think first, at most this many thought tokens (`formwork_think_budget`, or
    /// `reasoning_effort` mapped by [`effort_budget`]); None: the server's default.
    pub think: Option<usize>,
    /// `formwork_grounded`: every free-text string of the tools' arguments and of the
    /// answer must be stated in the conversation ([`crate::engine::ground::args`]).
    pub grounded: bool,
}

/// The thought budget of a `reasoning_effort`: `none` and `minimal` 0 (no thought),
/// `low` 256, `medium` 1024, `high` 4096 tokens.
pub fn effort_budget(effort: &str) -> Option<usize> {
    Some(match effort {
        "none" | "minimal" => 0,
        "low" => 256,
        "medium" => crate::engine::think::DEFAULT_BUDGET,
        "high" => 4096,
        _ => return None,
    })
}

/// The thought budget a request asks for: the formwork extension
/// `formwork_think_budget` (an exact number of tokens) over the effort at `effort_key`.
fn think_budget(
    m: &Map<String, Value>,
    effort: Option<&Value>,
    effort_key: &str,
) -> Result<Option<usize>, ApiError> {
    if let Some(n) = opt_uint(m, "formwork_think_budget")? {
        return Ok(Some(n.min(u32::MAX as u64) as usize));
    }
    match effort {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e)) => effort_budget(e).map(Some).ok_or_else(|| {
            ApiError::bad_param(
                effort_key,
                format!(
                    "Invalid '{effort_key}': '{}'; it must be none, minimal, low, medium or high.",
                    e.escape_debug()
                ),
            )
        }),
        Some(v) => Err(wrong_type(effort_key, "a string", v)),
    }
}

/// The body as a JSON object, or the 400 for it.
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(
            "invalid_json",
            "body",
            format!("We could not parse the JSON body of your request: {e}"),
        )
    })?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad(
            "invalid_json",
            "body",
            format!(
                "The request body must be a JSON object, not {}",
                type_name(&other)
            ),
        )),
    }
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(param: &str, want: &str, got: &Value) -> ApiError {
    let mut e = ApiError::bad_param(
        param,
        format!(
            "Invalid type for '{param}': expected {want}, but got {}.",
            type_name(got)
        ),
    );
    e.code = Some("invalid_type");
    e
}

fn missing(param: &str) -> ApiError {
    let mut e = ApiError::bad_param(param, format!("Missing required parameter: '{param}'."));
    e.code = Some("missing_required_parameter");
    e
}

/// A field that may be absent or null.
fn opt<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| !v.is_null())
}

fn opt_str(m: &Map<String, Value>, k: &str, param: &str) -> Result<Option<String>, ApiError> {
    match opt(m, k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(wrong_type(param, "a string", v)),
    }
}

fn opt_bool(m: &Map<String, Value>, k: &str, param: &str) -> Result<Option<bool>, ApiError> {
    match opt(m, k) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(param, "a boolean", v)),
    }
}

fn opt_f64(m: &Map<String, Value>, k: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match opt(m, k) {
        None => Ok(None),
        Some(v @ Value::Number(n)) => {
            let x = n.as_f64().ok_or_else(|| wrong_type(k, "a number", v))?;
            if !(lo..=hi).contains(&x) {
                return Err(ApiError::bad_param(
                    k,
                    format!("Invalid '{k}': {x} is not between {lo} and {hi}."),
                ));
            }
            Ok(Some(x))
        }
        Some(v) => Err(wrong_type(k, "a number", v)),
    }
}

fn opt_uint(m: &Map<String, Value>, k: &str) -> Result<Option<u64>, ApiError> {
    match opt(m, k) {
        None => Ok(None),
        Some(v @ Value::Number(n)) => match n.as_u64() {
            Some(x) => Ok(Some(x)),
            None => Err(ApiError::bad_param(
                k,
                format!("Invalid '{k}': {v} is not a non-negative integer."),
            )),
        },
        Some(v) => Err(wrong_type(k, "an integer", v)),
    }
}

/// The text of a message's `content`: a string, or an array of text parts.
/// Images, audio and files are refused (ignoring them would answer another question).
fn content_text(v: &Value, param: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                let pp = format!("{param}[{j}]");
                let Value::Object(o) = p else {
                    return Err(wrong_type(&pp, "an object", p));
                };
                let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
                match ty {
                    "text" | "input_text" | "output_text" => match o.get("text") {
                        Some(Value::String(t)) => out.push_str(t),
                        Some(t) => return Err(wrong_type(&format!("{pp}.text"), "a string", t)),
                        None => return Err(missing(&format!("{pp}.text"))),
                    },
                    "image_url" | "input_image" | "input_audio" | "file" | "input_file" => {
                        return Err(ApiError::unsupported(
                            &pp,
                            format!("'{pp}': content parts of type '{ty}' are not supported: this server runs a text-only model."),
                        ))
                    }
                    other => {
                        return Err(ApiError::bad_param(
                            &format!("{pp}.type"),
                            format!("Invalid value for '{pp}.type': '{}' (expected 'text').", quote(other)),
                        ))
                    }
                }
            }
            Ok(out)
        }
        other => Err(wrong_type(
            param,
            "a string or an array of content parts",
            other,
        )),
    }
}

/// `messages` (chat completions) into conversation items: plain messages, assistant
/// turns with `tool_calls`, and `tool` results.
pub fn messages(v: Option<&Value>, param: &str) -> Result<Vec<Item>, ApiError> {
    let Some(v) = v else {
        return Err(missing(param));
    };
    let Value::Array(items) = v else {
        return Err(wrong_type(param, "an array", v));
    };
    if items.is_empty() {
        let mut e = ApiError::bad_param(
            param,
            format!("Invalid '{param}': empty array. Expected an array with at least one message."),
        );
        e.code = Some("empty_array");
        return Err(e);
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        out.push(message_item(it, &format!("{param}[{i}]"))?);
    }
    Ok(out)
}

/// One message of `messages` (or a message item of `input`) at parameter `p`.
fn message_item(it: &Value, p: &str) -> Result<Item, ApiError> {
    let Value::Object(m) = it else {
        return Err(wrong_type(p, "an object", it));
    };
    let role = match m.get("role") {
        Some(Value::String(r)) => r.as_str(),
        Some(r) => return Err(wrong_type(&format!("{p}.role"), "a string", r)),
        None => return Err(missing(&format!("{p}.role"))),
    };
    let role = match role {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        "tool" => "tool",
        "function" => {
            return Err(ApiError::unsupported(
                &format!("{p}.role"),
                format!("'{p}.role': 'function' messages (the deprecated function calling) are not supported; use 'tool' messages."),
            ))
        }
        other => {
            return Err(ApiError::bad_param(
                &format!("{p}.role"),
                format!("Invalid value for '{p}.role': '{}'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.", quote(other)),
            ))
        }
    };
    if opt(m, "function_call").is_some() {
        return Err(ApiError::unsupported(
            &format!("{p}.function_call"),
            format!("'{p}.function_call' (the deprecated function calling) is not supported; use 'tool_calls'."),
        ));
    }
    let calls = match opt(m, "tool_calls") {
        None => None,
        Some(_) if role != "assistant" => {
            return Err(ApiError::bad_param(
                &format!("{p}.tool_calls"),
                format!("Invalid '{p}.tool_calls': only assistant messages make tool calls."),
            ))
        }
        Some(Value::Array(a)) => Some(tool_calls(a, &format!("{p}.tool_calls"))?),
        Some(v) => return Err(wrong_type(&format!("{p}.tool_calls"), "an array", v)),
    };
    let content = match m.get("content") {
        Some(c) => content_text(c, &format!("{p}.content"))?,
        None if role == "assistant" => String::new(),
        None => return Err(missing(&format!("{p}.content"))),
    };
    Ok(match (role, calls) {
        ("tool", _) => {
            let call_id = req_str(m, "tool_call_id", &format!("{p}.tool_call_id"))?;
            Item::Result { call_id, content }
        }
        (_, Some(calls)) if !calls.is_empty() => Item::Calls { content, calls },
        _ => Item::Message(ChatMessage::new(role, content)),
    })
}

/// A replayed call's `arguments`: a JSON text of an object, parsed (Qwen2.5's template
/// would encode the string a second time) and written back compact.
fn replayed_arguments(v: Option<&Value>, param: &str) -> Result<String, ApiError> {
    let text = match v {
        None | Some(Value::Null) => return Ok("{}".to_string()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok("{}".to_string()),
        Some(Value::String(s)) => s,
        Some(v) => return Err(wrong_type(param, "a string", v)),
    };
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v.to_string()),
        Ok(other) => Err(ApiError::bad_param(
            param,
            format!(
                "Invalid '{param}': the arguments must be a JSON object, not {}.",
                type_name(&other)
            ),
        )),
        Err(e) => Err(ApiError::bad_param(
            param,
            format!("Invalid '{param}': the arguments are not valid JSON ({e})."),
        )),
    }
}

/// An assistant message's `tool_calls`.
fn tool_calls(a: &[Value], param: &str) -> Result<Vec<Call>, ApiError> {
    let mut out = Vec::with_capacity(a.len());
    for (j, c) in a.iter().enumerate() {
        let p = format!("{param}[{j}]");
        let Value::Object(c) = c else {
            return Err(wrong_type(&p, "an object", c));
        };
        match opt_str(c, "type", &format!("{p}.type"))?.as_deref() {
            None | Some("function") => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    &format!("{p}.type"),
                    format!(
                        "'{p}.type': tool calls of type '{}' are not supported; only 'function'.",
                        quote(other)
                    ),
                ))
            }
        }
        let id = opt_str(c, "id", &format!("{p}.id"))?.unwrap_or_default();
        let f = match c.get("function") {
            Some(Value::Object(f)) => f,
            Some(v) => return Err(wrong_type(&format!("{p}.function"), "an object", v)),
            None => return Err(missing(&format!("{p}.function"))),
        };
        let name = req_str(f, "name", &format!("{p}.function.name"))?;
        let arguments = replayed_arguments(f.get("arguments"), &format!("{p}.function.arguments"))?;
        out.push(Call {
            id,
            name,
            arguments,
        });
    }
    Ok(out)
}

/// A tool's name: what OpenAI takes (letters, digits, `_`, `-`, up to 64) and `.`.
fn tool_name(v: Option<&Value>, param: &str) -> Result<String, ApiError> {
    let name = match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(wrong_type(param, "a string", v)),
        None => return Err(missing(param)),
    };
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok {
        return Err(ApiError::bad_param(
            param,
            format!(
                "Invalid '{param}': '{}'. A tool name is 1 to 64 letters, digits, '_', '-' or '.'.",
                quote(&name)
            ),
        ));
    }
    Ok(name)
}

/// `tools`: the canonical form (`{"type":"function","function":{…}}`, chat completions)
/// or the flat one (`{"type":"function","name",…}`, responses).
pub fn tool_defs(v: Option<&Value>, flat: bool) -> Result<Vec<ToolDef>, ApiError> {
    let a = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type("tools", "an array", v)),
    };
    let mut out: Vec<ToolDef> = Vec::with_capacity(a.len());
    for (i, t) in a.iter().enumerate() {
        let p = format!("tools[{i}]");
        let Value::Object(t) = t else {
            return Err(wrong_type(&p, "an object", t));
        };
        match t.get("type") {
            Some(Value::String(ty)) if ty == "function" => {}
            Some(Value::String(ty)) => {
                return Err(ApiError::unsupported(
                    &format!("{p}.type"),
                    format!(
                        "'{p}.type': tools of type '{}' are not supported; only 'function'.",
                        quote(ty)
                    ),
                ))
            }
            Some(v) => return Err(wrong_type(&format!("{p}.type"), "a string", v)),
            None => return Err(missing(&format!("{p}.type"))),
        }
        let (f, fp) = if flat {
            (t, p.clone())
        } else {
            match t.get("function") {
                Some(Value::Object(f)) => (f, format!("{p}.function")),
                Some(v) => return Err(wrong_type(&format!("{p}.function"), "an object", v)),
                None => return Err(missing(&format!("{p}.function"))),
            }
        };
        let name = tool_name(f.get("name"), &format!("{fp}.name"))?;
        if out.iter().any(|o| o.name == name) {
            return Err(ApiError::bad_param(
                &format!("{fp}.name"),
                format!("Invalid '{fp}.name': the tool name '{name}' is given twice."),
            ));
        }
        let description = opt_str(f, "description", &format!("{fp}.description"))?;
        let strict = opt_bool(f, "strict", &format!("{fp}.strict"))?;
        let pp = format!("{fp}.parameters");
        let parameters = match opt(f, "parameters") {
            None => {
                serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
            }
            Some(Value::Object(s)) => {
                let mut s = s.clone();
                match s.get("type") {
                    None => {
                        s.insert("type".into(), Value::String("object".into()));
                    }
                    Some(Value::String(t)) if t == "object" => {}
                    Some(_) => {
                        return Err(ApiError::bad(
                            "invalid_function_parameters",
                            &pp,
                            format!("Invalid schema for function '{name}' ('{pp}'): the parameters must be a JSON Schema of type 'object'."),
                        ))
                    }
                }
                Value::Object(s)
            }
            Some(v) => return Err(wrong_type(&pp, "an object", v)),
        };
        out.push(ToolDef {
            name,
            description,
            parameters,
            strict,
        });
    }
    Ok(out)
}

/// One name in `tool_choice` (`{"type":"function","function":{"name"}}`, or flat
/// `{"type":"function","name"}`), checked against the tools.
fn choice_name(o: &Map<String, Value>, p: &str, tools: &[ToolDef]) -> Result<String, ApiError> {
    let (name, np) = match o.get("function") {
        Some(Value::Object(f)) => (f.get("name"), format!("{p}.function.name")),
        Some(v) => return Err(wrong_type(&format!("{p}.function"), "an object", v)),
        None => (o.get("name"), format!("{p}.name")),
    };
    let name = match name {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(wrong_type(&np, "a string", v)),
        None => return Err(missing(&np)),
    };
    if !tools.iter().any(|t| t.name == name) {
        let mut e = ApiError::bad_param(
            &np,
            format!(
                "Invalid '{np}': no tool is named '{}' (the tools are: {}).",
                quote(&name),
                tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        e.code = Some("unknown_tool");
        return Err(e);
    }
    Ok(name)
}

/// `tool_choice`; without one, `auto` when there are tools and `none` otherwise.
pub fn tool_choice(v: Option<&Value>, tools: &[ToolDef]) -> Result<ToolChoice, ApiError> {
    const P: &str = "tool_choice";
    let need_tools = |what: &str| -> Result<(), ApiError> {
        if tools.is_empty() {
            return Err(ApiError::bad_param(
                P,
                format!("Invalid '{P}': {what} needs 'tools'."),
            ));
        }
        Ok(())
    };
    let choice = match v {
        None | Some(Value::Null) if tools.is_empty() => ToolChoice::None,
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" if tools.is_empty() => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => {
                need_tools("'required'")?;
                ToolChoice::Required
            }
            other => {
                return Err(ApiError::bad_param(
                    P,
                    format!("Invalid value for '{P}': '{}'. Supported values are: 'none', 'auto', 'required', a function, or 'allowed_tools'.", quote(other)),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let ty = match o.get("type") {
                Some(Value::String(t)) => t.as_str(),
                Some(v) => return Err(wrong_type(&format!("{P}.type"), "a string", v)),
                None => return Err(missing(&format!("{P}.type"))),
            };
            match ty {
                "function" => {
                    need_tools("a named function")?;
                    ToolChoice::Only {
                        names: vec![choice_name(o, P, tools)?],
                        required: true,
                    }
                }
                "allowed_tools" => {
                    need_tools("'allowed_tools'")?;
                    // Chat completions nest it under `allowed_tools`; responses are flat.
                    let (a, ap) = match o.get("allowed_tools") {
                        Some(Value::Object(a)) => (a, format!("{P}.allowed_tools")),
                        Some(v) => {
                            return Err(wrong_type(&format!("{P}.allowed_tools"), "an object", v))
                        }
                        None => (o, P.to_string()),
                    };
                    let required = match opt_str(a, "mode", &format!("{ap}.mode"))?.as_deref() {
                        None | Some("auto") => false,
                        Some("required") => true,
                        Some(other) => {
                            return Err(ApiError::bad_param(
                                &format!("{ap}.mode"),
                                format!("Invalid value for '{ap}.mode': '{}'. Supported values are: 'auto' and 'required'.", quote(other)),
                            ))
                        }
                    };
                    let list = match a.get("tools") {
                        Some(Value::Array(l)) if !l.is_empty() => l,
                        Some(Value::Array(_)) => {
                            return Err(ApiError::bad_param(
                                &format!("{ap}.tools"),
                                format!("Invalid '{ap}.tools': empty array."),
                            ))
                        }
                        Some(v) => return Err(wrong_type(&format!("{ap}.tools"), "an array", v)),
                        None => return Err(missing(&format!("{ap}.tools"))),
                    };
                    let mut names = Vec::new();
                    for (j, t) in list.iter().enumerate() {
                        let tp = format!("{ap}.tools[{j}]");
                        let Value::Object(t) = t else {
                            return Err(wrong_type(&tp, "an object", t));
                        };
                        names.push(choice_name(t, &tp, tools)?);
                    }
                    ToolChoice::Only { names, required }
                }
                other => {
                    return Err(ApiError::unsupported(
                        &format!("{P}.type"),
                        format!("'{P}.type': '{}' is not supported; use 'function' or 'allowed_tools'.", quote(other)),
                    ))
                }
            }
        }
        Some(v) => return Err(wrong_type(P, "a string or an object", v)),
    };
    Ok(choice)
}

/// The tool fields of a request, checked together.
fn tool_fields(
    m: &Map<String, Value>,
    flat: bool,
) -> Result<(Vec<ToolDef>, ToolChoice, bool), ApiError> {
    let tools = tool_defs(m.get("tools"), flat)?;
    let choice = tool_choice(m.get("tool_choice"), &tools)?;
    let parallel = opt_bool(m, "parallel_tool_calls", "parallel_tool_calls")?.unwrap_or(true);
    Ok((tools, choice, parallel))
}

/// `response_format` (chat completions) or `text.format` (responses).
pub fn format(v: Option<&Value>, param: &str, flat_responses: bool) -> Result<Format, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Format::Text);
    };
    let Value::Object(m) = v else {
        return Err(wrong_type(param, "an object", v));
    };
    let ty = match m.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(t) => return Err(wrong_type(&format!("{param}.type"), "a string", t)),
        None => return Err(missing(&format!("{param}.type"))),
    };
    match ty {
        "text" => Ok(Format::Text),
        "json_object" => Ok(Format::JsonObject),
        "json_schema" => {
            // Canonical: {"type":"json_schema","json_schema":{"name","schema","strict"}}.
            // Flat (llama.cpp, SGLang users; and the Responses API's `text.format`):
            // {"type":"json_schema","name"?,"schema":{...}}.
            let (holder, hp) = match m.get("json_schema") {
                Some(Value::Object(js)) if !flat_responses => (js, format!("{param}.json_schema")),
                Some(js) if !flat_responses => {
                    return Err(wrong_type(&format!("{param}.json_schema"), "an object", js))
                }
                _ => (m, param.to_string()),
            };
            let name = opt_str(holder, "name", &format!("{hp}.name"))?
                .unwrap_or_else(|| "response".to_string());
            opt_bool(holder, "strict", &format!("{hp}.strict"))?;
            let schema = match holder.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                Some(s) => return Err(wrong_type(&format!("{hp}.schema"), "an object", s)),
                None => return Err(missing(&format!("{hp}.schema"))),
            };
            Ok(Format::Schema { name, schema })
        }
        other => Err(ApiError::bad_param(
            &format!("{param}.type"),
            format!("Invalid value for '{param}.type': '{}'. Supported values are: 'text', 'json_object' and 'json_schema'.", quote(other)),
        )),
    }
}

/// Parameters this server refuses rather than ignores, when set to anything that
/// would change the answer.
fn refuse_unsupported(m: &Map<String, Value>) -> Result<(), ApiError> {
    match opt(m, "functions") {
        None => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "functions",
                "'functions' (the deprecated function calling) is not supported; use 'tools'.",
            ))
        }
    }
    match opt(m, "function_call") {
        None => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "function_call",
                "'function_call' (the deprecated function calling) is not supported; use 'tool_choice'.",
            ))
        }
    }
    if let Some(n) = opt_uint(m, "n")? {
        if n != 1 {
            return Err(ApiError::unsupported(
                "n",
                format!("'n' = {n} is not supported: this server returns one choice."),
            ));
        }
    }
    match opt(m, "stop") {
        None => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "stop",
                "'stop' sequences are not supported: the answer ends where its format ends.",
            ))
        }
    }
    for k in ["logprobs", "top_logprobs"] {
        match opt(m, k) {
            None | Some(Value::Bool(false)) => {}
            Some(_) => {
                return Err(ApiError::unsupported(
                    k,
                    format!("'{k}' is not supported by this server."),
                ))
            }
        }
    }
    for k in ["frequency_penalty", "presence_penalty"] {
        if let Some(x) = opt_f64(m, k, -2.0, 2.0)? {
            if x != 0.0 {
                return Err(ApiError::unsupported(
                    k,
                    format!("'{k}' other than 0 is not supported by this server."),
                ));
            }
        }
    }
    if let Some(Value::Object(lb)) = opt(m, "logit_bias") {
        if !lb.is_empty() {
            return Err(ApiError::unsupported(
                "logit_bias",
                "'logit_bias' is not supported by this server.",
            ));
        }
    }
    for k in ["audio", "modalities", "prediction", "web_search_options"] {
        match opt(m, k) {
            None => {}
            Some(Value::Array(a)) if k == "modalities" && a.iter().all(|x| x == "text") => {}
            Some(_) => {
                return Err(ApiError::unsupported(
                    k,
                    format!("'{k}' is not supported by this server."),
                ))
            }
        }
    }
    Ok(())
}

fn budget(
    m: &Map<String, Value>,
    names: &[&'static str],
) -> Result<Option<(usize, &'static str)>, ApiError> {
    // The first name wins (`max_completion_tokens` over the older `max_tokens`).
    for &k in names {
        if let Some(n) = opt_uint(m, k)? {
            if n == 0 {
                return Err(ApiError::bad_param(
                    k,
                    format!("Invalid '{k}': 0; it must be at least 1."),
                ));
            }
            return Ok(Some((n.min(u32::MAX as u64) as usize, k)));
        }
    }
    Ok(None)
}

fn model(m: &Map<String, Value>) -> Result<String, ApiError> {
    req_str(m, "model", "model")
}

/// A field that must be a string.
fn req_str(m: &Map<String, Value>, k: &str, param: &str) -> Result<String, ApiError> {
    match m.get(k) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(wrong_type(param, "a string", v)),
        None => Err(missing(param)),
    }
}

fn sampling(m: &Map<String, Value>) -> Result<(Option<f64>, Option<f64>, Option<u64>), ApiError> {
    let temperature = opt_f64(m, "temperature", 0.0, 2.0)?;
    let top_p = opt_f64(m, "top_p", 0.0, 1.0)?;
    let seed = match opt(m, "seed") {
        None => None,
        Some(v @ Value::Number(n)) => Some(
            n.as_i64()
                .map(|x| x as u64)
                .or_else(|| n.as_u64())
                .ok_or_else(|| wrong_type("seed", "an integer", v))?,
        ),
        Some(v) => return Err(wrong_type("seed", "an integer", v)),
    };
    Ok((temperature, top_p, seed))
}

/// A `POST /v1/chat/completions` body.
pub fn chat(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let m = json_object(body)?;
    let model = model(&m)?;
    let items = messages(m.get("messages"), "messages")?;
    refuse_unsupported(&m)?;
    let (tools, tool_choice, parallel_tool_calls) = tool_fields(&m, false)?;
    let messages = tools::render(&items, &tools);
    let format = format(m.get("response_format"), "response_format", false)?;
    let max_tokens = budget(&m, &["max_completion_tokens", "max_tokens"])?;
    let think = think_budget(&m, opt(&m, "reasoning_effort"), "reasoning_effort")?;
    let (temperature, top_p, seed) = sampling(&m)?;
    let stream = opt_bool(&m, "stream", "stream")?.unwrap_or(false);
    let grounded = opt_bool(&m, "formwork_grounded", "formwork_grounded")?.unwrap_or(false);
    let include_usage = match opt(&m, "stream_options") {
        None => false,
        Some(Value::Object(so)) => {
            opt_bool(so, "include_usage", "stream_options.include_usage")?.unwrap_or(false)
        }
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    Ok(ChatRequest {
        model,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        format,
        max_tokens,
        temperature,
        top_p,
        seed,
        stream,
        include_usage,
        think,
        grounded,
    })
}

/// A `POST /v1/responses` body, mapped onto a chat request: `instructions` becomes
/// the system message, `input` (a string or a list of messages) the conversation,
/// `text.format` the format, `max_output_tokens` the budget.
pub fn responses(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let m = json_object(body)?;
    let model = model(&m)?;
    refuse_unsupported(&m)?;
    if opt(&m, "previous_response_id").is_some() {
        return Err(ApiError::unsupported(
            "previous_response_id",
            "'previous_response_id' is not supported: this server stores no responses; send the whole conversation in 'input'.",
        ));
    }
    let mut items: Vec<Item> = Vec::new();
    if let Some(i) = opt_str(&m, "instructions", "instructions")? {
        items.push(Item::Message(ChatMessage::new("system", i)));
    }
    match m.get("input") {
        None => return Err(missing("input")),
        Some(Value::String(s)) => items.push(Item::Message(ChatMessage::new("user", s.clone()))),
        Some(Value::Array(list)) => {
            // Input items: messages (`type` absent or "message"), `function_call` (a
            // call the model made; consecutive ones are one assistant turn) and
            // `function_call_output`; anything else (reasoning items, references) is
            // refused.
            for (i, it) in list.iter().enumerate() {
                let p = format!("input[{i}]");
                let Value::Object(o) = it else {
                    return Err(wrong_type(&p, "an object", it));
                };
                match o.get("type").and_then(Value::as_str) {
                    None | Some("message") => items.push(message_item(it, &p)?),
                    Some("function_call") => {
                        let call = Call {
                            id: req_str(o, "call_id", &format!("{p}.call_id"))?,
                            name: req_str(o, "name", &format!("{p}.name"))?,
                            arguments: replayed_arguments(o.get("arguments"), &format!("{p}.arguments"))?,
                        };
                        match items.last_mut() {
                            Some(Item::Calls { calls, .. }) => calls.push(call),
                            _ => items.push(Item::Calls {
                                content: String::new(),
                                calls: vec![call],
                            }),
                        }
                    }
                    Some("function_call_output") => {
                        let call_id = req_str(o, "call_id", &format!("{p}.call_id"))?;
                        let content = match o.get("output") {
                            Some(v) => content_text(v, &format!("{p}.output"))?,
                            None => return Err(missing(&format!("{p}.output"))),
                        };
                        items.push(Item::Result { call_id, content });
                    }
                    Some(other) => {
                        return Err(ApiError::unsupported(
                            &format!("{p}.type"),
                            format!("'{p}.type': input items of type '{}' are not supported by this server.", quote(other)),
                        ))
                    }
                }
            }
        }
        Some(v) => return Err(wrong_type("input", "a string or an array", v)),
    }
    if items.is_empty() {
        return Err(ApiError::bad_param("input", "Invalid 'input': no message."));
    }
    let (tools, tool_choice, parallel_tool_calls) = tool_fields(&m, true)?;
    let msgs = tools::render(&items, &tools);
    let format = match opt(&m, "text") {
        None => Format::Text,
        Some(Value::Object(t)) => format(t.get("format"), "text.format", true)?,
        Some(v) => return Err(wrong_type("text", "an object", v)),
    };
    let max_tokens = budget(&m, &["max_output_tokens"])?;
    let effort = match opt(&m, "reasoning") {
        None => None,
        Some(Value::Object(r)) => opt(r, "effort"),
        Some(v) => return Err(wrong_type("reasoning", "an object", v)),
    };
    let think = think_budget(&m, effort, "reasoning.effort")?;
    let (temperature, top_p, seed) = sampling(&m)?;
    let stream = opt_bool(&m, "stream", "stream")?.unwrap_or(false);
    let grounded = opt_bool(&m, "formwork_grounded", "formwork_grounded")?.unwrap_or(false);
    Ok(ChatRequest {
        model,
        messages: msgs,
        tools,
        tool_choice,
        parallel_tool_calls,
        format,
        max_tokens,
        temperature,
        top_p,
        seed,
        stream,
        include_usage: false,
        think,
        grounded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Found by the `serve_request` fuzz target (libFuzzer, 2026-12-02; corpus
    // `role_with_a_newline.json`): an error quoting a client's value carried the
    // value's newline, so the one-line message was two lines.
    #[test]
    fn an_error_quoting_a_value_with_control_characters_is_one_line() {
        let body = br#"{"model":"m","messages":[{"role":"u\n\t\u0001x","content":"hi"}]}"#;
        let e = chat(body).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(e.message.contains(r"'u\n\t\u{0001}x'"), "{}", e.message);
        assert!(!e.message.chars().any(char::is_control), "{:?}", e.message);
    }

    #[test]
    fn flat_and_canonical_schema_forms_agree() {
        let canonical = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],
            "response_format":{"type":"json_schema","json_schema":{"name":"P","strict":true,"schema":{"type":"object"}}}}"#;
        let flat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],
            "response_format":{"type":"json_schema","name":"P","schema":{"type":"object"}}}"#;
        assert_eq!(chat(canonical).unwrap().format, chat(flat).unwrap().format);
    }

    #[test]
    fn the_thought_budget_comes_from_the_extension_then_the_effort() {
        let body = |extra: &str| {
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
        };
        let think = |extra: &str| chat(body(extra).as_bytes()).map(|r| r.think);
        assert_eq!(think("").unwrap(), None);
        assert_eq!(think(r#","reasoning_effort":"low""#).unwrap(), Some(256));
        assert_eq!(think(r#","reasoning_effort":"none""#).unwrap(), Some(0));
        assert_eq!(
            think(r#","reasoning_effort":"high","formwork_think_budget":7"#).unwrap(),
            Some(7)
        );
        let e = think(r#","reasoning_effort":"huge""#).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(e.message.contains("reasoning_effort"), "{}", e.message);
        let e = think(r#","formwork_think_budget":-1"#).unwrap_err();
        assert!(e.message.contains("formwork_think_budget"), "{}", e.message);
        let r = br#"{"model":"m","input":"x","reasoning":{"effort":"medium"}}"#;
        assert_eq!(responses(r).unwrap().think, Some(1024));
    }

    #[test]
    fn max_completion_tokens_wins_over_max_tokens() {
        let b = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"max_completion_tokens":5}"#;
        assert_eq!(
            chat(b).unwrap().max_tokens,
            Some((5, "max_completion_tokens"))
        );
    }

    #[test]
    fn a_long_value_is_quoted_by_its_start_and_length() {
        let role = "x".repeat(60_000);
        let b = format!(r#"{{"model":"m","messages":[{{"role":"{role}","content":"hi"}}]}}"#);
        let e = chat(b.as_bytes()).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        assert!(e.message.len() < 300, "{} bytes", e.message.len());
        assert!(
            e.message
                .contains(&format!("'{}... (60000 characters)'", "x".repeat(64))),
            "{}",
            e.message
        );
        // A short one is quoted whole, and a multi-byte character is never cut.
        let short = quote("é".repeat(64).as_str()).into_owned();
        assert_eq!(short, "é".repeat(64));
        assert_eq!(
            quote(&"é".repeat(65)),
            format!("{}... (65 characters)", "é".repeat(64))
        );
    }

    #[test]
    fn wrong_types_name_their_parameter() {
        let b = br#"{"model":"m","messages":[{"role":"user","content":7}]}"#;
        let e = chat(b).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
        assert_eq!(e.status, 400);
    }
}
