//! The compile-time limit: a schema compiles, or fails with a limit error that carries its
//! numbers, within `Limits::time_ms` (plus the largest step that cannot be interrupted:
//! one regex-automata determinization, bounded by its own size limit).

use std::path::Path;
use std::time::{Duration, Instant};

use formwork_grammar::compile::{compile, CompileError, Config, Limits};
use serde_json::{json, Value};

/// Slack over the limit for the last uninterruptible step, in the unoptimised test build on a
/// shared machine.
const SLACK: Duration = Duration::from_millis(2_500);

fn regression(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/regressions")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Compiles under `cfg`; the result must be `Ok` or a limit error, in time.
fn bounded(schema: &Value, cfg: &Config) -> Result<(), CompileError> {
    let t0 = Instant::now();
    let r = compile(schema, cfg);
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_millis(cfg.limits.time_ms) + SLACK,
        "compile took {took:?} under a {} ms limit",
        cfg.limits.time_ms
    );
    match r {
        Ok(_) => Ok(()),
        Err(e @ CompileError::Limit { .. }) => Err(e),
        Err(e) => panic!("neither compiled nor hit a limit: {e}"),
    }
}

// See: JSONSchemaBench JsonSchemaStore/sourcery_yaml_schema.json, which ran for minutes in
// the string length table of `format: uri` with `maxLength: 65536`.
#[test]
fn r_sourcery_uri_max_length() {
    let s = regression("sourcery_yaml_schema.json");
    assert!(bounded(&s, &Config::default()).is_ok());
    // The shape alone, in a fraction of the limit.
    let t0 = Instant::now();
    let a = compile(
        &json!({"type": "string", "format": "uri", "minLength": 1, "maxLength": 65536}),
        &Config::default(),
    )
    .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(a.accepts(b"\"http://a.b/c\""));
}

/// Many distinct patterns: every one is a DFA to build and a length table to fill.
fn many_patterns(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("^[a-z]{{1,6}}(?:{i}|-{i})+$"), "maxLength": 40}),
            )
        })
        .collect();
    json!({"type": "object", "properties": props, "required": ["p0"]})
}

#[test]
fn time_limit_is_an_error_with_its_numbers() {
    let cfg = Config {
        limits: Limits {
            time_ms: 30,
            ..Limits::default()
        },
        ..Config::default()
    };
    let s = many_patterns(3_000);
    match bounded(&s, &cfg) {
        Err(CompileError::Limit {
            what,
            given,
            limit,
            pointer,
        }) => {
            assert_eq!(what, "compile time (ms)");
            assert_eq!(limit, 30);
            assert!(given > 30, "{given}");
            // RFC 6901: a property's subschema or pattern, or the root ("") when the
            // budget ran out before the properties were reached (a loaded machine).
            assert!(
                pointer.is_empty() || pointer.starts_with("/properties/p"),
                "{pointer:?}"
            );
        }
        other => panic!("expected the time limit, got {other:?}"),
    }
}

/// `oneOf` and `not` over many overlapping branches: the narrowing passes compare every
/// pair, and stop at the deadline.
#[test]
fn narrowing_stops_at_the_deadline() {
    let branches: Vec<Value> = (0..200)
        .map(|i| {
            json!({"type": "object", "properties": {format!("k{i}"): {"enum": (0..50).map(|j| format!("v{j}")).collect::<Vec<_>>()}}, "required": [format!("k{i}")]})
        })
        .collect();
    let s = json!({"oneOf": branches, "not": {"anyOf": branches}});
    let cfg = Config {
        limits: Limits {
            time_ms: 20,
            ..Limits::default()
        },
        ..Config::default()
    };
    // About 1.5 s in the test build under the default limit (the answer: nothing is valid).
    match bounded(&s, &cfg) {
        Err(CompileError::Limit {
            what,
            limit,
            pointer,
            ..
        }) => {
            assert_eq!((what, limit), ("compile time (ms)", 20));
            eprintln!("stopped at {pointer:?}");
            // In the narrowing passes; or at the root ("") on a machine so loaded that
            // reading the document alone took the 20 ms.
            assert!(
                pointer.is_empty() || pointer.starts_with("/oneOf") || pointer.starts_with("/not"),
                "{pointer:?}"
            );
        }
        other => panic!("expected the time limit, got {other:?}"),
    }
}
