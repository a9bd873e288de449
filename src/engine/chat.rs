//! Chat completion: a conversation and a constraint in, one checked answer out.
//!
//! ```text
//! messages ─▶ prompt::encode (the model's chat template) ─▶ prefill (shared prefix
//!     reused) ─▶ masked decode (Constraint::Schema) or plain sampling (Text)
//!     ─▶ text ─▶ Validator (every schema answer) ─▶ ChatAnswer
//! ```
//!
//! This is the entry point of `formwork serve`: the messages are the caller's, not
//! a prompt formwork writes around a document ([`Engine::extract`]). The only text
//! added is an optional schema hint in the system message
//! ([`ChatOptions::schema_hint`]); what the mask enforces is the grammar alone.
//! "Any JSON object" is a [`Constraint::Schema`] whose schema is
//! [`ANY_OBJECT_SCHEMA`], compiled like any other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_models::chat::ChatMessage;
use formwork_models::tokenizer::GgufTokenizer;
use serde_json::Value;

use super::decode::{
    decode_free, Codec, DecodeOptions, DecodeOutput, Redirect, Stop, Until, Watch,
};
use super::ground::ArgGrounding;
use super::repeats::Repeats;
use super::think::{PromptError, ThinkTokens};
use super::{Engine, VerdictKind};
use crate::sampling::{Sampler, Sampling};
use crate::validate::{LineError, Validator, Verdict};

/// The schema behind `response_format: {"type":"json_object"}`: any JSON object.
pub const ANY_OBJECT_SCHEMA: &str = r#"{"type":"object"}"#;

/// What the answer must be.
pub enum Constraint<'a> {
    /// A compiled grammar and the validator of the same schema: the mask enforces
    /// the grammar, the validator checks the finished text again.
    Schema {
        grammar: Arc<Grammar>,
        validator: &'a Validator,
    },
    /// Unconstrained text.
    Text,
    /// A turn with tools: calls, or the final answer (text, or the `response_format`
    /// schema), under one grammar ([`super::tools`]).
    Tools(&'a super::tools::Toolbox),
}

#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// Output tokens at most (EOS not counted).
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub seed: u64,
    /// Wall-clock limit from the call on; the answer is then `Stop::Timeout`.
    pub timeout: Option<Duration>,
    /// Sees the output as it grows, and may cancel the run.
    pub watch: Option<Watch>,
    /// Shown to the model in the system message (a compact outline of the schema).
    /// The mask enforces the grammar whether or not it is given.
    pub schema_hint: Option<Value>,
    /// Tool turns: the call biases ([`Redirect::open_bias`], [`Redirect::more_bias`]).
    pub call_bias: CallBias,
    /// Think first, at most this many thought tokens, then answer under the constraint
    /// ([`super::decode::think`]); `Some(0)` answers without thought (the template
    /// rendered with `enable_thinking: false`). `None`: the model is not asked to think,
    /// and its template is rendered as it is. A model without think markers
    /// ([`super::think::ThinkMarkers`]) refuses a budget above 0 (and takes `Some(0)` as
    /// `None`).
    pub think: Option<usize>,
    /// Sees the thought text as it grows (a server streams it), and may cancel the run.
    pub think_watch: Option<Watch>,
    /// Every free-text string of the tools' arguments and of the answer must be stated
    /// in the conversation ([`super::ground::args`]); strings marked
    /// `x-formwork-grounded` are judged either way.
    pub grounded: bool,
    /// The answer's schema under [`Constraint::Schema`] (for its grounded strings).
    pub answer_schema: Option<Value>,
}

/// How a tool turn leans, in nats, where a call competes with answering (`open`,
/// negative: answer) and where another call competes with the end of the turn (`more`,
/// positive: one more call). Zero leaves the model's choice alone.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallBias {
    pub open: f32,
    pub more: f32,
}

