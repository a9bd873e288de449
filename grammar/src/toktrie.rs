//! The token side of a vocabulary: token bytes in flat tries, and token bitsets.
//!
//! A [`TokTrie`] is built once per vocabulary from the token bytes and the EOS ids,
//! and shared (`Arc<TokTrie>`, `Send + Sync`) by every schema and every sequence.
//! It knows nothing about JSON Schema.
//!
//! # Layout
//!
//! A trie is a `Vec` of 8-byte nodes in depth-first order. Each node holds its
//! byte, the token that ends there (if any), its depth and the index one past its
//! subtree. A mask walk keeps one automaton state per depth; a byte the automaton
//! refuses jumps to the end of the subtree, so a refused prefix costs one lookup.
//!
//! Three tries are kept:
//! - `full`: every token that can ever be allowed (not special, not empty);
//! - `plain`: the *plain* tokens of at most [`PLAIN_BUCKETS`] characters, i.e. tokens
//!   whose bytes are whole UTF-8 characters other than `"`, `\` and U+0000..=U+001F
//!   (see [`crate::ByteAutomaton::plain_chars_allowed`]); each node also records the
//!   largest character count of the tokens below it;
//! - `rest`: every other token (the non-plain ones and the longer plain ones).
//!
//! For each `n` in `1..=PLAIN_BUCKETS` the set of plain tokens of at most `n`
//! characters is precomputed. A state inside a string body that allows any `n`
//! plain characters then ORs in that set and walks only `rest` (plus, for small
//! `n`, the part of `plain` leading to longer tokens). At 49k tokens `rest` is a
//! small fraction of the vocabulary.
//!
//! # Tokens that are never allowed
//! Special tokens (flagged by the caller), tokens with empty bytes and tokens
//! longer than [`MAX_TOKEN_BYTES`] bytes are in no trie: no grammar allows them.
//! EOS ids are allowed by the matcher exactly in accepting states.
//!
//! Several ids may share the same bytes (byte-fallback tokens such as `<0x41>`
//! next to `A`). The trie holds the smallest id; the others follow it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Plain-token buckets: character counts `1..=PLAIN_BUCKETS` get a precomputed set.
pub const PLAIN_BUCKETS: usize = 32;
/// Longer tokens are left out of the tries (never allowed). Depth fits in 8 bits.
pub const MAX_TOKEN_BYTES: usize = 255;

pub(crate) const NO_TOKEN: u32 = 0x00FF_FFFF;
const MAX_NODES: usize = 0x00FF_FFFF;

static NEXT_TRIE_ID: AtomicU64 = AtomicU64::new(1);

/// A set of token ids: one bit per token of the vocabulary.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    words: Vec<u64>,
    n: usize,
}

impl TokenSet {
    /// An empty set over a vocabulary of `n` tokens.
    pub fn new(n: usize) -> Self {
        TokenSet {
            words: vec![0; n.div_ceil(64)],
            n,
        }
    }
    /// The vocabulary size this set ranges over.
    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
    #[inline]
    pub fn allow(&mut self, tok: u32) {
        let t = tok as usize;
        debug_assert!(t < self.n);
        self.words[t >> 6] |= 1u64 << (t & 63);
    }
    #[inline]
    pub fn disallow(&mut self, tok: u32) {
        let t = tok as usize;
        self.words[t >> 6] &= !(1u64 << (t & 63));
    }
    #[inline]
    pub fn contains(&self, tok: u32) -> bool {
        let t = tok as usize;
        t < self.n && self.words[t >> 6] & (1u64 << (t & 63)) != 0
    }
    /// The number of allowed tokens.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn clear(&mut self) {
        self.words.fill(0);
    }
    /// The allowed ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some((i as u32) * 64 + b)
            })
        })
    }
    /// The bits, 64 tokens a word, token `t` at bit `t % 64` of word `t / 64`.
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }
    /// `self |= other`. Both must range over the same vocabulary.
    pub fn union_with(&mut self, other: &TokenSet) {
        debug_assert_eq!(self.n, other.n);
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
    }
    /// `self &= other`.
    pub fn intersect_with(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= *b;
        }
    }
    pub(crate) fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words
    }
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenSet({} of {})", self.count(), self.n)
    }
}

/// One node of a flat trie: 8 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    /// byte (low 8 bits) | token id << 8 (`NO_TOKEN` when no token ends here).
    w0: u32,
    /// subtree end (low 24 bits) | depth << 24.
    w1: u32,
}

