//! Forced bytes (jump-forward), their canonical token prefix, and budget steering.

mod matcher_support;

use std::sync::Arc;

use formwork_grammar::matcher::{CommitError, Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use matcher_support::*;

fn tok(trie: &TokTrie, s: &str) -> u32 {
    trie.token_with_bytes(s.as_bytes())
        .unwrap_or_else(|| panic!("no token {s:?}"))
}

#[test]
fn forced_bytes_stop_at_the_first_branch() {
    let trie = synthetic_vocab(0, 0);
    let a = Arc::new(JsonStr {
        prefix: b"{\"name\":".to_vec(),
        suffix: b"}".to_vec(),
        min: 0,
        max: Some(3),
    });
    let mut m = Matcher::new(Grammar::new(a), trie.clone());
    assert_eq!(m.forced_bytes(), b"{\"name\":\"");
    m.commit_bytes(b"{\"name\":\"ab").unwrap();
    assert_eq!(m.forced_bytes(), b"");
    m.commit_bytes(b"c").unwrap();
    // maxLength reached: only the closing quote and brace remain.
    assert_eq!(m.forced_bytes(), b"\"}");
    m.commit_bytes(b"\"}").unwrap();
    assert!(m.is_finished());
    assert_eq!(m.forced_bytes(), b"");

    let lit = Matcher::new(
        Grammar::new(Arc::new(Literal(b"[a]".to_vec()))),
        trie.clone(),
    );
    assert_eq!(lit.forced_bytes(), b"[a]");
    // Every token is safe when the forced bytes end the text.
    assert_eq!(
        lit.canonical_forced_prefix(&[tok(&trie, "[a"), tok(&trie, "]")]),
        2
    );
    // An accepting state that may continue is not forced further.
    let b = Matcher::new(
        Grammar::new(Arc::new(RegexAuto::new("ab(cd)?"))),
        trie.clone(),
    );
    assert_eq!(b.forced_bytes(), b"ab");
}

#[test]
fn canonical_prefix_backs_off_where_a_token_could_span() {
    let trie = synthetic_vocab(0, 0);
    let a = Arc::new(JsonStr {
        prefix: b"{\"name\":".to_vec(),
        suffix: b"}".to_vec(),
        min: 0,
        max: None,
    });
    let m = Matcher::new(Grammar::new(a.clone()), trie.clone());
    let forced = m.forced_bytes();
    assert_eq!(forced, b"{\"name\":\"");
    // `"` at byte 8 can start `""`, `"}` or `"name"`, which the grammar allows after it:
    // the boundary before it is the last safe one.
    let split = [
        tok(&trie, "{\""),
        tok(&trie, "name"),
        tok(&trie, "\":"),
        tok(&trie, "\""),
    ];
    assert_eq!(m.canonical_forced_prefix(&split), 3);
    let whole = [tok(&trie, "{\"name\":\"")];
    assert_eq!(m.canonical_forced_prefix(&whole), 0);
    // `":"` could also start `":"` + more? No such token: the cut stays at byte 8.
    let split2 = [tok(&trie, "{\""), tok(&trie, "name"), tok(&trie, "\":\"")];
    assert_eq!(m.canonical_forced_prefix(&split2), 2);

    // When the forced bytes end the text, nothing is backed off.
    let short = Arc::new(JsonStr {
        prefix: b"[".to_vec(),
        suffix: b"]".to_vec(),
        min: 0,
        max: Some(0),
    });
    let m2 = Matcher::new(Grammar::new(short), trie.clone());
    assert_eq!(m2.forced_bytes(), b"[\"\"]");
    assert_eq!(
        m2.canonical_forced_prefix(&[tok(&trie, "["), tok(&trie, "\"\""), tok(&trie, "]")]),
        3
    );
}

/// With any budget at least the token cost of the shortest completion, a random walk
/// ends accepting within the budget; the mask never dead-ends.
#[test]
fn budget_steers_every_run_to_a_valid_end() {
    let vocabs = [byte_vocab(), synthetic_vocab(5, 2000)];
    for trie in &vocabs {
        assert!(trie.single_bytes_complete());
        let automata: Vec<Arc<Grammar>> = vec![
            Grammar::new(Arc::new(Brackets { max_depth: None })),
            Grammar::new(Arc::new(JsonStr {
                prefix: b"{\"k\":".to_vec(),
                suffix: b"}".to_vec(),
                min: 4,
                max: None,
            })),
            Grammar::new(Arc::new(RegexAuto::new(
                r#"\[("[a-z]{2,5}"(,"[a-z]{2,5}")*)?\]"#,
            ))),
        ];
        for g in &automata {
            // Budgets from the token cost up: the tight end is where steering works hardest.
            let m0 = Matcher::new(g.clone(), trie.clone());
            let start_min = m0.min_completion_tokens();
            assert!(start_min <= m0.min_completion_bytes());
            for budget in start_min..start_min + 12 {
                for seed in 0..8u64 {
                    let mut m = Matcher::new(g.clone(), trie.clone());
                    m.set_budget(budget);
                    let mut rng = SplitRng::new(seed * 1000 + budget as u64);
                    let mut mask = TokenSet::new(trie.vocab_size());
                    let mut used = 0;
                    loop {
                        m.compute_mask(&mut mask);
                        let eos = trie.eos_ids()[0];
                        let non_eos: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
                        if non_eos.is_empty() {
                            assert!(
                                mask.contains(eos),
                                "budget {budget} seed {seed}: dead end after {used} tokens"
                            );
                            m.commit(eos).unwrap();
                            break;
                        }
                        // Uniformly random allowed tokens: openers run budgets out fastest.
                        let t = non_eos[rng.below(non_eos.len())];
                        m.commit(t).unwrap();
                        used += 1;
                        assert!(
                            used <= budget,
                            "budget {budget} seed {seed}: {used} tokens used"
                        );
                    }
                    assert!(m.is_accepting());
                }
            }
        }
    }
}

#[test]
fn budget_zero_allows_only_eos_when_accepting_and_progress_otherwise() {
    let trie = synthetic_vocab(2, 0);
    let g = Grammar::new(Arc::new(Brackets { max_depth: None }));
    let mut m = Matcher::new(g.clone(), trie.clone());
    m.commit(tok(&trie, "[a")).unwrap();
    m.set_budget(1);
    assert!(m.is_steering());
    let mut mask = TokenSet::new(trie.vocab_size());
    m.compute_mask(&mut mask);
    // One token left: it must close the list.
    let allowed: Vec<String> = mask
        .iter()
        .map(|t| String::from_utf8_lossy(trie.token_bytes(t)).into_owned())
        .collect();
    assert_eq!(allowed, vec!["]".to_string()]);
    assert!(!m.is_allowed(tok(&trie, ",")));
    assert!(matches!(
        m.commit(tok(&trie, ",")),
        Err(CommitError::OverBudget { .. })
    ));
    m.commit(tok(&trie, "]")).unwrap();
    assert_eq!(m.budget(), Some(0));
    m.compute_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![256]);

    // Over budget from the start: only tokens that lower the token cost of the
    // completion (`]]` is one token; after `a]` one `]` is still needed, so the cost
    // stays at one and `a]` is refused).
    let mut m = Matcher::new(g, trie.clone());
    m.commit(tok(&trie, "[[")).unwrap();
    assert_eq!(m.min_completion_tokens(), 1);
    m.set_budget(0);
    m.compute_mask(&mut mask);
    assert!(
        mask.contains(tok(&trie, "]]"))
            && !mask.contains(tok(&trie, "a]"))
            && !mask.contains(tok(&trie, "["))
    );
}

