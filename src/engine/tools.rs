//! Tool calling: the tools shown to the model, one grammar for the turn, and the
//! model's output read back as calls.
//!
//! ```text
//! tools + tool_choice + response_format ─▶ Toolbox (ToolTurn grammar, a validator per tool)
//! conversation with calls and results ─▶ render ─▶ plain chat messages (Hermes format)
//! masked output ─▶ parse_turn ─▶ calls (name, arguments text) | content
//! masked output as it grows ─▶ TurnStream ─▶ content deltas | call start, argument pieces
//! ```
//!
//! The format is the Hermes one that Qwen2.5's chat template writes, for every model:
//! the tools as JSON lines inside `<tools></tools>` in the system message, a call as
//! `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, results as
//! `<tool_response>` blocks in a user turn. Qwen2.5 reads the text its own template
//! would have written; SmolLM2 and Gemma 3, whose templates have no tools, read the same
//! text as a built-in format (README "Serving", docs/serving.md). The rendered messages go through
//! [`super::prompt::encode`] like any other, so a tool description or a result never
//! becomes a control token.
//!
//! The mask is [`formwork_grammar::tools::ToolTurn`]: every call names one of the tools
//! and its arguments are valid against that tool's `parameters`, whatever `strict` says;
//! `tool_choice` and `parallel_tool_calls` become the number of calls it allows.

use std::collections::HashMap;
use std::sync::Arc;

use formwork_grammar::compile::{compile, CompileError, Config};
use formwork_grammar::matcher::Grammar;
use formwork_grammar::tools::{
    FinalAnswer, ToolSpec, ToolTurn, ToolTurnError, CALL_CLOSE, CALL_MID, CALL_OPEN, CALL_SEP,
};
use formwork_models::chat::ChatMessage;
use serde_json::Value;

use crate::validate::Validator;

/// One function tool, as the request gave it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    /// The `parameters` schema (a JSON object schema; `{"type":"object","properties":{}}`
    /// when the request gave none).
    pub parameters: Value,
    pub strict: Option<bool>,
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call.
    None,
    /// Calls or the final answer, as the model chooses.
    Auto,
    /// At least one call.
    Required,
    /// Only these tools (a named function is one; `allowed_tools` any number), and at
    /// least one call when `required`.
    Only { names: Vec<String>, required: bool },
}

/// One call in a conversation or an answer: the arguments as the JSON text the
/// model wrote (or the client replayed), compact.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One item of a conversation with tools, before it is rendered.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A plain message.
    Message(ChatMessage),
    /// An assistant turn that made calls (with any text before them).
    Calls { content: String, calls: Vec<Call> },
    /// A tool's result.
    Result { call_id: String, content: String },
}

/// The system text before the tools when the conversation has no system message.
pub const DEFAULT_SYSTEM: &str = "You are a helpful assistant.";

