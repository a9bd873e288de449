//! Tokenizer parity on llama.cpp's own vocabulary tests: the vocab-only GGUFs
//! `ggml-vocab-NAME.gguf` that llama.cpp carries in its `models/` folder, each with its test
//! strings (`NAME.gguf.inp`, every string followed by a line `__ggml_vocab_test__`) and the
//! reference tokenizer's ids (`NAME.gguf.out`, one line of ids per string; no BOS).
//!
//! `scripts/llamacpp-vocab` fetches them (the llama-cpp-python sdist the benchmarks use) and
//! prints the folder; the tests read it from `FORMWORK_LLAMACPP_VOCAB`, else from where the
//! script puts it under `$FORMWORK_HOME` (default `~/.cache/formwork`). Without it each test
//! says SKIPPED and passes.

mod common;

use common::llamacpp_vocab_dir as vocab_dir;
use formwork_models::tokenizer::GgufTokenizer;

/// The test strings of `NAME.gguf.inp` with their ids from `NAME.gguf.out`.
fn cases(dir: &std::path::Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let p = dir.join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let inp = read("inp");
    let out = read("out");
    let texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    // The file ends with a separator, so the last piece is empty.
    let texts = &texts[..texts.len() - 1];
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree");
    texts
        .iter()
        .map(|t| t.to_string())
        .zip(ids)
        .collect::<Vec<_>>()
}

/// Every string of `NAME` encodes to llama.cpp's ids and decodes back.
fn check(name: &str, want_pre: &str, want_bos: bool) {
    let Some(dir) = vocab_dir() else { return };
    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
    let tok = GgufTokenizer::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let content = {
        let mut f = std::fs::File::open(&path).unwrap();
        candle_core::quantized::gguf_file::Content::read(&mut f).unwrap()
    };
    let pre = content.metadata["tokenizer.ggml.pre"].to_string().unwrap();
    assert_eq!(pre, want_pre, "{name}: tokenizer.ggml.pre");
    assert_eq!(tok.add_bos(), want_bos, "{name}: add_bos");
    let cases = cases(&dir, name);
    let mut bad = Vec::new();
    for (text, ids) in &cases {
        let got = tok.encode_plain(text).unwrap();
        if &got != ids {
            bad.push(format!(
                "{text:?}\n  llama.cpp {ids:?}\n  formwork  {got:?}"
            ));
        }
        assert_eq!(&tok.encode(text).unwrap(), &got, "{name}: {text:?}");
        // SentencePiece vocabularies keep the space they prefix to the text.
        let decoded = tok.decode(ids).unwrap();
        assert!(
            decoded == *text || (!text.is_empty() && decoded.strip_prefix(' ') == Some(text)),
            "{name}: decode gives {decoded:?} for {text:?}"
        );
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} strings differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    eprintln!("{name}: {} of {} strings match", cases.len(), cases.len());
}

/// Llama 3.x: `llama-bpe`, digits in threes, whole-token pieces, BOS by default.
#[test]
fn llama_bpe_matches_llamacpp() {
    check("llama-bpe", "llama-bpe", true);
}

/// Qwen2 and Qwen3 (both `qwen2`): no BOS.
#[test]
fn qwen2_matches_llamacpp() {
    check("qwen2", "qwen2", false);
}

/// Llama 2 / Mistral 7B's SentencePiece vocabulary (`tokenizer.ggml.model` `llama`): BOS.
#[test]
fn llama_spm_matches_llamacpp() {
    check("llama-spm", "default", true);
}

/// Phi-3's SentencePiece vocabulary.
#[test]
fn phi_3_matches_llamacpp() {
    check("phi-3", "default", true);
}

/// A pre-tokenizer formwork does not implement is refused, naming the field and the value.
#[test]
fn unknown_pre_tokenizer_is_refused_by_name() {
    let Some(dir) = vocab_dir() else { return };
    let path = dir.join("ggml-vocab-command-r.gguf");
    let err = GgufTokenizer::from_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer.ggml.pre") && err.contains("command-r"),
        "{err}"
    );
}
