//! Grounded fields: a nullable string whose value must be *stated in the document*.
//!
//! The mask makes a value valid; it cannot make it true. A small model asked for
//! `location.state` in "book a table for 4 in Somalia" writes "Tennessee", and for
//! `rating_unit` in "rate this novel a 2" writes "point". Both are valid, and neither
//! is in the text. A grounded field is judged when its value is complete: a string
//! that does not occur in the document (compared case-insensitively, with runs of
//! whitespace as one space) is taken back, and the field is written `null` instead.
//! Unlike `x-formwork-source` (which constrains every character to a span of the
//! document while it is written, and can cut a value short: "the day after tomorrow"
//! became `"the "`), the model writes what it wants and is judged once: the value
//! stays whole or becomes null.
//!
//! Which fields: a subschema with `"x-formwork-grounded": true`, and with
//! `--grounded`, every *nullable string* of the schema: `type` `["string", "null"]`
//! without `format`, `pattern` or `const`, an `enum` of strings and `null` (an enum
//! value counts as stated when it occurs in the text: "star" in "5 stars"), or a
//! two-branch `anyOf`/`oneOf` of such a string and `null`. Strings that may not be
//! null are never grounded: nothing could replace them.
//!
//! A nullable string with `format: date` is grounded by its meaning, not its text (an
//! ISO date is a normalisation, never a quotation): it stands when the document
//! states that calendar day ([`super::dates`]: "2/6/2020", "march sixth, 2038", "Dec.
//! 13, 2018"). And where the document states a day that no earlier value of the
//! answer holds, such a field may not be `null` ([`Grounding::refuses_null`]): the
//! model writes a date, which is then judged like any other. Other formats are not
//! grounded.
//!
//! The masked loop ([`super::decode::decode_masked`]) judges each grounded string as
//! its closing quote is written and, when it fails, goes back to the KV snapshot and
//! matcher state taken just before the value started and writes `null` there, so
//! the fields after it are decoded after the `null`. Free decoding is judged after
//! the fact ([`Grounding::apply`]). Pure: no model, no I/O.

use serde_json::Value;

use crate::pointer::escape;

use super::dates::{self, Day};

pub mod args;
mod fields;
mod items;
pub mod quote;
mod rows;
mod scan;

pub use args::ArgGrounding;
pub(crate) use fields::children;
use fields::{fields, Fields};
pub use fields::{grounded_fields, grounded_patterns};
pub use scan::{scan, Item, NumberValue, Scan, StringValue};

/// The schema keyword that marks one field grounded.
pub const KEYWORD: &str = "x-formwork-grounded";

/// The schema keyword that marks a string field as its object's evidence: the
/// quotation the object's other values are taken from ([`Grounding::evidence_of`]).
pub const EVIDENCE: &str = "x-formwork-evidence";

/// How `--grounded` judges a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroundMode {
    /// The value must be stated in the document.
    Stated,
    /// Stated, and not already the value of an earlier grounded field of the same
    /// answer: one quotation fills one field (the first that takes it). Small models
    /// put one place name in `city`, `state` and `country` at once.
    Distinct,
}

impl GroundMode {
    pub fn parse(s: &str) -> Option<GroundMode> {
        match s {
            "stated" => Some(GroundMode::Stated),
            "distinct" => Some(GroundMode::Distinct),
            _ => None,
        }
    }
}

/// The grounded fields of one schema, as instance-pointer patterns (`*` for an array
/// index), with the document they are judged against.
#[derive(Clone, Debug, Default)]
pub struct Grounding {
    patterns: Vec<String>,
    /// The grounded fields marked `"x-formwork-grounded": "anywhere"`: judged against
    /// the whole document, greeting and signature included.
    anywhere: Vec<String>,
    /// The grounded `format: date` fields, judged by [`Grounding::days`].
    date_patterns: Vec<String>,
    folded_doc: String,
    /// The document without its greeting and signature ([`body`]), folded.
    folded_body: String,
    /// The calendar days the document states.
    days: Vec<Day>,
    distinct: bool,
    /// With `--grounded`: an array's rows end at the first that repeats an earlier one
    /// ([`Grounding::repeats_row`]).
    rows: bool,
    /// The fields marked [`EVIDENCE`], as patterns.
    evidence: Vec<String>,
    /// The document as given (an evidence quotation is taken whole from it).
    doc: String,
    /// The fields that are an `enum` of strings, each with its members, folded
    /// ([`Grounding::names_sibling_member`]).
    enums: Vec<(String, Vec<String>)>,
}

