//! `Engine::extract` with a thought (`ExtractOptions::think`), whole, against a scripted
//! model: a byte-level vocabulary written as a vocab-only GGUF (ids 0..=255 are the
//! bytes, 256 `<|im_start|>`, 257 `<|im_end|>` (EOS), 258 `<think>`, 259 `</think>`)
//! with Qwen3's chat template, and a model whose logits are a function of the text
//! after the prompt's last `<|im_start|>assistant\n`. Each model "wants" one text: at
//! every step it ranks first the longest token that continues it (EOS once it is
//! written), and its fallback elsewhere.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use formwork::engine::{Engine, ExtractOptions, Extraction, Mode, Schema, VerdictKind};
use formwork_models::runtime::{LanguageModel, LoadedModel};
use formwork_models::synth::{write_byte_vocab, QWEN3_TEMPLATE};
use formwork_models::tokenizer::GgufTokenizer;
use serde_json::{json, Value};

const EOS: u32 = 257;
const ASSISTANT: &[u8] = b"<|im_start|>assistant\n";

/// The tokenizer of the byte vocabulary, with `template` (None: no chat template).
fn tokenizer(words: &[(&str, bool)], template: Option<&str>) -> GgufTokenizer {
    // A file of its own for every call: the tests run at once.
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "formwork-extract-think-{}-{n}.gguf",
        std::process::id()
    ));
    write_byte_vocab(&path, words, "<|im_end|>", template).unwrap();
    let tok = GgufTokenizer::from_file(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    tok
}

fn think_words() -> Vec<(&'static str, bool)> {
    vec![
        ("<|im_start|>", true),
        ("<|im_end|>", true),
        ("<think>", false),
        ("</think>", false),
    ]
}

type Fallback = fn(&[u8]) -> Vec<u32>;

/// A model that wants to write `target` after the prompt.
#[derive(Clone)]
struct Wants {
    history: Vec<u32>,
    bytes: Arc<Vec<Vec<u8>>>,
    target: &'static str,
    fallback: Fallback,
}

fn prefer(vocab: usize, order: &[u32]) -> Vec<f32> {
    let mut l: Vec<f32> = (0..vocab).map(|i| -10.0 - (i % 7) as f32).collect();
    for (rank, &t) in order.iter().enumerate() {
        l[t as usize] = 100.0 - rank as f32;
    }
    l
}

impl Wants {
    fn logits(&self) -> Vec<f32> {
        let n = self.bytes.len();
        let text: Vec<u8> = self
            .history
            .iter()
            .flat_map(|&t| self.bytes[t as usize].clone())
            .collect();
        let start = (0..=text.len().saturating_sub(ASSISTANT.len()))
            .rev()
            .find(|&i| text[i..].starts_with(ASSISTANT))
            .map_or(text.len(), |i| i + ASSISTANT.len());
        let out = &text[start..];
        let t = self.target.as_bytes();
        if let Some(rest) = t.strip_prefix(out) {
            if rest.is_empty() {
                let mut order = vec![EOS];
                order.extend((self.fallback)(out));
                return prefer(n, &order);
            }
            let best = (0..n as u32)
                .filter(|&i| i != EOS && rest.starts_with(&self.bytes[i as usize]))
                .max_by_key(|&i| self.bytes[i as usize].len())
                .unwrap();
            return prefer(n, &[best]);
        }
        prefer(n, &(self.fallback)(out))
    }
}

impl LanguageModel for Wants {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> formwork_models::Result<Vec<f32>> {
        assert_eq!(pos, self.history.len(), "forward at the wrong position");
        self.history.extend_from_slice(tokens);
        Ok(self.logits())
    }
    fn vocab_size(&self) -> usize {
        self.bytes.len()
    }
    fn clear_kv_cache(&mut self) {
        self.history.clear();
    }
    fn snapshot(&self) -> Box<dyn LanguageModel> {
        Box::new(self.clone())
    }
    fn truncate(&mut self, len: usize) -> bool {
        self.history.truncate(len.min(self.history.len()));
        true
    }
}

fn engine_with(tok: GgufTokenizer, target: &'static str, fallback: Fallback) -> Engine {
    let model = Wants {
        history: Vec::new(),
        bytes: Arc::new(tok.token_bytes().to_vec()),
        target,
        fallback,
    };
    Engine::new(LoadedModel::from_model(
        Box::new(model),
        tok,
        "scripted-qwen3",
        4096,
    ))
}

fn engine(target: &'static str, fallback: Fallback) -> Engine {
    engine_with(
        tokenizer(&think_words(), Some(QWEN3_TEMPLATE)),
        target,
        fallback,
    )
}

/// A model that has lost its way writes prose.
fn prose(_: &[u8]) -> Vec<u32> {
    vec![b'z' as u32, b' ' as u32]
}

