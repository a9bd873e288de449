//! GB/s of the quantised matmul kernels for one decoding token (a benchmark, not a test).
//!
//! Each format gets a stack of matrices shaped like Qwen2.5-0.5B's (896 columns, or
//! 4864 for the k-quants' ffn_down) of about 192 MB in all, more than the caches, so the
//! weights stream from memory as in a real forward pass. One thread; prints the best of
//! five passes over the stack per kernel, in GB/s of weights and ns per 32 weights.
//!
//!     cargo run --release -p formwork-models --example kernel_speed [-- FORMAT...]
//!
//! `KERNEL_MB` sets the size of the stack (1 fits in L2: the kernels' compute speed).

use std::time::Instant;

use formwork_models::quant::{Format, Isa, Q8Acts, QMatrix};

fn main() {
    let want: Vec<String> = std::env::args().skip(1).collect();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let formats = [
        (Format::Q5_0, "Q5_0", 4864, 896),
        (Format::Q8_0, "Q8_0", 4864, 896),
        (Format::Q4_1, "Q4_1", 4864, 896),
        (Format::Q4_K, "Q4_K", 896, 4864),
        (Format::Q6_K, "Q6_K", 896, 4864),
    ];
    println!("| format | isa | GB/s | ns per 32 weights |");
    println!("|---|---|---|---|");
    for (f, name, rows, cols) in formats {
        if !want.is_empty() && !want.iter().any(|w| w == name) {
            continue;
        }
        let bytes = f.row_bytes(cols) * rows;
        let mb: usize = std::env::var("KERNEL_MB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(192);
        let count = ((mb << 20) / bytes).max(1);
        let mats: Vec<QMatrix> = (0..count)
            .map(|_| {
                let mut data: Vec<u8> = (0..bytes).map(|_| next() as u8).collect();
                // Small f16 scales (0x2000 is about 0.0078), so no sum overflows to inf.
                for b in data.chunks_exact_mut(f.block_bytes()) {
                    match f {
                        Format::Q6_K => b[208..210].copy_from_slice(&[0, 0x20]),
                        _ => b[0..2].copy_from_slice(&[0, 0x20]),
                    }
                    if f == Format::Q4_K || f == Format::Q4_1 {
                        b[2..4].copy_from_slice(&[0, 0x20]);
                    }
                }
                QMatrix::new(f, rows, cols, data).unwrap()
            })
            .collect();
        let x: Vec<f32> = (0..cols)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let mut acts = Q8Acts::default();
        acts.quantize(&x, 1, cols);
        let mut out = vec![0f32; rows];
        for isa in Isa::available() {
            let mut best = f64::MAX;
            let mut check = 0f32;
            for _ in 0..5 {
                let t = Instant::now();
                for m in &mats {
                    m.dot_rows(isa, 0, &acts, &mut out);
                    check += out[0];
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            let total = (bytes * count) as f64;
            let blocks = (rows * cols * count / 32) as f64;
            println!(
                "| {name} | {isa:?} | {:.2} | {:.2} |{}",
                total / best / 1e9,
                best * 1e9 / blocks,
                if check.is_finite() {
                    ""
                } else {
                    " (not finite)"
                }
            );
        }
    }
}
