//! Fuzz targets over the root crate: the validator and the tolerant extractor on
//! arbitrary text, and one JSONL batch line. Bad input must give a verdict or a one-line
//! error, never a panic.
//!
//! Meant to be included by path from a root-crate smoke test, like `grammar_targets.rs`,
//! so it only uses what the root crate's tests have.

use std::collections::HashSet;
use std::sync::OnceLock;

use formwork::batch::{parse_line, plan, Item};
use formwork::validate::{extract_json, Validator};
use serde_json::Value;

/// A few schemas that exercise the validator's paths (types, formats, rules, nesting).
fn validators() -> &'static [(Value, Validator)] {
    static V: OnceLock<Vec<(Value, Validator)>> = OnceLock::new();
    V.get_or_init(|| {
        [
            r#"{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}"#,
            r#"{"type":"array","items":{"type":["number","null"],"multipleOf":0.5},"maxItems":4}"#,
            r#"{"type":"object","properties":{"when":{"type":"string","format":"date"},"mail":{"type":"string","format":"email"}}}"#,
            r#"{"oneOf":[{"const":1},{"type":"string","pattern":"^[a-z]+$"}]}"#,
            r#"{"type":"number","minimum":1e400,"maximum":1e401}"#,
        ]
        .iter()
        .map(|s| {
            let schema: Value = serde_json::from_str(s).expect("JSON");
            let v = Validator::new(&schema).expect("a valid schema");
            (schema, v)
        })
        .collect()
    })
}

/// Target `validate`: the tolerant extractor, then each validator (strict and tolerant)
/// on the text. The extracted value is a bracketed span of the text, and a JSON text is
/// extracted as JSON; a text the strict check finds valid must parse as JSON.
pub fn validate(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(x) = extract_json(text) {
        assert!(
            text.contains(x.value_text.as_str()),
            "the extracted value is not a span of the text"
        );
        // A balanced span; when none parses, the first balanced one is returned so the
        // caller reports its parse error (src/validate/extract.rs), so it need not parse.
        let t = x.value_text.as_bytes();
        assert!(
            matches!(
                (t.first(), t.last()),
                (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']'))
            ),
            "the extracted value is not a bracketed span: {:?}",
            x.value_text
        );
        // A text that is itself a JSON object or array is extracted whole, and parses.
        if let Ok(Value::Object(_) | Value::Array(_)) = serde_json::from_str::<Value>(text.trim()) {
            serde_json::from_str::<Value>(&x.value_text).unwrap_or_else(|e| {
                panic!(
                    "a JSON text extracted as non-JSON ({e}): {:?}",
                    x.value_text
                )
            });
        }
    }
    for (schema, v) in validators() {
        let strict = v.check(text);
        let _ = strict.to_json();
        for e in strict.errors() {
            let _ = e.loc_string();
        }
        if strict.is_valid() {
            serde_json::from_str::<Value>(text.trim())
                .unwrap_or_else(|e| panic!("valid for {schema} but not JSON ({e}): {text:?}"));
        }
        let (tolerant, _) = v.check_tolerant(text);
        let _ = tolerant.to_json();
        if strict.is_valid() {
            assert!(
                tolerant.is_valid(),
                "strict valid, tolerant not: {text:?} for {schema}"
            );
        }
    }
}

/// Target `batch_line`: one input line, as the batch reads it. A record needs an id
/// (string or number) and a text; anything else is a one-line error under `line:N`; the
/// same line twice is a record and a `duplicate id` error.
pub fn batch_line(data: &[u8]) {
    match parse_line(data, 7) {
        Ok((id, _text)) => {
            assert!(id.is_string() || id.is_number(), "id {id}");
            assert!(std::str::from_utf8(data).is_ok());
        }
        Err((_, msg)) => {
            assert!(msg.starts_with("input line 7: "), "{msg}");
            assert!(!msg.contains('\n'), "a multi-line error: {msg:?}");
        }
    }
    let items = plan(&[data.to_vec(), data.to_vec()], &HashSet::new());
    let blank = data.iter().all(u8::is_ascii_whitespace);
    assert_eq!(items.len(), if blank { 0 } else { 2 }, "{items:?}");
    if let [first, second] = items.as_slice() {
        let dup = matches!(
            second,
            Item::Error {
                duplicate: true,
                ..
            }
        );
        // A line with an id of its own is a duplicate the second time; a line without
        // one is known by its line number, a different one each time.
        match first {
            Item::Record { .. } => assert!(dup, "{items:?}"),
            Item::Error { from_line, id, .. } => {
                assert_eq!(dup, !from_line, "{items:?}");
                if *from_line {
                    assert_eq!(id, &formwork::batch::line_id(1), "{items:?}");
                }
            }
            Item::Done => panic!("nothing is done in an empty output"),
        }
    }
}

