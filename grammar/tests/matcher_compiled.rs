//! The matcher on compiled schemas: at every step the mask equals a brute-force check of
//! every token (which also checks the compiler's plain-character hint), and random token
//! walks under a budget end in texts the jsonschema validator accepts.
//!
//! Corpus: the fixture schemas in `tests/data/fixtures` and a deterministic sample of the
//! JSONSchemaBench schemas under `$FORMWORK_SHARED/data/jsonschemabench` (default
//! `../shared` next to the repository; skipped with a message when absent).
//! `FORMWORK_MATCHER_SCHEMAS` sets the sample size (default 40). With the cached GGUF
//! models present, token walks run on the SmolLM2, Gemma 3 and Qwen2.5-Coder vocabularies over
//! the fixtures and 200 bench schemas ([`token_walks_on_real_vocabularies_are_valid`]).

mod matcher_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use formwork_grammar::compile::{compile, Automaton, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use formwork_grammar::ByteAutomaton;
use matcher_support::*;
use serde_json::Value;

fn shared() -> PathBuf {
    std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
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

/// A random walk under `budget` tokens; checks every mask against brute force (while
/// no budget steering is active) and returns the text.
fn walk(
    a: &Arc<Automaton>,
    g: &Arc<Grammar>,
    trie: &Arc<TokTrie>,
    seed: u64,
    budget: usize,
    name: &str,
) -> Vec<u8> {
    let mut m = Matcher::new(g.clone(), trie.clone());
    m.set_budget(budget);
    let mut rng = SplitRng::new(seed);
    let mut st = a.start();
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut text = Vec::new();
    let eos = trie.eos_ids()[0];
    for step in 0..=budget {
        m.compute_mask(&mut mask);
        if !m.is_steering() {
            let brute = brute_mask(a, &st, trie);
            if mask != brute {
                let only_m: Vec<String> = mask
                    .iter()
                    .filter(|&t| !brute.contains(t))
                    .take(5)
                    .map(|t| format!("{:?}", String::from_utf8_lossy(trie.token_bytes(t))))
                    .collect();
                let only_b: Vec<String> = brute
                    .iter()
                    .filter(|&t| !mask.contains(t))
                    .take(5)
                    .map(|t| format!("{:?}", String::from_utf8_lossy(trie.token_bytes(t))))
                    .collect();
                panic!(
                    "{name} seed {seed} step {step} after {:?}: only in mask {only_m:?}, only in brute force {only_b:?}",
                    String::from_utf8_lossy(&text)
                );
            }
        } else {
            // Steering only removes tokens.
            let brute = brute_mask(a, &st, trie);
            assert!(
                mask.iter().all(|t| brute.contains(t)),
                "{name}: steered mask allows a refused token"
            );
        }
        let choices: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
        if choices.is_empty() || (m.is_accepting() && rng.below(5) == 0) {
            assert!(
                mask.contains(eos),
                "{name} seed {seed}: dead end after {:?}",
                String::from_utf8_lossy(&text)
            );
            m.commit(eos).unwrap();
            return text;
        }
        let t = choices[rng.below(choices.len())];
        m.commit(t).unwrap();
        for &b in trie.token_bytes(t) {
            st = a.step(&st, b).unwrap();
        }
        text.extend_from_slice(trie.token_bytes(t));
    }
    panic!(
        "{name} seed {seed}: budget {budget} exceeded, text {:?}",
        String::from_utf8_lossy(&text)
    );
}

fn corpus() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        out.push((f.file_name().unwrap().to_string_lossy().into_owned(), v));
    }
    let n: usize = std::env::var("FORMWORK_MATCHER_SCHEMAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let root = shared().join("data/jsonschemabench");
    let mut bench = Vec::new();
    if let Ok(dirs) = std::fs::read_dir(&root) {
        for d in dirs.flatten() {
            if let Ok(fs) = std::fs::read_dir(d.path()) {
                bench.extend(
                    fs.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "json")),
                );
            }
        }
    }
    if bench.is_empty() {
        matcher_support::skip::skipped(format_args!("SKIPPED (bench part): no schemas under {root:?}; set FORMWORK_SHARED to a folder holding data/jsonschemabench"));
    }
    bench.sort();
    let step = (bench.len() / n.max(1)).max(1);
    for p in bench.iter().step_by(step).take(n) {
        if let Ok(v) =
            serde_json::from_str::<Value>(&std::fs::read_to_string(p).unwrap_or_default())
        {
            out.push((p.strip_prefix(&root).unwrap_or(p).display().to_string(), v));
        }
    }
    out
}

