//! Masks agree with a brute-force check of every token, on several automata and
//! vocabularies; random walks through allowed tokens end in accepted texts.

mod matcher_support;

use std::sync::Arc;

use formwork_grammar::matcher::{CommitError, Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use formwork_grammar::ByteAutomaton;
use matcher_support::*;

/// The mask by definition: a token is allowed iff the automaton accepts all its bytes.
fn brute_mask<A: ByteAutomaton>(a: &A, s: &A::State, trie: &TokTrie) -> TokenSet {
    let mut out = TokenSet::new(trie.vocab_size());
    for t in 0..trie.vocab_size() as u32 {
        if trie.is_eos(t) {
            if a.is_accepting(s) {
                out.allow(t);
            }
            continue;
        }
        if !trie.is_usable(t) {
            continue;
        }
        let mut st = s.clone();
        let mut ok = true;
        for &b in trie.token_bytes(t) {
            match a.step(&st, b) {
                Some(x) => st = x,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            out.allow(t);
        }
    }
    out
}

fn diff(a: &TokenSet, b: &TokenSet, trie: &TokTrie) -> String {
    let only_a: Vec<String> = a
        .iter()
        .filter(|&t| !b.contains(t))
        .take(5)
        .map(|t| format!("{t}:{:?}", String::from_utf8_lossy(trie.token_bytes(t))))
        .collect();
    let only_b: Vec<String> = b
        .iter()
        .filter(|&t| !a.contains(t))
        .take(5)
        .map(|t| format!("{t}:{:?}", String::from_utf8_lossy(trie.token_bytes(t))))
        .collect();
    format!("only in matcher: {only_a:?}, only in brute force: {only_b:?}")
}

/// Random walk: at every step the mask equals the brute-force mask, `is_allowed`
/// agrees with it, and the walk ends accepted. Returns the number of steps checked.
fn walk_and_check<A: ByteAutomaton + 'static>(
    a: Arc<A>,
    trie: &Arc<TokTrie>,
    seed: u64,
    max_steps: usize,
) -> usize {
    let g = Grammar::new(a.clone());
    let mut m = Matcher::new(g, trie.clone());
    let mut rng = SplitRng::new(seed);
    let mut st = a.start();
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut text = Vec::new();
    for step in 0..max_steps {
        m.compute_mask(&mut mask);
        let brute = brute_mask(&*a, &st, trie);
        assert!(
            mask == brute,
            "seed {seed} step {step} text {:?}: {}",
            String::from_utf8_lossy(&text),
            diff(&mask, &brute, trie)
        );
        for _ in 0..20 {
            let t = rng.below(trie.vocab_size()) as u32;
            assert_eq!(
                m.is_allowed(t),
                mask.contains(t),
                "is_allowed({t}) at step {step}"
            );
        }
        let allowed: Vec<u32> = mask.iter().collect();
        assert!(!allowed.is_empty(), "empty mask at step {step}: dead end");
        // Prefer to continue; take EOS sometimes when accepting.
        let non_eos: Vec<u32> = allowed
            .iter()
            .copied()
            .filter(|&t| !trie.is_eos(t))
            .collect();
        let stop = non_eos.is_empty() || (m.is_accepting() && rng.below(4) == 0);
        if stop {
            let eos = trie.eos_ids()[0];
            m.commit(eos).unwrap();
            assert!(a.is_accepting(&st));
            return step;
        }
        let t = non_eos[rng.below(non_eos.len())];
        m.commit(t).unwrap();
        for &b in trie.token_bytes(t) {
            st = a.step(&st, b).unwrap();
        }
        text.extend_from_slice(trie.token_bytes(t));
        assert_eq!(m.is_accepting(), a.is_accepting(&st));
    }
    max_steps
}

fn json_str(min: u32, max: Option<u32>) -> JsonStr {
    JsonStr {
        prefix: b"{\"name\":".to_vec(),
        suffix: b"}".to_vec(),
        min,
        max,
    }
}

#[test]
fn masks_match_brute_force_on_byte_vocab() {
    let trie = byte_vocab();
    for seed in 0..20 {
        walk_and_check(Arc::new(Brackets { max_depth: None }), &trie, seed, 60);
        walk_and_check(Arc::new(json_str(0, Some(6))), &trie, seed, 40);
        walk_and_check(
            Arc::new(RegexAuto::new(r#"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?"#)),
            &trie,
            seed,
            20,
        );
        walk_and_check(
            Arc::new(Literal(b"{\"sku\":\"A-1\"}".to_vec())),
            &trie,
            seed,
            20,
        );
    }
}

#[test]
fn masks_match_brute_force_on_synthetic_vocab() {
    for vseed in 0..3 {
        let trie = synthetic_vocab(vseed, 3000);
        for seed in 0..15 {
            walk_and_check(Arc::new(Brackets { max_depth: Some(4) }), &trie, seed, 40);
            walk_and_check(Arc::new(json_str(2, Some(9))), &trie, seed, 30);
            walk_and_check(Arc::new(json_str(0, None)), &trie, seed, 30);
            walk_and_check(Arc::new(json_str(3, Some(40))), &trie, seed, 30);
            walk_and_check(
                Arc::new(RegexAuto::new(r#"\["(a|b|é)*"(,"[a-z]{1,3}")*\]"#)),
                &trie,
                seed,
                30,
            );
        }
    }
}

/// The plain-token shortcut gives exactly the mask of the full walk.
#[test]
fn plain_hint_changes_nothing_but_speed() {
    let trie = synthetic_vocab(7, 5000);
    for (min, max) in [
        (0, None),
        (0, Some(1)),
        (1, Some(3)),
        (0, Some(33)),
        (5, Some(100)),
    ] {
        let a = Arc::new(json_str(min, max));
        let b = Arc::new(NoHint(json_str(min, max)));
        let mut ma = Matcher::new(Grammar::new(a.clone()), trie.clone());
        let mut mb = Matcher::new(Grammar::new(b), trie.clone());
        let (mut ka, mut kb) = (
            TokenSet::new(trie.vocab_size()),
            TokenSet::new(trie.vocab_size()),
        );
        let mut rng = SplitRng::new(max.unwrap_or(0) as u64);
        for step in 0..40 {
            ma.compute_mask(&mut ka);
            mb.compute_mask(&mut kb);
            assert!(
                ka == kb,
                "min {min} max {max:?} step {step}: {}",
                diff(&ka, &kb, &trie)
            );
            let choices: Vec<u32> = ka.iter().filter(|&t| !trie.is_eos(t)).collect();
            if choices.is_empty() {
                break;
            }
            let t = choices[rng.below(choices.len())];
            ma.commit(t).unwrap();
            mb.commit(t).unwrap();
        }
    }
}

#[test]
fn second_sequence_reuses_the_cache() {
    let trie = synthetic_vocab(1, 2000);
    let g = Grammar::new(Arc::new(Brackets { max_depth: None }));
    let script: Vec<u32> = [&b"["[..], b"[a", b",", b"{", b"a}", b"]]"]
        .iter()
        .map(|t| {
            trie.token_with_bytes(t)
                .unwrap_or_else(|| panic!("no token {t:?}"))
        })
        .collect();
    let run = |g: &Arc<Grammar>| {
        let mut m = Matcher::new(g.clone(), trie.clone());
        let mut mask = TokenSet::new(trie.vocab_size());
        for &t in &script {
            m.compute_mask(&mut mask);
            assert!(mask.contains(t));
            m.commit(t).unwrap();
        }
        m.compute_mask(&mut mask);
        assert!(m.is_accepting() && m.is_finished());
        assert_eq!(
            mask.iter().collect::<Vec<_>>(),
            vec![256],
            "only EOS once finished"
        );
    };
    run(&g);
    let after_first = g.stats();
    assert!(after_first.masks >= script.len());
    run(&g);
    assert_eq!(
        g.stats(),
        after_first,
        "the second sequence added nothing to the cache"
    );
}

#[test]
fn commit_errors_leave_the_state_unchanged() {
    let trie = synthetic_vocab(3, 100);
    let g = Grammar::new(Arc::new(Literal(b"[a]".to_vec())));
    let mut m = Matcher::new(g, trie.clone());
    let eos = 256;
    assert!(matches!(
        m.commit(eos),
        Err(CommitError::EosNotAccepting {
            min_completion: 3,
            ..
        })
    ));
    assert!(matches!(
        m.commit(257),
        Err(CommitError::NeverAllowed { token: 257 })
    ));
    assert!(matches!(
        m.commit(1_000_000),
        Err(CommitError::OutOfVocabulary { .. })
    ));
    let bad = trie.token_with_bytes(b"[[").unwrap();
    assert_eq!(
        m.commit(bad),
        Err(CommitError::TokenRefused {
            token: bad,
            offset: 1,
            bytes: "[[".into()
        })
    );
    assert_eq!(m.min_completion_bytes(), 3);
    m.commit(trie.token_with_bytes(b"[a").unwrap()).unwrap();
    assert_eq!(
        m.commit_bytes(b"]x"),
        Err(CommitError::BytesRefused { offset: 1 })
    );
    assert_eq!(m.min_completion_bytes(), 1);
    m.commit_bytes(b"]").unwrap();
    assert!(m.is_accepting() && m.is_finished());
    m.commit(eos).unwrap();
    assert!(matches!(m.commit(eos), Err(CommitError::AfterEos { .. })));
    let mut mask = TokenSet::new(trie.vocab_size());
    m.compute_mask(&mut mask);
    assert!(mask.is_empty());
    assert_eq!(m.rollback(2), 2);
    assert_eq!(m.min_completion_bytes(), 1);
}

#[test]
fn duplicate_token_bytes_are_allowed_together() {
    // "<0x41>" and "A" in the synthetic vocabulary are distinct strings; make a real duplicate.
    let toks = vec![
        b"A".to_vec(),
        b"B".to_vec(),
        b"A".to_vec(),
        b"</s>".to_vec(),
    ];
    let trie = Arc::new(TokTrie::new(toks, &[false, false, false, true], &[3]));
    let mut m = Matcher::new(
        Grammar::new(Arc::new(Literal(b"AB".to_vec()))),
        trie.clone(),
    );
    let mut mask = TokenSet::new(4);
    m.compute_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![0, 2]);
    m.commit(2).unwrap();
    m.compute_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn real_vocabularies_match_brute_force() {
    let models = model_paths_noting_absent();
    for (name, path) in models {
        let (bytes, special, eos) = gguf_vocab(&path).expect("GGUF vocabulary");
        let n = bytes.len();
        let trie = Arc::new(TokTrie::new(bytes, &special, &eos));
        eprintln!(
            "{name}: {n} tokens, tries {:?}, single bytes complete: {}",
            trie.node_counts(),
            trie.single_bytes_complete()
        );
        let missing: Vec<u8> = (0..=255u8).filter(|&b| !trie.has_single_byte(b)).collect();
        eprintln!("{name}: bytes without a single-byte token: {missing:?}");
        assert!(
            trie.printable_ascii_complete(),
            "{name}: every printable ASCII byte should be a token"
        );
        for seed in 0..2 {
            let steps = walk_and_check(Arc::new(json_str(0, Some(12))), &trie, seed, 8);
            assert!(steps >= 1);
            walk_and_check(Arc::new(json_str(0, None)), &trie, seed, 6);
            walk_and_check(Arc::new(Brackets { max_depth: None }), &trie, seed, 6);
        }
    }
}

#[test]
fn shared_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Grammar>();
    check::<TokTrie>();
    check::<Matcher>();
    check::<TokenSet>();
}

/// `allowed_bytes` spares the automaton one `step` per refused child of the trie root.
#[test]
fn allowed_bytes_hint_saves_step_calls() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Counted<A> {
        inner: A,
        hint: bool,
        steps: AtomicUsize,
    }
    impl<A: ByteAutomaton> ByteAutomaton for Counted<A> {
        type State = A::State;
        fn start(&self) -> A::State {
            self.inner.start()
        }
        fn step(&self, s: &A::State, b: u8) -> Option<A::State> {
            self.steps.fetch_add(1, Ordering::Relaxed);
            self.inner.step(s, b)
        }
        fn is_accepting(&self, s: &A::State) -> bool {
            self.inner.is_accepting(s)
        }
        fn shortest_completion(&self, s: &A::State) -> Vec<u8> {
            self.inner.shortest_completion(s)
        }
        fn allowed_bytes(&self, s: &A::State) -> Option<[u64; 4]> {
            if self.hint {
                self.inner.allowed_bytes(s)
            } else {
                None
            }
        }
    }
    let trie = byte_vocab();
    let mut calls = Vec::new();
    for hint in [false, true] {
        let a = Arc::new(Counted {
            inner: Brackets { max_depth: None },
            hint,
            steps: AtomicUsize::new(0),
        });
        let mut m = Matcher::new(Grammar::new(a.clone()), trie.clone());
        let mut mask = TokenSet::new(trie.vocab_size());
        m.compute_mask(&mut mask);
        assert_eq!(mask.count(), 3, "a [ {{");
        calls.push(a.steps.load(Ordering::Relaxed));
    }
    assert_eq!(calls, vec![256, 5], "steps without and with the hint");
}
