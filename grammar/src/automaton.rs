//! The contract between the schema compiler and the token machinery.
//!
//! The compiler (`compile`) produces something that steps over *bytes*. The token
//! side (`toktrie`, `matcher`) knows nothing about JSON Schema: it walks the token
//! trie with `step`, interns states, caches transitions and masks, and computes
//! forced continuations and budget-aware steering from `shortest_completion`.

use std::fmt::Debug;
use std::hash::Hash;

/// A deterministic byte-level recogniser of the valid instances of one schema.
///
/// Invariants every implementation keeps:
/// - `step` returns `None` exactly when no valid instance has the bytes read so far
///   followed by `b` as a prefix (no dead ends: every state reachable through `step`
///   can still reach acceptance).
/// - `is_accepting(s)` is true exactly when the bytes read so far are a complete
///   valid instance.
/// - `shortest_completion(s)` is a shortest byte string leading from `s` to an
///   accepting state (empty if `s` accepts).
pub trait ByteAutomaton: Send + Sync {
    /// The state after some bytes. Small and cheap to clone for flat schemas;
    /// may carry a stack for recursive ones.
    type State: Clone + Eq + Hash + Debug + Send + Sync;

    fn start(&self) -> Self::State;
    fn step(&self, s: &Self::State, b: u8) -> Option<Self::State>;
    fn is_accepting(&self, s: &Self::State) -> bool;
    fn shortest_completion(&self, s: &Self::State) -> Vec<u8>;

    /// Optional acceleration hint for the mask computation (a "slice" in llguidance's
    /// terms). `Some(n)` promises: from `s`, every byte string that is a concatenation
    /// of k <= n whole *plain* characters is accepted by `step` (never `None`), where a
    /// plain character is a Unicode scalar value other than `"`, `\\` and
    /// U+0000..=U+001F, encoded as UTF-8. `Some(u32::MAX)` means no limit. The token
    /// side may then allow every plain token of at most n characters without walking
    /// it. `None` (the default) promises nothing.
    fn plain_chars_allowed(&self, _s: &Self::State) -> Option<u32> {
        None
    }

    /// Optional acceleration hint: a superset of the bytes `step` accepts from `s`, as a
    /// 256-bit set (byte `b` at bit `b % 64` of word `b / 64`). `Some(set)` promises
    /// `step(s, b)` is `None` for every `b` outside `set`. The token side asks once per
    /// state and then skips those bytes without calling `step`: a structural state that
    /// allows a handful of bytes otherwise costs one `step` per child of the trie root
    /// (about 250) the first time it is masked. `None` (the default) promises nothing.
    ///
    /// Contract: the matcher uses the set only as a filter. A byte outside it is
    /// recorded as refused without calling `step`; a byte inside it is still stepped,
    /// so a superset is sound and only an omitted byte is a bug. The compiled automaton
    /// returns exactly the bytes `step` accepts (tested against `step` on random walks).
    fn allowed_bytes(&self, _s: &Self::State) -> Option<[u64; 4]> {
        None
    }

    /// Optional acceleration hint for string bodies under a pattern or format, where
    /// `plain_chars_allowed` is useless because some plain characters are refused
    /// (`\S`, `\w`, ECMA's `.` refusing U+2028). `Some(k)` promises: for every byte
    /// string `w` made of at most `k.n` whole plain characters, `step` accepts `w` from
    /// `s` exactly when `k.table`, started at its `state`, never reaches state 0 over
    /// the bytes of `w`; and equal `k.key`s come with equal tables and start states.
    /// So whether such a string is accepted depends on the key alone, whatever else
    /// differs between two states (the length already written, the enclosing objects).
    /// The token side walks the plain tokens of a new key on the table (two lookups a
    /// trie node, no automaton state interned) and reuses the result for every state
    /// with that key. `None` (the default) promises nothing.
    fn plain_key(&self, _s: &Self::State) -> Option<PlainKey<'_>> {
        None
    }
}

/// The answer of [`ByteAutomaton::plain_key`].
#[derive(Clone, Copy, Debug)]
pub struct PlainKey<'a> {
    pub key: u64,
    /// How many plain characters the promise covers.
    pub n: u32,
    pub table: KeyTable<'a>,
}

/// A byte DFA with pre-multiplied states: from `q`, byte `b` leads to
/// `trans[q + classes[b]]`; state 0 refuses.
#[derive(Clone, Copy, Debug)]
pub struct KeyTable<'a> {
    pub classes: &'a [u8; 256],
    pub trans: &'a [u32],
    /// Where the key starts.
    pub state: u32,
}
