//! formwork's line errors against Pydantic's own `ValidationError`, case by case.
//!
//! `tests/data/validate/pydantic/models.py` holds Pydantic models; their
//! `model_json_schema()` is committed as `schemas/NAME.json`, and Pydantic's errors for each
//! text of `cases.json` (`model_validate_json(text, strict=True)`: JSON mode, strict) as
//! `pydantic_errors.json`. Two tests:
//!
//! - `errors_match_pydantic` (offline, never skipped): for every case, formwork's list of
//!   `(loc, type, msg)` against the schema equals Pydantic's, in order; or the case is one of
//!   the [`DIFFERENCES`], where formwork's list must be exactly the one written there (so a
//!   difference that goes away, or changes, fails too).
//! - `committed_files_are_what_pydantic_says` (needs Python): runs `models.py errors` with the
//!   Python named by `FORMWORK_TEST_PYTHON` (a set variable that does not work is a failure),
//!   else `.venv-test/bin/python`, and checks the committed schemas and errors are what the
//!   installed Pydantic says. Without either Python it says SKIPPED. To add a case, add it to
//!   `cases.json` and run `python models.py export`.

#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

use formwork::validate::{LineError, Validator, Verdict};
use serde_json::Value;

/// The cases where formwork deliberately says something else than Pydantic: the case's
/// name, formwork's errors (one `loc type: msg` line each), and why. docs/validation.md
/// lists the same differences.
const DIFFERENCES: &[(&str, &[&str], &str)] = &[
    (
        "date_parsing",
        &[r#"["day"] date_parsing: Input should be a valid date in the format YYYY-MM-DD"#],
        "Pydantic adds its date parser's reason (speedate's); formwork names the format only",
    ),
    (
        "datetime_parsing",
        &[
            r#"["at"] datetime_parsing: Input should be a valid datetime in the format YYYY-MM-DDTHH:MM:SS[.ffffff] with a UTC offset (RFC 3339)"#,
        ],
        "Pydantic gives its parser's reason (\"input is too short\"); formwork the format JSON Schema's date-time asks",
    ),
    (
        "uuid_parsing",
        &[r#"["id"] uuid_parsing: Input should be a valid UUID"#],
        "Pydantic adds the uuid parser's reason (the bad character and its place); formwork does not",
    ),
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/validate/pydantic")
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn schema(model: &str) -> Value {
    load(&dir().join("schemas").join(format!("{model}.json")))
}

/// One error as one line: `["lines",0,"qty"] greater_than_equal: Input should be ...`.
fn line(loc: &Value, ty: &str, msg: &str) -> String {
    format!("{} {ty}: {msg}", serde_json::to_string(loc).unwrap())
}

fn formwork_lines(errors: &[LineError]) -> Vec<String> {
    errors
        .iter()
        .map(|e| line(&serde_json::to_value(&e.loc).unwrap(), &e.r#type, &e.msg))
        .collect()
}

fn pydantic_lines(errors: &Value) -> Vec<String> {
    errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            line(
                &e["loc"],
                e["type"].as_str().unwrap(),
                e["msg"].as_str().unwrap(),
            )
        })
        .collect()
}

#[test]
fn errors_match_pydantic() {
    let cases = load(&dir().join("cases.json"));
    let expected = load(&dir().join("pydantic_errors.json"));
    let cases = cases.as_array().unwrap();
    let expected = expected.as_array().unwrap();
    assert_eq!(cases.len(), expected.len(), "run `python models.py export`");
    let mut validators = std::collections::BTreeMap::new();
    let mut mismatches = Vec::new();
    let mut allowed_seen = Vec::new();
    let mut error_types = std::collections::BTreeSet::new();
    for (case, want) in cases.iter().zip(expected) {
        let name = case["name"].as_str().unwrap();
        assert_eq!(want["name"], case["name"], "run `python models.py export`");
        let model = case["model"].as_str().unwrap();
        let v = validators
            .entry(model.to_string())
            .or_insert_with(|| Validator::new(&schema(model)).expect(model));
        let verdict = v.check(case["text"].as_str().unwrap());
        assert!(
            matches!(verdict, Verdict::Valid(_) | Verdict::SchemaInvalid(_)),
            "{name}: {verdict:?}"
        );
        let got = formwork_lines(verdict.errors());
        let pydantic = pydantic_lines(&want["errors"]);
        for e in want["errors"].as_array().unwrap() {
            error_types.insert(e["type"].as_str().unwrap().to_string());
        }
        match DIFFERENCES.iter().find(|d| d.0 == name) {
            Some((_, formwork, _)) => {
                allowed_seen.push(name);
                let formwork: Vec<String> = formwork.iter().map(|s| s.to_string()).collect();
                if got != formwork {
                    mismatches.push(format!(
                        "{name} (a listed difference): formwork now says\n    {}\n  the list says\n    {}\n  Pydantic says\n    {}",
                        got.join("\n    "),
                        formwork.join("\n    "),
                        pydantic.join("\n    ")
                    ));
                } else if got == pydantic {
                    mismatches.push(format!(
                        "{name}: listed as a difference, but formwork and Pydantic agree"
                    ));
                }
            }
            None if got != pydantic => mismatches.push(format!(
                "{name}: formwork says\n    {}\n  Pydantic says\n    {}",
                got.join("\n    "),
                pydantic.join("\n    ")
            )),
            None => {}
        }
    }
    for (name, _, _) in DIFFERENCES {
        assert!(
            allowed_seen.contains(name),
            "difference {name:?} names no case"
        );
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from Pydantic:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
    eprintln!(
        "{} cases, {} Pydantic error types: {}",
        cases.len(),
        error_types.len(),
        error_types.into_iter().collect::<Vec<_>>().join(", ")
    );
}

/// The interpreter with Pydantic, or None (after printing SKIPPED).
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FORMWORK_TEST_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    skip::skipped(format_args!(
        "SKIPPED: no Python for the Pydantic comparison; run scripts/test, or set FORMWORK_TEST_PYTHON to a python with pydantic"
    ));
    None
}

#[test]
fn committed_files_are_what_pydantic_says() {
    let Some(py) = python() else {
        return;
    };
    let run = Command::new(&py)
        .arg(dir().join("models.py"))
        .arg("errors")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", py.display()));
    assert!(
        run.status.success(),
        "{} models.py errors: {}",
        py.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    let now: Value = serde_json::from_slice(&run.stdout).expect("models.py errors prints JSON");
    let versions = std::fs::read_to_string(dir().join("schemas/VERSIONS")).unwrap();
    assert_eq!(
        now["versions"].as_str().unwrap(),
        versions.trim(),
        "the installed Pydantic is not the pinned one"
    );
    for (name, s) in now["schemas"].as_object().unwrap() {
        assert_eq!(
            &schema(name),
            s,
            "schemas/{name}.json is stale: run `python models.py export`"
        );
    }
    let committed = load(&dir().join("pydantic_errors.json"));
    assert_eq!(
        now["cases"], committed,
        "pydantic_errors.json is stale: run `python models.py export`"
    );
}
