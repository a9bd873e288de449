//! The per-schema cache behind a [`Grammar`](super::Grammar): automaton states interned
//! into `u32` ids (each hash kept, so growing never rehashes a state), 256-entry
//! transition rows in fixed chunks, filled lazily (a new state's refused bytes at once,
//! from `ByteAutomaton::allowed_bytes`), per-state facts ([`Info`]: accepting, plain
//! hint, shortest completion, forced byte, token costs) and the masks once computed.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::*;
use crate::automaton::ByteAutomaton;
use crate::toktrie::{TokTrie, TokenSet};

/// A cached mask: dense bits, or the list of allowed ids when that is smaller.
pub(super) enum Mask {
    Dense(Box<[u64]>),
    Sparse(Box<[u32]>),
}

impl Mask {
    /// Sparse when fewer than one token in 32 is allowed. One pass that skips zero
    /// runs eight words at a time and stops counting as soon as the mask is dense
    /// (counting every word costs microseconds at 262k tokens).
    pub(super) fn from_set(set: &TokenSet) -> Mask {
        let words = set.as_words();
        let mut ids = Vec::new();
        for (c, chunk) in words.chunks(8).enumerate() {
            if chunk.iter().fold(0, |a, &w| a | w) == 0 {
                continue;
            }
            for (i, &w) in chunk.iter().enumerate() {
                let mut w = w;
                while w != 0 {
                    ids.push(((c * 8 + i) * 64) as u32 + w.trailing_zeros());
                    w &= w - 1;
                }
            }
            if ids.len() * 32 >= set.len() {
                return Mask::Dense(words.to_vec().into_boxed_slice());
            }
        }
        Mask::Sparse(ids.into_boxed_slice())
    }
    pub(super) fn write_to(&self, out: &mut TokenSet) {
        match self {
            Mask::Dense(w) => out.words_mut().copy_from_slice(w),
            Mask::Sparse(ids) => {
                out.clear();
                for &t in ids.iter() {
                    out.allow(t);
                }
            }
        }
    }
    pub(super) fn contains(&self, tok: u32) -> bool {
        match self {
            Mask::Dense(w) => w
                .get(tok as usize >> 6)
                .is_some_and(|x| x & (1 << (tok & 63)) != 0),
            Mask::Sparse(ids) => ids.binary_search(&tok).is_ok(),
        }
    }
    pub(super) fn bytes(&self) -> usize {
        match self {
            Mask::Dense(w) => w.len() * 8,
            Mask::Sparse(ids) => ids.len() * 4,
        }
    }
}

