//! `formwork serve`'s start-up checks, without a model: flags it refuses (one line,
//! exit 2, before it listens) and the warning on a public bind without an API key.
//! The model named here does not exist, so each server exits 2 right after binding:
//! what it printed before is what the test reads.

use std::process::{Command, Output};

fn serve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "/nonexistent/formwork-test.gguf",
        ])
        .args(args)
        .env_remove("FORMWORK_API_KEY")
        .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
        .output()
        .expect("run formwork serve")
}

fn stderr_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A queue too long for the admission semaphore: one line and exit 2, not a panic
/// (exit 101). See: issue 48, "a huge --max-queue panics the server".
#[test]
fn a_huge_max_queue_is_refused_at_start_up() {
    for q in ["1000001", &usize::MAX.to_string()] {
        let o = serve(&["--max-queue", q]);
        let lines = stderr_lines(&o);
        assert_eq!(o.status.code(), Some(2), "{lines:?}");
        assert_eq!(lines, [format!("error: --max-queue {q}: at most 1000000")]);
    }
}

#[test]
fn zero_compile_slots_and_negative_timeouts_are_refused() {
    for (args, line) in [
        (
            &["--compile-slots", "0"][..],
            "error: --compile-slots 0: at least 1",
        ),
        (
            &["--header-timeout=-1"][..],
            "error: --header-timeout -1: must be a number of seconds, 0 or more",
        ),
        (
            &["--request-timeout", "NaN"][..],
            "error: --request-timeout NaN: must be a number of seconds, 0 or more",
        ),
    ] {
        let o = serve(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr_lines(&o), [line], "{args:?}");
    }
}

/// Beyond loopback with no key: one warning line, once. On loopback, or with a key,
/// none.
#[test]
fn a_public_bind_without_a_key_warns_once() {
    let warnings = |args: &[&str]| -> Vec<String> {
        let o = serve(args);
        // The model does not exist: it exits 2 after listening.
        assert_eq!(o.status.code(), Some(2), "{:?}", stderr_lines(&o));
        stderr_lines(&o)
            .into_iter()
            .filter(|l| l.starts_with("warning:"))
            .collect()
    };
    let w = warnings(&["--host", "0.0.0.0"]);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("warning: listening on 0.0.0.0:") && w[0].contains("without --api-key"),
        "{w:?}"
    );
    assert_eq!(warnings(&["--host", "127.0.0.1"]), Vec::<String>::new());
    assert_eq!(
        warnings(&["--host", "0.0.0.0", "--api-key", "sekret"]),
        Vec::<String>::new()
    );
}
