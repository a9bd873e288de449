//! The thought phase, `decode_think`: a reasoning model's turn is a think block of
//! free text, then the answer under the grammar. Handed the model, the codec, the
//! answer's matcher and the logits after the prompt, it
//!
//! 1. opens the block (feeds [`ThinkPlan::open`], unless the prompt already did),
//! 2. samples without a mask, except that EOS and control tokens other than the
//!    close marker's are refused (a turn cannot end inside its thought), until the
//!    text ends with the close marker,
//! 3. or, when [`ThinkPlan::budget`] thought tokens are spent, or the turn's budget
//!    has no more room than the shortest valid answer needs, feeds the close marker
//!    itself (the block is closed by the engine, mid-thought),
//! 4. feeds [`ThinkPlan::after`] (the separator the template writes after the
//!    block) with the last token, then runs [`decode_masked`] for the answer with
//!    the budget that is left: the answer is masked exactly as without thought, and
//!    its budget always holds its shortest valid completion, so it is never cut off.
//!
//! A budget of 0 with the block not yet open skips the phase: the answer is decoded
//! at once (the caller's prompt carries the empty block, Qwen3's
//! `enable_thinking: false`). With the block already open (a template that always
//! opens it), 0 closes it at once.

use std::time::Instant;

use formwork_grammar::matcher::Matcher;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::{decode_masked, Codec, DecodeOptions, DecodeOutput, Stop, Watch};

/// How a turn thinks: the marker tokens and the thought budget.
pub struct ThinkPlan<'a> {
    /// Tokens that open the block (`<think>` and a newline); empty when the prompt
    /// already ends inside an open block.
    pub open: &'a [u32],
    /// Tokens of the close marker (`</think>`), fed when the budget closes the block.
    pub close: &'a [u32],
    /// The close marker's bytes: the model closed the block when its text ends with them.
    pub close_text: &'a [u8],
    /// Tokens fed after the close marker, before the answer (`\n\n`); may be empty.
    pub after: &'a [u32],
    /// Thought tokens at most (the markers not counted).
    pub budget: usize,
    /// Control tokens: refused inside the thought, except those of `close`.
    pub is_special: &'a dyn Fn(u32) -> bool,
    /// Sees the thought text as it grows (the answer's watch is [`DecodeOptions::watch`]).
    pub watch: Option<Watch>,
}

/// The think block of a turn, and where it leaves the model for the answer.
#[derive(Clone, Debug)]
pub struct Thought {
    /// The block's tokens, markers included (empty when the phase was skipped).
    pub out: DecodeOutput,
    /// Its text without the markers and the separator, trimmed.
    pub text: String,
    /// The engine closed the block (the budget ran out), not the model.
    pub forced_close: bool,
    /// The logits after the block and the position they are at: where the answer starts.
    pub logits: Vec<f32>,
    pub pos: usize,
}

impl Thought {
    /// The run stopped inside the thought (time limit, cancelled): there is no answer.
    pub fn stopped(&self) -> bool {
        matches!(self.out.stop, Stop::Timeout | Stop::Cancelled)
    }
}

/// A thinking turn under a grammar: its thought and its answer.
#[derive(Clone, Debug)]
pub struct ThinkOutput {
    pub thought: DecodeOutput,
    pub text: String,
    pub forced_close: bool,
    /// The answer under the grammar.
    pub answer: DecodeOutput,
}

/// Run the thought, then the masked answer (see the module doc). `opts.max_tokens`
/// bounds the whole turn, thought and answer together.
#[allow(clippy::too_many_arguments)]
pub fn decode_think(
    model: &mut Box<dyn LanguageModel>,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    sampler: &mut Sampler,
    logits: Vec<f32>,
    pos: usize,
    opts: &DecodeOptions,
    plan: &ThinkPlan<'_>,
) -> formwork_models::Result<ThinkOutput> {
    let min = matcher.min_completion_tokens().max(1);
    let t = think(model.as_mut(), codec, sampler, logits, pos, opts, plan, min)?;
    let answer = if t.stopped() {
        let mut a = DecodeOutput::empty();
        a.stop = t.out.stop;
        a
    } else {
        let answer_opts = DecodeOptions {
            max_tokens: opts.max_tokens.saturating_sub(t.out.tokens.len()),
            ..opts.clone()
        };
        decode_masked(
            model,
            codec,
            matcher,
            sampler,
            t.logits,
            t.pos,
            &answer_opts,
        )?
    };
    Ok(ThinkOutput {
        thought: t.out,
        text: t.text,
        forced_close: t.forced_close,
        answer,
    })
}

