//! `--model org/name` resolves through an hf-hub cache offline. The test lays out the cache
//! itself (refs/main + snapshots/<rev>/<file>.gguf, as hf-hub and huggingface_hub write it),
//! with a symlink to the fetched SmolLM2 file when it is present and a stub file otherwise.
//!
//! One test function: it sets HF_HUB_CACHE, which is process-wide.

#[path = "../../tests/support/skip.rs"]
mod skip;
use std::path::Path;

use formwork_models::registry::{self, Source};
use formwork_models::runtime::{load, DeviceChoice};

fn lay_out(root: &Path, repo: &str, rev: &str, files: &[(&str, &Path)]) {
    let folder = root.join(format!("models--{}", repo.replace('/', "--")));
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::write(folder.join("refs").join("main"), rev).unwrap();
    let snap = folder.join("snapshots").join(rev);
    std::fs::create_dir_all(&snap).unwrap();
    for (name, target) in files {
        let link = snap.join(name);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::os::unix::fs::symlink(target, &link).unwrap();
    }
}

#[test]
fn hf_repo_ids_resolve_offline_from_the_cache() {
    let root = std::env::temp_dir().join(format!("formwork-hf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::env::set_var("HF_HUB_CACHE", &root);
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");

    let smol = registry::model_path(registry::lookup("smollm2-135m").unwrap());
    let stub = root.join("stub.gguf");
    std::fs::write(&stub, b"GGUF").unwrap();
    let real = smol.is_file();
    let target = if real { smol.clone() } else { stub.clone() };

    let rev = "0123456789abcdef0123456789abcdef01234567";
    lay_out(
        &root,
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
        rev,
        &[("smollm2-135m-instruct-q4_1.gguf", &target)],
    );
    lay_out(
        &root,
        "org/two-files",
        rev,
        &[
            ("a.Q4.gguf", &stub),
            ("sub/b.Q8.gguf", &stub),
            ("README.md", &stub),
        ],
    );
    lay_out(&root, "org/no-gguf", rev, &[("config.json", &stub)]);

    // One .gguf in the snapshot: picked.
    let r = registry::resolve("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF").unwrap();
    assert_eq!(
        r.source,
        Source::HfHub {
            repo: "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF".into()
        }
    );
    assert!(
        r.path
            .ends_with(format!("snapshots/{rev}/smollm2-135m-instruct-q4_1.gguf")),
        "{}",
        r.path.display()
    );
    assert_eq!(
        std::fs::canonicalize(&r.path).unwrap(),
        std::fs::canonicalize(&target).unwrap()
    );

    // Two: an error that lists them and says how to pick; `repo:FILE` picks.
    let err = registry::resolve("org/two-files")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("a.Q4.gguf")
            && err.contains("sub/b.Q8.gguf")
            && err.contains("org/two-files:FILE"),
        "{err}"
    );
    let r = registry::resolve("org/two-files:sub/b.Q8.gguf").unwrap();
    assert!(r.path.ends_with("sub/b.Q8.gguf"));
    let err = registry::resolve("org/two-files:c.gguf")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("`c.gguf` is not in the snapshot"), "{err}");

    // None, or not cached at all: one line that says the cache is read offline.
    let err = registry::resolve("org/no-gguf").err().unwrap().to_string();
    assert!(err.contains("has no .gguf file"), "{err}");
    let err = registry::resolve("org/absent").err().unwrap().to_string();
    assert!(
        err.contains("`org/absent` is not in the hf-hub cache") && err.contains("offline"),
        "{err}"
    );
    assert!(!err.contains('\n'));

    // The resolved file loads and runs.
    if real {
        let mut m = load(
            "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
            DeviceChoice::Cpu,
        )
        .unwrap();
        assert_eq!(m.name, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF");
        let ids = m.tokenizer.encode("Hello").unwrap();
        let logits = m.model.forward(&ids, 0).unwrap();
        assert_eq!(logits.len(), 49152);
    } else {
        skip::skipped(format_args!(
            "SKIPPED (load part): {} is absent; run `formwork models fetch smollm2-135m`",
            smol.display()
        ));
    }
    let _ = std::fs::remove_dir_all(&root);
}
