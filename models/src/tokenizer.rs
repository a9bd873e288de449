//! The tokenizer, built from GGUF metadata alone (no `tokenizer.json`).
//!
//! GGUF `tokenizer.ggml.*` keys -> a `tokenizers::Tokenizer` whose ids equal llama.cpp's
//! (`llama_tokenize` with `add_special = false`, `parse_special = true`), plus the raw bytes of
//! every token for the grammar crate's token trie.
//!
//! Two families are supported, chosen by `tokenizer.ggml.model`:
//!
//! - `gpt2`: byte-level BPE with the merges stored in the file. The pre-tokenizer comes from
//!   `tokenizer.ggml.pre`: `smollm` splits digits one by one, then applies the GPT-2 regex;
//!   `gpt-2` applies the GPT-2 regex alone; `qwen2` applies llama.cpp's Qwen2 regex (single
//!   digits, letters with one leading non-letter, punctuation runs with their newlines);
//!   `llama-bpe` (Llama 3, also `llama3`, `llama-v3`) applies the same regex with digits in
//!   runs of up to three, takes a piece that is a token whole before any merge, and adds BOS
//!   unless `tokenizer.ggml.add_bos_token` says otherwise. Any other value is an error naming it.
//! - `llama`: SentencePiece-style BPE. Spaces become `▁`, characters missing from the
//!   vocabulary fall back to `<0xNN>` byte tokens. The file stores scores but no merges; llama.cpp
//!   repeatedly joins the adjacent pair whose concatenation is the vocabulary token with the
//!   highest score. We derive the equivalent merge list: every split of every token into two
//!   vocabulary tokens, ranked by the score of the joined token. (A Unigram model built from the
//!   same scores gives different ids.)
//!
//! In both families, control and user-defined tokens (`tokenizer.ggml.token_type` 3 and 4) are
//! matched in the raw text before anything else, exactly as llama.cpp partitions its input.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, AddedVocabulary, DecoderWrapper, Model, NormalizerWrapper, OffsetReferential,
    OffsetType, PreTokenizer, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer,
};

use crate::error::{ModelError, Result};

/// llama.cpp's `llama_token_type` values, as stored in `tokenizer.ggml.token_type`.
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// llama.cpp's pre-tokenizer regex for `tokenizer.ggml.pre` = `qwen2` (`src/llama-vocab.cpp`,
/// `LLAMA_VOCAB_PRE_TYPE_QWEN2`): Qwen2's `tokenizer.json` pattern with the case-insensitive
/// contractions spelled out. `\s+(?!\S)` needs look-ahead, which the tokenizers crate's
/// Oniguruma regex has.
const QWEN2_PRE_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's pre-tokenizer regex for Llama 3 (`LLAMA_VOCAB_PRE_TYPE_LLAMA3`, chosen by
/// `tokenizer.ggml.pre` = `llama-bpe`, `llama3` or `llama-v3`): the Qwen2 regex with digits
/// in runs of up to three instead of one by one.
const LLAMA3_PRE_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values llama.cpp reads as Llama 3's pre-tokenizer.
const LLAMA3_PRE_NAMES: &[&str] = &["llama-bpe", "llama3", "llama-v3"];

/// Texts of end-of-turn tokens that end a generation besides `eos_token_id`, when the file has
/// them as control tokens (the same list llama.cpp uses for its end-of-generation set).
const END_OF_TURN_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|endoftext|>",
    "<|end|>",
    "<|end_of_text|>",
    "<eos>",
];

/// The tokenizer family named by `tokenizer.ggml.model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `gpt2`: byte-level BPE.
    ByteLevelBpe,
    /// `llama`: SentencePiece-style BPE with `▁` and byte fallback.
    SentencePiece,
}

/// A tokenizer built from GGUF metadata, with the raw bytes of every token.
#[derive(Clone)]
pub struct GgufTokenizer {
    inner: Tokenizer,
    /// The added vocabulary of `inner` with control tokens treated as plain text, for
    /// [`GgufTokenizer::encode_plain`].
    plain_added: AddedVocabulary,
    tokens: Vec<String>,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos_ids: Vec<u32>,
    bos_id: Option<u32>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizer")
            .field("vocab_size", &self.tokens.len())
            .field("eos_ids", &self.eos_ids)
            .field("bos_id", &self.bos_id)
            .field("add_bos", &self.add_bos)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish()
    }
}

