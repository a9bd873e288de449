//! scripts/check-skips, the last step of scripts/test: under CI=true a skip that
//! .ci/expected-skips does not name fails the run; a named one does not; an entry without
//! its reason is an error. Also: the repository's own .ci/expected-skips reads.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(log: &str, expected: &Path, ci: bool) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("formwork-skips-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join(format!("skips-{}.log", log.len()));
    std::fs::write(&log_path, log).unwrap();
    let out = Command::new(root().join("scripts/check-skips"))
        .arg(&log_path)
        .arg(expected)
        .env("CI", if ci { "true" } else { "" })
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn an_unexpected_skip_fails_ci_and_an_expected_one_does_not() {
    let dir = std::env::temp_dir().join(format!("formwork-skips-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let expected = dir.join("expected");
    std::fs::write(&expected, "# the CPU decides\n^a::b: SKIPPED \\(VNNI\n").unwrap();
    let named = "a::b: SKIPPED (VNNI part): no VNNI\n";
    let other = "c::d: SKIPPED: no Python\n";

    let (code, text) = check(named, &expected, true);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 skips") && text.contains("the CPU decides"),
        "{text}"
    );

    let (code, text) = check(&format!("{named}{other}{other}"), &expected, true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("2x c::d") && text.contains("NOT EXPECTED"),
        "{text}"
    );
    // Outside CI the same skips are listed, and the run goes on.
    let (code, text) = check(other, &expected, false);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("c::d"), "{text}");
    // No skips at all.
    assert_eq!(check("", &expected, true).0, Some(0));

    std::fs::write(&expected, "^a::b\n").unwrap();
    let (code, text) = check(named, &expected, true);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("without a `#` line"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_expected_skips_of_the_repository_read() {
    let (code, text) = check(
        "formwork_models::quant::tests::every_kernel_matches_the_reference: SKIPPED (VNNI part of x): ...\n\
         pytest: SKIPPED [3] python/tests/test_engines.py:64: SKIPPED (vllm not installed; not a pass): run x\n",
        &root().join(".ci/expected-skips"),
        true,
    );
    assert_eq!(code, Some(0), "{text}");
    let (code, _) = check(
        "compile_pydantic::x: SKIPPED: no Python\n",
        &root().join(".ci/expected-skips"),
        true,
    );
    assert_eq!(code, Some(1));
}