/// The calls and content of a turn with tools.
#[derive(Clone, Debug, Default)]
pub struct ToolAnswer {
    /// Name and arguments text of each call, in order.
    pub calls: Vec<(String, String)>,
    /// The answer when the turn made no call.
    pub content: Option<String>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            max_tokens: 512,
            sampling: Sampling::Greedy,
            seed: 0,
            timeout: None,
            watch: None,
            schema_hint: None,
            call_bias: CallBias::default(),
            think: None,
            think_watch: None,
            grounded: false,
            answer_schema: None,
        }
    }
}

/// One chat answer.
#[derive(Clone, Debug)]
pub struct ChatAnswer {
    /// The answer text (the JSON text under a schema).
    pub text: String,
    /// `valid`, `schema_invalid`, `semantic_invalid`, `not_json` or `incomplete`
    /// under a schema; `valid` for finished text and `incomplete` for cut text
    /// without one; `error` when the model runtime failed.
    pub verdict: VerdictKind,
    /// The validator's errors (`loc`, `msg`, `type`), empty when valid.
    pub errors: Vec<LineError>,
    /// The parsed value of a valid schema answer.
    pub value: Option<Value>,
    /// Why the run ended.
    pub stop: Stop,
    /// A one-line reason for `incomplete` and `error`.
    pub message: Option<String>,
    pub tokens_prompt: usize,
    /// Prompt tokens whose KV state came from the cached shared prefix.
    pub tokens_cached: usize,
    /// Output tokens (sampled and forced).
    pub tokens_completion: usize,
    pub tokens_forced: usize,
    /// Nanoseconds of each full mask computation.
    pub mask_ns: Vec<u64>,
    pub ms: u64,
    /// Under [`Constraint::Tools`]: what the turn did.
    pub tools: Option<ToolAnswer>,
    /// The thought of a thinking turn ([`ChatOptions::think`]), markers left out; the
    /// answer (`text`) is what follows the block.
    pub reasoning: Option<String>,
    /// Tokens of the think block, markers included (counted in `tokens_completion` too).
    pub tokens_reasoning: usize,
    /// The engine closed the think block because its budget ran out.
    pub reasoning_cut: bool,
}

/// Why a request cannot run at all (before any token): the caller's fault.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the prompt is {prompt} tokens and the shortest valid answer needs {min} more; the context length of this model is {context}")]
    ContextLength {
        prompt: usize,
        min: usize,
        context: usize,
    },
    #[error("the conversation has no message")]
    Empty,
    #[error("{0}")]
    Prompt(String),
    /// Thinking asked of a model that cannot (no think markers).
    #[error("{0}")]
    Think(String),
}

