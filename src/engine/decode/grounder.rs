//! Grounding take-backs in the masked loop: handed the output as it grows, it keeps a
//! model snapshot and matcher clone before each value that may be grounded, judges
//! each grounded string when it closes, and on one the document does not state goes
//! back and writes `null` in its place. With `--grounded` it also judges each object
//! row of an array as it closes, and on one that repeats an earlier row goes back to
//! the end of the row before and closes the array there, and cuts a string of a row
//! that holds several items to its first ([`Grounding::first_item`]), going back to
//! where that string started. In a row with an evidence field (`x-formwork-evidence`)
//! that is about the row, a grounded string or a number its evidence does not state
//! is taken back and written `null`.

use formwork_grammar::matcher::Matcher;
use formwork_models::runtime::LanguageModel;

use super::super::confidence::{self, Chosen};
use super::super::ground::{self, Grounding};
use super::mark::Mark;
use super::{Codec, DecodeOutput};

/// The loop's state just before a value that may be grounded: where a grounded string
/// that fails is taken back to.
struct Checkpoint {
    model: Box<dyn LanguageModel>,
    matcher: Matcher,
    pos: usize,
    tokens: usize,
    bytes: usize,
    ranges: usize,
}

/// The loop's grounding: the checkpoint before the value being written, and how far
/// the output's strings have been judged. Inert without grounded fields.
pub(super) struct Grounder<'a> {
    g: Option<&'a Grounding>,
    checkpoint: Option<Checkpoint>,
    judged: usize,
    /// The mark of the latest decision point.
    last_mark: Option<Mark>,
    /// The latest mark at or before the end of the last row that closed: where a row
    /// that repeats an earlier one is taken back to.
    row_mark: Option<Mark>,
    /// Rows judged so far (their count in the scan).
    rows_judged: usize,
    /// The latest mark taken outside any string value: at or before the start of the
    /// string being written, where a string cut to its first item is replayed from.
    value_mark: Option<Mark>,
}

impl<'a> Grounder<'a> {
    /// Inert when `g` is `None`.
    pub(super) fn new(g: Option<&'a Grounding>) -> Self {
        Grounder {
            g,
            checkpoint: None,
            judged: 0,
            last_mark: None,
            row_mark: None,
            rows_judged: 0,
            value_mark: None,
        }
    }

    /// Does grounding refuse `null` for the value that starts here (a date field the
    /// document gives a day, [`Grounding::refuses_null`])?
    pub(super) fn refuses_null(&self, out: &DecodeOutput) -> bool {
        let Some(g) = self.g else { return false };
        let s = ground::scan(&out.bytes);
        let Some(p) = &s.next_value else { return false };
        let earlier = s
            .strings
            .iter()
            .filter(|e| g.covers(&e.pattern))
            .map(|e| e.value.as_str());
        g.refuses_null(p, earlier)
    }

    /// Where the value that starts here is a grounded text field whose `null` may be
    /// weighed against a quotation ([`Grounding::weighs`]): the grounding and the
    /// field's pattern.
    pub(super) fn weighable(&self, out: &DecodeOutput) -> Option<(&'a Grounding, String)> {
        let g = self.g?;
        let p = ground::scan(&out.bytes).next_value?;
        g.weighs(&p).then_some((g, p))
    }

    /// Would `value` at `pattern` stand if written here, after the output's strings
    /// ([`Grounding::judge`])?
    pub(super) fn would_stand(&self, out: &DecodeOutput, pattern: &str, value: &str) -> bool {
        let Some(g) = self.g else { return true };
        let s = ground::scan(&out.bytes);
        let earlier = s
            .strings
            .iter()
            .map(|e| (e.pattern.as_str(), e.value.as_str()));
        g.judge(pattern, value, earlier)
    }

