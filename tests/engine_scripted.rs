//! The decoding loop against a scripted model (exact logits) and a byte-level
//! vocabulary: tokens 0..=255 are the bytes, 256 is EOS, and some tests add
//! multi-byte tokens from 257 on (their codec encodes longest match first, which
//! stands in for the tokenizer's canonical encoding). Fast and exact.

use std::sync::{Arc, Mutex};

use formwork::engine::decode::{
    decode_free, decode_masked, Codec, DecodeOptions, DecodeOutput, Stop, Until,
};
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
        Self::with(&[])
    }
    /// Bytes, EOS, then `words` (ids 257, 258, ...).
    fn with(words: &[&str]) -> Self {
        let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        bytes.push(b"</s>".to_vec());
        bytes.extend(words.iter().map(|w| w.as_bytes().to_vec()));
        ByteCodec {
            bytes,
            eos: vec![EOS],
        }
    }
    fn id(&self, word: &str) -> u32 {
        self.bytes
            .iter()
            .position(|b| b == word.as_bytes())
            .unwrap() as u32
    }
    fn text(&self, toks: &[u32]) -> String {
        toks.iter()
            .map(|&t| String::from_utf8_lossy(&self.bytes[t as usize]).into_owned())
            .collect()
    }
    fn trie(&self) -> Arc<TokTrie> {
        let special: Vec<bool> = (0..self.bytes.len()).map(|i| i as u32 == EOS).collect();
        Arc::new(TokTrie::new(self.bytes.clone(), &special, &self.eos))
    }
}

impl Codec for ByteCodec {
    /// Longest match first (the byte tokens cover everything).
    fn encode(&self, text: &str) -> Vec<u32> {
        let b = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let (id, len) = (0..self.bytes.len())
                .filter(|&t| t != EOS as usize && b[i..].starts_with(&self.bytes[t]))
                .map(|t| (t as u32, self.bytes[t].len()))
                .max_by_key(|&(_, len)| len)
                .expect("every byte is a token");
            out.push(id);
            i += len;
        }
        out
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
    /// The history after the latest forward of any copy (snapshots share it).
    last_history: Arc<Mutex<Vec<u32>>>,
    vocab: usize,
}

impl ScriptedModel {
    fn new(script: impl Fn(&[u32]) -> Vec<f32> + Send + Sync + 'static) -> Self {
        ScriptedModel {
            history: Vec::new(),
            script: Arc::new(script),
            calls: Arc::default(),
            last_history: Arc::default(),
            vocab: 257,
        }
    }
}

impl LanguageModel for ScriptedModel {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> formwork_models::Result<Vec<f32>> {
        assert_eq!(pos, self.history.len(), "forward at the wrong position");
        self.history.extend_from_slice(tokens);
        self.calls.lock().unwrap().push(tokens.to_vec());
        *self.last_history.lock().unwrap() = self.history.clone();
        let l = (self.script)(&self.history);
        assert_eq!(
            l.len(),
            self.vocab,
            "the script's logits have the wrong width"
        );
        Ok(l)
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn clear_kv_cache(&mut self) {
        self.history.clear();
    }
    fn snapshot(&self) -> Box<dyn LanguageModel> {
        Box::new(self.clone())
    }
    fn truncate(&mut self, len: usize) -> bool {
        if len > self.history.len() {
            return false;
        }
        self.history.truncate(len);
        true
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
) -> (String, DecodeOutput) {
    let opts = DecodeOptions {
        max_tokens,
        jump_forward: jump,
        ..Default::default()
    };
    run_with(schema, model, &ByteCodec::new(), sampling, seed, &opts)
}

const PROMPT: &[u8] = b"PROMPT:";

fn run_with(
    schema: &Value,
    model: &mut ScriptedModel,
    codec: &ByteCodec,
    sampling: Sampling,
    seed: u64,
    opts: &DecodeOptions,
) -> (String, DecodeOutput) {
    let automaton = compile(schema, &Config::default()).expect("schema compiles");
    let grammar = Grammar::new(automaton);
    let mut matcher = Matcher::new(grammar, codec.trie());
    let mut sampler = Sampler::new(sampling, seed);
    let prompt = PROMPT.iter().map(|&b| b as u32).collect::<Vec<_>>();
    let logits = model.forward(&prompt, 0).unwrap();
    let mut boxed: Box<dyn LanguageModel> = Box::new(model.clone());
    let out = decode_masked(
        &mut boxed,
        codec,
        &mut matcher,
        &mut sampler,
        logits,
        prompt.len(),
        opts,
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

/// `prefer` for a vocabulary of `n` tokens.
fn prefer_n(n: usize, order: &[u32]) -> Vec<f32> {
    let mut l: Vec<f32> = (0..n).map(|i| -10.0 - (i % 7) as f32).collect();
    for (rank, &t) in order.iter().enumerate() {
        l[t as usize] = 100.0 - rank as f32;
    }
    l
}

/// The output text so far: the history after the prompt.
fn output_text(bytes: &[Vec<u8>], history: &[u32]) -> String {
    let out: Vec<u8> = history[PROMPT.len()..]
        .iter()
        .flat_map(|&t| bytes[t as usize].iter().copied())
        .collect();
    String::from_utf8_lossy(&out).into_owned()
}

const WORDS: [&str; 5] = ["{\"", "\":", "\":\"", "\",\"", "\"}"];

/// A model that writes `{"a":"x","b":"y"}`, choosing `":"` after each key and
/// closing each string with `"` alone (though `","` and `"}` are allowed).
fn key_model(codec: &ByteCodec) -> ScriptedModel {
    let bytes = codec.bytes.clone();
    let n = bytes.len();
    let [obj, colon, colon_q, comma, close] = WORDS.map(|w| codec.id(w));
    let mut m = ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let order: Vec<u32> = if text.ends_with("{\"a") || text.ends_with("\"b") {
            vec![colon_q, colon, b'"' as u32]
        } else if text.ends_with("\":\"") {
            vec![if text.contains("\"b") { b'y' } else { b'x' } as u32]
        } else if text.ends_with('x') || text.ends_with('y') {
            vec![b'"' as u32, comma, close]
        } else {
            vec![obj, b'{' as u32]
        };
        prefer_n(n, &order)
    });
    m.vocab = n;
    m
}

fn two_strings() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
        "b": {"type": "string", "maxLength": 5}}, "required": ["a", "b"],
        "additionalProperties": false})
}

