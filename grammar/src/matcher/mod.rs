//! Token masks: a schema's automaton walked against a vocabulary's token trie.
//!
//! # Key types
//! - [`Grammar`]: the per-schema cache, shared (`Arc<Grammar>`, `Send + Sync`) by every
//!   sequence and document of one schema. It interns each distinct automaton state
//!   into a `u32` id, fills a 256-entry transition row per state lazily, and keeps the
//!   mask of each state id once computed (a state's mask never changes). It is built
//!   lazily: creating one costs nothing, and the second document of a schema masks at
//!   lookup speed.
//! - [`Matcher`]: one per sequence, a few words: the current state id, an undo log
//!   and the token budget.
//!
//! # Usage
//! 1. `let g = Grammar::new(automaton)` once per schema, `TokTrie::new(..)` once per
//!    vocabulary; `Matcher::new(g.clone(), trie.clone())` per sequence.
//! 2. Sample a token; check it with [`Matcher::is_allowed`] (one trie path, cheap), or
//!    compute the full mask with [`Matcher::compute_mask`] when the sampler needs it.
//! 3. [`Matcher::commit`] the token; repeat until EOS (allowed only when accepting).
//! 4. Optionally, before a forward pass, take [`Matcher::forced_bytes`], tokenise them,
//!    keep the [`Matcher::canonical_forced_prefix`] and feed those tokens as a prefill.
//!
//! # Hot path
//! A cached mask is a lock, a lookup and a copy of the bitset. An uncached one is a
//! depth-first walk of the flat trie where each node costs one load from the
//! transition table (a refused byte skips its subtree); the automaton itself is
//! asked only for transitions never seen before. States with the plain-character
//! hint OR in precomputed sets and walk only the non-plain tokens. String bodies under
//! a pattern that refuses some plain characters (`\S`, ECMA's `.`) have a plain key
//! instead (`ByteAutomaton::plain_key`, the DFA state): the plain tokens one walk found
//! are kept per key and reused by every later state with that key, whatever its
//! length or enclosing objects. A new state costs one `allowed_bytes` call (its
//! refused bytes fill its row at once) and one `step` per allowed byte the walk
//! reaches; without that hint, one `step` per child of the trie root (about 250).
//! Transition rows live in fixed chunks and states are interned with their hash kept,
//! so a growing cache never copies rows or rehashes states (both were latency spikes
//! of hundreds of microseconds on large schemas).
//!
//! Measured (`FORMWORK_BENCH_N=200 cargo bench -p formwork-grammar --bench masks`,
//! three runs, one core): an uncached mask (first document) 2.6-2.7 µs at p50 and
//! 58-68 µs at p99 with 49k tokens, 5.2-5.4 µs and 114-125 µs with 262k; a cached one
//! 0.1-0.25 µs.
//!
//! Concurrency: one mutex per grammar, taken once per call (never per trie node).
//! Sequences of one schema on different threads serialise on mask misses and steps.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Mutex};

use crate::automaton::{ByteAutomaton, KeyTable};
use crate::toktrie::{FlatTrie, TokTrie, TokenSet, NO_TOKEN, PLAIN_BUCKETS};

const UNKNOWN: u32 = u32::MAX;
/// States per chunk of transition rows (16 KiB).
const ROW_CHUNK: usize = 16;
const REFUSED: u32 = u32::MAX - 1;
const UNSET: u32 = u32::MAX;
const LAZY: u8 = 2;
/// The forced-byte cache: not computed yet / no single forced byte.
const FORCED_UNKNOWN: u16 = 0xFFFF;
const FORCED_NONE: u16 = 0x1FF;
/// A forced run longer than this is returned in pieces (each call continues it).
const MAX_FORCED: usize = 1 << 16;
/// The token cost of a state whose completion some byte of which no token spells.
const COST_INF: u32 = u32::MAX / 2;

/// Why a commit was refused. The matcher's state is unchanged after an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    #[error("token {token} is outside the vocabulary of {vocab_size} tokens")]
    OutOfVocabulary { token: u32, vocab_size: usize },
    #[error("token {token} is special or empty and never allowed by a grammar")]
    NeverAllowed { token: u32 },
    #[error("token {token} refused at byte {offset} of its bytes {bytes:?}")]
    TokenRefused {
        token: u32,
        offset: usize,
        bytes: String,
    },
    #[error("bytes refused at offset {offset}")]
    BytesRefused { offset: usize },
    #[error("EOS token {token} refused: the text is not a complete instance ({min_completion} more bytes needed at least)")]
    EosNotAccepting { token: u32, min_completion: usize },
    #[error("token {token} committed after EOS")]
    AfterEos { token: u32 },
    #[error("token {token} refused by the budget: {tokens_left} tokens left, and the text would then need {needs} more tokens")]
    OverBudget {
        token: u32,
        tokens_left: usize,
        needs: usize,
    },
}

