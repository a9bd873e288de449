//! The decoding loop against a scripted model (exact logits) and a byte-level
//! vocabulary: tokens 0..=255 are the bytes, 256 is EOS. Fast and exact.

use std::sync::{Arc, Mutex};

use formwork::engine::decode::{decode_masked, Codec, DecodeOptions, Stop};
use formwork::sampling::{Sampler, Sampling};
use formwork_grammar::compile::{compile, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::TokTrie;
use formwork_models::runtime::LanguageModel;
use serde_json::{json, Value};

const EOS: u32 = 256;

struct ByteCodec {
    bytes: Vec<Vec<u8>>,
    eos: Vec<u32>,
}

impl ByteCodec {
    fn new() -> Self {
        let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        bytes.push(b"</s>".to_vec());
        ByteCodec {
            bytes,
            eos: vec![EOS],
        }
    }
    fn trie(&self) -> Arc<TokTrie> {
        let special: Vec<bool> = (0..self.bytes.len()).map(|i| i as u32 == EOS).collect();
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

type Script = Arc<dyn Fn(&[u32]) -> Vec<f32> + Send + Sync>;

/// A model whose logits are a function of every token fed so far. It records
/// each forward call so tests can see what was fed, and how.
#[derive(Clone)]
struct ScriptedModel {
    history: Vec<u32>,
    script: Script,
    calls: Arc<Mutex<Vec<Vec<u32>>>>,
}

impl ScriptedModel {
    fn new(script: impl Fn(&[u32]) -> Vec<f32> + Send + Sync + 'static) -> Self {
        ScriptedModel {
            history: Vec::new(),
            script: Arc::new(script),
            calls: Arc::default(),
        }
    }
}

impl LanguageModel for ScriptedModel {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> formwork_models::Result<Vec<f32>> {
        assert_eq!(pos, self.history.len(), "forward at the wrong position");
        self.history.extend_from_slice(tokens);
        self.calls.lock().unwrap().push(tokens.to_vec());
        Ok((self.script)(&self.history))
    }
    fn vocab_size(&self) -> usize {
        257
    }
    fn clear_kv_cache(&mut self) {
        self.history.clear();
    }
    fn snapshot(&self) -> Box<dyn LanguageModel> {
        Box::new(self.clone())
    }
}

/// Logits that put `order[0]` first, `order[1]` second, and so on; every other
/// token gets a low logit that still varies, so a mask decides.
fn prefer(order: &[u32]) -> Vec<f32> {
    let mut l: Vec<f32> = (0..257).map(|i| -10.0 - (i % 7) as f32).collect();
    for (rank, &t) in order.iter().enumerate() {
        l[t as usize] = 100.0 - rank as f32;
    }
    l
}

fn run(
    schema: &Value,
    model: &mut ScriptedModel,
    sampling: Sampling,
    seed: u64,
    max_tokens: usize,
    jump: bool,
) -> (String, formwork::engine::decode::DecodeOutput) {
    let codec = ByteCodec::new();
    let automaton = compile(schema, &Config::default()).expect("schema compiles");
    let grammar = Grammar::new(automaton);
    let mut matcher = Matcher::new(grammar, codec.trie());
    let mut sampler = Sampler::new(sampling, seed);
    let prompt = b"PROMPT:".iter().map(|&b| b as u32).collect::<Vec<_>>();
    let logits = model.forward(&prompt, 0).unwrap();
    let opts = DecodeOptions {
        max_tokens,
        jump_forward: jump,
        deadline: None,
    };
    let out = decode_masked(
        model,
        &codec,
        &mut matcher,
        &mut sampler,
        logits,
        prompt.len(),
        &opts,
    )
    .unwrap();
    assert!(
        matcher.is_accepting(),
        "decoding ended outside an accepting state: {:?}",
        String::from_utf8_lossy(&out.bytes)
    );
    (String::from_utf8(out.bytes.clone()).unwrap(), out)
}

fn assert_valid(schema: &Value, text: &str) {
    let v = formwork::validate::Validator::new(schema).unwrap();
    match v.check(text) {
        formwork::validate::Verdict::Valid(_) => {}
        other => panic!("{text:?} is not valid: {other:?}"),
    }
}

fn obj_schema() -> Value {
    json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "s": {"type": "string", "maxLength": 5}}, "required": ["n", "s"], "additionalProperties": false})
}

