//! Test-only automata and vocabularies for the matcher tests. None of this is
//! product code: the real automata come from `compile`.
#![allow(dead_code)]

#[path = "../../../tests/support/skip.rs"]
pub mod skip;
use std::sync::Arc;

use formwork_grammar::toktrie::TokTrie;
use formwork_grammar::ByteAutomaton;
use regex_automata::dfa::{dense, Automaton as _, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::Anchored;

/// The tests' deterministic RNG is the crate's own (xorshift64* seeded by splitmix64).
pub use formwork_grammar::sample::SplitRng;

/// Shortest completion by breadth-first search over bytes (for small automata).
pub fn bfs_completion<A: ByteAutomaton>(a: &A, s: &A::State) -> Vec<u8> {
    use std::collections::{HashMap, VecDeque};
    let mut prev: HashMap<A::State, Option<(A::State, u8)>> = HashMap::new();
    let mut q = VecDeque::new();
    prev.insert(s.clone(), None);
    q.push_back(s.clone());
    while let Some(x) = q.pop_front() {
        if a.is_accepting(&x) {
            let mut out = Vec::new();
            let mut cur = x;
            while let Some(Some((p, b))) = prev.get(&cur).cloned() {
                out.push(b);
                cur = p;
            }
            out.reverse();
            return out;
        }
        for b in 0..=255u8 {
            if let Some(y) = a.step(&x, b) {
                if !prev.contains_key(&y) {
                    prev.insert(y.clone(), Some((x.clone(), b)));
                    q.push_back(y);
                }
            }
        }
    }
    panic!("no completion: dead end in a test automaton");
}

/// A full-match regex as a byte automaton (minimised dense DFA: no dead ends).
pub struct RegexAuto {
    dfa: dense::DFA<Vec<u32>>,
}

impl RegexAuto {
    pub fn new(pattern: &str) -> Self {
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .minimize(true)
                    .start_kind(StartKind::Anchored),
            )
            .syntax(
                regex_automata::util::syntax::Config::new()
                    .unicode(false)
                    .utf8(false),
            )
            .build(&format!("^(?:{pattern})$"))
            .unwrap();
        RegexAuto { dfa }
    }
}

impl ByteAutomaton for RegexAuto {
    type State = StateID;
    fn start(&self) -> StateID {
        self.dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .unwrap()
    }
    fn step(&self, s: &StateID, b: u8) -> Option<StateID> {
        let t = self.dfa.next_state(*s, b);
        (!self.dfa.is_dead_state(t) && !self.dfa.is_quit_state(t)).then_some(t)
    }
    fn is_accepting(&self, s: &StateID) -> bool {
        self.dfa.is_match_state(self.dfa.next_eoi_state(*s))
    }
    fn shortest_completion(&self, s: &StateID) -> Vec<u8> {
        bfs_completion(self, s)
    }
    fn allowed_bytes(&self, s: &StateID) -> Option<[u64; 4]> {
        Some(byte_set((0..=255u8).filter(|&b| self.step(s, b).is_some())))
    }
}

/// A 256-bit byte set from bytes.
pub fn byte_set(bytes: impl IntoIterator<Item = u8>) -> [u64; 4] {
    let mut set = [0u64; 4];
    for b in bytes {
        set[b as usize >> 6] |= 1 << (b & 63);
    }
    set
}

/// Exactly one literal.
pub struct Literal(pub Vec<u8>);
impl ByteAutomaton for Literal {
    type State = usize;
    fn start(&self) -> usize {
        0
    }
    fn step(&self, s: &usize, b: u8) -> Option<usize> {
        (self.0.get(*s) == Some(&b)).then_some(s + 1)
    }
    fn is_accepting(&self, s: &usize) -> bool {
        *s == self.0.len()
    }
    fn shortest_completion(&self, s: &usize) -> Vec<u8> {
        self.0[*s..].to_vec()
    }
}

