//! The extraction engine: one document and one schema in, one validated value out.
//!
//! ```text
//! schema JSON ──compile──▶ Arc<Grammar> (shared, masks cached across documents)
//!      │                        │
//!      └──▶ Validator           ▼
//! document ─▶ prompt ─▶ tokens ─▶ prefill (shared prefix reused) ─▶ masked decode
//!                                                    ─▶ text ─▶ Validator ─▶ Extraction
//! ```
//!
//! Masked mode cannot produce text the grammar refuses; the validator checks it
//! again anyway (defence in depth, and the semantic rules live there). Free mode
//! is the baseline: generate, extract the first JSON value, validate, and retry
//! with the exact errors quoted, up to `retries` times.

pub mod chat;
pub mod confidence;
pub mod dates;
pub mod decode;
pub mod ground;
pub mod pointer;
pub mod prefix;
pub mod prompt;
pub mod repeats;
pub mod schema_hash;
pub mod source;
pub mod think;
pub mod tools;
pub mod workers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use formwork_grammar::compile::{compile, Automaton, CompileError, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::TokTrie;
use formwork_models::runtime::LoadedModel;
use serde::Serialize;
use serde_json::Value;

use crate::sampling::{Sampler, Sampling};
use crate::validate::{render_pydantic, LineError, Validator, Verdict};
use decode::{decode_free, decode_masked, DecodeOptions, DecodeOutput, Stop};
pub use schema_hash::schema_sha256;

/// Masked (the default) or free decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Masked,
    Free,
}

/// The outcome class of one extraction. The three failure kinds stay apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    Valid,
    SchemaInvalid,
    SemanticInvalid,
    NotJson,
    /// The token budget or the time limit ended the run first: no value is given.
    Incomplete,
    Error,
}

impl VerdictKind {
    /// 0 valid, 1 produced but invalid (or incomplete), 2 error.
    pub fn exit_code(self) -> u8 {
        match self {
            VerdictKind::Valid => 0,
            VerdictKind::Error => 2,
            _ => 1,
        }
    }
}

/// A schema ready for extraction: hashed, validated, and (for masked mode) compiled.
#[derive(Clone)]
pub struct Schema {
    pub value: Value,
    pub sha256: String,
    /// Shared by the clones that batch workers take (`Send + Sync`).
    pub validator: Arc<Validator>,
    grammar: Option<Arc<Grammar>>,
    /// With `x-formwork-source` strings: the compiled automaton, from which each
    /// document gets its own grammar ([`Schema::grammar_for`]).
    automaton: Option<Arc<Automaton>>,
    config: Config,
}

impl Schema {
    /// Build the validator; the grammar is compiled on first masked use.
    pub fn new(value: Value) -> anyhow::Result<Schema> {
        let validator = Validator::new(&value)?;
        let sha256 = schema_sha256(&value);
        Ok(Schema {
            value,
            sha256,
            validator: Arc::new(validator),
            grammar: None,
            automaton: None,
            config: Config::default(),
        })
    }

    pub fn with_config(mut self, config: Config) -> Self {
        self.config = config;
        self.grammar = None;
        self.automaton = None;
        self
    }

    /// The compiled grammar (compiled once, then shared).
    pub fn grammar(&mut self) -> Result<Arc<Grammar>, CompileError> {
        if let Some(g) = &self.grammar {
            return Ok(g.clone());
        }
        let a = compile(&self.value, &self.config)?;
        if a.uses_source() {
            self.automaton = Some(a.clone());
        }
        let g = Grammar::new(a);
        self.grammar = Some(g.clone());
        Ok(g)
    }

