//! The thought phase (`decode_think`) against a scripted model and a byte-level
//! vocabulary: tokens 0..=255 are the bytes, 256 is EOS, 257 `<think>`, 258
//! `</think>` and 259 `<|im_end|>` (a control token). Each model "wants" one text: at
//! every step it prefers the token that continues it, and its fallback otherwise.

use std::sync::{Arc, Mutex};

use formwork::engine::decode::{decode_think, Codec, DecodeOptions, Stop, ThinkOutput, ThinkPlan};
use formwork::sampling::{Sampler, Sampling};
use formwork_grammar::compile::{compile, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::TokTrie;
use formwork_models::runtime::LanguageModel;
use serde_json::{json, Value};

const EOS: u32 = 256;
const OPEN: u32 = 257;
const CLOSE: u32 = 258;
const IM_END: u32 = 259;
const VOCAB: usize = 260;
const PROMPT: &[u8] = b"PROMPT:";

fn vocab() -> Vec<Vec<u8>> {
    let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for w in ["</s>", "<think>", "</think>", "<|im_end|>"] {
        bytes.push(w.as_bytes().to_vec());
    }
    bytes
}

struct ByteCodec {
    bytes: Vec<Vec<u8>>,
    eos: Vec<u32>,
}

impl ByteCodec {
    fn new() -> Self {
        ByteCodec {
            bytes: vocab(),
            eos: vec![EOS],
        }
    }
    fn trie(&self) -> Arc<TokTrie> {
        let special: Vec<bool> = (0..self.bytes.len()).map(|i| i >= EOS as usize).collect();
        Arc::new(TokTrie::new(self.bytes.clone(), &special, &self.eos))
    }
}

impl Codec for ByteCodec {
    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }
    fn token_bytes(&self) -> &[Vec<u8>] {
        &self.bytes
    }
    fn eos_ids(&self) -> &[u32] {
        &self.eos
    }
}

type Script = Arc<dyn Fn(&[u8]) -> Vec<f32> + Send + Sync>;

/// A model whose logits are a function of the text written after the prompt.
#[derive(Clone)]
struct ScriptedModel {
    history: Vec<u32>,
    script: Script,
    fed: Arc<Mutex<Vec<Vec<u32>>>>,
}

impl LanguageModel for ScriptedModel {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> formwork_models::Result<Vec<f32>> {
        assert_eq!(pos, self.history.len(), "forward at the wrong position");
        self.history.extend_from_slice(tokens);
        self.fed.lock().unwrap().push(tokens.to_vec());
        let v = vocab();
        let out: Vec<u8> = self.history[PROMPT.len().min(self.history.len())..]
            .iter()
            .flat_map(|&t| v[t as usize].clone())
            .collect();
        Ok((self.script)(&out))
    }
    fn vocab_size(&self) -> usize {
        VOCAB
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

/// Logits that rank `order` first, second, ...; every other token low.
fn prefer(order: &[u32]) -> Vec<f32> {
    let mut l: Vec<f32> = (0..VOCAB).map(|i| -10.0 - (i % 7) as f32).collect();
    for (rank, &t) in order.iter().enumerate() {
        l[t as usize] = 100.0 - rank as f32;
    }
    l
}

/// A model that wants to write `target` (the longest token continuing it first, EOS
/// once it is written); where its text has left `target`, `fallback(text)` ranks.
fn wants(target: &'static str, fallback: fn(&[u8]) -> Vec<u32>) -> ScriptedModel {
    let v = vocab();
    let script = move |out: &[u8]| {
        let t = target.as_bytes();
        if let Some(rest) = t.strip_prefix(out) {
            if rest.is_empty() {
                let mut order = vec![EOS];
                order.extend(fallback(out));
                return prefer(&order);
            }
            let best = (0..VOCAB as u32)
                .filter(|&i| {
                    i != EOS && !v[i as usize].is_empty() && rest.starts_with(&v[i as usize])
                })
                .max_by_key(|&i| v[i as usize].len())
                .unwrap();
            return prefer(&[best]);
        }
        prefer(&fallback(out))
    };
    ScriptedModel {
        history: Vec::new(),
        script: Arc::new(script),
        fed: Arc::default(),
    }
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
           "required": ["a"], "additionalProperties": false})
}

