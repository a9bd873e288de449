//! The rows of an array of objects and their evidence: a row that only repeats an
//! earlier one, a string of a row that holds several items, and the quotation field
//! (`x-formwork-evidence`) that a row's other values are judged against.

use serde_json::Value;

use super::{fold, items, Grounding};

impl Grounding {
    /// Are an array's rows judged ([`Grounding::repeats_row`])? With `--grounded`.
    pub fn judges_rows(&self) -> bool {
        self.rows
    }

    /// Does the loop keep marks to truncate back to: rows judged, or an evidence
    /// field whose row's values may be taken back?
    pub fn marks(&self) -> bool {
        self.rows || !self.evidence.is_empty()
    }

    /// Does the object `row` of an array only repeat one of the `earlier` rows of the
    /// same array? A small model pads an array to the length of its worked examples:
    /// a one-item order comes back with a second row of the same code and a null
    /// quantity, quoting another line of the e-mail as its reason.
    ///
    /// A row repeats an earlier one when it shares at least one *identifying* value
    /// with it (at the same key), and none of its other values is identifying and
    /// different. Identifying: a number, a boolean, or a string of at most three words
    /// that the document's body states (a code, a quantity, a name). Not identifying:
    /// `null`, a longer string (a quoted sentence, an explanation), a string the
    /// document does not state (a label of an enum such as `"non_specificata"`), an
    /// object or an array.
    pub fn repeats_row(&self, row: &Value, earlier: &[Value]) -> bool {
        let Value::Object(r) = row else { return false };
        earlier.iter().any(|e| {
            let Value::Object(e) = e else { return false };
            let mut shared = false;
            for (k, v) in r {
                if !self.identifying(v) {
                    continue;
                }
                if e.get(k) == Some(v) {
                    shared = true;
                } else {
                    return false;
                }
            }
            shared
        })
    }

    fn identifying(&self, v: &Value) -> bool {
        match v {
            Value::Number(_) | Value::Bool(_) => true,
            Value::String(s) => {
                s.split_whitespace().count() <= 3 && {
                    let f = fold(s);
                    !f.is_empty() && self.folded_body.contains(&f)
                }
            }
            _ => false,
        }
    }

    /// Is a string at `pattern` cut to its first item ([`Grounding::first_item`])? With
    /// `--grounded`, every string field of an object row of an array.
    pub fn cuts(&self, pattern: &str) -> bool {
        self.rows && pattern.contains("/*/")
    }