/// A grounded field's text, as a quotation is read from it
/// ([`Grounding::quotation`]): compared case-blind, with single spaces.
#[derive(Clone, Copy, Debug)]
pub struct FieldQuote<'a> {
    folded: &'a str,
}

impl quote::Quotable for FieldQuote<'_> {
    fn quotable(&self, text: &str, closed: bool) -> bool {
        quote::quotable_in(self.folded, &text.to_lowercase(), closed)
    }
    fn quotable_bytes(&self, bytes: &[u8]) -> bool {
        quote::bytes_occur(self.folded.as_bytes(), &bytes.to_ascii_lowercase())
    }
}

/// Lowercased, with each run of whitespace as one space, trimmed.
pub(crate) fn fold(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

impl Grounding {
    /// The grounded fields of `schema` (those marked with [`KEYWORD`], and with a
    /// `mode` every nullable string) against `document`. `None` when there are none
    /// and, with a `mode`, no array of object rows has a string field to cut.
    pub fn new(schema: &Value, mode: Option<GroundMode>, document: &str) -> Option<Grounding> {
        let Fields {
            text: patterns,
            dates: date_patterns,
            anywhere,
            row_strings,
            evidence,
            enums,
        } = fields(schema, mode.is_some());
        let judged = !patterns.is_empty() || !date_patterns.is_empty() || !evidence.is_empty();
        (judged || (mode.is_some() && row_strings)).then(|| Grounding {
            evidence,
            enums,
            patterns,
            anywhere,
            days: if date_patterns.is_empty() {
                Vec::new()
            } else {
                dates::stated_days(document)
            },
            date_patterns,
            folded_doc: fold(document),
            doc: document.to_string(),
            folded_body: fold(&body(document)),
            distinct: mode == Some(GroundMode::Distinct),
            rows: mode.is_some(),
        })
    }

    /// Does a grounded text `value` at `pattern` stand, after the `earlier` grounded
    /// values of the same answer (pattern, value)? It must be stated in the document's
    /// body ([`body`]; the whole document for a field marked `"anywhere"`) and, in
    /// `distinct` mode, not repeat the value of an earlier *other* field (rows of an
    /// array may share a value: two lines can both be "2 pz"), nor name a member of
    /// a sibling field's `enum` ([`Grounding::names_sibling_member`]).
    pub fn stands<'a>(
        &self,
        pattern: &str,
        value: &str,
        earlier: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        self.holds_at(pattern, value)
            && !self.repeats(pattern, value, earlier)
            && !self.names_sibling_member(pattern, value)
    }

    /// In `distinct` mode: is `value`, at the free-text field `pattern`, one of the
    /// members of an `enum` field of the same object (case and spaces aside)? Such a
    /// value is that field's: the enum names the kind of thing it is. A small model
    /// asked for `restaurant_name` and `restaurant_type` in "book an oyster bar" puts
    /// "oyster bar" in the name, and the type's `null` after it; taken back, the name
    /// is `null` and the type is free to take it.
    pub fn names_sibling_member(&self, pattern: &str, value: &str) -> bool {
        if !self.distinct || self.enums.iter().any(|(p, _)| p == pattern) {
            return false;
        }
        let Some(cut) = pattern.rfind('/') else {
            return false;
        };
        let parent = &pattern[..cut];
        let v = fold(value);
        self.enums.iter().any(|(p, members)| {
            p.rfind('/').is_some_and(|c| &p[..c] == parent) && members.contains(&v)
        })
    }

    fn repeats<'a>(
        &self,
        pattern: &str,
        value: &str,
        mut earlier: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        self.distinct && earlier.any(|(p, e)| p != pattern && fold(e) == fold(value))
    }

    /// Does the grounded `value` at `pattern` stand (see [`Grounding::stands`])? A
    /// date field's value must be a day the document states.
    pub fn judge<'a>(
        &self,
        pattern: &str,
        value: &str,
        earlier: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        if self.is_date(pattern) {
            let stated = dates::parse_iso(value).is_some_and(|d| self.days.contains(&d));
            stated && !self.repeats(pattern, value, earlier)
        } else {
            self.stands(pattern, value, earlier)
        }
    }

    fn is_date(&self, pattern: &str) -> bool {
        self.date_patterns.iter().any(|p| p == pattern)
    }

    /// May the value at `pattern` not be `null`, after the `earlier` grounded values
    /// of the answer? True at a date field when the document states a day that none
    /// of them holds: the document gives the field a value, the model writes it.
    pub fn refuses_null<'a>(&self, pattern: &str, earlier: impl Iterator<Item = &'a str>) -> bool {
        if !self.is_date(pattern) || self.days.is_empty() {
            return false;
        }
        let used: Vec<Day> = earlier.filter_map(dates::parse_iso).collect();
        self.days.iter().any(|d| !used.contains(d))
    }

    /// Is a value at `pattern` judged?
    pub fn covers(&self, pattern: &str) -> bool {
        self.patterns
            .iter()
            .chain(&self.date_patterns)
            .any(|p| p == pattern)
    }

    /// Could a value inside the container at `pattern` be judged (a checkpoint before
    /// its values is worth taking)?
    pub fn covers_inside(&self, pattern: &str) -> bool {
        self.patterns.iter().chain(&self.date_patterns).any(|p| {
            p.len() > pattern.len() && p.starts_with(pattern) && p.as_bytes()[pattern.len()] == b'/'
        })
    }

    /// May a `null` at `pattern` be weighed against a quotation of the document
    /// (a grounded text field, not a date)?
    pub fn weighs(&self, pattern: &str) -> bool {
        self.patterns.iter().any(|p| p == pattern)
    }

    /// The text a value at `pattern` may be quoted from, case-blind: the document's
    /// body ([`body`]), or the whole document for a field marked `"anywhere"`.
    pub fn quotation<'a>(&'a self, pattern: &str) -> FieldQuote<'a> {
        let anywhere = self.anywhere.iter().any(|p| p == pattern);
        FieldQuote {
            folded: if anywhere {
                &self.folded_doc
            } else {
                &self.folded_body
            },
        }
    }

    /// Is `value` stated in the document? Empty (after folding) never is.
    pub fn holds(&self, value: &str) -> bool {
        let v = fold(value);
        !v.is_empty() && self.folded_doc.contains(&v)
    }

    /// Is `value` stated where the field at `pattern` is judged: the document's body
    /// ([`body`]), or the whole document for a field marked `"anywhere"`?
    pub fn holds_at(&self, pattern: &str, value: &str) -> bool {
        if self.anywhere.iter().any(|p| p == pattern) {
            return self.holds(value);
        }
        let v = fold(value);
        !v.is_empty() && self.folded_body.contains(&v)
    }

    /// Free decoding, judged after the fact: every grounded string of `value` that is
    /// not in the document's body (a date: not a day it states) becomes `null`; in
    /// `distinct` mode, so does one that repeats an earlier string of another field
    /// (in document order). With `--grounded`, an array ends before its first row
    /// that repeats an earlier one. Returns the pointers changed (nulled or dropped).
    pub fn apply(&self, value: &mut Value) -> Vec<String> {
        self.apply_all(value).0
    }

    /// [`Grounding::apply`], with the pointers of the rows dropped (as they were
    /// before): `(nulled, dropped)`.
    pub fn apply_all(&self, value: &mut Value) -> (Vec<String>, Vec<String>) {
        let mut acc = Applied::default();
        let (mut ptr, mut pat) = (String::new(), String::new());
        self.apply_at(value, &mut ptr, &mut pat, &mut acc, 0);
        (acc.changed, acc.dropped)
    }

    fn apply_at(
        &self,
        v: &mut Value,
        ptr: &mut String,
        pat: &mut String,
        acc: &mut Applied,
        depth: usize,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        match v {
            Value::String(s) => {
                let kept = acc.kept.iter().map(|(p, v)| (p.as_str(), v.as_str()));
                if !self.covers(pat) || self.judge(pat, s, kept) {
                    acc.kept.push((pat.clone(), s.clone()));
                } else {
                    *v = Value::Null;
                    acc.changed.push(ptr.clone());
                }
            }
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    let (a, b) = (ptr.len(), pat.len());
                    let seg = escape(k);
                    ptr.push('/');
                    ptr.push_str(&seg);
                    pat.push('/');
                    pat.push_str(&seg);
                    self.apply_at(x, ptr, pat, acc, depth + 1);
                    ptr.truncate(a);
                    pat.truncate(b);
                }
            }
            Value::Array(items) => {
                for i in 0..items.len() {
                    let (a, b) = (ptr.len(), pat.len());
                    ptr.push_str(&format!("/{i}"));
                    pat.push_str("/*");
                    self.apply_at(&mut items[i], ptr, pat, acc, depth + 1);
                    if self.rows && self.repeats_row(&items[i], &items[..i]) {
                        // The rows end before the first repeat, as in masked decoding.
                        ptr.truncate(a);
                        for j in i..items.len() {
                            acc.dropped.push(format!("{ptr}/{j}"));
                        }
                        items.truncate(i);
                        ptr.truncate(a);
                        pat.truncate(b);
                        break;
                    }
                    ptr.truncate(a);
                    pat.truncate(b);
                }
            }
            _ => {}
        }
    }
}

