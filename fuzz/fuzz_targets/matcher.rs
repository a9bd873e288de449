#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| formwork_fuzz::grammar_targets::matcher(data));
