//! The erased interface a [`Grammar`](super::Grammar) holds ([`Engine`]), and its one
//! implementation over any [`ByteAutomaton`] ([`Typed`]: the automaton and its cache
//! behind one mutex, taken once per call).
//!
//! A panic while the mutex is held (a bug in an automaton's `step`, say) poisons it; the
//! next call takes the cache over ([`Typed::cache`]) instead of failing every later
//! request of the schema. That is sound because the cache only ever records finished
//! facts: a state is interned whole (its id, hash, info and row are pushed together, with
//! nothing that can panic between them), a transition, mask, keyed set or memo is written
//! once its value is complete, and a state's row is marked filtered only after its
//! allowed bytes are written. An interrupted call leaves at most work undone, which the
//! next call redoes.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::cache::{Cache, FxMap, Info, Mask};
use super::*;
use crate::automaton::ByteAutomaton;
use crate::toktrie::{TokTrie, TokenSet};

/// The erased interface a [`Grammar`] offers; implemented for every automaton.
pub(super) trait Engine: Send + Sync {
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

pub(super) struct Typed<A: ByteAutomaton> {
    pub(super) automaton: Arc<A>,
    pub(super) cache: Mutex<Cache<A>>,
    pub(super) start: u32,
}

impl<A: ByteAutomaton> Typed<A> {
    /// The cache, taken over when a panic poisoned it (see the module docs).
    fn cache(&self) -> MutexGuard<'_, Cache<A>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<A: ByteAutomaton> Engine for Typed<A> {
    fn start(&self) -> u32 {
        self.start
    }

    fn step_bytes(&self, s: u32, bytes: &[u8]) -> Result<u32, usize> {
        let mut c = self.cache();
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
        self.cache().accepting(&self.automaton, s)
    }

    fn is_finished(&self, s: u32) -> bool {
        let mut c = self.cache();
        if !c.accepting(&self.automaton, s) {
            return false;
        }
        (0..=255u8).all(|b| c.next(&self.automaton, s, b) == REFUSED)
    }

    fn min_completion(&self, s: u32) -> usize {
        self.cache().min_completion(&self.automaton, s) as usize
    }

    fn shortest_completion(&self, s: u32) -> Vec<u8> {
        let st = self.cache().states[s as usize].clone();
        self.automaton.shortest_completion(&st)
    }

    fn forced_bytes(&self, s: u32) -> (Vec<u8>, u32) {
        let mut c = self.cache();
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
        let mut c = self.cache();
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
        let mut c = self.cache();
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
        let c = self.cache();
        let m = c.vocabs[slot].1.get(s as usize)?.as_ref()?;
        Some(m.contains(tok))
    }

    fn steered_mask(&self, s: u32, trie: &TokTrie, slot: usize, limit: i64, out: &mut TokenSet) {
        let mut c = self.cache();
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
        let mut c = self.cache();
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
        self.cache().tok_cost(&self.automaton, s, trie, slot)
    }

    fn max_end_tok_cost(&self, s: u32, trie: &TokTrie, slot: usize) -> u32 {
        self.cache()
            .max_end_tok_cost(&self.automaton, s, trie, slot)
    }

    fn any_extension(&self, s: u32, trie: &TokTrie, prefix: &[u8]) -> bool {
        let Some(root) = trie.full.find(prefix) else {
            return false;
        };
        let nodes = &trie.full.nodes;
        let base = nodes[root].depth();
        let mut c = self.cache();
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
        let c = self.cache();
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