fn validate(schema: &Value, text: &[u8], name: &str) {
    let Ok(v) = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
    else {
        return;
    };
    let inst: Value = serde_json::from_slice(text).unwrap_or_else(|e| {
        panic!(
            "{name}: matcher produced non-JSON {:?}: {e}",
            String::from_utf8_lossy(text)
        )
    });
    if let Err(e) = v.validate(&inst) {
        panic!(
            "{name}: matcher produced an invalid instance {:?}: {e}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn compiled_schemas_masks_exact_and_walks_valid() {
    let vocabs = [synthetic_vocab(11, 4000), byte_vocab()];
    let mut checked = 0;
    for (name, schema) in corpus() {
        let Ok(a) = compile(&schema, &Config::default()) else {
            continue;
        };
        let g = Grammar::new(a.clone());
        let min = a.shortest_completion(&a.start()).len();
        for trie in &vocabs {
            for seed in 0..3u64 {
                // Bytes bound tokens: a budget of min + 40 always suffices.
                let text = walk(&a, &g, trie, seed, min + 40, &name);
                validate(&schema, &text, &name);
            }
        }
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} schemas compiled");
    eprintln!("{checked} compiled schemas checked");
}

#[test]
fn compiled_schemas_on_real_vocabularies() {
    let models = model_paths_noting_absent();
    let schemas: Vec<(String, Value)> = corpus().into_iter().take(3).collect();
    for (mname, path) in models {
        let (bytes, special, eos) = gguf_vocab(&path).expect("GGUF vocabulary");
        let trie = Arc::new(TokTrie::new(bytes, &special, &eos));
        for (name, schema) in &schemas {
            let Ok(a) = compile(schema, &Config::default()) else {
                continue;
            };
            let g = Grammar::new(a.clone());
            let min = a.shortest_completion(&a.start()).len();
            let text = walk(&a, &g, &trie, 1, min + 8, &format!("{mname}/{name}"));
            validate(schema, &text, name);
        }
    }
}

/// FNV-1a: a fixed order that mixes the JSONSchemaBench subsets.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The fixtures and the first `n` JSONSchemaBench schemas in hash order.
fn token_corpus(n: usize) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = corpus()
        .into_iter()
        .filter(|(name, _)| !name.contains('/'))
        .collect();
    let root = shared().join("data/jsonschemabench");
    let mut bench: Vec<(u64, String, PathBuf)> = Vec::new();
    for d in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            let p = f.path();
            if p.extension().is_some_and(|x| x == "json") {
                let name = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
                bench.push((fnv(&name), name, p));
            }
        }
    }
    bench.sort();
    for (_, name, p) in bench.into_iter().take(n) {
        if let Ok(v) = serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_default()) {
            out.push((name, v));
        }
    }
    out
}

