//! Random valid instances of a compiled schema, for benchmarks and tests: a walk of
//! the automaton to acceptance that prefers printable ASCII, heads for the shortest
//! completion now and then, and completes once past a soft length.

use crate::ByteAutomaton;

/// A small deterministic generator (xorshift64*), so instances are reproducible
/// from a seed without a dependency. The one RNG of the benchmarks, the fuzz smoke and
/// the matcher tests (`tests/matcher_support` re-exports it).
#[derive(Clone, Debug)]
pub struct SplitRng(u64);

impl SplitRng {
    pub fn new(seed: u64) -> SplitRng {
        // splitmix64 of the seed, so that nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        SplitRng((z ^ (z >> 31)) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A random text the automaton accepts to the end. Past `soft_max` bytes the walk
/// finishes along the shortest completion. Returns `None` if the automaton refuses
/// its own shortest completion (a compiler bug the caller should report).
pub fn random_instance<A: ByteAutomaton>(a: &A, seed: u64, soft_max: usize) -> Option<Vec<u8>> {
    let mut rng = SplitRng::new(seed);
    let mut s = a.start();
    let mut out = Vec::new();
    loop {
        if a.is_accepting(&s) && (out.len() >= soft_max || rng.below(3) == 0) {
            return Some(out);
        }
        if out.len() >= soft_max || rng.below(3) == 0 {
            let c = a.shortest_completion(&s);
            if out.len() >= soft_max {
                for &b in &c {
                    s = a.step(&s, b)?;
                }
                out.extend_from_slice(&c);
                return a.is_accepting(&s).then_some(out);
            }
            if let Some(&b) = c.first() {
                s = a.step(&s, b)?;
                out.push(b);
                continue;
            }
        }
        let mut printable = Vec::new();
        let mut other = Vec::new();
        for b in 0..=255u8 {
            if a.step(&s, b).is_some() {
                if (0x20..0x7F).contains(&b) {
                    printable.push(b);
                } else {
                    other.push(b);
                }
            }
        }
        let pick = if !printable.is_empty() {
            printable[rng.below(printable.len())]
        } else if !other.is_empty() {
            other[rng.below(other.len())]
        } else {
            return a.is_accepting(&s).then_some(out);
        };
        s = a.step(&s, pick)?;
        out.push(pick);
    }
}