/// Nested `[..]` / `{..}` lists of `a`, comma-separated: a stack-shaped state.
/// `V := "a" | "[" (V ("," V)*)? "]" | "{" (V ("," V)*)? "}"`.
pub struct Brackets {
    /// Maximum nesting (None: unbounded).
    pub max_depth: Option<usize>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct BState {
    stack: Vec<u8>,
    /// 0: value expected, 1: value or close expected, 2: after a value
    phase: u8,
}

impl ByteAutomaton for Brackets {
    type State = BState;
    fn start(&self) -> BState {
        BState {
            stack: vec![],
            phase: 0,
        }
    }
    fn step(&self, s: &BState, b: u8) -> Option<BState> {
        let close = s.stack.last().map(|&o| if o == b'[' { b']' } else { b'}' });
        let mut t = s.clone();
        match (s.phase, b) {
            (0 | 1, b'a') => t.phase = 2,
            (0 | 1, b'[' | b'{') => {
                if self.max_depth.is_some_and(|m| s.stack.len() >= m) {
                    return None;
                }
                t.stack.push(b);
                t.phase = 1;
            }
            (1 | 2, c) if Some(c) == close => {
                t.stack.pop();
                t.phase = 2;
            }
            (2, b',') if !s.stack.is_empty() => t.phase = 0,
            _ => return None,
        }
        Some(t)
    }
    fn is_accepting(&self, s: &BState) -> bool {
        s.phase == 2 && s.stack.is_empty()
    }
    fn allowed_bytes(&self, s: &BState) -> Option<[u64; 4]> {
        // A deliberate superset for the value phases: `]` and `}` are always in it.
        Some(match s.phase {
            0 | 1 => byte_set(*b"a[{]}"),
            _ => byte_set(*b",]}"),
        })
    }
    fn shortest_completion(&self, s: &BState) -> Vec<u8> {
        let mut out = Vec::new();
        match s.phase {
            0 => out.push(b'a'),
            _ => {}
        }
        for &o in s.stack.iter().rev() {
            out.push(if o == b'[' { b']' } else { b'}' });
        }
        out
    }
}

/// `prefix "` JSON-string-body `" suffix`, with a length range in code points and
/// strict UTF-8. Implements the plain-character hint.
pub struct JsonStr {
    pub prefix: Vec<u8>,
    pub suffix: Vec<u8>,
    pub min: u32,
    pub max: Option<u32>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum SState {
    Pre(usize),
    Open,
    Body(u32),
    Esc(u32),
    U(u32, u8),
    Utf { n: u32, need: u8, lo: u8, hi: u8 },
    Post(usize),
}

impl JsonStr {
    fn room(&self, n: u32) -> bool {
        self.max.is_none_or(|m| n < m)
    }
}

impl ByteAutomaton for JsonStr {
    type State = SState;
    fn start(&self) -> SState {
        if self.prefix.is_empty() {
            SState::Open
        } else {
            SState::Pre(0)
        }
    }
    fn step(&self, s: &SState, b: u8) -> Option<SState> {
        use SState::*;
        Some(match *s {
            Pre(i) => {
                if self.prefix[i] != b {
                    return None;
                }
                if i + 1 == self.prefix.len() {
                    Open
                } else {
                    Pre(i + 1)
                }
            }
            Open if b == b'"' => Body(0),
            Open => return None,
            Body(n) => match b {
                b'"' if n >= self.min => Post(0),
                b'"' => return None,
                b'\\' if self.room(n) => Esc(n),
                0..=0x1F => return None,
                _ if !self.room(n) => return None,
                0x20..=0x7F => Body(n + 1),
                0xC2..=0xDF => Utf {
                    n,
                    need: 1,
                    lo: 0x80,
                    hi: 0xBF,
                },
                0xE0 => Utf {
                    n,
                    need: 2,
                    lo: 0xA0,
                    hi: 0xBF,
                },
                0xE1..=0xEC | 0xEE..=0xEF => Utf {
                    n,
                    need: 2,
                    lo: 0x80,
                    hi: 0xBF,
                },
                0xED => Utf {
                    n,
                    need: 2,
                    lo: 0x80,
                    hi: 0x9F,
                },
                0xF0 => Utf {
                    n,
                    need: 3,
                    lo: 0x90,
                    hi: 0xBF,
                },
                0xF1..=0xF3 => Utf {
                    n,
                    need: 3,
                    lo: 0x80,
                    hi: 0xBF,
                },
                0xF4 => Utf {
                    n,
                    need: 3,
                    lo: 0x80,
                    hi: 0x8F,
                },
                _ => return None,
            },
            Esc(n) => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Body(n + 1),
                b'u' => U(n, 0),
                _ => return None,
            },
            U(n, k) => {
                if !b.is_ascii_hexdigit() {
                    return None;
                }
                if k == 3 {
                    Body(n + 1)
                } else {
                    U(n, k + 1)
                }
            }
            Utf { n, need, lo, hi } => {
                if b < lo || b > hi {
                    return None;
                }
                if need == 1 {
                    Body(n + 1)
                } else {
                    Utf {
                        n,
                        need: need - 1,
                        lo: 0x80,
                        hi: 0xBF,
                    }
                }
            }
            Post(i) => {
                if self.suffix.get(i) != Some(&b) {
                    return None;
                }
                Post(i + 1)
            }
        })
    }
    fn is_accepting(&self, s: &SState) -> bool {
        *s == SState::Post(self.suffix.len())
    }
    fn shortest_completion(&self, s: &SState) -> Vec<u8> {
        bfs_completion(self, s)
    }
    fn allowed_bytes(&self, s: &SState) -> Option<[u64; 4]> {
        match *s {
            SState::Pre(i) => Some(byte_set([self.prefix[i]])),
            SState::Open => Some(byte_set([b'"'])),
            SState::Post(i) => Some(byte_set(self.suffix.get(i).copied())),
            _ => None,
        }
    }
    fn plain_chars_allowed(&self, s: &SState) -> Option<u32> {
        match *s {
            SState::Body(n) => Some(self.max.map_or(u32::MAX, |m| m - n)),
            _ => None,
        }
    }
}

/// Hides the plain-character hint of an automaton (to compare both mask paths).
pub struct NoHint<A>(pub A);
impl<A: ByteAutomaton> ByteAutomaton for NoHint<A> {
    type State = A::State;
    fn start(&self) -> A::State {
        self.0.start()
    }
    fn step(&self, s: &A::State, b: u8) -> Option<A::State> {
        self.0.step(s, b)
    }
    fn is_accepting(&self, s: &A::State) -> bool {
        self.0.is_accepting(s)
    }
    fn shortest_completion(&self, s: &A::State) -> Vec<u8> {
        self.0.shortest_completion(s)
    }
}

/// 256 single-byte tokens, then EOS (`</s>`, special) at id 256.
pub fn byte_vocab() -> Arc<TokTrie> {
    byte_vocab_with(std::iter::empty())
}

/// Every byte, EOS at 256, then `words` from id 257 on.
pub fn byte_vocab_with(words: impl IntoIterator<Item = Vec<u8>>) -> Arc<TokTrie> {
    let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    toks.push(b"</s>".to_vec());
    toks.extend(words);
    let mut special = vec![false; toks.len()];
    special[256] = true;
    Arc::new(TokTrie::new(toks, &special, &[256]))
}

/// Bytes, EOS at 256, a control token at 257, then hand-picked and random tokens
/// rich in JSON punctuation, escapes, multi-byte and partial UTF-8, duplicates.
pub fn synthetic_vocab(seed: u64, random_tokens: usize) -> Arc<TokTrie> {
    let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    toks.push(b"</s>".to_vec());
    toks.push(b"<|im_start|>".to_vec());
    let fixed: &[&[u8]] = &[
        b"{\"",
        b"\"}",
        b"\":",
        b"\":\"",
        b"\",\"",
        b"\",",
        b"\\\"",
        b"\\n",
        b"\\u00",
        b"\\\\",
        b"name",
        b"na",
        b"nam",
        b"ame",
        b"\"name\"",
        b"{\"name\":\"",
        b"hello",
        b" world",
        b"a",
        b"aa",
        b"aaa",
        b"aaaa",
        b"[a",
        b"a,",
        b",a",
        b"]]",
        b"}}",
        b"[[",
        b"{[",
        b"a]",
        b"a}",
        b"\"\"",
        b"\"}\n",
        b"\n",
        b"  ",
        b"\t",
        b"0",
        b"12",
        b"345",
        "é".as_bytes(),
        "日本".as_bytes(),
        "😀".as_bytes(),
        &[0xE6, 0x97],
        &[0x97, 0xA5],
        &[0xF0, 0x9F],
        &[0xED, 0xA0, 0x80],
        &[0xC0, 0x80],
        b"<0x41>",
        b"A",
        b"x\"",
        b"x\"}",
        b"0123456789012345678901234567890123456789",
    ];
    toks.extend(fixed.iter().map(|t| t.to_vec()));
    let alphabet: &[&[u8]] = &[
        b"a",
        b"b",
        b"e",
        b" ",
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"n",
        b"u",
        b"0",
        b"9",
        "é".as_bytes(),
        "€".as_bytes(),
        &[0xE2],
        &[0x82],
        &[0xAC],
        b"\n",
        b"x",
        b"y",
    ];
    let mut rng = SplitRng::new(seed);
    for _ in 0..random_tokens {
        let len = 1 + rng.below(8);
        let mut t = Vec::new();
        for _ in 0..len {
            t.extend_from_slice(alphabet[rng.below(alphabet.len())]);
        }
        toks.push(t);
    }
    let mut special = vec![false; toks.len()];
    special[256] = true;
    special[257] = true;
    Arc::new(TokTrie::new(toks, &special, &[256]))
}

/// The tokens of a GGUF file's vocabulary as bytes, special flags and EOS id.
/// A minimal reader of the GGUF metadata (v2/v3), enough for tests and benches.
pub fn gguf_vocab(path: &std::path::Path) -> Option<(Vec<Vec<u8>>, Vec<bool>, Vec<u32>)> {
    let data = std::fs::read(path).ok()?;
    let mut r = GgufReader { d: &data, p: 0 };
    if r.bytes(4)? != b"GGUF" {
        return None;
    }
    let _version = r.u32()?;
    let _tensors = r.u64()?;
    let kvs = r.u64()?;
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    let mut types: Vec<i64> = Vec::new();
    let mut model = String::new();
    let mut eos: Vec<u32> = Vec::new();
    for _ in 0..kvs {
        let key = String::from_utf8(r.string()?.to_vec()).ok()?;
        let ty = r.u32()?;
        match (key.as_str(), ty) {
            ("tokenizer.ggml.tokens", 9) => {
                let _et = r.u32()?;
                let n = r.u64()?;
                for _ in 0..n {
                    tokens.push(r.string()?.to_vec());
                }
            }
            ("tokenizer.ggml.token_type", 9) => {
                let et = r.u32()?;
                let n = r.u64()?;
                for _ in 0..n {
                    types.push(r.scalar(et)?);
                }
            }
            ("tokenizer.ggml.model", 8) => model = String::from_utf8(r.string()?.to_vec()).ok()?,
            ("tokenizer.ggml.eos_token_id", t) => eos.push(r.scalar(t)? as u32),
            (_, t) => r.skip(t)?,
        }
    }
    let gpt2 = model == "gpt2";
    let dec = byte_decoder();
    let mut special = Vec::with_capacity(tokens.len());
    let bytes: Vec<Vec<u8>> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let ty = types.get(i).copied().unwrap_or(1);
            special.push(ty == 3 || ty == 5 || ty == 2);
            let s = String::from_utf8_lossy(t);
            if ty == 6 {
                // <0xAB>
                if let Some(h) = s.strip_prefix("<0x").and_then(|x| x.strip_suffix('>')) {
                    if let Ok(b) = u8::from_str_radix(h, 16) {
                        return vec![b];
                    }
                }
            }
            if gpt2 {
                let mut out = Vec::new();
                for c in s.chars() {
                    match dec.get(&c) {
                        Some(&b) => out.push(b),
                        None => out.extend_from_slice(c.to_string().as_bytes()),
                    }
                }
                out
            } else {
                s.replace('\u{2581}', " ").into_bytes()
            }
        })
        .collect();
    Some((bytes, special, eos))
}