/// The thought phase alone (steps 1 to 4 of the module doc, up to the answer):
/// `min_answer` tokens (the shortest valid answer) are kept out of the thought, so
/// the answer, decoded after it with `opts.max_tokens` less the block's tokens,
/// always has room to end valid.
#[allow(clippy::too_many_arguments)]
pub fn think(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
    plan: &ThinkPlan<'_>,
    min_answer: usize,
) -> formwork_models::Result<Thought> {
    let started = Instant::now();
    let mut thought = DecodeOutput::empty();
    thought.stop = Stop::Finished;
    let mut forced_close = false;
    let skip = plan.budget == 0 && !plan.open.is_empty();
    if !skip {
        // Room for the markers and the shortest valid answer stays out of the thought.
        let reserve = plan.open.len() + plan.close.len() + plan.after.len() + min_answer;
        let cap = plan.budget.min(opts.max_tokens.saturating_sub(reserve));
        if !plan.open.is_empty() {
            thought.push(codec, plan.open, false, true);
            logits = thought.forward(model, plan.open, &mut pos)?;
        }
        let eos = codec.eos_ids();
        let start = thought.bytes.len();
        let mut sampled = 0usize;
        loop {
            if opts.deadline.is_some_and(|d| Instant::now() >= d) {
                thought.stop = Stop::Timeout;
            } else if plan
                .watch
                .as_ref()
                .is_some_and(|w| !(w.0)(&thought.bytes[start..]))
            {
                thought.stop = Stop::Cancelled;
            }
            if thought.stop != Stop::Finished {
                let text = String::from_utf8_lossy(&thought.bytes[start..]).into_owned();
                return Ok(Thought {
                    out: thought,
                    text,
                    forced_close,
                    logits,
                    pos,
                });
            }
            if sampled >= cap {
                // The budget is spent: the engine closes the block itself.
                forced_close = true;
                let mut toks = plan.close.to_vec();
                toks.extend_from_slice(plan.after);
                thought.push(codec, &toks, false, true);
                logits = thought.forward(model, &toks, &mut pos)?;
                break;
            }
            let allowed =
                |t: u32| !eos.contains(&t) && (!(plan.is_special)(t) || plan.close.contains(&t));
            let Some(tok) = sampler.sample(&logits, allowed) else {
                // Nothing can be sampled (every logit NaN): close, as the budget would.
                sampled = cap;
                continue;
            };
            thought.push(codec, &[tok], true, false);
            sampled += 1;
            if thought.bytes[start..].ends_with(plan.close_text) {
                // The model closed its block: the separator goes in with its last token.
                let mut toks = vec![tok];
                toks.extend_from_slice(plan.after);
                thought.push(codec, plan.after, false, !plan.after.is_empty());
                logits = thought.forward(model, &toks, &mut pos)?;
                break;
            }
            logits = thought.forward(model, &[tok], &mut pos)?;
        }
        thought.stats.decode_time = started.elapsed();
    }
    let text = thought_text(&thought.bytes, codec, plan);
    Ok(Thought {
        out: thought,
        text,
        forced_close,
        logits,
        pos,
    })
}

/// The thought's text: the block's bytes without the open marker, the close marker and
/// the separator, trimmed.
fn thought_text(bytes: &[u8], codec: &dyn Codec, plan: &ThinkPlan<'_>) -> String {
    let len = |toks: &[u32]| -> usize {
        toks.iter()
            .map(|&t| codec.token_bytes()[t as usize].len())
            .sum()
    };
    let from = len(plan.open).min(bytes.len());
    let mut to = bytes.len().saturating_sub(len(plan.after)).max(from);
    if bytes[from..to].ends_with(plan.close_text) {
        to -= plan.close_text.len();
    }
    String::from_utf8_lossy(&bytes[from..to]).trim().to_string()
}
