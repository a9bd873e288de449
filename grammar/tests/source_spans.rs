//! `x-formwork-source`: values quoted from the document. Over random documents (quotes,
//! backslashes, newlines, control characters, multi-byte UTF-8) and schemas using both
//! modes with patterns and lengths:
//! - exactness on a top-level string: the per-document automaton accepts the JSON text of
//!   a candidate exactly when the candidate is a span (`source::is_span`) and valid under
//!   the rest of the schema (jsonschema), candidates being every short substring, word
//!   span and mutated span;
//! - byte walks: every accepted text is a valid instance whose marked values are spans,
//!   and every shortest completion on the way is taken;
//! - masks on a byte vocabulary plus document words equal brute force, also under a
//!   token budget (which steers through the shortest completions);
//! - the plain `compile` treats the keyword as an ordinary string; errors name pointers.

mod matcher_support;

use std::sync::Arc;

use formwork_grammar::compile::{compile, Automaton, CompileError, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::source::{is_span, SourceMode};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use formwork_grammar::ByteAutomaton;
use matcher_support::{byte_vocab_with, SplitRng};
use serde_json::{json, Value};

const PIECES: &[&str] = &[
    "Chez", "Nous", "table", "for", "2", "at", "7pm", "in", "Paris", "café", "日本", "🙂", "\"",
    "\\", "\n", "\t", "\u{1}", ",", ".", " ", " ", " ", "a", "ab", "x_y", "O'Neil", "e\u{301}",
    "\u{7f}", "/",
];

fn random_doc(rng: &mut SplitRng) -> String {
    let n = 3 + rng.below(14);
    (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect()
}

fn mode_of(v: &Value) -> Option<SourceMode> {
    v.get("x-formwork-source")
        .and_then(Value::as_str)
        .and_then(SourceMode::parse)
}

/// The marked string values of `inst` under `schema` (properties, items, `$defs` refs).
fn marked<'a>(root: &Value, schema: &Value, inst: &'a Value, out: &mut Vec<(SourceMode, &'a str)>) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => root
            .pointer(r.trim_start_matches('#'))
            .expect("test refs resolve"),
        None => schema,
    };
    if let (Some(m), Some(s)) = (mode_of(schema), inst.as_str()) {
        out.push((m, s));
    }
    if let (Some(props), Some(o)) = (schema.get("properties"), inst.as_object()) {
        for (k, v) in o {
            if let Some(ps) = props.get(k) {
                marked(root, ps, v, out);
            }
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), inst.as_array()) {
        for v in a {
            marked(root, items, v, out);
        }
    }
}

/// Top-level marked strings: (schema, needs a word boundary).
fn string_schemas() -> Vec<Value> {
    let mut v = Vec::new();
    for mode in ["substring", "words"] {
        v.push(json!({"type": "string", "x-formwork-source": mode}));
        v.push(json!({"type": "string", "x-formwork-source": mode, "maxLength": 3}));
        v.push(
            json!({"type": "string", "x-formwork-source": mode, "minLength": 4, "maxLength": 9}),
        );
        v.push(json!({"type": "string", "x-formwork-source": mode, "pattern": "^[A-Za-z ]+$"}));
        v.push(json!({"type": "string", "x-formwork-source": mode, "pattern": "[0-9]", "minLength": 2}));
        v.push(json!({"type": ["string", "null"], "x-formwork-source": mode, "pattern": "\\S$"}));
    }
    v
}

fn object_schemas() -> Vec<Value> {
    vec![
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "x-formwork-source": "words"},
                "place": {"anyOf": [{"type": "string", "x-formwork-source": "substring", "maxLength": 6}, {"type": "null"}]},
                "n": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string", "x-formwork-source": "words", "pattern": "^[^ ]+$"}, "maxItems": 3}
            },
            "required": ["name", "tags"]
        }),
        json!({
            "$defs": {"Loc": {"type": "object", "properties": {"city": {"type": ["string", "null"], "x-formwork-source": "words", "minLength": 2}}, "required": ["city"]}},
            "type": "object",
            "properties": {
                "loc": {"$ref": "#/$defs/Loc"},
                "free": {"type": "string", "maxLength": 4},
                "q": {"type": "string", "x-formwork-source": "substring", "format": "date"}
            },
            "required": ["loc"]
        }),
    ]
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap()
}

