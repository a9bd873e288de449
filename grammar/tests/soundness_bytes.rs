//! Byte-level soundness: random walks through the bytes the automaton allows, judged by the
//! jsonschema validator. Every text that ends in an accepting state must be valid; every
//! state on the way must have a completion (`shortest_completion` is replayed to check).
//!
//! Corpus: the fixture schemas (copied into `tests/data/fixtures`), the regression schemas
//! in `tests/data/regressions`, the schemas Pydantic exported (`tests/data/pydantic`), and the JSONSchemaBench schemas under
//! `$FORMWORK_SHARED/data/jsonschemabench` (default `../shared` next to the repository;
//! skipped with a message when absent): all of them, in about a minute (see
//! [`jsonschemabench`] for the knobs).

#[path = "../../tests/support/skip.rs"]
mod skip;
use std::path::{Path, PathBuf};

use formwork_grammar::compile::{compile, Automaton, Config};
use formwork_grammar::ByteAutomaton;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn shared() -> PathBuf {
    std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

fn validator(schema: &Value) -> Option<jsonschema::Validator> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .ok()
}

/// One random walk; returns the text that reached acceptance.
fn walk(a: &Automaton, rng: &mut impl Rng, soft_len: usize) -> Result<Vec<u8>, String> {
    let mut s = a.start();
    let mut text = Vec::new();
    loop {
        if a.is_accepting(&s) && (rng.random_bool(0.15) || text.len() >= soft_len) {
            return Ok(text);
        }
        if text.len() >= soft_len {
            // Finish along the shortest completion; each byte must be allowed.
            let c = a.shortest_completion(&s);
            for &b in &c {
                s = a.step(&s, b).ok_or_else(|| {
                    format!(
                        "shortest completion {:?} refused after {:?}",
                        String::from_utf8_lossy(&c),
                        String::from_utf8_lossy(&text)
                    )
                })?;
                text.push(b);
            }
            if !a.is_accepting(&s) {
                return Err(format!(
                    "shortest completion did not accept: {:?}",
                    String::from_utf8_lossy(&text)
                ));
            }
            return Ok(text);
        }
        // Rejection sampling first (cheap), then a full scan of the 256 bytes.
        let mut pick = None;
        for _ in 0..24 {
            let b = if rng.random_bool(0.9) {
                rng.random_range(0x20u8..0x7F)
            } else {
                rng.random::<u8>()
            };
            if let Some(n) = a.step(&s, b) {
                pick = Some((b, n));
                break;
            }
        }
        if let Some((b, n)) = pick {
            s = n;
            text.push(b);
            continue;
        }
        let allowed: Vec<u8> = (0..=255u8).filter(|&b| a.step(&s, b).is_some()).collect();
        if allowed.is_empty() {
            if a.is_accepting(&s) {
                return Ok(text);
            }
            return Err(format!(
                "dead end after {:?}",
                String::from_utf8_lossy(&text)
            ));
        }
        // Prefer ASCII most of the time so walks get somewhere.
        let ascii: Vec<u8> = allowed.iter().copied().filter(|b| *b < 0x80).collect();
        let b = if !ascii.is_empty() && rng.random_bool(0.9) {
            ascii[rng.random_range(0..ascii.len())]
        } else {
            allowed[rng.random_range(0..allowed.len())]
        };
        s = a.step(&s, b).unwrap();
        text.push(b);
    }
}

#[derive(Default)]
struct Tally {
    schemas: usize,
    compiled: usize,
    walks: usize,
    failures: Vec<String>,
}

fn exercise(name: &str, schema: &Value, walks: usize, seed: u64, t: &mut Tally) {
    t.schemas += 1;
    let Some(v) = validator(schema) else { return };
    let a = match compile(schema, &Config::default()) {
        Ok(a) => a,
        Err(_) => return,
    };
    t.compiled += 1;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in 0..walks {
        let soft = [16, 64, 200][i % 3];
        t.walks += 1;
        match walk(&a, &mut rng, soft) {
            Ok(text) => {
                let inst: Value = match serde_json::from_slice(&text) {
                    Ok(x) => x,
                    Err(e) => {
                        t.failures.push(format!(
                            "{name}: not JSON ({e}): {}",
                            String::from_utf8_lossy(&text)
                        ));
                        break;
                    }
                };
                if !v.is_valid(&inst) {
                    let why: Vec<String> = v
                        .iter_errors(&inst)
                        .take(2)
                        .map(|e| format!("{} at {}", e, e.instance_path()))
                        .collect();
                    t.failures.push(format!(
                        "{name}: invalid output {} ({})",
                        String::from_utf8_lossy(&text),
                        why.join("; ")
                    ));
                    break;
                }
            }
            Err(e) => {
                t.failures.push(format!("{name}: {e}"));
                break;
            }
        }
    }
}

