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
//! The measured mask times are in docs/masks.md, next to
//! the benchmark command that gives them.
//!
//! Concurrency: one mutex per grammar, taken once per call (never per trie node).
//! Sequences of one schema on different threads serialise on mask misses and steps.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use crate::automaton::ByteAutomaton;
use crate::toktrie::{TokTrie, TokenSet, NO_TOKEN};

mod cache;
mod engine;
mod walk;

use cache::Cache;
use engine::{Engine, Typed};

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