/// Candidate values for a document: every substring of at most 12 characters, the
/// whole document, and spans with one character added or removed.
fn candidates(doc: &str, rng: &mut SplitRng) -> Vec<String> {
    let idx: Vec<usize> = doc
        .char_indices()
        .map(|(i, _)| i)
        .chain([doc.len()])
        .collect();
    let mut out = vec![String::new(), doc.to_string()];
    for a in 0..idx.len() {
        for b in a + 1..idx.len().min(a + 13) {
            out.push(doc[idx[a]..idx[b]].to_string());
        }
    }
    let extra = ["z", "\"", "\\", "\n", " ", "é", "Q"];
    for _ in 0..60 {
        let a = rng.below(idx.len());
        let b = (a + 1 + rng.below(6)).min(idx.len() - 1);
        if a >= b {
            continue;
        }
        let s = &doc[idx[a]..idx[b]];
        let e = extra[rng.below(extra.len())];
        out.push(format!("{s}{e}"));
        out.push(format!("{e}{s}"));
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn top_level_strings_are_exactly_the_spans() {
    let mut rng = SplitRng::new(11);
    let mut checked = 0usize;
    let mut accepted = 0usize;
    for round in 0..40 {
        let doc = random_doc(&mut rng);
        for schema in string_schemas() {
            let mode = mode_of(&schema).unwrap();
            let v = validator(&schema);
            let base = compile(&schema, &Config::default()).unwrap();
            let a = match base.with_source(&doc) {
                Ok(a) => a,
                Err(CompileError::NoSpan { .. }) => {
                    // Then no candidate may be both a span and valid.
                    for c in candidates(&doc, &mut rng) {
                        assert!(
                            !(is_span(&doc, &c, mode) && v.is_valid(&json!(c))),
                            "NoSpan for {schema} on {doc:?}, but {c:?} is a valid span"
                        );
                    }
                    continue;
                }
                Err(e) => panic!("{schema} on {doc:?}: {e}"),
            };
            for c in candidates(&doc, &mut rng) {
                let text = serde_json::to_string(&c).unwrap();
                let want = is_span(&doc, &c, mode) && v.is_valid(&json!(c));
                let got = a.accepts(text.as_bytes());
                assert_eq!(
                    got, want,
                    "round {round} {schema} doc {doc:?}: {text} accepted {got}, expected {want}"
                );
                checked += 1;
                accepted += usize::from(got);
            }
            if schema["type"].is_array() {
                assert!(a.accepts(b"null"));
            }
        }
    }
    assert!(
        accepted > 1000 && checked > 10 * accepted / 2,
        "{accepted} of {checked}"
    );
}

/// One random walk over bytes (like `soundness_bytes`), finishing on the shortest
/// completion; each of its bytes must be taken.
fn walk(a: &Automaton, rng: &mut SplitRng, soft: usize) -> Vec<u8> {
    let mut s = a.start();
    let mut text = Vec::new();
    loop {
        if a.is_accepting(&s) && (rng.below(7) == 0 || text.len() >= soft) {
            return text;
        }
        if text.len() >= soft {
            let c = a.shortest_completion(&s);
            for &b in &c {
                s = a.step(&s, b).unwrap_or_else(|| {
                    panic!(
                        "shortest completion {:?} refused after {:?}",
                        String::from_utf8_lossy(&c),
                        String::from_utf8_lossy(&text)
                    )
                });
                text.push(b);
            }
            assert!(a.is_accepting(&s), "completion does not accept");
            return text;
        }
        let allowed: Vec<u8> = (0..=255u8).filter(|&b| a.step(&s, b).is_some()).collect();
        assert!(
            !allowed.is_empty() || a.is_accepting(&s),
            "dead end after {:?}",
            String::from_utf8_lossy(&text)
        );
        if allowed.is_empty() {
            return text;
        }
        let b = allowed[rng.below(allowed.len())];
        s = a.step(&s, b).unwrap();
        text.push(b);
    }
}

fn check_instance(schema: &Value, v: &jsonschema::Validator, doc: &str, text: &[u8]) {
    let inst: Value = serde_json::from_slice(text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(text)));
    assert!(v.is_valid(&inst), "{schema}: invalid {inst}");
    let mut m = Vec::new();
    marked(schema, schema, &inst, &mut m);
    for (mode, s) in m {
        assert!(
            is_span(doc, s, mode),
            "{inst}: {s:?} is not a {mode:?} span of {doc:?}"
        );
    }
}

#[test]
fn byte_walks_give_valid_instances_of_spans() {
    let mut rng = SplitRng::new(5);
    let mut walks = 0;
    for _ in 0..30 {
        let doc = random_doc(&mut rng);
        for schema in object_schemas().into_iter().chain(string_schemas()) {
            let v = validator(&schema);
            let a = match compile(&schema, &Config::default())
                .unwrap()
                .with_source(&doc)
            {
                Ok(a) => a,
                Err(CompileError::NoSpan { .. }) => continue,
                Err(e) => panic!("{e}"),
            };
            for i in 0..12 {
                let text = walk(&a, &mut rng, [8, 40, 120][i % 3]);
                check_instance(&schema, &v, &doc, &text);
                walks += 1;
            }
        }
    }
    assert!(walks > 2000, "{walks}");
}

fn brute_mask(a: &Automaton, s: &<Automaton as ByteAutomaton>::State, trie: &TokTrie) -> TokenSet {
    let mut out = TokenSet::new(trie.vocab_size());
    for t in 0..trie.vocab_size() as u32 {
        if trie.is_eos(t) {
            if a.is_accepting(s) {
                out.allow(t);
            }
            continue;
        }
        if !trie.is_usable(t) {
            continue;
        }
        let mut st = s.clone();
        if trie.token_bytes(t).iter().all(|&b| match a.step(&st, b) {
            Some(x) => {
                st = x;
                true
            }
            None => false,
        }) {
            out.allow(t);
        }
    }
    out
}

/// Tokens: every byte, the document's pieces with and without a leading space or
/// quote, and their JSON escapes.
fn doc_vocab(doc: &str) -> Arc<TokTrie> {
    let mut words: Vec<Vec<u8>> = Vec::new();
    for p in PIECES {
        let esc = serde_json::to_string(p).unwrap();
        let esc = &esc[1..esc.len() - 1];
        for w in [
            p.to_string(),
            format!(" {p}"),
            format!("\"{p}"),
            esc.to_string(),
            format!("{esc}\""),
        ] {
            words.push(w.into_bytes());
        }
    }
    for w in doc.split(' ') {
        words.push(w.as_bytes().to_vec());
        words.push(format!("{w} ").into_bytes());
    }
    words.extend([
        b"\":\"".to_vec(),
        b"null".to_vec(),
        b"\",\"".to_vec(),
        b"\"]".to_vec(),
    ]);
    byte_vocab_with(words)
}

#[test]
fn masks_equal_brute_force_on_document_vocabularies() {
    let mut rng = SplitRng::new(23);
    let mut steps = 0;
    for round in 0..12 {
        let doc = random_doc(&mut rng);
        let trie = doc_vocab(&doc);
        for schema in object_schemas().into_iter().chain(string_schemas()) {
            let v = validator(&schema);
            let a = match compile(&schema, &Config::default())
                .unwrap()
                .with_source(&doc)
            {
                Ok(a) => a,
                Err(CompileError::NoSpan { .. }) => continue,
                Err(e) => panic!("{e}"),
            };
            let g = Grammar::new(a.clone());
            for w in 0..3 {
                let budget = [6usize, 20, 60][w];
                let mut m = Matcher::new(g.clone(), trie.clone());
                m.set_budget(budget);
                let mut st = a.start();
                let mut mask = TokenSet::new(trie.vocab_size());
                let mut text = Vec::new();
                let eos = trie.eos_ids()[0];
                loop {
                    m.compute_mask(&mut mask);
                    let brute = brute_mask(&a, &st, &trie);
                    if m.is_steering() {
                        assert!(
                            mask.iter().all(|t| brute.contains(t)),
                            "steered mask allows a refused token"
                        );
                    } else {
                        let diff = |x: &TokenSet, y: &TokenSet| -> Vec<String> {
                            x.iter()
                                .filter(|&t| !y.contains(t))
                                .take(5)
                                .map(|t| {
                                    format!("{:?}", String::from_utf8_lossy(trie.token_bytes(t)))
                                })
                                .collect()
                        };
                        assert!(
                            mask == brute,
                            "round {round} {schema} doc {doc:?} after {:?}: only in mask {:?}, only in brute force {:?}",
                            String::from_utf8_lossy(&text),
                            diff(&mask, &brute),
                            diff(&brute, &mask)
                        );
                    }
                    steps += 1;
                    let choices: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
                    if choices.is_empty() || (m.is_accepting() && rng.below(4) == 0) {
                        assert!(
                            mask.contains(eos),
                            "dead end after {:?}",
                            String::from_utf8_lossy(&text)
                        );
                        break;
                    }
                    let t = choices[rng.below(choices.len())];
                    m.commit(t).unwrap();
                    for &b in trie.token_bytes(t) {
                        st = a.step(&st, b).unwrap();
                    }
                    text.extend_from_slice(trie.token_bytes(t));
                }
                check_instance(&schema, &v, &doc, &text);
            }
        }
    }
    assert!(steps > 500, "{steps}");
}

#[test]
fn without_a_document_the_keyword_is_an_ordinary_string() {
    let s = json!({"type": "string", "x-formwork-source": "words", "maxLength": 5});
    let a = compile(&s, &Config::default()).unwrap();
    assert!(a.uses_source());
    assert!(a.accepts(br#""zzz""#) && !a.accepts(br#""zzzzzz""#));
    assert!(
        a.explain()
            .contains("source: Words at \"/x-formwork-source\""),
        "{}",
        a.explain()
    );
    let d = a.with_source("a zzz b").unwrap();
    assert!(d.accepts(br#""zzz""#) && !d.accepts(br#""zz""#) && !d.accepts(br#""q""#));
    let plain = compile(&json!({"type": "string"}), &Config::default()).unwrap();
    assert!(!plain.uses_source());
    assert!(Arc::ptr_eq(&plain.with_source("doc").unwrap(), &plain));
}

#[test]
fn errors_name_the_pointer() {
    let cfg = Config::default();
    let bad = json!({"properties": {"a": {"type": "string", "x-formwork-source": "lines"}}});
    let e = compile(&bad, &cfg).err().unwrap().to_string();
    assert!(
        e.contains("/properties/a/x-formwork-source") && e.contains("lines"),
        "{e}"
    );
    let en = json!({"properties": {"a": {"enum": ["x", "y"], "x-formwork-source": "substring"}}});
    let e = compile(&en, &cfg).err().unwrap().to_string();
    assert!(
        e.contains("/properties/a/x-formwork-source") && e.contains("enum"),
        "{e}"
    );
    let req = json!({
        "type": "object",
        "properties": {"n": {"type": "string", "pattern": "^[0-9]+$", "x-formwork-source": "words"}},
        "required": ["n"]
    });
    let a = compile(&req, &cfg).unwrap();
    match a.with_source("no digits here") {
        Err(e @ CompileError::NoSpan { .. }) => {
            assert!(
                e.to_string().contains("/properties/n/x-formwork-source"),
                "{e}"
            )
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(a
        .with_source("call 911 now")
        .unwrap()
        .accepts(br#"{"n":"911"}"#));
    // Nullable: only null is left.
    let opt =
        json!({"type": ["string", "null"], "pattern": "^[0-9]+$", "x-formwork-source": "words"});
    let a = compile(&opt, &cfg)
        .unwrap()
        .with_source("no digits")
        .unwrap();
    assert!(a.accepts(b"null") && !a.accepts(br#""no""#));
    // A document too large for the span automaton's limit.
    let small = Config {
        limits: formwork_grammar::compile::Limits {
            source_states: 100,
            ..Default::default()
        },
        ..Config::default()
    };
    let a = compile(
        &json!({"type": "string", "x-formwork-source": "substring"}),
        &small,
    )
    .unwrap();
    let e = a.with_source(&"ab".repeat(60)).err().unwrap().to_string();
    assert!(
        e.contains("source automaton states") && e.contains("/x-formwork-source"),
        "{e}"
    );
}