impl Engine {
    /// Answer a conversation under `constraint`.
    ///
    /// Runtime failures of the model become `verdict: error` in the answer; only a
    /// request that cannot run (prompt too long for the context, empty) is an `Err`.
    ///
    /// ```no_run
    /// use formwork::engine::{chat::{ChatOptions, Constraint}, Engine, Schema};
    /// use formwork_models::chat::ChatMessage;
    /// let mut engine = Engine::new(formwork::load_model("smollm2-135m", "auto".parse().unwrap())?);
    /// let mut schema = Schema::new(serde_json::json!({
    ///     "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]
    /// }))?;
    /// let grammar = schema.grammar()?;
    /// let messages = [ChatMessage::new("user", "Where is the Colosseum?")];
    /// let c = Constraint::Schema { grammar, validator: &schema.validator };
    /// let a = engine.chat(&messages, &c, &ChatOptions::default())?;
    /// println!("{:?} {}", a.verdict, a.text);
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn chat(
        &mut self,
        messages: &[ChatMessage],
        constraint: &Constraint<'_>,
        opts: &ChatOptions,
    ) -> Result<ChatAnswer, ChatError> {
        let started = Instant::now();
        if messages.is_empty() {
            return Err(ChatError::Empty);
        }
        let messages = with_hint(
            messages,
            opts.schema_hint.as_ref(),
            matches!(constraint, Constraint::Tools(_)),
        );
        let turn = self
            .think_prompt(&messages, opts.think)
            .map_err(|e| match e {
                PromptError::Prompt(m) => ChatError::Prompt(m),
                PromptError::NoMarkers(m) => ChatError::Think(m),
            })?;
        let (ids, think) = (turn.ids, turn.think);
        let min = match constraint {
            Constraint::Schema { grammar, .. } => {
                Matcher::new(grammar.clone(), self.trie.clone()).min_completion_tokens()
            }
            Constraint::Tools(t) => {
                Matcher::new(t.grammar.clone(), self.trie.clone()).min_completion_tokens()
            }
            Constraint::Text => 0,
        };
        let context = self.loaded.context_length;
        let markers = think.as_ref().map_or(0, ThinkTokens::markers);
        if ids.len() + min.max(1) + markers > context {
            return Err(ChatError::ContextLength {
                prompt: ids.len(),
                min,
                context,
            });
        }
        let shared = self.chat_shared_prefix(&messages, &ids);
        let reused_before = self.prefix_tokens_reused;
        let mut answer = ChatAnswer {
            text: String::new(),
            verdict: VerdictKind::Error,
            errors: Vec::new(),
            value: None,
            stop: Stop::Budget,
            message: None,
            tokens_prompt: ids.len(),
            tokens_cached: 0,
            tokens_completion: 0,
            tokens_forced: 0,
            mask_ns: Vec::new(),
            ms: 0,
            tools: None,
            reasoning: None,
            tokens_reasoning: 0,
            reasoning_cut: false,
        };
        // What the conversation states (its user and tool messages): a grounded
        // argument quotes it, and a turn's later calls take their new values from it.
        let conversation = messages
            .iter()
            .filter(|m| m.role == "user" || m.role == "tool")
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        // A tool turn does not repeat a call already made ([`super::repeats`]).
        let repeats = matches!(constraint, Constraint::Tools(_)).then(|| {
            Arc::new(Repeats::new(
                messages
                    .iter()
                    .filter(|m| m.role == "assistant")
                    .map(|m| m.content.as_str()),
                &conversation,
                match constraint {
                    Constraint::Tools(t) => t.params.iter().map(|(_, p)| p).collect(),
                    _ => Vec::new(),
                },
            ))
        });
        let arg_grounding = {
            match constraint {
                Constraint::Tools(t) => ArgGrounding::new(
                    t.params.iter().map(|(n, s)| (n.as_str(), s)),
                    t.answer_schema.as_ref(),
                    opts.grounded,
                    &conversation,
                ),
                Constraint::Schema { .. } => opts
                    .answer_schema
                    .as_ref()
                    .and_then(|s| ArgGrounding::new([], Some(s), opts.grounded, &conversation)),
                Constraint::Text => None,
            }
            .map(Arc::new)
        };
        let dopts = DecodeOptions {
            arg_grounding: arg_grounding.clone(),
            // The context bounds the budget too: a masked answer steered to fit it
            // still ends valid.
            max_tokens: opts.max_tokens.min(context - ids.len()),
            deadline: opts.timeout.map(|t| started + t),
            watch: {
                // A grounded string is shown once it stands ([`ArgGrounding::safe`]).
                let inner = match (&arg_grounding, &opts.watch) {
                    (Some(g), Some(w)) => {
                        let (g, w) = (g.clone(), w.clone());
                        Some(Watch(Arc::new(move |b: &[u8]| (w.0)(&b[..g.safe(b)]))))
                    }
                    _ => opts.watch.clone(),
                };
                match &repeats {
                    Some(r) => Some(r.watch(inner)),
                    None => inner,
                }
            },
            redirect: matches!(constraint, Constraint::Tools(_)).then(|| {
                let r = self.tool_redirect();
                if opts.call_bias == CallBias::default() {
                    return r;
                }
                let mut r = (*r).clone();
                r.open_bias = opts.call_bias.open;
                r.more_bias = opts.call_bias.more;
                Arc::new(r)
            }),
            ..DecodeOptions::default()
        };
        // The prompt in chunks, each after a look at the deadline and the watch (a
        // client gone), so that neither waits for the whole of a long prompt.
        let deadline = dopts.deadline;
        let timed_out = || deadline.is_some_and(|d| Instant::now() >= d);
        let watch = opts.watch.clone();
        let go = || !timed_out() && watch.as_ref().is_none_or(|w| (w.0)(&[]));
        let prefilled = self.prefill_until(&ids, &[shared], &go);
        let mut thought: Option<super::decode::Thought> = None;
        let run = prefilled.and_then(|logits| {
            let Some(logits) = logits else {
                let mut out = DecodeOutput::empty();
                out.stop = if timed_out() {
                    Stop::Timeout
                } else {
                    Stop::Cancelled
                };
                return Ok((out, false));
            };
            let mut sampler = Sampler::new(opts.sampling.clone(), opts.seed);
            // A thinking turn: the block first, then the answer from where it ends,
            // with the budget it left.
            let (logits, pos, dopts) = match &think {
                Some(t) => {
                    let th = self.think_first(
                        t,
                        &mut sampler,
                        logits,
                        ids.len(),
                        &dopts,
                        min.max(1),
                        opts.think_watch.clone(),
                    )?;
                    let stopped = th.stopped().then_some(th.out.stop);
                    let (l, p, used) = (th.logits.clone(), th.pos, th.out.tokens.len());
                    thought = Some(th);
                    if let Some(stop) = stopped {
                        let mut out = DecodeOutput::empty();
                        out.stop = stop;
                        return Ok((out, false));
                    }
                    let d = DecodeOptions {
                        max_tokens: dopts.max_tokens.saturating_sub(used),
                        ..dopts.clone()
                    };
                    (l, p, d)
                }
                None => (logits, ids.len(), dopts.clone()),
            };
            match constraint {
                Constraint::Schema { grammar, .. } => {
                    self.decode_under(grammar.clone(), &mut sampler, logits, pos, &dopts)
                }
                Constraint::Tools(t) => {
                    let run =
                        self.decode_under(t.grammar.clone(), &mut sampler, logits, pos, &dopts)?;
                    let Some(at) = repeats.as_ref().and_then(|r| r.cut()) else {
                        return Ok(run);
                    };
                    let (mut out, _) = run;
                    let kept = super::tools::parse_turn(&String::from_utf8_lossy(&out.bytes[..at]));
                    let said = kept
                        .content
                        .as_deref()
                        .is_some_and(|c| !c.trim().is_empty());
                    match &t.answer_only {
                        // Nothing but repeats: the turn again, with no call allowed.
                        Some(answer_only) if kept.calls.is_empty() && !said => {
                            let Some(logits) = self.prefill_until(&ids, &[shared], &go)? else {
                                let mut out = DecodeOutput::empty();
                                out.stop = Stop::Cancelled;
                                return Ok((out, false));
                            };
                            let dopts = DecodeOptions {
                                watch: opts.watch.clone(),
                                ..dopts.clone()
                            };
                            self.decode_under(
                                answer_only.clone(),
                                &mut sampler,
                                logits,
                                ids.len(),
                                &dopts,
                            )
                        }
                        // A turn that must call, and whose only call repeats: it stands.
                        None if kept.calls.is_empty() && !said => {
                            out.stop = Stop::Eos;
                            Ok((out, true))
                        }
                        // The calls (or the text) before the repeat: the turn ends there.
                        _ => {
                            cut_output(&mut out, at, &*self.loaded.tokenizer);
                            out.stop = Stop::Eos;
                            Ok((out, true))
                        }
                    }
                }
                Constraint::Text => {
                    let tok: &GgufTokenizer = &self.loaded.tokenizer;
                    let is_special = |t: u32| tok.is_special(t);
                    let out = decode_free(
                        self.loaded.model.as_mut(),
                        tok,
                        &mut sampler,
                        logits,
                        pos,
                        &dopts,
                        Until::End {
                            is_special: &is_special,
                        },
                    )?;
                    Ok((out, true))
                }
            }
        });
        answer.tokens_cached = self.prefix_tokens_reused - reused_before;
        match run {
            Ok((out, complete)) => finish(&mut answer, constraint, &out, complete),
            Err(e) => {
                answer.verdict = VerdictKind::Error;
                answer.message = Some(format!("{e:#}"));
            }
        }
        if let Some(th) = thought {
            answer.reasoning = Some(th.text);
            answer.tokens_reasoning = th.out.tokens.len();
            answer.tokens_completion += th.out.tokens.len();
            answer.tokens_forced += th.out.stats.tokens_forced;
            answer.reasoning_cut = th.forced_close;
        }
        answer.ms = started.elapsed().as_millis() as u64;
        Ok(answer)
    }

