//! formwork-models: the only crate that knows candle, tokenizers and hf-hub.
//!
//! GGUF file -> (candle weights, tokenizer built from GGUF metadata, chat template)
//! -> `LanguageModel` that returns the logits of the last position.
//! The grammar crate never sees this crate: the root crate hands it the raw bytes
//! of every token and the EOS ids.

pub mod chat;
pub mod error;
pub mod graph;
pub mod group;
pub mod llama;
pub mod quant;
pub mod registry;
pub mod runtime;
pub mod synth;
pub mod tokenizer;

pub use error::{ModelError, Result};
