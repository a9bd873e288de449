//! Fuzz targets over the grammar crate alone. Each returns quietly on input it cannot
//! use and panics on a broken promise: a panic inside the library on any schema, an
//! accepted text the validator rejects (the oracle of `soundness_bytes`), a byte the
//! automaton promised and then refused, or `compute_mask`, `is_allowed` and `commit`
//! disagreeing about a token.
//!
//! Included by path from `grammar/tests/fuzz_smoke.rs`, so it only uses what that test
//! crate has: `formwork_grammar`, `serde_json`, `jsonschema`.

use std::sync::{Arc, OnceLock};

use formwork_grammar::compile::{compile as compile_schema, Automaton, Config, Limits};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use formwork_grammar::ByteAutomaton;
use serde_json::{json, Map, Value};

/// The input bytes as a stream of choices; zeros once spent.
pub struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Choices { data, pos: 0 }
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    /// In `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        let x = u16::from(self.byte()) << 8 | u16::from(self.byte());
        usize::from(x) % n
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A tight compile step budget (a twentieth of the default: about 0.2 to 0.5 s of the
/// slowest passes in a release build), so a slow schema is a quick error, not a fuzzer
/// timeout, and the same input stops at the same place on every run.
fn config() -> Config {
    Config {
        limits: Limits {
            steps: 10_000_000,
            ..Limits::default()
        },
        ..Config::default()
    }
}

fn validator(schema: &Value) -> Option<jsonschema::Validator> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .ok()
}

/// A text the automaton accepts: bytes picked by `c` among those it allows, then the
/// shortest completion. Panics when the automaton refuses a byte it allowed.
fn walk(a: &Automaton, c: &mut Choices, max: usize) -> Vec<u8> {
    let mut s = a.start();
    let mut text = Vec::new();
    while text.len() < max && !c.done() {
        if a.is_accepting(&s) && c.below(6) == 0 {
            return text;
        }
        let set = a
            .allowed_bytes(&s)
            .expect("the compiled automaton gives allowed bytes");
        let allowed: Vec<u8> = (0..=255u8)
            .filter(|&b| set[usize::from(b >> 6)] >> (b & 63) & 1 == 1)
            .collect();
        if allowed.is_empty() {
            assert!(a.is_accepting(&s), "a dead end after {:?}", lossy(&text));
            return text;
        }
        let b = allowed[c.below(allowed.len())];
        s = a
            .step(&s, b)
            .unwrap_or_else(|| panic!("allowed byte {b:#x} refused after {:?}", lossy(&text)));
        text.push(b);
    }
    let tail = a.shortest_completion(&s);
    for &b in &tail {
        s = a.step(&s, b).unwrap_or_else(|| {
            panic!(
                "shortest completion {:?} refused after {:?}",
                lossy(&tail),
                lossy(&text)
            )
        });
        text.push(b);
    }
    assert!(
        a.is_accepting(&s),
        "shortest completion ends short: {:?}",
        lossy(&text)
    );
    text
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn check_valid(schema: &Value, v: &jsonschema::Validator, text: &[u8]) {
    let inst: Value = serde_json::from_slice(text).unwrap_or_else(|e| {
        panic!(
            "accepted text is not JSON ({e}): {:?} for {schema}",
            lossy(text)
        )
    });
    if !v.is_valid(&inst) {
        let why: Vec<String> = v
            .iter_errors(&inst)
            .take(2)
            .map(|e| e.to_string())
            .collect();
        panic!(
            "accepted text {:?} is invalid for {schema}: {}",
            lossy(text),
            why.join("; ")
        );
    }
}

/// Compiles `schema` (strict and lenient: neither may panic, errors must print) and,
/// when it compiles strictly, checks walks of its automaton against the validator.
fn exercise(schema: &Value, c: &mut Choices) {
    let mut lenient = config();
    lenient.lenient = true;
    if let Err(e) = compile_schema(schema, &lenient) {
        assert!(!e.to_string().contains('\n'), "a multi-line error: {e}");
    }
    let a = match compile_schema(schema, &config()) {
        Ok(a) => a,
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "a multi-line error: {e}");
            return;
        }
    };
    let _ = a.explain();
    let Some(v) = validator(schema) else { return };
    for _ in 0..3 {
        let text = walk(&a, c, 96);
        check_valid(schema, &v, &text);
        assert!(a.accepts(&text));
    }
}

/// Target `compile`: arbitrary bytes as a schema document.
pub fn compile(data: &[u8]) {
    let Ok(schema) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    exercise(&schema, &mut Choices::new(data));
}