fn schema() -> Schema {
    Schema::new(json!({
        "type": "object",
        "properties": {"qty": {"type": "integer"}, "sku": {"type": ["string", "null"], "maxLength": 8}},
        "required": ["qty", "sku"],
        "additionalProperties": false
    }))
    .unwrap()
}

const DOC: &str = "Please send 3 boxes of SKU 44A.";

fn extract(engine: &mut Engine, opts: &ExtractOptions) -> Extraction {
    engine.extract(&mut schema(), DOC, opts)
}

fn masked(think: Option<usize>) -> ExtractOptions {
    ExtractOptions {
        think,
        grounded: None,
        max_tokens: 64,
        ..Default::default()
    }
}

fn valid(ex: &Extraction) {
    assert_eq!(
        ex.verdict,
        VerdictKind::Valid,
        "{:?} {}",
        ex.message,
        ex.text
    );
}

fn keys(ex: &Extraction) -> Vec<&str> {
    ex.confidence.keys().map(String::as_str).collect()
}

/// The think block's tokens for a thought of `bytes` bytes that the model closed:
/// `<think>` `\n` (the engine's), the thought's byte tokens, `</think>` (the model's),
/// `\n` `\n` (the engine's separator).
fn block_tokens(bytes: usize) -> usize {
    2 + bytes + 1 + 2
}