    /// The first item of a string `value` at `pattern` that holds several (see
    /// [`items`]: a cue such as `SKU` repeated before another code, or a list the
    /// document does not state whose parts it does); `None` when it holds one, or
    /// when `pattern` is not [cut](Grounding::cuts).
    pub fn first_item<'v>(&self, pattern: &str, value: &'v str) -> Option<&'v str> {
        if !self.cuts(pattern) {
            return None;
        }
        if let Some(n) = items::first_item_len(value) {
            return Some(&value[..n]);
        }
        items::first_of_list(value, |p| self.holds_at(pattern, p))
    }

    /// The pattern of the evidence field ([`EVIDENCE`](super::EVIDENCE)) of the object a value at
    /// `pattern` is a field of, when it has one and it is not that field itself.
    pub fn evidence_of(&self, pattern: &str) -> Option<&str> {
        let parent = &pattern[..pattern.rfind('/')?];
        self.evidence.iter().map(String::as_str).find(|e| {
            *e != pattern && e.len() > parent.len() && e.starts_with(parent) && {
                let rest = &e[parent.len()..];
                rest.starts_with('/') && !rest[1..].contains('/')
            }
        })
    }

    /// An evidence quotation (a value at a field marked [`EVIDENCE`](super::EVIDENCE)) taken whole:
    /// `value` and the rest of its clause in the document, when the quotation stops
    /// before the end of its sentence and what is left of it names no code or
    /// quantity (so no other item): "vi ordino 40 pezzi del codice K-210" becomes
    /// "vi ordino 40 pezzi del codice K-210, ci servono con urgenza". The values the
    /// row takes from its evidence (a label such as an urgency) are then weighed on
    /// the whole clause. `None` when it is whole already, or not quoted.
    pub fn whole_evidence(&self, pattern: &str, value: &str) -> Option<String> {
        if !self.evidence.iter().any(|e| e == pattern) {
            return None;
        }
        items::rest_of_clause(&self.doc, value).map(|r| format!("{value}{r}"))
    }

    /// Is `evidence` about its row: does it state one of the row's `earlier` string
    /// values (written after it: a code, a name)? A quotation of a greeting or of
    /// another line is not evidence for the row's values.
    pub fn backs<'a>(evidence: &str, mut earlier: impl Iterator<Item = &'a str>) -> bool {
        let e = fold(evidence);
        earlier.any(|v| {
            let v = fold(v);
            !v.is_empty() && e.contains(&v)
        })
    }

    /// Does `evidence` state the string `value` (case and spaces aside)?
    pub fn evidence_states(evidence: &str, value: &str) -> bool {
        let v = fold(value);
        !v.is_empty() && fold(evidence).contains(&v)
    }

    /// Does `evidence` state the number written `text`: the same characters, not
    /// inside a longer number (`45` in "45 pz", not in "145")?
    pub fn evidence_states_number(evidence: &str, text: &str) -> bool {
        // A digit next to it, or a decimal mark then a digit: a longer number.
        let longer = |mut side: std::str::Chars<'_>, rev: bool| {
            let mut next = || if rev { side.next_back() } else { side.next() };
            match next() {
                Some(c) if c.is_ascii_digit() => true,
                Some('.' | ',') => next().is_some_and(|d| d.is_ascii_digit()),
                _ => false,
            }
        };
        !text.is_empty()
            && evidence.match_indices(text).any(|(i, _)| {
                !longer(evidence[..i].chars(), true)
                    && !longer(evidence[i + text.len()..].chars(), false)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::GroundMode;
    use super::*;
    use serde_json::json;

    #[test]
    fn evidence_is_the_quotation_of_its_own_object() {
        let schema = json!({"type": "object", "properties": {"rows": {"type": "array",
            "items": {"type": "object", "properties": {
                "quote": {"type": "string", "x-formwork-evidence": true},
                "sku": {"type": "string"},
                "qty": {"type": ["integer", "null"]}}}}}});
        let g = Grounding::new(&schema, None, "doc").expect("evidence alone makes a grounding");
        assert_eq!(g.evidence_of("/rows/*/qty"), Some("/rows/*/quote"));
        assert_eq!(g.evidence_of("/rows/*/quote"), None, "not its own evidence");
        assert_eq!(g.evidence_of("/other"), None);
        assert_eq!(g.evidence_of("/rows/*/qty/deeper"), None);
        assert!(Grounding::backs(
            "ci servono 5 pz dello SKU R1",
            ["r1"].into_iter()
        ));
        assert!(!Grounding::backs(
            "Gentile Sig.ra Pellegrini",
            ["880"].into_iter()
        ));
        assert!(!Grounding::backs("anything", [""].into_iter()));
        let n = Grounding::evidence_states_number;
        assert!(n("45 pz dello SKU 1001", "45"));
        assert!(n("(45)", "45"));
        assert!(!n("145 pz", "45"));
        assert!(!n("4500 pz", "45"));
        assert!(!n("2.45 kg", "45"));
        assert!(!n("45.5 kg", "45"));
        assert!(n("45, 46", "45"), "a list separator is not a decimal mark");
        assert!(!n("una trentina", "30"));
        assert!(Grounding::evidence_states("Un PAIO  di pezzi", "un paio"));
    }

    #[test]
    fn a_row_repeats_an_earlier_one_when_it_adds_no_identifying_value() {
        let schema = json!({"type": "object", "properties": {
            "rows": {"type": "array", "items": {"type": "object", "properties": {
                "why": {"type": "string"}, "sku": {"type": "string"},
                "qty": {"type": ["integer", "null"]}, "text": {"type": ["string", "null"]},
                "urgency": {"enum": ["urgent", "unstated"]}}}}}});
        let doc = "Hello,\nplease send 40 pz of B-12, urgent.\nShip to Via Roma 3.\nThanks, Anna";
        let g = Grounding::new(&schema, Some(GroundMode::Distinct), doc).unwrap();
        let first = json!({"why": "please send 40 pz of B-12, urgent", "sku": "B-12", "qty": 40,
            "text": "40 pz", "urgency": "urgent"});
        // Another quoted line, a label the text does not state, nulls: a repeat.
        let pad = json!({"why": "Ship to Via Roma 3", "sku": "B-12", "qty": null, "text": null,
            "urgency": "unstated"});
        assert!(g.repeats_row(&pad, std::slice::from_ref(&first)));
        // Another code, or another quantity: a row of its own.
        let other = json!({"why": "x", "sku": "B-13", "qty": null, "text": null});
        assert!(!g.repeats_row(&other, std::slice::from_ref(&first)));
        let more = json!({"sku": "B-12", "qty": 5});
        assert!(!g.repeats_row(&more, std::slice::from_ref(&first)));
        // Nothing identifying in common: no repeat.
        assert!(!g.repeats_row(&json!({"qty": null}), std::slice::from_ref(&first)));
        // Free decoding: the array ends before the first repeat; the signature's name
        // is no value ("Anna" is only in the signature).
        let mut v = json!({"rows": [first, pad, other]});
        let (nulled, dropped) = g.apply_all(&mut v);
        assert_eq!(dropped, ["/rows/1", "/rows/2"]);
        assert!(nulled.is_empty());
        assert_eq!(v["rows"].as_array().unwrap().len(), 1);
        // Only with --grounded.
        let marked = json!({"type": "object", "properties": {"rows": {"type": "array", "items": {
            "type": "object", "properties": {"t": {"type": ["string", "null"], "x-formwork-grounded": true}}}}}});
        let g = Grounding::new(&marked, None, doc).unwrap();
        assert!(!g.judges_rows());
    }
}