#[test]
fn forced_text_is_tokenised_with_the_sampled_token_before_it() {
    let codec = ByteCodec::with(&WORDS);
    let schema = two_strings();
    let opts = |jump_forward, heal_forced| DecodeOptions {
        max_tokens: 64,
        jump_forward,
        heal_forced,
        ..Default::default()
    };
    // Before: `,"b":"` tokenised alone after the model's `"`.
    let (old_text, old) = run_with(
        &schema,
        &mut key_model(&codec),
        &codec,
        Sampling::Greedy,
        0,
        &opts(true, false),
    );
    assert_eq!(old_text, r#"{"a":"x","b":"y"}"#);
    let shown: Vec<String> = old.tokens.iter().map(|&t| codec.text(&[t])).collect();
    assert_eq!(
        shown,
        ["{\"", "a", "\":\"", "x", "\"", ",", "\"", "b", "\":\"", "y", "\"", "}"],
        "the old split feeds the model's `\"` alone, then `,\"b` tokenised alone"
    );
    assert_ne!(old.tokens, codec.encode(&old_text));
    assert_eq!(
        old.stats.forced_spans_noncanonical, 2,
        "`\" ,\"b` and `\" }}`"
    );

    // After: the same text, fed exactly as the codec encodes it.
    let (text, new) = run_with(
        &schema,
        &mut key_model(&codec),
        &codec,
        Sampling::Greedy,
        0,
        &opts(true, true),
    );
    assert_eq!(text, old_text);
    let shown: Vec<String> = new.tokens.iter().map(|&t| codec.text(&[t])).collect();
    assert_eq!(
        shown,
        ["{\"", "a", "\":\"", "x", "\",\"", "b", "\":\"", "y", "\"}"],
        "the key boundary is the model's own `\":\"` after the forced `a`"
    );
    assert_eq!(new.tokens, codec.encode(&text));
    assert!(!new.stats.noncanonical);
    assert_eq!(new.stats.forced_spans, 3);
    assert_eq!(new.stats.forced_spans_noncanonical, 0);
    // Jump-forward still saves passes: `{"a`, `","b` and `"}` take one pass each (the
    // last none: nothing follows it), against one pass per token without it.
    let (nojf_text, nojf) = run_with(
        &schema,
        &mut key_model(&codec),
        &codec,
        Sampling::Greedy,
        0,
        &opts(false, true),
    );
    assert_eq!(nojf_text, text);
    assert_eq!(new.stats.forward_passes, 6);
    assert!(
        nojf.stats.forward_passes >= 8,
        "{}",
        nojf.stats.forward_passes
    );
    assert!(new.stats.forward_passes <= old.stats.forward_passes);
    assert_eq!(
        new.stats.tokens_generated + new.stats.tokens_forced,
        new.tokens.len()
    );
}

const NULL_TEXT: &str = r#"{"a":null,"b":5}"#;
const STR_TEXT: &str = r#"{"a":"zzz","b":5}"#;

/// Logits over the byte vocabulary: at `{"a":` `"` gets `first.0` and `n` gets
/// `first.1`; inside each branch the next byte of its text gets `null_body` (after
/// `n`) or `str_body` (the `zzz`), every other next byte of either text 8. All else 0.
fn null_model(first: (f32, f32), null_body: f32, str_body: f32) -> ScriptedModel {
    let bytes = ByteCodec::new().bytes;
    ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let mut l = vec![0.0f32; 257];
        if text == r#"{"a":"# {
            l[b'"' as usize] = first.0;
            l[b'n' as usize] = first.1;
            return l;
        }
        for (target, body) in [(NULL_TEXT, null_body), (STR_TEXT, str_body)] {
            if target.len() > text.len() && target.starts_with(&text) {
                let i = text.len();
                l[target.as_bytes()[i] as usize] += if (6..9).contains(&i) { body } else { 8.0 };
            }
        }
        l
    })
}

fn nullable() -> Value {
    json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 3},
        "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"],
        "additionalProperties": false})
}

fn lookahead(mut m: ScriptedModel, on: bool) -> (String, DecodeOutput, Vec<u32>) {
    let opts = DecodeOptions {
        max_tokens: 64,
        null_lookahead: on,
        ..Default::default()
    };
    let last = m.last_history.clone();
    let (text, out) = run_with(
        &nullable(),
        &mut m,
        &ByteCodec::new(),
        Sampling::Greedy,
        0,
        &opts,
    );
    let last = last.lock().unwrap().clone();
    (text, out, last)
}

/// The model fed exactly the prompt and every output token but the last (`}`, after
/// which nothing can follow, is never fed).
fn fed_all_but_last(out: &DecodeOutput, last: &[u32]) {
    let mut want: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    want.extend_from_slice(&out.tokens[..out.tokens.len() - 1]);
    assert_eq!(last, want.as_slice());
}

#[test]
fn null_lookahead_picks_null_when_its_branch_scores_higher() {
    // The first token prefers `"`, but the string's body is unlikely (logit 1 over
    // 256 others) while `null`'s rest is likely.
    let model = || null_model((5.0, 4.0), 8.0, 1.0);
    let (greedy, _, _) = lookahead(model(), false);
    assert_eq!(greedy, STR_TEXT, "plain greedy follows the first token");
    let (text, out, last) = lookahead(model(), true);
    assert_eq!(text, NULL_TEXT);
    assert_eq!(out.stats.lookaheads, 1);
    assert_eq!(out.stats.lookahead_null_wins, 1);
    assert!(
        out.stats.lookahead_forward_passes >= 18,
        "{}",
        out.stats.lookahead_forward_passes
    );
    // The state after the choice is the winner's: the same tokens as a direct decode
    // of null, and the live model was fed exactly them (its positions line up, or the
    // scripted model's own assertion fails).
    let (direct, direct_out, _) = lookahead(null_model((4.0, 5.0), 8.0, 1.0), false);
    assert_eq!(direct, NULL_TEXT);
    assert_eq!(out.tokens, direct_out.tokens);
    fed_all_but_last(&out, &last);
}

#[test]
fn null_lookahead_picks_the_value_when_its_branch_scores_higher() {
    // The first token prefers `n`, but `null`'s rest is unlikely and the string likely.
    let model = || null_model((4.0, 5.0), 0.0, 8.0);
    let (greedy, _, _) = lookahead(model(), false);
    assert_eq!(greedy, NULL_TEXT);
    let (text, out, last) = lookahead(model(), true);
    assert_eq!(text, STR_TEXT);
    assert_eq!(out.stats.lookaheads, 1);
    assert_eq!(out.stats.lookahead_null_wins, 0);
    let (direct, direct_out, _) = lookahead(null_model((5.0, 4.0), 0.0, 8.0), false);
    assert_eq!(direct, STR_TEXT);
    assert_eq!(out.tokens, direct_out.tokens);
    assert_eq!(
        out.stats.tokens_generated,
        direct_out.stats.tokens_generated
    );
    fed_all_but_last(&out, &last);
}

fn with_null_bias(bias: f32, first: (f32, f32)) -> (String, DecodeOutput) {
    let opts = DecodeOptions {
        max_tokens: 64,
        null_bias: bias,
        ..Default::default()
    };
    let mut m = null_model(first, 8.0, 8.0);
    run_with(
        &nullable(),
        &mut m,
        &ByteCodec::new(),
        Sampling::Greedy,
        0,
        &opts,
    )
}

#[test]
fn null_bias_moves_the_choice_by_exactly_its_margin() {
    // `"` leads `n` by 1.5 nats at `{"a":`.
    let (text, out) = with_null_bias(0.0, (5.5, 4.0));
    assert_eq!(text, STR_TEXT);
    // One decision, recorded where the value starts with the margin before any bias.
    assert_eq!(
        out.stats.null_decisions.len(),
        1,
        "{:?}",
        out.stats.null_decisions
    );
    let d = out.stats.null_decisions[0];
    assert_eq!(d.at, r#"{"a":"#.len());
    assert_eq!(d.gap, -1.5);
    assert!(!d.null);
    // A bias under the margin leaves the value; over it, null wins.
    assert_eq!(with_null_bias(1.4, (5.5, 4.0)).0, STR_TEXT);
    let (text, out) = with_null_bias(1.6, (5.5, 4.0));
    assert_eq!(text, NULL_TEXT);
    let d = out.stats.null_decisions[0];
    assert_eq!(
        (d.gap, d.null),
        (-1.5, true),
        "the gap is recorded before the bias"
    );
    // A negative bias works the other way.
    assert_eq!(with_null_bias(-1.6, (4.0, 5.5)).0, STR_TEXT);
    assert_eq!(with_null_bias(-1.4, (4.0, 5.5)).0, NULL_TEXT);
}

#[test]
fn sampling_with_a_null_bias_stays_valid() {
    for seed in 0..20 {
        let opts = DecodeOptions {
            max_tokens: 64,
            null_bias: 3.0,
            ..Default::default()
        };
        let mut m = null_model((5.0, 4.0), 8.0, 8.0);
        let (text, out) = run_with(
            &nullable(),
            &mut m,
            &ByteCodec::new(),
            Sampling::Temperature {
                temperature: 1.0,
                top_p: None,
            },
            seed,
            &opts,
        );
        assert_valid(&nullable(), &text);
        assert!(out.stats.null_decisions.len() <= 1);
    }
}

/// Vocabulary with `":` and `":"`: after `{"a` the model prefers `":"` (10, a string
/// starts inside the token) to `":` (9, the next step chooses); after `{"a":` it
/// prefers `n` (6) to `"` (5), so p(null | `":`) = 1 / (1 + e^-1).
fn crossing_model(codec: &ByteCodec) -> ScriptedModel {
    let bytes = codec.bytes.clone();
    let n = bytes.len();
    let (undecided, value) = (codec.id("\":") as usize, codec.id("\":\"") as usize);
    let mut m = ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let mut l = vec![0.0f32; n];
        if text == r#"{"a"# {
            l[value] = 10.0;
            l[undecided] = 9.0;
            return l;
        }
        if text == r#"{"a":"# {
            l[b'n' as usize] = 6.0;
            l[b'"' as usize] = 5.0;
            return l;
        }
        for target in [NULL_TEXT, STR_TEXT] {
            if target.len() > text.len() && target.starts_with(&text) {
                l[target.as_bytes()[text.len()] as usize] += 8.0;
            }
        }
        l
    });
    m.vocab = n;
    m
}

