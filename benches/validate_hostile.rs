//! What the validator's hostile inputs cost in wall time: tolerant extraction of large
//! texts with no JSON in them, and a 50 MB string checked against `maxLength`. The tests
//! (`tests/validate_hostile.rs`, and the extractor's own unit tests, which count the bytes
//! its scans look at) check that the work is bounded; the time it takes is a property of
//! the machine, and is measured here.
//!
//! ```text
//! cargo bench --bench validate_hostile
//! FORMWORK_BENCH_RUNS=5   runs per case (default 5); the median and the best are printed
//! ```

use std::time::Instant;

use formwork::validate::{Validator, Verdict};
use serde_json::json;

fn main() {
    let runs: usize = std::env::var("FORMWORK_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let v = Validator::new(&json!({
        "title": "T", "type": "object",
        "properties": {"motivo": {"type": "string", "maxLength": 200}}
    }))
    .unwrap();
    let mb = 1024 * 1024;
    let big = "x".repeat(50 * mb);
    let cases: Vec<(&str, String)> = vec![
        ("50 MB after one '{' (tolerant)", format!("{{{big}")),
        ("16 MB of '[' (tolerant)", "[".repeat(16 * mb)),
        (
            "50 MB string, maxLength 200 (strict)",
            format!("{{\"motivo\": \"{big}\"}}"),
        ),
    ];
    println!(
        "{:<40} {:>10} {:>10} {:>10}",
        "case", "median ms", "best ms", "MB/s"
    );
    for (name, text) in &cases {
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let (verdict, _) = v.check_tolerant(text);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(!matches!(verdict, Verdict::Valid(_)), "{name}");
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let mbs = text.len() as f64 / mb as f64 / (median / 1e3);
        println!("{name:<40} {median:>10.1} {:>10.1} {mbs:>10.0}", times[0]);
    }
}