/// One random token walk through `Matcher::compute_mask`/`commit` under a budget. Each step
/// checks the chosen token and a few random others against the byte automaton (a full
/// brute-force mask over 262k Gemma tokens per step is too slow here); the text is returned
/// for the validator.
fn token_walk(
    a: &Arc<Automaton>,
    g: &Arc<Grammar>,
    trie: &Arc<TokTrie>,
    seed: u64,
    budget: usize,
) -> Result<Vec<u8>, String> {
    let mut m = Matcher::new(g.clone(), trie.clone());
    m.set_budget(budget);
    let mut rng = SplitRng::new(seed);
    let mut st = a.start();
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut text = Vec::new();
    let eos = trie.eos_ids()[0];
    let takes = |st: &<Automaton as ByteAutomaton>::State, t: u32| {
        let mut s = st.clone();
        trie.token_bytes(t).iter().all(|&b| match a.step(&s, b) {
            Some(x) => {
                s = x;
                true
            }
            None => false,
        })
    };
    for _ in 0..=budget {
        m.compute_mask(&mut mask);
        let choices: Vec<u32> = mask.iter().filter(|&t| !trie.is_eos(t)).collect();
        // Spot checks: an allowed token is taken by the automaton; without steering, a
        // refused usable token is refused by it too.
        for _ in 0..8 {
            let t = rng.below(trie.vocab_size()) as u32;
            if trie.is_eos(t) || !trie.is_usable(t) {
                continue;
            }
            let (allowed, ok) = (mask.contains(t), takes(&st, t));
            if (allowed && !ok) || (!allowed && ok && !m.is_steering()) {
                return Err(format!(
                    "mask says {allowed} for token {:?}, the automaton {ok}, after {:?}",
                    String::from_utf8_lossy(trie.token_bytes(t)),
                    String::from_utf8_lossy(&text)
                ));
            }
        }
        if choices.is_empty() || (m.is_accepting() && rng.below(5) == 0) {
            if !mask.contains(eos) || !a.is_accepting(&st) {
                return Err(format!(
                    "dead end (EOS allowed: {}) after {:?}",
                    mask.contains(eos),
                    String::from_utf8_lossy(&text)
                ));
            }
            m.commit(eos).map_err(|e| format!("EOS refused: {e:?}"))?;
            return Ok(text);
        }
        let t = choices[rng.below(choices.len())];
        if !takes(&st, t) {
            return Err(format!(
                "mask allowed {:?}, which the automaton refuses after {:?}",
                String::from_utf8_lossy(trie.token_bytes(t)),
                String::from_utf8_lossy(&text)
            ));
        }
        m.commit(t).map_err(|e| format!("commit refused: {e:?}"))?;
        for &b in trie.token_bytes(t) {
            st = a.step(&st, b).expect("checked above");
        }
        text.extend_from_slice(trie.token_bytes(t));
    }
    Err(format!(
        "budget {budget} exceeded after {:?}",
        String::from_utf8_lossy(&text)
    ))
}

