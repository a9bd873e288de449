//! One row per item: a string in a row of an array that holds several items is cut
//! to its first.
//!
//! A small model asked for one row per ordered item quotes the whole list in the
//! first row: `"ragionamento": "ordiniamo: 2 pz SKU 44A, 2 pz SKU 44B, 1 pz SKU 44C"`,
//! then `"sku_grezzo": "44A, 44B, 44C"`, and closes the array after one row. The
//! values after such a quotation follow from it (the quantity of another item, a
//! code list), so the row is wrong as a whole. Cut where it is written, the first
//! item's quotation leads the model to the first item's values, and the next row to
//! the next item.
//!
//! Two shapes, neither reading a word of any language:
//! - **A repeated cue.** A word with a digit (a code, a quantity: `44A`, `P-14`,
//!   `101`) whose preceding word (at least two letters, no digit: `SKU`, `codice`)
//!   comes back later in the value before a *different* such word. The value is cut
//!   after the first code, or, when a `,` or `;` follows it before the next cue, at
//!   the last of those (`SKU 7: 5 pezzi, SKU 19: 20 pezzi` keeps `SKU 7: 5 pezzi`).
//! - **A list not stated.** A value the document does not state, made of parts
//!   separated by `,` or `;`, each of which it does state (`44A, 44B, 44C`): the
//!   first part.

/// A word of a value: its byte range without trailing punctuation.
struct Word<'a> {
    start: usize,
    text: &'a str,
}

impl Word<'_> {
    fn end(&self) -> usize {
        self.start + self.text.len()
    }

    /// A code or a quantity: has a digit, and nothing but letters, digits and
    /// `-` `_` `/` `.`.
    fn is_code(&self) -> bool {
        self.text.chars().any(|c| c.is_ascii_digit())
            && self
                .text
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '/' | '.'))
    }

    /// What may name a code: at least two letters and no digit.
    fn is_cue(&self) -> bool {
        self.text.chars().filter(|c| c.is_alphabetic()).count() >= 2
            && !self.text.chars().any(|c| c.is_ascii_digit())
    }

    fn same(&self, other: &Word) -> bool {
        self.text.to_lowercase() == other.text.to_lowercase()
    }
}

fn words(v: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    for w in v.split_inclusive(char::is_whitespace) {
        let start = at;
        at += w.len();
        let lead = w.len() - w.trim_start_matches(['(', '[', '"', '\'']).len();
        let text = w[lead..]
            .trim_end()
            .trim_end_matches([',', ';', ':', '.', '!', '?', ')', ']', '"', '\'']);
        if !text.is_empty() {
            out.push(Word {
                start: start + lead,
                text,
            });
        }
    }
    out
}

/// The byte length of `v`'s first item when a cue repeats before a different code
/// (see the module's text); `None` when it holds one item.
pub(super) fn first_item_len(v: &str) -> Option<usize> {
    let ws = words(v);
    for a in 1..ws.len() {
        if !(ws[a].is_code() && ws[a - 1].is_cue()) {
            continue;
        }
        for b in a + 2..ws.len() {
            if !(ws[b].is_code() && ws[b - 1].same(&ws[a - 1]) && !ws[b].same(&ws[a])) {
                continue;
            }
            let from = ws[a].end();
            let to = ws[b - 1].start;
            let cut = v[from..to].rfind([',', ';']).map_or(from, |k| from + k);
            let cut = v[..cut]
                .trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';'))
                .len();
            return (cut > 0 && cut < v.len()).then_some(cut);
        }
    }
    None
}

/// The first part of a list `v` (parts separated by `,` or `;`) when `v` itself is
/// not `stated` and every part is.
pub(super) fn first_of_list(v: &str, stated: impl Fn(&str) -> bool) -> Option<&str> {
    let parts: Vec<&str> = v.split([',', ';']).map(str::trim).collect();
    (parts.len() >= 2 && parts.iter().all(|p| !p.is_empty() && stated(p)) && !stated(v))
        .then(|| parts[0])
}

