//! Tokenizer parity with llama.cpp: for 322 strings per model, the ids of
//! `GgufTokenizer::encode` must equal llama.cpp's (`llama_tokenize`, add_special=false,
//! parse_special=true) on the same GGUF file, recorded in `testdata/*.golden-ids.json`
//! (SmolLM2 and Gemma 3 as in `../shared/fixtures/tokenizers`; Qwen2.5-Coder and Llama 3's
//! `llama-bpe` vocabulary made by `testdata/golden-ids.py` with llama.cpp's `llama-tokenize`).
//!
//! The tokenizer is built from the GGUF metadata of the fetched model
//! (`$FORMWORK_HOME/models/...`, FORMWORK_HOME defaulting to `~/.cache/formwork`); when the
//! file is absent the test says SKIPPED and passes.

mod common;

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use candle_core::quantized::gguf_file::Content;
use formwork_models::tokenizer::{GgufTokenizer, TokenStream};

#[derive(serde::Deserialize)]
struct Golden {
    n_vocab: usize,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

fn formwork_home() -> PathBuf {
    if let Some(home) = std::env::var_os("FORMWORK_HOME") {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache").join("formwork")
}

/// The tokenizer of a fetched registry model, or None (after printing SKIPPED).
fn load(name: &str, file: &str) -> Option<GgufTokenizer> {
    let path = formwork_home().join("models").join(name).join(file);
    if !path.exists() {
        common::skip::skipped(format_args!(
            "SKIPPED: model not fetched ({}); run formwork models fetch {name}",
            path.display()
        ));
        return None;
    }
    let mut f = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let content = Content::read(&mut f).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = Instant::now();
    let tok =
        GgufTokenizer::from_gguf(&content).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    eprintln!(
        "{name}: tokenizer built from GGUF metadata in {:.0} ms ({} tokens)",
        start.elapsed().as_secs_f64() * 1e3,
        tok.vocab_size()
    );
    Some(tok)
}

fn golden(name: &str) -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(format!("{name}.golden-ids.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn show(tok: &GgufTokenizer, ids: &[u32]) -> String {
    ids.iter()
        .map(|&id| format!("{id}:{:?}", tok.token_text(id).unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every golden case through `encode` and requires 100% equality, then checks that
/// decoding and the token bytes give the text back.
fn check_parity(name: &str, tok: &GgufTokenizer) -> Golden {
    let golden = golden(name);
    assert_eq!(golden.n_vocab, tok.vocab_size(), "{name}: vocabulary size");
    assert_eq!(golden.cases.len(), 322, "{name}: golden case count");

    let mut mismatches = Vec::new();
    for (i, case) in golden.cases.iter().enumerate() {
        let ids = tok.encode(&case.text).unwrap();
        if ids != case.ids {
            mismatches.push(format!(
                "case {i} {:?}\n  llama.cpp: {:?}\n             {}\n  formwork:  {:?}\n             {}",
                case.text,
                case.ids,
                show(tok, &case.ids),
                ids,
                show(tok, &ids)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{name}: {} of {} cases differ from llama.cpp; the first ones:\n{}",
        mismatches.len(),
        golden.cases.len(),
        mismatches
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    for (i, case) in golden.cases.iter().enumerate() {
        let decoded = tok.decode(&case.ids).unwrap();
        assert_eq!(decoded, case.text, "{name}: case {i}: decode(ids) != text");
        let bytes: Vec<u8> = case
            .ids
            .iter()
            .flat_map(|&id| tok.token_bytes()[id as usize].iter().copied())
            .collect();
        assert_eq!(
            bytes,
            case.text.as_bytes(),
            "{name}: case {i} {:?}: concatenated token bytes != UTF-8 of the text",
            case.text
        );
    }
    golden
}

/// Cases whose text contains no control-token text: `encode_plain` must agree with `encode`
/// there; on the others it must produce no special token at all.
fn check_plain(name: &str, tok: &GgufTokenizer, golden: &Golden) {
    let mut compared = 0;
    for (i, case) in golden.cases.iter().enumerate() {
        let has_special = case.ids.iter().any(|&id| tok.is_special(id));
        let plain = tok.encode_plain(&case.text).unwrap();
        if has_special {
            assert!(
                plain.iter().all(|&id| !tok.is_special(id)),
                "{name}: case {i} {:?}: encode_plain produced a special token: {}",
                case.text,
                show(tok, &plain)
            );
            assert_eq!(tok.decode(&plain).unwrap(), case.text, "{name}: case {i}");
        } else {
            assert_eq!(
                plain, case.ids,
                "{name}: case {i} {:?}: encode_plain",
                case.text
            );
            compared += 1;
        }
    }
    assert!(
        compared > 300,
        "{name}: only {compared} cases without special tokens"
    );
}

/// Streaming every golden case token by token gives the text back, and never emits a
/// broken character: each piece is a valid string by construction, so the check is that
/// nothing is lost or replaced.
fn check_stream(name: &str, tok: &GgufTokenizer, golden: &Golden) {
    let mut held_back = 0;
    for (i, case) in golden.cases.iter().enumerate() {
        let mut stream = TokenStream::new(tok);
        let mut out = String::new();
        for &id in &case.ids {
            match stream.push(id) {
                Some(piece) => out.push_str(&piece),
                None => {
                    if !tok.token_bytes()[id as usize].is_empty() {
                        held_back += 1;
                    }
                }
            }
        }
        assert_eq!(stream.finish(), None, "{name}: case {i}: bytes left over");
        assert_eq!(out, case.text, "{name}: case {i}: streamed text");
    }
    eprintln!("{name}: {held_back} tokens held back while streaming (split characters)");
}

#[test]
fn smollm2_matches_llama_cpp() {
    let Some(tok) = load("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let golden = check_parity("smollm2-135m", &tok);
    check_plain("smollm2-135m", &tok, &golden);
    check_stream("smollm2-135m", &tok, &golden);

    assert_eq!(tok.bos_id(), Some(1));
    assert!(!tok.add_bos());
    assert_eq!(tok.token_text(2), Some("<|im_end|>"));
    assert_eq!(tok.eos_ids(), &[2, 0], "<|im_end|> then <|endoftext|>");
    assert!(tok.is_special(1) && tok.is_special(2) && !tok.is_special(19556));
    assert_eq!(tok.encode("<|im_start|>").unwrap(), vec![1]);
    assert!(!tok.encode_plain("<|im_start|>").unwrap().contains(&1));
    // Byte-level BPE undone: "Ġworld" is " world".
    assert_eq!(tok.token_bytes()[905], b" world");
    assert!(tok.chat_template().unwrap().contains("<|im_start|>"));
}

#[test]
fn gemma3_matches_llama_cpp() {
    let Some(tok) = load("gemma3-270m", "gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let golden = check_parity("gemma3-270m", &tok);
    check_plain("gemma3-270m", &tok, &golden);
    check_stream("gemma3-270m", &tok, &golden);

    assert_eq!(tok.bos_id(), Some(2));
    assert!(tok.add_bos());
    assert_eq!(tok.eos_ids(), &[1, 106], "<eos> then <end_of_turn>");
    assert_eq!(
        tok.chat_template(),
        None,
        "the PyPI Gemma 3 270M file is the base model"
    );
    assert_eq!(tok.encode("<start_of_turn>").unwrap(), vec![105]);
    assert!(tok.is_special(105));
    // User-defined tokens are text: newlines and runs of spaces must stay available.
    assert!(!tok.is_special(107) && tok.token_bytes()[107] == b"\n");
    assert_eq!(tok.token_bytes()[138], b"  ");
    // Byte fallback: <0x00> is byte 0, and "▁t" is " t".
    assert_eq!(tok.token_bytes()[238], [0u8]);
    assert_eq!(tok.token_bytes()[494], b" t");
}

#[test]
fn qwen2_matches_llama_cpp() {
    let name = "qwen2.5-coder-0.5b";
    let Some(tok) = load(name, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") else {
        return;
    };
    let golden = check_parity(name, &tok);
    check_plain(name, &tok, &golden);
    check_stream(name, &tok, &golden);

    // <|endoftext|> is BOS (never added) and ends a text; <|im_end|> ends a turn.
    assert_eq!(tok.bos_id(), Some(151_643));
    assert!(!tok.add_bos());
    assert_eq!(tok.token_text(151_643), Some("<|endoftext|>"));
    assert_eq!(tok.token_text(151_645), Some("<|im_end|>"));
    assert_eq!(
        tok.eos_ids(),
        &[151_645, 151_643],
        "<|im_end|> then <|endoftext|>"
    );
    assert_eq!(tok.encode("<|im_start|>").unwrap(), vec![151_644]);
    assert!(tok.is_special(151_644) && tok.is_special(151_645));
    assert!(!tok.encode_plain("<|im_start|>").unwrap().contains(&151_644));
    // The 271 padding entries past the last real token are unused: never produced.
    assert!(tok.is_special(151_935));
    // Byte-level BPE undone, and the qwen2 split: digits one by one, letters with their
    // leading space.
    let ids = tok.encode(" world 2024").unwrap();
    let pieces: Vec<&[u8]> = ids
        .iter()
        .map(|&id| tok.token_bytes()[id as usize].as_slice())
        .collect();
    assert_eq!(pieces, [&b" world"[..], b" ", b"2", b"0", b"2", b"4"]);
    assert!(tok.chat_template().unwrap().contains("<|im_start|>"));
}

/// A character split across byte tokens comes out whole, once, from TokenStream.
#[test]
fn stream_holds_back_split_characters() {
    let Some(tok) = load("gemma3-270m", "gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    // U+10348 (Gothic letter hwair) is not in the vocabulary: four <0xNN> byte tokens.
    let text = "a\u{10348}b";
    let ids = tok.encode(text).unwrap();
    let pieces: Vec<Option<String>> = {
        let mut stream = TokenStream::new(&tok);
        ids.iter().map(|&id| stream.push(id)).collect()
    };
    assert_eq!(ids.len(), 6, "{}", show(&tok, &ids));
    assert_eq!(
        pieces,
        vec![
            Some("a".to_string()),
            None,
            None,
            None,
            Some("\u{10348}".to_string()),
            Some("b".to_string())
        ]
    );
    // A sequence that can never complete is replaced, not held forever.
    let mut stream = TokenStream::new(&tok);
    let lead = 238 + 0xF0; // <0xF0>, a 4-byte lead
    assert_eq!(stream.push(lead), None);
    assert_eq!(
        stream.push(tok.encode("x").unwrap()[0]),
        Some("\u{FFFD}x".to_string())
    );
    assert_eq!(stream.push(lead), None);
    assert_eq!(stream.finish(), Some("\u{FFFD}".to_string()));
}

/// Llama 3's tokenizer (`llama-bpe`) from llama.cpp's vocab-only GGUF
/// (`scripts/llamacpp-vocab`; `FORMWORK_LLAMACPP_VOCAB` names its folder), against
/// `llama-tokenize` on the same file.
#[test]
fn llama_bpe_matches_llama_cpp() {
    let Some(dir) = common::llamacpp_vocab_dir() else {
        return;
    };
    let path = dir.join("ggml-vocab-llama-bpe.gguf");
    let tok = GgufTokenizer::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let golden = check_parity("llama-bpe", &tok);
    check_plain("llama-bpe", &tok, &golden);
    check_stream("llama-bpe", &tok, &golden);

    assert_eq!(tok.bos_id(), Some(128000));
    assert!(tok.add_bos(), "llama-bpe adds <|begin_of_text|>");
    assert!(tok.eos_ids().contains(&128009), "<|eot_id|> ends a turn");
    // Digits go in threes, and a whole-word token is taken before any merge.
    assert_eq!(tok.encode("1234567").unwrap().len(), 3);
}
