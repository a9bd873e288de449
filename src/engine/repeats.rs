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
//! A later call of a turn that makes up what it asks is treated the same way. Its new
//! values are the non-empty strings and the integers other than 0 that no earlier call
//! of the turn holds and that are not a member of an `enum` of the tools' parameters
//! (the tool's own words: "USD", "six_months"). A call after the turn's first is made
//! up when a new integer is not stated in the conversation (its user and tool
//! messages, as grounded arguments read it; a run of digits of its own, thousands
//! separators aside), or when it has new values and the conversation states none of
//! them (strings case-blind). The 0.5B model asked for two GCDs writes the two, then
//! `math_gcd(12, 18)`, `(25, 35)` and four more of its own; asked for one game's
//! rewards, it goes on to "Mission 2" ... "Mission 6". A string the model normalised
//! ("San Francisco, CA" for "San Francisco") does not cut a call alone. The turn's
//! first call is never judged so, nor a later one that only repeats values.
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
use super::ground::fold;

/// The closing tag of a call.
const CLOSE_TAG: &[u8] = b"</tool_call>";

/// The calls a turn may not make again, and where its run was stopped.
pub struct Repeats {
    /// Earlier calls' texts, from the conversation's assistant messages.
    known: Vec<Vec<u8>>,
    /// The byte where the output was stopped at a repeat: the start of the repeated
    /// call (with the separator before it).
    cut: Mutex<Option<usize>>,
    /// What the conversation states, for the values of a turn's later calls.
    stated: Stated,
    /// The members of the `enum`s of the tools' parameters: never new values.
    declared: Vec<serde_json::Value>,
}

/// The conversation's text as a later call's values are looked up in it.
struct Stated {
    /// Lowercased, each whitespace run one space.
    folded: String,
    /// As written, with the commas between digit groups left out (`700,000`).
    digits: Vec<u8>,
}

impl Stated {
    fn new(conversation: &str) -> Stated {
        let b = conversation.as_bytes();
        let mut digits = Vec::with_capacity(b.len());
        for (i, &c) in b.iter().enumerate() {
            let grouping = c == b','
                && i > 0
                && b[i - 1].is_ascii_digit()
                && b.get(i + 1..i + 4)
                    .is_some_and(|g| g.iter().all(u8::is_ascii_digit));
            if !grouping {
                digits.push(c);
            }
        }
        Stated {
            folded: fold(conversation),
            digits,
        }
    }

    /// Does the conversation state `v`: a string (case and spaces aside), or an
    /// integer as a run of digits of its own (not part of a longer number)?
    fn states(&self, v: &serde_json::Value) -> bool {
        use serde_json::Value;
        match v {
            Value::String(t) => self.folded.contains(&fold(t)),
            Value::Number(n) => match n.as_i64() {
                None => true,
                Some(i) => {
                    let d = i.unsigned_abs().to_string();
                    let d = d.as_bytes();
                    let h = &self.digits;
                    (0..h.len().saturating_sub(d.len() - 1)).any(|p| {
                        h[p..].starts_with(d)
                            && (p == 0 || !(h[p - 1].is_ascii_digit() || h[p - 1] == b'.'))
                            && h.get(p + d.len()).is_none_or(|c| !c.is_ascii_digit())
                    })
                }
            },
            _ => true,
        }
    }
}

/// Is `v` a value a later call is judged by: a non-empty string, or an integer other
/// than 0 (not an empty string, 0, a boolean, null or a fraction)?
fn judged(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(t) => !t.trim().is_empty(),
        serde_json::Value::Number(n) => n.as_i64().is_some_and(|i| i != 0),
        _ => false,
    }
}

/// The members of every `enum` in `schema`.
fn enum_members(schema: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match schema {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("enum", serde_json::Value::Array(a)) => out.extend(a.iter().cloned()),
                    _ => enum_members(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| enum_members(v, out)),
        _ => {}
    }
}