/// Token-level soundness on the real SmolLM2, Gemma 3 and Qwen2.5-Coder vocabularies: random
/// walks through the allowed tokens, over the fixtures and the first 200 JSONSchemaBench schemas
/// of a fixed order (`FORMWORK_TOKEN_SCHEMAS`), 3 walks each on SmolLM2 and 1 on Gemma 3 and
/// Qwen (`FORMWORK_TOKEN_WALKS` sets all); every text the matcher ends must satisfy the
/// jsonschema validator. Skipped, with a message, for each absent GGUF file; the bench part is
/// skipped without the shared data.
#[test]
fn token_walks_on_real_vocabularies_are_valid() {
    use rayon::prelude::*;

    let models = model_paths_noting_absent();
    let n: usize = std::env::var("FORMWORK_TOKEN_SCHEMAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let walks_env: Option<u64> = std::env::var("FORMWORK_TOKEN_WALKS")
        .ok()
        .and_then(|v| v.parse().ok());
    let schemas = token_corpus(n);
    let compiled: Vec<(
        &str,
        &Value,
        Arc<Automaton>,
        Arc<Grammar>,
        jsonschema::Validator,
    )> = schemas
        .par_iter()
        .filter_map(|(name, s)| {
            let v = jsonschema::options()
                .should_validate_formats(true)
                .build(s)
                .ok()?;
            let a = compile(s, &Config::default()).ok()?;
            let g = Grammar::new(a.clone());
            Some((name.as_str(), s, a, g, v))
        })
        .collect();
    for (mname, path) in models {
        // Gemma's 262k tokens make each steered step about 15 times dearer, Qwen's 152k
        // several times.
        let walks = walks_env.unwrap_or(if mname == "smollm2" { 3 } else { 1 });
        let t0 = std::time::Instant::now();
        let (bytes, special, eos) = gguf_vocab(&path).expect("GGUF vocabulary");
        let trie = &Arc::new(TokTrie::new(bytes, &special, &eos));
        let failures: Vec<String> = compiled
            .par_iter()
            .enumerate()
            .flat_map_iter(|(i, (name, _, a, g, v))| {
                let min = a.shortest_completion(&a.start()).len();
                (0..walks).filter_map(move |w| {
                    let seed = (i as u64) * 16 + w;
                    let r = token_walk(a, g, trie, seed, min + 24).and_then(|text| {
                        let inst: Value = serde_json::from_slice(&text).map_err(|e| {
                            format!("not JSON ({e}): {:?}", String::from_utf8_lossy(&text))
                        })?;
                        match v.validate(&inst) {
                            Ok(()) => Ok(()),
                            Err(e) => Err(format!(
                                "invalid ({e}): {:?}",
                                String::from_utf8_lossy(&text)
                            )),
                        }
                    });
                    r.err().map(|e| format!("{mname}/{name} seed {seed}: {e}"))
                })
            })
            .collect();
        eprintln!(
            "{mname}: {} schemas compiled of {}, {} walks each, {} failures, {:.1} s",
            compiled.len(),
            schemas.len(),
            walks,
            failures.len(),
            t0.elapsed().as_secs_f64()
        );
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    if n >= 200 && shared().join("data/jsonschemabench").is_dir() {
        assert!(
            compiled.len() >= 180,
            "only {} schemas compiled",
            compiled.len()
        );
    }
}

/// A vocabulary for string bodies under patterns: every byte, and random short words
/// over an alphabet where a pattern can refuse a plain character (space, U+2028 for
/// ECMA's `.`, a non-ASCII letter) next to the bytes that close or continue a string.
fn pattern_vocab(seed: u64, words: usize) -> Arc<TokTrie> {
    let alphabet = [
        "a", "b", "z", " ", "\u{2028}", "\u{e9}", "\u{3000}", "1", "-", ":", "T", "Z", ".", "\"",
        ",", "\\",
    ];
    let mut rng = SplitRng::new(seed);
    let random: Vec<Vec<u8>> = (0..words)
        .map(|_| {
            let len = 1 + rng.below(7);
            (0..len)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect::<String>()
                .into_bytes()
        })
        .collect();
    let fixed = [
        "2024-02-29T",
        "12:30:00Z",
        "\",\"",
        "\":\"",
        "aaaa bbbb",
        "a b c d e f",
    ];
    byte_vocab_with(
        random
            .into_iter()
            .chain(fixed.map(|w| w.as_bytes().to_vec())),
    )
}

/// Strings whose pattern refuses some plain characters (`\S`, ECMA's `.`, a word count
/// under length bounds, a format) take their plain tokens from sets cached per DFA
/// state (`ByteAutomaton::plain_key`) and shared across fields, array items and
/// lengths. Every mask on the walks still equals brute force, and the shared sets are
/// really used.
#[test]
fn keyed_plain_token_sets_are_exact() {
    let words = r"^(?:\S+\s+){0,3}\S+$";
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"type": "string", "pattern": r"^\S+$"},
            "b": {"type": "string", "pattern": r"^\S+$", "maxLength": 9},
            "c": {"type": "string", "pattern": "^(.*)$"},
            "d": {"type": "string", "pattern": words, "minLength": 3, "maxLength": 14},
            "e": {"type": "array", "maxItems": 3,
                  "items": {"type": "string", "pattern": words, "minLength": 3, "maxLength": 14}},
            "f": {"type": "string", "format": "date-time"},
            "g": {"type": "string", "pattern": "^[a-z]+( [a-z]+)*$", "minLength": 2, "maxLength": 40},
            "h": {"type": "string", "pattern": "^(.*)$", "minLength": 4},
            "i": {"type": "string", "pattern": r"^\S+( \S+)?$", "minLength": 12, "maxLength": 30}
        },
        "required": ["a", "b", "c", "d", "e", "f", "g", "h", "i"],
        "additionalProperties": false
    });
    let a = compile(&schema, &Config::default()).unwrap();
    let min = a.shortest_completion(&a.start()).len();
    for vseed in 0..2u64 {
        let trie = pattern_vocab(vseed, 3000);
        let g = Grammar::new(a.clone());
        for seed in 0..6u64 {
            let text = walk(&a, &g, &trie, seed, min + 120, "keyed");
            validate(&schema, &text, "keyed");
        }
        let st = g.stats();
        assert!(
            st.keyed_sets >= 4 && st.keyed_hits >= 10,
            "the keyed path was hardly used: {st:?}"
        );
    }
}