/// The Fx hash (rustc's): a multiply and a rotate per word. States are hashed once
/// per new transition; SipHash's DoS resistance buys nothing here.
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap()));
        }
        for &b in chunks.remainder() {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Per-state facts, each computed at most once.
#[derive(Clone, Copy)]
pub(super) struct Info {
    /// 0 no, 1 yes, `LAZY` not asked yet (most interned states are trie-walk
    /// interiors that never need it).
    pub(super) accepting: u8,
    /// `plain_chars_allowed`: the value when `plain_some == 1`; `plain_some` is `LAZY`
    /// until asked.
    pub(super) plain: u32,
    pub(super) plain_some: u8,
    pub(super) min_completion: u32,
    pub(super) forced: u16,
    /// Largest `min_completion` over the end states of the tokens allowed here
    /// (per vocabulary slot; only slot 0 cached, others recompute).
    pub(super) max_end_min: u32,
    /// Whether `ByteAutomaton::allowed_bytes` has been asked (and applied to the row).
    pub(super) filtered: bool,
}

pub(super) struct Cache<A: ByteAutomaton> {
    pub(super) states: Vec<A::State>,
    /// State ids by hash; `hashes[id]` is the hash of `states[id]`, so growing the
    /// table re-reads hashes instead of hashing states again (rehashing thousands of
    /// nested states at one doubling cost a millisecond).
    pub(super) ids: hashbrown::HashTable<u32>,
    pub(super) hashes: Vec<u64>,
    /// The transition rows, [`ROW_CHUNK`] states to a chunk: entry `b` of state `s`
    /// is `rows[s / ROW_CHUNK][(s % ROW_CHUNK) * 256 + b]`, the next state id,
    /// `REFUSED` or `UNKNOWN`. A chunk never moves once allocated, so growing the table
    /// copies nothing (one flat `Vec` copied megabytes at each doubling, a latency
    /// spike of hundreds of microseconds on a large schema's first document), and a
    /// row pointer stays valid while new states are interned.
    /// The entries are `Cell`s so that a row pointer taken in a walk stays valid (and
    /// the writes of a miss legal) while the same walk interns new states.
    pub(super) rows: Vec<Box<[Cell<u32>]>>,
    pub(super) info: Vec<Info>,
    pub(super) known_transitions: usize,
    /// Per registered vocabulary: its trie id and the masks by state id.
    pub(super) vocabs: Vec<(u64, Vec<Option<Arc<Mask>>>)>,
    /// Per registered vocabulary, by state id: the token cost of completing
    /// (see [`Cache::tok_cost`]) and its maximum over the tokens allowed there;
    /// `UNSET` until asked.
    pub(super) costs: Vec<(Vec<u32>, Vec<u32>)>,
    /// Per registered vocabulary, by `ByteAutomaton::plain_key`: the plain tokens of
    /// at most `n` characters accepted by every state with that key, and that `n`.
    pub(super) keyed: Vec<FxMap<u64, KeyedSet>>,
    pub(super) keyed_hits: usize,
    pub(super) mask_bytes: usize,
}

/// The plain tokens of at most `n` characters a key accepts: `(n, bits)`.
pub(super) type KeyedSet = (u32, Box<[u64]>);

/// A per-state memo entry, `None` while `UNSET`.
pub(super) fn memo_get(v: &[u32], s: u32) -> Option<u32> {
    v.get(s as usize).copied().filter(|&x| x != UNSET)
}

pub(super) fn memo_set(v: &mut Vec<u32>, s: u32, x: u32) {
    if v.len() <= s as usize {
        v.resize(s as usize + 1, UNSET);
    }
    v[s as usize] = x;
}

impl<A: ByteAutomaton> Cache<A> {
    pub(super) fn intern(&mut self, st: A::State) -> u32 {
        let h = {
            let mut x = FxHasher::default();
            st.hash(&mut x);
            x.finish()
        };
        let states = &self.states;
        if let Some(&id) = self.ids.find(h, |&id| states[id as usize] == st) {
            return id;
        }
        let id = self.states.len() as u32;
        assert!(id < REFUSED - 1, "grammar cache: {id} states");
        self.info.push(Info {
            accepting: LAZY,
            plain: 0,
            plain_some: LAZY,
            min_completion: UNSET,
            forced: FORCED_UNKNOWN,
            max_end_min: UNSET,
            filtered: false,
        });
        let hashes = &self.hashes;
        self.ids.insert_unique(h, id, |&id| hashes[id as usize]);
        self.hashes.push(h);
        self.states.push(st);
        if (id as usize).is_multiple_of(ROW_CHUNK) {
            self.rows.push(
                (0..ROW_CHUNK * 256)
                    .map(|_| Cell::new(UNKNOWN))
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            );
        }
        id
    }

    /// The transition row of state `s`.
    #[inline(always)]
    pub(super) fn row(&self, s: u32) -> &[Cell<u32>; 256] {
        let s = s as usize;
        let off = (s % ROW_CHUNK) * 256;
        (&self.rows[s / ROW_CHUNK][off..off + 256])
            .try_into()
            .unwrap()
    }

    /// A pointer to the row of state `s`; valid for the cache's lifetime (chunks never
    /// move or shrink).
    #[inline(always)]
    pub(super) fn row_ptr(&self, s: u32) -> *const Cell<u32> {
        let s = s as usize;
        // SAFETY: every interned state has its row in an allocated chunk.
        unsafe {
            self.rows
                .get_unchecked(s / ROW_CHUNK)
                .as_ptr()
                .add((s % ROW_CHUNK) * 256)
        }
    }

    #[inline(always)]
    pub(super) fn next(&mut self, a: &A, s: u32, b: u8) -> u32 {
        let t = self.row(s)[b as usize].get();
        if t != UNKNOWN {
            return t;
        }
        self.next_slow(a, s, b)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn next_slow(&mut self, a: &A, s: u32, b: u8) -> u32 {
        if !self.info[s as usize].filtered {
            // One call refuses, for this state, every byte outside the automaton's
            // allowed set: a new state then costs a step per *allowed* first byte
            // instead of one per child of the trie root. Marked only once the call has
            // returned: a panic in it leaves the row unfiltered, to be filtered again.
            let allowed = a.allowed_bytes(&self.states[s as usize]);
            self.info[s as usize].filtered = true;
            if let Some(set) = allowed {
                // Only this function writes transitions, and it filters a row before
                // its first write: the row is all `UNKNOWN` here.
                let r = self.row(s);
                debug_assert!(r.iter().all(|t| t.get() == UNKNOWN));
                // Branch-free (a refused byte is `UNKNOWN - 1`): a data-dependent branch
                // per byte made this loop the costliest part of a new state.
                const _: () = assert!(REFUSED == UNKNOWN - 1);
                for (w, cells) in set.iter().zip(r.chunks_exact(64)) {
                    for (i, t) in cells.iter().enumerate() {
                        t.set(UNKNOWN - (!(w >> i) & 1) as u32);
                    }
                }
                let t = r[b as usize].get();
                if t != UNKNOWN {
                    return t;
                }
            }
        }
        let t = match a.step(&self.states[s as usize], b) {
            None => REFUSED,
            Some(st) => self.intern(st),
        };
        self.row(s)[b as usize].set(t);
        self.known_transitions += 1;
        t
    }

    pub(super) fn accepting(&mut self, a: &A, s: u32) -> bool {
        let v = self.info[s as usize].accepting;
        if v != LAZY {
            return v == 1;
        }
        let acc = a.is_accepting(&self.states[s as usize]);
        self.info[s as usize].accepting = acc as u8;
        acc
    }

    pub(super) fn plain(&mut self, a: &A, s: u32) -> Option<u32> {
        let i = &mut self.info[s as usize];
        if i.plain_some == LAZY {
            let p = a.plain_chars_allowed(&self.states[s as usize]);
            i.plain_some = p.is_some() as u8;
            i.plain = p.unwrap_or(0);
        }
        (i.plain_some == 1).then_some(i.plain)
    }

    pub(super) fn min_completion(&mut self, a: &A, s: u32) -> u32 {
        let m = self.info[s as usize].min_completion;
        if m != UNSET {
            return m;
        }
        let m = a
            .shortest_completion(&self.states[s as usize])
            .len()
            .min(UNSET as usize - 1) as u32;
        self.info[s as usize].min_completion = m;
        m
    }

    /// The token cost of completing from `s` with the vocabulary `trie` (slot
    /// `slot`): the number of tokens of one particular completion, built by taking
    /// one shortest completion (`shortest_completion`) and splitting it into longest
    /// tokens from the left. It is at most the shortest completion in
    /// bytes, and by construction the first token of that chain, `t`, leads to a
    /// state whose cost is exactly one less: `cost(step(s, t)) = cost(s) - 1`. That is
    /// what budget steering needs (a token that keeps the cost within the tokens left
    /// always exists). `COST_INF` when some completion byte has no token.
    pub(super) fn tok_cost(&mut self, a: &A, s: u32, trie: &TokTrie, slot: usize) -> u32 {
        // One shortest completion `w` serves the whole chain: after its first `at`
        // bytes, `w[at..]` is a shortest completion of the state reached, so each
        // state's witness is the next one in the chain, with a cost one lower.
        let mut chain = Vec::new();
        let mut cur = s;
        let mut w = Vec::new();
        let mut at = 0;
        let mut cost = loop {
            if let Some(c) = memo_get(&self.costs[slot].0, cur) {
                break c;
            }
            if at == w.len() {
                w = a.shortest_completion(&self.states[cur as usize]);
                at = 0;
                if w.is_empty() {
                    break 0;
                }
            }
            let Some((_, len)) = trie.longest_prefix_token(&w[at..]) else {
                break COST_INF;
            };
            let mut next = cur;
            for &b in &w[at..at + len] {
                next = self.next(a, next, b);
            }
            // `w` is a completion, so each of its prefixes is accepted.
            debug_assert!(next != REFUSED);
            if next == REFUSED {
                break COST_INF;
            }
            chain.push(cur);
            cur = next;
            at += len;
        };
        memo_set(&mut self.costs[slot].0, cur, cost);
        while let Some(st) = chain.pop() {
            cost = if cost == COST_INF { COST_INF } else { cost + 1 };
            memo_set(&mut self.costs[slot].0, st, cost);
        }
        cost
    }

    /// The largest [`Cache::tok_cost`] over the end states of the tokens allowed at `s`.
    pub(super) fn max_end_tok_cost(&mut self, a: &A, s: u32, trie: &TokTrie, slot: usize) -> u32 {
        if let Some(m) = memo_get(&self.costs[slot].1, s) {
            return m;
        }
        let mut mx = 0u32;
        self.for_each_token(a, s, &trie.full, &mut |c, _tok, end| {
            mx = mx.max(c.tok_cost(a, end, trie, slot));
        });
        memo_set(&mut self.costs[slot].1, s, mx);
        mx
    }

    pub(super) fn forced(&mut self, a: &A, s: u32) -> Option<(u8, u32)> {
        let f = self.info[s as usize].forced;
        let f = if f != FORCED_UNKNOWN {
            f
        } else {
            let mut only = FORCED_NONE;
            if !self.accepting(a, s) {
                for b in 0..=255u8 {
                    if self.next(a, s, b) != REFUSED {
                        if only != FORCED_NONE {
                            only = FORCED_NONE;
                            break;
                        }
                        only = b as u16;
                    }
                }
            }
            self.info[s as usize].forced = only;
            only
        };
        if f == FORCED_NONE {
            None
        } else {
            let b = f as u8;
            Some((b, self.next(a, s, b)))
        }
    }
}
