//! JSON-Schema-Test-Suite (draft2020-12, draft7) against the automaton.
//!
//! For every schema that compiles (strict): every *invalid* instance must be refused (a
//! hard failure otherwise: that is unsoundness), and every *valid* instance, written
//! compactly, should be accepted. Valid instances that the grammar's documented policy does
//! not produce (unlisted properties, key order other than schema order, exponents, more
//! than 15 digits, `1.0` for an integer, formats outside the sound subset) are listed in the
//! ratchet file `tests/data/suite_refused.txt`: a refusal not listed there fails the test;
//! listed ones that are now accepted are printed so the list can shrink.
//! `FORMWORK_SUITE_BLESS=1` rewrites the list.

#[path = "../../tests/support/skip.rs"]
mod skip;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use formwork_grammar::compile::{compile, Config};
use serde_json::Value;

fn shared() -> PathBuf {
    std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

#[test]
fn test_suite_valid_accepted_invalid_refused() {
    let root = shared().join("data/json-schema-test-suite/tests");
    if !root.is_dir() {
        skip::skipped(format_args!(
            "SKIPPED: {} not found; set FORMWORK_SHARED to a copy of the shared folder",
            root.display()
        ));
        return;
    }
    let mut unsound = Vec::new();
    let mut refused = BTreeSet::new();
    let (mut groups, mut compiled, mut valid_ok, mut invalid_ok) = (0, 0, 0, 0);
    for draft in ["draft2020-12", "draft7"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(draft))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for f in files {
            let cases: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let fname = f.file_name().unwrap().to_string_lossy().to_string();
            for g in cases.as_array().unwrap() {
                groups += 1;
                let schema = &g["schema"];
                let Ok(a) = compile(schema, &Config::default()) else {
                    continue;
                };
                compiled += 1;
                for t in g["tests"].as_array().unwrap() {
                    let text = serde_json::to_string(&t["data"]).unwrap();
                    let ok = a.accepts(text.as_bytes());
                    let id = format!(
                        "{draft}/{fname} | {} | {}",
                        g["description"].as_str().unwrap_or(""),
                        t["description"].as_str().unwrap_or("")
                    );
                    if t["valid"].as_bool() == Some(true) {
                        if ok {
                            valid_ok += 1;
                        } else {
                            refused.insert(id);
                        }
                    } else if ok {
                        unsound.push(format!("{id}: accepted invalid {text}"));
                    } else {
                        invalid_ok += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "suite: {groups} groups, {compiled} compiled; {valid_ok} valid accepted, {} valid refused; {invalid_ok} invalid refused",
        refused.len()
    );
    assert!(
        unsound.is_empty(),
        "invalid instances accepted:\n{}",
        unsound.join("\n")
    );
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/suite_refused.txt");
    if std::env::var_os("FORMWORK_SUITE_BLESS").is_some() {
        let body: Vec<String> = refused.iter().cloned().collect();
        std::fs::write(&base, body.join("\n") + "\n").unwrap();
        return;
    }
    let listed: BTreeSet<String> = std::fs::read_to_string(&base)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let new: Vec<&String> = refused.difference(&listed).collect();
    let fixed: Vec<&String> = listed.difference(&refused).collect();
    if !fixed.is_empty() {
        eprintln!(
            "now accepted (remove from suite_refused.txt):\n{}",
            fixed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(
        new.is_empty(),
        "valid instances newly refused:\n{}",
        new.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(compiled > 250, "only {compiled} groups compiled");
}
