//! formwork: constrained decoding for JSON Schema.
pub mod cli;
pub mod validate;
