//! The masked loop, `decode_masked`: handed the model, the codec, the matcher, the
//! sampler and the logits after the prompt, it runs the steps of the module doc
//! (feed, null lookahead, pick under the mask), with grounding take-backs and the
//! tool turns' redirect, until EOS, the end of the grammar, the budget or a stop.

use std::time::Instant;

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::feed::{commit_sampled, plan_feed};
use super::ground_args::ArgGrounder;
use super::grounder::Grounder;
use super::lookahead::null_lookahead;
use super::null::{crossing_candidates, pick_across_null, pick_null_or_value, starts_null};
use super::sample::{full_mask, masked_p, pick, temperature};
use super::weigh::weigh_pick;
use super::{canonical_spans, Codec, DecodeOptions, DecodeOutput, Redirect, Stop, Watch};

/// Run masked decoding from `logits` (the model's output after the prompt, whose
/// length is `pos`).
///
/// **Null lookahead** (`null_lookahead`, greedy only). At a decision point where a
/// `null` literal and another value may both start ([`Matcher::null_competes`]),
/// both branches are decoded on snapshots of the model and clones of the matcher:
/// the best allowed token starting with `n` (then `null`'s forced rest and the
/// separator), and the best allowed other token, continued greedily under the mask.
/// Each branch ends at the first decision point after its value is complete: after
/// a byte where the matcher's state is the state after `null`, or that state followed
/// by `,` `}` `]` (so both end at the same separator), or after 64 tokens. The rule:
/// **the higher mean natural-log probability per token wins**, over every token the
/// branch feeds, sampled and forced alike, each under the model's full softmax (no
/// mask). A tie goes to the greedy first choice. The winner's model, matcher and
/// logits replace the current ones, exactly as if it had been decoded directly;
/// branches feed one token a pass (each token needs its logits), and do not look
/// ahead again inside.
pub fn decode_masked(
    model: &mut Box<dyn LanguageModel>,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
) -> formwork_models::Result<DecodeOutput> {
    let started = Instant::now();
    let vocab = codec.token_bytes().len().max(logits.len());
    let mut mask = TokenSet::new(vocab);
    let mut out = DecodeOutput::empty();
    let eos = codec.eos_ids();
    let mut pending: Option<u32> = None;
    // With a null bias: the tokens that may carry a value's start inside them.
    let mut crossers: Option<Vec<u32>> = None;
    let mut grounder = Grounder::new(opts.grounding.as_deref());
    let mut args = ArgGrounder::new(opts.arg_grounding.as_deref());
    loop {
        if Watch::stops(opts, &out.bytes) {
            out.stop = Stop::Cancelled;
            break;
        }
        // 1. Feed the pending sampled token and the forced bytes after it (jump-forward).
        if pending.is_some() || opts.jump_forward {
            let cap = opts.max_tokens.saturating_sub(out.tokens.len());
            if pending.is_none() {
                matcher.set_budget(cap);
            }
            let sampled = pending.is_some();
            let (toks, forced) = plan_feed(matcher, codec, pending.take(), opts, cap);
            if !toks.is_empty() {
                out.push(codec, &toks, sampled, forced);
                if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if let Some(l) = args.back(model.as_mut(), codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if matcher.is_finished() {
                    // Nothing can follow: the logits after these tokens are never read.
                    out.stop = Stop::Finished;
                    break;
                }
                logits = out.forward(model.as_mut(), &toks, &mut pos)?;
                continue;
            }
        }
        if matcher.is_finished() {
            out.stop = Stop::Finished;
            break;
        }
        let used = out.tokens.len();
        if used >= opts.max_tokens {
            out.stop = if matcher.is_accepting() {
                Stop::Finished
            } else {
                Stop::Budget
            };
            break;
        }
        if opts.deadline.is_some_and(|d| Instant::now() >= d) {
            out.stop = Stop::Timeout;
            break;
        }
        let left = opts.max_tokens - used;
        matcher.set_budget(left);
        grounder.checkpoint(model.as_ref(), matcher, pos, &out);
        args.checkpoint(matcher, &logits, pos, &out);

        let refuse_null = matcher.null_competes() && grounder.refuses_null(&out);
        // A grounded text field whose `null` is weighed against a quotation.
        let weighable = (opts.weigh_nulls && opts.confidence && matcher.null_competes())
            .then(|| grounder.weighable(&out))
            .flatten();
        // 2. Null against a value, both scored before committing.
        if opts.null_lookahead
            && sampler.sampling().is_greedy()
            && matcher.null_competes()
            && !refuse_null
            && weighable.is_none()
        {
            if let Some(w) = null_lookahead(
                model.as_ref(),
                codec,
                matcher,
                &mut mask,
                &logits,
                pos,
                opts,
                used,
                &mut out.stats,
            )? {
                *model = w.model;
                *matcher = w.matcher;
                logits = w.logits;
                pos = w.pos;
                let finished = w.finished;
                out.append(w.out);
                if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if let Some(l) = args.back(model.as_mut(), codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if finished {
                    out.stop = Stop::Finished;
                    break;
                }
                continue;
            }
        }

        // 3. Sample under the mask (steered when the budget restricts it).
        out.steered |= matcher.is_steering();
        let mut redirected = None;
        if let Some(r) = &opts.redirect {
            r.bias(&mut logits, &out.bytes, codec.eos_ids());
        }
        if let Some(r) = &opts.redirect {
            let best = crate::sampling::argmax(&logits, |_| true);
            if let Some(best) = best.filter(|&b| {
                r.from.contains(b) && !matcher.is_allowed(b) && matcher.is_allowed(r.to)
            }) {
                let call = if r.fence.contains(best) {
                    // Ask the model what follows its fence, on a snapshot.
                    let mut peek = model.snapshot();
                    let next_logits = peek.forward(&[best], pos)?;
                    out.stats.forward_passes += 1;
                    crate::sampling::argmax(&next_logits, |_| true).is_some_and(|n| {
                        Redirect::fence_opens_call(&codec.token_bytes()[n as usize])
                    })
                } else {
                    true
                };
                redirected = call.then_some(r.to);
            }
        }
        let quoted = if args.quoting() {
            args.pick_quoted(matcher, codec, &logits, &mut mask, &mut out)
        } else {
            None
        };
        let picked = if let Some(q) = quoted {
            Some(q)
        } else if let Some(to) = redirected {
            let p = if opts.confidence {
                full_mask(matcher, &mut mask, &mut out.stats);
                masked_p(&logits, &mask, to, temperature(sampler))
            } else {
                f64::NAN
            };
            Some((to, p))
        } else if matcher.null_competes() {
            let bias = if refuse_null {
                f32::NEG_INFINITY
            } else {
                opts.null_bias
            };
            let p = pick_null_or_value(
                matcher, codec, sampler, &logits, &mut mask, bias, opts, &mut out,
            );
            match (p, &weighable) {
                (Some(picked), Some((g, pattern)))
                    if starts_null(codec.token_bytes(), picked.0) =>
                {
                    weigh_pick(
                        model.as_mut(),
                        codec,
                        matcher,
                        sampler.sampling().is_greedy(),
                        &logits,
                        &mut pos,
                        &mut mask,
                        opts,
                        &mut out,
                        &grounder,
                        (g, pattern),
                        picked,
                    )?
                }
                _ => p,
            }
        } else if opts.null_bias != 0.0 {
            let c = crossers.get_or_insert_with(|| crossing_candidates(codec));
            pick_across_null(
                model.as_ref(),
                codec,
                matcher,
                sampler,
                &logits,
                pos,
                &mut mask,
                opts,
                &mut out,
                c,
            )?
        } else {
            pick(
                matcher,
                sampler,
                &logits,
                &mut mask,
                &mut out.stats,
                opts.confidence,
            )
        };
        let Some((tok, p)) = picked else {
            // No token allowed: the matcher is accepting with nothing allowed
            // after it, or the vocabulary cannot spell what the schema needs.
            out.stop = if matcher.is_accepting() {
                Stop::Finished
            } else {
                Stop::Budget
            };
            break;
        };
        if eos.contains(&tok) {
            debug_assert!(matcher.is_accepting());
            out.stop = Stop::Eos;
            break;
        }
        out.chose(codec, opts, tok, p);
        commit_sampled(matcher, tok)?;
        if matcher.is_finished() {
            out.push(codec, &[tok], true, false);
            if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                logits = l;
                continue;
            }
            if let Some(l) = args.back(model.as_mut(), codec, matcher, &mut pos, &mut out)? {
                logits = l;
                continue;
            }
            out.stop = Stop::Finished;
            break;
        }
        // Fed at the top of the loop, together with any forced bytes after it.
        pending = Some(tok);
    }
    out.stats.decode_time = started.elapsed();
    let (noncanonical, bad) = canonical_spans(codec, &out.tokens, &out.bytes, &out.forced_ranges);
    out.stats.noncanonical = noncanonical;
    out.stats.forced_spans_noncanonical = bad;
    Ok(out)
}
