//! The stable smoke harness of the fuzz targets, included by path from
//! `grammar/tests/fuzz_smoke.rs` (the grammar targets) and `tests/fuzz_smoke_app.rs`
//! (the validator and batch-line targets): each target over its kept corpus
//! (`fuzz/corpus/TARGET`, minimised findings included), then `FORMWORK_FUZZ_RUNS` inputs
//! (default 300) generated from a fixed seed: random bytes, and corpus entries with
//! random bytes changed, cut or inserted. A target panics on a broken promise, so a
//! failure names the input (replay it with `cargo +nightly fuzz run TARGET FILE`).

use std::path::{Path, PathBuf};

use formwork_grammar::sample::SplitRng;

fn corpus(root: &Path, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = root.join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

fn runs() -> usize {
    std::env::var("FORMWORK_FUZZ_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// Random inputs: fresh bytes, or a corpus entry mutated a few times.
fn generated(seed: u64, seeds: &[(PathBuf, Vec<u8>)], n: usize) -> Vec<Vec<u8>> {
    let mut rng = SplitRng::new(seed);
    (0..n)
        .map(|_| {
            if seeds.is_empty() || rng.below(3) == 0 {
                let len = rng.below(300);
                return (0..len).map(|_| rng.next_u64() as u8).collect();
            }
            let mut b = seeds[rng.below(seeds.len())].1.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(b.len() + 1);
                match rng.below(3) {
                    0 if at < b.len() => b[at] = rng.next_u64() as u8,
                    1 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => b.insert(at, b"{}[]\":,0123-.eE\\aznul"[rng.below(21)]),
                }
            }
            b
        })
        .collect()
}

/// Runs `f` over the kept corpus of `target` (under `root`), then over generated inputs;
/// panics naming the first input that fails.
pub fn smoke(root: &Path, target: &str, seed: u64, f: fn(&[u8])) {
    let kept = corpus(root, target);
    assert!(!kept.is_empty(), "no corpus for {target}");
    for (path, data) in &kept {
        if std::panic::catch_unwind(|| f(data)).is_err() {
            panic!("{target}: corpus input {} fails", path.display());
        }
    }
    for (i, data) in generated(seed, &kept, runs()).into_iter().enumerate() {
        if std::panic::catch_unwind(|| f(&data)).is_err() {
            panic!("{target}: generated input {i} fails: {data:?}");
        }
    }
    eprintln!(
        "{target}: {} corpus inputs, {} generated, all pass",
        kept.len(),
        runs()
    );
}
