//! Literal frames (`const`, `enum`, `true`, `false`, `null`, literal items under
//! `uniqueItems`): the position in one compact JSON text, one byte at a time.

use super::{add, Frame, Machine, Thread};

impl Machine {
    /// A literal frame takes the next byte of its text, or nothing.
    pub(super) fn lit_step(&self, mut t: Thread, id: u32, pos: u32, b: u8, out: &mut Vec<Thread>) {
        let lit = &self.ir.lits[id as usize];
        if lit.get(pos as usize) == Some(&b) {
            if pos as usize + 1 == lit.len() {
                self.finish(t, out);
            } else {
                *t.last_mut().unwrap() = Frame::Lit { id, pos: pos + 1 };
                out.push(t);
            }
        }
    }

    /// Thread `t` after the first byte of literal `id`.
    pub(super) fn lit_started(&self, mut t: Thread, id: u32) -> Thread {
        if self.ir.lits[id as usize].len() == 1 {
            self.child_done(&mut t);
        } else {
            t.push(Frame::Lit { id, pos: 1 });
        }
        t
    }

    /// The byte a literal frame takes next.
    pub(super) fn lit_bytes(&self, id: u32, pos: u32, set: &mut [u64; 4]) {
        if let Some(&b) = self.ir.lits[id as usize].get(pos as usize) {
            add(set, b);
        }
    }
}