    /// Takes a [`Checkpoint`] when the text ends where the next value may be grounded.
    pub(super) fn checkpoint(
        &mut self,
        model: &dyn LanguageModel,
        matcher: &Matcher,
        pos: usize,
        out: &DecodeOutput,
    ) {
        let Some(g) = self.g else { return };
        let s = ground::scan(&out.bytes);
        if g.marks() {
            // The previous decision point lies at or before the end of the last row
            // that closed since: the place to go back to if the next row repeats.
            if let (Some(m), Some(row)) = (self.last_mark.take(), s.items.last()) {
                if m.bytes <= row.end && self.row_mark.as_ref().is_none_or(|r| r.bytes < m.bytes) {
                    self.row_mark = Some(m);
                }
            }
            self.last_mark = s.in_array.then(|| Mark::at(matcher, None, pos, out));
            if !s.open_value && self.last_mark.is_some() {
                self.value_mark.clone_from(&self.last_mark);
            }
        }
        let worth = match (&s.next_value, &s.before_value_in) {
            (Some(p), _) => g.covers(p),
            (None, Some(c)) => g.covers_inside(c),
            _ => false,
        };
        if worth && self.checkpoint.as_ref().map(|c| c.bytes) != Some(out.bytes.len()) {
            self.checkpoint = Some(Checkpoint {
                model: model.snapshot(),
                matcher: matcher.clone(),
                pos,
                tokens: out.tokens.len(),
                bytes: out.bytes.len(),
                ranges: out.forced_ranges.len(),
            });
        }
    }

    /// Judges the grounded strings completed since the last call (the output has
    /// grown, and the model has not been fed its new tokens). On the first that does
    /// not stand, goes back to the checkpoint before it, writes the same bytes up to
    /// the value and `null` in its place (one forward pass), and returns the logits
    /// after them; the loop goes on from there. `None`: nothing taken back.
    pub(super) fn back(
        &mut self,
        model: &mut Box<dyn LanguageModel>,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(g) = self.g else { return Ok(None) };
        let scan = ground::scan(&out.bytes);
        let since = self.judged;
        self.judged = out.bytes.len();
        for (i, s) in scan
            .strings
            .iter()
            .enumerate()
            .filter(|(_, s)| s.end > since)
        {
            if let Some(first) = g.first_item(&s.pattern, &s.value) {
                if let Some(l) = self.rewrite(model.as_mut(), codec, matcher, pos, out, s, first)? {
                    out.stats.items_cut += 1;
                    return Ok(Some(l));
                }
                out.stats.items_kept += 1;
            } else if let Some(whole) = g.whole_evidence(&s.pattern, &s.value) {
                if let Some(l) =
                    self.rewrite(model.as_mut(), codec, matcher, pos, out, s, &whole)?
                {
                    out.stats.quotes_extended += 1;
                    return Ok(Some(l));
                }
            }
            // Every earlier string counts for `distinct`, grounded or not: one
            // quotation fills one field.
            let earlier = scan.strings[..i]
                .iter()
                .map(|e| (e.pattern.as_str(), e.value.as_str()));
            if !g.covers(&s.pattern)
                || (g.judge(&s.pattern, &s.value, earlier)
                    && row_evidence(g, &scan, &s.pattern, s.obj, s.start)
                        .is_none_or(|e| Grounding::evidence_states(e, &s.value)))
            {
                continue;
            }
            let Some(cp) = self.checkpoint.take_if(|c| c.bytes <= s.start) else {
                out.stats.grounded_kept += 1;
                continue;
            };
            let mut text = out.bytes[cp.bytes..s.start].to_vec();
            text.extend_from_slice(b"null");
            let replay = std::str::from_utf8(&text)
                .ok()
                .map(|t| codec.encode(t))
                .unwrap_or_default();
            let mut m = cp.matcher.clone();
            let ok = !replay.is_empty()
                && replay
                    .iter()
                    .all(|&t| m.is_allowed(t) && m.commit(t).is_ok());
            if !ok {
                out.stats.grounded_kept += 1;
                continue;
            }
            *model = cp.model;
            *matcher = m;
            let p = confidence::value_p(
                &out.probs.chosen,
                s.start,
                s.end,
                confidence::Combine::Product,
            );
            let probs = &mut out.probs;
            probs.taken_back.push(Chosen {
                at: s.start,
                len: s.end - s.start,
                p,
            });
            probs.chosen.retain(|c| c.at < cp.bytes);
            probs.odds.retain(|o| o.at < cp.bytes);
            out.tokens.truncate(cp.tokens);
            out.bytes.truncate(cp.bytes);
            out.forced_ranges.truncate(cp.ranges);
            out.push(codec, &replay, false, true);
            *pos = cp.pos;
            let logits = out.forward(model.as_mut(), &replay, pos)?;
            out.stats.grounded_nulls += 1;
            self.judged = out.bytes.len();
            self.forget_after(cp.bytes, out);
            return Ok(Some(logits));
        }
        // A number is complete once the delimiter after it is written.
        for n in scan.numbers.iter().filter(|n| n.end >= since) {
            let Some(e) = row_evidence(g, &scan, &n.pattern, n.obj, n.start) else {
                continue;
            };
            if Grounding::evidence_states_number(e, &n.text) {
                continue;
            }
            if let Some(l) = self.null_number(model.as_mut(), codec, matcher, pos, out, n)? {
                return Ok(Some(l));
            }
        }
        self.back_row(model.as_mut(), codec, matcher, pos, out, &scan)
    }