/// Runs a thinking turn: the block opened by the engine (`<think>\n`) unless
/// `prompt_opened`, `budget` thought tokens, `max_tokens` for the whole turn.
fn think_run(
    model: &ScriptedModel,
    grammar: Arc<Grammar>,
    budget: usize,
    max_tokens: usize,
    prompt_opened: bool,
) -> (ThinkOutput, Matcher) {
    let codec = ByteCodec::new();
    let mut matcher = Matcher::new(grammar, codec.trie());
    let mut m = model.clone();
    let prompt: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    let logits = m.forward(&prompt, 0).unwrap();
    let mut boxed: Box<dyn LanguageModel> = Box::new(m);
    let open = if prompt_opened {
        vec![]
    } else {
        vec![OPEN, b'\n' as u32]
    };
    let after = [b'\n' as u32, b'\n' as u32];
    let is_special = |t: u32| t >= EOS;
    let plan = ThinkPlan {
        open: &open,
        close: &[CLOSE],
        close_text: b"</think>",
        after: &after,
        budget,
        is_special: &is_special,
        watch: None,
    };
    let opts = DecodeOptions {
        max_tokens,
        ..Default::default()
    };
    let mut sampler = Sampler::new(Sampling::Greedy, 0);
    let out = decode_think(
        &mut boxed,
        &codec,
        &mut matcher,
        &mut sampler,
        logits,
        prompt.len(),
        &opts,
        &plan,
    )
    .unwrap();
    (out, matcher)
}

fn schema_grammar() -> Arc<Grammar> {
    Grammar::new(compile(&schema(), &Config::default()).unwrap())
}

fn answer(out: &ThinkOutput) -> String {
    String::from_utf8(out.answer.bytes.clone()).unwrap()
}

fn assert_valid(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let a = v["a"].as_str().expect("a string");
    assert!(a.chars().count() <= 3, "{text}");
    assert_eq!(v.as_object().unwrap().len(), 1, "{text}");
}

/// Garbage: a model that has lost its way prefers prose.
fn prose(_: &[u8]) -> Vec<u32> {
    vec![b'z' as u32, b' ' as u32]
}

#[test]
fn the_thought_is_free_text_and_the_answer_follows_under_the_mask() {
    // Free text inside the block: a mask would refuse "let me see" as a JSON start.
    let m = wants("<think>\nlet me see</think>\n\n{\"a\":\"xy\"}", prose);
    let (out, matcher) = think_run(&m, schema_grammar(), 100, 200, false);
    assert_eq!(out.text, "let me see");
    assert!(!out.forced_close);
    assert_eq!(answer(&out), "{\"a\":\"xy\"}");
    assert!(matches!(out.answer.stop, Stop::Eos | Stop::Finished));
    assert!(matcher.is_accepting());
    // The block: the open marker, the thought, the model's close token, the separator.
    assert_eq!(out.thought.tokens.first(), Some(&OPEN));
    assert!(out.thought.tokens.contains(&CLOSE));
    assert_eq!(&out.thought.bytes[out.thought.bytes.len() - 2..], b"\n\n");
}

#[test]
fn the_answer_is_masked_after_the_thought() {
    // After its thought the model wants prose: the mask makes it JSON.
    let m = wants("<think>\nok</think>\n\nsure, here", prose);
    let (out, matcher) = think_run(&m, schema_grammar(), 100, 200, false);
    assert_eq!(out.text, "ok");
    assert_valid(&answer(&out));
    assert!(matcher.is_accepting());
}