    /// The tool turns' [`Redirect`]: tokens that begin like a call (`{`, `[`, `<`, a
    /// backtick, after any whitespace) lead to the opener's token (`<tool_call>` where
    /// the vocabulary has it, else `<`). Built once per engine.
    fn tool_redirect(&mut self) -> Arc<Redirect> {
        if let Some(r) = &self.redirect {
            return r.clone();
        }
        let tok: &GgufTokenizer = &self.loaded.tokenizer;
        let to = [formwork_grammar::tools::CALL_TAG, "<"]
            .iter()
            .find_map(|t| {
                self.trie
                    .token_with_bytes(t.as_bytes())
                    .filter(|&id| self.trie.is_usable(id))
            })
            .unwrap_or(0);
        let r = Arc::new(Redirect::new(
            tok,
            formwork_grammar::tools::LINE_FORBIDDEN_START,
            to,
        ));
        self.redirect = Some(r.clone());
        r
    }

    /// The leading tokens of `ids` shared by every conversation that differs only in
    /// its last message (the system message and earlier turns): cached as a prefix.
    fn chat_shared_prefix(&self, messages: &[ChatMessage], ids: &[u32]) -> usize {
        let mut k = ids.len();
        for dummy in ["A", "Z z"] {
            let mut other = messages.to_vec();
            if let Some(last) = other.last_mut() {
                last.content = dummy.to_string();
            }
            match self.prompt_tokens(&other) {
                Ok(o) => k = k.min(ids.iter().zip(&o).take_while(|(a, b)| a == b).count()),
                Err(_) => return 0,
            }
        }
        k
    }
}

