//! The token bytes of a Hugging Face `tokenizer.json`, read without the `tokenizers` crate.
//!
//! Two families, told apart by the decoder (the part that turns tokens back into text):
//! - byte-level BPE (`ByteLevel` decoder; GPT-2, Qwen, SmolLM): each character of a
//!   vocabulary entry stands for one byte through GPT-2's printable byte table;
//! - SentencePiece-style (`ByteFallback`, `Metaspace` or a `Replace` of `▁`; Llama, Gemma):
//!   `▁` is a space and `<0xNN>` the byte NN (with byte fallback).
//!
//! Added tokens keep their text as bytes; those marked `special` are never allowed by a
//! grammar (control tokens). Ids no entry names (gaps, or padding past the last entry up to
//! the model's vocabulary size) have no bytes and are never allowed.

use serde_json::Value;

/// The vocabulary: bytes per id, and which ids are special.
pub struct Vocab {
    pub bytes: Vec<Vec<u8>>,
    pub special: Vec<bool>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    ByteLevel,
    SentencePiece { byte_fallback: bool },
}

/// GPT-2's table from printable characters back to bytes.
fn byte_level_inverse() -> std::collections::HashMap<char, u8> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    printable
        .iter()
        .zip(&chars)
        .map(|(&b, &c)| (char::from_u32(c).expect("below the surrogates"), b as u8))
        .collect()
}

fn decoder_kinds(d: &Value, out: &mut Vec<String>) {
    let Some(ty) = d.get("type").and_then(Value::as_str) else {
        return;
    };
    if ty == "Sequence" {
        for sub in d
            .get("decoders")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            decoder_kinds(sub, out);
        }
    } else if ty == "Replace" {
        let pat = d.pointer("/pattern/String").and_then(Value::as_str);
        if pat == Some("▁") {
            out.push("Replace▁".into());
        }
    } else {
        out.push(ty.to_string());
    }
}

fn family(doc: &Value) -> Result<Family, String> {
    let mut kinds = Vec::new();
    if let Some(d) = doc.get("decoder") {
        decoder_kinds(d, &mut kinds);
    }
    let has = |k: &str| kinds.iter().any(|x| x == k);
    if has("ByteLevel") {
        Ok(Family::ByteLevel)
    } else if has("ByteFallback") || has("Metaspace") || has("Replace▁") {
        Ok(Family::SentencePiece {
            byte_fallback: has("ByteFallback")
                || doc.pointer("/model/byte_fallback").and_then(Value::as_bool) == Some(true),
        })
    } else {
        Err(format!(
            "tokenizer.json: decoder {kinds:?} is not supported; formwork reads byte-level BPE \
             (a `ByteLevel` decoder) and SentencePiece-style vocabularies (`ByteFallback`, \
             `Metaspace` or a `Replace` of `▁`)"
        ))
    }
}

fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

/// Reads `tokenizer.json` text. `vocab_size`: the model's vocabulary, at least the
/// tokenizer's own (padding ids past it get no bytes).
pub fn read(json: &str, vocab_size: Option<usize>) -> Result<Vocab, String> {
    let doc: Value =
        serde_json::from_str(json).map_err(|e| format!("tokenizer.json is not JSON: {e}"))?;
    let fam = family(&doc)?;
    let mut entries: Vec<(u32, String, Option<bool>)> = Vec::new();
    match doc.pointer("/model/vocab") {
        Some(Value::Object(m)) => {
            for (text, id) in m {
                let id = id
                    .as_u64()
                    .filter(|&i| i < u32::MAX as u64)
                    .ok_or_else(|| {
                        format!("tokenizer.json: /model/vocab/{text}: {id} is not a token id")
                    })?;
                entries.push((id as u32, text.clone(), None));
            }
        }
        // Unigram: a list of [piece, score]; the id is the position.
        Some(Value::Array(a)) => {
            for (i, e) in a.iter().enumerate() {
                let text = e.get(0).and_then(Value::as_str).ok_or_else(|| {
                    format!("tokenizer.json: /model/vocab/{i} is not [piece, score]")
                })?;
                entries.push((i as u32, text.to_string(), None));
            }
        }
        _ => return Err("tokenizer.json: no /model/vocab".into()),
    }
    for (i, t) in doc
        .get("added_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = t.get("id").and_then(Value::as_u64);
        let text = t.get("content").and_then(Value::as_str);
        let (Some(id), Some(text)) = (id, text) else {
            return Err(format!(
                "tokenizer.json: /added_tokens/{i} has no id or content"
            ));
        };
        let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
        entries.push((id as u32, text.to_string(), Some(special)));
    }
    let own = entries.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0);
    let n = match vocab_size {
        Some(v) if v < own => {
            return Err(format!(
                "vocab_size {v} is smaller than the tokenizer's {own} ids"
            ))
        }
        Some(v) => v,
        None => own,
    };
    let inverse = (fam == Family::ByteLevel).then(byte_level_inverse);
    let mut bytes = vec![Vec::new(); n];
    let mut special = vec![false; n];
    // Vocabulary entries first, added tokens after: an added token overrides the entry
    // with its id (its text is literal, not byte-mapped).
    for (id, text, added) in entries {
        let b = match (added, fam) {
            (Some(sp), _) => {
                special[id as usize] = sp;
                text.into_bytes()
            }
            (None, Family::ByteLevel) => {
                let inv = inverse.as_ref().expect("built for byte-level");
                let mut out = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match inv.get(&c) {
                        Some(&b) => out.push(b),
                        None => {
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            }
            (None, Family::SentencePiece { byte_fallback }) => {
                match parse_byte_token(&text).filter(|_| byte_fallback) {
                    Some(b) => vec![b],
                    None => text.replace('▁', " ").into_bytes(),
                }
            }
        };
        bytes[id as usize] = b;
    }
    Ok(Vocab { bytes, special })
}
