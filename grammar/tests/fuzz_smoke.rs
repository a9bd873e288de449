//! The grammar fuzz targets (`fuzz/`, docs/fuzzing.md) on stable Rust, through the
//! shared smoke harness (`fuzz/src/smoke.rs`: the kept corpus, then generated inputs).

#[path = "../../fuzz/src/grammar_targets.rs"]
#[allow(dead_code)]
mod targets;

#[path = "../../fuzz/src/smoke.rs"]
mod smoke;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

#[test]
fn fuzz_smoke_compile() {
    smoke::smoke(&root(), "compile", 1, targets::compile);
}

#[test]
fn fuzz_smoke_compile_structured() {
    smoke::smoke(
        &root(),
        "compile_structured",
        2,
        targets::compile_structured,
    );
}

#[test]
fn fuzz_smoke_matcher() {
    smoke::smoke(&root(), "matcher", 3, targets::matcher);
}