fn crossing_run(bias: f32) -> (String, DecodeOutput) {
    let codec = ByteCodec::with(&["\":", "\":\""]);
    let mut m = crossing_model(&codec);
    let opts = DecodeOptions {
        max_tokens: 64,
        null_bias: bias,
        ..Default::default()
    };
    run_with(&nullable(), &mut m, &codec, Sampling::Greedy, 0, &opts)
}

#[test]
fn null_bias_reaches_a_choice_made_inside_a_token() {
    // Without a bias the model writes the string through `":"`.
    let (text, out) = crossing_run(0.0);
    assert_eq!(text, STR_TEXT);
    assert_eq!(out.stats.lookahead_forward_passes, 0);
    // Bias 1.1: `":` could win (9 + 1.1 > 10), so one pass weighs it: 9 + ln(p e^1.1
    // + 1 - p) = 9.90 < 10. The string stays; the choice is recorded with null's
    // best way (9 + ln p) against the value's (10).
    let (text, out) = crossing_run(1.1);
    assert_eq!(text, STR_TEXT);
    assert_eq!(out.stats.lookahead_forward_passes, 1);
    let d = out.stats.null_decisions[0];
    assert_eq!(d.at, r#"{"a":"#.len());
    assert!(!d.null);
    // p is about 1 / (1 + e^-1) (other allowed tokens have logit 0 and take a little).
    let p = 1.0 / (1.0 + (-1.0f64).exp());
    assert!(
        (d.gap as f64 - (9.0 + p.ln() - 10.0)).abs() < 0.01,
        "{}",
        d.gap
    );
    // Bias 1.5: 9 + ln(p e^1.5 + 1 - p) = 10.27 > 10: `":`, then null (6 + 1.5 > 5).
    let (text, out) = crossing_run(1.5);
    assert_eq!(text, NULL_TEXT);
    let last = out.stats.null_decisions.last().unwrap();
    assert_eq!(
        (last.at, last.gap, last.null),
        (r#"{"a":"#.len(), 1.0, true)
    );
    // A negative bias never makes null likelier.
    assert_eq!(crossing_run(-3.0).0, STR_TEXT);
}

use formwork::engine::confidence::{self, Combine, NullRule, Rule};

/// Logits of width `n`: the listed tokens get their logits, every other token -1e30
/// (nothing, under a softmax).
fn only(n: usize, set: &[(u32, f64)]) -> Vec<f32> {
    let mut l = vec![-1e30f32; n];
    for &(t, x) in set {
        l[t as usize] = x as f32;
    }
    l
}

/// Decodes with the confidence recorded; the output text and each value's confidence
/// under `rule`.
fn confident_run(
    schema: &Value,
    mut m: ScriptedModel,
    codec: &ByteCodec,
    sampling: Sampling,
    seed: u64,
    grounding: Option<&str>,
    rules: &[Rule],
) -> (
    String,
    Vec<std::collections::BTreeMap<String, f64>>,
    DecodeOutput,
) {
    let opts = DecodeOptions {
        max_tokens: 64,
        confidence: true,
        grounding: grounding
            .and_then(|doc| Grounding::new(schema, Some(GroundMode::Stated), doc))
            .map(Arc::new),
        ..Default::default()
    };
    let (text, out) = run_with(schema, &mut m, codec, sampling, seed, &opts);
    let confs = rules
        .iter()
        .map(|&r| confidence::confidence(text.as_bytes(), &out.probs, r).unwrap())
        .collect();
    (text, confs, out)
}

const PATH: Rule = Rule {
    tokens: Combine::Product,
    null: NullRule::Path,
};

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-6, "{a} != {b}");
}

#[test]
fn a_two_way_choice_has_its_softmax_share_and_forced_tokens_count_1() {
    // {"k": one of "xa" or "yb"}: `{"k":"` is forced, then x (logit ln 3) or y (0);
    // every refused token has a higher logit (50), which the mask must not count.
    let schema = json!({"type": "object", "properties": {"k": {"enum": ["xa", "yb"]}},
        "required": ["k"], "additionalProperties": false});
    let model = || {
        ScriptedModel::new(|_h: &[u32]| {
            let mut l = vec![50.0f32; 257];
            l[b'x' as usize] = 3f32.ln();
            l[b'y' as usize] = 0.0;
            l
        })
    };
    let codec = ByteCodec::new();
    let (text, c, out) = confident_run(
        &schema,
        model(),
        &codec,
        Sampling::Greedy,
        0,
        None,
        &[Rule::DEFAULT],
    );
    assert_eq!(text, r#"{"k":"xa"}"#);
    // One choice; the forced `{"k":"` and `a"}` are not choices.
    assert_eq!(out.probs.chosen.len(), 1, "{:?}", out.probs.chosen);
    assert_eq!((out.probs.chosen[0].at, out.probs.chosen[0].len), (6, 1));
    close(c[0]["/k"], 0.75);
    // Sampling at temperature 2: the share of softmax(logits / 2) over x and y.
    let t2 = Sampling::Temperature {
        temperature: 2.0,
        top_p: None,
    };
    let sx = 3f64.sqrt() / (3f64.sqrt() + 1.0);
    let mut seen = [false, false];
    for seed in 0..40 {
        let (text, c, _) = confident_run(
            &schema,
            model(),
            &codec,
            t2.clone(),
            seed,
            None,
            &[Rule::DEFAULT],
        );
        let x = text.contains("xa");
        seen[usize::from(x)] = true;
        close(c[0]["/k"], if x { sx } else { 1.0 - sx });
    }
    assert_eq!(seen, [true, true], "both values were sampled");
}

/// A nullable string `a` (at most 3 characters) over bytes plus `"x` and `"y`. At
/// `{"a":` the model gives `n`, `"`, `"x`, `"y` the weights `first` (as
/// probabilities: logits are their logs); after `{"a":"x` it gives `"` and `y`
/// the weights `close`.
fn null_or_string(codec: &ByteCodec, first: [f64; 4], close: [f64; 2]) -> ScriptedModel {
    let bytes = codec.bytes.clone();
    let n = bytes.len();
    let (qx, qy) = (codec.id("\"x"), codec.id("\"y"));
    let mut m = ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let w = |ts: &[u32], ws: &[f64]| -> Vec<f32> {
            let set: Vec<(u32, f64)> = ts.iter().zip(ws).map(|(&t, &x)| (t, x.ln())).collect();
            only(n, &set)
        };
        match text.as_str() {
            r#"{"a":"# => w(&[b'n' as u32, b'"' as u32, qx, qy], &first),
            r#"{"a":"x"# => w(&[b'"' as u32, b'y' as u32], &close),
            _ => vec![0.0; n],
        }
    });
    m.vocab = n;
    m
}

fn nullable_a() -> Value {
    json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 3}},
        "required": ["a"], "additionalProperties": false})
}

