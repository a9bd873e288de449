//! Decode tokens/s of one batched forward pass by batch size (a benchmark, not a test).
//!
//! B snapshots of one model each hold the same prompt (about 30 tokens) in their KV
//! cache, then take STEPS decode steps together: one `runtime::forward_batch` per step
//! with one new token per sequence. Prints ms per pass and tokens/s for each B.
//!
//!     cargo run --release -p formwork-models --example batch_speed -- smollm2-135m [auto|formwork|candle] [B...]
//!
//! The second argument picks the model file (`runtime::Backend`, default auto), so the
//! CPU file and candle's can be compared in one run; the rest are the batch sizes
//! (default 1 2 4 8 16). First it prints the prefill tokens/s of `benches/prompt.txt`.
//!
//! Threads: `CANDLE_NUM_THREADS` (default: the physical cores).

use std::time::Instant;

use formwork_models::runtime::{
    forward_batch, load_with, Backend, DeviceChoice, LanguageModel, LoadOptions,
};

const STEPS: usize = 32;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args
        .first()
        .cloned()
        .unwrap_or_else(|| "smollm2-135m".into());
    let backend = match args.get(1).map(String::as_str) {
        None | Some("auto") => Backend::Auto,
        Some("formwork") => Backend::Formwork,
        Some("candle") => Backend::Candle,
        Some(other) => panic!("backend `{other}`: expected auto, formwork or candle"),
    };
    let sizes: Vec<usize> = match args.get(2..) {
        Some(b) if !b.is_empty() => b.iter().map(|s| s.parse().expect("a batch size")).collect(),
        _ => vec![1, 2, 4, 8, 16],
    };
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let options = LoadOptions {
        device: DeviceChoice::Cpu,
        backend,
        ..LoadOptions::default()
    };
    let m = load_with(&name, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let ids = m
        .tokenizer
        .encode("<|im_start|>user\nTell me a long story about a dragon and a knight.<|im_end|>\n<|im_start|>assistant\n")
        .expect("encode");
    // Prefill first: the decode bench's prompt (benches/prompt.txt, about 200 tokens) in
    // one forward pass on an empty cache, best of three.
    let long = m
        .tokenizer
        .encode(include_str!("../../benches/prompt.txt"))
        .expect("encode");
    let best = (0..3)
        .map(|_| {
            let mut s = m.model.snapshot();
            let started = Instant::now();
            s.forward(&long, 0).expect("prefill");
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    println!(
        "prefill: {} tokens in {:.1} ms = {:.1} tok/s (best of 3)\n",
        long.len(),
        best * 1000.0,
        long.len() as f64 / best
    );
    println!("| model | file | B | ms per pass | tokens/s | × B=1 |");
    println!("|---|---|---|---|---|---|");
    let mut base = 0.0;
    for b in sizes {
        let mut models: Vec<Box<dyn LanguageModel>> = (0..b)
            .map(|_| {
                let mut s = m.model.snapshot();
                s.forward(&ids, 0).expect("prefill");
                s
            })
            .collect();
        let started = Instant::now();
        for i in 0..STEPS {
            let tok = [100 + i as u32];
            let feeds: Vec<(&[u32], usize)> = (0..b).map(|_| (&tok[..], ids.len() + i)).collect();
            for r in forward_batch(&mut models, &feeds) {
                r.expect("forward");
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let tps = (b * STEPS) as f64 / secs;
        if b == 1 {
            base = tps;
        }
        println!(
            "| {name} | {backend:?} | {b} | {:.1} | {tps:.0} | {:.2} |",
            secs * 1000.0 / STEPS as f64,
            tps / base
        );
    }
}
