//! The root crate's fuzz targets (`fuzz/`, docs/fuzzing.md) on stable Rust: the
//! validator and tolerant extractor on arbitrary text, and one JSONL batch line,
//! through the shared smoke harness (`fuzz/src/smoke.rs`: the kept corpus, then
//! `FORMWORK_FUZZ_RUNS` generated inputs, default 300).

#[path = "../fuzz/src/app_targets.rs"]
#[allow(dead_code)]
mod targets;

#[path = "../fuzz/src/smoke.rs"]
mod smoke;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus")
}

#[test]
fn fuzz_smoke_validate() {
    smoke::smoke(&root(), "validate", 4, targets::validate);
}

#[test]
fn fuzz_smoke_batch_line() {
    smoke::smoke(&root(), "batch_line", 5, targets::batch_line);
}

#[test]
fn fuzz_smoke_serve_request() {
    smoke::smoke(&root(), "serve_request", 6, targets::serve_request);
}

#[test]
fn fuzz_smoke_serve_request_structured() {
    smoke::smoke(
        &root(),
        "serve_request_structured",
        7,
        targets::serve_request_structured,
    );
}