fn byte_decoder() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(cs)
        .map(|(&b, c)| (char::from_u32(c).unwrap(), b as u8))
        .collect()
}

struct GgufReader<'a> {
    d: &'a [u8],
    p: usize,
}
impl<'a> GgufReader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.d.get(self.p..self.p + n)?;
        self.p += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<&'a [u8]> {
        let n = self.u64()? as usize;
        self.bytes(n)
    }
    fn scalar(&mut self, t: u32) -> Option<i64> {
        Some(match t {
            0 => self.bytes(1)?[0] as i64,
            1 => self.bytes(1)?[0] as i8 as i64,
            2 => u16::from_le_bytes(self.bytes(2)?.try_into().ok()?) as i64,
            3 => i16::from_le_bytes(self.bytes(2)?.try_into().ok()?) as i64,
            4 => self.u32()? as i64,
            5 => self.u32()? as i32 as i64,
            7 => self.bytes(1)?[0] as i64,
            10 | 11 => self.u64()? as i64,
            _ => return None,
        })
    }
    fn skip(&mut self, t: u32) -> Option<()> {
        match t {
            0 | 1 | 7 => self.p += 1,
            2 | 3 => self.p += 2,
            4 | 5 | 6 => self.p += 4,
            10..=12 => self.p += 8,
            8 => {
                self.string()?;
            }
            9 => {
                let et = self.u32()?;
                let n = self.u64()?;
                for _ in 0..n {
                    self.skip(et)?;
                }
            }
            _ => return None,
        }
        Some(())
    }
}