/// Target `compile_structured`: the bytes choose a schema from a small grammar of
/// nested keywords (see [`gen_schema`]), then the walks.
pub fn compile_structured(data: &[u8]) {
    let mut c = Choices::new(data);
    let schema = gen_schema(&mut c, 4);
    exercise(&schema, &mut c);
}

const KEYS: &[&str] = &["a", "b", "id", "a/b", "~x", "é", ""];
const PATTERNS: &[&str] = &[
    "^[a-z]+$",
    "^\\d{2,4}$",
    "^(ab|cd)*$",
    "^\\S+$",
    "x",
    "^[^\"\\\\]{0,3}$",
    "^(?!no)[a-z]{1,5}$",
    "\\p{L}",
];
const FORMATS: &[&str] = &["date", "email", "uuid", "date-time", "ipv4", "time", "uri"];

fn small(c: &mut Choices) -> i64 {
    c.below(41) as i64 - 20
}

fn literal(c: &mut Choices) -> Value {
    match c.below(7) {
        0 => Value::Null,
        1 => json!(c.below(2) == 0),
        2 => json!(small(c)),
        3 => json!(small(c) as f64 / 4.0),
        4 => json!(KEYS[c.below(KEYS.len())]),
        5 => json!([small(c)]),
        _ => json!({"a": small(c)}),
    }
}

/// A leaf schema: strings, numbers, literals.
fn gen_leaf(c: &mut Choices) -> Value {
    match c.below(10) {
        0 => {
            let lo = c.below(4);
            json!({"type": "string", "minLength": lo, "maxLength": lo + c.below(6)})
        }
        1 => json!({"type": "string", "pattern": PATTERNS[c.below(PATTERNS.len())]}),
        2 => json!({"type": "string", "format": FORMATS[c.below(FORMATS.len())]}),
        3 => {
            let lo = small(c);
            let mut m = Map::new();
            m.insert("type".into(), json!("integer"));
            m.insert("minimum".into(), json!(lo));
            m.insert("maximum".into(), json!(lo + c.below(30) as i64));
            if c.below(2) == 0 {
                m.insert("multipleOf".into(), json!(1 + c.below(7)));
            }
            Value::Object(m)
        }
        4 => json!({"type": "number", "exclusiveMinimum": small(c) as f64 / 8.0,
                    "exclusiveMaximum": 3.0 + small(c).abs() as f64, "multipleOf": 0.25}),
        5 => json!({"type": ["null", "boolean"]}),
        6 => json!({"const": literal(c)}),
        7 => json!({"enum": [literal(c), literal(c), literal(c)]}),
        8 => json!(c.below(4) != 0),
        _ => {
            // Far numbers (`minimum: 1e400`): built from text, as JSON has them.
            let lo = 1 + c.below(8);
            serde_json::from_str(&format!(
                r#"{{"type":"number","minimum":{lo}e400,"maximum":{}e400}}"#,
                lo + c.below(3)
            ))
            .expect("JSON")
        }
    }
}

/// A schema of nested keywords, `depth` levels at most.
pub fn gen_schema(c: &mut Choices, depth: u32) -> Value {
    if depth == 0 || c.done() {
        return gen_leaf(c);
    }
    let d = depth - 1;
    match c.below(14) {
        0 | 1 => {
            let mut props = Map::new();
            let mut required = Vec::new();
            for _ in 0..1 + c.below(3) {
                let k = KEYS[c.below(KEYS.len())];
                props.insert(k.into(), gen_schema(c, d));
                if c.below(2) == 0 {
                    required.push(json!(k));
                }
            }
            let mut m = Map::new();
            m.insert("type".into(), json!("object"));
            m.insert("properties".into(), Value::Object(props));
            m.insert("required".into(), Value::Array(required));
            match c.below(4) {
                0 => {
                    m.insert("additionalProperties".into(), json!(false));
                }
                1 => {
                    m.insert("additionalProperties".into(), gen_leaf(c));
                }
                2 => {
                    m.insert("propertyNames".into(), json!({"maxLength": 2}));
                }
                _ => {}
            }
            Value::Object(m)
        }
        2 => {
            let lo = c.below(3);
            let mut m = Map::new();
            m.insert("type".into(), json!("array"));
            m.insert("items".into(), gen_schema(c, d));
            m.insert("minItems".into(), json!(lo));
            m.insert("maxItems".into(), json!(lo + c.below(4)));
            if c.below(3) == 0 {
                m.insert("uniqueItems".into(), json!(true));
            }
            Value::Object(m)
        }
        3 => {
            json!({"type": "array", "prefixItems": [gen_schema(c, d), gen_leaf(c)], "items": false})
        }
        4 => json!({"anyOf": [gen_schema(c, d), gen_schema(c, d)]}),
        5 => json!({"oneOf": [gen_schema(c, d), gen_schema(c, d)]}),
        6 => json!({"allOf": [gen_schema(c, d), gen_schema(c, d)]}),
        7 => json!({"not": gen_schema(c, d)}),
        8 => json!({"if": gen_leaf(c), "then": gen_schema(c, d), "else": gen_schema(c, d)}),
        9 => json!({"$defs": {"d": gen_schema(c, d)}, "$ref": "#/$defs/d"}),
        10 => {
            // Recursion through a property.
            json!({"$defs": {"t": {"type": "object", "properties": {"next": {"$ref": "#/$defs/t"}, "v": gen_leaf(c)}}},
                   "$ref": "#/$defs/t"})
        }
        11 => {
            json!({"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"],
                     "dependentRequired": {"a": ["b"]}})
        }
        _ => gen_leaf(c),
    }
}

