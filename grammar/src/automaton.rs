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
/// A byte DFA with pre-multiplied states: from `q`, byte `b` leads to
/// `trans[q + classes[b]]`; state 0 refuses. See [`ByteAutomaton::plain_key_table`].
#[derive(Clone, Copy, Debug)]
pub struct KeyTable<'a> {
    pub classes: &'a [u8; 256],
    pub trans: &'a [u32],
    /// Where the key starts.
    pub state: u32,
}

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
    /// (`\S`, `\w`, ECMA's `.` refusing U+2028). `Some((key, n))` promises: for every
    /// byte string `w` made of at most `n` whole plain characters, whether `step`
    /// accepts `w` from `s` depends on `key` alone. So any two states with hints
    /// `(key, n1)` and `(key, n2)` accept exactly the same such strings of at most
    /// `min(n1, n2)` characters, whatever else differs between them (the length
    /// already written, the enclosing objects). The token side keeps, per key, the
    /// plain tokens one walk found accepted and reuses them for every state with that
    /// key. `None` (the default) promises nothing.
    fn plain_key(&self, _s: &Self::State) -> Option<(u64, u32)> {
        None
    }

    /// A key from `plain_key` as a byte DFA over plain text, when it is one. Promise:
    /// for a state `s` with `plain_key(s) == Some((k, n))` and every byte string `w`
    /// of at most `n` whole plain characters, `step` accepts `w` from `s` exactly when
    /// the table, started at its `state`, never reaches state 0 over the bytes of `w`.
    /// The token side then finds the plain tokens of a new key with two table lookups
    /// a trie node, instead of interning an automaton state per node.
    fn plain_key_table(&self, _key: u64) -> Option<KeyTable<'_>> {
        None
    }
}