    /// Takes the number `n` back to the value mark before it and writes `null` there
    /// (its confidence is then 1 minus the number's probability, as for a grounded
    /// string). `None`: kept (no mark, or the field may not be `null`).
    fn null_number(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        n: &ground::NumberValue,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(mark) = self.value_mark.clone().filter(|m| m.bytes <= n.start) else {
            out.stats.grounded_kept += 1;
            return Ok(None);
        };
        let mut text = out.bytes[mark.bytes..n.start].to_vec();
        text.extend_from_slice(b"null");
        let p = confidence::value_p(
            &out.probs.chosen,
            n.start,
            n.end,
            confidence::Combine::Product,
        );
        let Some(logits) = self.replay(model, codec, matcher, pos, out, &mark, &text, n.start)?
        else {
            out.stats.grounded_kept += 1;
            return Ok(None);
        };
        out.probs.taken_back.push(Chosen {
            at: n.start,
            len: n.end - n.start,
            p,
        });
        out.stats.grounded_nulls += 1;
        Ok(Some(logits))
    }

    /// After a take-back to `len` bytes: forgets the marks past it, and counts the
    /// rows of the new text as judged (those before `len` were; the replay closes
    /// none that was not).
    fn forget_after(&mut self, len: usize, out: &DecodeOutput) {
        if self.last_mark.as_ref().is_some_and(|m| m.bytes > len) {
            self.last_mark = None;
        }
        if self.row_mark.as_ref().is_some_and(|m| m.bytes > len) {
            self.row_mark = None;
        }
        if self.value_mark.as_ref().is_some_and(|m| m.bytes > len) {
            self.value_mark = None;
        }
        if self.g.is_some_and(|g| g.judges_rows()) {
            self.rows_judged = ground::scan(&out.bytes).items.len();
        }
    }

