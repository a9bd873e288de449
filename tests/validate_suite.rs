//! The official JSON-Schema-Test-Suite (`../shared/data/json-schema-test-suite`, overridable
//! with `FORMWORK_SHARED`) through `Validator`, against a committed ratchet baseline.
//!
//! * `tests/data/validate/suite-baseline.json` holds, per file, how many tests pass.
//! * Fewer passing than the baseline fails the test (a regression); more passing is printed as
//!   an improvement and passes. `FORMWORK_BLESS=1` rewrites the baseline with today's counts.
//! * The files of the keywords the validator promises (listed in `MUST_PASS`) must pass 100%,
//!   baseline or not.
//!
//! Known failures recorded in the baseline: the groups that `$ref` a remote
//! (`http://localhost:1234/...`) fail by design, as formwork never fetches a remote `$ref`
//! (the schema does not compile, and every test of the group counts as failed).

#[path = "support/skip.rs"]
mod skip;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use formwork::validate::{Draft, Validator};
use serde_json::Value;

/// Files that must pass every test: the keywords formwork promises.
const MUST_PASS: &[&str] = &[
    "draft2020-12/additionalProperties.json",
    "draft2020-12/const.json",
    "draft2020-12/dependentRequired.json",
    "draft2020-12/enum.json",
    "draft2020-12/exclusiveMaximum.json",
    "draft2020-12/exclusiveMinimum.json",
    "draft2020-12/if-then-else.json",
    "draft2020-12/maxLength.json",
    "draft2020-12/maximum.json",
    "draft2020-12/minLength.json",
    "draft2020-12/minimum.json",
    "draft2020-12/multipleOf.json",
    "draft2020-12/pattern.json",
    "draft2020-12/properties.json",
    "draft2020-12/required.json",
    "draft2020-12/type.json",
    "draft2020-12/optional/format/date.json",
    "draft2020-12/optional/format/date-time.json",
    "draft2020-12/optional/format/email.json",
    "draft2020-12/optional/format/uuid.json",
    "draft7/additionalProperties.json",
    "draft7/const.json",
    "draft7/enum.json",
    "draft7/exclusiveMaximum.json",
    "draft7/exclusiveMinimum.json",
    "draft7/if-then-else.json",
    "draft7/maxLength.json",
    "draft7/maximum.json",
    "draft7/minLength.json",
    "draft7/minimum.json",
    "draft7/multipleOf.json",
    "draft7/pattern.json",
    "draft7/properties.json",
    "draft7/required.json",
    "draft7/type.json",
    "draft7/optional/format/date.json",
    "draft7/optional/format/date-time.json",
    "draft7/optional/format/email.json",
];

fn shared() -> PathBuf {
    match std::env::var_os("FORMWORK_SHARED") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

fn baseline_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/validate/suite-baseline.json")
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Count {
    passed: u64,
    total: u64,
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
}

/// Run one suite file; failures are described into `failures`.
fn run_file(path: &Path, draft: Draft, failures: &mut Vec<String>, rel: &str) -> Count {
    let text = std::fs::read_to_string(path).unwrap();
    let groups: Value = serde_json::from_str(&text).unwrap();
    let mut count = Count::default();
    for group in groups.as_array().unwrap() {
        let desc = group["description"].as_str().unwrap_or("");
        let tests = group["tests"].as_array().unwrap();
        count.total += tests.len() as u64;
        let validator = match Validator::with_default_draft(&group["schema"], draft) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{rel} / {desc}: schema does not compile: {e}"));
                continue;
            }
        };
        for t in tests {
            let expected = t["valid"].as_bool().unwrap();
            let verdict = validator.check_value(&t["data"]);
            if verdict.is_valid() == expected {
                count.passed += 1;
            } else {
                failures.push(format!(
                    "{rel} / {desc} / {}: expected valid={expected}, got {}",
                    t["description"].as_str().unwrap_or(""),
                    verdict.kind()
                ));
            }
        }
    }
    count
}

#[test]
fn json_schema_test_suite_against_the_baseline() {
    let root = shared().join("data/json-schema-test-suite/tests");
    if !root.is_dir() {
        skip::skipped(format_args!(
            "SKIPPED: {} not found; set FORMWORK_SHARED to a copy of shared/ to run the suite",
            root.display()
        ));
        return;
    }
    let mut results: BTreeMap<String, Count> = BTreeMap::new();
    let mut failures = Vec::new();
    for (dir, draft) in [
        ("draft2020-12", Draft::Draft202012),
        ("draft7", Draft::Draft7),
    ] {
        let mut files = Vec::new();
        json_files(&root.join(dir), &mut files);
        for f in files {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let c = run_file(&f, draft, &mut failures, &rel);
            results.insert(rel, c);
        }
    }
    assert!(
        !results.is_empty(),
        "no suite files under {}",
        root.display()
    );

    let total: u64 = results.values().map(|c| c.total).sum();
    let passed: u64 = results.values().map(|c| c.passed).sum();
    eprintln!("suite: {passed}/{total} tests pass");
    for f in &failures {
        eprintln!("  failing: {f}");
    }

    // Promised keywords: 100%.
    let mut short = Vec::new();
    for name in MUST_PASS {
        match results.get(*name) {
            Some(c) if c.passed == c.total => {}
            Some(c) => short.push(format!("{name}: {}/{}", c.passed, c.total)),
            None => short.push(format!("{name}: missing from the suite copy")),
        }
    }
    assert!(short.is_empty(), "promised keywords below 100%: {short:#?}");

    let as_json = |r: &BTreeMap<String, Count>| -> Value {
        let mut m = serde_json::Map::new();
        for (k, c) in r {
            m.insert(
                k.clone(),
                serde_json::json!({"passed": c.passed, "total": c.total}),
            );
        }
        Value::Object(m)
    };
    if std::env::var("FORMWORK_BLESS").is_ok_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&as_json(&results)).unwrap() + "\n";
        std::fs::write(baseline_path(), text).unwrap();
        eprintln!("blessed: {}", baseline_path().display());
        return;
    }
    let baseline: Value = serde_json::from_str(
        &std::fs::read_to_string(baseline_path())
            .expect("no baseline; run once with FORMWORK_BLESS=1"),
    )
    .unwrap();
    let mut regressions = Vec::new();
    for (name, c) in &results {
        let Some(b) = baseline.get(name) else {
            eprintln!(
                "new file (not in the baseline): {name} {}/{}",
                c.passed, c.total
            );
            continue;
        };
        let before = b["passed"].as_u64().unwrap();
        if c.passed < before {
            regressions.push(format!("{name}: {} passed, baseline {before}", c.passed));
        } else if c.passed > before {
            eprintln!(
                "improved: {name}: {} passed, baseline {before} (FORMWORK_BLESS=1 records it)",
                c.passed
            );
        }
    }
    assert!(regressions.is_empty(), "regressions: {regressions:#?}");
}
