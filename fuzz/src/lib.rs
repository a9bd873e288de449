//! The fuzz targets' logic, as plain functions: the libFuzzer binaries in `fuzz_targets/`
//! call them, and so do the stable smoke tests (which include these files by path).

#[cfg(feature = "app")]
pub mod app_targets;
pub mod grammar_targets;
