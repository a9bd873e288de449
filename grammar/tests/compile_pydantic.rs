//! Schemas exported by Pydantic itself (`tests/data/pydantic/models.py`, the versions in
//! `schemas/VERSIONS`): every one compiles strictly, and the instances the automaton
//! produces pass Pydantic's own `model_validate_json(..., strict=True)`.
//!
//! The round trip needs a Python with `pydantic` and `email-validator`: the one named by
//! `FORMWORK_TEST_PYTHON` (`scripts/test` makes a venv and sets it; a set variable that
//! does not work is a failure), else `.venv-test/bin/python` at the repository root.
//! Without either the round trip says SKIPPED.

#[path = "../../tests/support/skip.rs"]
mod skip;
use std::path::{Path, PathBuf};
use std::process::Command;

use formwork_grammar::compile::{compile, Automaton, Config, Whitespace};
use formwork_grammar::sample::random_instance;
use formwork_grammar::ByteAutomaton;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// Instances per schema and whitespace style (compact, flexible).
const PER_SCHEMA: usize = 120;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pydantic")
}

fn schemas() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir().join("schemas")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((name, serde_json::from_str(&text).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_schema_compiles_strictly() {
    let all = schemas();
    assert_eq!(all.len(), 7, "one schema per model in models.py");
    let mut bad = Vec::new();
    for (name, s) in &all {
        match compile(s, &Config::default()) {
            Ok(a) => assert!(a.relaxed().is_empty()),
            Err(e) => bad.push(format!("{name}: {e}")),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// A walk that picks uniformly among all allowed bytes (so non-ASCII text and escapes
/// come up, which `random_instance` avoids), finishing along the shortest completion.
fn byte_walk(a: &Automaton, rng: &mut impl Rng, soft_len: usize) -> Vec<u8> {
    let mut s = a.start();
    let mut text = Vec::new();
    loop {
        if a.is_accepting(&s) && (rng.random_bool(0.2) || text.len() >= soft_len) {
            return text;
        }
        if text.len() >= soft_len {
            for b in a.shortest_completion(&s) {
                s = a.step(&s, b).expect("shortest completion refused");
                text.push(b);
            }
            assert!(a.is_accepting(&s), "shortest completion did not accept");
            return text;
        }
        let allowed: Vec<u8> = (0..=255u8).filter(|&b| a.step(&s, b).is_some()).collect();
        if allowed.is_empty() && a.is_accepting(&s) {
            return text;
        }
        assert!(
            !allowed.is_empty(),
            "stuck after {:?}",
            String::from_utf8_lossy(&text)
        );
        let b = allowed[rng.random_range(0..allowed.len())];
        s = a.step(&s, b).unwrap();
        text.push(b);
    }
}

/// The interpreter for the round trip, or None (after printing SKIPPED).
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FORMWORK_TEST_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv-test/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    skip::skipped(format_args!(
        "SKIPPED: no Python for the Pydantic round trip; run scripts/test, or set FORMWORK_TEST_PYTHON to a python with pydantic and email-validator"
    ));
    None
}

#[test]
fn instances_pass_pydantic_strict() {
    let Some(py) = python() else {
        return;
    };
    let out = std::env::temp_dir().join(format!("formwork-pydantic-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let mut total = 0;
    for (name, s) in schemas() {
        let mut lines = String::new();
        for (k, ws) in [Whitespace::Compact, Whitespace::Flexible { max_run: 2 }]
            .into_iter()
            .enumerate()
        {
            let cfg = Config {
                whitespace: ws,
                ..Config::default()
            };
            let a = compile(&s, &cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut rng = rand::rngs::StdRng::seed_from_u64(k as u64 + 1);
            for i in 0..PER_SCHEMA {
                let soft = [40, 200, 800][i % 3];
                let bytes = if i % 2 == 0 {
                    random_instance(&*a, (k * PER_SCHEMA + i) as u64, soft)
                        .unwrap_or_else(|| panic!("{name}: the walk refused its own completion"))
                } else {
                    byte_walk(&a, &mut rng, soft)
                };
                assert!(a.accepts(&bytes));
                let text =
                    String::from_utf8(bytes).unwrap_or_else(|e| panic!("{name}: not UTF-8: {e}"));
                lines.push_str(&serde_json::to_string(&text).unwrap());
                lines.push('\n');
                total += 1;
            }
        }
        std::fs::write(out.join(format!("{name}.jsonl")), lines).unwrap();
    }
    let run = Command::new(&py)
        .arg(dir().join("models.py"))
        .arg("validate")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", py.display()));
    let stdout = String::from_utf8_lossy(&run.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        run.status.success(),
        "Pydantic refused some instances (kept in {})",
        out.display()
    );
    let want = format!("pydantic strict: {total} of {total} valid");
    assert!(stdout.contains(&want), "expected `{want}`");
    std::fs::remove_dir_all(&out).unwrap();
}