#[test]
fn null_is_weighed_against_the_best_value_start() {
    let codec = ByteCodec::with(&["\"x", "\"y"]);
    // P(null) = 4/8, the best other start `"x` 2/8, then `"` 1/8 and `"y` 1/8.
    let (text, c, out) = confident_run(
        &nullable_a(),
        null_or_string(&codec, [4.0, 1.0, 2.0, 1.0], [1.0, 1.0]),
        &codec,
        Sampling::Greedy,
        0,
        None,
        &[Rule::DEFAULT, PATH],
    );
    assert_eq!(text, r#"{"a":null}"#);
    assert_eq!(out.probs.odds.len(), 1);
    close(out.probs.odds[0].null, 0.5);
    close(out.probs.odds[0].value, 0.25);
    close(c[0]["/a"], 0.5 / (0.5 + 0.25));
    // As its own tokens: `n` (1/2), then `ull}` forced.
    close(c[1]["/a"], 0.5);
}

#[test]
fn a_value_is_the_product_of_its_chosen_tokens() {
    let codec = ByteCodec::with(&["\"x", "\"y"]);
    // `"x` 6/9, then the closing `"` 3/4 (against `y`); `}` forced.
    let (text, c, _) = confident_run(
        &nullable_a(),
        null_or_string(&codec, [1.0, 1.0, 6.0, 1.0], [3.0, 1.0]),
        &codec,
        Sampling::Greedy,
        0,
        None,
        &[Rule::DEFAULT],
    );
    assert_eq!(text, r#"{"a":"x"}"#);
    close(c[0]["/a"], 6.0 / 9.0 * 0.75);
    // Grounded against a document without "x": taken back, written null, and its
    // confidence is 1 minus the probability of the value taken back.
    let (text, c, _) = confident_run(
        &nullable_a(),
        null_or_string(&codec, [1.0, 1.0, 6.0, 1.0], [1.0, 1.0]),
        &codec,
        Sampling::Greedy,
        0,
        Some("nothing to see"),
        &[Rule::DEFAULT],
    );
    assert_eq!(text, r#"{"a":null}"#);
    close(c[0]["/a"], 1.0 - 6.0 / 9.0 * 0.5);
}

#[test]
fn a_choice_inside_a_token_counts_for_the_value_after_it() {
    // After `{"a` the model picks `":` (3/5) over `":"` (1/5) and `"` (1/5); then `n`
    // (3/4) over `"` (1/4).
    let codec = ByteCodec::with(&["\":", "\":\""]);
    let bytes = codec.bytes.clone();
    let n = bytes.len();
    let (undecided, value) = (codec.id("\":"), codec.id("\":\""));
    let mut m = ScriptedModel::new(move |h: &[u32]| match output_text(&bytes, h).as_str() {
        r#"{"a"# => only(
            n,
            &[(undecided, 3f64.ln()), (value, 0.0), (b'"' as u32, 0.0)],
        ),
        r#"{"a":"# => only(n, &[(b'n' as u32, 3f64.ln()), (b'"' as u32, 0.0)]),
        _ => vec![0.0; n],
    });
    m.vocab = n;
    let (text, c, _) = confident_run(
        &nullable_a(),
        m,
        &codec,
        Sampling::Greedy,
        0,
        None,
        &[
            Rule {
                null: NullRule::Odds,
                ..Rule::DEFAULT
            },
            PATH,
            Rule {
                null: NullRule::Chain,
                ..Rule::DEFAULT
            },
        ],
    );
    assert_eq!(text, r#"{"a":null}"#);
    // The odds where null competed (null 3/4 against `"` 1/4); as a path, the token
    // that ends where null starts counts too, and so it does in the chain.
    close(c[0]["/a"], 0.75);
    close(c[1]["/a"], 0.6 * 0.75);
    close(c[2]["/a"], 0.6 * 0.75 / (0.75 + 0.25));
}

use formwork::engine::ground::{GroundMode, Grounding};

fn grounded_run(
    schema: &Value,
    m: ScriptedModel,
    codec: &ByteCodec,
    doc: &str,
) -> (String, DecodeOutput, Vec<u32>) {
    grounded_run_in(GroundMode::Stated, schema, m, codec, doc)
}

fn grounded_run_in(
    mode: GroundMode,
    schema: &Value,
    mut m: ScriptedModel,
    codec: &ByteCodec,
    doc: &str,
) -> (String, DecodeOutput, Vec<u32>) {
    let opts = DecodeOptions {
        max_tokens: 160,
        grounding: Grounding::new(schema, Some(mode), doc).map(Arc::new),
        ..Default::default()
    };
    let last = m.last_history.clone();
    let (text, out) = run_with(schema, &mut m, codec, Sampling::Greedy, 0, &opts);
    let last = last.lock().unwrap().clone();
    (text, out, last)
}

#[test]
fn a_grounded_value_the_document_does_not_state_is_taken_back_and_written_null() {
    // The model prefers the string "zzz" at `{"a":`.
    let model = || null_model((5.0, 4.0), 8.0, 8.0);
    let (text, out, last) = grounded_run(&nullable(), model(), &ByteCodec::new(), "no such word");
    assert_eq!(text, NULL_TEXT);
    assert_eq!(out.stats.grounded_nulls, 1);
    assert_eq!(out.stats.grounded_kept, 0);
    // The live model was fed exactly the final output (the rollback restored its KV
    // state: the scripted model asserts every position), and the tokens spell the text.
    fed_all_but_last(&out, &last);
    assert_eq!(ByteCodec::new().text(&out.tokens), NULL_TEXT);
    // The same model, a document that states the value (case and spaces aside): kept.
    let (text, out, _) = grounded_run(&nullable(), model(), &ByteCodec::new(), "it is ZZZ.");
    assert_eq!(text, STR_TEXT);
    assert_eq!(out.stats.grounded_nulls, 0);
    // Without grounding the value stays whatever the document says.
    let (plain, _, _) = lookahead(model(), false);
    assert_eq!(plain, STR_TEXT);
}

#[test]
fn a_grounded_value_whose_start_was_inside_a_token_goes_back_before_that_token() {
    // `":"` carries the end of the key and the start of the value in one token.
    let codec = ByteCodec::with(&WORDS);
    let schema = json!({"type": "object", "properties": {
        "a": {"type": ["string", "null"], "maxLength": 5},
        "b": {"type": ["string", "null"], "maxLength": 5}}, "required": ["a", "b"],
        "additionalProperties": false});
    let (text, out, last) = grounded_run(&schema, key_model(&codec), &codec, "only y here");
    assert_eq!(text, r#"{"a":null,"b":"y"}"#);
    assert_eq!(out.stats.grounded_nulls, 1);
    assert_valid(&schema, &text);
    assert_eq!(codec.text(&out.tokens), text);
    let mut want: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    want.extend_from_slice(&out.tokens[..out.tokens.len() - 1]);
    assert_eq!(last, want, "the model was fed the final tokens, in order");
    // Both stated: nothing taken back.
    let (text, out, _) = grounded_run(&schema, key_model(&codec), &codec, "x and y");
    assert_eq!(text, r#"{"a":"x","b":"y"}"#);
    assert_eq!(out.stats.grounded_nulls, 0);
}

#[test]
fn an_enum_value_is_grounded_when_the_text_states_it() {
    // The model wants "star"; the document says "points".
    let schema = json!({"type": "object", "properties": {
        "unit": {"enum": ["star", "point", null]}}, "required": ["unit"],
        "additionalProperties": false});
    let bytes = ByteCodec::new().bytes;
    let model = move || {
        let bytes = bytes.clone();
        ScriptedModel::new(move |h: &[u32]| {
            let text = output_text(&bytes, h);
            let want = r#"{"unit":"star"}"#;
            let next = want.as_bytes().get(text.len()).copied().unwrap_or(b'}');
            prefer(&[next as u32, b'n' as u32, b'p' as u32])
        })
    };
    let codec = ByteCodec::new();
    let (text, out, _) = grounded_run(&schema, model(), &codec, "5 stars please");
    assert_eq!(text, r#"{"unit":"star"}"#);
    assert_eq!(out.stats.grounded_nulls, 0);
    let (text, out, _) = grounded_run(&schema, model(), &codec, "5 points please");
    assert_eq!(text, r#"{"unit":null}"#);
    assert_eq!(out.stats.grounded_nulls, 1);
}

/// A model that wants to write `want` byte by byte (then `n`, `}` as fallbacks).
fn wants(want: &'static str) -> ScriptedModel {
    let bytes = ByteCodec::new().bytes;
    ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let next = if want.starts_with(&text) {
            want.as_bytes().get(text.len()).copied().unwrap_or(b'}')
        } else {
            b'}'
        };
        prefer(&[next as u32, b'n' as u32, b'}' as u32])
    })
}

#[test]
fn distinct_grounding_gives_one_quotation_to_the_first_field_only() {
    let schema = json!({"type": "object", "properties": {
        "city": {"type": ["string", "null"], "maxLength": 9},
        "country": {"type": ["string", "null"], "maxLength": 9}}, "required": ["city", "country"],
        "additionalProperties": false});
    let want = r#"{"city":"Belgium","country":"belgium"}"#;
    let codec = ByteCodec::new();
    let doc = "the weather in Belgium";
    let (text, out, _) = grounded_run_in(GroundMode::Stated, &schema, wants(want), &codec, doc);
    assert_eq!(text, want, "stated: both are in the document");
    assert_eq!(out.stats.grounded_nulls, 0);
    let (text, out, last) =
        grounded_run_in(GroundMode::Distinct, &schema, wants(want), &codec, doc);
    assert_eq!(text, r#"{"city":"Belgium","country":null}"#);
    assert_eq!(out.stats.grounded_nulls, 1);
    fed_all_but_last(&out, &last);
}

#[test]
fn a_date_the_document_states_may_not_be_null() {
    // The model prefers `null` at the date, and would write the stated day otherwise.
    let schema = json!({"type": "object", "properties": {
        "d": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}},
        "required": ["d"], "additionalProperties": false});
    let bytes = ByteCodec::new().bytes;
    let model = move || {
        let bytes = bytes.clone();
        ScriptedModel::new(move |h: &[u32]| {
            let text = output_text(&bytes, h);
            if text == r#"{"d":"# {
                return prefer(&[b'n' as u32, b'"' as u32]);
            }
            let want = if text.starts_with(r#"{"d":n"#) {
                r#"{"d":null}"#
            } else {
                r#"{"d":"2038-03-06"}"#
            };
            let next = want.as_bytes().get(text.len()).copied().unwrap_or(b'}');
            prefer(&[next as u32, b'}' as u32])
        })
    };
    let codec = ByteCodec::new();
    // The document states a day no earlier field holds: null is refused, the day stands.
    let (text, out, last) = grounded_run(&schema, model(), &codec, "book for march sixth, 2038");
    assert_eq!(text, r#"{"d":"2038-03-06"}"#);
    assert_eq!(out.stats.grounded_nulls, 0);
    // The stated day's tail is forced, so the model is not asked about it; what it was
    // fed is the prompt and the output's start, in order.
    let mut fed: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    fed.extend_from_slice(&out.tokens);
    assert!(fed.starts_with(&last), "{last:?}");
    // No day stated: the model's null stands.
    let (text, _, _) = grounded_run(&schema, model(), &codec, "book a table soon");
    assert_eq!(text, r#"{"d":null}"#);
}

fn rows_schema(min_items: usize) -> Value {
    json!({"type": "object", "properties": {
        "rows": {"type": "array", "minItems": min_items, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "maxLength": 4},
            "qty": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "note": {"type": ["string", "null"], "maxLength": 9}},
            "required": ["sku", "qty", "note"], "additionalProperties": false}}},
        "required": ["rows"], "additionalProperties": false})
}

#[test]
fn a_row_that_repeats_an_earlier_row_is_taken_back_and_the_array_closed() {
    // A one-item order padded to two rows: the same code, no quantity.
    let padded =
        r#"{"rows":[{"sku":"B12","qty":40,"note":null},{"sku":"B12","qty":null,"note":null}]}"#;
    let codec = ByteCodec::new();
    let doc = "please send 40 pz of B12";
    let (text, out, last) = grounded_run(&rows_schema(0), wants(padded), &codec, doc);
    assert_eq!(text, r#"{"rows":[{"sku":"B12","qty":40,"note":null}]}"#);
    assert_eq!(out.stats.rows_dropped, 1);
    assert_eq!(out.stats.rows_kept, 0);
    assert_valid(&rows_schema(0), &text);
    // The cache was truncated, not restored from a snapshot: the model was fed exactly
    // the final output, in order.
    fed_all_but_last(&out, &last);
    assert_eq!(codec.text(&out.tokens), text);
    // Two rows that differ in an identifying value (the code) both stay.
    let two =
        r#"{"rows":[{"sku":"B12","qty":40,"note":null},{"sku":"B13","qty":null,"note":null}]}"#;
    let (text, out, _) = grounded_run(&rows_schema(0), wants(two), &codec, "40 pz of B12 and B13");
    assert_eq!(text, two);
    assert_eq!(out.stats.rows_dropped, 0);
    // The same code with another quantity is another row.
    let other =
        r#"{"rows":[{"sku":"B12","qty":40,"note":null},{"sku":"B12","qty":5,"note":null}]}"#;
    let (text, out, _) = grounded_run(
        &rows_schema(0),
        wants(other),
        &codec,
        "40 of B12, then 5 of B12",
    );
    assert_eq!(text, other);
    assert_eq!(out.stats.rows_dropped, 0);
    // The schema asks for two rows: the repeat cannot be taken back, and is counted.
    let (text, out, _) = grounded_run(&rows_schema(2), wants(padded), &codec, doc);
    assert_eq!(text, padded);
    assert_eq!((out.stats.rows_dropped, out.stats.rows_kept), (0, 1));
    // Without grounding nothing is judged.
    let mut m = wants(padded);
    let opts = DecodeOptions {
        max_tokens: 128,
        ..Default::default()
    };
    let (text, _) = run_with(&rows_schema(0), &mut m, &codec, Sampling::Greedy, 0, &opts);
    assert_eq!(text, padded);
}

/// The model fed exactly the prompt and every output token but the last `n`.
fn fed_all_but(n: usize, out: &DecodeOutput, last: &[u32]) {
    let mut want: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    want.extend_from_slice(&out.tokens[..out.tokens.len() - n]);
    assert_eq!(last, want.as_slice());
}

/// A model that follows the first of `plans` the output so far is a prefix of, byte
/// by byte (`}` when none is).
fn follows(plans: &'static [&'static str]) -> ScriptedModel {
    let bytes = ByteCodec::new().bytes;
    ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        let next = plans
            .iter()
            .find(|p| p.starts_with(&text) && p.len() > text.len())
            .map_or(b'}', |p| p.as_bytes()[text.len()]);
        prefer(&[next as u32, b'n' as u32, b'}' as u32])
    })
}

fn items_schema() -> Value {
    json!({"type": "object", "properties": {
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "quote": {"type": "string", "maxLength": 40},
            "sku": {"type": "string", "maxLength": 10},
            "qty": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
            "required": ["quote", "sku", "qty"], "additionalProperties": false}}},
        "required": ["rows"], "additionalProperties": false})
}