/// What [`Grounding::apply_all`] gathers as it walks.
#[derive(Default)]
struct Applied {
    /// Pointers of the values nulled.
    changed: Vec<String>,
    /// Pointers of the rows dropped.
    dropped: Vec<String>,
    /// The strings that stand so far (pattern, value), for `distinct`.
    kept: Vec<(String, String)>,
}

/// Nesting walked at most (schemas and instances).
const MAX_DEPTH: usize = 64;

/// The value of [`KEYWORD`] that grounds a field against the whole document.
pub const ANYWHERE: &str = "anywhere";

/// The document without its greeting and its signature, for grounding: values are
/// quoted from what the writer says, not from whom they greet or how they sign.
///
/// A document of three or more non-empty lines loses:
/// - its first line, when that line is a greeting: at most four words, no digit,
///   ending in `,` `!` or `:` ("Buongiorno,", "Hi Tom,"), or at most two words
///   without a final `.` ("Ciao Marco");
/// - its last lines, at most three, while each is a closing or a name: at most four
///   words, no digit, not ending in `.` `?` `:` or `;` ("Grazie,", "Saluti, Chiara",
///   "Marco"). A sentence that ends with a full stop ("Fattura a Ottica Lanza.") stays.
///
/// At least one line always stays. Shorter documents (one-line requests) are whole.
pub fn body(document: &str) -> String {
    let lines: Vec<&str> = document
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() < 3 {
        return document.to_string();
    }
    let words = |l: &str| l.split_whitespace().count();
    let digits = |l: &str| l.chars().any(|c| c.is_ascii_digit());
    let mut from = 0;
    let first = lines[0];
    let greeting = !digits(first)
        && ((words(first) <= 4 && first.ends_with([',', '!', ':']))
            || (words(first) <= 2 && !first.ends_with(['.', '?', ';'])));
    if greeting {
        from = 1;
    }
    let mut to = lines.len();
    while to > from + 1
        && lines.len() - to < 3
        && words(lines[to - 1]) <= 4
        && !digits(lines[to - 1])
        && !lines[to - 1].ends_with(['.', '?', ':', ';'])
    {
        to -= 1;
    }
    lines[from..to].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snips_like() -> Value {
        json!({
            "$defs": {"Loc": {"type": "object", "properties": {
                "city": {"type": ["string", "null"]},
                "state": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "zip": {"type": ["string", "null"], "pattern": "^[0-9]{5}$"}
            }}},
            "type": "object",
            "properties": {
                "name": {"type": ["string", "null"], "minLength": 1},
                "unit": {"enum": ["star", "point", null]},
                "kind": {"enum": ["a", 1, null]},
                "date": {"type": ["string", "null"], "format": "date"},
                "title": {"type": "string"},
                "count": {"type": ["integer", "null"]},
                "loc": {"$ref": "#/$defs/Loc"},
                "rows": {"type": "array", "items": {"type": "object", "properties": {
                    "note": {"type": ["null", "string"]},
                    "sku": {"type": "string", "x-formwork-grounded": true}
                }}},
                "urgency": {"enum": ["low", "high", null], "x-formwork-grounded": true}
            }
        })
    }

    #[test]
    fn nullable_strings_and_string_enums_are_grounded_nothing_else() {
        let all = grounded_patterns(&snips_like(), true);
        assert_eq!(
            all,
            [
                "/name",
                "/unit",
                "/loc/city",
                "/loc/state",
                "/rows/*/note",
                "/urgency"
            ]
        );
        // Without the flag only the marked one that may be null; a marked string
        // that may not be null has nothing to become.
        assert_eq!(grounded_patterns(&snips_like(), false), ["/urgency"]);
    }

    #[test]
    fn holds_is_case_and_space_blind_and_empty_never_holds() {
        let g = Grounding::new(
            &snips_like(),
            Some(GroundMode::Stated),
            "Rate  The Sea of\nTrolls 1 STARS",
        )
        .unwrap();
        assert!(g.holds("the sea of trolls"));
        assert!(g.holds("star"));
        assert!(g.holds(" Sea  of Trolls "));
        assert!(!g.holds("point"));
        assert!(!g.holds(""));
        assert!(!g.holds("  "));
    }

    #[test]
    fn apply_nulls_what_the_document_does_not_state() {
        let g = Grounding::new(
            &snips_like(),
            Some(GroundMode::Stated),
            "a table in Somalia, 5 stars, note: fragile",
        )
        .unwrap();
        let mut v = json!({"name": "Somalia", "unit": "point", "title": "Tennessee",
            "loc": {"city": "Somalia", "state": "Tennessee"},
            "rows": [{"note": "fragile", "sku": "X"}, {"note": "glass", "sku": "Y"}]});
        let changed = g.apply(&mut v);
        assert_eq!(changed, ["/unit", "/loc/state", "/rows/1/note"]);
        assert_eq!(v["unit"], Value::Null);
        assert_eq!(v["title"], "Tennessee", "not nullable, never grounded");
        assert_eq!(v["loc"]["city"], "Somalia");
        assert_eq!(v["rows"][1]["sku"], "Y");
    }

    #[test]
    fn distinct_mode_gives_one_quotation_to_the_first_field_only() {
        let doc = "weather in Belgium tomorrow";
        let mut v = json!({"name": null, "unit": null,
            "loc": {"city": "Belgium", "state": "belgium "},
            "rows": [{"note": "Belgium", "sku": "Belgium"}]});
        let mut stated = v.clone();
        let g = Grounding::new(&snips_like(), Some(GroundMode::Stated), doc).unwrap();
        assert!(
            g.apply(&mut stated).is_empty(),
            "stated: every one is in the text"
        );
        let g = Grounding::new(&snips_like(), Some(GroundMode::Distinct), doc).unwrap();
        assert_eq!(g.apply(&mut v), ["/loc/state", "/rows/0/note"]);
        assert_eq!(v["loc"]["city"], "Belgium");
        assert_eq!(v["rows"][0]["sku"], "Belgium", "not grounded, not counted");
        assert!(g.stands("/name", "Belgium", [("/unit", "tomorrow")].into_iter()));
        assert!(!g.stands("/name", "Belgium", [("/unit", "BELGIUM")].into_iter()));
        assert!(!g.stands("/name", "France", std::iter::empty()));
        // Rows of one array may share a value: only other fields count.
        assert!(g.stands(
            "/rows/*/note",
            "Belgium",
            [("/rows/*/note", "belgium")].into_iter()
        ));
        let mut rows =
            json!({"rows": [{"note": "Belgium"}, {"note": "Belgium"}], "unit": "belgium"});
        assert_eq!(g.apply(&mut rows), ["/unit"]);
    }

    #[test]
    fn distinct_mode_leaves_a_sibling_enums_member_to_that_enum() {
        let doc = "rate this Star trek book 5 point stars";
        let stated = Grounding::new(&snips_like(), Some(GroundMode::Stated), doc).unwrap();
        let g = Grounding::new(&snips_like(), Some(GroundMode::Distinct), doc).unwrap();
        assert!(stated.stands("/name", "star", std::iter::empty()));
        assert!(!g.stands("/name", "star", std::iter::empty()));
        assert!(!g.stands("/name", " Point ", std::iter::empty()));
        // A value that only holds a member is not one.
        assert!(g.stands("/name", "Star trek", std::iter::empty()));
        // The enum's own value, and a free-text field of another object.
        assert!(g.stands("/unit", "star", std::iter::empty()));
        assert!(g.stands("/loc/city", "star", std::iter::empty()));
        let mut v = json!({"name": "Star", "unit": null, "loc": {"city": "point"}});
        assert_eq!(g.apply(&mut v), ["/name"]);
        assert_eq!(v["loc"]["city"], "point");
    }

    #[test]
    fn the_body_leaves_out_greeting_and_signature() {
        let mail = "Buongiorno,\nvi ordino 40 pezzi del codice K-210.\nFattura a Ottica Lanza.\nCordialmente,\nStefano";
        assert_eq!(
            body(mail),
            "vi ordino 40 pezzi del codice K-210.\nFattura a Ottica Lanza."
        );
        let mail = "Ciao Marco\n5 pz dello SKU X10\nSaluti, Chiara";
        assert_eq!(body(mail), "5 pz dello SKU X10");
        // A first line with a figure, or a sentence, is no greeting; a last line that
        // ends with a full stop is no signature.
        let mail = "Ordine 12,\nmandate 3 pz.\nFatturate a Rossi.";
        assert_eq!(body(mail), "Ordine 12,\nmandate 3 pz.\nFatturate a Rossi.");
        // Short documents stay whole; one line always stays.
        assert_eq!(body("Ciao,\nMarco"), "Ciao,\nMarco");
        assert_eq!(body("Ciao,\nGrazie\nMarco"), "Grazie");
        let schema = json!({"type": "object", "properties": {
            "client": {"type": ["string", "null"]},
            "sender": {"type": ["string", "null"], "x-formwork-grounded": "anywhere"}}});
        let mail = "Buongiorno,\n5 pz dello SKU 7.\nSaluti, Chiara";
        let g = Grounding::new(&schema, Some(GroundMode::Distinct), mail).unwrap();
        let mut v = json!({"client": "Chiara", "sender": "Chiara"});
        assert_eq!(g.apply(&mut v), ["/client"], "a signature is no client");
        assert_eq!(
            v["sender"], "Chiara",
            "marked anywhere: the signature counts"
        );
        // Marked "anywhere" grounds the field without --grounded too.
        let g = Grounding::new(&schema, None, mail).unwrap();
        assert!(g.covers("/sender") && !g.covers("/client"));
    }

    fn booking() -> Value {
        json!({
            "type": "object",
            "properties": {
                "time_range": {"type": ["string", "null"]},
                "date": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
                "until": {"type": ["string", "null"], "format": "date"},
                "stamp": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
                "due": {"type": "string", "format": "date"}
            }
        })
    }

    #[test]
    fn a_date_is_grounded_by_the_day_the_document_states() {
        let (text, dates) = grounded_fields(&booking(), true);
        assert_eq!(text, ["/time_range"]);
        assert_eq!(dates, ["/date", "/until"], "nullable dates only");
        assert_eq!(grounded_fields(&booking(), false), (vec![], vec![]));
        let doc = "book a brasserie on march sixth, 2038 for eight";
        let g = Grounding::new(&booking(), Some(GroundMode::Stated), doc).unwrap();
        let none = || std::iter::empty::<(&str, &str)>();
        let no_days = || std::iter::empty::<&str>();
        assert!(g.judge("/date", "2038-03-06", none()));
        assert!(
            !g.judge("/date", "2038-06-03", none()),
            "not the day stated"
        );
        assert!(!g.judge("/date", "2038-03-6", none()));
        assert!(g.judge("/time_range", "march sixth, 2038", none()));
        assert!(
            !g.judge("/time_range", "2038-03-06", none()),
            "text is quoted"
        );
        let mut v = json!({"time_range": "march sixth, 2038", "date": "2038-03-06",
            "until": "2038-03-07", "stamp": "2038-03-06T00:00:00Z", "due": "2000-01-01"});
        assert_eq!(g.apply(&mut v), ["/until"]);
        assert_eq!(v["date"], "2038-03-06");
        assert_eq!(v["due"], "2000-01-01", "not nullable, never grounded");
        // Null is refused where a stated day is not yet held by an earlier value.
        assert!(g.refuses_null("/date", no_days()));
        assert!(!g.refuses_null("/date", ["2038-03-06"].into_iter()));
        assert!(!g.refuses_null("/time_range", no_days()));
        let g = Grounding::new(&booking(), Some(GroundMode::Stated), "book on jun. 2").unwrap();
        assert!(
            !g.refuses_null("/date", no_days()),
            "no year: no day stated"
        );
        assert!(!g.judge("/date", "2024-06-02", none()));
        // Distinct: one stated day, one field.
        let g = Grounding::new(&booking(), Some(GroundMode::Distinct), doc).unwrap();
        assert!(!g.judge(
            "/until",
            "2038-03-06",
            [("/date", "2038-03-06")].into_iter()
        ));
    }
}
