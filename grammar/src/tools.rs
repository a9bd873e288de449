//! One assistant turn with tools: tool calls, or the final answer.
//!
//! [`ToolTurn`] is a [`ByteAutomaton`] over the whole turn, built from the compiled
//! `parameters` automaton of every tool and the final answer's form ([`FinalAnswer`]):
//!
//! ```text
//! turn   := text? calls | text | json
//! calls  := call ("\n" call)*                  (between min_calls and max_calls of them)
//! call   := "<tool_call>\n{\"name\": \"" NAME "\", \"arguments\": " ARGS "}\n</tool_call>"
//! text   := free text, at least one byte, whose lines do not begin like a call; before
//!           calls it ends a line
//! json   := a JSON value of the answer schema (`response_format`), instead of text
//! ```
//!
//! `NAME` is exactly one of the tools' names and `ARGS` a valid instance of that tool's
//! `parameters` (its own automaton, so compact JSON with no raw newline). The call
//! wrapper is the Hermes form Qwen2.5's chat template writes (`<tool_call>` is one token
//! of its vocabulary). No line of free text may begin (after any indent) with `{`, `[`,
//! `<` or a backtick (only `<` when no call is possible, as with `tool_choice: none`),
//! and the text may not begin with whitespace; a `<` at the very
//! start of a line is the opener of a call (when calls are allowed). So a call the model
//! begins, a bare `{"name"`, a code fence or a tag, can only be a real one, and text
//! the model writes before its calls ("Here are the calls:") is the turn's content. A
//! JSON answer starts with `{`/`[`/a literal, never `<`, so the first byte decides the
//! branch and the automaton stays deterministic.
//!
//! Every state can reach acceptance, as the contract asks: a call in progress finishes
//! through its tool's shortest arguments, and the answer through its own automaton.

use std::sync::Arc;

use crate::automaton::{ByteAutomaton, PlainKey};
use crate::compile::machine::State as JsonState;
use crate::compile::Automaton;

/// The tag that opens a call: one token in Qwen2.5's vocabulary.
pub const CALL_TAG: &str = "<tool_call>";
/// What opens a call, up to the first byte of the name.
pub const CALL_OPEN: &[u8] = b"<tool_call>\n{\"name\": \"";
/// Between the name and the arguments.
pub const CALL_MID: &[u8] = b"\", \"arguments\": ";
/// What closes a call.
pub const CALL_CLOSE: &[u8] = b"}\n</tool_call>";
/// Between two calls.
pub const CALL_SEP: u8 = b'\n';

/// The shortest text answer, written only when the budget leaves room for nothing else:
/// an empty turn is not an answer (a client reads it as the model saying nothing).
pub const SHORTEST_TEXT: &[u8] = b".";

/// The first bytes free text may not start with (see the module docs).
pub const TEXT_FORBIDDEN_START: &[u8] = b"{[<` \t\n\r";
/// The first bytes free text may not start with when no call is possible.
pub const NO_CALL_TEXT_FORBIDDEN_START: &[u8] = b"< \t\n\r";
/// The bytes no line of free text may begin with, after any indent (`<` alone when no
/// call is possible).
pub const LINE_FORBIDDEN_START: &[u8] = b"{[<`";

/// A tool the turn may call.
#[derive(Clone)]
pub struct ToolSpec {
    /// Its name: 1 to 64 bytes, none of them `"`, `\` or a control character.
    pub name: String,
    /// Its `parameters`, compiled (a JSON object schema).
    pub parameters: Arc<Automaton>,
}

/// The turn's other branch.
#[derive(Clone)]
pub enum FinalAnswer {
    /// Only calls (`tool_choice: "required"` or a named tool).
    None,
    /// Free text that does not begin like a call.
    Text,
    /// A JSON value of this schema (`response_format`).
    Json(Arc<Automaton>),
}

/// Why a turn cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolTurnError {
    #[error(
        "tool name {0:?} must be 1 to 64 characters with no quote, backslash or control character"
    )]
    BadName(String),
    #[error("tool name {0:?} is given twice")]
    DuplicateName(String),
    #[error("the turn allows neither a call nor an answer")]
    Empty,
}