#[test]
fn the_budget_closes_the_block_mid_thought_and_the_answer_is_complete() {
    // The model would think forever ("hmm hmm ..."): after 5 thought tokens the engine
    // writes the close marker itself, and the answer is still valid and complete.
    fn hmm(out: &[u8]) -> Vec<u32> {
        if out.ends_with(b"</think>\n\n") || out.windows(10).any(|w| w == b"</think>\n\n") {
            vec![b'{' as u32, b'"' as u32]
        } else {
            vec![b'h' as u32]
        }
    }
    let m = wants("<think>\n", hmm);
    let (out, matcher) = think_run(&m, schema_grammar(), 5, 200, false);
    assert!(out.forced_close);
    assert_eq!(out.text, "hhhhh");
    assert_eq!(out.thought.stats.tokens_generated, 5);
    assert_valid(&answer(&out));
    assert!(matcher.is_accepting());

    // A turn budget too small for the whole thought: the thought gets what the shortest
    // answer leaves over, and the answer is not cut off.
    let min = Matcher::new(schema_grammar(), ByteCodec::new().trie()).min_completion_tokens();
    let max = 2 + 1 + 2 + min + 3;
    let (out, matcher) = think_run(&m, schema_grammar(), 1000, max, false);
    assert!(out.forced_close);
    assert_eq!(out.text, "hhh");
    assert!(out.thought.tokens.len() + out.answer.tokens.len() <= max);
    assert_valid(&answer(&out));
    assert!(matcher.is_accepting(), "{}", answer(&out));
    assert_ne!(out.answer.stop, Stop::Budget);
}

#[test]
fn the_thought_cannot_end_the_turn() {
    // Inside the block the model prefers EOS, then the end-of-turn control token: both
    // are refused, so it writes its third choice until its text has 3 bytes, and closes.
    fn end_first(out: &[u8]) -> Vec<u32> {
        let inside = out.strip_prefix(b"<think>\n").unwrap_or(b"");
        if out.windows(8).any(|w| w == b"</think>") {
            vec![b'{' as u32]
        } else if inside.len() >= 3 {
            vec![EOS, IM_END, CLOSE]
        } else {
            vec![EOS, IM_END, b'o' as u32]
        }
    }
    let m = wants("<think>\n", end_first);
    let (out, matcher) = think_run(&m, schema_grammar(), 100, 200, false);
    assert_eq!(out.text, "ooo");
    assert!(!out.forced_close);
    assert!(!out.thought.tokens.contains(&EOS));
    assert!(!out.thought.tokens.contains(&IM_END));
    assert_valid(&answer(&out));
    assert!(matcher.is_accepting());
}

#[test]
fn a_budget_of_0_skips_the_thought() {
    // The model would open a block and think: with 0 it answers at once, no marker fed
    // (the prompt carries the empty block).
    let m = wants("<think>\nlong thought</think>\n\n{\"a\":\"q\"}", prose);
    let (out, matcher) = think_run(&m, schema_grammar(), 0, 200, false);
    assert!(out.thought.tokens.is_empty());
    assert_eq!(out.text, "");
    assert_valid(&answer(&out));
    assert!(!answer(&out).contains("think"));
    assert!(matcher.is_accepting());
    // A prompt that opened the block itself: 0 closes it at once.
    let m = wants("long thought</think>\n\n{\"a\":\"q\"}", prose);
    let (out, _) = think_run(&m, schema_grammar(), 0, 200, true);
    assert!(out.forced_close);
    assert_eq!(out.thought.tokens, vec![CLOSE, b'\n' as u32, b'\n' as u32]);
    assert_eq!(out.text, "");
    assert_valid(&answer(&out));
}

#[test]
fn a_tool_call_follows_the_thought() {
    use formwork_grammar::tools::{FinalAnswer, ToolSpec, ToolTurn};
    let params = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": false});
    let tool = ToolSpec {
        name: "get".into(),
        parameters: compile(&params, &Config::default()).unwrap(),
    };
    let turn = ToolTurn::new(vec![tool], FinalAnswer::Text, 0, 4).unwrap();
    let call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"P\"}}\n</tool_call>";
    let m = wants(
        "<think>\nI need the weather.</think>\n\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"P\"}}\n</tool_call>",
        prose,
    );
    let (out, matcher) = think_run(&m, Grammar::new(Arc::new(turn)), 100, 300, false);
    assert_eq!(out.text, "I need the weather.");
    assert_eq!(answer(&out), call);
    assert!(matcher.is_accepting());
}