impl Node {
    #[inline(always)]
    pub(crate) fn byte(self) -> u8 {
        self.w0 as u8
    }
    #[inline(always)]
    pub(crate) fn token(self) -> u32 {
        self.w0 >> 8
    }
    #[inline(always)]
    pub(crate) fn subtree_end(self) -> usize {
        (self.w1 & 0x00FF_FFFF) as usize
    }
    #[inline(always)]
    pub(crate) fn depth(self) -> usize {
        (self.w1 >> 24) as usize
    }
}

/// A flat trie in depth-first order; node 0 is the root (depth 0, no byte).
#[derive(Clone, Debug, Default)]
pub(crate) struct FlatTrie {
    pub(crate) nodes: Vec<Node>,
    /// For the plain trie only: the largest character count of a token in the
    /// subtree of each node.
    pub(crate) max_chars: Vec<u8>,
}

impl FlatTrie {
    /// Builds from `(bytes, id)` pairs sorted by bytes, with unique bytes.
    fn build(sorted: &[(&[u8], u32)], chars: Option<&dyn Fn(u32) -> u8>) -> FlatTrie {
        let mut nodes = vec![Node {
            w0: NO_TOKEN << 8,
            w1: 0,
        }];
        let mut max_chars = vec![0u8];
        // Open path: node indices for depths 0..=len.
        let mut path: Vec<usize> = vec![0];
        let mut cur: &[u8] = &[];
        for &(bytes, id) in sorted {
            let lcp = cur.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            while path.len() > lcp + 1 {
                let i = path.pop().unwrap();
                let end = nodes.len() as u32;
                nodes[i].w1 |= end;
            }
            for (d, &b) in bytes.iter().enumerate().skip(lcp) {
                path.push(nodes.len());
                nodes.push(Node {
                    w0: (b as u32) | (NO_TOKEN << 8),
                    w1: ((d + 1) as u32) << 24,
                });
                max_chars.push(0);
            }
            let last = *path.last().unwrap();
            nodes[last].w0 = (nodes[last].w0 & 0xFF) | (id << 8);
            if let Some(f) = chars {
                let c = f(id);
                for &i in &path {
                    max_chars[i] = max_chars[i].max(c);
                }
            }
            cur = bytes;
        }
        while let Some(i) = path.pop() {
            let end = nodes.len() as u32;
            nodes[i].w1 |= end;
        }
        assert!(
            nodes.len() < MAX_NODES,
            "token trie: {} nodes, limit {}",
            nodes.len(),
            MAX_NODES
        );
        if chars.is_none() {
            max_chars = Vec::new();
        }
        FlatTrie { nodes, max_chars }
    }

    /// The node index reached by `bytes` from the root, if the path exists.
    pub(crate) fn find(&self, bytes: &[u8]) -> Option<usize> {
        let mut i = 0usize;
        for &b in bytes {
            let end = self.nodes[i].subtree_end();
            let mut j = i + 1;
            loop {
                if j >= end {
                    return None;
                }
                let n = self.nodes[j];
                if n.byte() == b {
                    break;
                }
                j = n.subtree_end();
            }
            i = j;
        }
        Some(i)
    }
}

/// Whether a token is made of whole plain characters only; its character count.
fn plain_chars(bytes: &[u8]) -> Option<usize> {
    let s = std::str::from_utf8(bytes).ok()?;
    let mut n = 0;
    for c in s.chars() {
        if c == '"' || c == '\\' || (c as u32) < 0x20 {
            return None;
        }
        n += 1;
    }
    (n > 0).then_some(n)
}

/// The token bytes of one vocabulary, in tries ready for mask walks.
pub struct TokTrie {
    id: u64,
    token_bytes: Vec<Vec<u8>>,
    eos_ids: Vec<u32>,
    /// Tokens that may ever be allowed (in the tries, or duplicates of one that is).
    usable: TokenSet,
    pub(crate) full: FlatTrie,
    pub(crate) plain: FlatTrie,
    pub(crate) rest: FlatTrie,
    /// `plain_upto[n - 1]`: plain tokens of at most `n` characters (n = 1..=PLAIN_BUCKETS).
    pub(crate) plain_upto: Vec<TokenSet>,
    /// `(primary, duplicate)`: the duplicate has the same bytes as the primary.
    pub(crate) dups: Vec<(u32, u32)>,
    single_bytes: [bool; 256],
    max_token_len: usize,
}

impl std::fmt::Debug for TokTrie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokTrie")
            .field("vocab_size", &self.vocab_size())
            .field("full_nodes", &self.full.nodes.len())
            .field("plain_nodes", &self.plain.nodes.len())
            .field("rest_nodes", &self.rest.nodes.len())
            .field("eos_ids", &self.eos_ids)
            .finish()
    }
}