/// The automaton of one turn. Immutable; share it with `Arc`.
pub struct ToolTurn {
    /// Sorted by name bytes.
    tools: Vec<ToolSpec>,
    /// For each tool (same order): bytes from the name's first byte to the end of its
    /// shortest call.
    call_len: Vec<usize>,
    answer: FinalAnswer,
    min_calls: u16,
    max_calls: u16,
    /// Free text keeps the rules of a turn that may call (no line begins with `{`,
    /// `[`, `<` or a backtick) even where no call is possible ([`ToolTurn::answer_only`]).
    strict_text: bool,
}

/// A state of [`ToolTurn`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TurnState {
    /// Nothing written yet.
    Start,
    /// Inside free text: at the start of a line (after `\n`), in its indent (spaces,
    /// tabs), or past its first other byte.
    Text(Line),
    /// Inside the JSON answer.
    Answer(JsonState),
    /// `pos` bytes of the opener (`CALL_OPEN`, after a `CALL_SEP` when `calls > 0`).
    Open { pos: u8, calls: u16 },
    /// Inside a name: the tools `lo..hi` (sorted) share the `depth` bytes written.
    Name {
        lo: u32,
        hi: u32,
        depth: u16,
        calls: u16,
    },
    /// `pos` bytes of `CALL_MID` after tool `tool`'s name.
    Mid { tool: u32, pos: u8, calls: u16 },
    /// Inside tool `tool`'s arguments.
    Args { tool: u32, s: JsonState, calls: u16 },
    /// `pos` bytes of `CALL_CLOSE`.
    Close { pos: u8, calls: u16 },
    /// `calls` calls complete.
    After { calls: u16 },
}

/// Where free text is within its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Line {
    Start,
    Indent,
    Rest,
}

