//! Calls that repeat: a tool turn does not make a call that the conversation already
//! made (its result is in the prompt) or that the turn itself made a moment ago.
//!
//! A small model given tool results often calls the same tools again with the same
//! arguments, turn after turn, instead of answering: an agent's loop then never ends
//! (an orchestrator with three sub-agents made 42 calls in 6 turns, 18 of them in one).
//! A repeat is the same call text, byte for byte: `<tool_call>` to `</tool_call>`, as
//! the conversation renders earlier calls ([`super::tools::call_text`]) and as the
//! turn writes its own; a model that copies a call from its context writes the same
//! bytes.
//!
//! ```text
//! the output as it grows ─▶ Repeats::judge ─▶ a repeat: stop there
//!                                          └▶ else: the bytes that are safe to stream
//! ```
//!
//! When the run stops at a repeat, the turn is cut back to the end of the last call
//! that was not one ([`Repeats::cut`]): the calls before it stand, and the turn ends.
//! When none stands, the turn is decoded again with no call allowed
//! ([`super::tools::Toolbox::answer_only`]), so the model answers from the results it
//! has. While the call being written could still turn out to be a repeat (its bytes so
//! far begin a known call), the watch holds it back from the stream, so a client never
//! sees a call that is then taken back.

use std::sync::{Arc, Mutex};

use formwork_grammar::tools::{CALL_SEP, CALL_TAG};

use super::decode::Watch;

/// The closing tag of a call.
const CLOSE_TAG: &[u8] = b"</tool_call>";

/// The calls a turn may not make again, and where its run was stopped.
pub struct Repeats {
    /// Earlier calls' texts, from the conversation's assistant messages.
    known: Vec<Vec<u8>>,
    /// The byte where the output was stopped at a repeat: the start of the repeated
    /// call (with the separator before it).
    cut: Mutex<Option<usize>>,
}

/// What [`Repeats::judge`] found in an output.
#[derive(Debug, PartialEq, Eq)]
pub struct Judged {
    /// A complete call repeats an earlier one: the output is to be cut here.
    pub repeat_at: Option<usize>,
    /// The bytes that may be streamed: all but a call in progress that could still
    /// be a repeat.
    pub safe: usize,
}