/// The budget counts tokens, not bytes. A four-field object of nullable strings has a
/// 68-byte shortest completion (`""` for each) that a vocabulary with `":"` spells in 17
/// tokens. Under a 40-token budget the first string must still take content (a byte
/// bound would close it at once), and the run still ends valid within the budget.
#[test]
fn budget_counts_tokens_so_strings_are_not_cut_short() {
    use formwork_grammar::compile::{compile, Config};
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "alpha_field": {"type": ["string", "null"]},
            "beta_field": {"type": ["string", "null"]},
            "gamma_field": {"type": ["string", "null"]},
            "delta_field": {"type": ["string", "null"]}
        },
        "required": ["alpha_field", "beta_field", "gamma_field", "delta_field"],
        "additionalProperties": false
    });
    let a = compile(&schema, &Config::default()).unwrap();
    let g = Grammar::new(a);
    let words: &[&[u8]] = &[
        b"{\"",
        b"alpha_field",
        b"beta_field",
        b"gamma_field",
        b"delta_field",
        b"\":",
        b"\":\"",
        b"null",
        b",\"",
        b"\",",
        b"hello",
    ];
    let trie = byte_vocab_with(words.iter().map(|w| w.to_vec()));
    let t = |s: &str| tok(&trie, s);

    let mut m = Matcher::new(g.clone(), trie.clone());
    assert_eq!(m.min_completion_bytes(), 68);
    // {" alpha_field ":" ", | " beta_field ":" ", | " gamma_field ":" ", | " delta_field ":" " }
    assert_eq!(m.min_completion_tokens(), 17);

    let budget = 40;
    m.set_budget(budget);
    let mut used = 0;
    for s in ["{\"", "alpha_field", "\":\""] {
        m.commit(t(s)).unwrap();
        used += 1;
    }
    // Inside the first string: content is allowed, repeatedly, while the budget has room.
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut content = 0;
    loop {
        m.compute_mask(&mut mask);
        if !mask.contains(t("hello")) {
            break;
        }
        assert!(m.is_allowed(t("hello")));
        m.commit(t("hello")).unwrap();
        used += 1;
        content += 1;
    }
    assert!(
        content >= 10,
        "only {content} content tokens before the budget closed the string"
    );
    assert!(matches!(
        m.commit(t("hello")),
        Err(CommitError::OverBudget { .. })
    ));
    // Finish with the first allowed token each time: it must end valid within budget.
    let mut text = b"{\"alpha_field\":\"".to_vec();
    text.extend(std::iter::repeat_n(b"hello".as_slice(), content).flatten());
    loop {
        m.compute_mask(&mut mask);
        let next = mask.iter().find(|&x| x != 256);
        match next {
            None => {
                assert!(mask.contains(256), "dead end after {used} tokens");
                break;
            }
            Some(x) => {
                m.commit(x).unwrap();
                text.extend_from_slice(trie.token_bytes(x));
                used += 1;
                assert!(used <= budget, "{used} tokens used, budget {budget}");
            }
        }
    }
    assert!(m.is_accepting());
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 4);
    assert!(v["alpha_field"].as_str().unwrap().starts_with("hellohello"));
}