#[test]
fn a_quotation_of_several_items_is_cut_to_the_first_and_the_next_row_takes_the_next() {
    // The model quotes both items in the first row and merges them; given the first
    // item's quotation alone it writes that item's values, then a row for the second.
    const PLANS: &[&str] = &[
        r#"{"rows":[{"quote":"2 pz SKU 44A, 5 pz SKU 44B","sku":"44A, 44B","qty":null}]}"#,
        r#"{"rows":[{"quote":"2 pz SKU 44A","sku":"44A","qty":2},{"quote":"5 pz SKU 44B","sku":"44B","qty":5}]}"#,
    ];
    let codec = ByteCodec::new();
    let doc = "ordiniamo: 2 pz SKU 44A, 5 pz SKU 44B.";
    let schema = items_schema();
    let (text, out, last) =
        grounded_run_in(GroundMode::Distinct, &schema, follows(PLANS), &codec, doc);
    assert_eq!(text, PLANS[1]);
    assert_eq!((out.stats.items_cut, out.stats.items_kept), (1, 0));
    assert_eq!(out.stats.rows_dropped, 0);
    assert_valid(&schema, &text);
    // Truncated, not restored: the model was fed exactly the final output, in order
    // (all but `]}`, sampled and forced at the end, after which nothing can follow).
    fed_all_but(2, &out, &last);
    assert_eq!(codec.text(&out.tokens), text);
    // Without grounding nothing is cut.
    let mut m = follows(PLANS);
    let opts = DecodeOptions {
        max_tokens: 160,
        ..Default::default()
    };
    let (text, out) = run_with(&schema, &mut m, &codec, Sampling::Greedy, 0, &opts);
    assert_eq!(text, PLANS[0]);
    assert_eq!(out.stats.items_cut, 0);
}