#[test]
fn greedy_is_masked_even_when_the_model_prefers_garbage() {
    let schema = obj_schema();
    // The model always wants 'x' then EOS: both are refused until they fit.
    let mut m = ScriptedModel::new(|_| prefer(&[b'x' as u32, EOS, b'7' as u32]));
    let (text, out) = run(&schema, &mut m, Sampling::Greedy, 0, 64, true);
    assert_valid(&schema, &text);
    // 'x' is allowed only inside the string: it must appear there, and nowhere else.
    assert_eq!(text, r#"{"n":77,"s":"xxxxx"}"#);
    assert!(matches!(out.stop, Stop::Eos | Stop::Finished));
}

#[test]
fn eos_is_refused_before_acceptance() {
    let schema = obj_schema();
    let mut m = ScriptedModel::new(|_| prefer(&[EOS, b'"' as u32, b'1' as u32]));
    let (text, out) = run(&schema, &mut m, Sampling::Greedy, 0, 64, true);
    assert_valid(&schema, &text);
    assert_eq!(text, r#"{"n":11,"s":""}"#);
    assert!(matches!(out.stop, Stop::Eos | Stop::Finished));
}

#[test]
fn forced_bytes_are_fed_in_one_pass_and_not_sampled() {
    let schema = obj_schema();
    let mut m = ScriptedModel::new(|_| prefer(&[b'5' as u32, b'"' as u32, EOS]));
    let calls = m.calls.clone();
    let (text, out) = run(&schema, &mut m, Sampling::Greedy, 0, 64, true);
    assert_valid(&schema, &text);
    // `{"n":` is forced at the start and `,"s":"` after the number.
    assert!(
        out.stats.tokens_forced >= r#"{"n":,"s":""#.len(),
        "forced {}",
        out.stats.tokens_forced
    );
    let calls = calls.lock().unwrap();
    assert!(
        calls
            .iter()
            .any(|c| c == &br#"{"n":"#.iter().map(|&b| b as u32).collect::<Vec<_>>()),
        "calls: {calls:?}"
    );
    assert!(
        out.stats.forward_passes < out.tokens.len(),
        "jump-forward saved no pass"
    );
    // Without jump-forward, the same text comes out one token per pass.
    let mut m2 = ScriptedModel::new(|_| prefer(&[b'5' as u32, b'"' as u32, EOS]));
    let (text2, out2) = run(&schema, &mut m2, Sampling::Greedy, 0, 64, false);
    assert_eq!(text, text2);
    assert_eq!(out2.stats.tokens_forced, 0);
}

#[test]
fn sampling_is_masked_for_every_seed() {
    let schema = json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "bb", null]}, "maxItems": 3},
        "score": {"type": "number", "minimum": -1.5, "maximum": 2},
        "ok": {"type": "boolean"}}, "required": ["tags", "score"]});
    for seed in 0..25u64 {
        // Pseudo-random logits that change with the history.
        let mut m = ScriptedModel::new(move |h: &[u32]| {
            let mut x = (h.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
            (0..257)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 1000) as f32 / 100.0
                })
                .collect()
        });
        let (text, _) = run(
            &schema,
            &mut m,
            Sampling::Temperature {
                temperature: 1.0,
                top_p: Some(0.95),
            },
            seed,
            200,
            true,
        );
        assert_valid(&schema, &text);
    }
}

#[test]
fn a_tight_budget_still_ends_valid() {
    let schema = json!({"type": "object", "properties": {"s": {"type": "string"}, "k": {"type": "integer"}}, "required": ["s", "k"]});
    // The model would write 'a' forever.
    let mut m = ScriptedModel::new(|_| prefer(&[b'a' as u32, b'9' as u32]));
    let (text, out) = run(&schema, &mut m, Sampling::Greedy, 0, 24, true);
    assert_valid(&schema, &text);
    assert!(out.tokens.len() <= 24, "{} tokens", out.tokens.len());
    assert!(out.steered, "the budget steering did not report itself");
}