fn name_ok(n: &str) -> bool {
    (1..=64).contains(&n.len()) && !n.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

impl ToolTurn {
    /// A turn with at least `min_calls` (0 or 1; more is read as 1) and at most
    /// `max_calls` calls of `tools`, or (when `min_calls` is 0) the `answer`.
    pub fn new(
        mut tools: Vec<ToolSpec>,
        answer: FinalAnswer,
        min_calls: u16,
        max_calls: u16,
    ) -> Result<ToolTurn, ToolTurnError> {
        for t in &tools {
            if !name_ok(&t.name) {
                return Err(ToolTurnError::BadName(t.name.clone()));
            }
        }
        tools.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        for w in tools.windows(2) {
            if w[0].name == w[1].name {
                return Err(ToolTurnError::DuplicateName(w[0].name.clone()));
            }
        }
        let min_calls = min_calls.min(1);
        let answer = if min_calls > 0 {
            FinalAnswer::None
        } else {
            answer
        };
        let calls_possible = !tools.is_empty() && max_calls > 0 && min_calls <= max_calls;
        if !calls_possible && matches!(answer, FinalAnswer::None) {
            return Err(ToolTurnError::Empty);
        }
        let call_len = tools
            .iter()
            .map(|t| {
                let p = &t.parameters;
                t.name.len()
                    + CALL_MID.len()
                    + p.shortest_completion(&p.start()).len()
                    + CALL_CLOSE.len()
            })
            .collect();
        let (min_calls, max_calls) = if calls_possible {
            (min_calls, max_calls)
        } else {
            (0, 0)
        };
        Ok(ToolTurn {
            tools,
            call_len,
            answer,
            min_calls,
            max_calls,
            strict_text: calls_possible,
        })
    }

    /// The answer alone, for a turn that had tools but may call none of them now (its
    /// calls would repeat calls already answered): no call, and free text that still
    /// may not begin a line like one (`{`, `[`, `<`, a backtick), so a model that means
    /// to call cannot write the call out as text instead.
    pub fn answer_only(answer: FinalAnswer) -> Result<ToolTurn, ToolTurnError> {
        if matches!(answer, FinalAnswer::None) {
            return Err(ToolTurnError::Empty);
        }
        Ok(ToolTurn {
            tools: Vec::new(),
            call_len: Vec::new(),
            answer,
            min_calls: 0,
            max_calls: 0,
            strict_text: true,
        })
    }

    /// The tools' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name.as_str())
    }

    fn opener(calls: u16) -> &'static [u8] {
        // The separator and the opener as one literal: "\n<tool_call>..." after a call.
        const SEP_OPEN: &[u8] = b"\n<tool_call>\n{\"name\": \"";
        debug_assert_eq!(&SEP_OPEN[1..], CALL_OPEN);
        debug_assert!(CALL_OPEN.starts_with(CALL_TAG.as_bytes()));
        debug_assert_eq!(SEP_OPEN[0], CALL_SEP);
        if calls == 0 {
            CALL_OPEN
        } else {
            SEP_OPEN
        }
    }

    fn may_call(&self, calls: u16) -> bool {
        calls < self.max_calls
    }

    /// The shortest tool (by call length) among `lo..hi`, and its remaining bytes after
    /// `depth` bytes of its name.
    fn cheapest(&self, lo: u32, hi: u32, depth: usize) -> (u32, usize) {
        (lo..hi)
            .map(|i| (i, self.call_len[i as usize] - depth))
            .min_by_key(|&(_, l)| l)
            .expect("a name range is never empty")
    }

    fn name_bytes(&self, i: u32) -> &[u8] {
        self.tools[i as usize].name.as_bytes()
    }

    /// The first tool in `lo..hi` whose name has byte `b` at `depth`, and the range of
    /// them (names are sorted, so they are contiguous).
    fn narrow(&self, lo: u32, hi: u32, depth: usize, b: u8) -> Option<(u32, u32)> {
        let has = |i: u32| self.name_bytes(i).get(depth) == Some(&b);
        let first = (lo..hi).find(|&i| has(i))?;
        let end = (first..hi).find(|&i| !has(i)).unwrap_or(hi);
        Some((first, end))
    }

    fn start_call(&self, calls: u16) -> TurnState {
        TurnState::Name {
            lo: 0,
            hi: self.tools.len() as u32,
            depth: 0,
            calls,
        }
    }

    fn args(&self, tool: u32) -> &Automaton {
        &self.tools[tool as usize].parameters
    }

    /// The bytes free text may not start with.
    fn text_held_at_start(&self) -> &'static [u8] {
        if self.strict_text {
            TEXT_FORBIDDEN_START
        } else {
            NO_CALL_TEXT_FORBIDDEN_START
        }
    }

    /// One byte of free text at `line`.
    fn text_step(&self, line: Line, b: u8) -> Option<TurnState> {
        match (line, b) {
            (Line::Start, b'<') if self.may_call(0) => Some(TurnState::Open { pos: 1, calls: 0 }),
            // With no call possible (`tool_choice: none`), only `<` is held back: code,
            // JSON and lists are ordinary text then, and a line still cannot open a
            // call-like tag that a client would read as a leaked call.
            (Line::Start | Line::Indent, b)
                if LINE_FORBIDDEN_START.contains(&b) && (self.strict_text || b == b'<') =>
            {
                None
            }
            (_, b'\n') => Some(TurnState::Text(Line::Start)),
            (Line::Start | Line::Indent, b' ' | b'\t' | b'\r') => {
                Some(TurnState::Text(Line::Indent))
            }
            _ => Some(TurnState::Text(Line::Rest)),
        }
    }

    /// The bytes `text_step` takes at `line`, as a set.
    fn text_bytes(&self, line: Line, set: &mut [u64; 4]) {
        for b in 0..=255u8 {
            if self.text_step(line, b).is_some() {
                set[b as usize >> 6] |= 1u64 << (b & 63);
            }
        }
    }
}

impl ByteAutomaton for ToolTurn {
    type State = TurnState;

    fn start(&self) -> TurnState {
        TurnState::Start
    }