/// The conversation with the schema outline added to its system message (a new
/// system message first when there is none). With tools, the outline is for the final
/// answer only.
fn with_hint(messages: &[ChatMessage], hint: Option<&Value>, tools: bool) -> Vec<ChatMessage> {
    let mut m = messages.to_vec();
    let Some(schema) = hint else { return m };
    let lead = if tools {
        "When you give your final answer instead of calling a function, reply with one JSON object of this shape, and nothing else"
    } else {
        "Reply with one JSON object of this shape, and nothing else"
    };
    let text = format!(
        "{lead} (`a | b` lists the allowed values, `?` marks a key that may be left out):\n{}",
        super::prompt::schema_outline(schema)
    );
    match m.iter_mut().find(|x| x.role == "system") {
        Some(sys) => {
            sys.content.push_str("\n\n");
            sys.content.push_str(&text);
        }
        None => m.insert(0, ChatMessage::new("system", text)),
    }
    m
}

/// `out` cut back to its first `at` bytes (a token boundary: the end of a call, or of the
/// text before it), with the tokens that wrote them.
fn cut_output(out: &mut DecodeOutput, at: usize, codec: &dyn Codec) {
    let bytes = codec.token_bytes();
    let mut len = 0;
    let keep = out
        .tokens
        .iter()
        .take_while(|&&t| {
            len += bytes.get(t as usize).map_or(0, Vec::len);
            len <= at
        })
        .count();
    out.tokens.truncate(keep);
    out.bytes.truncate(at);
    out.forced_ranges.retain(|r| r.1 <= keep);
}