impl TokTrie {
    /// Builds the tries. `special[i]` marks token `i` as never allowed by a grammar
    /// (control tokens); a shorter `special` leaves the rest unmarked. `eos_ids` are
    /// the tokens that end a sequence (allowed in accepting states only).
    pub fn new(token_bytes: Vec<Vec<u8>>, special: &[bool], eos_ids: &[u32]) -> Self {
        let n = token_bytes.len();
        let is_special =
            |i: usize| special.get(i).copied().unwrap_or(false) || eos_ids.contains(&(i as u32));
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                let b = &token_bytes[i as usize];
                !is_special(i as usize) && !b.is_empty() && b.len() <= MAX_TOKEN_BYTES
            })
            .collect();
        order.sort_by(|&a, &b| {
            token_bytes[a as usize]
                .cmp(&token_bytes[b as usize])
                .then(a.cmp(&b))
        });

        let mut usable = TokenSet::new(n);
        let mut dups = Vec::new();
        let mut uniq: Vec<(&[u8], u32)> = Vec::with_capacity(order.len());
        for &id in &order {
            usable.allow(id);
            let b = token_bytes[id as usize].as_slice();
            match uniq.last() {
                Some(&(pb, pid)) if pb == b => dups.push((pid, id)),
                _ => uniq.push((b, id)),
            }
        }
        let chars: Vec<u8> = token_bytes
            .iter()
            .map(|b| plain_chars(b).map_or(0, |c| c.min(255) as u8))
            .collect();
        let mut plain_upto = vec![TokenSet::new(n); PLAIN_BUCKETS];
        for &id in &order {
            let c = chars[id as usize] as usize;
            if c >= 1 && c <= PLAIN_BUCKETS {
                for set in &mut plain_upto[c - 1..] {
                    set.allow(id);
                }
            }
        }
        let is_bucketed = |id: u32| {
            let c = chars[id as usize] as usize;
            c >= 1 && c <= PLAIN_BUCKETS
        };
        let plain_list: Vec<(&[u8], u32)> = uniq
            .iter()
            .copied()
            .filter(|&(_, id)| is_bucketed(id))
            .collect();
        let rest_list: Vec<(&[u8], u32)> = uniq
            .iter()
            .copied()
            .filter(|&(_, id)| !is_bucketed(id))
            .collect();
        let full = FlatTrie::build(&uniq, None);
        let char_of = |id: u32| chars[id as usize];
        let plain = FlatTrie::build(&plain_list, Some(&char_of));
        let rest = FlatTrie::build(&rest_list, None);

        let mut have = [false; 256];
        for &(b, _) in &uniq {
            if b.len() == 1 {
                have[b[0] as usize] = true;
            }
        }
        let max_token_len = uniq.iter().map(|(b, _)| b.len()).max().unwrap_or(0);
        TokTrie {
            id: NEXT_TRIE_ID.fetch_add(1, Ordering::Relaxed),
            token_bytes,
            eos_ids: eos_ids.to_vec(),
            usable,
            full,
            plain,
            rest,
            plain_upto,
            dups,
            single_bytes: have,
            max_token_len,
        }
    }

    /// The number of token ids (the width of every [`TokenSet`] for this vocabulary).
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The bytes of token `id` (empty for special tokens without text).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map_or(&[], |b| b.as_slice())
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }

    /// Whether a grammar may ever allow `id` (not special, not EOS, not empty).
    pub fn is_usable(&self, id: u32) -> bool {
        self.usable.contains(id)
    }

    /// Whether every one of the 256 bytes is a token by itself. When true, any byte
    /// string can be written in at most as many tokens as it has bytes, which makes
    /// budget steering exact in the sense documented on `Matcher::set_budget`.
    pub fn single_bytes_complete(&self) -> bool {
        self.single_bytes.iter().all(|&h| h)
    }

    /// Whether every printable ASCII byte (0x20..=0x7E) is a token by itself. Budget
    /// steering needs single-byte tokens only for the bytes of shortest completions,
    /// which are printable ASCII for compact JSON. (SmolLM2 lacks single-byte tokens
    /// for a few control bytes and for bytes that never occur in UTF-8.)
    pub fn printable_ascii_complete(&self) -> bool {
        self.single_bytes[0x20..0x7F].iter().all(|&h| h)
    }

    /// Whether byte `b` alone is a token.
    pub fn has_single_byte(&self, b: u8) -> bool {
        self.single_bytes[b as usize]
    }

    /// The longest token, in bytes.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// Node counts of the three tries: `(full, plain, rest)`.
    pub fn node_counts(&self) -> (usize, usize, usize) {
        (
            self.full.nodes.len(),
            self.plain.nodes.len(),
            self.rest.nodes.len(),
        )
    }

    /// The memory the tries and sets take, in bytes (token bytes included).
    pub fn memory_bytes(&self) -> usize {
        let nodes = self.full.nodes.len() + self.plain.nodes.len() + self.rest.nodes.len();
        nodes * 8
            + self.plain.max_chars.len()
            + self.plain_upto.len() * self.vocab_size().div_ceil(8)
            + self.token_bytes.iter().map(|b| b.len() + 24).sum::<usize>()
    }

    /// A process-unique id, used by a grammar to keep masks per vocabulary.
    pub(crate) fn unique_id(&self) -> u64 {
        self.id
    }

    /// The token with exactly these bytes (the smallest such id), if any.
    pub fn token_with_bytes(&self, bytes: &[u8]) -> Option<u32> {
        let i = self.full.find(bytes)?;
        let t = self.full.nodes[i].token();
        (i > 0 && t != NO_TOKEN).then_some(t)
    }

    /// Greedy longest-match tokenisation, for tests and benchmarks. This is *not* the
    /// model's canonical tokenisation (BPE merges by rank, not by length); use the real
    /// tokenizer for anything fed to a model. `None` if some byte has no token.
    pub fn greedy_tokenize(&self, bytes: &[u8]) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let (t, len) = self.longest_prefix_token(&bytes[pos..])?;
            out.push(t);
            pos += len;
        }
        Some(out)
    }

    /// The longest usable token that is a prefix of `bytes`, with its length.
    pub fn longest_prefix_token(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        let nodes = &self.full.nodes;
        let (mut i, mut best) = (0usize, None);
        for (k, &b) in bytes.iter().enumerate() {
            let end = nodes[i].subtree_end();
            let mut j = i + 1;
            while j < end && nodes[j].byte() != b {
                j = nodes[j].subtree_end();
            }
            if j >= end {
                break;
            }
            i = j;
            if nodes[i].token() != NO_TOKEN {
                best = Some((nodes[i].token(), k + 1));
            }
        }
        best
    }

    /// Whether some usable token starts with `prefix` and is strictly longer.
    pub fn has_extension(&self, prefix: &[u8]) -> bool {
        match self.full.find(prefix) {
            Some(i) => self.full.nodes[i].subtree_end() > i + 1,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenset_basic_ops() {
        let mut s = TokenSet::new(130);
        s.allow(0);
        s.allow(64);
        s.allow(129);
        assert!(s.contains(64) && !s.contains(65) && !s.contains(1000));
        assert_eq!(s.count(), 3);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 64, 129]);
        s.disallow(64);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 129]);
        s.clear();
        assert!(s.is_empty());
    }

    #[test]
    fn flat_trie_layout_and_dups() {
        let toks: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            b"a".to_vec(),
            b"abc".to_vec(),
            b"b".to_vec(),
            b"a".to_vec(),
            b"".to_vec(),
            b"<s>".to_vec(),
        ];
        let t = TokTrie::new(toks, &[false, false, false, false, false, false, true], &[]);
        // root, a, b (under a), c (under ab), b (top) = 5 nodes
        assert_eq!(t.full.nodes.len(), 5);
        assert_eq!(t.full.nodes[0].subtree_end(), 5);
        assert_eq!(t.token_with_bytes(b"a"), Some(1));
        assert_eq!(t.token_with_bytes(b"abc"), Some(2));
        assert_eq!(t.token_with_bytes(b"ac"), None);
        assert_eq!(t.dups, vec![(1, 4)]);
        assert!(!t.is_usable(5) && !t.is_usable(6) && t.is_usable(4));
        assert!(t.has_extension(b"ab") && !t.has_extension(b"abc") && !t.has_extension(b"b"));
        let a = t.full.find(b"a").unwrap();
        assert_eq!(t.full.nodes[a].depth(), 1);
        assert_eq!(t.full.nodes[a].subtree_end(), 4);
    }

    #[test]
    fn plain_buckets() {
        let toks: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            "é".as_bytes().to_vec(),
            b"a\"".to_vec(),
            vec![0xC3],
            b"x y z".to_vec(),
        ];
        let t = TokTrie::new(toks, &[], &[]);
        assert!(t.plain_upto[0].contains(1) && !t.plain_upto[0].contains(0));
        assert!(t.plain_upto[1].contains(0) && t.plain_upto[1].contains(1));
        assert!(
            !t.plain_upto[PLAIN_BUCKETS - 1].contains(2)
                && !t.plain_upto[PLAIN_BUCKETS - 1].contains(3)
        );
        assert!(t.plain_upto[4].contains(4));
        assert!(t.rest.find(b"a\"").is_some() && t.rest.find(&[0xC3]).is_some());
        assert!(t.plain.find(b"ab").is_some() && t.rest.find(b"ab").is_none());
    }
}
