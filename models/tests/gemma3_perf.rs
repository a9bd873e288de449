//! Load time, peak RSS, prefill and decode speed of the Gemma 3 270M model on the model
//! graph (candle's path), on candle's CPU device, or with `FORMWORK_PERF_BACKEND=formwork`
//! on formwork's CPU file, so that the graph's cost on the CPU is known beside it.
//! A measurement, not a timed test: it asserts nothing about speed and is ignored
//! by default. Run it alone, once per thread count:
//!
//! ```text
//! CANDLE_BARRIER_POOL_SPIN_LIMIT=0 RAYON_NUM_THREADS=1 \
//!   cargo test --release -p formwork-models --test gemma3_perf -- --ignored --nocapture
//! ```

mod common;

use std::time::Instant;

use formwork_models::runtime::{load_file, Backend, DeviceChoice, LoadOptions};

/// Peak resident set size of this process in MiB (`VmHWM`), Linux only.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn gemma3_load_prefill_decode() {
    let Some(path) = common::gemma3_path() else {
        common::skip::skipped(format_args!("SKIPPED: Gemma 3 GGUF not found; run `formwork models fetch gemma3-270m` or set FORMWORK_GEMMA3_GGUF"));
        return;
    };
    let requantize = std::env::var("FORMWORK_GEMMA3_REQUANTIZE").as_deref() != Ok("0");
    let backend = match std::env::var("FORMWORK_PERF_BACKEND").as_deref() {
        Ok("formwork") => Backend::Formwork,
        _ => Backend::Candle,
    };
    let threads = candle_core::utils::get_num_threads();
    let t0 = Instant::now();
    let opts = LoadOptions {
        device: DeviceChoice::Cpu,
        backend,
        requantize,
        ..LoadOptions::default()
    };
    let mut m = load_file(&path, "gemma3-270m", opts).unwrap().model;
    let load = t0.elapsed().as_secs_f64();
    let rss_load = peak_rss_mib().unwrap_or(f64::NAN);

    // A 128-token prompt of ordinary text-like ids (any ids measure the same work).
    let prompt: Vec<u32> = std::iter::once(2u32)
        .chain((0..127).map(|i| 1000 + (i * 7919) % 20000))
        .collect();
    // Warm-up (thread pool, allocations), then the measured prefill.
    m.forward(&prompt[..8], 0).unwrap();
    m.clear_kv_cache();
    let t1 = Instant::now();
    let mut logits = m.forward(&prompt, 0).unwrap();
    let prefill = t1.elapsed().as_secs_f64();

    let n_decode = 64;
    let t2 = Instant::now();
    for i in 0..n_decode {
        let t = common::argmax(&logits);
        logits = m.forward(&[t], prompt.len() + i).unwrap();
    }
    let decode = t2.elapsed().as_secs_f64();
    eprintln!(
        "gemma3-270m {backend:?} threads={threads} requantize={requantize}: load {load:.2} s (peak RSS {rss_load:.0} MiB), \
         prefill {} tok in {prefill:.2} s = {:.1} tok/s, decode {n_decode} tok = {:.1} tok/s, peak RSS {:.0} MiB",
        prompt.len(),
        prompt.len() as f64 / prefill,
        n_decode as f64 / decode,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
}
