//! Writes a registry model's tokenizer as a Hugging Face `tokenizer.json` (the one formwork
//! builds from the GGUF metadata), and beside it `NAME.meta.json` with the EOS ids and the
//! vocabulary size. The Python package's tests and benchmark read these files, so formwork
//! and llguidance see the same tokenizer (python/README.md).
//!
//! `cargo run --example tokenizer_json -- MODEL OUT_DIR` (MODEL: a registry name or a GGUF
//! path); writes `OUT_DIR/MODEL.tokenizer.json` and `OUT_DIR/MODEL.meta.json`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use formwork_models::tokenizer::GgufTokenizer;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, out] = args.as_slice() else {
        bail!("usage: tokenizer_json MODEL OUT_DIR (MODEL: a registry name or a GGUF path)");
    };
    let (name, path) = match formwork_models::registry::lookup(model) {
        Some(info) => (
            info.name.to_string(),
            formwork_models::registry::model_path(info),
        ),
        None => {
            let p = PathBuf::from(model);
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
            (stem.unwrap_or_else(|| "model".into()), p)
        }
    };
    let tok = GgufTokenizer::from_file(&path).with_context(|| path.display().to_string())?;
    let json = tok
        .inner()
        .to_string(false)
        .map_err(|e| anyhow::anyhow!("serialising the tokenizer of {}: {e}", path.display()))?;
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).with_context(|| out.display().to_string())?;
    let tj = out.join(format!("{name}.tokenizer.json"));
    std::fs::write(&tj, json).with_context(|| tj.display().to_string())?;
    let meta = serde_json::json!({
        "eos_ids": tok.eos_ids(),
        "vocab_size": tok.vocab_size(),
        "special_ids": (0..tok.vocab_size() as u32).filter(|&i| tok.is_special(i)).collect::<Vec<_>>(),
    });
    let mj = out.join(format!("{name}.meta.json"));
    std::fs::write(&mj, meta.to_string()).with_context(|| mj.display().to_string())?;
    println!("{} {}", tj.display(), mj.display());
    Ok(())
}
