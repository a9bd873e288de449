//! `formwork bench masks`: mask time per token with the model's real tokenizer.
//!
//! For each schema: compile it, draw a random valid instance from the automaton
//! (seeded per schema), tokenise it with the model's own tokenizer, and replay
//! those tokens through a fresh `Matcher`, timing `compute_mask` and `commit`.
//! A second document of the same schema is then replayed on the same `Grammar`
//! (shared across sequences, as in a batch) to measure reuse. Runs on one thread.

use std::path::{Path, PathBuf};
use std::time::Instant;

use formwork_grammar::compile::{compile, Config};
use formwork_grammar::sample::random_instance;
use formwork_grammar::{Grammar, Matcher, TokenSet};
use formwork_models::tokenizer::GgufTokenizer;
use serde::Serialize;

/// Latency distribution in microseconds.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Dist {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    pub fn of(mut xs: Vec<f64>) -> Dist {
        if xs.is_empty() {
            return Dist::default();
        }
        xs.sort_by(|a, b| a.total_cmp(b));
        let n = xs.len();
        Dist {
            n,
            mean: xs.iter().sum::<f64>() / n as f64,
            p50: super::percentile(&xs, 0.50),
            p99: super::percentile(&xs, 0.99),
            max: xs[n - 1],
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct SubsetCoverage {
    pub schemas: usize,
    pub compiled: usize,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct MaskReport {
    pub model: String,
    pub vocab_size: usize,
    pub schemas: usize,
    pub compiled: usize,
    pub replayed: usize,
    /// Instances whose real tokenisation does not spell the instance's bytes.
    pub tokenizer_mismatch: usize,
    pub per_subset: std::collections::BTreeMap<String, SubsetCoverage>,
    pub compile_ms: Dist,
    pub mask_first_us: Dist,
    pub mask_second_us: Dist,
    pub commit_us: Dist,
    /// Automaton and mask cache per schema after two documents, KiB.
    pub memory_kib: Dist,
    pub trie_build_ms: f64,
}

/// The `*.json` files under `dir` (one level of subfolders, as JSONSchemaBench lays
/// them out), sorted, then `limit` of them spread evenly across the list.
pub fn schema_files(dir: &Path, limit: Option<usize>) -> std::io::Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                all.push(p);
            }
        }
    }
    all.sort();
    Ok(match limit {
        Some(n) => super::spread(all, n),
        None => all,
    })
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

pub fn run(
    model: &str,
    tok: &GgufTokenizer,
    root: &Path,
    files: &[PathBuf],
    config: &Config,
    seed: u64,
    mut on_schema: impl FnMut(&Path, Option<usize>),
) -> MaskReport {
    let t0 = Instant::now();
    let trie = crate::engine::trie_of(tok);
    let mut r = MaskReport {
        model: model.to_string(),
        vocab_size: trie.vocab_size(),
        trie_build_ms: us(t0) / 1e3,
        ..Default::default()
    };
    let (mut compile_ms, mut first, mut second, mut commit, mut mem) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut mask = TokenSet::new(trie.vocab_size());
    for (i, f) in files.iter().enumerate() {
        let subset = f
            .strip_prefix(root)
            .ok()
            .and_then(|p| p.components().next())
            .filter(|_| f.parent() != Some(root))
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_else(|| ".".into());
        let cov = r.per_subset.entry(subset).or_default();
        let Some(schema) = std::fs::read_to_string(f)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        else {
            continue;
        };
        r.schemas += 1;
        cov.schemas += 1;
        let t = Instant::now();
        let Ok(a) = compile(&schema, config) else {
            on_schema(f, None);
            continue;
        };
        compile_ms.push(us(t) / 1e3);
        r.compiled += 1;
        cov.compiled += 1;
        let Some(inst) = random_instance(&*a, seed.wrapping_add(i as u64), 400) else {
            continue;
        };
        let Ok(text) = String::from_utf8(inst) else {
            continue;
        };
        let Ok(tokens) = tok.encode_plain(&text) else {
            r.tokenizer_mismatch += 1;
            continue;
        };
        let spelled: Vec<u8> = tokens
            .iter()
            .flat_map(|&t| trie.token_bytes(t).iter().copied())
            .collect();
        if spelled != text.as_bytes() {
            r.tokenizer_mismatch += 1;
            continue;
        }
        let g = Grammar::new(a.clone());
        for doc in 0..2 {
            let mut m = Matcher::new(g.clone(), trie.clone());
            for &t in &tokens {
                let t1 = Instant::now();
                m.compute_mask(&mut mask);
                let d = us(t1);
                if doc == 0 { &mut first } else { &mut second }.push(d);
                if !mask.contains(t) {
                    // Soundness of the automaton is tested elsewhere; here it is a
                    // bug worth naming rather than a figure.
                    panic!("{}: token {t} of its own instance is masked", f.display());
                }
                let t2 = Instant::now();
                m.commit(t).expect("an allowed token commits");
                if doc == 0 {
                    commit.push(us(t2));
                }
            }
        }
        mem.push((a.stats().bytes + g.stats().memory_bytes) as f64 / 1024.0);
        r.replayed += 1;
        on_schema(f, Some(tokens.len()));
    }
    r.compile_ms = Dist::of(compile_ms);
    r.mask_first_us = Dist::of(first);
    r.mask_second_us = Dist::of(second);
    r.commit_us = Dist::of(commit);
    r.memory_kib = Dist::of(mem);
    r
}

fn row(name: &str, d: &Dist) -> String {
    format!(
        "| {name} | {} | {:.2} | {:.2} | {:.1} | {:.0} |\n",
        d.n, d.mean, d.p50, d.p99, d.max
    )
}

pub fn markdown(r: &MaskReport) -> String {
    let mut s = format!(
        "{}: vocabulary {} tokens (trie built in {:.0} ms); {} schemas, {} compiled ({:.1}%), \
         {} replayed, {} tokenizer mismatches\n\n",
        r.model,
        r.vocab_size,
        r.trie_build_ms,
        r.schemas,
        r.compiled,
        100.0 * r.compiled as f64 / r.schemas.max(1) as f64,
        r.replayed,
        r.tokenizer_mismatch
    );
    s.push_str("| µs | n | mean | p50 | p99 | max |\n|---|---|---|---|---|---|\n");
    s.push_str(&row("mask, first document", &r.mask_first_us));
    s.push_str(&row("mask, second document", &r.mask_second_us));
    s.push_str(&row("commit", &r.commit_us));
    s.push_str(&format!(
        "\ncompile p50 {:.2} ms, p99 {:.1} ms, max {:.0} ms; memory per schema p50 {:.0} KiB, p99 {:.0} KiB\n",
        r.compile_ms.p50, r.compile_ms.p99, r.compile_ms.max, r.memory_kib.p50, r.memory_kib.p99
    ));
    s.push_str("\n| subset | schemas | compiled | coverage |\n|---|---|---|---|\n");
    for (k, c) in &r.per_subset {
        s.push_str(&format!(
            "| {k} | {} | {} | {:.1}% |\n",
            c.schemas,
            c.compiled,
            100.0 * c.compiled as f64 / c.schemas.max(1) as f64
        ));
    }
    s
}