fn meta_err(key: &str, msg: impl Into<String>) -> ModelError {
    ModelError::Metadata {
        key: key.to_string(),
        msg: msg.into(),
    }
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::U8(_) => "u8",
        Value::I8(_) => "i8",
        Value::U16(_) => "u16",
        Value::I16(_) => "i16",
        Value::U32(_) => "u32",
        Value::I32(_) => "i32",
        Value::U64(_) => "u64",
        Value::I64(_) => "i64",
        Value::F32(_) => "f32",
        Value::F64(_) => "f64",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Array(_) => "array",
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => *x as i64,
        Value::I8(x) => *x as i64,
        Value::U16(x) => *x as i64,
        Value::I16(x) => *x as i64,
        Value::U32(x) => *x as i64,
        Value::I32(x) => *x as i64,
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

/// Typed access to `Content::metadata`; every error names the key.
struct Meta<'a>(&'a HashMap<String, Value>);

impl<'a> Meta<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key)
    }

    fn require(&self, key: &str) -> Result<&'a Value> {
        self.get(key).ok_or_else(|| {
            meta_err(
                key,
                "missing; the file carries no tokenizer (reconvert it with llama.cpp's convert_hf_to_gguf.py)",
            )
        })
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(meta_err(
                key,
                format!("expected a string, found {}", value_kind(v)),
            )),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(meta_err(
                key,
                format!("expected a bool, found {}", value_kind(v)),
            )),
        }
    }

    /// An optional token id, checked against the vocabulary size.
    fn token_id(&self, key: &str, n_vocab: usize) -> Result<Option<u32>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let id = as_i64(v).ok_or_else(|| {
            meta_err(key, format!("expected an integer, found {}", value_kind(v)))
        })?;
        if id < 0 {
            // llama.cpp writes -1 for "none".
            return Ok(None);
        }
        if id as u64 >= n_vocab as u64 {
            return Err(meta_err(
                key,
                format!("token id {id} is out of range for a vocabulary of {n_vocab} tokens"),
            ));
        }
        Ok(Some(id as u32))
    }

    fn array(&self, key: &str) -> Result<&'a Vec<Value>> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(meta_err(
                key,
                format!("expected an array, found {}", value_kind(v)),
            )),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<&'a str>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                v => Err(meta_err(
                    key,
                    format!("element {i}: expected a string, found {}", value_kind(v)),
                )),
            })
            .collect()
    }

    fn ints(&self, key: &str) -> Result<Vec<i32>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                as_i64(v)
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(|| {
                        meta_err(
                            key,
                            format!("element {i}: expected an i32, found {}", value_kind(v)),
                        )
                    })
            })
            .collect()
    }

    fn floats(&self, key: &str) -> Result<Vec<f32>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::F32(x) => Ok(*x),
                Value::F64(x) => Ok(*x as f32),
                v => Err(meta_err(
                    key,
                    format!("element {i}: expected an f32, found {}", value_kind(v)),
                )),
            })
            .collect()
    }
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the others are
/// shifted to U+0100 and up. Returns the inverse, character -> byte.
fn byte_level_inverse() -> HashMap<char, u8> {
    (0..=255u8).map(|b| (byte_level_char(b), b)).collect()
}