fn finish(
    answer: &mut ChatAnswer,
    constraint: &Constraint<'_>,
    out: &DecodeOutput,
    complete: bool,
) {
    answer.stop = out.stop;
    answer.tokens_completion = out.tokens.len();
    answer.tokens_forced = out.stats.tokens_forced;
    answer.mask_ns = out.stats.mask_ns.clone();
    answer.text = String::from_utf8_lossy(&out.bytes).into_owned();
    let cut = match out.stop {
        Stop::Timeout => Some("the time limit ended the run before the answer was complete"),
        Stop::Cancelled => Some("the request was cancelled"),
        Stop::Budget if !complete => {
            Some("the token budget ended the run before the value was complete")
        }
        Stop::Budget if matches!(constraint, Constraint::Text) => {
            Some("the token budget ended the text")
        }
        _ => None,
    };
    if let Constraint::Tools(t) = constraint {
        return finish_tools(answer, t, cut);
    }
    if let Some(why) = cut {
        answer.verdict = VerdictKind::Incomplete;
        answer.message = Some(why.to_string());
        if matches!(constraint, Constraint::Text) || !complete {
            return;
        }
    }
    let Constraint::Schema { validator, .. } = constraint else {
        answer.verdict = VerdictKind::Valid;
        return;
    };
    let verdict = validator.check(&answer.text);
    set_verdict(answer, verdict);
}

/// A turn with tools: the calls read back, each call's arguments checked by its
/// tool's validator and a JSON answer by the answer's; the first failure is the verdict.
fn finish_tools(answer: &mut ChatAnswer, t: &super::tools::Toolbox, cut: Option<&str>) {
    let turn = super::tools::parse_turn(&answer.text);
    answer.tools = Some(ToolAnswer {
        calls: turn.calls.clone(),
        content: turn.content.clone(),
    });
    if let Some(why) = cut.or(turn.partial.then_some("the run ended inside a call")) {
        answer.verdict = VerdictKind::Incomplete;
        answer.message = Some(why.to_string());
        return;
    }
    answer.verdict = VerdictKind::Valid;
    for (name, args) in &turn.calls {
        let Some(v) = t.validators.get(name) else {
            answer.verdict = VerdictKind::SchemaInvalid;
            answer.message = Some(format!("a call names '{name}', which is not a tool"));
            return;
        };
        set_verdict(answer, v.check(args));
        if answer.verdict != VerdictKind::Valid {
            answer.message = Some(format!("the arguments of a call to '{name}'"));
            return;
        }
    }
    answer.value = None;
    if let (Some(text), Some(v), true, true) = (
        &turn.content,
        &t.answer,
        t.answer_is_json,
        turn.calls.is_empty(),
    ) {
        set_verdict(answer, v.check(text));
    }
}

fn set_verdict(answer: &mut ChatAnswer, verdict: Verdict) {
    let kind = match verdict {
        Verdict::Valid(v) => {
            answer.value = Some(v);
            VerdictKind::Valid
        }
        Verdict::NotJson(e) => {
            answer.message = Some(e.to_string());
            VerdictKind::NotJson
        }
        Verdict::SchemaInvalid(errs) => {
            answer.errors = errs;
            VerdictKind::SchemaInvalid
        }
        Verdict::SemanticInvalid(errs) => {
            answer.errors = errs;
            VerdictKind::SemanticInvalid
        }
    };
    if answer.verdict != VerdictKind::Incomplete {
        answer.verdict = kind;
    }
}
