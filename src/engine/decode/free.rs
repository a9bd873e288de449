//! The free loop, `decode_free`: handed the model, the codec, the sampler and the
//! logits after the prompt, it samples without a mask until EOS, the budget, the
//! deadline, the watch, or (`Until::FirstValue`) the end of the first complete JSON
//! value.

use std::time::Instant;

use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::sample::{allowed_p, temperature};
use super::{Codec, DecodeOptions, DecodeOutput, Stop, Watch};

/// What ends a free run besides EOS, the budget, the deadline and the watch.
#[derive(Clone, Copy)]
pub enum Until<'a> {
    /// The end of the first complete JSON object or array. Free decoding's answer is
    /// what the tolerant extractor takes, so whatever the model would write after it
    /// is never read.
    FirstValue,
    /// Nothing else: prose, such as a chat answer. Tokens that `is_special` names
    /// (control tokens other than EOS) add no bytes, and neither they nor EOS may come
    /// before the answer's first byte.
    End { is_special: &'a dyn Fn(u32) -> bool },
}

/// Free decoding: sample without a mask, one token a pass, until EOS, the budget,
/// the deadline, the watch or what `until` names. A step where no token can be
/// sampled (every logit NaN) ends the run as EOS does.
pub fn decode_free(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
    until: Until<'_>,
) -> formwork_models::Result<DecodeOutput> {
    let started = Instant::now();
    let mut out = DecodeOutput::empty();
    let eos = codec.eos_ids();
    let mut first = FirstValue::default();
    loop {
        if out.tokens.len() >= opts.max_tokens {
            out.stop = Stop::Budget;
            break;
        }
        if opts.deadline.is_some_and(|d| Instant::now() >= d) {
            out.stop = Stop::Timeout;
            break;
        }
        if Watch::stops(opts, &out.bytes) {
            out.stop = Stop::Cancelled;
            break;
        }
        // A chat answer says something: before its first byte, neither EOS nor a
        // control token (an empty reply is a bug to the client, not a turn).
        let opening = matches!(until, Until::End { .. }) && out.bytes.is_empty();
        let allowed = |t: u32| match until {
            Until::End { is_special } if opening => !eos.contains(&t) && !is_special(t),
            _ => true,
        };
        let Some(tok) = sampler
            .sample(&logits, allowed)
            .filter(|t| !eos.contains(t))
        else {
            out.stop = Stop::Eos;
            break;
        };
        match until {
            Until::End { is_special } if is_special(tok) => {
                out.tokens.push(tok);
                out.stats.tokens_generated += 1;
            }
            _ => {
                if opts.confidence {
                    let p = allowed_p(&logits, |_| true, tok, temperature(sampler));
                    out.chose(codec, opts, tok, p);
                }
                out.push(codec, &[tok], true, false)
            }
        }
        if matches!(until, Until::FirstValue) && first.feed(&out.bytes) {
            out.stop = Stop::Finished;
            break;
        }
        if out.tokens.len() >= opts.max_tokens {
            out.stop = Stop::Budget;
            break;
        }
        logits = out.forward(model, &[tok], &mut pos)?;
    }
    out.stats.decode_time = started.elapsed();
    Ok(out)
}

/// Watches a growing text for the end of its first complete JSON object or array.
#[derive(Default, Debug)]
struct FirstValue {
    scanned: usize,
    start: Option<usize>,
    depth: u32,
    in_str: bool,
    esc: bool,
}

impl FirstValue {
    /// Scans the bytes added since the last call; true once an object or array
    /// has closed and its text parses as JSON.
    fn feed(&mut self, text: &[u8]) -> bool {
        while self.scanned < text.len() {
            let i = self.scanned;
            let b = text[i];
            self.scanned += 1;
            let Some(start) = self.start else {
                if b == b'{' || b == b'[' {
                    self.start = Some(i);
                    self.depth = 1;
                }
                continue;
            };
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.start = None;
                        if serde_json::from_slice::<serde::de::IgnoredAny>(&text[start..=i]).is_ok()
                        {
                            return true;
                        }
                    }
                }
                _ => {}
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::FirstValue;

    fn ends_at(chunks: &[&str]) -> Option<usize> {
        let mut f = FirstValue::default();
        let mut text = Vec::new();
        for (k, c) in chunks.iter().enumerate() {
            text.extend_from_slice(c.as_bytes());
            if f.feed(&text) {
                return Some(k);
            }
        }
        None
    }

    #[test]
    fn stops_after_the_first_complete_value() {
        assert_eq!(
            ends_at(&["Sure: ", "{\"a\":", "[1,2]", "}", " more"]),
            Some(3)
        );
        // Brackets and quotes inside strings do not count.
        assert_eq!(ends_at(&["{\"a\":\"}]\\\"{\"", "}"]), Some(1));
        // A balanced span that is not JSON is skipped; the next value ends it.
        assert_eq!(ends_at(&["{oops}", " [true]"]), Some(1));
        assert_eq!(ends_at(&["{\"a\": 1", ", \"b\": {}"]), None);
        assert_eq!(ends_at(&["no json at all"]), None);
    }
}