/// Bytes, EOS (`</s>`, special) at 256, then tokens rich in JSON punctuation, escapes,
/// multi-byte and partial UTF-8.
fn vocab() -> Arc<TokTrie> {
    static V: OnceLock<Arc<TokTrie>> = OnceLock::new();
    V.get_or_init(|| {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"</s>".to_vec());
        for t in [
            &b"{\""[..],
            b"\":",
            b"\",\"",
            b"\"}",
            b"\"]",
            b"true",
            b"false",
            b"null",
            b"\\u00",
            b"\\\"",
            b"\xc3\xa9",
            b"\xc3",
            b"\xa9\"",
            b"\"a\"",
            b"[{",
            b"}]",
            b"12",
            b"-0.",
            b"e4",
            b"  ",
            b"\n",
            b"\"id\":",
            b"ab",
            b"cd",
            b"0",
            b"1.",
            b"25",
            b"\"\"",
            b"[]",
            b"{}",
        ] {
            toks.push(t.to_vec());
        }
        let mut special = vec![false; toks.len()];
        special[256] = true;
        Arc::new(TokTrie::new(toks, &special, &[256]))
    })
    .clone()
}

/// Target `matcher`: a generated schema, then tokens chosen by the bytes (mostly among
/// the allowed ones, sometimes any id). The mask, `is_allowed` and `commit` must agree,
/// the text must stay a prefix the automaton takes, and an accepted text (EOS) must be
/// valid.
pub fn matcher(data: &[u8]) {
    let mut c = Choices::new(data);
    let schema = gen_schema(&mut c, 3);
    let Ok(a) = compile_schema(&schema, &config()) else {
        return;
    };
    let Some(v) = validator(&schema) else { return };
    let trie = vocab();
    let mut m = Matcher::new(Grammar::new(a.clone()), trie.clone());
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut text: Vec<u8> = Vec::new();
    for _ in 0..256 {
        if c.done() {
            break;
        }
        m.compute_mask(&mut mask);
        let n = mask.count();
        assert!(n > 0, "an empty mask after {:?} for {schema}", lossy(&text));
        let tok = if c.below(4) == 0 {
            c.below(trie.vocab_size()) as u32
        } else {
            mask.iter().nth(c.below(n)).expect("n tokens")
        };
        let allowed = mask.contains(tok);
        assert_eq!(
            m.is_allowed(tok),
            allowed,
            "is_allowed({tok}) and compute_mask disagree after {:?} for {schema}",
            lossy(&text)
        );
        let was_accepting = m.is_accepting();
        let r = m.commit(tok);
        assert_eq!(
            r.is_ok(),
            allowed,
            "commit({tok}) and compute_mask disagree after {:?} for {schema}",
            lossy(&text)
        );
        if r.is_err() {
            continue;
        }
        if trie.is_eos(tok) {
            assert!(
                was_accepting,
                "EOS allowed before acceptance: {:?}",
                lossy(&text)
            );
            check_valid(&schema, &v, &text);
            return;
        }
        text.extend_from_slice(trie.token_bytes(tok));
        assert_eq!(
            a.accepted_prefix(&text),
            text.len(),
            "the matcher took {:?}, the automaton does not, for {schema}",
            lossy(&text)
        );
    }
    if m.is_accepting() {
        check_valid(&schema, &v, &text);
    }
}
