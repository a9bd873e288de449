//! This machine's memory read bandwidth, the bound of a decode step on a large model: a
//! decode reads every layer matrix and the output matrix once per token, so
//! `bytes of weights per token x tokens/s` over this figure is the share of the bound a
//! decode reaches (`benches/family_decode.sh` prints it beside each decode figure).
//!
//!     cargo bench --bench bandwidth            # 1 and 2 threads, a 1 GiB buffer
//!     BANDWIDTH_MB=2048 BANDWIDTH_THREADS="1 2 4" cargo bench --bench bandwidth
//!
//! STREAM-style, read only (a decode writes next to nothing): each thread sums its own
//! contiguous slice of a buffer far larger than the caches with 8 independent u64 lanes
//! (the compiler vectorises it; the loads, not the adds, bound it), the buffer touched
//! first so that its pages exist. `BANDWIDTH_RUNS` (default 9) passes per thread count,
//! in GB/s (10^9 bytes). Prints one markdown row per thread count (best, median, worst
//! pass) and, last, a line `bandwidth_gbs T=...` that scripts read: the best pass, as
//! STREAM reports its "best rate". The best, not the median, is the bound: on this
//! virtual machine a pass varies by a third from one run to the next (2026-12-07, one
//! thread: medians of 22.7 and 31.5 GB/s in runs minutes apart), and a decode run beside
//! a low median read more than it (32.4 GB/s), which a bound cannot allow.

use std::time::Instant;

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// The sum of `words` in 8 lanes: 8 independent chains, so the loads overlap.
fn read(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    acc.iter().chain(tail).fold(0, |a, &b| a.wrapping_add(b))
}

/// One pass of `threads` threads over `buf`, each over its own slice: seconds, and the sum
/// (kept, so the reads are not optimised away).
fn pass(buf: &[u64], threads: usize) -> (f64, u64) {
    let per = buf.len().div_ceil(threads);
    let started = Instant::now();
    let sum = std::thread::scope(|s| {
        let hs: Vec<_> = buf.chunks(per).map(|c| s.spawn(move || read(c))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold(0u64, u64::wrapping_add)
    });
    (started.elapsed().as_secs_f64(), sum)
}

fn main() {
    let mb: usize = env_or("BANDWIDTH_MB", "1024")
        .parse()
        .expect("BANDWIDTH_MB: a number of MiB");
    let runs: usize = env_or("BANDWIDTH_RUNS", "9")
        .parse()
        .expect("BANDWIDTH_RUNS: a number");
    let threads: Vec<usize> = env_or("BANDWIDTH_THREADS", "1 2")
        .split_whitespace()
        .map(|t| t.parse().expect("BANDWIDTH_THREADS: numbers"))
        .collect();
    let words = mb * (1 << 20) / 8;
    // Distinct values, written once: every page is backed before the first timed pass.
    let buf: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let bytes = (words * 8) as f64;
    println!("| threads | best read GB/s of {runs} passes | median | worst |");
    println!("|---|---|---|---|");
    let mut keep = 0u64;
    let mut line = String::from("bandwidth_gbs");
    for &t in &threads {
        let (_, s) = pass(&buf, t); // warm-up
        keep = keep.wrapping_add(s);
        let mut gbs: Vec<f64> = (0..runs)
            .map(|_| {
                let (secs, s) = pass(&buf, t);
                keep = keep.wrapping_add(s);
                bytes / secs / 1e9
            })
            .collect();
        gbs.sort_by(f64::total_cmp);
        let (worst, median, best) = (gbs[0], gbs[gbs.len() / 2], gbs[gbs.len() - 1]);
        println!("| {t} | {best:.1} | {median:.1} | {worst:.1} |");
        line += &format!(" T{t}={best:.2}");
    }
    println!("{line}");
    // The sums decide nothing; printing their fold keeps every read.
    eprintln!("(checksum {keep:x}, {mb} MiB buffer)");
}