    /// Judges the object rows closed since the last call ([`Grounding::repeats_row`]).
    /// On one that repeats an earlier row of its array: truncates the model's cache
    /// to the row mark, writes the text from there to the end of the row before and
    /// `]`, and returns the logits after them. `None`: nothing taken back.
    fn back_row(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        scan: &ground::Scan,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(g) = self.g.filter(|g| g.judges_rows()) else {
            return Ok(None);
        };
        while self.rows_judged < scan.items.len() {
            let k = self.rows_judged;
            self.rows_judged += 1;
            let row = &scan.items[k];
            let earlier: Vec<&ground::Item> = scan.items[..k]
                .iter()
                .filter(|e| e.array == row.array)
                .collect();
            let Some(prev) = earlier.last() else { continue };
            let parse = |it: &ground::Item| {
                serde_json::from_slice::<serde_json::Value>(&out.bytes[it.start..it.end]).ok()
            };
            let (Some(this), Some(before)) = (
                parse(row),
                earlier.iter().map(|e| parse(e)).collect::<Option<Vec<_>>>(),
            ) else {
                continue;
            };
            if !g.repeats_row(&this, &before) {
                continue;
            }
            let end = prev.end;
            let Some(mark) = self.row_mark.clone().filter(|m| m.bytes <= end) else {
                out.stats.rows_kept += 1;
                continue;
            };
            let mut text = out.bytes[mark.bytes..end].to_vec();
            text.push(b']');
            let Some(logits) =
                self.replay(model, codec, matcher, pos, out, &mark, &text, mark.bytes)?
            else {
                out.stats.rows_kept += 1;
                continue;
            };
            out.stats.rows_dropped += 1;
            return Ok(Some(logits));
        }
        Ok(None)
    }

    /// Writes the string `s` (just closed) as `value` instead (its first item, or
    /// the quotation taken whole): goes back to the value mark before it, writes the
    /// text from there to the value and `value`, and returns the logits after it.
    /// The model's own choices in the part of `value` it wrote keep their
    /// probabilities. `None`: nothing taken back (no mark before it, the grammar
    /// refuses `value` there, or the model cannot truncate its cache).
    #[allow(clippy::too_many_arguments)]
    fn rewrite(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        s: &ground::StringValue,
        value: &str,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(mark) = self.value_mark.clone().filter(|m| m.bytes <= s.start) else {
            return Ok(None);
        };
        let value = serde_json::to_string(value).expect("a string serialises");
        let mut text = out.bytes[mark.bytes..s.start].to_vec();
        text.extend_from_slice(value.as_bytes());
        let open = &value.as_bytes()[..value.len() - 1];
        let keep = if out.bytes[s.start..].starts_with(open) {
            s.start + open.len()
        } else {
            s.start
        };
        self.replay(model, codec, matcher, pos, out, &mark, &text, keep)
    }

    /// Goes back to `mark` (the model's cache truncated there) and writes `text` from
    /// there, as forced tokens, in one forward pass; returns the logits after it. The
    /// chosen tokens' probabilities before byte `keep` stay. `None` when the grammar
    /// refuses the text there or the model cannot truncate its cache.
    #[allow(clippy::too_many_arguments)]
    fn replay(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        mark: &Mark,
        text: &[u8],
        keep: usize,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(logits) = mark.replay(model, codec, matcher, pos, out, text, keep)? else {
            return Ok(None);
        };
        self.judged = out.bytes.len();
        self.checkpoint = self.checkpoint.take().filter(|c| c.bytes <= mark.bytes);
        self.forget_after(mark.bytes, out);
        Ok(Some(logits))
    }
}

/// The evidence of the row a value at `pattern` (a field of the object at `obj`,
/// starting at byte `start`) belongs to: the row's evidence field's value, written
/// before it, when it states one of the row's strings written between the two
/// ([`Grounding::backs`]). `None` when the row has none, or it is not about the row.
fn row_evidence<'s>(
    g: &Grounding,
    scan: &'s ground::Scan,
    pattern: &str,
    obj: Option<usize>,
    start: usize,
) -> Option<&'s str> {
    let ep = g.evidence_of(pattern)?;
    let obj = Some(obj?);
    let ev = scan
        .strings
        .iter()
        .rev()
        .find(|e| e.obj == obj && e.pattern == ep && e.end <= start)?;
    let about = scan
        .strings
        .iter()
        .filter(|x| x.obj == obj && x.start >= ev.end && x.end <= start)
        .map(|x| x.value.as_str());
    Grounding::backs(&ev.value, about).then_some(ev.value.as_str())
}