#[test]
fn a_list_of_codes_the_document_does_not_state_is_cut_to_its_first() {
    // One item quoted, but the code field lists both codes: "44A, 44B" is not in
    // the document ("44A; poi 44B"), each code is.
    const PLANS: &[&str] = &[
        r#"{"rows":[{"quote":"uno","sku":"44A, 44B","qty":null}]}"#,
        r#"{"rows":[{"quote":"uno","sku":"44A","qty":2},{"quote":"due","sku":"44B","qty":5}]}"#,
    ];
    let codec = ByteCodec::new();
    let schema = items_schema();
    let doc = "uno: 2 pz 44A; due: 5 pz 44B";
    let (text, out, last) =
        grounded_run_in(GroundMode::Stated, &schema, follows(PLANS), &codec, doc);
    assert_eq!(text, PLANS[1]);
    assert_eq!(out.stats.items_cut, 1);
    fed_all_but(2, &out, &last);
    // The document states the list as written: it stands.
    let doc = "uno: 2 pz 44A, 44B";
    let (text, out, _) = grounded_run_in(GroundMode::Stated, &schema, follows(PLANS), &codec, doc);
    assert_eq!(text, PLANS[0]);
    assert_eq!(out.stats.items_cut, 0);
}

fn evidence_schema() -> Value {
    json!({"type": "object", "properties": {
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "quote": {"type": "string", "maxLength": 40, "x-formwork-evidence": true},
            "sku": {"type": "string", "maxLength": 8},
            "qty": {"type": ["integer", "null"]},
            "txt": {"type": ["string", "null"], "maxLength": 10}},
            "required": ["quote", "sku", "qty", "txt"], "additionalProperties": false}}},
        "required": ["rows"], "additionalProperties": false})
}

