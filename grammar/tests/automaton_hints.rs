//! The compiled automaton's acceleration hints agree with `step`.
//!
//! For every state on random walks over the fixture schemas and a sample of the
//! JSONSchemaBench schemas (compact and flexible whitespace):
//! - `allowed_bytes(s)`, when `Some`, is exactly `{b : step(s, b).is_some()}` (the
//!   trait only asks for a superset; the compiled automaton promises equality);
//! - `plain_chars_allowed(s) == Some(n)` with `n >= 1` means every plain character
//!   (all of printable ASCII but `"` and `\`, and the edges of every UTF-8 length
//!   class) is accepted, and random runs of up to `min(n, 12)` plain characters are;
//! - `plain_key(s) == Some(k)` means random runs of up to `k.n` plain characters are
//!   accepted exactly when the key's table takes them, and a state met earlier with the
//!   same key accepts exactly the same runs (up to both `n`s), spaces and U+2028
//!   included.
//!
//! `FORMWORK_SCHEMAS` caps the bench schemas (default 40, `0` = all),
//! `FORMWORK_WALKS` sets walks per schema and whitespace mode (default 3).

use std::path::{Path, PathBuf};

use formwork_grammar::compile::{compile, Automaton, Config, Whitespace};
use formwork_grammar::ByteAutomaton;
use rand::{Rng, SeedableRng};

