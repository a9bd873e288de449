//! The error type of the model runtime. Every variant names the file or field
//! at fault and, where there is one, the fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file {path}: {msg}")]
    File { path: PathBuf, msg: String },
    #[error("GGUF metadata `{key}`: {msg}")]
    Metadata { key: String, msg: String },
    #[error("unknown model `{name}`: use a registry name ({known}), a path to a .gguf file, or a Hugging Face repo id")]
    UnknownModel { name: String, known: String },
    #[error(
        "unsupported architecture `{arch}` (GGUF metadata `general.architecture`) in {path}: formwork runs llama (SmolLM2, Llama 3.x, Mistral 7B), qwen2, qwen3, gemma2, gemma3 and phi3 (Phi-3, 3.5)"
    )]
    UnsupportedArch { arch: String, path: PathBuf },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    ChatTemplate(String),
    #[error("fetch {name}: {msg}")]
    Fetch { name: String, msg: String },
    #[error("device: {0}")]
    Device(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
