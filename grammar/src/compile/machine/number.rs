//! Number frames: the text so far in `buf`, judged by [`crate::num`] (exact bounds,
//! `multipleOf`, canonical form). A number has no closing byte, so where it may end the
//! frame below also takes the next byte.

use super::{add, Frame, Machine, Thread};
use crate::num;

impl Machine {
    /// A number frame takes `b` as its next character, and where the number may end
    /// here, the frame below takes `b` instead (both threads live on).
    pub(super) fn num_step(
        &self,
        mut t: Thread,
        spec: u32,
        buf: &[u8],
        b: u8,
        out: &mut Vec<Thread>,
    ) {
        let ns = &self.ir.nums[spec as usize];
        if num::allows(ns, buf, b) {
            let mut nb = buf.to_vec();
            nb.push(b);
            num::canonical(ns, &mut nb);
            let mut t2 = t.clone();
            *t2.last_mut().unwrap() = Frame::Num { spec, buf: nb };
            out.push(t2);
        }
        if num::accepting(ns, buf) {
            t.pop();
            self.child_done(&mut t);
            self.advance(t, b, out);
        }
    }

    /// The bytes a number frame takes, and where it may end, the bytes the frame
    /// below takes after it.
    pub(super) fn num_bytes(&self, below: &[Frame], spec: u32, buf: &[u8], set: &mut [u64; 4]) {
        let ns = &self.ir.nums[spec as usize];
        // `num::allows` re-serialises the prefix: nothing else passes. Only a far
        // number (`NumSpec::exp`) writes an `e`.
        let bytes: &[u8] = if ns.exp > 0 {
            b"-.0123456789e"
        } else {
            b"-.0123456789"
        };
        for &b in bytes {
            if num::allows(ns, buf, b) {
                add(set, b);
            }
        }
        if num::accepting(ns, buf) {
            if let Some((parent, rest)) = below.split_last() {
                let mut p = vec![parent.clone()];
                self.child_done(&mut p);
                self.top_bytes(rest, &p[0], set);
            }
        }
    }
}