fn shared() -> PathBuf {
    std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Plain characters to try: all plain ASCII, then both ends of every UTF-8 range that
/// `lead`/`cont_ok` treat apart, and a few ordinary ones.
fn plain_chars() -> Vec<char> {
    let mut v: Vec<char> = (0x20u8..=0x7F)
        .filter(|&b| b != b'"' && b != b'\\')
        .map(char::from)
        .collect();
    for cp in [
        0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xCFFF, 0xD000, 0xD7FF, 0xE000, 0xFFFF, 0x10000,
        0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF, 0xE9, 0x4E2D, 0x1F600, 0x3B1,
    ] {
        v.push(char::from_u32(cp).unwrap());
    }
    v
}

fn step_bytes(a: &Automaton, s: &<Automaton as ByteAutomaton>::State, bytes: &[u8]) -> bool {
    let mut s = s.clone();
    for &b in bytes {
        match a.step(&s, b) {
            Some(n) => s = n,
            None => return false,
        }
    }
    true
}

/// Checks one state; returns a description of the first disagreement.
fn check_state(
    a: &Automaton,
    s: &<Automaton as ByteAutomaton>::State,
    plain: &[char],
    rng: &mut impl Rng,
) -> Result<(), String> {
    let mut stepped = [0u64; 4];
    for b in 0..=255u8 {
        if a.step(s, b).is_some() {
            stepped[b as usize >> 6] |= 1 << (b & 63);
        }
    }
    if let Some(set) = a.allowed_bytes(s) {
        if set != stepped {
            let diff: Vec<u8> = (0..=255u8)
                .filter(|&b| (set[b as usize >> 6] ^ stepped[b as usize >> 6]) >> (b & 63) & 1 == 1)
                .collect();
            return Err(format!(
                "allowed_bytes differs from step on bytes {diff:?} in {s:?}"
            ));
        }
    }
    if let Some(n) = a.plain_chars_allowed(s) {
        if n >= 1 {
            for &c in plain {
                let mut buf = [0u8; 4];
                if !step_bytes(a, s, c.encode_utf8(&mut buf).as_bytes()) {
                    return Err(format!(
                        "plain hint {n} but {c:?} (U+{:04X}) refused in {s:?}",
                        c as u32
                    ));
                }
            }
        }
        for _ in 0..4 {
            let k = rng.random_range(0..=n.min(12) as usize);
            let text: String = (0..k)
                .map(|_| plain[rng.random_range(0..plain.len())])
                .collect();
            if !step_bytes(a, s, text.as_bytes()) {
                return Err(format!("plain hint {n} but {text:?} refused in {s:?}"));
            }
        }
    }
    Ok(())
}

/// The `plain_key` promise against the first state met with the same key.
fn check_key(
    a: &Automaton,
    s: &<Automaton as ByteAutomaton>::State,
    seen: &mut std::collections::HashMap<u64, (<Automaton as ByteAutomaton>::State, u32)>,
    plain: &[char],
    rng: &mut impl Rng,
) -> Result<(), String> {
    let Some(k) = a.plain_key(s) else {
        return Ok(());
    };
    let (key, n, t) = (k.key, k.n, k.table);
    let Some((other, m)) = seen.get(&key) else {
        seen.insert(key, (s.clone(), n));
        return Ok(());
    };
    // Characters patterns tell apart (`\s`, ECMA's `.`), half of the time.
    let tricky = [' ', '\u{2028}', '\u{a0}', 'a', '0', '-', '\u{e9}'];
    for _ in 0..6 {
        let k = rng.random_range(1..=n.min(*m).min(10) as usize);
        let text: String = (0..k)
            .map(|_| {
                if rng.random_bool(0.5) {
                    tricky[rng.random_range(0..tricky.len())]
                } else {
                    plain[rng.random_range(0..plain.len())]
                }
            })
            .collect();
        let (x, y) = (
            step_bytes(a, s, text.as_bytes()),
            step_bytes(a, other, text.as_bytes()),
        );
        let by_table = text
            .bytes()
            .try_fold(t.state, |q, b| {
                let q2 = t.trans[q as usize + t.classes[b as usize] as usize];
                (q2 != 0).then_some(q2)
            })
            .is_some();
        if x != by_table {
            return Err(format!(
                "plain key {key:#x}: {text:?} accepted {x} by step but {by_table} by the key's table (n {n}) in {s:?}"
            ));
        }
        if x != y {
            return Err(format!(
                "plain key {key:#x}: {text:?} accepted {x} here (n {n}) but {y} in {other:?} (n {m}); here is {s:?}"
            ));
        }
    }
    Ok(())
}

/// Random walks; every state on the way is checked. Bytes are drawn from what `step`
/// accepts, printable ASCII twice as often, so strings, numbers and containers are
/// all entered; past `soft_len` the walk follows the shortest completion.
fn walk_and_check(a: &Automaton, walks: usize, seed: u64) -> Result<usize, String> {
    let plain = plain_chars();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut checked = 0;
    let mut keyed: std::collections::HashMap<u64, (<Automaton as ByteAutomaton>::State, u32)> =
        Default::default();
    for _ in 0..walks {
        let soft_len = rng.random_range(8..160);
        let mut s = a.start();
        let mut text = Vec::new();
        loop {
            check_state(a, &s, &plain, &mut rng)
                .map_err(|e| format!("after {:?}: {e}", String::from_utf8_lossy(&text)))?;
            check_key(a, &s, &mut keyed, &plain, &mut rng)
                .map_err(|e| format!("after {:?}: {e}", String::from_utf8_lossy(&text)))?;
            checked += 1;
            if a.is_accepting(&s) && (text.len() >= soft_len || rng.random_bool(0.1)) {
                break;
            }
            let b = if text.len() >= soft_len {
                match a.shortest_completion(&s).first() {
                    Some(&b) => b,
                    None => break,
                }
            } else {
                let ok: Vec<u8> = (0..=255u8).filter(|&b| a.step(&s, b).is_some()).collect();
                if ok.is_empty() {
                    break;
                }
                let printable: Vec<u8> = ok
                    .iter()
                    .copied()
                    .filter(|b| (0x20..0x7F).contains(b))
                    .collect();
                if !printable.is_empty() && rng.random_bool(0.67) {
                    printable[rng.random_range(0..printable.len())]
                } else {
                    ok[rng.random_range(0..ok.len())]
                }
            };
            s = a.step(&s, b).ok_or("walk byte refused")?;
            text.push(b);
        }
    }
    Ok(checked)
}

fn corpus() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fixtures"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
    files.sort();
    let mut bench = Vec::new();
    if let Ok(dirs) = std::fs::read_dir(shared().join("data/jsonschemabench")) {
        for d in dirs.flatten() {
            if let Ok(fs) = std::fs::read_dir(d.path()) {
                bench.extend(
                    fs.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|e| e == "json")),
                );
            }
        }
    }
    bench.sort();
    if bench.is_empty() {
        eprintln!(
            "no JSONSchemaBench schemas under {:?}: fixtures only",
            shared()
        );
    }
    let n = env_usize("FORMWORK_SCHEMAS", 40);
    if n > 0 && bench.len() > n {
        let step = bench.len() as f64 / n as f64;
        bench = (0..n)
            .map(|i| bench[(i as f64 * step) as usize].clone())
            .collect();
    }
    files.extend(bench);
    files
}

#[test]
fn allowed_bytes_and_plain_hint_match_step() {
    let walks = env_usize("FORMWORK_WALKS", 3);
    let (mut schemas, mut states) = (0, 0);
    let mut failures = Vec::new();
    for (i, f) in corpus().iter().enumerate() {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let Ok(schema) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        for (k, ws) in [Whitespace::Compact, Whitespace::Flexible { max_run: 2 }]
            .into_iter()
            .enumerate()
        {
            let cfg = Config {
                whitespace: ws,
                ..Config::default()
            };
            let Ok(a) = compile(&schema, &cfg) else {
                continue;
            };
            schemas += 1;
            match walk_and_check(&a, walks, (i * 2 + k) as u64) {
                Ok(n) => states += n,
                Err(e) => failures.push(format!("{f:?} ({ws:?}): {e}")),
            }
        }
    }
    eprintln!("{schemas} compiled schemas, {states} states checked");
    assert!(schemas >= 4, "the fixtures did not compile");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