    fn step(&self, s: &TurnState, b: u8) -> Option<TurnState> {
        use TurnState::*;
        match s {
            Start => {
                if b == CALL_OPEN[0] && self.may_call(0) {
                    return Some(Open { pos: 1, calls: 0 });
                }
                match &self.answer {
                    FinalAnswer::None => None,
                    FinalAnswer::Text => (!self.text_held_at_start().contains(&b))
                        .then(|| self.text_step(Line::Start, b))
                        .flatten(),
                    FinalAnswer::Json(a) => a.step(&a.start(), b).map(Answer),
                }
            }
            Text(line) => self.text_step(*line, b),
            Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => a.step(j, b).map(Answer),
                _ => None,
            },
            Open { pos, calls } => {
                let lit = Self::opener(*calls);
                let pos = *pos as usize;
                if lit[pos] != b {
                    return None;
                }
                if pos + 1 == lit.len() {
                    Some(self.start_call(*calls))
                } else {
                    Some(Open {
                        pos: pos as u8 + 1,
                        calls: *calls,
                    })
                }
            }
            Name {
                lo,
                hi,
                depth,
                calls,
            } => {
                let d = *depth as usize;
                if b == CALL_MID[0] {
                    // Sorted: a name that ends here is the first of the range.
                    return (self.name_bytes(*lo).len() == d).then_some(Mid {
                        tool: *lo,
                        pos: 1,
                        calls: *calls,
                    });
                }
                let (lo, hi) = self.narrow(*lo, *hi, d, b)?;
                Some(Name {
                    lo,
                    hi,
                    depth: *depth + 1,
                    calls: *calls,
                })
            }
            Mid { tool, pos, calls } => {
                let pos = *pos as usize;
                if CALL_MID[pos] != b {
                    return None;
                }
                if pos + 1 == CALL_MID.len() {
                    let a = self.args(*tool);
                    Some(Args {
                        tool: *tool,
                        s: a.start(),
                        calls: *calls,
                    })
                } else {
                    Some(Mid {
                        tool: *tool,
                        pos: pos as u8 + 1,
                        calls: *calls,
                    })
                }
            }
            Args { tool, s, calls } => {
                let a = self.args(*tool);
                if let Some(n) = a.step(s, b) {
                    return Some(Args {
                        tool: *tool,
                        s: n,
                        calls: *calls,
                    });
                }
                (b == CALL_CLOSE[0] && a.is_accepting(s)).then_some(Close {
                    pos: 1,
                    calls: *calls,
                })
            }
            Close { pos, calls } => {
                let pos = *pos as usize;
                if CALL_CLOSE[pos] != b {
                    return None;
                }
                if pos + 1 == CALL_CLOSE.len() {
                    Some(After {
                        calls: calls.saturating_add(1),
                    })
                } else {
                    Some(Close {
                        pos: pos as u8 + 1,
                        calls: *calls,
                    })
                }
            }
            After { calls } => (b == CALL_SEP && self.may_call(*calls)).then_some(Open {
                pos: 1,
                calls: *calls,
            }),
        }
    }

    fn is_accepting(&self, s: &TurnState) -> bool {
        match s {
            // An empty turn is no answer: text has at least one byte.
            TurnState::Start => false,
            TurnState::Text(_) => true,
            TurnState::Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => a.is_accepting(j),
                _ => false,
            },
            TurnState::After { calls } => *calls >= self.min_calls,
            _ => false,
        }
    }

    fn shortest_completion(&self, s: &TurnState) -> Vec<u8> {
        use TurnState::*;
        // The rest of a call from inside its name or later, then nothing more: one
        // call always satisfies `min_calls` (0 or 1, see `new`).
        let finish_from_name = |lo: u32, hi: u32, depth: usize| -> Vec<u8> {
            let (i, _) = self.cheapest(lo, hi, depth);
            let a = self.args(i);
            let mut out = self.name_bytes(i)[depth..].to_vec();
            out.extend_from_slice(CALL_MID);
            out.extend(a.shortest_completion(&a.start()));
            out.extend_from_slice(CALL_CLOSE);
            out
        };
        let n = self.tools.len() as u32;
        match s {
            Start => {
                let call = (self.may_call(0)).then(|| {
                    let mut v = CALL_OPEN.to_vec();
                    v.extend(finish_from_name(0, n, 0));
                    v
                });
                let answer = match &self.answer {
                    FinalAnswer::None => None,
                    FinalAnswer::Text => Some(SHORTEST_TEXT.to_vec()),
                    FinalAnswer::Json(a) => Some(a.shortest_completion(&a.start())),
                };
                match (call, answer) {
                    (Some(c), Some(a)) => {
                        if a.len() <= c.len() {
                            a
                        } else {
                            c
                        }
                    }
                    (Some(c), None) => c,
                    (None, Some(a)) => a,
                    (None, None) => Vec::new(),
                }
            }
            Text(_) => Vec::new(),
            Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => a.shortest_completion(j),
                _ => Vec::new(),
            },
            Open { pos, calls } => {
                let mut v = Self::opener(*calls)[*pos as usize..].to_vec();
                v.extend(finish_from_name(0, n, 0));
                v
            }
            Name { lo, hi, depth, .. } => finish_from_name(*lo, *hi, *depth as usize),
            Mid { tool, pos, .. } => {
                let a = self.args(*tool);
                let mut v = CALL_MID[*pos as usize..].to_vec();
                v.extend(a.shortest_completion(&a.start()));
                v.extend_from_slice(CALL_CLOSE);
                v
            }
            Args { tool, s, .. } => {
                let mut v = self.args(*tool).shortest_completion(s);
                v.extend_from_slice(CALL_CLOSE);
                v
            }
            Close { pos, .. } => CALL_CLOSE[*pos as usize..].to_vec(),
            After { .. } => Vec::new(),
        }
    }

    fn plain_chars_allowed(&self, s: &TurnState) -> Option<u32> {
        match s {
            TurnState::Text(Line::Rest) => Some(u32::MAX),
            TurnState::Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => a.plain_chars_allowed(j),
                _ => None,
            },
            TurnState::Args { tool, s, .. } => self.args(*tool).plain_chars_allowed(s),
            _ => None,
        }
    }

    fn plain_key(&self, s: &TurnState) -> Option<PlainKey<'_>> {
        // Keys of different automata must never meet: each gets its own top bits.
        fn tag(k: PlainKey<'_>, owner: u64) -> Option<PlainKey<'_>> {
            (k.key >> 48 == 0).then(|| PlainKey {
                key: k.key | (owner << 48),
                ..k
            })
        }
        match s {
            TurnState::Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => a.plain_key(j).and_then(|k| tag(k, 1)),
                _ => None,
            },
            TurnState::Args { tool, s, .. } => {
                let owner = u64::from(*tool) + 2;
                if owner >= 1 << 16 {
                    return None;
                }
                self.args(*tool).plain_key(s).and_then(|k| tag(k, owner))
            }
            _ => None,
        }
    }

    fn allowed_bytes(&self, s: &TurnState) -> Option<[u64; 4]> {
        let mut set = [0u64; 4];
        let add = |set: &mut [u64; 4], b: u8| set[b as usize >> 6] |= 1u64 << (b & 63);
        match s {
            TurnState::Start => {
                if self.may_call(0) {
                    add(&mut set, CALL_OPEN[0]);
                }
                match &self.answer {
                    FinalAnswer::None => {}
                    FinalAnswer::Text => {
                        for b in 0..=255u8 {
                            if !self.text_held_at_start().contains(&b) {
                                add(&mut set, b);
                            }
                        }
                    }
                    FinalAnswer::Json(a) => {
                        let s0 = a.start();
                        let sub = a.allowed_bytes(&s0)?;
                        for (w, x) in set.iter_mut().zip(sub) {
                            *w |= x;
                        }
                    }
                }
            }
            TurnState::Text(Line::Rest) => return None,
            TurnState::Text(line) => self.text_bytes(*line, &mut set),
            TurnState::Answer(j) => match &self.answer {
                FinalAnswer::Json(a) => return a.allowed_bytes(j),
                _ => {}
            },
            TurnState::Open { pos, calls } => add(&mut set, Self::opener(*calls)[*pos as usize]),
            TurnState::Name { lo, hi, depth, .. } => {
                let d = *depth as usize;
                for i in *lo..*hi {
                    match self.name_bytes(i).get(d) {
                        Some(&b) => add(&mut set, b),
                        None => add(&mut set, CALL_MID[0]),
                    }
                }
            }
            TurnState::Mid { pos, .. } => add(&mut set, CALL_MID[*pos as usize]),
            TurnState::Args { tool, s, .. } => {
                let a = self.args(*tool);
                set = a.allowed_bytes(s)?;
                if a.is_accepting(s) {
                    add(&mut set, CALL_CLOSE[0]);
                }
            }
            TurnState::Close { pos, .. } => add(&mut set, CALL_CLOSE[*pos as usize]),
            TurnState::After { calls } => {
                if self.may_call(*calls) {
                    add(&mut set, CALL_SEP);
                }
            }
        }
        Some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{compile, Config};
    use serde_json::json;

    fn tool(name: &str, params: serde_json::Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            parameters: compile(&params, &Config::default()).unwrap(),
        }
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            tool(
                "get_weather",
                json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}),
            ),
            tool(
                "get_time",
                json!({"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}),
            ),
            tool(
                "get",
                json!({"type":"object","properties":{},"additionalProperties":false}),
            ),
        ]
    }

    fn run(t: &ToolTurn, text: &str) -> Option<TurnState> {
        let mut s = t.start();
        for &b in text.as_bytes() {
            s = t.step(&s, b)?;
        }
        Some(s)
    }

    fn accepts(t: &ToolTurn, text: &str) -> bool {
        run(t, text).is_some_and(|s| t.is_accepting(&s))
    }

    fn call(name: &str, args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
    }

    #[test]
    fn answer_only_takes_text_that_does_not_begin_like_a_call_and_no_call() {
        let t = ToolTurn::answer_only(FinalAnswer::Text).unwrap();
        assert!(accepts(&t, "It is sunny."));
        assert!(accepts(&t, "a <b> c"));
        assert!(!accepts(&t, ""));
        for bad in [
            "<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>",
            "{\"name\": \"get\"}",
            "Here:\n{",
            "Here:\n```",
            "[1]",
            " hi",
        ] {
            assert!(run(&t, bad).is_none(), "{bad:?}");
        }
        assert!(ToolTurn::answer_only(FinalAnswer::None).is_err());
    }

    #[test]
    fn auto_takes_calls_or_text_that_does_not_begin_like_a_call() {
        let t = ToolTurn::new(tools(), FinalAnswer::Text, 0, u16::MAX).unwrap();
        let one = call("get_weather", r#"{"city":"Paris"}"#);
        assert!(accepts(&t, &one));
        let two = format!("{one}\n{}", call("get_time", r#"{"tz":"UTC"}"#));
        assert!(accepts(&t, &two));
        assert!(accepts(&t, &call("get", "{}")));
        assert!(accepts(&t, "It is sunny."));
        // An empty turn is no answer; the shortest is one byte.
        assert!(!accepts(&t, ""));
        assert!(accepts(&t, "."));
        assert_eq!(t.shortest_completion(&t.start()), SHORTEST_TEXT);
        for bad in [
            "{\"name\": \"get\"}",
            "```json\n{}",
            " hi",
            "[1]",
            "<tools>",
            "Here:\n{\"name\"",
            "Here:\n  {",
            "Here:\n```",
            "Here:\n<tools>",
        ] {
            assert!(run(&t, bad).is_none(), "{bad:?}");
        }
        // Text before the calls, ending a line; braces inside a line are text.
        assert!(accepts(&t, &format!("Here are the calls:\n\n{one}")));
        assert!(accepts(&t, "Use {x} and <b>.\n  ok"));
        assert!(run(&t, &format!("Here: {one}")).is_none());
        // Unknown names, near misses, bad or extra arguments: refused on the byte.
        assert!(run(&t, &call("get_weathers", "{}")).is_none());
        assert!(run(&t, &call("get_wheather", "{}")).is_none());
        assert!(run(&t, &call("get_weather", r#"{"city":1}"#)).is_none());
        assert!(run(&t, &call("get_weather", r#"{"city":"P","x":1}"#)).is_none());
        assert!(run(&t, &call("get_weather", "{}")).is_none());
        assert!(run(&t, &call("get_time", r#"{"tz":"PST"}"#)).is_none());
        // A call cut short is not accepted; neither is text after a call.
        assert!(!accepts(&t, &one[..one.len() - 1]));
        assert!(run(&t, &format!("{one} ok")).is_none());
    }

    #[test]
    fn required_and_single_call_modes() {
        let req = ToolTurn::new(tools(), FinalAnswer::Text, 1, u16::MAX).unwrap();
        assert!(!accepts(&req, ""));
        assert!(run(&req, "Sure").is_none());
        assert!(accepts(&req, &call("get", "{}")));
        let one = ToolTurn::new(tools(), FinalAnswer::Text, 0, 1).unwrap();
        let c = call("get", "{}");
        assert!(accepts(&one, &c));
        assert!(run(&one, &format!("{c}\n")).is_none());
        // No call at all: a line may not begin with `<`.
        let none = ToolTurn::new(tools(), FinalAnswer::Text, 0, 0).unwrap();
        assert!(run(&none, "<").is_none());
        assert!(run(&none, "a\n<").is_none());
        assert!(accepts(&none, "a <b>"));
        // Code, JSON and lists are text when no call can be made.
        for ok in [
            "```python\nprint(1)\n```",
            "{\"a\": 1}",
            "[1, 2]",
            "Here:\n  {x}\n- `y`",
        ] {
            assert!(accepts(&none, ok), "{ok:?}");
        }
        assert!(run(&none, " hi").is_none());
        assert!(run(&none, "a\n  <tool_call>").is_none());
        assert!(matches!(
            ToolTurn::new(vec![], FinalAnswer::None, 1, 1),
            Err(ToolTurnError::Empty)
        ));
        assert!(matches!(
            ToolTurn::new(vec![tool("a\"b", json!({}))], FinalAnswer::Text, 0, 1),
            Err(ToolTurnError::BadName(_))
        ));
    }

    #[test]
    fn a_json_answer_or_calls() {
        let ans = compile(
            &json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}),
            &Config::default(),
        )
        .unwrap();
        let t = ToolTurn::new(tools(), FinalAnswer::Json(ans), 0, u16::MAX).unwrap();
        assert!(accepts(&t, r#"{"ok":true}"#));
        assert!(!accepts(&t, ""));
        assert!(run(&t, "Hello").is_none());
        assert!(accepts(&t, &call("get_time", r#"{"tz":"CET"}"#)));
    }

    #[test]
    fn every_state_on_random_walks_completes_and_hints_agree_with_step() {
        let ans = compile(
            &json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}),
            &Config::default(),
        )
        .unwrap();
        let cases = [
            ToolTurn::new(tools(), FinalAnswer::Text, 0, u16::MAX).unwrap(),
            ToolTurn::new(tools(), FinalAnswer::Json(ans), 0, 2).unwrap(),
            ToolTurn::new(tools(), FinalAnswer::None, 1, 1).unwrap(),
            ToolTurn::new(tools(), FinalAnswer::Text, 0, 0).unwrap(),
        ];
        let mut rng = crate::sample::SplitRng::new(7);
        for t in &cases {
            for _ in 0..200 {
                let mut s = t.start();
                for _ in 0..rng.below(120) {
                    let allowed: Vec<u8> =
                        (0..=255u8).filter(|&b| t.step(&s, b).is_some()).collect();
                    if let Some(set) = t.allowed_bytes(&s) {
                        for &b in &allowed {
                            assert!(set[b as usize >> 6] >> (b & 63) & 1 == 1, "{s:?} {b}");
                        }
                    }
                    if allowed.is_empty() {
                        break;
                    }
                    let b = allowed[rng.below(allowed.len())];
                    s = t.step(&s, b).unwrap();
                }
                let mut end = s.clone();
                for b in t.shortest_completion(&s) {
                    end = t
                        .step(&end, b)
                        .unwrap_or_else(|| panic!("{s:?}: completion refused"));
                }
                assert!(t.is_accepting(&end), "{s:?} -> {end:?}");
            }
        }
    }
}
