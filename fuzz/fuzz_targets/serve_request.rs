#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| formwork_fuzz::app_targets::serve_request(data));
