//! formwork-grammar: JSON Schema -> token masks. Pure: no I/O, no model runtime.
//!
//! # The pipeline
//!
//! ```text
//! schema JSON ──schema──▶ IR ──compile──▶ Automaton (ByteAutomaton) ──┐
//!                                                                     ├─▶ Grammar ─▶ Matcher ─▶ mask
//! token bytes ──toktrie──▶ TokTrie ───────────────────────────────────┘   (shared)   (per sequence)
//! ```
//!
//! 1. **Schema JSON -> IR** ([`schema`], into [`ir`]). The document is read the way the
//!    validator reads it (drafts 4 to 2020-12, `$ref` inside the document): each
//!    subschema becomes a union of typed conjunctions, `allOf` and `$ref` intersect,
//!    `anyOf`/`oneOf` distribute, and children are compiled on demand into IR nodes, so
//!    recursion is a cycle of nodes. *Guarantee:* every keyword is enforced exactly,
//!    narrowed to a sound subset (a `oneOf` made disjoint, a `not` or `if` read as what
//!    certainly fails the negated schema), relaxed and listed ([`config::Config::lenient`]),
//!    or refused with a one-line [`config::CompileError`] at its JSON Pointer.
//!    *Cost:* about linear in the document; what can grow faster (distributing
//!    combinators, narrowing, DFA products, length tables) is bounded by
//!    [`config::Limits`] and one compile step budget, which fail with their numbers.
//! 2. **IR -> automaton** ([`compile`]: patterns and formats as DFAs over decoded bytes
//!    in [`dfa`], exact numbers in [`num`], the frames in `compile::machine`). A
//!    shortest-length pass gives every node its shortest text and drops the alternatives
//!    that have none. *Guarantee:* the [`ByteAutomaton`] contract: `step` refuses a byte
//!    exactly when no valid instance continues the text, so no state is a dead end;
//!    `is_accepting` is true exactly on complete valid instances; `shortest_completion`
//!    leads to acceptance. *Cost:* a state is a sorted set of small frame stacks; a
//!    step clones the threads it keeps.
//! 3. **Token bytes -> trie** ([`toktrie`]), once per vocabulary and shared by every
//!    schema. It knows nothing about JSON Schema: flat depth-first tries, the plain
//!    tokens (whole characters a string body takes) bucketed by length.
//! 4. **(automaton, trie) -> [`Matcher`] -> mask** ([`matcher`]). A [`Grammar`] per
//!    schema interns automaton states, fills their transition rows and keeps each
//!    state's mask once computed; a `Matcher` per sequence holds only a state id, an
//!    undo log and the token budget. *Guarantee:* the mask is exactly the tokens whose
//!    bytes `step` takes (EOS only where the text is accepted), `commit` agrees with it,
//!    and under a budget the mask steers to the shortest completion. *Cost:* a cached
//!    mask is a lookup and a copy; an uncached one is a walk of the trie where a refused
//!    byte skips its subtree and each node costs one table load. The measured figures
//!    are in docs/masks.md, next to their command.
//!
//! Besides: [`source`] (strings quoted from the document, `x-formwork-source`, compiled
//! per document by `Automaton::with_source`) and [`sample`] (random valid instances and
//! the one small deterministic RNG of the benchmarks and tests).
//!
//! # Usage
//!
//! ```
//! use std::sync::Arc;
//! use formwork_grammar::compile::{compile, Config};
//! use formwork_grammar::{Grammar, Matcher, TokTrie, TokenSet};
//!
//! let automaton = compile(&serde_json::json!({"type": "boolean"}), &Config::default()).unwrap();
//! // A toy vocabulary; token 0 is EOS.
//! let tokens: Vec<Vec<u8>> = ["</s>", "true", "false", "tr", "ue", "1"]
//!     .iter()
//!     .map(|t| t.as_bytes().to_vec())
//!     .collect();
//! let special = [true, false, false, false, false, false];
//! let trie = Arc::new(TokTrie::new(tokens, &special, &[0]));
//! let mut m = Matcher::new(Grammar::new(automaton), trie.clone());
//! let mut mask = TokenSet::new(trie.vocab_size());
//! m.compute_mask(&mut mask);
//! assert!(mask.contains(1) && mask.contains(3) && !mask.contains(5) && !mask.contains(0));
//! m.commit(3).unwrap(); // "tr"
//! m.compute_mask(&mut mask);
//! assert!(mask.contains(4) && !mask.contains(1));
//! m.commit(4).unwrap(); // "ue"
//! assert!(m.is_accepting());
//! ```
//!
//! **Invariant:** pure. No I/O, no candle, no tokenizers: the vocabulary arrives as
//! token bytes and EOS ids.

pub mod automaton;
pub mod compile;
pub mod config;
pub mod dfa;
pub mod ir;
pub mod matcher;
pub mod num;
pub mod sample;
pub mod schema;
pub mod source;
pub mod toktrie;
pub mod tools;

pub use automaton::ByteAutomaton;
pub use matcher::{CommitError, Grammar, GrammarStats, Matcher};
pub use toktrie::{TokTrie, TokenSet};