fn compiled(schema: serde_json::Value) -> Matcher {
    let a = formwork_grammar::compile::compile(&schema, &Default::default()).unwrap();
    Matcher::new(Grammar::new(a), byte_vocab())
}

#[test]
fn null_competes_only_where_a_null_literal_and_another_value_may_start() {
    let schema = serde_json::json!({"type": "object", "properties": {
        "a": {"type": ["string", "null"]}, "b": {"type": "null"}, "c": {"type": "string"}},
        "required": ["a", "b", "c"], "additionalProperties": false});
    let mut m = compiled(schema);
    assert!(!m.null_competes(), "at the start only `{{` may come");
    m.commit_bytes(br#"{"a":"#).unwrap();
    assert!(
        m.null_competes(),
        "`null` or a string may start the value of a"
    );
    // Inside the string, `null` is content followed by more content or `"`.
    let mut s = m.clone();
    s.commit_bytes(b"\"").unwrap();
    assert!(!s.null_competes());
    // Only null may come for b: nothing competes with it.
    m.commit_bytes(br#"null,"b":"#).unwrap();
    assert!(!m.null_competes());
    m.commit_bytes(br#"null,"c":"#).unwrap();
    assert!(!m.null_competes(), "c is not nullable");

    // A nullable integer in an array: null against digits and `-`.
    let mut arr =
        compiled(serde_json::json!({"type": "array", "items": {"type": ["integer", "null"]}}));
    arr.commit_bytes(b"[").unwrap();
    assert!(arr.null_competes());
    // A string of at most 4 characters may hold `null` as its content, then only `"`.
    let mut short = compiled(serde_json::json!({"type": "string", "maxLength": 4}));
    short.commit_bytes(b"\"").unwrap();
    assert!(!short.null_competes());
}
