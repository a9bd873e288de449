//! Step 1, jump-forward: handed the matcher, the codec and the sampled token not yet
//! fed, it plans the next feed: that token and the bytes the schema forces after it,
//! tokenised together (token healing) and cut at the canonical prefix, committed to
//! the matcher.

use formwork_grammar::matcher::Matcher;

use super::{Codec, DecodeOptions};

/// The whole characters at the start of `bytes` (a split character is sampled).
fn whole_chars(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// Commits to `matcher` and returns the tokens to feed next, and whether they carry
/// forced bytes. `pending` is a sampled token already committed but not yet fed.
///
/// With jump-forward, the forced bytes after it are tokenised *together with* the
/// pending token's bytes (`"` then forced `,"date":` is fed as `","`, `date`, as the
/// tokenizer writes `","date":`), so the left edge of a forced span is canonical;
/// the right edge is cut by [`Matcher::canonical_forced_prefix`] before any token
/// that could span it, and those bytes are left to the model under the mask. When
/// the joint tokens do not cover the pending token, it is fed alone followed by
/// the forced text tokenised alone (the split before healing). At most `cap`
/// tokens are fed. Empty: nothing to feed, the model decides next.
pub(super) fn plan_feed(
    matcher: &mut Matcher,
    codec: &dyn Codec,
    pending: Option<u32>,
    opts: &DecodeOptions,
    cap: usize,
) -> (Vec<u32>, bool) {
    let forced = if opts.jump_forward {
        matcher.forced_bytes()
    } else {
        Vec::new()
    };
    let text = whole_chars(&forced);
    if text.is_empty() {
        return (pending.into_iter().collect(), false);
    }
    if let (Some(t), true) = (pending, opts.heal_forced) {
        if let Some(toks) = heal(matcher, codec, t, text, cap) {
            return (toks, true);
        }
    }
    let mut toks: Vec<u32> = pending.into_iter().collect();
    let sampled = toks.len();
    let f = codec.encode(text);
    let keep = matcher
        .canonical_forced_prefix(&f)
        .min(cap.saturating_sub(sampled));
    for &t in &f[..keep] {
        if !matcher.is_allowed(t) || matcher.commit(t).is_err() {
            break;
        }
        toks.push(t);
    }
    let forced = toks.len() > sampled;
    (toks, forced)
}

/// The pending token `t` and the forced `text` after it as the tokenizer writes them
/// together, cut at the canonical prefix; `None` (matcher untouched) when that does
/// not reach past `t`'s bytes, or the tokenizer does not spell the text back.
fn heal(
    matcher: &mut Matcher,
    codec: &dyn Codec,
    t: u32,
    text: &str,
    cap: usize,
) -> Option<Vec<u32>> {
    let vocab = codec.token_bytes();
    let head = std::str::from_utf8(vocab.get(t as usize)?).ok()?;
    let joint = format!("{head}{text}");
    let g = codec.encode(&joint);
    let mut spelled = Vec::with_capacity(joint.len());
    for &x in &g {
        spelled.extend_from_slice(vocab.get(x as usize)?);
    }
    if spelled != joint.as_bytes() {
        return None;
    }
    let mut m = matcher.clone();
    m.rollback(1);
    let keep = m.canonical_forced_prefix(&g).min(cap);
    let mut covered = 0;
    let mut n = 0;
    for &x in &g[..keep] {
        if !m.is_allowed(x) || m.commit(x).is_err() {
            break;
        }
        covered += vocab[x as usize].len();
        n += 1;
    }
    if covered <= head.len() {
        return None;
    }
    *matcher = m;
    Some(g[..n].to_vec())
}

pub(super) fn commit_sampled(matcher: &mut Matcher, tok: u32) -> formwork_models::Result<()> {
    matcher.commit(tok).map_err(|_| {
        // The mask and the commit disagree: a bug, reported as such.
        formwork_models::ModelError::Tokenizer(format!(
            "matcher refused token {tok} that its own mask allowed"
        ))
    })
}
