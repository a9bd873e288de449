//! The compile step limit (`Limits::steps`): a schema compiles, or fails with a limit error
//! that carries its numbers. Steps are a count, not a clock, so every figure here is the
//! same on any machine under any load; what a step costs in wall time is measured by
//! `cargo bench -p formwork-grammar --bench compile_limits`, not tested.

use std::path::Path;

use formwork_grammar::compile::{compile, CompileError, Config, Limits};
use serde_json::{json, Value};

fn regression(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/regressions")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn with_steps(steps: u64) -> Config {
    Config {
        limits: Limits {
            steps,
            ..Limits::default()
        },
        ..Config::default()
    }
}

/// The step limit's numbers and pointer; panics on any other result.
fn step_limit(r: Result<impl Sized, CompileError>) -> (usize, usize, String, String) {
    match r {
        Err(e @ CompileError::Limit { .. }) if e.is_step_limit() => {
            let msg = e.to_string();
            let CompileError::Limit {
                what,
                given,
                limit,
                pointer,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(what, CompileError::STEPS);
            (given, limit, pointer, msg)
        }
        Err(e) => panic!("expected the step limit, got {e}"),
        Ok(_) => panic!("expected the step limit, it compiled"),
    }
}

// See: JSONSchemaBench JsonSchemaStore/sourcery_yaml_schema.json, which ran for minutes in
// the string length table of `format: uri` with `maxLength: 65536`.
#[test]
fn r_sourcery_uri_max_length() {
    let s = regression("sourcery_yaml_schema.json");
    compile(&s, &Config::default()).unwrap();
    // The shape alone, in a fraction of the default budget (2.3M steps when written: the
    // length table's bits, 65 537 lengths x its states, dominate).
    let a = compile(
        &json!({"type": "string", "format": "uri", "minLength": 1, "maxLength": 65536}),
        &Config::default(),
    )
    .unwrap();
    let steps = a.stats().steps;
    assert!(
        steps < Limits::default().steps / 20,
        "{steps} steps of the default {}",
        Limits::default().steps
    );
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

/// The same schema takes the same steps every time, and a limit of exactly that many
/// compiles while one fewer is refused: the limit is a count, not a race with a clock.
#[test]
fn the_step_limit_is_deterministic() {
    let s = many_patterns(40);
    let steps = compile(&s, &Config::default()).unwrap().stats().steps;
    assert!(steps > 0);
    assert_eq!(
        compile(&s, &Config::default()).unwrap().stats().steps,
        steps
    );
    assert_eq!(
        compile(&s, &with_steps(steps)).unwrap().stats().steps,
        steps
    );
    let (given, limit, _, _) = step_limit(compile(&s, &with_steps(steps - 1)));
    assert_eq!(limit as u64, steps - 1);
    assert!(given as u64 >= steps, "{given} of {steps}");
    // Half the budget stops at the same step and the same place twice.
    let half = step_limit(compile(&s, &with_steps(steps / 2)));
    assert_eq!(half, step_limit(compile(&s, &with_steps(steps / 2))));
    assert!(half.2.starts_with("/properties/p"), "{:?}", half.2);
}

#[test]
fn the_step_limit_is_an_error_with_its_numbers() {
    let (given, limit, pointer, msg) =
        step_limit(compile(&many_patterns(3_000), &with_steps(100_000)));
    assert_eq!(limit, 100_000);
    // It stops at the first charge past the limit: the largest one is a DFA's
    // determinization or a length table, well under a million steps here.
    assert!(given > limit && given < limit + 1_000_000, "{given}");
    // RFC 6901: a property's subschema or pattern.
    assert!(pointer.starts_with("/properties/p"), "{pointer:?}");
    assert_eq!(
        msg,
        format!("compile step limit of 100000 reached after {given} steps at {pointer:?}")
    );
    assert!(!msg.contains('\n'));
}

/// `oneOf` and `not` over many overlapping branches: the narrowing passes compare every
/// pair, and stop at the step limit.
#[test]
fn narrowing_stops_at_the_step_limit() {
    let branches: Vec<Value> = (0..200)
        .map(|i| {
            json!({"type": "object", "properties": {format!("k{i}"): {"enum": (0..50).map(|j| format!("v{j}")).collect::<Vec<_>>()}}, "required": [format!("k{i}")]})
        })
        .collect();
    let s = json!({"oneOf": branches, "not": {"anyOf": branches}});
    let (given, limit, pointer, _) = step_limit(compile(&s, &with_steps(1_000_000)));
    assert_eq!(limit, 1_000_000);
    assert!(given > limit && given < limit + 100_000, "{given}");
    // In the narrowing passes, at the keyword being narrowed.
    assert!(
        pointer.starts_with("/oneOf") || pointer.starts_with("/not"),
        "{pointer:?}"
    );
}

/// `with_source` has a budget of its own per document, under the same limit.
#[test]
fn a_document_has_its_own_step_budget() {
    let s = json!({"type": "object", "properties": {
        "a": {"type": "string", "x-formwork-source": "words", "pattern": "^[a-z ]+$", "maxLength": 30}
    }, "required": ["a"]});
    let doc = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let a = compile(&s, &Config::default()).unwrap();
    let b = a.with_source(&doc).unwrap();
    assert!(b.stats().steps > 0);
    assert_eq!(a.with_source(&doc).unwrap().stats().steps, b.stats().steps);
    let tight = compile(&s, &with_steps(a.stats().steps + 10)).unwrap();
    let (_, limit, pointer, _) = step_limit(tight.with_source(&doc));
    assert_eq!(limit as u64, a.stats().steps + 10);
    assert_eq!(pointer, "/properties/a/x-formwork-source");
}

/// Two objects of n properties meet in steps linear in n. (Properties were looked up by
/// scanning, quadratic work that no step counted: 30 000 properties ran past the old
/// 5 s deadline; now about 3 s in a release build, `bench compile_limits`.)
#[test]
fn many_properties_meet_in_linear_steps() {
    let steps = |n: usize| {
        let props = |k: &str| -> serde_json::Map<String, Value> {
            (0..n)
                .map(|i| (format!("p{i}"), json!({"type": k})))
                .collect()
        };
        let s = json!({"allOf": [
            {"type": "object", "properties": props("string"), "required": ["p0"]},
            {"type": "object", "properties": props("string")},
        ]});
        compile(&s, &Config::default()).unwrap().stats().steps
    };
    let (a, b) = (steps(1_000), steps(4_000));
    assert!(b < 5 * a, "{a} steps for 1000 properties, {b} for 4000");
}