#[test]
fn a_masked_extraction_thinks_then_answers_and_the_value_is_the_answers() {
    // The thought holds a JSON object of its own (99, another key): it is the thought,
    // not the answer.
    let thought = r#"The order says 3. Not {"qty": 99, "note": "x"}."#;
    let target = r#"<think>
The order says 3. Not {"qty": 99, "note": "x"}.</think>

{"qty":3,"sku":"44A"}"#;
    let mut e = engine(target, prose);
    let ex = extract(&mut e, &masked(Some(100)));
    valid(&ex);
    assert_eq!(ex.value, Some(json!({"qty": 3, "sku": "44A"})));
    assert_eq!(ex.text, r#"{"qty":3,"sku":"44A"}"#);
    assert_eq!(ex.reasoning.as_deref(), Some(thought));
    assert!(!ex.reasoning_cut);
    assert_eq!(ex.tokens_reasoning, block_tokens(thought.len()));
    // Confidence is the answer's leaves, nothing of the thought's object.
    assert_eq!(keys(&ex), ["/qty", "/sku"]);
    // Every token is counted once: the thought's and the answer's, sampled or fed.
    assert_eq!(
        ex.tokens_generated + ex.tokens_forced,
        ex.tokens_reasoning + ex.tokens.len()
    );
    // The envelope keeps the thought apart from the value.
    let v: Value = serde_json::to_value(&ex).unwrap();
    assert_eq!(v["reasoning"], json!(thought));
    assert_eq!(v["tokens_reasoning"], json!(ex.tokens_reasoning));
    assert!(v.get("reasoning_cut").is_none(), "false is left out: {v}");
}

#[test]
fn the_budget_closes_the_thought_and_the_answer_keeps_its_own_budget() {
    // The model would think forever: after 5 thought tokens the engine closes the block,
    // and the answer after it is still whole.
    fn hmm(out: &[u8]) -> Vec<u32> {
        let after = b"</think>\n\n";
        match out.windows(after.len()).position(|w| w == after) {
            Some(at) => {
                let answer = br#"{"qty":3,"sku":"44A"}"#;
                let done = &out[at + after.len()..];
                match answer.get(done.len()) {
                    Some(&b) if answer.starts_with(done) => vec![b as u32],
                    _ => vec![EOS],
                }
            }
            None => vec![b'h' as u32],
        }
    }
    let mut e = engine("<think>\n", hmm);
    // The answer takes 21 tokens, its shortest 20: a max_tokens of 24 is the answer's
    // alone, and the thought comes on top of it (taken from the 24, the thought would
    // have had no room).
    let opts = ExtractOptions {
        max_tokens: 24,
        ..masked(Some(5))
    };
    let ex = extract(&mut e, &opts);
    valid(&ex);
    assert_eq!(ex.reasoning.as_deref(), Some("hhhhh"));
    assert!(ex.reasoning_cut);
    // `<think>\n`, five thought tokens, `</think>` and `\n\n` fed by the engine.
    assert_eq!(ex.tokens_reasoning, 2 + 5 + 1 + 2);
    assert_eq!(ex.text, r#"{"qty":3,"sku":"44A"}"#, "not steered short");
    assert_eq!(ex.value, Some(json!({"qty": 3, "sku": "44A"})));
    let v: Value = serde_json::to_value(&ex).unwrap();
    assert_eq!(v["reasoning_cut"], json!(true));
}

#[test]
fn free_mode_reads_the_answer_not_the_json_in_the_thought() {
    let target = r#"<think>
Maybe {"qty": 99, "sku": "ZZ"} but the text says 3.</think>

Here: {"qty":3,"sku":"44A"}"#;
    let free = ExtractOptions {
        mode: Mode::Free,
        retries: 0,
        ..masked(Some(100))
    };
    let mut e = engine(target, prose);
    let ex = extract(&mut e, &free);
    valid(&ex);
    assert_eq!(ex.value, Some(json!({"qty": 3, "sku": "44A"})));
    assert!(!ex.text.contains("99"), "{}", ex.text);
    assert!(ex.reasoning.as_deref().unwrap().contains(r#"{"qty": 99"#));
    assert_eq!(keys(&ex), ["/qty", "/sku"]);

    // An answer with no JSON is not_json, whatever the thought held.
    let target = r#"<think>
{"qty": 99, "sku": "ZZ"}</think>

I cannot tell."#;
    let mut e = engine(target, prose);
    let ex = extract(&mut e, &free);
    assert_eq!(ex.verdict, VerdictKind::NotJson, "{}", ex.text);
    assert_eq!(ex.value, None);
    assert_eq!(ex.reasoning.as_deref(), Some(r#"{"qty": 99, "sku": "ZZ"}"#));
}

#[test]
fn free_mode_retries_think_again() {
    // Every attempt writes a thought and a wrong answer (qty a string): three attempts,
    // three thoughts, all counted.
    let target = r#"<think>
ok</think>

{"qty":"3","sku":null}"#;
    let free = ExtractOptions {
        mode: Mode::Free,
        retries: 2,
        ..masked(Some(100))
    };
    let mut e = engine(target, prose);
    let ex = extract(&mut e, &free);
    assert_eq!(ex.verdict, VerdictKind::SchemaInvalid, "{}", ex.text);
    assert_eq!(ex.attempts, 3);
    assert_eq!(ex.reasoning.as_deref(), Some("ok"));
    assert_eq!(ex.tokens_reasoning, 3 * block_tokens(2));
}

#[test]
fn a_budget_of_0_spends_no_thought_token() {
    // Qwen3's template writes the empty block itself (`enable_thinking: false`); the
    // model answers after it.
    let target = "<think>\n\n</think>\n\n{\"qty\":3,\"sku\":\"44A\"}";
    let mut e = engine(target, prose);
    let ex = extract(&mut e, &masked(Some(0)));
    valid(&ex);
    assert_eq!(ex.text, r#"{"qty":3,"sku":"44A"}"#);
    assert_eq!(ex.reasoning, None);
    assert_eq!(ex.tokens_reasoning, 0);
    assert_eq!(ex.tokens_generated + ex.tokens_forced, ex.tokens.len());
    // The prompt carries the empty block: `<think>`, `\n\n`, `</think>`, `\n\n` are
    // 6 tokens more than the template as it is.
    let mut plain = engine("{\"qty\":3,\"sku\":\"44A\"}", prose);
    let as_is = extract(&mut plain, &masked(None));
    assert_eq!(as_is.verdict, VerdictKind::Valid);
    assert_eq!(ex.tokens_prompt, as_is.tokens_prompt + 6);
    // Without `think`, the envelope is as it always was: no reasoning keys.
    let v: Value = serde_json::to_value(&as_is).unwrap();
    for k in ["reasoning", "tokens_reasoning", "reasoning_cut"] {
        assert!(v.get(k).is_none(), "{k} in {v}");
    }
}

#[test]
fn a_model_without_think_markers_is_an_error_naming_it() {
    let words = [("<|im_start|>", true), ("<|im_end|>", true)];
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let tok = tokenizer(&words, Some(chatml));
    let mut e = engine_with(tok, "{\"qty\":3,\"sku\":\"44A\"}", prose);
    assert!(e.think_markers().is_none());
    for mode in [Mode::Masked, Mode::Free] {
        let opts = ExtractOptions {
            mode,
            ..masked(Some(16))
        };
        let ex = extract(&mut e, &opts);
        assert_eq!(ex.verdict, VerdictKind::Error);
        let m = ex.message.unwrap();
        assert!(m.contains("scripted-qwen3"), "{m}");
        assert!(m.contains("no think markers"), "{m}");
        assert_eq!(m.lines().count(), 1, "{m}");
        assert_eq!(ex.tokens_generated, 0);
    }
    // No thought asked of it: the turn as it is.
    let ex = extract(&mut e, &masked(Some(0)));
    assert_eq!(ex.verdict, VerdictKind::Valid, "{:?}", ex.message);
    assert_eq!(ex.reasoning, None);
}
