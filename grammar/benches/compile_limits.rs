//! What the compile step budget ([`Limits::steps`]) costs in wall time: hostile schemas,
//! each compiled under the default limits, with the time taken, the steps charged and the
//! time per million steps. The tests (`tests/compile_limits.rs`) check the budget in
//! steps, which are the same on every machine; the time a budget stands for is a property
//! of the machine, and is measured here.
//!
//! ```text
//! cargo bench -p formwork-grammar --bench compile_limits
//! FORMWORK_BENCH_STEPS=50000000  the step limit to compile under (default: Limits::default)
//! FORMWORK_BENCH_FILTER=patterns  only the cases whose name contains this text
//! ```
//!
//! A plain harness, one thread: one line per schema, `compiled` or the limit it hit.
//!
//! [`Limits::steps`]: formwork_grammar::compile::Limits::steps

use std::path::Path;
use std::time::Instant;

use formwork_grammar::compile::{compile, CompileError, Config, Limits};
use serde_json::{json, Value};

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

/// `n` overlapping object branches, each requiring a key of its own with 50 values.
fn branches(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"type": "object", "properties": {format!("k{i}"): {"enum": (0..50).map(|j| format!("v{j}")).collect::<Vec<_>>()}}, "required": [format!("k{i}")]})
        })
        .collect()
}

/// One string under many patterns at once: a chain of DFA products.
fn pattern_products(n: usize) -> Value {
    let all: Vec<Value> = (0..n)
        .map(|i| json!({"pattern": format!("^(?:[a-z]{{{}}}|[0-9])*$", i % 7 + 1)}))
        .collect();
    json!({"type": "string", "allOf": all, "maxLength": 200})
}

fn main() {
    let mut limits = Limits::default();
    if let Some(n) = std::env::var("FORMWORK_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        limits.steps = n;
    }
    let cfg = Config {
        limits,
        ..Config::default()
    };
    let regression = |name: &str| -> Value {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/regressions")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    };
    let cases: Vec<(&str, Value)> = vec![
        (
            "uri, maxLength 65536",
            json!({"type": "string", "format": "uri", "minLength": 1, "maxLength": 65536}),
        ),
        (
            "sourcery_yaml_schema.json",
            regression("sourcery_yaml_schema.json"),
        ),
        ("3000 patterns", many_patterns(3_000)),
        ("oneOf, 200 branches", json!({"oneOf": branches(200)})),
        (
            "not anyOf, 200 branches",
            json!({"type": "object", "not": {"anyOf": branches(200)}}),
        ),
        (
            "oneOf and not, 200 branches",
            json!({"oneOf": branches(200), "not": {"anyOf": branches(200)}}),
        ),
        ("40 patterns on one string", pattern_products(40)),
        ("oneOf, 1000 branches", json!({"oneOf": branches(1000)})),
        ("30000 patterns", many_patterns(30_000)),
    ];
    println!(
        "step limit {}\n{:<28} {:>10} {:>12} {:>12}  result",
        cfg.limits.steps, "schema", "ms", "steps", "ms/M steps"
    );
    let filter = std::env::var("FORMWORK_BENCH_FILTER").unwrap_or_default();
    for (name, s) in cases {
        if !name.contains(&filter) {
            continue;
        }
        let t0 = Instant::now();
        let r = compile(&s, &cfg);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let (steps, result) = match &r {
            Ok(a) => (a.stats().steps, "compiled".to_string()),
            Err(e @ CompileError::Limit { what, given, .. }) if *what == CompileError::STEPS => {
                (*given as u64, e.to_string())
            }
            Err(e) => (0, e.to_string()),
        };
        println!(
            "{name:<28} {ms:>10.1} {steps:>12} {:>12.1}  {result}",
            ms / (steps.max(1) as f64 / 1e6)
        );
    }
}
