//! The mask walks: a depth-first walk of a flat token trie against the transition rows
//! ([`Cache::walk`]; a refused byte skips its subtree), the plain-token sets ORed in for
//! string bodies, the keyed walk on a pattern DFA's own table ([`walk_table`], two lanes
//! in lockstep), and [`Cache::compute_mask`], which chooses among them.

use super::cache::Cache;
use super::*;
use crate::automaton::{ByteAutomaton, KeyTable};
use crate::toktrie::{FlatTrie, TokTrie, TokenSet, NO_TOKEN, PLAIN_BUCKETS};

impl<A: ByteAutomaton> Cache<A> {
    /// Walks `trie` from `s`, setting every token whose bytes are accepted.
    /// With `skip_upto = Some(n)` (plain trie only) subtrees whose tokens all have at
    /// most `n` characters are skipped: the caller has ORed them in already.
    #[inline(never)]
    pub(super) fn walk(
        &mut self,
        a: &A,
        s: u32,
        trie: &FlatTrie,
        skip_upto: Option<u8>,
        out: &mut TokenSet,
    ) {
        match skip_upto {
            None => self.walk_inner::<false>(a, s, trie, 0, out),
            Some(lim) => self.walk_inner::<true>(a, s, trie, lim, out),
        }
    }

    /// The hot loop. Per node: one load of the node, one of the parent's state from the
    /// depth stack, one from the transition table; the automaton only on a miss.
    #[inline(always)]
    pub(super) fn walk_inner<const SKIP: bool>(
        &mut self,
        a: &A,
        s: u32,
        trie: &FlatTrie,
        lim: u8,
        out: &mut TokenSet,
    ) {
        let nodes = trie.nodes.as_slice();
        let maxc = trie.max_chars.as_slice();
        debug_assert!(!SKIP || maxc.len() == nodes.len());
        // Depth <= MAX_TOKEN_BYTES (255), so indices 0..=255 suffice. Per depth: the
        // state id (for a miss) and its row (chunks never move, so a row pointer stays
        // valid while misses intern new states).
        let mut stack = [0u32; 256];
        let mut rows = [std::ptr::null::<Cell<u32>>(); 256];
        stack[0] = s;
        rows[0] = self.row_ptr(s);
        let end = nodes.len();
        let mut i = 1usize;
        let words = out.words_mut();
        while i < end {
            // SAFETY: i < end = nodes.len() (and maxc has the same length when SKIP).
            let n = unsafe { *nodes.get_unchecked(i) };
            if SKIP && unsafe { *maxc.get_unchecked(i) } <= lim {
                i = n.subtree_end();
                continue;
            }
            let d = n.depth();
            // SAFETY: 1 <= d <= 255 for every non-root node.
            let b = n.byte();
            // SAFETY: `rows[d - 1]` is the 256-entry row of the state at depth d - 1.
            let mut t = unsafe { (*(*rows.get_unchecked(d - 1)).add(b as usize)).get() };
            if t == UNKNOWN {
                let prev = unsafe { *stack.get_unchecked(d - 1) };
                t = self.next_slow(a, prev, b);
            }
            if t == REFUSED {
                i = n.subtree_end();
                continue;
            }
            set_token(words, n.token());
            unsafe {
                *stack.get_unchecked_mut(d) = t;
                *rows.get_unchecked_mut(d) = self.row_ptr(t);
            }
            i += 1;
        }
    }

    /// The full mask of state `s` (EOS included when accepting), uncached.
    pub(super) fn compute_mask(
        &mut self,
        a: &A,
        s: u32,
        trie: &TokTrie,
        slot: usize,
        out: &mut TokenSet,
    ) {
        out.clear();
        let hint = self.plain(a, s);
        let key = a.plain_key(&self.states[s as usize]).filter(|k| {
            k.n.min(PLAIN_BUCKETS as u32) > hint.unwrap_or(0).min(PLAIN_BUCKETS as u32)
        });
        if let Some(k) = key {
            // Plain tokens of at most `n` characters: from the key's set when a state
            // with the same key was walked before, else one walk of the plain trie on
            // the key's table (the longer ones are walked from the state itself).
            let n = k.n.min(PLAIN_BUCKETS as u32) as usize;
            match self.keyed[slot].get(&k.key) {
                Some((kn, set)) if *kn as usize >= n => {
                    self.keyed_hits += 1;
                    let upto = trie.plain_upto[n - 1].as_words();
                    let w = out.words_mut();
                    if *kn as usize == n {
                        w.copy_from_slice(set);
                    } else {
                        for ((o, x), u) in w.iter_mut().zip(set.iter()).zip(upto) {
                            *o = x & u;
                        }
                    }
                }
                _ => {
                    walk_table(k.table, &trie.plain, n as u32, out);
                    let set: Box<[u64]> = out.as_words().into();
                    self.mask_bytes += set.len() * 8;
                    self.keyed[slot].insert(k.key, (n as u32, set));
                }
            }
            if n < PLAIN_BUCKETS {
                self.walk(a, s, &trie.plain, Some(n as u8), out);
            }
            self.walk(a, s, &trie.rest, None, out);
        } else {
            match hint {
                None => self.walk(a, s, &trie.full, None, out),
                Some(plain) => {
                    let n = plain.min(PLAIN_BUCKETS as u32) as usize;
                    if n >= 1 {
                        out.union_with(&trie.plain_upto[n - 1]);
                    }
                    if n < PLAIN_BUCKETS {
                        self.walk(a, s, &trie.plain, Some(n as u8), out);
                    }
                    self.walk(a, s, &trie.rest, None, out);
                }
            }
        }
        for &(p, d) in &trie.dups {
            if out.contains(p) {
                out.allow(d);
            }
        }
        if self.accepting(a, s) {
            for &e in trie.eos_ids() {
                out.allow(e);
            }
        }
    }