/// The leaves of a call's arguments (`{"name": ..., "arguments": {...}}` between its
/// tags); none when the call does not parse.
fn call_leaves(call: &[u8]) -> Vec<serde_json::Value> {
    let inner = call
        .strip_prefix(CALL_TAG.as_bytes())
        .and_then(|c| c.strip_suffix(CLOSE_TAG))
        .unwrap_or(call);
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(inner.trim_ascii()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![v.get("arguments").cloned().unwrap_or_default()];
    while let Some(x) = stack.pop() {
        match x {
            serde_json::Value::Object(m) => stack.extend(m.into_iter().map(|(_, v)| v)),
            serde_json::Value::Array(a) => stack.extend(a),
            leaf => out.push(leaf),
        }
    }
    out
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
    /// The calls written in `assistant` texts (the rendered assistant messages), the
    /// `conversation`'s text (its user and tool messages) that a turn's later calls
    /// must take their new values from, and the tools' `parameters` schemas (their
    /// enums' members are never new values).
    pub fn new<'a>(
        assistant: impl IntoIterator<Item = &'a str>,
        conversation: &str,
        params: impl IntoIterator<Item = &'a serde_json::Value>,
    ) -> Repeats {
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
            stated: Stated::new(conversation),
            declared: {
                let mut d = Vec::new();
                params.into_iter().for_each(|p| enum_members(p, &mut d));
                d
            },
        }
    }

    /// Whether there is anything to repeat.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Judges a turn's output: its first complete call that repeats a known call or an
    /// earlier call of the turn, or that makes up its new values, and how much of it is
    /// safe to show.
    pub fn judge(&self, out: &[u8]) -> Judged {
        let spans = call_spans(out);
        let mut seen: Vec<&[u8]> = Vec::new();
        let mut values: Vec<serde_json::Value> = Vec::new();
        let mut end_of_last = None;
        for &(s, e) in &spans {
            let call = &out[s..e];
            let leaves = call_leaves(call);
            let new: Vec<&serde_json::Value> = leaves
                .iter()
                .filter(|v| judged(v) && !values.contains(v) && !self.declared.contains(v))
                .collect();
            let made_up = !seen.is_empty()
                && (new.iter().any(|v| v.is_number() && !self.stated.states(v))
                    || (!new.is_empty() && !new.iter().any(|v| self.stated.states(v))));
            if made_up || self.known.iter().any(|k| k == call) || seen.contains(&call) {
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
            values.extend(leaves);
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
                // After a first call, every call is held until it is judged whole.
                let could_repeat = pending.len() < tag.len()
                    || !seen.is_empty()
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
        let r = Repeats::new([earlier.as_str()], "", []);
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
        let r = Repeats::new([], "", []);
        let c = call("a", "{}");
        let twice = format!("{c}\n{c}");
        assert_eq!(r.judge(twice.as_bytes()).repeat_at, Some(c.len()));
        assert_eq!(r.judge(c.as_bytes()).repeat_at, None);
        // The second, in progress, is held while it is the first's prefix.
        let half = format!("{c}\n{}", &c[..20]);
        assert_eq!(r.judge(half.as_bytes()).safe, c.len());
    }

    #[test]
    fn a_later_call_that_makes_up_its_values_is_cut_with_its_separator() {
        let said = "GCD of 36 and 48, and of 60 and 96? Loan of $700,000 at Wells Fargo.";
        let params = serde_json::json!({"properties": {"cur": {"enum": ["USD", "JPY"]}}});
        let r = Repeats::new([], said, [&params]);
        let a = call("gcd", r#"{"a":36,"b":48}"#);
        let b = call("gcd", r#"{"a":60,"b":96}"#);
        let made_up = call("gcd", r#"{"a":12,"b":18}"#);
        let two = format!("{a}\n{b}");
        assert_eq!(r.judge(two.as_bytes()).repeat_at, None);
        let three = format!("{two}\n{made_up}");
        assert_eq!(r.judge(three.as_bytes()).repeat_at, Some(two.len()));
        // The first call is never judged so.
        assert_eq!(r.judge(made_up.as_bytes()).repeat_at, None);
        // A value an earlier call holds, 0, an empty string, booleans and fractions
        // are not judged; digit groups and case are read through.
        let loan = call(
            "loan",
            r#"{"bank":"wells fargo","amount":700000,"unit":"cm"}"#,
        );
        let again = call(
            "loan",
            r#"{"bank":"Wells  Fargo","amount":700000,"unit":"cm","rate":0.05,"x":0,"y":"","z":true}"#,
        );
        let t = format!("{loan}\n{again}");
        assert_eq!(r.judge(t.as_bytes()).repeat_at, None);
        // Part of a longer number is not the number: 48 is stated, 4 and 8 are not.
        let part = call("gcd", r#"{"a":4,"b":36}"#);
        let t = format!("{a}\n{part}");
        assert_eq!(r.judge(t.as_bytes()).repeat_at, Some(a.len()));
        // Strings: cut only when none of the new values is stated.
        let s = call("gcd", r#"{"a":36,"name":"Mission 2"}"#);
        let t = format!("{a}\n{s}");
        assert_eq!(r.judge(t.as_bytes()).repeat_at, Some(a.len()));
        let s = call("loan", r#"{"bank":"Wells Fargo, CA","b":60}"#);
        let t = format!("{a}\n{s}");
        assert_eq!(r.judge(t.as_bytes()).repeat_at, None, "60 is stated");
        // An enum's member is the tool's word, never a new value.
        let s = call("fx", r#"{"cur":"JPY"}"#);
        let t = format!("{a}\n{s}");
        assert_eq!(r.judge(t.as_bytes()).repeat_at, None);
        // A later call in progress is held back until it is judged whole.
        let half = format!("{a}\n{}", &b[..b.len() - 3]);
        assert_eq!(r.judge(half.as_bytes()).safe, a.len());
    }

    #[test]
    fn a_tag_inside_a_line_of_text_is_not_a_call() {
        let text = format!("see {}", call("a", "{}"));
        assert!(call_spans(text.as_bytes()).is_empty());
    }
}