#[test]
fn a_rows_values_that_its_evidence_does_not_state_are_taken_back_to_null() {
    // The quotation of the row is about R1 ("un paio"); the model takes the quantity
    // and its wording from the next item. Both are in the document, neither in the
    // row's evidence: each is taken back and written null.
    const PLANS: &[&str] = &[
        r#"{"rows":[{"quote":"un paio dello SKU R1","sku":"R1","qty":5,"txt":"5 pz"}]}"#,
        r#"{"rows":[{"quote":"un paio dello SKU R1","sku":"R1","qty":null,"txt":"5 pz"}]}"#,
        r#"{"rows":[{"quote":"un paio dello SKU R1","sku":"R1","qty":null,"txt":null}]}"#,
    ];
    let codec = ByteCodec::new();
    let doc = "un paio dello SKU R1 e 5 pz dello SKU R2";
    let schema = evidence_schema();
    let (text, out, _) =
        grounded_run_in(GroundMode::Distinct, &schema, follows(PLANS), &codec, doc);
    assert_eq!(text, PLANS[2]);
    assert_eq!(out.stats.grounded_nulls, 2);
    assert_valid(&schema, &text);
    assert_eq!(codec.text(&out.tokens), text);
    // The evidence states both: kept.
    const STATED: &[&str] =
        &[r#"{"rows":[{"quote":"5 pz dello SKU R1","sku":"R1","qty":5,"txt":"5 pz"}]}"#];
    let (text, out, _) =
        grounded_run_in(GroundMode::Distinct, &schema, follows(STATED), &codec, doc);
    assert_eq!(text, STATED[0]);
    assert_eq!(out.stats.grounded_nulls, 0);
    // A quotation that does not name the row's code is no evidence for it: kept.
    const ASIDE: &[&str] =
        &[r#"{"rows":[{"quote":"e 5 pz dello SKU R2","sku":"R1","qty":5,"txt":"5 pz"}]}"#];
    let (text, out, _) =
        grounded_run_in(GroundMode::Distinct, &schema, follows(ASIDE), &codec, doc);
    assert_eq!(text, ASIDE[0]);
    assert_eq!(out.stats.grounded_nulls, 0);
}

/// Free decoding along a script that writes `text` then EOS, with `until`.
fn free_along(text: &[u8], max_tokens: usize, until: Until<'_>) -> (DecodeOutput, Vec<Vec<u32>>) {
    let text = text.to_vec();
    let mut model = ScriptedModel::new(move |h| {
        let i = h.len() - PROMPT.len();
        prefer(&[text.get(i).map_or(EOS, |&b| b as u32)])
    });
    let prompt: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    let logits = model.forward(&prompt, 0).unwrap();
    let opts = DecodeOptions {
        max_tokens,
        ..Default::default()
    };
    let mut sampler = Sampler::new(Sampling::Greedy, 0);
    let codec = ByteCodec::new();
    let out = decode_free(
        &mut model,
        &codec,
        &mut sampler,
        logits,
        prompt.len(),
        &opts,
        until,
    )
    .unwrap();
    let calls = model.calls.lock().unwrap().clone();
    (out, calls)
}

#[test]
fn free_decoding_stops_after_the_first_value_without_feeding_its_last_token() {
    let (out, calls) = free_along(br#"ok {"a":[1,"}"]} and more"#, 100, Until::FirstValue);
    assert_eq!(String::from_utf8(out.bytes).unwrap(), r#"ok {"a":[1,"}"]}"#);
    assert_eq!(out.stop, Stop::Finished);
    assert_eq!(out.stats.tokens_generated, 16);
    // The prompt, then one pass per token but the last (its logits are never read).
    assert_eq!(calls.len(), 1 + 15);
    assert_eq!(out.stats.forward_passes, 15);
}

#[test]
fn free_text_runs_to_eos_and_special_tokens_add_no_bytes() {
    let is_special = |t: u32| t == u32::from(b'#');
    let (out, calls) = free_along(
        b"a#b {} c",
        100,
        Until::End {
            is_special: &is_special,
        },
    );
    assert_eq!(String::from_utf8(out.bytes).unwrap(), "ab {} c");
    assert_eq!(out.tokens.len(), 8, "the special token is still a token");
    assert_eq!(out.stop, Stop::Eos);
    assert_eq!(calls.len(), 1 + 8);
}

#[test]
fn free_decoding_ends_at_the_budget_without_a_wasted_pass() {
    let (out, calls) = free_along(b"[1, 2, 3]", 4, Until::FirstValue);
    assert_eq!(String::from_utf8(out.bytes).unwrap(), "[1, ");
    assert_eq!(out.stop, Stop::Budget);
    assert_eq!(calls.len(), 1 + 3);
}

#[test]
fn a_chat_answer_does_not_end_before_its_first_byte() {
    // The model's best first token is EOS, then a control token, then "H"; after "H",
    // EOS. An empty reply is no answer: EOS and the control token wait for a byte.
    let is_special = |t: u32| t == u32::from(b'#');
    let mut model = ScriptedModel::new(|h| {
        if h.len() == PROMPT.len() {
            prefer(&[EOS, b'#' as u32, b'H' as u32])
        } else {
            prefer(&[EOS])
        }
    });
    let prompt: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    let logits = model.forward(&prompt, 0).unwrap();
    let mut sampler = Sampler::new(Sampling::Greedy, 0);
    let out = decode_free(
        &mut model,
        &ByteCodec::new(),
        &mut sampler,
        logits,
        prompt.len(),
        &DecodeOptions::default(),
        Until::End {
            is_special: &is_special,
        },
    )
    .unwrap();
    assert_eq!(String::from_utf8(out.bytes).unwrap(), "H");
    assert_eq!(out.stop, Stop::Eos);
    // Free decoding for JSON (the baseline) still takes the model's EOS as it comes.
    let (out, _) = free_along(b"", 10, Until::FirstValue);
    assert!(out.bytes.is_empty());
    assert_eq!(out.stop, Stop::Eos);
}

#[test]
fn a_tool_turn_does_not_end_before_it_says_anything() {
    // EOS first at the start of a turn that may call or answer: the answer is the
    // model's next best text, not an empty turn.
    assert_eq!(tool_turn_run(&[EOS, b'H' as u32], false), "H");
    assert_eq!(
        tool_turn_run(&[EOS, b'<' as u32], false),
        "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"P\"}}\n</tool_call>"
    );
}

/// A tool turn (one tool `get(city)`, calls or text) decoded with `first` the model's
/// preference at the start, and the opener redirect on or off.
fn tool_turn_run(first: &[u32], redirect: bool) -> String {
    tool_turn_run_after(first, b'{', redirect)
}

/// [`tool_turn_run`] where, after a backtick, the model's next best byte is
/// `after_fence` (what the redirect peeks at for a code fence).
fn tool_turn_run_after(first: &[u32], after_fence: u8, redirect: bool) -> String {
    tool_turn_biased(first, after_fence, redirect, (0.0, 0.0))
}

/// [`tool_turn_run_after`] with the redirect's call biases `(open, more)`; after a
/// call the model prefers EOS by 1 nat over one more call.
fn tool_turn_biased(first: &[u32], after_fence: u8, redirect: bool, bias: (f32, f32)) -> String {
    use formwork::engine::decode::Redirect;
    use formwork_grammar::tools::{FinalAnswer, ToolSpec, ToolTurn, LINE_FORBIDDEN_START};
    let codec = ByteCodec::new();
    let params = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": false});
    let tool = ToolSpec {
        name: "get".into(),
        parameters: compile(&params, &Config::default()).unwrap(),
    };
    let turn = ToolTurn::new(vec![tool], FinalAnswer::Text, 0, 4).unwrap();
    let mut matcher = Matcher::new(Grammar::new(Arc::new(turn)), codec.trie());
    let first = first.to_vec();
    let mut model = ScriptedModel::new(move |h| {
        let out: Vec<u8> = h[PROMPT.len()..].iter().map(|&t| t as u8).collect();
        if out.is_empty() {
            prefer(&first)
        } else if out == b"`" {
            prefer(&[after_fence as u32])
        } else if out.ends_with(b"\"city\":\"") {
            prefer(&[b'P' as u32])
        } else if out.ends_with(b"P") {
            prefer(&[b'"' as u32])
        } else if out.ends_with(b"</tool_call>") {
            prefer(&[EOS, b'\n' as u32])
        } else if out.ends_with(b"</tool_call>\n") {
            prefer(&[b'<' as u32])
        } else {
            prefer(&[EOS, b'}' as u32])
        }
    });
    let prompt: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    let logits = model.forward(&prompt, 0).unwrap();
    let mut boxed: Box<dyn LanguageModel> = Box::new(model.clone());
    let opts = DecodeOptions {
        max_tokens: 200,
        redirect: redirect.then(|| {
            let mut r = Redirect::new(&codec, LINE_FORBIDDEN_START, codec.id("<"));
            (r.open_bias, r.more_bias) = bias;
            Arc::new(r)
        }),
        ..Default::default()
    };
    let mut sampler = Sampler::new(Sampling::Greedy, 0);
    let out = decode_masked(
        &mut boxed,
        &codec,
        &mut matcher,
        &mut sampler,
        logits,
        prompt.len(),
        &opts,
    )
    .unwrap();
    assert!(matcher.is_accepting());
    String::from_utf8(out.bytes).unwrap()
}

#[test]
fn the_call_biases_move_call_or_answer_and_one_more_call_by_their_margin() {
    let call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"P\"}}\n</tool_call>";
    // "<" (a call) leads "H" (text) by 1 nat at the start.
    let first = [b'<' as u32, b'H' as u32];
    assert_eq!(tool_turn_biased(&first, b'{', true, (0.0, 0.0)), call);
    assert_eq!(tool_turn_biased(&first, b'{', true, (-0.5, 0.0)), call);
    assert_eq!(tool_turn_biased(&first, b'{', true, (-1.5, 0.0)), "H");
    // A call-like start the redirect would take ("{") is weighed the same way.
    let first = [b'{' as u32, b'H' as u32];
    assert_eq!(tool_turn_biased(&first, b'{', true, (0.0, 0.0)), call);
    assert_eq!(tool_turn_biased(&first, b'{', true, (-1.5, 0.0)), "H");
    // After a call, EOS leads one more call by 1 nat.
    let first = [b'<' as u32];
    assert_eq!(tool_turn_biased(&first, b'{', true, (0.0, 0.5)), call);
    assert_eq!(
        tool_turn_biased(&first, b'{', true, (0.0, 1.5)),
        format!("{call}\n{call}")
    );
}

#[test]
fn a_call_the_model_starts_its_own_way_becomes_a_real_one() {
    let call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"P\"}}\n</tool_call>";
    // The model's best start is a code fence (refused): with the redirect it is a call,
    // the opener and the name forced, the city the model's.
    for start in [b'`', b'{', b'['] {
        assert_eq!(tool_turn_run(&[start as u32, b'H' as u32], true), call);
        // Without it, the model's next best allowed token: text.
        assert_eq!(tool_turn_run(&[start as u32, b'H' as u32], false), "H");
    }
    // A model that means text keeps its text.
    assert_eq!(tool_turn_run(&[b'H' as u32, b'`' as u32], true), "H");
    // A fence is asked one token further: code (```python) is text, not a call.
    assert_eq!(
        tool_turn_run_after(&[b'`' as u32, b'H' as u32], b'p', true),
        "H"
    );
    assert_eq!(
        tool_turn_run_after(&[b'`' as u32, b'H' as u32], b'{', true),
        call
    );
}

/// A tool turn `get(city)` (`city` nullable when `nullable`) where the model writes
/// the city "X", then, as second choices, "Paris" a byte at a time; the conversation
/// says "weather in Paris". `grounded`: with every free-text argument grounded.
fn grounded_call(grounded: bool, nullable: bool) -> (String, DecodeOutput) {
    use formwork::engine::ground::ArgGrounding;
    use formwork_grammar::tools::{FinalAnswer, ToolSpec, ToolTurn};
    let codec = ByteCodec::new();
    let city = if nullable {
        json!({"type": ["string", "null"]})
    } else {
        json!({"type": "string"})
    };
    let params = json!({"type": "object", "properties": {"city": city},
                        "required": ["city"], "additionalProperties": false});
    let tool = ToolSpec {
        name: "get".into(),
        parameters: compile(&params, &Config::default()).unwrap(),
    };
    let turn = ToolTurn::new(vec![tool], FinalAnswer::Text, 1, 1).unwrap();
    let mut matcher = Matcher::new(Grammar::new(Arc::new(turn)), codec.trie());
    let mut model = ScriptedModel::new(move |h| {
        let out: Vec<u8> = h[PROMPT.len()..].iter().map(|&t| t as u8).collect();
        let next = |b: u8| prefer(&[b as u32]);
        if out.ends_with(b"\"city\":") {
            prefer(&[b'"' as u32, b'n' as u32])
        } else if out.ends_with(b"\"city\":\"") {
            prefer(&[b'X' as u32, b'P' as u32])
        } else if out.ends_with(b"\"X") {
            next(b'"')
        } else if let Some(p) = ["P", "Pa", "Par", "Pari"]
            .iter()
            .position(|p| out.ends_with(format!("\"{p}").as_bytes()))
        {
            next(b"aris"[p])
        } else if out.ends_with(b"Paris") {
            next(b'"')
        } else {
            prefer(&[EOS, b'}' as u32])
        }
    });
    let prompt: Vec<u32> = PROMPT.iter().map(|&b| b as u32).collect();
    let logits = model.forward(&prompt, 0).unwrap();
    let mut boxed: Box<dyn LanguageModel> = Box::new(model.clone());
    let opts = DecodeOptions {
        max_tokens: 200,
        arg_grounding: ArgGrounding::new([("get", &params)], None, grounded, "weather in Paris")
            .map(Arc::new),
        ..Default::default()
    };
    let mut sampler = Sampler::new(Sampling::Greedy, 0);
    let out = decode_masked(
        &mut boxed,
        &codec,
        &mut matcher,
        &mut sampler,
        logits,
        prompt.len(),
        &opts,
    )
    .unwrap();
    assert!(matcher.is_accepting());
    (String::from_utf8(out.bytes.clone()).unwrap(), out)
}

#[test]
fn a_grounded_argument_the_conversation_does_not_state_is_written_again_as_a_quotation() {
    let call = |city: &str| {
        format!(
            "<tool_call>\n{{\"name\": \"get\", \"arguments\": {{\"city\":{city}}}}}\n</tool_call>"
        )
    };
    let (text, out) = grounded_call(false, false);
    assert_eq!(text, call("\"X\""));
    assert_eq!(out.stats.args_quoted, 0);
    // Grounded: "X" is not in the conversation; the string is written again from its
    // first byte, each byte the best that keeps it a piece of the conversation.
    let (text, out) = grounded_call(true, false);
    assert_eq!(text, call("\"Paris\""));
    assert_eq!((out.stats.args_quoted, out.stats.args_kept), (1, 0));
    // A nullable argument becomes null instead.
    let (text, out) = grounded_call(true, true);
    assert_eq!(text, call("null"));
    assert_eq!(out.stats.grounded_nulls, 1);
}

/// A nullable string `a`: at `{"a":` the model gives `n` and `"` the weights
/// `(null, quote)`; inside the string it goes on with the next byte of "paris" (then
/// the closing quote) at weight `cont`, and `z` at `1 - cont`; elsewhere it has no
/// preference.
fn paris_model(null: f64, quote: f64, cont: f64) -> ScriptedModel {
    let bytes = ByteCodec::new().bytes;
    ScriptedModel::new(move |h: &[u32]| {
        let text = output_text(&bytes, h);
        if text == r#"{"a":"# {
            return only(257, &[(b'n' as u32, null.ln()), (b'"' as u32, quote.ln())]);
        }
        match text.strip_prefix(r#"{"a":""#) {
            Some(s) if "paris".starts_with(s) => {
                let next = "paris\"".as_bytes()[s.len()];
                only(
                    257,
                    &[(next as u32, cont.ln()), (b'z' as u32, (1.0 - cont).ln())],
                )
            }
            _ => vec![0.0; 257],
        }
    })
}

fn weighed_rule() -> Rule {
    Rule {
        tokens: Combine::Product,
        null: NullRule::Weighed,
    }
}

fn weighed_run(
    m: ScriptedModel,
    doc: Option<&str>,
    lookahead: bool,
    fill_above: Option<f64>,
) -> (String, DecodeOutput, Vec<u32>, f64) {
    // `b` after it, so that the loop feeds the model after the weighing (the scripted
    // model asserts every position: a cache not truncated back fails there).
    let schema = json!({"type": "object", "properties": {
        "a": {"type": ["string", "null"], "maxLength": 8}, "b": {"type": "boolean"}},
        "required": ["a", "b"], "additionalProperties": false});
    let opts = DecodeOptions {
        max_tokens: 64,
        confidence: true,
        weigh_nulls: true,
        null_lookahead: lookahead,
        fill_above,
        grounding: doc
            .and_then(|d| Grounding::new(&schema, Some(GroundMode::Stated), d))
            .map(Arc::new),
        ..Default::default()
    };
    let mut m = m;
    let last = m.last_history.clone();
    let (text, out) = run_with(
        &schema,
        &mut m,
        &ByteCodec::new(),
        Sampling::Greedy,
        0,
        &opts,
    );
    let c = confidence::confidence(text.as_bytes(), &out.probs, weighed_rule()).unwrap();
    let last = last.lock().unwrap().clone();
    (text, out, last, c["/a"])
}

#[test]
fn a_null_is_weighed_against_the_best_whole_value_the_document_offers() {
    // `null` 0.9 against `"` 0.1: the null is written. Written as a string, the value
    // would be "paris" at 0.8 a byte (the closing quote too): 0.8^6 given a value.
    let (text, out, last, c) = weighed_run(
        paris_model(0.9, 0.1, 0.8),
        Some("a table in Paris"),
        false,
        None,
    );
    assert_eq!(text, r#"{"a":null,"b":false}"#);
    assert_eq!(out.stats.nulls_weighed, 1);
    assert_eq!(out.stats.weigh_forward_passes, 6, "the quote and p-a-r-i-s");
    let whole = 0.8f64.powi(6);
    close(out.probs.odds[0].whole.unwrap(), whole);
    close(c, 0.9 / (0.9 + whole));
    // The default rule is the weighed one; the odds rule keeps the best start.
    assert_eq!(Rule::DEFAULT, weighed_rule());
    let odds = Rule {
        null: NullRule::Odds,
        ..Rule::DEFAULT
    };
    let d = confidence::confidence(text.as_bytes(), &out.probs, odds).unwrap();
    close(d["/a"], 0.9);
    // The model's cache was truncated back: it was fed exactly the final output.
    // `false}`: the last feed, never read.
    fed_all_but(6, &out, &last);
    // A document that does not state "paris": the best quotation is a word the model
    // gives nothing, given up at its first letter; the null keeps the odds against
    // the best start.
    let (text, out, last, c) = weighed_run(
        paris_model(0.9, 0.1, 0.8),
        Some("nothing here"),
        false,
        None,
    );
    assert_eq!(text, r#"{"a":null,"b":false}"#);
    assert_eq!(out.stats.nulls_weighed, 1);
    assert_eq!(out.stats.weigh_forward_passes, 1, "the quote only");
    assert_eq!(out.probs.odds[0].whole, None);
    close(c, 0.9);
    fed_all_but(6, &out, &last);
    // Without grounding, nothing is weighed.
    let (_, out, _, _) = weighed_run(paris_model(0.9, 0.1, 0.8), None, false, None);
    assert_eq!(out.stats.nulls_weighed, 0);
}

#[test]
fn the_null_lookahead_writes_the_weighed_value_when_it_weighs_more_than_the_null() {
    // `null` 0.6 against `"` 0.4; "paris" at 0.99 a byte: 0.94 > 0.6.
    let (text, out, last, _) = weighed_run(
        paris_model(0.6, 0.4, 0.99),
        Some("a table in Paris"),
        true,
        None,
    );
    assert_eq!(text, r#"{"a":"paris","b":false}"#);
    assert_eq!(out.stats.weighed_values_taken, 1);
    fed_all_but(6, &out, &last);
    // Its confidence is its probability given a value: `"` is the only start that is
    // not `null`, so 1, then 0.99 a byte.
    let d = confidence::confidence(text.as_bytes(), &out.probs, Rule::DEFAULT).unwrap();
    close(d["/a"], 0.99f64.powi(6));
    // Without the lookahead the null stays; at 0.8 a byte (0.26 < 0.6) it stays too.
    let (text, _, _, _) = weighed_run(
        paris_model(0.6, 0.4, 0.99),
        Some("a table in Paris"),
        false,
        None,
    );
    assert_eq!(text, r#"{"a":null,"b":false}"#);
    let (text, out, _, _) = weighed_run(
        paris_model(0.6, 0.4, 0.8),
        Some("a table in Paris"),
        true,
        None,
    );
    assert_eq!(text, r#"{"a":null,"b":false}"#);
    assert_eq!(out.stats.weighed_values_taken, 0);
}

#[test]
fn a_weighed_value_above_the_fill_bar_is_written_instead_of_the_null() {
    // `null` 0.9 against `"` 0.1; "paris" at 0.99 a byte: 0.94 given a value.
    let doc = Some("a table in Paris");
    let (text, out, last, _) = weighed_run(paris_model(0.9, 0.1, 0.99), doc, false, Some(0.7));
    assert_eq!(text, r#"{"a":"paris","b":false}"#);
    assert_eq!(out.stats.weighed_values_taken, 1);
    fed_all_but(6, &out, &last);
    // Below the bar (0.8 a byte: 0.26), and with no bar, the null stays.
    let (text, _, _, _) = weighed_run(paris_model(0.9, 0.1, 0.8), doc, false, Some(0.7));
    assert_eq!(text, r#"{"a":null,"b":false}"#);
    let (text, _, _, _) = weighed_run(paris_model(0.9, 0.1, 0.99), doc, false, None);
    assert_eq!(text, r#"{"a":null,"b":false}"#);
}