/// The tools block of the system message, as Qwen2.5's chat template writes it (one
/// `{"type": "function", "function": …}` JSON line per tool, in Python's `json.dumps`
/// spacing).
pub fn tools_block(tools: &[ToolDef]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        let mut f = serde_json::Map::new();
        f.insert("name".into(), Value::String(t.name.clone()));
        if let Some(d) = &t.description {
            f.insert("description".into(), Value::String(d.clone()));
        }
        f.insert("parameters".into(), t.parameters.clone());
        let v = serde_json::json!({"type": "function", "function": Value::Object(f)});
        s.push('\n');
        s.push_str(&python_json(&v));
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// JSON with `", "` and `": "` separators, as Python's `json.dumps` (and so Jinja's
/// `tojson` in the templates the model was trained on) writes it.
pub fn python_json(v: &Value) -> String {
    fn go(v: &Value, out: &mut String) {
        match v {
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    go(x, out);
                }
                out.push(']');
            }
            Value::Object(m) => {
                out.push('{');
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push_str(": ");
                    go(x, out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    go(v, &mut s);
    s
}

/// One call as the model writes it (and as the grammar takes it).
pub fn call_text(name: &str, arguments: &str) -> String {
    let mut s = String::from_utf8_lossy(CALL_OPEN).into_owned();
    s.push_str(name);
    s.push_str(std::str::from_utf8(CALL_MID).unwrap_or_default());
    s.push_str(arguments);
    s.push_str(std::str::from_utf8(CALL_CLOSE).unwrap_or_default());
    s
}

/// The conversation as plain chat messages: the tools block added to the system
/// message (a system message first when there is none), calls written into assistant
/// turns, results gathered into one user turn of `<tool_response>` blocks, and
/// consecutive turns of one role merged (Gemma 3's template refuses a role twice).
pub fn render(items: &[Item], tools: &[ToolDef]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    let push = |role: &str, text: String, out: &mut Vec<ChatMessage>| match out.last_mut() {
        Some(last) if last.role == role && role != "system" => {
            let sep = if role == "user" && text.starts_with("<tool_response>") {
                "\n"
            } else {
                "\n\n"
            };
            last.content.push_str(sep);
            last.content.push_str(&text);
        }
        _ => out.push(ChatMessage::new(role, text)),
    };
    for it in items {
        match it {
            Item::Message(m) => push(&m.role, m.content.clone(), &mut out),
            Item::Calls { content, calls } => {
                let mut s = content.clone();
                for (i, c) in calls.iter().enumerate() {
                    if i > 0 || !s.is_empty() {
                        s.push(CALL_SEP as char);
                    }
                    s.push_str(&call_text(&c.name, &c.arguments));
                }
                push("assistant", s, &mut out);
            }
            Item::Result { content, .. } => push(
                "user",
                format!("<tool_response>\n{content}\n</tool_response>"),
                &mut out,
            ),
        }
    }
    if !tools.is_empty() {
        let block = tools_block(tools);
        match out.iter_mut().find(|m| m.role == "system") {
            Some(sys) => {
                sys.content.push_str("\n\n");
                sys.content.push_str(&block);
            }
            None => out.insert(
                0,
                ChatMessage::new("system", format!("{DEFAULT_SYSTEM}\n\n{block}")),
            ),
        }
    }
    out
}

/// The compiled tools of a request: the turn's grammar and a validator per tool.
pub struct Toolbox {
    pub grammar: Arc<Grammar>,
    pub validators: HashMap<String, Arc<Validator>>,
    /// The final answer's validator (`response_format`), when calls are optional.
    pub answer: Option<Arc<Validator>>,
    /// The final answer is a JSON value (not free text).
    pub answer_is_json: bool,
    /// The most calls the turn allows.
    pub max_calls: u16,
    /// The same turn with no call allowed, when calls are optional: what the turn is
    /// decoded under when its calls would only repeat calls already answered
    /// ([`super::repeats`]).
    pub answer_only: Option<Arc<Grammar>>,
    /// Each tool's name and `parameters` (for its grounded strings).
    pub params: Vec<(String, Value)>,
    /// The final answer's schema (`response_format`), when calls are optional.
    pub answer_schema: Option<Value>,
}

/// Why the tools of a request cannot be compiled.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// Tool `index`'s `parameters` cannot be enforced.
    #[error("tool '{name}': {error}")]
    Parameters {
        index: usize,
        name: String,
        error: CompileError,
    },
    /// Tool `index`'s `parameters` is not a JSON Schema the validator reads.
    #[error("tool '{name}': {message}")]
    Invalid {
        index: usize,
        name: String,
        message: String,
    },
    /// A name in `tool_choice` that is not a tool.
    #[error("tool_choice names '{0}', which is not among the tools")]
    UnknownChoice(String),
    /// The final answer's schema cannot be enforced.
    #[error("{0}")]
    Answer(CompileError),
    #[error("{0}")]
    Turn(#[from] ToolTurnError),
}

/// The tools' grammar for one turn. `answer` is the compiled `response_format`
/// (None: free text); `parallel` false allows one call at most.
pub fn compile_toolbox(
    tools: &[ToolDef],
    choice: &ToolChoice,
    parallel: bool,
    answer: Option<(&Value, Arc<Validator>)>,
) -> Result<Toolbox, ToolsError> {
    let cfg = Config::default();
    let chosen: Option<&Vec<String>> = match choice {
        ToolChoice::Only { names, .. } => Some(names),
        _ => None,
    };
    if let Some(names) = chosen {
        for n in names {
            if !tools.iter().any(|t| &t.name == n) {
                return Err(ToolsError::UnknownChoice(n.clone()));
            }
        }
    }
    let mut specs = Vec::new();
    let mut validators = HashMap::new();
    for (index, t) in tools.iter().enumerate() {
        // Every tool is checked, whether or not this turn may call it: a schema the
        // grammar cannot enforce is the client's error on every turn alike.
        let automaton = compile(&t.parameters, &cfg).map_err(|error| ToolsError::Parameters {
            index,
            name: t.name.clone(),
            error,
        })?;
        let v = Validator::new(&t.parameters).map_err(|e| ToolsError::Invalid {
            index,
            name: t.name.clone(),
            message: format!("{e:#}"),
        })?;
        validators.insert(t.name.clone(), Arc::new(v));
        let callable = match (choice, chosen) {
            (ToolChoice::None, _) => false,
            (_, Some(names)) => names.contains(&t.name),
            _ => true,
        };
        if callable {
            specs.push(ToolSpec {
                name: t.name.clone(),
                parameters: automaton,
            });
        }
    }
    let required = match choice {
        ToolChoice::Required => true,
        ToolChoice::Only { required, .. } => *required,
        _ => false,
    };
    let params = tools
        .iter()
        .map(|t| (t.name.clone(), t.parameters.clone()))
        .collect();
    let answer_schema = answer
        .as_ref()
        .filter(|_| !required)
        .map(|(s, _)| (*s).clone());
    let (final_answer, answer_validator, answer_is_json) = match answer {
        Some((schema, v)) => (
            FinalAnswer::Json(compile(schema, &cfg).map_err(ToolsError::Answer)?),
            Some(v),
            true,
        ),
        None => (FinalAnswer::Text, None, false),
    };
    let max_calls = if parallel { u16::MAX } else { 1 };
    let max_calls = if matches!(choice, ToolChoice::None) {
        0
    } else {
        max_calls
    };
    let answer_only = (!required && max_calls > 0)
        .then(|| ToolTurn::answer_only(final_answer.clone()))
        .transpose()?
        .map(|t| Grammar::new(Arc::new(t)));
    let turn = ToolTurn::new(specs, final_answer, u16::from(required), max_calls)?;
    Ok(Toolbox {
        grammar: Grammar::new(Arc::new(turn)),
        answer_only,
        validators,
        params,
        answer_schema,
        answer: if required { None } else { answer_validator },
        answer_is_json: answer_is_json && !required,
        max_calls,
    })
}

/// The model's turn read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turn {
    /// The text of the turn: the answer when it made no call, or the text before its
    /// calls (trailing whitespace dropped; None when there was none).
    pub content: Option<String>,
    /// The calls, in order: name and arguments text. Ids are the caller's to give.
    pub calls: Vec<(String, String)>,
    /// Bytes at the end that are not a whole call (a run cut short).
    pub partial: bool,
}

/// Reads the output of a [`ToolTurn`] grammar. A call cut short is dropped and
/// `partial` set; nothing else can fail, because the grammar wrote the text.
pub fn parse_turn(text: &str) -> Turn {
    let mut turn = Turn::default();
    let mut s = TurnStream::default();
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut content = String::new();
    let mut events = s.feed(text);
    events.extend(s.finish());
    for ev in events {
        match ev {
            TurnEvent::CallStart { name, .. } => calls.push((name, String::new())),
            TurnEvent::Arguments { piece, .. } => {
                if let Some(c) = calls.last_mut() {
                    c.1.push_str(&piece)
                }
            }
            TurnEvent::Content(c) => content.push_str(&c),
            TurnEvent::CallEnd { .. } => {}
        }
    }
    let done = s.calls_done;
    turn.partial = calls.len() > done || (s.is_calls() && s.pos < text.len());
    calls.truncate(done);
    turn.content = if calls.is_empty() && !s.is_calls() {
        Some(content)
    } else {
        Some(content).filter(|c| !c.is_empty())
    };
    turn.calls = calls;
    turn
}

/// What a streamed turn sends as the text grows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnEvent {
    /// Text of an answer without calls.
    Content(String),
    /// A call's name is complete (the first delta of call `index`).
    CallStart { index: usize, name: String },
    /// The next bytes of call `index`'s arguments (JSON text, not whole on its own).
    Arguments { index: usize, piece: String },
    /// Call `index` is complete.
    CallEnd { index: usize },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// The first byte decides content or calls.
    #[default]
    Undecided,
    Content,
    Open,
    Name,
    Mid,
    Args,
}

/// Splits a growing [`ToolTurn`] output into [`TurnEvent`]s without parsing JSON:
/// the grammar fixes the wrapper's bytes, a `<` that begins a line of text is the
/// first call's opener, and arguments are compact JSON with no raw newline, so the
/// first `}\n</tool_call>` after them ends a call. Bytes that may be the start of that
/// closer, and whitespace at the end of text (dropped when calls follow), are held
/// back until the next text decides ([`TurnStream::finish`] releases the text's).
#[derive(Clone, Debug, Default)]
pub struct TurnStream {
    buf: String,
    pos: usize,
    phase: Phase,
    calls_done: usize,
    /// No tools: all text is content, sent as it comes.
    content_only: bool,
}

impl TurnStream {
    /// A stream with no tools: all of it is content, whatever its first byte.
    pub fn content_only() -> TurnStream {
        TurnStream {
            phase: Phase::Content,
            content_only: true,
            ..TurnStream::default()
        }
    }

    /// The end of the output: text held back (trailing whitespace of an answer with
    /// no calls) is content after all.
    pub fn finish(&mut self) -> Vec<TurnEvent> {
        if self.phase != Phase::Content || self.pos >= self.buf.len() {
            return Vec::new();
        }
        let rest = self.buf[self.pos..].to_string();
        self.pos = self.buf.len();
        vec![TurnEvent::Content(rest)]
    }

    /// Calls completed so far.
    pub fn calls_done(&self) -> usize {
        self.calls_done
    }

    /// Whether the turn is making calls (false: content, or nothing yet).
    pub fn is_calls(&self) -> bool {
        !matches!(self.phase, Phase::Undecided | Phase::Content)
    }

    /// Takes the next piece of the output (whole UTF-8 text).
    pub fn feed(&mut self, text: &str) -> Vec<TurnEvent> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            let rest = &self.buf[self.pos..];
            match self.phase {
                Phase::Undecided => {
                    let Some(b) = rest.bytes().next() else { break };
                    self.phase = if b == CALL_OPEN[0] {
                        Phase::Open
                    } else {
                        Phase::Content
                    };
                }
                Phase::Content if self.content_only => {
                    if !rest.is_empty() {
                        out.push(TurnEvent::Content(rest.to_string()));
                        self.pos = self.buf.len();
                    }
                    break;
                }
                Phase::Content => {
                    if let Some(k) = rest.find("\n<") {
                        let text = rest[..k].trim_end();
                        if !text.is_empty() {
                            out.push(TurnEvent::Content(text.to_string()));
                        }
                        self.pos += k + 1;
                        self.phase = Phase::Open;
                        continue;
                    }
                    let keep = rest.trim_end().len();
                    if keep > 0 {
                        out.push(TurnEvent::Content(rest[..keep].to_string()));
                        self.pos += keep;
                    }
                    break;
                }
                Phase::Open => {
                    let sep = usize::from(self.calls_done > 0);
                    let need = sep + CALL_OPEN.len();
                    if rest.len() < need {
                        break;
                    }
                    self.pos += need;
                    self.phase = Phase::Name;
                }
                Phase::Name => {
                    let Some(q) = rest.find('"') else { break };
                    out.push(TurnEvent::CallStart {
                        index: self.calls_done,
                        name: rest[..q].to_string(),
                    });
                    self.pos += q;
                    self.phase = Phase::Mid;
                }
                Phase::Mid => {
                    if rest.len() < CALL_MID.len() {
                        break;
                    }
                    self.pos += CALL_MID.len();
                    self.phase = Phase::Args;
                }
                Phase::Args => {
                    let end = std::str::from_utf8(&CALL_CLOSE[1..]).unwrap_or_default();
                    if let Some(k) = rest.find(end) {
                        // `k - 1` is the wrapper's `}`.
                        let args = &rest[..k.saturating_sub(1)];
                        if !args.is_empty() {
                            out.push(TurnEvent::Arguments {
                                index: self.calls_done,
                                piece: args.to_string(),
                            });
                        }
                        out.push(TurnEvent::CallEnd {
                            index: self.calls_done,
                        });
                        self.pos += k + end.len();
                        self.calls_done += 1;
                        self.phase = Phase::Open;
                        continue;
                    }
                    // Hold back the longest end that may begin the closer.
                    let hold = (1..=CALL_CLOSE.len().min(rest.len()))
                        .rev()
                        .find(|&h| rest.as_bytes()[rest.len() - h..] == CALL_CLOSE[..h])
                        .unwrap_or(0);
                    let send = rest.len() - hold;
                    if send > 0 {
                        out.push(TurnEvent::Arguments {
                            index: self.calls_done,
                            piece: rest[..send].to_string(),
                        });
                        self.pos += send;
                    }
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> ToolDef {
        ToolDef {
            name: "get_weather".into(),
            description: Some("Weather in a city.".into()),
            parameters: json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}),
            strict: None,
        }
    }

    #[test]
    fn the_tools_block_is_qwens_own_text() {
        let b = tools_block(&[weather()]);
        assert!(b.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>"), "{b}");
        assert!(b.ends_with("</tool_call>"));
    }

    #[test]
    fn history_renders_calls_and_merges_results() {
        let items = vec![
            Item::Message(ChatMessage::new("user", "Weather in Paris and Rome?")),
            Item::Calls {
                content: String::new(),
                calls: vec![
                    Call {
                        id: "a".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    Call {
                        id: "b".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Rome"}"#.into(),
                    },
                ],
            },
            Item::Result {
                call_id: "a".into(),
                content: "sunny".into(),
            },
            Item::Result {
                call_id: "b".into(),
                content: "rain".into(),
            },
        ];
        let m = render(&items, &[weather()]);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, "system");
        assert!(m[0].content.starts_with(DEFAULT_SYSTEM));
        assert_eq!(
            m[2].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call>"
        );
        assert_eq!(
            m[3].content,
            "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response>"
        );
    }

    #[test]
    fn streamed_pieces_reassemble_the_parsed_turn_at_every_split() {
        let text = format!(
            "{}\n{}",
            call_text("get_weather", r#"{"city":"Pa}ris"}"#),
            call_text("get", "{}")
        );
        let whole = parse_turn(&text);
        assert_eq!(
            whole.calls,
            vec![
                (
                    "get_weather".to_string(),
                    r#"{"city":"Pa}ris"}"#.to_string()
                ),
                ("get".to_string(), "{}".to_string())
            ]
        );
        assert!(!whole.partial && whole.content.is_none());
        // Fed one byte at a time, and in two pieces at every split.
        let mut splits: Vec<Vec<&str>> = vec![text.split_inclusive(|_| true).collect()];
        for i in 1..text.len() {
            splits.push(vec![&text[..i], &text[i..]]);
        }
        for pieces in splits {
            let mut s = TurnStream::default();
            let mut calls: Vec<(String, String)> = Vec::new();
            let mut ends = 0;
            for p in pieces {
                for ev in s.feed(p) {
                    match ev {
                        TurnEvent::CallStart { index, name } => {
                            assert_eq!(index, calls.len());
                            calls.push((name, String::new()));
                        }
                        TurnEvent::Arguments { index, piece } => {
                            assert_eq!(index, calls.len() - 1);
                            calls[index].1.push_str(&piece);
                        }
                        TurnEvent::CallEnd { index } => {
                            assert_eq!(index, ends);
                            ends += 1;
                        }
                        TurnEvent::Content(c) => panic!("content {c:?}"),
                    }
                }
            }
            assert_eq!(calls, whole.calls);
            assert_eq!(ends, 2);
        }
    }

    #[test]
    fn text_before_calls_is_content_streamed_or_not() {
        let text = format!("Here are the calls:\n\n{}", call_text("get", "{}"));
        let whole = parse_turn(&text);
        assert_eq!(whole.content.as_deref(), Some("Here are the calls:"));
        assert_eq!(whole.calls, vec![("get".to_string(), "{}".to_string())]);
        for i in 1..text.len() {
            let mut s = TurnStream::default();
            let mut content = String::new();
            let mut calls = 0;
            for ev in s
                .feed(&text[..i])
                .into_iter()
                .chain(s.feed(&text[i..]))
                .chain(s.finish())
            {
                match ev {
                    TurnEvent::Content(c) => content.push_str(&c),
                    TurnEvent::CallEnd { .. } => calls += 1,
                    _ => {}
                }
            }
            assert_eq!(
                (content.as_str(), calls),
                ("Here are the calls:", 1),
                "split at {i}"
            );
        }
        // Without calls, trailing whitespace is part of the answer.
        let t = parse_turn("Sunny.\n\n");
        assert_eq!(t.content.as_deref(), Some("Sunny.\n\n"));
        let mut s = TurnStream::default();
        let mut c = String::new();
        for ev in s
            .feed("Sunny.\n")
            .into_iter()
            .chain(s.feed("\n"))
            .chain(s.finish())
        {
            if let TurnEvent::Content(x) = ev {
                c.push_str(&x);
            }
        }
        assert_eq!(c, "Sunny.\n\n");
    }

    #[test]
    fn text_is_content_and_a_cut_call_is_partial() {
        let t = parse_turn("It is sunny.");
        assert_eq!(t.content.as_deref(), Some("It is sunny."));
        let cut = call_text("get_weather", r#"{"city":"Paris"}"#);
        let t = parse_turn(&cut[..cut.len() - 3]);
        assert!(t.partial && t.calls.is_empty());
    }

    #[test]
    fn unknown_choice_and_unenforceable_parameters_are_errors() {
        let e = compile_toolbox(
            &[weather()],
            &ToolChoice::Only {
                names: vec!["nope".into()],
                required: true,
            },
            true,
            None,
        )
        .err()
        .unwrap();
        assert!(matches!(e, ToolsError::UnknownChoice(ref n) if n == "nope"));
        let mut bad = weather();
        bad.parameters =
            json!({"type":"object","properties":{"x":{"type":"string","pattern":"(?<=a)b"}}});
        match compile_toolbox(&[weather(), bad], &ToolChoice::Auto, true, None) {
            Err(ToolsError::Parameters {
                index: 1, error, ..
            }) => {
                assert!(
                    format!("{error}").contains("/properties/x/pattern"),
                    "{error}"
                )
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("compiled"),
        }
    }
}
