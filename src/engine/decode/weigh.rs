//! The weighing of a `null` (`DecodeOptions::weigh_nulls`): where the model picks
//! `null` for a grounded text field, the best whole value the document offers is
//! decoded on the model itself, as a quotation ([`crate::engine::ground::quote`]):
//! from the value's first token, each pick is the best token the mask allows that
//! keeps the string a piece of the document, until the string closes. Its
//! probability, given that a value is written, is what the `null` is weighed against
//! ([`crate::engine::confidence::NullRule::Weighed`]). The model's cache is then
//! truncated back (no snapshot), unless the value is written instead (above
//! `DecodeOptions::fill_above`, or with the null lookahead above the `null`'s own
//! probability).

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use super::super::ground::quote::{quoted_fits, Quotable};
use super::super::ground::Grounding;
use super::feed::commit_sampled;
use super::grounder::Grounder;
use super::null::starts_null;
use super::sample::{allowed_p, best_fitting, full_mask, masked_p};
use super::{Codec, DecodeOptions, DecodeOutput, DecodeStats, WeighedNull};

/// The most tokens a weighed value may take.
const MAX_TOKENS: usize = 16;
/// A quotation whose probability falls below this is given up: weighed against it, a
/// `null` would keep a confidence of 0.999 or more, as against the best value start.
const MIN_WHOLE: f64 = 1e-3;

/// A whole value the document offers where the model picked `null`.
pub(super) struct Weighed {
    /// Its tokens, with each one's probability under the mask.
    pub tokens: Vec<(u32, f64)>,
    /// The string's content, between its quotes.
    pub content: String,
    /// `P(value | a value)`: the product of the tokens' probabilities, the first's
    /// given that it does not start `null` (`first_given`).
    pub whole: f64,
    pub first_given: f64,
    /// The matcher after every token but the last, which the model has been fed
    /// (the last has not).
    pub matcher: Matcher,
}

/// Decodes the best quotation of `quote` from the decision point (`logits` at `pos`,
/// `matcher` before the value). The model is left fed with the value's tokens but the
/// last (at `pos`..); the caller truncates it back to `pos` or takes the value.
/// `None` when the model cannot truncate its cache, or no quotation closes within
/// [`MAX_TOKENS`] with a probability of [`MIN_WHOLE`] or more (the model is then
/// back at `pos`).
#[allow(clippy::too_many_arguments)]
pub(super) fn weigh_null(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    matcher: &Matcher,
    logits: &[f32],
    pos: usize,
    mask: &mut TokenSet,
    quote: &impl Quotable,
    stats: &mut DecodeStats,
) -> formwork_models::Result<Option<Weighed>> {
    // A model that cannot go back is never taken forward (truncating to where it
    // stands changes nothing).
    if !model.truncate(pos) {
        return Ok(None);
    }
    stats.nulls_weighed += 1;
    let vocab = codec.token_bytes();
    let eos = codec.eos_ids();
    let mut m = matcher.clone();
    let mut logits = logits.to_vec();
    let mut content: Vec<u8> = Vec::new();
    let mut tokens = Vec::new();
    let mut whole = 1.0;
    let mut first_given = 1.0;
    for step in 0..MAX_TOKENS {
        full_mask(&mut m, mask, stats);
        let fits = |t: u32| {
            let b = &vocab[t as usize];
            if eos.contains(&t) {
                return false;
            }
            if step == 0 {
                // The opening quote, then the content.
                b.first() == Some(&b'"') && quoted_fits(quote, b"", &b[1..])
            } else {
                quoted_fits(quote, &content, b)
            }
        };
        let Some(t) = best_fitting(&logits, mask, fits) else {
            break;
        };
        let p = masked_p(&logits, mask, t, 1.0);
        if step == 0 {
            let value = |u: u32| mask.contains(u) && !starts_null(vocab, u);
            first_given = allowed_p(&logits, value, t, 1.0);
            whole *= first_given;
        } else {
            whole *= p;
        }
        if whole < MIN_WHOLE {
            break;
        }
        tokens.push((t, p));
        let b = &vocab[t as usize];
        let piece = if step == 0 { &b[1..] } else { &b[..] };
        if let Some(close) = piece.iter().position(|&c| c == b'"') {
            content.extend_from_slice(&piece[..close]);
            let Ok(content) = String::from_utf8(content) else {
                break;
            };
            return Ok(Some(Weighed {
                tokens,
                content,
                whole,
                first_given,
                matcher: m,
            }));
        }
        content.extend_from_slice(piece);
        if commit_sampled(&mut m, t).is_err() {
            break;
        }
        // The tokens before this one were fed at pos.., one a step.
        logits = model.forward(&[t], pos + step)?;
        stats.forward_passes += 1;
        stats.weigh_forward_passes += 1;
    }
    model.truncate(pos);
    Ok(None)
}

/// After the model picked `null` (`picked`) at the grounded text field `pattern`: weighs
/// it against the document's best quotation ([`weigh_null`]), records the weighing
/// (`NullOdds::whole`, `DecodeStats::weighed`), and returns the pick: the `null`, or,
/// when the quotation is written instead (greedy, above `opts.fill_above`, or with the
/// null lookahead above the `null`'s own probability), its last token, its other tokens
/// pushed and fed, `matcher` and `pos` past them. A value written so has the confidence
/// `P(value | a value)` (above the bar by construction).
#[allow(clippy::too_many_arguments)]
pub(super) fn weigh_pick(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    greedy: bool,
    logits: &[f32],
    pos: &mut usize,
    mask: &mut TokenSet,
    opts: &DecodeOptions,
    out: &mut DecodeOutput,
    grounder: &Grounder,
    (g, pattern): (&Grounding, &str),
    picked: (u32, f64),
) -> formwork_models::Result<Option<(u32, f64)>> {
    let q = g.quotation(pattern);
    let Some(w) = weigh_null(
        model,
        codec,
        matcher,
        logits,
        *pos,
        mask,
        &q,
        &mut out.stats,
    )?
    else {
        return Ok(Some(picked));
    };
    let stands = grounder.would_stand(out, pattern, &w.content);
    let null_p = out.probs.odds.last().map_or(1.0, |o| o.null);
    let take = stands
        && greedy
        && (opts.fill_above.is_some_and(|t| w.whole > t)
            || (opts.null_lookahead && w.whole > null_p));
    if stands {
        out.stats.weighed.push(WeighedNull {
            at: out.bytes.len(),
            quotation: w.content.clone(),
            p: w.whole,
            taken: take,
        });
    }
    if !take {
        if !model.truncate(*pos) {
            return Err(formwork_models::ModelError::Tokenizer(
                "the model could not go back after weighing a null".into(),
            ));
        }
        if let Some(o) = out.probs.odds.last_mut().filter(|_| stands) {
            o.whole = Some(w.whole);
        }
        return Ok(Some(picked));
    }
    out.stats.weighed_values_taken += 1;
    out.probs.odds.pop();
    // The value's confidence is its probability given that a value is written: its
    // first token counts given that it does not start `null`.
    let mut tokens = w.tokens;
    tokens[0].1 = w.first_given;
    let (&last, rest) = tokens.split_last().expect("a closed string");
    for &(t, p) in rest {
        out.chose(codec, opts, t, p);
        out.push(codec, &[t], true, false);
    }
    *pos += rest.len();
    *matcher = w.matcher;
    Ok(Some(last))
}