fn read_dir_json(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn fixtures_and_regressions() {
    let mut t = Tally::default();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for sub in ["fixtures", "regressions", "pydantic/schemas"] {
        for p in read_dir_json(&base.join(sub)) {
            let schema: Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let before = t.compiled;
            exercise(&p.display().to_string(), &schema, 200, 7, &mut t);
            if sub != "regressions" {
                assert_eq!(
                    t.compiled,
                    before + 1,
                    "fixture {} must compile: {:?}",
                    p.display(),
                    compile(&schema, &Config::default()).err()
                );
            }
        }
    }
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
    assert!(t.compiled >= 9);
}

/// FNV-1a: a fixed order that mixes the subsets (their files are sorted by name alone).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The floor: the property holds on at least this many compiled schemas.
const MIN_COMPILED: usize = 2_000;

/// JSONSchemaBench: every schema (7,206; 6,842 compile), walked in parallel. About 50 s on
/// 2 cores in the test profile at 8 walks per schema, 25 s in release at 3.
/// `FORMWORK_WALKS` sets walks per schema (default 8); `FORMWORK_SCHEMAS=N` takes the first N
/// of a fixed order that mixes the subsets (a hash of `subset/file`) for a quick run;
/// `FORMWORK_SLOW_MS` prints each schema that takes longer.
#[test]
fn jsonschemabench() {
    use rayon::prelude::*;
    use std::time::Instant;

    let dir = shared().join("data/jsonschemabench");
    if !dir.is_dir() {
        skip::skipped(format_args!(
            "SKIPPED: {} not found; set FORMWORK_SHARED to a copy of the shared folder (the one holding data/jsonschemabench)",
            dir.display()
        ));
        return;
    }
    let walks: usize = std::env::var("FORMWORK_WALKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let cap: usize = match std::env::var("FORMWORK_SCHEMAS").ok().as_deref() {
        None | Some("all") => usize::MAX,
        Some(n) => n.parse().expect("FORMWORK_SCHEMAS: a number or `all`"),
    };
    let slow_ms: Option<u128> = std::env::var("FORMWORK_SLOW_MS")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut files: Vec<(u64, String, PathBuf)> = Vec::new();
    for sub in read_dirs(&dir) {
        let sname = sub.file_name().unwrap().to_string_lossy().to_string();
        for p in read_dir_json(&sub) {
            let name = format!("{sname}/{}", p.file_name().unwrap().to_string_lossy());
            files.push((fnv(&name), name, p));
        }
    }
    files.sort();
    let capped = cap < files.len();
    files.truncate(cap);
    let t0 = Instant::now();
    let tallies: Vec<Tally> = files
        .par_iter()
        .enumerate()
        .map(|(i, (_, name, p))| {
            let mut t = Tally::default();
            let Ok(text) = std::fs::read_to_string(p) else {
                return t;
            };
            let Ok(schema) = serde_json::from_str::<Value>(&text) else {
                return t;
            };
            let t1 = Instant::now();
            exercise(name, &schema, walks, i as u64 + 1, &mut t);
            if slow_ms.is_some_and(|ms| t1.elapsed().as_millis() > ms) {
                eprintln!("slow: {name} {:?}", t1.elapsed());
            }
            t
        })
        .collect();
    let mut t = Tally::default();
    for x in tallies {
        t.schemas += x.schemas;
        t.compiled += x.compiled;
        t.walks += x.walks;
        t.failures.extend(x.failures);
    }
    eprintln!(
        "jsonschemabench: {} schemas, {} compiled, {} walks, {} failures, {:.1} s",
        t.schemas,
        t.compiled,
        t.walks,
        t.failures.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
    if !capped {
        assert!(
            t.compiled >= MIN_COMPILED,
            "only {} of {} schemas compiled",
            t.compiled,
            t.schemas
        );
    }
}

fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