/// The real vocabularies the tests run on: `(short name, file under the models folder)`.
/// SmolLM2 (49,152 tokens, byte-level BPE), Gemma 3 (262,144, SentencePiece-style) and
/// Qwen2.5-Coder (151,936, byte-level BPE with the `qwen2` pre-tokenizer).
pub const MODELS: &[(&str, &str)] = &[
    ("smollm2", "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("gemma3", "gemma3-270m/gemma-3-270m-q4_k_m.gguf"),
    (
        "qwen2.5",
        "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
];

fn models_dir() -> std::path::PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    std::env::var("FORMWORK_MODELS")
        .unwrap_or(format!("{home}/.cache/formwork/models"))
        .into()
}

/// The cached GGUF models, if present: `(name, path)`.
pub fn model_paths() -> Vec<(&'static str, std::path::PathBuf)> {
    let base = models_dir();
    MODELS
        .iter()
        .map(|&(n, p)| (n, base.join(p)))
        .filter(|(_, p)| p.exists())
        .collect()
}

/// [`model_paths`], printing one `SKIPPED (name): ...` line for each absent vocabulary, so a
/// test that runs on the others still says which it skipped.
pub fn model_paths_noting_absent() -> Vec<(&'static str, std::path::PathBuf)> {
    let base = models_dir();
    for &(n, p) in MODELS {
        let path = base.join(p);
        if !path.exists() {
            let dir = p.split('/').next().unwrap_or(p);
            skip::skipped(format_args!(
                "SKIPPED ({n}): {} is absent; run `formwork models fetch {dir}` or set FORMWORK_MODELS to a folder holding {dir}/",
                path.display()
            ));
        }
    }
    model_paths()
}