/// Sizes of a grammar's cache, for reports and `formwork compile`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrammarStats {
    /// Distinct automaton states interned so far.
    pub states: usize,
    /// Transitions computed (refused ones included).
    pub transitions: usize,
    /// Masks cached, over all vocabularies.
    pub masks: usize,
    /// Plain-token sets cached per `ByteAutomaton::plain_key`, over all vocabularies.
    pub keyed_sets: usize,
    /// Masks that took their plain tokens from a set cached for another state.
    pub keyed_hits: usize,
    /// Approximate heap bytes of the cache (states' own heap not counted).
    pub memory_bytes: usize,
}

/// A cached mask: dense bits, or the list of allowed ids when that is smaller.
enum Mask {
    Dense(Box<[u64]>),
    Sparse(Box<[u32]>),
}

impl Mask {
    /// Sparse when fewer than one token in 32 is allowed. One pass that skips zero
    /// runs eight words at a time and stops counting as soon as the mask is dense
    /// (counting every word costs microseconds at 262k tokens).
    fn from_set(set: &TokenSet) -> Mask {
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
    fn write_to(&self, out: &mut TokenSet) {
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
    fn contains(&self, tok: u32) -> bool {
        match self {
            Mask::Dense(w) => w
                .get(tok as usize >> 6)
                .is_some_and(|x| x & (1 << (tok & 63)) != 0),
            Mask::Sparse(ids) => ids.binary_search(&tok).is_ok(),
        }
    }
    fn bytes(&self) -> usize {
        match self {
            Mask::Dense(w) => w.len() * 8,
            Mask::Sparse(ids) => ids.len() * 4,
        }
    }
}

/// The Fx hash (rustc's): a multiply and a rotate per word. States are hashed once
/// per new transition; SipHash's DoS resistance buys nothing here.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

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

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Per-state facts, each computed at most once.
#[derive(Clone, Copy)]
struct Info {
    /// 0 no, 1 yes, `LAZY` not asked yet (most interned states are trie-walk
    /// interiors that never need it).
    accepting: u8,
    /// `plain_chars_allowed`: the value when `plain_some == 1`; `plain_some` is `LAZY`
    /// until asked.
    plain: u32,
    plain_some: u8,
    min_completion: u32,
    forced: u16,
    /// Largest `min_completion` over the end states of the tokens allowed here
    /// (per vocabulary slot; only slot 0 cached, others recompute).
    max_end_min: u32,
    /// Whether `ByteAutomaton::allowed_bytes` has been asked (and applied to the row).
    filtered: bool,
}

/// The erased interface a [`Grammar`] offers; implemented for every automaton.
trait Engine: Send + Sync {
    fn start(&self) -> u32;
    fn step_bytes(&self, s: u32, bytes: &[u8]) -> Result<u32, usize>;
    fn is_accepting(&self, s: u32) -> bool;
    fn is_finished(&self, s: u32) -> bool;
    fn min_completion(&self, s: u32) -> usize;
    fn shortest_completion(&self, s: u32) -> Vec<u8>;
    fn forced_bytes(&self, s: u32) -> (Vec<u8>, u32);
    fn register(&self, trie: &TokTrie) -> usize;
    fn mask(&self, s: u32, trie: &TokTrie, slot: usize, out: &mut TokenSet);
    fn mask_contains(&self, s: u32, slot: usize, tok: u32) -> Option<bool>;
    fn steered_mask(&self, s: u32, trie: &TokTrie, slot: usize, limit: i64, out: &mut TokenSet);
    fn max_end_min(&self, s: u32, trie: &TokTrie, slot: usize) -> usize;
    fn tok_cost(&self, s: u32, trie: &TokTrie, slot: usize) -> u32;
    fn max_end_tok_cost(&self, s: u32, trie: &TokTrie, slot: usize) -> u32;
    fn any_extension(&self, s: u32, trie: &TokTrie, prefix: &[u8]) -> bool;
    fn stats(&self) -> GrammarStats;
}

struct Cache<A: ByteAutomaton> {
    states: Vec<A::State>,
    /// State ids by hash; `hashes[id]` is the hash of `states[id]`, so growing the
    /// table re-reads hashes instead of hashing states again (rehashing thousands of
    /// nested states at one doubling cost a millisecond).
    ids: hashbrown::HashTable<u32>,
    hashes: Vec<u64>,
    /// The transition rows, [`ROW_CHUNK`] states to a chunk: entry `b` of state `s`
    /// is `rows[s / ROW_CHUNK][(s % ROW_CHUNK) * 256 + b]`, the next state id,
    /// `REFUSED` or `UNKNOWN`. A chunk never moves once allocated, so growing the table
    /// copies nothing (one flat `Vec` copied megabytes at each doubling, a latency
    /// spike of hundreds of microseconds on a large schema's first document), and a
    /// row pointer stays valid while new states are interned.
    /// The entries are `Cell`s so that a row pointer taken in a walk stays valid (and
    /// the writes of a miss legal) while the same walk interns new states.
    rows: Vec<Box<[Cell<u32>]>>,
    info: Vec<Info>,
    known_transitions: usize,
    /// Per registered vocabulary: its trie id and the masks by state id.
    vocabs: Vec<(u64, Vec<Option<Arc<Mask>>>)>,
    /// Per registered vocabulary, by state id: the token cost of completing
    /// (see [`Cache::tok_cost`]) and its maximum over the tokens allowed there;
    /// `UNSET` until asked.
    costs: Vec<(Vec<u32>, Vec<u32>)>,
    /// Per registered vocabulary, by `ByteAutomaton::plain_key`: the plain tokens of
    /// at most `n` characters accepted by every state with that key, and that `n`.
    keyed: Vec<FxMap<u64, KeyedSet>>,
    keyed_hits: usize,
    mask_bytes: usize,
}

/// The plain tokens of at most `n` characters a key accepts: `(n, bits)`.
type KeyedSet = (u32, Box<[u64]>);

/// A per-state memo entry, `None` while `UNSET`.
fn memo_get(v: &[u32], s: u32) -> Option<u32> {
    v.get(s as usize).copied().filter(|&x| x != UNSET)
}

fn memo_set(v: &mut Vec<u32>, s: u32, x: u32) {
    if v.len() <= s as usize {
        v.resize(s as usize + 1, UNSET);
    }
    v[s as usize] = x;
}

struct Typed<A: ByteAutomaton> {
    automaton: Arc<A>,
    cache: Mutex<Cache<A>>,
    start: u32,
}

impl<A: ByteAutomaton> Cache<A> {
    fn intern(&mut self, st: A::State) -> u32 {
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
    fn row(&self, s: u32) -> &[Cell<u32>; 256] {
        let s = s as usize;
        let off = (s % ROW_CHUNK) * 256;
        (&self.rows[s / ROW_CHUNK][off..off + 256])
            .try_into()
            .unwrap()
    }

    /// A pointer to the row of state `s`; valid for the cache's lifetime (chunks never
    /// move or shrink).
    #[inline(always)]
    fn row_ptr(&self, s: u32) -> *const Cell<u32> {
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
    fn next(&mut self, a: &A, s: u32, b: u8) -> u32 {
        let t = self.row(s)[b as usize].get();
        if t != UNKNOWN {
            return t;
        }
        self.next_slow(a, s, b)
    }

    #[cold]
    #[inline(never)]
    fn next_slow(&mut self, a: &A, s: u32, b: u8) -> u32 {
        if !self.info[s as usize].filtered {
            // One call refuses, for this state, every byte outside the automaton's
            // allowed set: a new state then costs a step per *allowed* first byte
            // instead of one per child of the trie root.
            self.info[s as usize].filtered = true;
            if let Some(set) = a.allowed_bytes(&self.states[s as usize]) {
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

    fn accepting(&mut self, a: &A, s: u32) -> bool {
        let v = self.info[s as usize].accepting;
        if v != LAZY {
            return v == 1;
        }
        let acc = a.is_accepting(&self.states[s as usize]);
        self.info[s as usize].accepting = acc as u8;
        acc
    }

    fn plain(&mut self, a: &A, s: u32) -> Option<u32> {
        let i = &mut self.info[s as usize];
        if i.plain_some == LAZY {
            let p = a.plain_chars_allowed(&self.states[s as usize]);
            i.plain_some = p.is_some() as u8;
            i.plain = p.unwrap_or(0);
        }
        (i.plain_some == 1).then_some(i.plain)
    }

    fn min_completion(&mut self, a: &A, s: u32) -> u32 {
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
    fn tok_cost(&mut self, a: &A, s: u32, trie: &TokTrie, slot: usize) -> u32 {
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
    fn max_end_tok_cost(&mut self, a: &A, s: u32, trie: &TokTrie, slot: usize) -> u32 {
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

    fn forced(&mut self, a: &A, s: u32) -> Option<(u8, u32)> {
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

    /// Walks `trie` from `s`, setting every token whose bytes are accepted.
    /// With `skip_upto = Some(n)` (plain trie only) subtrees whose tokens all have at
    /// most `n` characters are skipped: the caller has ORed them in already.
    #[inline(never)]
    fn walk(&mut self, a: &A, s: u32, trie: &FlatTrie, skip_upto: Option<u8>, out: &mut TokenSet) {
        match skip_upto {
            None => self.walk_inner::<false>(a, s, trie, 0, out),
            Some(lim) => self.walk_inner::<true>(a, s, trie, lim, out),
        }
    }

    /// The hot loop. Per node: one load of the node, one of the parent's state from the
    /// depth stack, one from the transition table; the automaton only on a miss.
    #[inline(always)]
    fn walk_inner<const SKIP: bool>(
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
    fn compute_mask(&mut self, a: &A, s: u32, trie: &TokTrie, slot: usize, out: &mut TokenSet) {
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
    fn for_each_token(
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
fn walk_table(t: KeyTable<'_>, trie: &FlatTrie, max_chars: u32, out: &mut TokenSet) {
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
struct TableLane {
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
fn set_token(words: &mut [u64], tok: u32) {
    let some = tok != NO_TOKEN;
    let w = if some { tok as usize >> 6 } else { 0 };
    words[w] |= u64::from(some) << (tok & 63);
}

impl<A: ByteAutomaton> Engine for Typed<A> {
    fn start(&self) -> u32 {
        self.start
    }

    fn step_bytes(&self, s: u32, bytes: &[u8]) -> Result<u32, usize> {
        let mut c = self.cache.lock().unwrap();
        let mut s = s;
        for (i, &b) in bytes.iter().enumerate() {
            let t = c.next(&self.automaton, s, b);
            if t == REFUSED {
                return Err(i);
            }
            s = t;
        }
        Ok(s)
    }

    fn is_accepting(&self, s: u32) -> bool {
        self.cache.lock().unwrap().accepting(&self.automaton, s)
    }

    fn is_finished(&self, s: u32) -> bool {
        let mut c = self.cache.lock().unwrap();
        if !c.accepting(&self.automaton, s) {
            return false;
        }
        (0..=255u8).all(|b| c.next(&self.automaton, s, b) == REFUSED)
    }

    fn min_completion(&self, s: u32) -> usize {
        self.cache
            .lock()
            .unwrap()
            .min_completion(&self.automaton, s) as usize
    }

    fn shortest_completion(&self, s: u32) -> Vec<u8> {
        let st = self.cache.lock().unwrap().states[s as usize].clone();
        self.automaton.shortest_completion(&st)
    }

    fn forced_bytes(&self, s: u32) -> (Vec<u8>, u32) {
        let mut c = self.cache.lock().unwrap();
        let mut out = Vec::new();
        let mut s = s;
        while out.len() < MAX_FORCED {
            match c.forced(&self.automaton, s) {
                Some((b, t)) => {
                    out.push(b);
                    s = t;
                }
                None => break,
            }
        }
        (out, s)
    }

    fn register(&self, trie: &TokTrie) -> usize {
        let mut c = self.cache.lock().unwrap();
        let id = trie.unique_id();
        if let Some(i) = c.vocabs.iter().position(|(t, _)| *t == id) {
            return i;
        }
        c.vocabs.push((id, Vec::new()));
        c.costs.push((Vec::new(), Vec::new()));
        c.keyed.push(FxMap::default());
        c.vocabs.len() - 1
    }

    fn mask(&self, s: u32, trie: &TokTrie, slot: usize, out: &mut TokenSet) {
        let mut c = self.cache.lock().unwrap();
        let cached = c.vocabs[slot].1.get(s as usize).and_then(|m| m.clone());
        let m = match cached {
            Some(m) => m,
            None => {
                c.compute_mask(&self.automaton, s, trie, slot, out);
                let m = Arc::new(Mask::from_set(out));
                c.mask_bytes += m.bytes();
                let masks = &mut c.vocabs[slot].1;
                if masks.len() <= s as usize {
                    masks.resize(s as usize + 1, None);
                }
                masks[s as usize] = Some(m);
                return;
            }
        };
        drop(c);
        m.write_to(out);
    }

    fn mask_contains(&self, s: u32, slot: usize, tok: u32) -> Option<bool> {
        let c = self.cache.lock().unwrap();
        let m = c.vocabs[slot].1.get(s as usize)?.as_ref()?;
        Some(m.contains(tok))
    }

    fn steered_mask(&self, s: u32, trie: &TokTrie, slot: usize, limit: i64, out: &mut TokenSet) {
        let mut c = self.cache.lock().unwrap();
        out.clear();
        let a = &*self.automaton;
        c.for_each_token(a, s, &trie.full, &mut |c, tok, end| {
            if (c.tok_cost(a, end, trie, slot) as i64) <= limit {
                out.allow(tok);
            }
        });
        for &(p, d) in &trie.dups {
            if out.contains(p) {
                out.allow(d);
            }
        }
        if c.accepting(a, s) {
            for &e in trie.eos_ids() {
                out.allow(e);
            }
        }
    }

    fn max_end_min(&self, s: u32, trie: &TokTrie, slot: usize) -> usize {
        let mut c = self.cache.lock().unwrap();
        if slot == 0 && c.info[s as usize].max_end_min != UNSET {
            return c.info[s as usize].max_end_min as usize;
        }
        let a = &*self.automaton;
        let mut mx = 0u32;
        c.for_each_token(a, s, &trie.full, &mut |c, _tok, end| {
            mx = mx.max(c.min_completion(a, end));
        });
        if slot == 0 {
            c.info[s as usize].max_end_min = mx;
        }
        mx as usize
    }

    fn tok_cost(&self, s: u32, trie: &TokTrie, slot: usize) -> u32 {
        self.cache
            .lock()
            .unwrap()
            .tok_cost(&self.automaton, s, trie, slot)
    }

    fn max_end_tok_cost(&self, s: u32, trie: &TokTrie, slot: usize) -> u32 {
        self.cache
            .lock()
            .unwrap()
            .max_end_tok_cost(&self.automaton, s, trie, slot)
    }

    fn any_extension(&self, s: u32, trie: &TokTrie, prefix: &[u8]) -> bool {
        let Some(root) = trie.full.find(prefix) else {
            return false;
        };
        let nodes = &trie.full.nodes;
        let base = nodes[root].depth();
        let mut c = self.cache.lock().unwrap();
        let a = &*self.automaton;
        let mut stack = vec![0u32; 257];
        stack[base] = s;
        let end = nodes[root].subtree_end();
        let mut i = root + 1;
        while i < end {
            let n = nodes[i];
            let d = n.depth();
            let t = c.next(a, stack[d - 1], n.byte());
            if t == REFUSED {
                i = n.subtree_end();
                continue;
            }
            if n.token() != NO_TOKEN {
                return true;
            }
            stack[d] = t;
            i += 1;
        }
        false
    }

    fn stats(&self) -> GrammarStats {
        let c = self.cache.lock().unwrap();
        let masks = c
            .vocabs
            .iter()
            .map(|(_, m)| m.iter().filter(|x| x.is_some()).count())
            .sum();
        GrammarStats {
            states: c.states.len(),
            transitions: c.known_transitions,
            masks,
            keyed_sets: c.keyed.iter().map(|k| k.len()).sum(),
            keyed_hits: c.keyed_hits,
            memory_bytes: c.rows.len() * ROW_CHUNK * 256 * 4
                + c.info.len() * std::mem::size_of::<Info>()
                + c.states.len() * (std::mem::size_of::<A::State>() + 16)
                + c.mask_bytes
                + c.vocabs.iter().map(|(_, m)| m.len() * 8).sum::<usize>(),
        }
    }
}

/// The per-schema cache of states, transitions and masks. See the module docs.
pub struct Grammar {
    engine: Box<dyn Engine>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Grammar({:?})", self.stats())
    }
}

impl Grammar {
    /// Wraps an automaton. Costs one `start()` and nothing else: the cache fills as
    /// sequences run.
    pub fn new<A: ByteAutomaton + 'static>(automaton: Arc<A>) -> Arc<Grammar> {
        let mut cache = Cache::<A> {
            states: Vec::new(),
            ids: hashbrown::HashTable::new(),
            hashes: Vec::new(),
            rows: Vec::new(),
            info: Vec::new(),
            known_transitions: 0,
            vocabs: Vec::new(),
            costs: Vec::new(),
            keyed: Vec::new(),
            keyed_hits: 0,
            mask_bytes: 0,
        };
        let start = cache.intern(automaton.start());
        Arc::new(Grammar {
            engine: Box::new(Typed {
                automaton,
                cache: Mutex::new(cache),
                start,
            }),
        })
    }

    /// Cache sizes so far.
    pub fn stats(&self) -> GrammarStats {
        self.engine.stats()
    }
}

/// The constraint state of one sequence. Small: clone it to fork a sequence.
#[derive(Clone)]
pub struct Matcher {
    grammar: Arc<Grammar>,
    trie: Arc<TokTrie>,
    slot: usize,
    state: u32,
    eos: bool,
    budget: Option<usize>,
    /// `(state before, eos before, budget before)` for each commit, for rollback.
    undo: Vec<(u32, bool, Option<usize>)>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("state", &self.state)
            .field("eos", &self.eos)
            .field("budget", &self.budget)
            .field("committed", &self.undo.len())
            .finish()
    }
}

impl Matcher {
    /// A matcher at the start of the text.
    pub fn new(grammar: Arc<Grammar>, trie: Arc<TokTrie>) -> Self {
        let slot = grammar.engine.register(&trie);
        let state = grammar.engine.start();
        Matcher {
            grammar,
            trie,
            slot,
            state,
            eos: false,
            budget: None,
            undo: Vec::new(),
        }
    }

    pub fn trie(&self) -> &Arc<TokTrie> {
        &self.trie
    }

    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// The interned id of the current state (equal ids: equal masks).
    pub fn state_id(&self) -> u32 {
        self.state
    }

    /// The limit, when the budget makes a difference at this step: the largest token
    /// cost (see [`Matcher::min_completion_tokens`]) a token may leave behind; -1
    /// allows no token (only EOS).
    fn steering(&self) -> Option<i64> {
        let left = self.budget? as i64;
        let e = &self.grammar.engine;
        // Cheap test first: a token cost never exceeds the bytes, so when every
        // allowed token leaves at most `left - 1` bytes to write, nothing is steered.
        let mx_bytes = e.max_end_min(self.state, &self.trie, self.slot) as i64;
        if mx_bytes <= left - 1 {
            return None;
        }
        let now = e.tok_cost(self.state, &self.trie, self.slot) as i64;
        let limit = if left == 0 && now == 0 {
            -1
        } else {
            // The next token uses one of those left. If the budget is already too
            // small, still insist on progress (a token that lowers the cost).
            (left - 1).max(now - 1)
        };
        let mx = e.max_end_tok_cost(self.state, &self.trie, self.slot) as i64;
        (mx > limit).then_some(limit)
    }

    /// Sets `out` to the tokens allowed next. EOS ids are allowed exactly when the
    /// text so far is a complete instance. After EOS, nothing is allowed.
    pub fn compute_mask(&mut self, out: &mut TokenSet) {
        assert_eq!(
            out.len(),
            self.trie.vocab_size(),
            "TokenSet width differs from the vocabulary"
        );
        if self.eos {
            out.clear();
            return;
        }
        if let Some(limit) = self.steering() {
            self.grammar
                .engine
                .steered_mask(self.state, &self.trie, self.slot, limit, out);
            return;
        }
        self.grammar
            .engine
            .mask(self.state, &self.trie, self.slot, out);
    }

    /// Whether `tok` is allowed next: one trie path (or a cached-mask lookup), far
    /// cheaper than a full mask. Agrees with [`Matcher::compute_mask`].
    pub fn is_allowed(&mut self, tok: u32) -> bool {
        if self.budget.is_none() && !self.eos {
            if let Some(hit) = self
                .grammar
                .engine
                .mask_contains(self.state, self.slot, tok)
            {
                return hit;
            }
        }
        self.end_state(tok).is_ok()
    }

    fn end_state(&self, tok: u32) -> Result<Option<u32>, CommitError> {
        let e = &self.grammar.engine;
        if self.eos {
            return Err(CommitError::AfterEos { token: tok });
        }
        if tok as usize >= self.trie.vocab_size() {
            return Err(CommitError::OutOfVocabulary {
                token: tok,
                vocab_size: self.trie.vocab_size(),
            });
        }
        if self.trie.is_eos(tok) {
            return if e.is_accepting(self.state) {
                Ok(None)
            } else {
                Err(CommitError::EosNotAccepting {
                    token: tok,
                    min_completion: e.min_completion(self.state),
                })
            };
        }
        if !self.trie.is_usable(tok) {
            return Err(CommitError::NeverAllowed { token: tok });
        }
        let bytes = self.trie.token_bytes(tok);
        let end = e
            .step_bytes(self.state, bytes)
            .map_err(|offset| CommitError::TokenRefused {
                token: tok,
                offset,
                bytes: String::from_utf8_lossy(bytes).into_owned(),
            })?;
        if let Some(limit) = self.steering() {
            let needs = e.tok_cost(end, &self.trie, self.slot) as usize;
            if needs as i64 > limit {
                return Err(CommitError::OverBudget {
                    token: tok,
                    tokens_left: self.budget.unwrap_or(0),
                    needs,
                });
            }
        }
        Ok(Some(end))
    }

    /// Advances by one token. On error nothing changes. Committing an EOS id (allowed
    /// only when accepting) ends the sequence. A set budget goes down by one.
    pub fn commit(&mut self, tok: u32) -> Result<(), CommitError> {
        let end = self.end_state(tok)?;
        self.undo.push((self.state, self.eos, self.budget));
        match end {
            None => self.eos = true,
            Some(s) => self.state = s,
        }
        if let Some(b) = &mut self.budget {
            *b = b.saturating_sub(1);
        }
        Ok(())
    }

    /// Advances by raw bytes (a prefill the caller tokenised itself, or a replay).
    /// On error nothing changes. Counts as one step for [`Matcher::rollback`]; the
    /// budget is not touched (the caller knows how many tokens the bytes took).
    pub fn commit_bytes(&mut self, bytes: &[u8]) -> Result<(), CommitError> {
        if self.eos {
            return Err(CommitError::BytesRefused { offset: 0 });
        }
        let end = self
            .grammar
            .engine
            .step_bytes(self.state, bytes)
            .map_err(|offset| CommitError::BytesRefused { offset })?;
        self.undo.push((self.state, self.eos, self.budget));
        self.state = end;
        Ok(())
    }

    /// Undoes the last `n` commits (tokens or byte runs). Returns how many were undone.
    pub fn rollback(&mut self, n: usize) -> usize {
        let k = n.min(self.undo.len());
        for _ in 0..k {
            let (s, e, b) = self.undo.pop().unwrap();
            self.state = s;
            self.eos = e;
            self.budget = b;
        }
        k
    }

    /// The bytes the schema allows in only one way from here: each is the only byte
    /// the automaton accepts, and the run stops at the first branch or accepting
    /// state. `{"sku":"` at the start of an object whose first property is required.
    pub fn forced_bytes(&self) -> Vec<u8> {
        if self.eos {
            return Vec::new();
        }
        self.grammar.engine.forced_bytes(self.state).0
    }

    /// How many of `forced_tokens` (the caller's tokenisation of [`forced_bytes`],
    /// done with the real tokenizer, ideally together with the bytes of the last
    /// committed token so the left edge is canonical too) are safe to commit as a
    /// prefill without making the token sequence non-canonical.
    ///
    /// A token boundary at byte `p` of the forced bytes `F` is kept only if no
    /// vocabulary token could span it: for every start `q < p`, no token of the
    /// vocabulary is `F[q..]` followed by at least one more byte that the grammar
    /// allows after `F`. (Tokens ending inside `F` the tokenizer has already weighed.)
    /// The result is the number of leading tokens that end at or before the first
    /// such `q`. If the forced bytes end the text (nothing can follow), every token
    /// is safe.
    ///
    /// This is exact for tokenizers that never merge across a position no token
    /// spans (BPE and SentencePiece-BPE); llguidance instead always backs off a
    /// fixed number of tokens. Cost: one trie lookup per byte of `F` plus a walk
    /// of the subtrees under the suffixes of `F`, stopped at the first hit.
    ///
    /// [`forced_bytes`]: Matcher::forced_bytes
    pub fn canonical_forced_prefix(&self, forced_tokens: &[u32]) -> usize {
        let e = &self.grammar.engine;
        let mut f = Vec::new();
        let mut ends = Vec::with_capacity(forced_tokens.len());
        for &t in forced_tokens {
            f.extend_from_slice(self.trie.token_bytes(t));
            ends.push(f.len());
        }
        let Ok(after) = e.step_bytes(self.state, &f) else {
            return 0;
        };
        let mut cut = f.len();
        if !e.is_finished(after) {
            for q in 0..f.len() {
                if self.trie.has_extension(&f[q..]) && e.any_extension(after, &self.trie, &f[q..]) {
                    cut = q;
                    break;
                }
            }
        }
        ends.iter().take_while(|&&end| end <= cut).count()
    }

    /// Whether a JSON `null` may start here as a whole value *and* some other value
    /// may start too: the decision point of a nullable field. True when the bytes
    /// `null` are accepted, after them only a separator (`,` `}` `]`, whitespace) or
    /// nothing may follow (so they are a literal, not the start of a string's
    /// content or a key), and some byte other than `n` and whitespace is allowed
    /// here. Cost: four cached steps when `null` is refused, else two scans of the
    /// 256 byte transitions (cached).
    pub fn null_competes(&self) -> bool {
        if self.eos {
            return false;
        }
        let e = &self.grammar.engine;
        let Ok(after) = e.step_bytes(self.state, b"null") else {
            return false;
        };
        let separator = |b: u8| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r');
        let literal = (0..=255u8).all(|b| separator(b) || e.step_bytes(after, &[b]).is_err());
        literal
            && (0..=255u8)
                .any(|b| b != b'n' && !separator(b) && e.step_bytes(self.state, &[b]).is_ok())
    }

    /// Whether the text so far is a complete instance (EOS allowed now).
    pub fn is_accepting(&self) -> bool {
        self.eos || self.grammar.engine.is_accepting(self.state)
    }

    /// Whether the text is complete and no byte can follow (or EOS was committed).
    pub fn is_finished(&self) -> bool {
        self.eos || self.grammar.engine.is_finished(self.state)
    }

    /// Whether EOS has been committed.
    pub fn is_stopped(&self) -> bool {
        self.eos
    }

    /// The fewest bytes that complete the text from here (0 when accepting).
    pub fn min_completion_bytes(&self) -> usize {
        if self.eos {
            0
        } else {
            self.grammar.engine.min_completion(self.state)
        }
    }

    /// An upper bound on the tokens needed to complete the text from here with this
    /// matcher's vocabulary (0 when accepting): the length of a token chain that
    /// spells a shortest completion, longest token first. At most
    /// [`Matcher::min_completion_bytes`], usually several times fewer (`":null,"`
    /// is one or two tokens, not seven). `u32::MAX / 2` when the vocabulary cannot
    /// spell some completion byte.
    pub fn min_completion_tokens(&self) -> usize {
        if self.eos {
            0
        } else {
            self.grammar
                .engine
                .tok_cost(self.state, &self.trie, self.slot) as usize
        }
    }

    /// A shortest byte string that completes the text from here.
    pub fn shortest_completion(&self) -> Vec<u8> {
        if self.eos {
            Vec::new()
        } else {
            self.grammar.engine.shortest_completion(self.state)
        }
    }

    /// Steers the rest of the run to fit in `tokens_left` more tokens (EOS not
    /// counted). Each [`commit`](Matcher::commit) then counts one down.
    ///
    /// While a budget is set, a token is allowed only if, after it, the token cost of
    /// completing ([`Matcher::min_completion_tokens`]) fits in the tokens that remain:
    /// `cost(end) <= tokens_left - 1`. The cost is the length of a chain of tokens that
    /// spells a shortest completion, and the first token of the chain lowers it by
    /// exactly one, so the invariant guarantees an accepting state after at most
    /// `tokens_left` tokens whenever the vocabulary can spell the completions (true of
    /// byte-level BPE and of SentencePiece with byte fallback). It is conservative, not
    /// exact: the cost is one way to write a shortest completion, not the fewest
    /// tokens over all completions. If the budget is already below the cost, tokens
    /// that lower it are still allowed, so the run ends as early as possible.
    ///
    /// Costs are counted in tokens, not bytes: with a byte bound, a 15-field object
    /// whose shortest completion is 280 bytes would be steered from its first token
    /// under a 256-token budget, and every string would close after one token.
    ///
    /// The check costs nothing while every allowed token leaves fewer bytes to write
    /// than tokens remain (one cached maximum per state); otherwise a trie walk that
    /// computes the cost of each end state once (cached per state).
    pub fn set_budget(&mut self, tokens_left: usize) {
        self.budget = Some(tokens_left);
    }

    /// Removes the budget.
    pub fn clear_budget(&mut self) {
        self.budget = None;
    }

    pub fn budget(&self) -> Option<usize> {
        self.budget
    }

    /// Whether the budget currently restricts the mask (the run is being cut short).
    pub fn is_steering(&self) -> bool {
        !self.eos && self.steering().is_some()
    }
}
