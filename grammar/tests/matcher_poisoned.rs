//! A panic inside the grammar's shared cache (here the automaton's own `step` or
//! `allowed_bytes` panicking while a matcher computes a mask) poisons its mutex. The
//! grammar must keep serving: the matchers of other sequences, made before or after,
//! still give the exact masks. (Before the fix every later call on that grammar failed
//! with `PoisonError`, so one bad request broke a schema until restart.)

mod matcher_support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use formwork_grammar::ByteAutomaton;
use matcher_support::*;

const OFF: u8 = 0;
const IN_STEP: u8 = 1;
const IN_ALLOWED_BYTES: u8 = 2;

/// `Brackets`, which panics where `armed` says.
struct Bomb {
    inner: Brackets,
    armed: AtomicU8,
}

impl ByteAutomaton for Bomb {
    type State = <Brackets as ByteAutomaton>::State;
    fn start(&self) -> Self::State {
        self.inner.start()
    }
    fn step(&self, s: &Self::State, b: u8) -> Option<Self::State> {
        assert_ne!(self.armed.load(Ordering::SeqCst), IN_STEP, "armed: step");
        self.inner.step(s, b)
    }
    fn is_accepting(&self, s: &Self::State) -> bool {
        self.inner.is_accepting(s)
    }
    fn allowed_bytes(&self, s: &Self::State) -> Option<[u64; 4]> {
        assert_ne!(
            self.armed.load(Ordering::SeqCst),
            IN_ALLOWED_BYTES,
            "armed: allowed_bytes"
        );
        self.inner.allowed_bytes(s)
    }
    fn shortest_completion(&self, s: &Self::State) -> Vec<u8> {
        self.inner.shortest_completion(s)
    }
}

/// The mask by definition: a token is allowed iff the automaton takes all its bytes.
fn brute_mask(a: &Brackets, text: &[u8], trie: &TokTrie) -> TokenSet {
    let mut s = a.start();
    for &b in text {
        s = a.step(&s, b).expect("a valid prefix");
    }
    let mut out = TokenSet::new(trie.vocab_size());
    for t in 0..trie.vocab_size() as u32 {
        if trie.is_eos(t) {
            if a.is_accepting(&s) {
                out.allow(t);
            }
            continue;
        }
        if !trie.is_usable(t) {
            continue;
        }
        let mut st = s.clone();
        if trie
            .token_bytes(t)
            .iter()
            .all(|&b| a.step(&st, b).map(|x| st = x).is_some())
        {
            out.allow(t);
        }
    }
    out
}

/// Writes `text` token by token (one byte each), checking every mask against the brute
/// force, from the matcher's current `done` bytes on; ends accepting.
fn write_checked(m: &mut Matcher, done: &[u8], text: &[u8], trie: &TokTrie) {
    let reference = Brackets { max_depth: None };
    let mut so_far = done.to_vec();
    let mut mask = TokenSet::new(trie.vocab_size());
    for &b in text {
        m.compute_mask(&mut mask);
        let want = brute_mask(&reference, &so_far, trie);
        assert!(
            mask.iter().eq(want.iter()),
            "after {:?}: {:?} != {:?}",
            String::from_utf8_lossy(&so_far),
            mask.iter().collect::<Vec<_>>(),
            want.iter().collect::<Vec<_>>()
        );
        assert!(mask.contains(u32::from(b)));
        m.commit(u32::from(b)).unwrap();
        so_far.push(b);
    }
    m.compute_mask(&mut mask);
    assert!(
        mask.contains(256),
        "EOS after {:?}",
        String::from_utf8_lossy(&so_far)
    );
    assert!(m.is_accepting());
}

fn survives_a_panic(where_: u8) {
    let bomb = Arc::new(Bomb {
        inner: Brackets { max_depth: None },
        armed: AtomicU8::new(OFF),
    });
    let g = Grammar::new(bomb.clone());
    let trie = byte_vocab();
    // A sequence under way before the panic.
    let mut before = Matcher::new(g.clone(), trie.clone());
    let mut mask = TokenSet::new(trie.vocab_size());
    before.commit_bytes(b"[a,{a").unwrap();
    before.compute_mask(&mut mask);

    // Another sequence panics inside the cache, on its own thread (a server worker).
    bomb.armed.store(where_, Ordering::SeqCst);
    let g2 = g.clone();
    let t2 = trie.clone();
    let r = std::thread::spawn(move || {
        let mut m = Matcher::new(g2, t2);
        let mut mask = TokenSet::new(m.trie().vocab_size());
        // New states: each costs the automaton a call under the cache's lock.
        m.commit_bytes(b"[[{[").unwrap();
        m.compute_mask(&mut mask);
    })
    .join();
    assert!(r.is_err(), "the armed automaton did not panic");
    bomb.armed.store(OFF, Ordering::SeqCst);

    // The sequence from before, and new ones, go on with exact masks, through the states
    // the panicking call was building.
    write_checked(&mut before, b"[a,{a", b"}]", &trie);
    let mut after = Matcher::new(g.clone(), trie.clone());
    write_checked(&mut after, b"", b"[[{[a]},a],{a}]", &trie);
    let mut again = Matcher::new(g, trie.clone());
    write_checked(&mut again, b"", b"[[{[a,a]}]]", &trie);
}

#[test]
fn a_panic_in_step_leaves_the_grammar_usable() {
    survives_a_panic(IN_STEP);
}

#[test]
fn a_panic_in_allowed_bytes_leaves_the_grammar_usable() {
    survives_a_panic(IN_ALLOWED_BYTES);
}