/// The rest of the clause a quotation `q` of `doc` stops short of: where `q` occurs
/// in `doc` (exactly, else ignoring ASCII case), the text after it up to the end of
/// its sentence (`.` `!` `?` not followed by a digit, or a line break), without the
/// final punctuation, when that rest names no code or quantity (no word with a digit:
/// that would be another item) and says something (a letter). `None` otherwise.
pub(super) fn rest_of_clause<'d>(doc: &'d str, q: &str) -> Option<&'d str> {
    if q.trim().is_empty() {
        return None;
    }
    let at = doc.find(q).or_else(|| {
        let (d, q) = (doc.to_ascii_lowercase(), q.to_ascii_lowercase());
        d.find(&q)
    })?;
    let tail = &doc[at + q.len()..];
    let mut end = tail.len();
    let b = tail.as_bytes();
    for (i, c) in tail.char_indices() {
        let stop = match c {
            '\n' | '\r' => true,
            '.' | '!' | '?' => !b.get(i + 1).is_some_and(|d| d.is_ascii_digit()),
            _ => false,
        };
        if stop {
            end = i;
            break;
        }
    }
    let rest =
        tail[..end].trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':'));
    let says = rest.chars().any(char::is_alphabetic);
    let codes = words(rest).iter().any(Word::is_code);
    (says && !codes).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(v: &str) -> Option<&str> {
        first_item_len(v).map(|n| &v[..n])
    }

    #[test]
    fn a_repeated_cue_before_another_code_cuts_after_the_first_item() {
        assert_eq!(
            first("ordiniamo: 2 pz SKU 44A, 2 pz SKU 44B, 1 pz SKU 44C"),
            Some("ordiniamo: 2 pz SKU 44A")
        );
        assert_eq!(
            first("vi chiedo 5 pz dello SKU 7 e 20 pz dello SKU 19"),
            Some("vi chiedo 5 pz dello SKU 7")
        );
        assert_eq!(
            first("ci servono alcune confezioni del codice P-14 e 8 pezzi del codice P-20"),
            Some("ci servono alcune confezioni del codice P-14")
        );
        assert_eq!(
            first("SKU 7: 5 pezzi, SKU 19: 20 pezzi"),
            Some("SKU 7: 5 pezzi")
        );
        assert_eq!(
            first("2 pz SKU 44A, 2 pz SKU 44B, 1 pz SKU 44C"),
            Some("2 pz SKU 44A")
        );
        // Case does not matter for the cue.
        assert_eq!(first("sku 1 and SKU 2"), Some("sku 1"));
    }

    #[test]
    fn one_item_stays_whole() {
        for v in [
            // README command 1's first row: one code named, and a quantity.
            "come da telefonata di ieri avremmo bisogno di 12 pz dello SKU 11 (quelli grigi)",
            "e se possibile anche una decina dei 42. Per i 42 non c'è fretta",
            // The same code twice is one item.
            "12 pz dello SKU 11, poi altri 3 dello SKU 11",
            // A one-letter word is no cue ("i").
            "I P-20 ci servono al più presto, per i P-14 nessuna fretta",
            // No digits: no codes.
            "Consegna in Via Roma, fattura a Via Roma",
            "",
            "SKU",
        ] {
            assert_eq!(first(v), None, "{v:?}");
        }
    }

    #[test]
    fn a_list_the_document_does_not_state_gives_its_first_part() {
        let doc = "ordiniamo: 2 pz sku 44a, 2 pz sku 44b, 1 pz sku 44c.";
        let stated = |s: &str| doc.contains(&s.to_lowercase());
        assert_eq!(first_of_list("44A, 44B, 44C", stated), Some("44A"));
        assert_eq!(first_of_list("44A; 44B", stated), Some("44A"));
        // Stated whole, or a part not stated, or one part: kept.
        assert_eq!(first_of_list("2 pz sku 44a, 2 pz sku 44b", stated), None);
        assert_eq!(first_of_list("44A, 99Z", stated), None);
        assert_eq!(first_of_list("44A", stated), None);
        assert_eq!(first_of_list("44A, , 44B", stated), None);
    }

    #[test]
    fn a_quotation_is_taken_to_the_end_of_its_clause_when_no_item_follows() {
        let doc =
            "Buongiorno,\nvi ordino 40 pezzi del codice K-210, ci servono con urgenza.\nGrazie";
        assert_eq!(
            rest_of_clause(doc, "vi ordino 40 pezzi del codice K-210"),
            Some(", ci servono con urgenza")
        );
        assert_eq!(
            rest_of_clause(doc, "VI ORDINO 40 pezzi"),
            None,
            "a quantity follows"
        );
        let doc = "vorremmo 14 pezzi dell'articolo 620 e 2 pezzi dell'articolo 625, senza fretta.";
        assert_eq!(
            rest_of_clause(doc, "vorremmo 14 pezzi dell'articolo 620"),
            None
        );
        assert_eq!(
            rest_of_clause(doc, "e 2 pezzi dell'articolo 625"),
            Some(", senza fretta")
        );
        // Already whole, or not in the document.
        assert_eq!(
            rest_of_clause(doc, "e 2 pezzi dell'articolo 625, senza fretta"),
            None
        );
        assert_eq!(rest_of_clause(doc, "altro"), None);
        assert_eq!(
            rest_of_clause("peso 2.5 kg circa. Poi", "peso"),
            None,
            "2.5 is a number"
        );
        assert_eq!(
            rest_of_clause("Via Roma 3, Lecce. Fattura", "Via Roma 3"),
            Some(", Lecce")
        );
    }
}
