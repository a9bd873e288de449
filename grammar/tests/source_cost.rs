//! The cost of `x-formwork-source` on the SNIPS schemas with the SmolLM2 vocabulary:
//! per-document build time (`with_source` + `Grammar::new`) and mask time per token on
//! random token walks, against the shared grammar of the same schema (warm across
//! documents, as in a batch). Prints figures; asserts nothing about time.
//!
//! `cargo test -p formwork-grammar --release --test source_cost -- --ignored --nocapture`
//! (needs `$FORMWORK_SHARED/data/extraction` and the cached SmolLM2 GGUF).

mod matcher_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use formwork_grammar::compile::{compile, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use matcher_support::*;
use serde_json::Value;

fn shared() -> PathBuf {
    std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

/// `--source-strings` in short: every `["string", "null"]` without format or pattern.
fn mark(v: &mut Value, mode: &str) {
    match v {
        Value::Object(m) => {
            let t = m
                .get("type")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if t.contains(&"string".into())
                && t.contains(&"null".into())
                && !["enum", "const", "format", "pattern"]
                    .iter()
                    .any(|k| m.contains_key(*k))
            {
                m.insert("x-formwork-source".into(), mode.into());
            }
            for c in m.values_mut() {
                mark(c, mode);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| mark(c, mode)),
        _ => {}
    }
}

/// A random token walk; the time of each mask in ns.
fn walk(g: &Arc<Grammar>, trie: &Arc<TokTrie>, seed: u64, times: &mut Vec<u64>) -> usize {
    let mut m = Matcher::new(g.clone(), trie.clone());
    if std::env::var_os("SOURCE_COST_BUDGET").is_some() {
        m.set_budget(200);
    }
    let mut rng = SplitRng::new(seed);
    let mut mask = TokenSet::new(trie.vocab_size());
    let eos = trie.eos_ids()[0];
    for step in 0..200 {
        let t0 = Instant::now();
        m.compute_mask(&mut mask);
        times.push(t0.elapsed().as_nanos() as u64);
        let choices: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
        if choices.is_empty() || (m.is_accepting() && rng.below(3) == 0) {
            return step;
        }
        // Longer tokens half of the time, as a model would pick words.
        let t = if rng.below(2) == 0 {
            *choices
                .iter()
                .max_by_key(|&&t| (trie.token_bytes(t).len(), t % 7))
                .unwrap()
        } else {
            choices[rng.below(choices.len())]
        };
        m.commit(t).unwrap();
    }
    200
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

#[test]
#[ignore]
fn source_cost_on_snips() {
    let data = shared().join("data/extraction/snips_public.jsonl");
    let Some((_, model)) = model_paths().into_iter().find(|(n, _)| *n == "smollm2") else {
        eprintln!("skipped: no SmolLM2 GGUF");
        return;
    };
    let Ok(text) = std::fs::read_to_string(&data) else {
        eprintln!("skipped: no {}", data.display());
        return;
    };
    let (bytes, special, eos) = gguf_vocab(&model).expect("GGUF vocabulary");
    let trie = Arc::new(TokTrie::new(bytes, &special, &eos));
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for mode in ["substring", "words"] {
        let mut builds = Vec::new();
        let mut first = Vec::new();
        let mut src_times = Vec::new();
        let mut base_times = Vec::new();
        let mut states = Vec::new();
        let mut shared: std::collections::HashMap<String, Arc<Grammar>> = Default::default();
        for (i, r) in recs.iter().enumerate() {
            let doc = r["text"].as_str().unwrap();
            let name = r["schema_name"].as_str().unwrap().to_string();
            let mut s = r["schema"].clone();
            let base = shared
                .entry(name)
                .or_insert_with(|| Grammar::new(compile(&s, &Config::default()).unwrap()))
                .clone();
            mark(&mut s, mode);
            let a = compile(&s, &Config::default()).unwrap();
            assert!(a.uses_source());
            let t0 = Instant::now();
            let d = a.with_source(doc).unwrap();
            let g = Grammar::new(d.clone());
            builds.push(t0.elapsed().as_nanos() as u64);
            states.push(d.stats().dfa_states as u64);
            let mut t = Vec::new();
            walk(&g, &trie, i as u64, &mut t);
            first.push(t[0]);
            src_times.extend(t);
            walk(&base, &trie, i as u64, &mut base_times);
        }
        let n = builds.len();
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64 / 1000.0;
        println!(
            "{mode}: {n} documents; build (with_source + Grammar::new) mean {:.0} us, p50 {:.0}, max {:.0}; DFA states mean {:.0}",
            mean(&builds),
            pct(&mut builds, 0.5),
            pct(&mut builds, 1.0),
            states.iter().sum::<u64>() as f64 / n as f64,
        );
        println!(
            "  masks with source ({} tokens): mean {:.1} us, p50 {:.1}, p99 {:.1}, max {:.1}; first mask of a document mean {:.0} us",
            src_times.len(),
            mean(&src_times),
            pct(&mut src_times, 0.5),
            pct(&mut src_times, 0.99),
            pct(&mut src_times, 1.0),
            mean(&first),
        );
        println!(
            "  masks on the shared grammar ({} tokens): mean {:.1} us, p50 {:.1}, p99 {:.1}, max {:.1}",
            base_times.len(),
            mean(&base_times),
            pct(&mut base_times, 0.5),
            pct(&mut base_times, 0.99),
            pct(&mut base_times, 1.0),
        );
    }
}
