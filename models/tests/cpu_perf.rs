//! Prefill and decode speed of a registry model on formwork's CPU model file against the
//! candle path, in one process on the same prompt (`benches/prompt.txt`, as
//! `benches/decode_bench.sh` feeds `formwork generate`). A measurement, not a timed test:
//! it asserts nothing about speed and is ignored by default.
//!
//! ```text
//! FORMWORK_PERF_MODEL=qwen2.5-coder-0.5b RAYON_NUM_THREADS=2 \
//!   cargo test --release -p formwork-models --test cpu_perf -- --ignored --nocapture
//! ```

mod common;

use std::time::Instant;

use formwork_models::runtime::{load_with, Backend, DeviceChoice, LoadOptions};

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn cpu_file_against_candle_path() {
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let name = std::env::var("FORMWORK_PERF_MODEL").unwrap_or("qwen2.5-coder-0.5b".into());
    let info = formwork_models::registry::lookup(&name).expect("a registry model name");
    if !formwork_models::registry::model_path(info).is_file() {
        common::skip::skipped(format_args!(
            "SKIPPED: {name} is absent; run `formwork models fetch {name}`"
        ));
        return;
    }
    let prompt = include_str!("../../benches/prompt.txt");
    let gen = 64;
    for backend in [Backend::Candle, Backend::Formwork] {
        let options = LoadOptions {
            device: DeviceChoice::Cpu,
            backend,
            ..LoadOptions::default()
        };
        let mut m = load_with(&name, options).unwrap();
        let ids = m.tokenizer.encode(prompt).unwrap();
        // Warm-up (thread pool, allocations).
        m.model.forward(&ids[..8], 0).unwrap();
        let t = Instant::now();
        let mut logits = m.model.forward(&ids, 0).unwrap();
        let prefill = ids.len() as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        for i in 0..gen {
            let tok = common::argmax(&logits);
            logits = m.model.forward(&[tok], ids.len() + i).unwrap();
        }
        let decode = gen as f64 / t.elapsed().as_secs_f64();
        eprintln!(
            "{name} {backend:?}: prefill {} tokens {prefill:.1} tok/s, decode {gen} tokens {decode:.1} tok/s",
            ids.len()
        );
    }
}