/// How GPT-2's byte-level BPE spells byte `b` in a token's text: printable bytes as
/// themselves, the others as the code points from U+0100 on, in byte order.
pub fn byte_level_char(b: u8) -> char {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let b = b as u32;
    if printable(b) {
        return char::from_u32(b).expect("a byte is a code point");
    }
    let n = (0..=b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(255 + n).expect("table stays below U+0200")
}

/// Parses a SentencePiece byte token `<0xNN>`.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Merges for the SentencePiece-style family, derived from the vocabulary: every split of a
/// normal or user-defined token into two vocabulary tokens, ranked by the joined token's score
/// (highest first, then lowest id), the splits of one token from left to right. Control, unused
/// and byte tokens are never merge results, so plain text never turns into them.
fn merges_from_scores(
    tokens: &[&str],
    types: &[i32],
    scores: &[f32],
    vocab: &HashMap<&str, u32>,
) -> Vec<(String, String)> {
    let mut order: Vec<u32> = (0..tokens.len() as u32)
        .filter(|&id| {
            let t = types[id as usize];
            t == token_type::NORMAL || t == token_type::USER_DEFINED
        })
        .collect();
    // Not `total_cmp`: it orders -0.0 below 0.0, and the files hold both.
    order.sort_by(|&a, &b| {
        let (sa, sb) = (scores[a as usize], scores[b as usize]);
        sb.partial_cmp(&sa)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let mut merges = Vec::new();
    for id in order {
        let text = tokens[id as usize];
        for (split, _) in text.char_indices().skip(1) {
            let (left, right) = text.split_at(split);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                merges.push((left.to_string(), right.to_string()));
            }
        }
    }
    merges
}

impl GgufTokenizer {
    /// Reads only the metadata of a GGUF file (not its tensors) and builds the tokenizer.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let name = path.display();
        let mut f =
            std::fs::File::open(path).map_err(|e| ModelError::Tokenizer(format!("{name}: {e}")))?;
        let content = Content::read(&mut f)
            .map_err(|e| ModelError::Tokenizer(format!("{name}: not a GGUF file: {e}")))?;
        Self::from_gguf(&content)
    }

    /// Builds the tokenizer from GGUF metadata alone (no tokenizer.json).
    pub fn from_gguf(content: &Content) -> Result<Self> {
        let meta = Meta(&content.metadata);
        let family = match meta.string("tokenizer.ggml.model")? {
            Some("gpt2") => Family::ByteLevelBpe,
            Some("llama") => Family::SentencePiece,
            Some(other) => {
                return Err(meta_err(
                    "tokenizer.ggml.model",
                    format!("`{other}` is not supported; formwork reads `gpt2` (byte-level BPE) and `llama` (SentencePiece-style BPE)"),
                ))
            }
            None => {
                meta.require("tokenizer.ggml.model")?;
                unreachable!("require fails on a missing key")
            }
        };

        let tokens = meta.strings("tokenizer.ggml.tokens")?;
        let n_vocab = tokens.len();
        if n_vocab == 0 {
            return Err(meta_err("tokenizer.ggml.tokens", "the vocabulary is empty"));
        }
        let types = match meta.get("tokenizer.ggml.token_type") {
            Some(_) => meta.ints("tokenizer.ggml.token_type")?,
            None => vec![token_type::NORMAL; n_vocab],
        };
        if types.len() != n_vocab {
            return Err(meta_err(
                "tokenizer.ggml.token_type",
                format!("{} entries for {n_vocab} tokens", types.len()),
            ));
        }

        let mut vocab: HashMap<&str, u32> = HashMap::with_capacity(n_vocab);
        for (id, t) in tokens.iter().enumerate() {
            if let Some(first) = vocab.insert(t, id as u32) {
                return Err(meta_err(
                    "tokenizer.ggml.tokens",
                    format!("token {id} {t:?} repeats token {first}"),
                ));
            }
        }

        let eos_id = meta.token_id("tokenizer.ggml.eos_token_id", n_vocab)?;
        let bos_id = meta.token_id("tokenizer.ggml.bos_token_id", n_vocab)?;
        let unk_id = meta.token_id("tokenizer.ggml.unknown_token_id", n_vocab)?;
        let eot_id = meta.token_id("tokenizer.ggml.eot_token_id", n_vocab)?;
        // llama.cpp reads `tokenizer.ggml.pre` for byte-level vocabularies only.
        let pre = match family {
            Family::ByteLevelBpe => meta.string("tokenizer.ggml.pre")?.unwrap_or("default"),
            Family::SentencePiece => "",
        };
        let llama3 = LLAMA3_PRE_NAMES.contains(&pre);
        // As in llama.cpp: SentencePiece vocabularies and Llama 3's add BOS unless the
        // file says otherwise.
        let add_bos = meta
            .bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(family == Family::SentencePiece || llama3);
        let add_space_prefix = meta
            .bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(family == Family::SentencePiece);
        let chat_template = meta.string("tokenizer.chat_template")?.map(str::to_string);

        let owned_vocab = || -> tokenizers::models::bpe::Vocab {
            tokens
                .iter()
                .enumerate()
                .map(|(id, t)| (t.to_string(), id as u32))
                .collect()
        };

        let mut inner = match family {
            Family::ByteLevelBpe => {
                let byte_level = ByteLevel::new(false, true, true);
                // The regex splits; byte-level mapping follows without GPT-2's regex.
                let split_then_bytes = |regex: &str| -> Result<PreTokenizerWrapper> {
                    Ok(PreTokenizerSequence::new(vec![
                        Split::new(
                            SplitPattern::Regex(regex.to_string()),
                            SplitDelimiterBehavior::Isolated,
                            false,
                        )
                        .map_err(|e| meta_err("tokenizer.ggml.pre", format!("{pre} regex: {e}")))?
                        .into(),
                        ByteLevel::new(false, true, false).into(),
                    ])
                    .into())
                };
                let pre_tokenizer: PreTokenizerWrapper = match pre {
                    "qwen2" => split_then_bytes(QWEN2_PRE_REGEX)?,
                    _ if llama3 => split_then_bytes(LLAMA3_PRE_REGEX)?,
                    "smollm" => PreTokenizerSequence::new(vec![
                        Digits::new(true).into(),
                        byte_level.into(),
                    ])
                    .into(),
                    "gpt-2" => byte_level.into(),
                    other => {
                        return Err(meta_err(
                            "tokenizer.ggml.pre",
                            format!("pre-tokenizer `{other}` is not supported for `gpt2` tokenizers; formwork supports `smollm`, `gpt-2`, `qwen2` and `llama-bpe`"),
                        ))
                    }
                };
                let merges = meta
                    .strings("tokenizer.ggml.merges")?
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        m.split_once(' ')
                            .map(|(a, b)| (a.to_string(), b.to_string()))
                            .ok_or_else(|| {
                                meta_err(
                                    "tokenizer.ggml.merges",
                                    format!(
                                        "merge {i} {m:?} is not two tokens separated by a space"
                                    ),
                                )
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                // Llama 3's pre-tokenizer takes a piece that is itself a token whole,
                // whatever the merges would make of it (llama.cpp's `ignore_merges`).
                let bpe = BPE::builder()
                    .vocab_and_merges(owned_vocab(), merges)
                    .ignore_merges(llama3)
                    .build()
                    .map_err(|e| meta_err("tokenizer.ggml.merges", e.to_string()))?;
                let mut tok = Tokenizer::new(bpe);
                tok.with_pre_tokenizer(Some(pre_tokenizer));
                tok.with_decoder(Some(ByteLevelDecoder::default()));
                tok
            }
            Family::SentencePiece => {
                // llama.cpp does not read `tokenizer.ggml.pre` for SentencePiece-style
                // vocabularies; neither do we.
                let scores = meta.floats("tokenizer.ggml.scores")?;
                if scores.len() != n_vocab {
                    return Err(meta_err(
                        "tokenizer.ggml.scores",
                        format!("{} entries for {n_vocab} tokens", scores.len()),
                    ));
                }
                let merges = merges_from_scores(&tokens, &types, &scores, &vocab);
                let mut builder = BPE::builder()
                    .vocab_and_merges(owned_vocab(), merges)
                    .byte_fallback(true)
                    .fuse_unk(true);
                if let Some(unk) = unk_id {
                    builder = builder.unk_token(tokens[unk as usize].to_string());
                }
                let bpe = builder
                    .build()
                    .map_err(|e| meta_err("tokenizer.ggml.scores", e.to_string()))?;
                let mut tok = Tokenizer::new(bpe);
                let replace =
                    Replace::new(" ", "▁").map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                let normalizer: NormalizerWrapper = if add_space_prefix {
                    // llama.cpp prefixes a space to every raw-text fragment (each one follows a
                    // special token or starts the text); the normalizer runs once per fragment.
                    NormalizerSequence::new(vec![Prepend::new("▁".into()).into(), replace.into()])
                        .into()
                } else {
                    replace.into()
                };
                tok.with_normalizer(Some(normalizer))
                    .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                let replace_back = tokenizers::decoders::DecoderWrapper::Replace(
                    Replace::new("▁", " ").map_err(|e| ModelError::Tokenizer(e.to_string()))?,
                );
                let mut decoders: Vec<DecoderWrapper> =
                    vec![replace_back, ByteFallback::new().into(), Fuse::new().into()];
                if add_space_prefix {
                    decoders.push(Strip::new(' ', 1, 0).into());
                }
                tok.with_decoder(Some(DecoderSequence::new(decoders)));
                tok
            }
        };

        // Control and unknown tokens are special: `encode` matches them in the text, and
        // `encode_plain` does not. User-defined tokens are matched in both, as in llama.cpp.
        // All are matched in the raw text, before the space replacement.
        let mut added = Vec::new();
        for (&text, &ty) in tokens.iter().zip(&types) {
            let special = matches!(ty, token_type::CONTROL | token_type::UNKNOWN);
            if special || ty == token_type::USER_DEFINED {
                if text.is_empty() {
                    continue;
                }
                added.push(AddedToken::from(text, special).normalized(false));
            }
        }
        inner
            .add_tokens(added)
            .map_err(|e| meta_err("tokenizer.ggml.token_type", e.to_string()))?;
        let mut plain_added = inner.get_added_vocabulary().clone();
        plain_added.set_encode_special_tokens(true);

        let special: Vec<bool> = types
            .iter()
            .map(|&t| {
                matches!(
                    t,
                    token_type::CONTROL | token_type::UNKNOWN | token_type::UNUSED
                )
            })
            .collect();

        let inverse = (family == Family::ByteLevelBpe).then(byte_level_inverse);
        let token_bytes: Vec<Vec<u8>> = tokens
            .iter()
            .zip(&types)
            .map(|(&text, &ty)| match (family, ty) {
                (_, token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN) => {
                    text.as_bytes().to_vec()
                }
                (Family::SentencePiece, token_type::BYTE) => match parse_byte_token(text) {
                    Some(b) => vec![b],
                    None => text.as_bytes().to_vec(),
                },
                (Family::SentencePiece, _) => text.replace('▁', " ").into_bytes(),
                (Family::ByteLevelBpe, _) => {
                    let inverse = inverse.as_ref().expect("built for byte-level");
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match inverse.get(&c) {
                            Some(&b) => out.push(b),
                            None => {
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                    }
                    out
                }
            })
            .collect();

        let mut eos_ids: Vec<u32> = eos_id.into_iter().chain(eot_id).collect();
        for text in END_OF_TURN_TEXTS {
            if let Some(&id) = vocab.get(text) {
                if types[id as usize] == token_type::CONTROL && !eos_ids.contains(&id) {
                    eos_ids.push(id);
                }
            }
        }

        Ok(Self {
            inner,
            plain_added,
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            token_bytes,
            special,
            eos_ids,
            bos_id,
            add_bos,
            chat_template,
        })
    }

    /// Token ids for `text`, without BOS, with special-token text parsed as the special token
    /// (llama.cpp's `parse_special = true`). For prompts the program writes itself.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("encode {} bytes: {e}", text.len())))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Like [`GgufTokenizer::encode`], but control-token text such as `<|im_start|>` stays
    /// plain text (llama.cpp's `parse_special = false`). For user documents.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        let err = |e: tokenizers::Error| {
            ModelError::Tokenizer(format!("encode {} bytes: {e}", text.len()))
        };
        let mut pretokenized = self
            .plain_added
            .extract_and_normalize(self.inner.get_normalizer(), text);
        if let Some(pre) = self.inner.get_pre_tokenizer() {
            pre.pre_tokenize(&mut pretokenized).map_err(err)?;
        }
        let model = self.inner.get_model();
        pretokenized
            .tokenize(|normalized| model.tokenize(normalized.get()))
            .map_err(err)?;
        Ok(pretokenized
            .get_splits(OffsetReferential::Original, OffsetType::None)
            .into_iter()
            .flat_map(|(_, _, tokens)| tokens.iter().flatten().map(|t| t.id))
            .collect())
    }

    /// The text of `ids`: the concatenated token bytes, with invalid UTF-8 replaced by U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            let b = self.token_bytes.get(id as usize).ok_or_else(|| {
                ModelError::Tokenizer(format!(
                    "decode: token id {id} is out of range for a vocabulary of {} tokens",
                    self.token_bytes.len()
                ))
            })?;
            bytes.extend_from_slice(b);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes each token id stands for: byte-level BPE undone, `▁` -> space, `<0xNN>` ->
    /// that byte. Control and user-defined tokens map to their text (see [`Self::is_special`]).
    pub fn token_bytes(&self) -> &[Vec<u8>] {
        &self.token_bytes
    }

    /// True for control, unknown and unused tokens: never produced by the grammar, except EOS.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// `tokenizer.ggml.eos_token_id`, then `eot_token_id`, then the control tokens that end a
    /// turn (`<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`, ...) present in the vocabulary.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// `tokenizer.ggml.add_bos_token` (Gemma: true); when absent, true for `llama` vocabularies
    /// and Llama 3's (`llama-bpe`).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// `tokenizer.chat_template`, when the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The token's text as stored in the file (byte-level or `▁` form).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

/// Streams text token by token, holding back an incomplete UTF-8 sequence until the tokens
/// that complete it arrive, so one character split across several tokens prints once, whole.
pub struct TokenStream<'a> {
    tokenizer: &'a GgufTokenizer,
    pending: Vec<u8>,
}

impl<'a> TokenStream<'a> {
    pub fn new(tokenizer: &'a GgufTokenizer) -> Self {
        Self {
            tokenizer,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text that is now complete, if any. Bytes that can never
    /// become valid UTF-8 come out as U+FFFD. Unknown ids add nothing.
    pub fn push(&mut self, id: u32) -> Option<String> {
        if let Some(bytes) = self.tokenizer.token_bytes.get(id as usize) {
            self.pending.extend_from_slice(bytes);
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // An incomplete sequence at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Flushes what is held back (an incomplete sequence comes out as U+FFFD).
    pub fn finish(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Some(out)
    }
}