    /// The grammar for one document: the shared one, unless the schema marks strings
    /// with `x-formwork-source`; then a grammar of its own, whose strings take only spans
    /// of `document` (its caches live and die with it, the shared ones never see it).
    pub fn grammar_for(&mut self, document: &str) -> Result<Arc<Grammar>, CompileError> {
        let shared = self.grammar()?;
        match &self.automaton {
            Some(a) => Ok(Grammar::new(a.with_source(document)?)),
            None => Ok(shared),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ExtractOptions {
    pub mode: Mode,
    pub max_tokens: usize,
    pub retries: usize,
    pub sampling: Sampling,
    pub seed: u64,
    pub instructions: Option<String>,
    pub timeout: Option<Duration>,
    pub jump_forward: bool,
    /// With jump-forward, tokenise a sampled token together with the forced bytes
    /// after it (on by default; off only to measure the split it fixes).
    pub heal_forced: bool,
    /// Greedy masked decoding: at a nullable field, weigh `null` against the best
    /// value branch before committing (see `decode::decode_masked`). Off by default.
    pub null_lookahead: bool,
    /// Masked modes: added to the logits of `null` where a nullable field's `null`
    /// competes with a value, in nats (see `decode::DecodeOptions::null_bias`).
    pub null_bias: f32,
    /// Masked modes, with grounding: a `null` the model picks for a grounded text
    /// field is weighed against the best whole value the document offers (a
    /// quotation decoded on the model and taken back; `decode::DecodeOptions::weigh_nulls`),
    /// for its confidence, and with `null_lookahead` the value is taken when it weighs
    /// more. On by default.
    pub weigh_nulls: bool,
    /// Greedy, with `weigh_nulls`: the weighed value is written instead of the `null`
    /// when its probability given a value is above this (1: never;
    /// `decode::DecodeOptions::fill_above`). [`DEFAULT_FILL_ABOVE`] by default.
    pub fill_above: f64,
    /// Ground every nullable string of the schema ([`ground`]): a value the document
    /// does not state (or, `distinct`, that an earlier grounded field already took)
    /// becomes `null`. Fields marked `x-formwork-grounded` are grounded (`stated`)
    /// whatever this says.
    pub grounded: Option<ground::GroundMode>,
    /// JSON Pointers whose non-empty value marks a record for review.
    pub review_fields: Vec<String>,
    /// A value whose confidence ([`confidence`]) is below this marks the record for
    /// review (0: never).
    pub review_below: f64,
    /// How the schema is shown to the model (the mask enforces the JSON Schema either way).
    pub prompt: prompt::PromptStyle,
    /// Worked examples, rendered as prior user/assistant turns before the document.
    pub examples: Vec<prompt::Example>,
    /// Think first, at most this many thought tokens, then answer
    /// ([`decode::think`]); the thought's budget comes on top of `max_tokens`, which
    /// stays the answer's. `Some(0)` answers without thought (the template rendered
    /// with `enable_thinking: false`). `None` (the default): the model is not asked to
    /// think, and its template is rendered as it is. A budget above 0 on a model
    /// without think markers ([`think::ThinkMarkers`]) is a `verdict: error`. The
    /// answer alone is validated and scored: a JSON value inside the thought is never
    /// taken for it. In free mode every attempt thinks again (the template drops
    /// earlier thoughts from the history).
    pub think: Option<usize>,
}

impl Default for ExtractOptions {
    fn default() -> Self {
        Self {
            mode: Mode::Masked,
            max_tokens: 512,
            retries: 2,
            sampling: Sampling::Greedy,
            seed: 0,
            instructions: None,
            timeout: None,
            jump_forward: true,
            heal_forced: true,
            null_lookahead: false,
            null_bias: 0.0,
            weigh_nulls: true,
            fill_above: DEFAULT_FILL_ABOVE,
            grounded: None,
            review_fields: Vec::new(),
            review_below: DEFAULT_REVIEW_BELOW,
            prompt: prompt::PromptStyle::default(),
            examples: Vec::new(),
            think: None,
        }
    }
}

/// The default of [`ExtractOptions::review_below`] (`--review-below`).
pub const DEFAULT_REVIEW_BELOW: f64 = 0.5;

/// The default of [`ExtractOptions::fill_above`] (`--fill-above`), set on the SNIPS
/// train examples (each half's records with the other half's shots), never on the
/// public set: docs/extraction.md.
pub const DEFAULT_FILL_ABOVE: f64 = 0.8;

/// The result envelope of one extraction (what `--json` prints).
#[derive(Clone, Debug, Serialize)]
pub struct Extraction {
    pub value: Option<Value>,
    pub verdict: VerdictKind,
    pub errors: Vec<LineError>,
    /// A one-line message for `not_json`, `incomplete` and `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub attempts: usize,
    pub tokens_prompt: usize,
    pub tokens_generated: usize,
    pub tokens_forced: usize,
    pub forward_passes: usize,
    /// Forward passes spent by the null lookahead, both branches (counted in
    /// `forward_passes` too).
    pub lookahead_forward_passes: usize,
    /// Decision points where the null lookahead ran, and how many `null` won.
    pub lookaheads: usize,
    pub lookahead_null_wins: usize,
    /// `null`s weighed against the best whole value the document offers, the values
    /// taken instead (the null lookahead), and the forward passes spent (counted in
    /// `forward_passes` too).
    pub nulls_weighed: usize,
    pub weighed_values_taken: usize,
    pub weigh_forward_passes: usize,
    /// Grounded strings the document does not state, written `null` instead (masked:
    /// taken back while decoding; free: replaced in the parsed value).
    pub grounded_nulls: usize,
    /// With `--grounded`: rows of an array that repeated an earlier row and were
    /// dropped (masked: the array was closed before them while decoding; free: the
    /// parsed array was cut there).
    pub rows_dropped: usize,
    /// With `--grounded`: strings of a row that held several items ("2 pz SKU 44A,
    /// 2 pz SKU 44B"), cut to their first while decoding, so that the next row takes
    /// the next item (masked decoding only).
    pub items_cut: usize,
    /// Spans fed by jump-forward, and how many are not the tokenizer's own encoding
    /// of the output text at that place.
    pub forced_spans: usize,
    pub forced_spans_noncanonical: usize,
    /// The output's tokens differ from the tokenizer's encoding of the output text.
    pub noncanonical: bool,
    pub ms: u64,
    pub schema_sha256: String,
    pub model: String,
    pub mode: Mode,
    /// Each leaf value's confidence in [0, 1] by JSON Pointer, nulls included
    /// ([`confidence`]; rounded to 4 decimals). Empty when there is no value.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub confidence: BTreeMap<String, f64>,
    pub needs_review: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub review_reasons: Vec<String>,
    /// True when the budget steering shortened the output to stay valid.
    pub cut_short: bool,
    /// With [`ExtractOptions::think`]: the last attempt's thought, the think block's
    /// text without its markers. `text` is the answer after it, and `value` and
    /// `confidence` are read from the answer alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tokens of the think blocks, markers included, over all attempts (counted in
    /// `tokens_generated`, the thought's sampled tokens, and `tokens_forced`, the
    /// markers the engine fed, too).
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens_reasoning: usize,
    /// The engine closed the last attempt's think block because its budget ran out.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_cut: bool,
    /// The raw text the model produced on the last attempt (the answer, after any
    /// thought).
    pub text: String,
    #[serde(skip)]
    pub mask_ns: Vec<u64>,
    #[serde(skip)]
    pub decode_ms: f64,
    /// The tokens of the last attempt, and the ranges of them fed by jump-forward
    /// (for traces: `examples/trace_forced.rs`).
    #[serde(skip)]
    pub tokens: Vec<u32>,
    #[serde(skip)]
    pub forced_ranges: Vec<(usize, usize)>,
    /// The last attempt's choices between `null` and a value (masked modes), at byte
    /// offsets of `text`.
    #[serde(skip)]
    pub null_decisions: Vec<decode::NullDecision>,
    /// The last attempt's nulls weighed against a quotation, at byte offsets of `text`.
    #[serde(skip)]
    pub weighed: Vec<decode::WeighedNull>,
    /// The last attempt's token probabilities, at byte offsets of the value's text,
    /// which starts at byte `value_at` of `text` (for `formwork bench`'s comparison
    /// of confidence rules).
    #[serde(skip)]
    pub probs: confidence::Probs,
    #[serde(skip)]
    pub value_at: usize,
}

/// Where an answer starts after its thought: the logits, the position, and the
/// answer's decoding options.
type AnswerStart = (Vec<f32>, usize, DecodeOptions);

fn is_zero(n: &usize) -> bool {
    *n == 0
}

use prefix::{Cached as PrefixCache, PrefixStore};

/// How many prompt prefixes [`Engine`] keeps the KV state of. Two levels are in use
/// per record (the system message, and the system message with the record's worked
/// examples); a few more let records that pick the same examples share them.
const PREFIX_CACHE_ENTRIES: usize = 4;

/// A loaded model plus what extraction shares across documents.
pub struct Engine {
    loaded: LoadedModel,
    trie: Arc<TokTrie>,
    /// KV snapshots of prompt prefixes, shared by the engines [`Engine::share`] makes
    /// (a batch's workers, a server's threads): a prefix one of them computed, or is
    /// computing, the others reuse ([`prefix`]).
    prefix: Arc<PrefixStore>,
    /// Reuse the KV state of the prompt prefix shared by consecutive records.
    pub reuse_prefix: bool,
    /// Tokens fed from a reused prefix (for measuring the saving).
    pub prefix_tokens_reused: usize,
    /// The tool turns' redirect of call-like tokens, built on first use.
    redirect: Option<Arc<decode::Redirect>>,
}

/// The token trie of a tokenizer's vocabulary: raw bytes, control tokens, EOS ids.
pub fn trie_of(tok: &formwork_models::tokenizer::GgufTokenizer) -> Arc<TokTrie> {
    let bytes = tok.token_bytes().to_vec();
    let special: Vec<bool> = (0..bytes.len() as u32).map(|i| tok.is_special(i)).collect();
    Arc::new(TokTrie::new(bytes, &special, tok.eos_ids()))
}

impl Engine {
    pub fn new(loaded: LoadedModel) -> Engine {
        let trie = trie_of(&loaded.tokenizer);
        Engine {
            loaded,
            trie,
            prefix: Arc::default(),
            reuse_prefix: true,
            prefix_tokens_reused: 0,
            redirect: None,
        }
    }

    pub fn model(&self) -> &LoadedModel {
        &self.loaded
    }

    pub fn trie(&self) -> &Arc<TokTrie> {
        &self.trie
    }

    /// Does this model render a chat template (false: raw prompt)?
    pub fn has_chat_template(&self) -> bool {
        self.loaded.tokenizer.chat_template().is_some()
    }

    /// Extract one document. Errors of the model runtime become `verdict: error`.
    ///
    /// ```no_run
    /// use formwork::engine::{Engine, ExtractOptions, Mode, Schema, VerdictKind};
    /// let mut engine = Engine::new(formwork::load_model("smollm2-135m", "auto".parse().unwrap())?);
    /// let mut schema = Schema::new(serde_json::from_str(
    ///     r#"{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}"#,
    /// )?)?;
    /// // Masked (the default): valid by construction, or `incomplete` when the budget
    /// // cannot hold any valid value. Never a partial object passed off as complete.
    /// let ex = engine.extract(&mut schema, "Please send 3 boxes.", &ExtractOptions::default());
    /// if ex.verdict == VerdictKind::Valid {
    ///     println!("{}", ex.value.as_ref().unwrap());
    /// }
    /// // Free decoding, the baseline: retried with the validator's errors quoted.
    /// let free = ExtractOptions { mode: Mode::Free, retries: 2, ..Default::default() };
    /// let ex = engine.extract(&mut schema, "Please send 3 boxes.", &free);
    /// println!("{:?} after {} attempts: {}", ex.verdict, ex.attempts, serde_json::to_string(&ex)?);
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn extract(
        &mut self,
        schema: &mut Schema,
        document: &str,
        opts: &ExtractOptions,
    ) -> Extraction {
        let started = Instant::now();
        let mut ex = Extraction {
            value: None,
            verdict: VerdictKind::Error,
            errors: Vec::new(),
            message: None,
            attempts: 0,
            tokens_prompt: 0,
            tokens_generated: 0,
            tokens_forced: 0,
            forward_passes: 0,
            lookahead_forward_passes: 0,
            lookaheads: 0,
            lookahead_null_wins: 0,
            nulls_weighed: 0,
            weighed_values_taken: 0,
            weigh_forward_passes: 0,
            grounded_nulls: 0,
            rows_dropped: 0,
            items_cut: 0,
            forced_spans: 0,
            forced_spans_noncanonical: 0,
            noncanonical: false,
            ms: 0,
            schema_sha256: schema.sha256.clone(),
            model: self.loaded.name.clone(),
            mode: opts.mode,
            confidence: BTreeMap::new(),
            needs_review: false,
            review_reasons: Vec::new(),
            cut_short: false,
            reasoning: None,
            tokens_reasoning: 0,
            reasoning_cut: false,
            text: String::new(),
            mask_ns: Vec::new(),
            decode_ms: 0.0,
            tokens: Vec::new(),
            forced_ranges: Vec::new(),
            null_decisions: Vec::new(),
            weighed: Vec::new(),
            probs: confidence::Probs::default(),
            value_at: 0,
        };
        let result = match opts.mode {
            Mode::Masked => self.extract_masked(schema, document, opts, &mut ex),
            Mode::Free => self.extract_free(schema, document, opts, &mut ex),
        };
        if let Err(e) = result {
            ex.verdict = VerdictKind::Error;
            ex.message = Some(format!("{e:#}"));
            ex.value = None;
        }
        if let Some(v) = &ex.value {
            ex.review_reasons =
                review_reasons(v, &ex.confidence, opts.review_below, &opts.review_fields);
            ex.needs_review = !ex.review_reasons.is_empty();
        }
        ex.ms = started.elapsed().as_millis() as u64;
        ex
    }

    fn prompt_tokens(
        &self,
        messages: &[formwork_models::chat::ChatMessage],
    ) -> anyhow::Result<Vec<u32>> {
        self.prompt_tokens_thinking(messages, None)
    }

    /// [`Self::prompt_tokens`] with the template's `enable_thinking` set.
    fn prompt_tokens_thinking(
        &self,
        messages: &[formwork_models::chat::ChatMessage],
        thinking: Option<bool>,
    ) -> anyhow::Result<Vec<u32>> {
        let tok = &self.loaded.tokenizer;
        let (mut ids, _raw) = prompt::encode_thinking(tok, messages, thinking)?;
        if tok.add_bos() {
            if let Some(bos) = tok.bos_id() {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        Ok(ids)
    }

    /// The prefix lengths of `ids` worth a KV snapshot, ascending: what every document
    /// of this schema shares whatever its examples (the system message and the start of
    /// the first user turn), then what it shares with these examples. Each is the
    /// longest common prefix with the same prompt for two dummy documents.
    fn shared_prefix_cuts(
        &self,
        system: &str,
        examples: &[prompt::Example],
        ids: &[u32],
        thinking: Option<bool>,
    ) -> anyhow::Result<Vec<usize>> {
        let lcp = |examples: &[prompt::Example]| -> anyhow::Result<usize> {
            let mut k = ids.len();
            for dummy in ["A", "Z z"] {
                let other = self.prompt_tokens_thinking(
                    &prompt::conversation(system, examples, dummy),
                    thinking,
                )?;
                k = k.min(ids.iter().zip(&other).take_while(|(a, b)| a == b).count());
            }
            Ok(k)
        };
        let mut cuts = Vec::with_capacity(2);
        if !examples.is_empty() {
            cuts.push(lcp(&[])?);
        }
        cuts.push(lcp(examples)?);
        cuts.dedup();
        Ok(cuts)
    }

    /// Feed the prompt; returns the logits after its last token. Starts from the
    /// longest cached prefix of `ids`, and snapshots the KV state at each of `cuts`
    /// (ascending prefix lengths) that it passes, for the next records.
    fn prefill(&mut self, ids: &[u32], cuts: &[usize]) -> anyhow::Result<Vec<f32>> {
        self.prefill_until(ids, cuts, &|| true)?
            .ok_or_else(|| anyhow::anyhow!("the prefill stopped"))
    }

    /// [`Engine::prefill`] in chunks of [`prefix::PREFILL_CHUNK`] tokens, asking `go`
    /// before each: None when it said stop (a server's deadline, or its client gone).
    fn prefill_until(
        &mut self,
        ids: &[u32],
        cuts: &[usize],
        go: &dyn Fn() -> bool,
    ) -> anyhow::Result<Option<Vec<f32>>> {
        anyhow::ensure!(!ids.is_empty(), "empty prompt");
        if !self.reuse_prefix {
            self.loaded.model.clear_kv_cache();
            let model = self.loaded.model.as_mut();
            return Ok(prefix::forward_chunked(
                model,
                ids,
                0,
                prefix::PREFILL_CHUNK,
                go,
            )?);
        }
        // A few entries per engine that shares the store.
        let room = PREFIX_CACHE_ENTRIES * Arc::strong_count(&self.prefix);
        let (logits, reused) = self
            .prefix
            .prefill(&mut self.loaded.model, ids, cuts, room, go)?;
        self.prefix_tokens_reused += reused;
        Ok(logits)
    }

    /// What the prompt-prefix store shared by this engine's shares has done.
    pub fn prefix_stats(&self) -> prefix::PrefixStats {
        self.prefix.stats()
    }

    /// Prefills the first attempt's prompt `ids` (made with `system` and the
    /// examples of `opts`, the template rendered with `thinking`), snapshotting the
    /// prefixes the schema's other documents share.
    fn prefill_prompt(
        &mut self,
        system: &str,
        opts: &ExtractOptions,
        ids: &[u32],
        thinking: Option<bool>,
    ) -> anyhow::Result<Vec<f32>> {
        let cuts = self.shared_prefix_cuts(system, &opts.examples, ids, thinking)?;
        self.prefill(ids, &cuts)
    }

    /// An attempt's prompt, thinking as `opts.think` asks ([`Engine::think_prompt`]).
    fn extraction_prompt(
        &self,
        messages: &[formwork_models::chat::ChatMessage],
        opts: &ExtractOptions,
    ) -> anyhow::Result<think::TurnPrompt> {
        Ok(self.think_prompt(messages, opts.think)?)
    }

    /// The thought of one attempt, from the prompt's `logits` at `pos`, recorded in
    /// `ex`. The turn's budget is the answer's (`dopts.max_tokens`) plus the thought's
    /// and its markers, within the context. Gives where the answer starts, with
    /// `max_tokens` what the thought left (the answer's own budget at least, when the
    /// context holds it); or, when the run stopped inside the thought (the time limit),
    /// the empty answer with that stop.
    #[allow(clippy::too_many_arguments)]
    fn extraction_thought(
        &mut self,
        t: &think::ThinkTokens,
        sampler: &mut Sampler,
        logits: Vec<f32>,
        pos: usize,
        dopts: &DecodeOptions,
        min_answer: usize,
        ex: &mut Extraction,
    ) -> anyhow::Result<Result<AnswerStart, DecodeOutput>> {
        let turn = (dopts.max_tokens + t.budget + t.markers())
            .min(self.loaded.context_length.saturating_sub(pos));
        let topts = DecodeOptions {
            max_tokens: turn,
            ..dopts.clone()
        };
        let th = self.think_first(t, sampler, logits, pos, &topts, min_answer.max(1), None)?;
        ex.tokens_generated += th.out.stats.tokens_generated;
        ex.tokens_forced += th.out.stats.tokens_forced;
        ex.forward_passes += th.out.stats.forward_passes;
        ex.decode_ms += th.out.stats.decode_time.as_secs_f64() * 1000.0;
        ex.tokens_reasoning += th.out.tokens.len();
        ex.reasoning = Some(th.text.clone());
        ex.reasoning_cut = th.forced_close;
        if th.stopped() {
            let mut out = DecodeOutput::empty();
            out.stop = th.out.stop;
            return Ok(Err(out));
        }
        let answer = DecodeOptions {
            max_tokens: turn.saturating_sub(th.out.tokens.len()),
            ..dopts.clone()
        };
        Ok(Ok((th.logits, th.pos, answer)))
    }

    fn decode_options(&self, opts: &ExtractOptions, started: Instant) -> DecodeOptions {
        DecodeOptions {
            max_tokens: opts.max_tokens,
            jump_forward: opts.jump_forward,
            heal_forced: opts.heal_forced,
            null_lookahead: opts.null_lookahead,
            null_bias: opts.null_bias,
            weigh_nulls: opts.weigh_nulls,
            fill_above: (opts.fill_above < 1.0).then_some(opts.fill_above),
            deadline: opts.timeout.map(|t| started + t),
            confidence: true,
            ..DecodeOptions::default()
        }
    }

    /// Masked decoding from `logits` at `pos` under `grammar`; also whether the matcher
    /// ended in an accepting state (the value is complete).
    fn decode_under(
        &mut self,
        grammar: Arc<Grammar>,
        sampler: &mut Sampler,
        logits: Vec<f32>,
        pos: usize,
        dopts: &DecodeOptions,
    ) -> anyhow::Result<(DecodeOutput, bool)> {
        let mut matcher = Matcher::new(grammar, self.trie.clone());
        let out = decode_masked(
            &mut self.loaded.model,
            &*self.loaded.tokenizer,
            &mut matcher,
            sampler,
            logits,
            pos,
            dopts,
        )?;
        Ok((out, matcher.is_accepting()))
    }

    fn extract_masked(
        &mut self,
        schema: &mut Schema,
        document: &str,
        opts: &ExtractOptions,
        ex: &mut Extraction,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let grammar = schema.grammar_for(document)?;
        let (system, messages) = conversation(schema, document, opts);
        let turn = self.extraction_prompt(&messages, opts)?;
        let ids = &turn.ids;
        ex.tokens_prompt = ids.len();
        ex.attempts = 1;
        let logits = self.prefill_prompt(&system, opts, ids, turn.thinking)?;
        let mut sampler = Sampler::new(opts.sampling.clone(), opts.seed);
        let mut dopts = self.decode_options(opts, started);
        dopts.grounding =
            ground::Grounding::new(&schema.value, opts.grounded, document).map(Arc::new);
        // A thinking model: the thought first, then the answer under the grammar from
        // where the block ends.
        let (logits, pos, dopts) = match &turn.think {
            None => (logits, ids.len(), dopts),
            Some(t) => {
                let min = Matcher::new(grammar.clone(), self.trie.clone()).min_completion_tokens();
                match self.extraction_thought(
                    t,
                    &mut sampler,
                    logits,
                    ids.len(),
                    &dopts,
                    min,
                    ex,
                )? {
                    Ok(at) => at,
                    Err(stopped) => {
                        self.finish_attempt(schema, ex, &stopped, false, false);
                        return Ok(());
                    }
                }
            }
        };
        let (out, complete) = self.decode_under(grammar, &mut sampler, logits, pos, &dopts)?;
        self.finish_attempt(schema, ex, &out, complete, false);
        Ok(())
    }

    fn extract_free(
        &mut self,
        schema: &mut Schema,
        document: &str,
        opts: &ExtractOptions,
        ex: &mut Extraction,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let (system, mut messages) = conversation(schema, document, opts);
        let mut sampler = Sampler::new(opts.sampling.clone(), opts.seed);
        // The KV state right after the previous attempt's prompt: a retry's prompt
        // is that prompt plus the answer and the error message, so only those are fed.
        let mut previous: Option<PrefixCache> = None;
        for attempt in 1..=opts.retries + 1 {
            let turn = self.extraction_prompt(&messages, opts)?;
            let ids = turn.ids;
            ex.tokens_prompt += ids.len();
            ex.attempts = attempt;
            let logits = match previous.take() {
                Some(p)
                    if self.reuse_prefix
                        && ids.len() > p.tokens.len()
                        && ids.starts_with(&p.tokens) =>
                {
                    let n = p.tokens.len();
                    self.loaded.model = p.model;
                    self.prefix_tokens_reused += n;
                    self.loaded.model.forward(&ids[n..], n)?
                }
                _ => self.prefill_prompt(&system, opts, &ids, turn.thinking)?,
            };
            if self.reuse_prefix && attempt <= opts.retries {
                previous = Some(PrefixCache {
                    tokens: ids.clone(),
                    model: self.loaded.model.snapshot(),
                });
            }
            let dopts = self.decode_options(opts, started);
            // A thinking model thinks again on every attempt; the answer after the
            // block is decoded free, and only it is read for the value.
            let thought = match &turn.think {
                None => Ok((logits, ids.len(), dopts)),
                Some(t) => {
                    self.extraction_thought(t, &mut sampler, logits, ids.len(), &dopts, 1, ex)?
                }
            };
            let out = match thought {
                Ok((logits, pos, dopts)) => decode_free(
                    self.loaded.model.as_mut(),
                    &*self.loaded.tokenizer,
                    &mut sampler,
                    logits,
                    pos,
                    &dopts,
                    decode::Until::FirstValue,
                )?,
                Err(stopped) => stopped,
            };
            let timed_out = out.stop == Stop::Timeout;
            self.finish_attempt(schema, ex, &out, true, true);
            if ex.verdict == VerdictKind::Valid {
                ground_free(schema, document, opts.grounded, ex);
            }
            if ex.verdict == VerdictKind::Valid || timed_out || attempt > opts.retries {
                break;
            }
            let feedback = match ex.verdict {
                VerdictKind::NotJson | VerdictKind::Incomplete => format!(
                    "{}\nThe answer must be a single JSON object.",
                    ex.message.clone().unwrap_or_default()
                ),
                _ => render_pydantic(schema.validator.title(), &ex.errors),
            };
            messages.push(prompt::msg("assistant", ex.text.clone()));
            messages.push(prompt::msg("user", prompt::retry_message(&feedback)));
        }
        Ok(())
    }

    /// Validate the text of one attempt and record it in `ex`.
    fn finish_attempt(
        &self,
        schema: &Schema,
        ex: &mut Extraction,
        out: &DecodeOutput,
        complete: bool,
        tolerant: bool,
    ) {
        ex.tokens_generated += out.stats.tokens_generated;
        ex.tokens_forced += out.stats.tokens_forced;
        ex.forward_passes += out.stats.forward_passes + 1;
        ex.lookahead_forward_passes += out.stats.lookahead_forward_passes;
        ex.lookaheads += out.stats.lookaheads;
        ex.lookahead_null_wins += out.stats.lookahead_null_wins;
        ex.nulls_weighed += out.stats.nulls_weighed;
        ex.weighed_values_taken += out.stats.weighed_values_taken;
        ex.weigh_forward_passes += out.stats.weigh_forward_passes;
        ex.grounded_nulls += out.stats.grounded_nulls;
        ex.rows_dropped += out.stats.rows_dropped;
        ex.items_cut += out.stats.items_cut;
        ex.forced_spans += out.stats.forced_spans;
        ex.forced_spans_noncanonical += out.stats.forced_spans_noncanonical;
        ex.noncanonical = out.stats.noncanonical;
        ex.tokens = out.tokens.clone();
        ex.forced_ranges = out.forced_ranges.clone();
        ex.null_decisions = out.stats.null_decisions.clone();
        ex.weighed = out.stats.weighed.clone();
        ex.mask_ns.extend_from_slice(&out.stats.mask_ns);
        ex.decode_ms += out.stats.decode_time.as_secs_f64() * 1000.0;
        ex.cut_short = out.steered;
        ex.text = String::from_utf8_lossy(&out.bytes).into_owned();
        ex.errors.clear();
        ex.message = None;
        ex.value = None;
        ex.confidence.clear();
        ex.probs = confidence::Probs::default();
        ex.value_at = 0;
        if !complete || out.stop == Stop::Timeout {
            ex.verdict = VerdictKind::Incomplete;
            ex.message = Some(match out.stop {
                Stop::Timeout => {
                    "the time limit ended the run before the value was complete".into()
                }
                _ => format!(
                    "the token budget ({} tokens) ended the run before the value was complete",
                    out.tokens.len()
                ),
            });
            return;
        }
        let candidate = if tolerant {
            match crate::validate::extract_json(&ex.text) {
                Some(found) => found.value_text.to_string(),
                None => {
                    ex.verdict = if out.stop == Stop::Budget || out.stop == Stop::Timeout {
                        VerdictKind::Incomplete
                    } else {
                        VerdictKind::NotJson
                    };
                    ex.message = Some("no JSON object or array found in the model's answer".into());
                    return;
                }
            }
        } else {
            ex.text.clone()
        };
        if matches!(
            schema.validator.check(&candidate),
            Verdict::Valid(_) | Verdict::SemanticInvalid(_)
        ) {
            ex.value_at = ex.text.find(&candidate).unwrap_or(0);
            ex.probs = out.probs.shifted(ex.value_at);
            ex.confidence =
                confidence::confidence(candidate.as_bytes(), &ex.probs, confidence::Rule::DEFAULT)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, c)| (k, (c * 1e4).round() / 1e4))
                    .collect();
        }
        match schema.validator.check(&candidate) {
            Verdict::Valid(v) => {
                ex.verdict = VerdictKind::Valid;
                ex.value = Some(v);
            }
            Verdict::NotJson(e) => {
                ex.verdict = VerdictKind::NotJson;
                ex.message = Some(e.to_string());
            }
            Verdict::SchemaInvalid(errs) => {
                ex.verdict = VerdictKind::SchemaInvalid;
                ex.errors = errs;
            }
            Verdict::SemanticInvalid(errs) => {
                ex.verdict = VerdictKind::SemanticInvalid;
                ex.errors = errs;
            }
        }
    }
}

/// The messages of an extraction's first attempt, as `Engine::extract` renders them:
/// the system message, the examples as earlier turns, the document.
pub fn extraction_messages(
    schema: &Schema,
    document: &str,
    opts: &ExtractOptions,
) -> Vec<formwork_models::chat::ChatMessage> {
    conversation(schema, document, opts).1
}

/// An extraction's system message (the schema, the prompt style, the instructions)
/// and its conversation: the examples, then the document.
fn conversation(
    schema: &Schema,
    document: &str,
    opts: &ExtractOptions,
) -> (String, Vec<formwork_models::chat::ChatMessage>) {
    let system = prompt::system_message(&schema.value, opts.prompt, opts.instructions.as_deref());
    let messages = prompt::conversation(&system, &opts.examples, document);
    (system, messages)
}

/// Free decoding's grounding, after the fact: the grounded strings of a valid value
/// that the document does not state become `null`, when the value stays valid so
/// (it does unless `x-formwork-rules` object).
fn ground_free(
    schema: &Schema,
    document: &str,
    grounded: Option<ground::GroundMode>,
    ex: &mut Extraction,
) {
    let (Some(g), Some(v)) = (
        ground::Grounding::new(&schema.value, grounded, document),
        ex.value.as_ref(),
    ) else {
        return;
    };
    let mut nulled = v.clone();
    let (changed, dropped) = g.apply_all(&mut nulled);
    if changed.is_empty() && dropped.is_empty() {
        return;
    }
    if let Verdict::Valid(v) = schema.validator.check(&nulled.to_string()) {
        ex.value = Some(v);
        ex.grounded_nulls += changed.len();
        ex.rows_dropped += dropped.len();
        // The dropped rows' values are gone, and so is their confidence.
        ex.confidence.retain(|p, _| {
            !dropped
                .iter()
                .any(|d| p == d || p.starts_with(&format!("{d}/")))
        });
        // As in masked decoding: 1 minus the probability of the value taken back.
        for p in &changed {
            if let Some(c) = ex.confidence.get_mut(p) {
                *c = ((1.0 - *c) * 1e4).round() / 1e4;
            }
        }
    }
}

/// Why a valid value needs a human: every value whose confidence is below `below`
/// (least confident first), and every named field that is present and non-empty.
pub fn review_reasons(
    value: &Value,
    confidence: &BTreeMap<String, f64>,
    below: f64,
    review_fields: &[String],
) -> Vec<String> {
    let mut low: Vec<(&String, f64)> = (confidence.iter())
        .filter(|(_, &c)| c < below)
        .map(|(k, &c)| (k, c))
        .collect();
    low.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
    let mut out: Vec<String> = (low.into_iter())
        .map(|(k, c)| {
            format!(
                "{} has confidence {c:.2}, below {below}",
                if k.is_empty() { "/" } else { k }
            )
        })
        .collect();
    for f in review_fields {
        let non_empty = match value.pointer(f) {
            None | Some(Value::Null) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Bool(b)) => *b,
            Some(_) => true,
        };
        if non_empty {
            out.push(format!("{f} is not empty"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_names_the_values_below_the_threshold_least_confident_first() {
        let value = serde_json::json!({"a": null, "b": "x", "c": 3, "flag": ["y"]});
        let conf: BTreeMap<String, f64> = [("/a", 0.9), ("/b", 0.3), ("/c", 0.1), ("/flag/0", 0.7)]
            .into_iter()
            .map(|(k, c)| (k.to_string(), c))
            .collect();
        assert_eq!(
            review_reasons(&value, &conf, 0.5, &["/flag".to_string()]),
            vec![
                "/c has confidence 0.10, below 0.5",
                "/b has confidence 0.30, below 0.5",
                "/flag is not empty",
            ]
        );
        // A sure null is not a reason; a threshold of 0 flags nothing.
        assert!(review_reasons(&value, &conf, 0.0, &[]).is_empty());
    }
}