    /// Calls `f(token, end_state)` for every token accepted from `s` (full trie).
    pub(super) fn for_each_token(
        &mut self,
        a: &A,
        s: u32,
        trie: &FlatTrie,
        f: &mut dyn FnMut(&mut Self, u32, u32),
    ) {
        let nodes = &trie.nodes;
        let mut stack = vec![0u32; 257];
        stack[0] = s;
        let mut i = 1;
        while i < nodes.len() {
            let n = nodes[i];
            let d = n.depth();
            let t = self.next(a, stack[d - 1], n.byte());
            if t == REFUSED {
                i = n.subtree_end();
                continue;
            }
            if n.token() != NO_TOKEN {
                f(self, n.token(), t);
            }
            stack[d] = t;
            i += 1;
        }
    }
}

/// Sets every token of at most `max_chars` characters of `trie` whose bytes the table
/// takes from its start (see [`Cache::compute_mask`]). The hot loop of a new key: per
/// node, the parent's DFA state from a depth stack, the byte's class and one
/// transition, all in L1. That chain's latency is the cost, so the trie is cut at a
/// root child near its middle and both halves are walked in lockstep (two independent
/// chains the CPU overlaps).
pub(super) fn walk_table(t: KeyTable<'_>, trie: &FlatTrie, max_chars: u32, out: &mut TokenSet) {
    let nodes = trie.nodes.as_slice();
    let words = out.words_mut();
    let mut mid = 1usize;
    while mid < nodes.len() && mid < nodes.len() / 2 {
        mid = nodes[mid].subtree_end();
    }
    let mut a = TableLane::new(t, 1, mid);
    let mut b = TableLane::new(t, mid, nodes.len());
    let lim = max_chars.min(255) as u8;
    while a.i < a.end && b.i < b.end {
        a.step(t, nodes, lim, words);
        b.step(t, nodes, lim, words);
    }
    while a.i < a.end {
        a.step(t, nodes, lim, words);
    }
    while b.i < b.end {
        b.step(t, nodes, lim, words);
    }
}

/// One run of root subtrees `[i, end)` walked by [`walk_table`].
pub(super) struct TableLane {
    i: usize,
    end: usize,
    /// Per depth: the DFA state and the characters read (UTF-8 lead bytes).
    stack: [u32; 256],
    chars: [u8; 256],
}

impl TableLane {
    fn new(t: KeyTable<'_>, i: usize, end: usize) -> TableLane {
        let mut stack = [0u32; 256];
        stack[0] = t.state;
        TableLane {
            i,
            end,
            stack,
            chars: [0; 256],
        }
    }

    #[inline(always)]
    fn step(
        &mut self,
        t: KeyTable<'_>,
        nodes: &[crate::toktrie::Node],
        lim: u8,
        words: &mut [u64],
    ) {
        let n = nodes[self.i];
        // Depth is 1..=MAX_TOKEN_BYTES (255): `d - 1` and `d` index the stacks.
        let d = n.depth() & 0xFF;
        let p = (d - 1) & 0xFF;
        let b = n.byte();
        let c = self.chars[p] + u8::from(b & 0xC0 != 0x80);
        let q2 = t.trans[self.stack[p] as usize + t.classes[b as usize] as usize];
        if q2 == 0 || c > lim {
            self.i = n.subtree_end();
            return;
        }
        set_token(words, n.token());
        self.stack[d] = q2;
        self.chars[d] = c;
        self.i += 1;
    }
}

/// Sets bit `tok` unless it is `NO_TOKEN`, without a branch: about half the trie
/// nodes end a token, in no order a predictor learns.
#[inline(always)]
pub(super) fn set_token(words: &mut [u64], tok: u32) {
    let some = tok != NO_TOKEN;
    let w = if some { tok as usize >> 6 } else { 0 };
    words[w] |= u64::from(some) << (tok & 63);
}