impl Repeats {
    /// The calls written in `assistant` texts (the rendered assistant messages).
    pub fn new<'a>(assistant: impl IntoIterator<Item = &'a str>) -> Repeats {
        let mut known = Vec::new();
        for text in assistant {
            for (s, e) in call_spans(text.as_bytes()) {
                let call = text.as_bytes()[s..e].to_vec();
                if !known.contains(&call) {
                    known.push(call);
                }
            }
        }
        Repeats {
            known,
            cut: Mutex::new(None),
        }
    }

    /// Whether there is anything to repeat.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Judges a turn's output: its first complete call that repeats a known call or an
    /// earlier call of the turn, and how much of it is safe to show.
    pub fn judge(&self, out: &[u8]) -> Judged {
        let spans = call_spans(out);
        let mut seen: Vec<&[u8]> = Vec::new();
        let mut end_of_last = None;
        for &(s, e) in &spans {
            let call = &out[s..e];
            if self.known.iter().any(|k| k == call) || seen.contains(&call) {
                let at = if s > 0 && out[s - 1] == CALL_SEP {
                    s - 1
                } else {
                    s
                };
                return Judged {
                    repeat_at: Some(at),
                    safe: at,
                };
            }
            seen.push(call);
            end_of_last = Some(e);
        }
        // The call being written (a `<` at the start of a line after the last complete
        // call): held back, with the separator before it, while it begins a known call.
        let from = end_of_last.unwrap_or(0);
        let tail = &out[from..];
        let tag = CALL_TAG.as_bytes();
        let opens_call = |p: usize| {
            let rest = &tail[p..];
            (p == 0 || tail[p - 1] == b'\n')
                && if rest.len() < tag.len() {
                    !rest.is_empty() && tag.starts_with(rest)
                } else {
                    rest.starts_with(tag)
                }
        };
        // The first: inside a call, its closing tag begins a line too.
        let open = (0..tail.len()).find(|&p| opens_call(p));
        let safe = match open {
            Some(p) => {
                let pending = &tail[p..];
                let could_repeat = pending.len() < tag.len()
                    || self
                        .known
                        .iter()
                        .map(Vec::as_slice)
                        .chain(seen.iter().copied())
                        .any(|k| k.starts_with(pending));
                let p = if p > 0 && tail[p - 1] == CALL_SEP {
                    p - 1
                } else {
                    p
                };
                if could_repeat {
                    from + p
                } else {
                    out.len()
                }
            }
            None => out.len(),
        };
        Judged {
            repeat_at: None,
            safe,
        }
    }

    /// The watch for the run: stops it at a repeat (noting where), and shows `inner`
    /// only the bytes that are safe.
    pub fn watch(self: &Arc<Self>, inner: Option<Watch>) -> Watch {
        let me = self.clone();
        Watch(Arc::new(move |bytes: &[u8]| {
            let j = me.judge(bytes);
            if let Some(inner) = &inner {
                if !(inner.0)(&bytes[..j.safe]) {
                    return false;
                }
            }
            match j.repeat_at {
                Some(at) => {
                    *me.cut.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
                    false
                }
                None => true,
            }
        }))
    }

    /// Where the run was stopped at a repeat, if it was.
    pub fn cut(&self) -> Option<usize> {
        *self.cut.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The byte spans of the complete calls in `text`: from a `<tool_call>` at the start of
/// a line to the end of its `</tool_call>`.
fn call_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let tag = CALL_TAG.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = find(&text[i..], tag) {
        let s = i + p;
        if s > 0 && text[s - 1] != b'\n' {
            i = s + tag.len();
            continue;
        }
        match find(&text[s..], CLOSE_TAG) {
            Some(q) => {
                let e = s + q + CLOSE_TAG.len();
                out.push((s, e));
                i = e;
            }
            None => break,
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> String {
        super::super::tools::call_text(name, args)
    }

    #[test]
    fn a_call_the_conversation_made_is_a_repeat_and_is_held_while_it_may_be_one() {
        let earlier = format!("{}\n{}", call("a", r#"{"x":1}"#), call("b", "{}"));
        let r = Repeats::new([earlier.as_str()]);
        let same = call("a", r#"{"x":1}"#);
        let j = r.judge(same.as_bytes());
        assert_eq!(j.repeat_at, Some(0));
        // A new call goes through, and is shown once it differs from every known one.
        let new = call("a", r#"{"x":2}"#);
        assert_eq!(
            r.judge(new.as_bytes()),
            Judged {
                repeat_at: None,
                safe: new.len()
            }
        );
        let prefix = &new[..new.find("1").unwrap_or(new.find("2").unwrap())];
        assert_eq!(
            r.judge(prefix.as_bytes()).safe,
            0,
            "{prefix:?} may still repeat"
        );
        // Held to the last byte, the closing tag included (it too begins a line).
        for n in 1..same.len() {
            assert_eq!(r.judge(same[..n].as_bytes()).safe, 0, "{:?}", &same[..n]);
        }
        // After a new call, a repeat of a known one is cut with its separator.
        let turn = format!("{new}\n{}", call("b", "{}"));
        assert_eq!(r.judge(turn.as_bytes()).repeat_at, Some(new.len()));
        // Text before the calls is never held; a call after it is, from its line.
        assert_eq!(r.judge(b"Ecco").safe, 4);
        let text_then = format!("Ecco:\n{}", &same[..30]);
        assert_eq!(r.judge(text_then.as_bytes()).safe, 5);
    }

    #[test]
    fn a_call_the_turn_already_made_is_a_repeat() {
        let r = Repeats::new([]);
        let c = call("a", "{}");
        let twice = format!("{c}\n{c}");
        assert_eq!(r.judge(twice.as_bytes()).repeat_at, Some(c.len()));
        assert_eq!(r.judge(c.as_bytes()).repeat_at, None);
        // The second, in progress, is held while it is the first's prefix.
        let half = format!("{c}\n{}", &c[..20]);
        assert_eq!(r.judge(half.as_bytes()).safe, c.len());
    }

    #[test]
    fn a_tag_inside_a_line_of_text_is_not_a_call() {
        let text = format!("see {}", call("a", "{}"));
        assert!(call_spans(text.as_bytes()).is_empty());
    }
}
