//! formwork: constrained decoding for JSON Schema.
pub mod cli;