/// Target `serve_request`: a request body as `POST /v1/chat/completions` and
/// `POST /v1/responses` read it, then what the server does next with a
/// `json_schema` format: read it as a schema and compile its grammar. Bad input is a
/// 400 with a one-line message, no control character in it (naming its parameter when
/// it has one), never a panic nor another status; a compile error is the same 400 the
/// server sends.
pub fn serve_request(data: &[u8]) {
    use formwork::serve::request::{chat, responses, Format};
    use formwork::serve::schemas::compile_error;
    for parsed in [chat(data), responses(data)] {
        let req = match parsed {
            Ok(req) => req,
            Err(e) => {
                assert_eq!(e.status.as_u16(), 400, "{}", e.message);
                assert!(
                    !e.message.is_empty() && !e.message.chars().any(char::is_control),
                    "{:?}",
                    e.message
                );
                assert!(
                    e.param.as_deref() != Some(""),
                    "an empty param: {}",
                    e.message
                );
                let _ = e.body();
                continue;
            }
        };
        assert!(
            !req.messages.is_empty(),
            "a request without messages was taken"
        );
        assert!(serde_json::from_slice::<Value>(data).is_ok_and(|v| v.is_object()));
        // Tools: every name is unique, a named choice names one of them, and the
        // turn's grammar compiles or its error is a one-line 400.
        let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "tool {n} taken twice");
        }
        if let formwork::engine::tools::ToolChoice::Only { names: chosen, .. } = &req.tool_choice {
            assert!(
                chosen.iter().all(|c| names.contains(&c.as_str())),
                "{chosen:?}"
            );
        }
        if !req.tools.is_empty() {
            match formwork::engine::tools::compile_toolbox(
                &req.tools,
                &req.tool_choice,
                req.parallel_tool_calls,
                None,
            ) {
                Ok(t) => {
                    // The turn's shortest text is one the grammar takes.
                    let m = formwork_grammar::Matcher::new(
                        t.grammar.clone(),
                        std::sync::Arc::new(formwork_grammar::TokTrie::new(
                            (0u8..=255).map(|b| vec![b]).collect(),
                            &[],
                            &[],
                        )),
                    );
                    let mut m2 = m.clone();
                    let text = m.shortest_completion();
                    assert!(m2.commit_bytes(&text).is_ok() && m2.is_accepting());
                }
                Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
            }
        }
        if let Format::Schema { name, schema } = req.format {
            let Ok(mut s) = formwork::engine::Schema::new(schema) else {
                continue;
            };
            if let Err(e) = s.grammar() {
                let e = compile_error(&name, e);
                assert_eq!(e.status.as_u16(), 400, "{}", e.message);
                assert!(!e.message.chars().any(char::is_control), "{:?}", e.message);
            }
        }
    }
}

/// Target `serve_request_structured`: bytes choosing edits to a valid request body
/// (replace a value anywhere with one of another type or range, add a known
/// parameter), so that the type and range checks behind the JSON parse are reached,
/// then [`serve_request`] on the result.
pub fn serve_request_structured(data: &[u8]) {
    const BASES: [&str; 5] = [
        r#"{"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"P\"}"}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"sunny"}]}],"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":9}},"required":["city"]},"strict":true}},{"type":"function","function":{"name":"get_time"}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false}"#,
        r#"{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"n":{"enum":[1,2]}}}}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"f"}]},"stream":true}"#,
        r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"response_format":{"type":"json_schema","json_schema":{"name":"P","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer","minimum":0}},"required":["a"]}}},"max_completion_tokens":64,"temperature":0.5,"top_p":0.9,"seed":1,"stream":true,"stream_options":{"include_usage":true}}"#,
        r#"{"model":"m","instructions":"i","input":[{"type":"message","role":"user","content":"x"}],"text":{"format":{"type":"json_schema","name":"F","schema":{"type":"array","items":{"enum":[1,"a",null]},"maxItems":3}}},"max_output_tokens":16}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"max_tokens":8}"#,
    ];
    const VALUES: [&str; 25] = [
        "\"required\"",
        "\"tool\"",
        "\"{\\\"a\\\":\"",
        "[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]",
        "{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}",
        "{\"type\":\"object\",\"properties\":{\"x\":{\"pattern\":\"(?<=a)\"}}}",
        "null",
        "true",
        "0",
        "-1",
        "1.5",
        "1e400",
        "18446744073709551616",
        "\"\"",
        "\"json_schema\"",
        "[]",
        "{}",
        "[{\"role\":\"user\",\"content\":\"x\"}]",
        "{\"type\":\"json_schema\"}",
        "{\"type\":\"text\",\"text\":\"t\"}",
        "\"user\"",
        "{\"$ref\":\"#/x\"}",
        "\"high\"",
        "\"huge\"",
        "{\"effort\":\"low\"}",
    ];
    const KEYS: [&str; 22] = [
        "tool_choice",
        "parallel_tool_calls",
        "tool_calls",
        "tool_call_id",
        "arguments",
        "parameters",
        "model",
        "messages",
        "input",
        "response_format",
        "text",
        "json_schema",
        "schema",
        "type",
        "n",
        "tools",
        "stop",
        "max_tokens",
        "reasoning_effort",
        "formwork_think_budget",
        "formwork_grounded",
        "reasoning",
    ];
    let mut bytes = data.iter().map(|&b| b as usize);
    let mut next = move || bytes.next().unwrap_or(0);
    let mut body: Value = serde_json::from_str(BASES[next() % BASES.len()]).expect("JSON");
    for _ in 0..1 + next() % 4 {
        // Walk down while the bytes say so (a JSON Pointer), then edit there.
        let mut pointer = String::new();
        let mut at = &body;
        loop {
            let go = next() % 4 != 0;
            let (step, child) = match at {
                Value::Object(m) if go && !m.is_empty() => {
                    let (k, v) = m.iter().nth(next() % m.len()).expect("in range");
                    (k.replace('~', "~0").replace('/', "~1"), v)
                }
                Value::Array(a) if go && !a.is_empty() => {
                    let i = next() % a.len();
                    (i.to_string(), &a[i])
                }
                _ => break,
            };
            pointer = format!("{pointer}/{step}");
            at = child;
        }
        let value: Value = serde_json::from_str(VALUES[next() % VALUES.len()]).expect("JSON");
        let key = KEYS[next() % KEYS.len()];
        let insert = next() % 2 == 0;
        match body.pointer_mut(&pointer).expect("the walked pointer") {
            Value::Object(m) if insert => {
                m.insert(key.to_string(), value);
            }
            at => *at = value,
        }
    }
    serve_request(&serde_json::to_vec(&body).expect("serialises"));
}
