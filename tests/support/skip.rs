//! How a test says it skipped (shared by the test crates of the workspace through
//! `#[path]`): the line goes to stderr as before, and, when `FORMWORK_SKIP_LOG` names a
//! file (scripts/test sets it), is appended there with the test binary's name, so that
//! scripts/test can count the skips of a run and CI can fail on one it did not expect
//! (`.ci/expected-skips`). A skip that only printed would be captured by the harness
//! and the test counted as passed, unseen.

#![allow(dead_code)]

use std::io::Write;

/// Report a skip: `msg` starts with `SKIPPED`, says what is missing and how to get it.
pub fn skipped(msg: std::fmt::Arguments) {
    let msg = msg.to_string();
    eprintln!("{msg}");
    let Some(path) = std::env::var_os("FORMWORK_SKIP_LOG") else {
        return;
    };
    let exe = std::env::current_exe().ok();
    let name = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str())
        // Cargo names test binaries `NAME-HASH`.
        .map(|s| s.rsplit_once('-').map_or(s, |(n, _)| n))
        .unwrap_or("?")
        .to_string();
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("{name}::{test}: {}\n", msg.replace('\n', " "));
    // One write of a whole line with O_APPEND: lines of parallel tests do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
