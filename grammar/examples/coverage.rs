//! Coverage of the schema compiler over JSONSchemaBench.
//!
//! `cargo run --release -p formwork-grammar --example coverage [-- DIR]`
//! (DIR defaults to `$FORMWORK_SHARED/data/jsonschemabench`, else `../shared/...`).
//! Prints, per subset, how many schemas compile strictly and leniently, the compile time
//! p50/p99, the compile steps ([`Limits::steps`]) p99/max of what compiled, and the most
//! frequent reasons for refusal. `COVERAGE_VERBOSE=1` also prints each refusal;
//! `COVERAGE_STEPS=1` prints each schema's steps (strict, else lenient) for comparing
//! runs.
//!
//! [`Limits::steps`]: formwork_grammar::compile::Limits::steps

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use formwork_grammar::compile::{compile, CompileError, Config};

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn reason(e: &CompileError) -> String {
    match e {
        CompileError::Unsupported { keyword, why, .. } => {
            if keyword == "format" || keyword == "pattern" {
                format!("{keyword}: {}", why.split(':').next().unwrap_or(""))
            } else {
                keyword.clone()
            }
        }
        CompileError::InvalidSchema { msg, .. } => format!("invalid: {msg}"),
        CompileError::Limit { what, .. } => format!("limit: {what}"),
        CompileError::Empty { .. } => "empty".into(),
        CompileError::NoSpan { .. } => "no span".into(),
    }
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("FORMWORK_SHARED")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
                .join("data/jsonschemabench")
        });
    let mut subsets: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(r) => r
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            std::process::exit(2);
        }
    };
    subsets.sort();
    let strict = Config::default();
    let lenient = Config {
        lenient: true,
        ..Config::default()
    };
    let mut all_times = Vec::new();
    let mut all_steps = Vec::new();
    let mut worst: Option<(u64, PathBuf)> = None;
    let per_file = std::env::var_os("COVERAGE_STEPS").is_some();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    let (mut tot, mut ok_s, mut ok_l) = (0usize, 0usize, 0usize);
    println!(
        "{:<16} {:>6} {:>8} {:>8} {:>9} {:>9} {:>11} {:>11}",
        "subset", "files", "strict", "lenient", "p50 ms", "p99 ms", "p99 steps", "max steps"
    );
    for sub in subsets {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&sub)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        let (mut n, mut s, mut l) = (0usize, 0usize, 0usize);
        let mut times = Vec::new();
        let mut steps = Vec::new();
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            let Ok(schema) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            n += 1;
            let t0 = Instant::now();
            let r = compile(&schema, &strict);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            times.push(ms);
            let took = match r {
                Ok(a) => {
                    s += 1;
                    l += 1;
                    Some(a.stats().steps)
                }
                Err(e) => {
                    *reasons.entry(reason(&e)).or_default() += 1;
                    if std::env::var_os("COVERAGE_VERBOSE").is_some() {
                        println!("  {}: {e}", f.display());
                    }
                    compile(&schema, &lenient).ok().map(|a| {
                        l += 1;
                        a.stats().steps
                    })
                }
            };
            if let Some(n) = took {
                if per_file {
                    println!("  steps {n} {}", f.display());
                }
                if worst.as_ref().is_none_or(|w| n > w.0) {
                    worst = Some((n, f.clone()));
                }
                steps.push(n as f64);
            }
        }
        let name = sub.file_name().unwrap().to_string_lossy().to_string();
        println!(
            "{:<16} {:>6} {:>7.1}% {:>7.1}% {:>9.3} {:>9.3} {:>11} {:>11}",
            name,
            n,
            100.0 * s as f64 / n.max(1) as f64,
            100.0 * l as f64 / n.max(1) as f64,
            pct(&mut times, 0.5),
            pct(&mut times, 0.99),
            pct(&mut steps, 0.99),
            pct(&mut steps, 1.0)
        );
        tot += n;
        ok_s += s;
        ok_l += l;
        all_times.extend(times);
        all_steps.extend(steps);
    }
    println!(
        "{:<16} {:>6} {:>7.1}% {:>7.1}% {:>9.3} {:>9.3} {:>11} {:>11}",
        "TOTAL",
        tot,
        100.0 * ok_s as f64 / tot.max(1) as f64,
        100.0 * ok_l as f64 / tot.max(1) as f64,
        pct(&mut all_times, 0.5),
        pct(&mut all_times, 0.99),
        pct(&mut all_steps, 0.99),
        pct(&mut all_steps, 1.0)
    );
    if let Some((n, f)) = worst {
        println!(
            "most steps: {n} of the limit's {} ({})",
            strict.limits.steps,
            f.display()
        );
    }
    let mut rs: Vec<(String, usize)> = reasons.into_iter().collect();
    rs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("\ntop reasons for refusal (strict):");
    for (r, c) in rs.iter().take(20) {
        println!("{c:>6}  {r}");
    }
}
