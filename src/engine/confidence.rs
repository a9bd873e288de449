//! The confidence of each value of an extraction: how sure the model was of it, read
//! from the distribution the mask left at each token the model chose. Pure: the
//! decoding loop records the numbers ([`Probs`]), this module reads them against the
//! output text.
//!
//! **What the number is.** At every step where the model picks a token (not a forced
//! one), the loop records the chosen token's probability *under the mask*: the softmax
//! over the allowed tokens only, at the temperature the sampler used (greedy: 1; a
//! `top_p` cut is not applied; with a null bias, the biased logits the choice was made
//! from). A value's tokens are the chosen tokens whose bytes overlap the value's bytes,
//! and the chosen token that ends exactly where the value starts (`":` before `null`:
//! its rivals, such as `":"`, start the value inside them). Forced tokens (jump-forward,
//! or a single allowed token) are not choices and count 1.
//! - A value that is not `null`: the product of its tokens' probabilities (1 when all
//!   of them were forced), the model's probability of writing exactly that value there.
//! - `null`, where the loop recorded the choice between `null` and a value at the
//!   value's first byte ([`NullOdds`]): `null` weighed against the best value start,
//!   `P(null) / (P(null) + P(best other token))`, both under the mask at that step;
//!   where the loop also weighed it against the best whole value the document offers
//!   (a grounded text field, [`NullOdds::whole`]), against that value when it weighs
//!   more: `P(null) / (P(null) + P(value | a value))`. A model sure of `null` (0.9999)
//!   where the document states the value still writes that value, once it writes one,
//!   with a probability of 0.1 to 1: those nulls are the wrong ones. Elsewhere (the
//!   choice fell inside a token, `":null`), the product as above.
//! - `null` written by grounding in place of a value the document does not state:
//!   1 minus the probability of the value taken back.
//!
//! Other [`Rule`]s (the minimum over the tokens, the tokens at the value's start only,
//! `null` as a product) exist to measure against each other (`formwork bench`).

use std::collections::BTreeMap;

/// One token the model chose: its byte range in the output and its probability under
/// the mask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chosen {
    /// Output bytes before the token.
    pub at: usize,
    /// Its length in bytes.
    pub len: usize,
    pub p: f64,
}

/// Where `null` competed with a value, at output byte `at` (where the value starts):
/// the probability under the mask of the tokens that start `null`, and of the best
/// allowed token that starts something else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NullOdds {
    pub at: usize,
    pub null: f64,
    pub value: f64,
    /// Where the `null` was weighed against the best whole value the document offers
    /// (a quotation, [`crate::engine::ground::quote`]): that value's probability given
    /// that a value is written, its tokens' product under the mask divided by the
    /// probability of not starting `null`.
    pub whole: Option<f64>,
}

/// What the decoding loop records for confidences (masked decoding with
/// `DecodeOptions::confidence`; free decoding records `chosen` under no mask).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Probs {
    /// Every chosen token, in output order.
    pub chosen: Vec<Chosen>,
    pub odds: Vec<NullOdds>,
    /// Grounded values taken back and written `null`: where the value started (`at`),
    /// its length, and the probability the model had given it.
    pub taken_back: Vec<Chosen>,
}

impl Probs {
    /// Moves every offset by `-by` (a value found at `by` in a longer text); entries
    /// before it are dropped.
    pub fn shifted(&self, by: usize) -> Probs {
        let c = |v: &[Chosen]| {
            v.iter()
                .filter(|c| c.at + c.len > by)
                .map(|c| Chosen {
                    at: c.at.saturating_sub(by),
                    len: c.len - by.saturating_sub(c.at),
                    p: c.p,
                })
                .collect()
        };
        Probs {
            chosen: c(&self.chosen),
            taken_back: c(&self.taken_back),
            odds: (self.odds.iter())
                .filter(|o| o.at >= by)
                .map(|o| NullOdds {
                    at: o.at - by,
                    ..*o
                })
                .collect(),
        }
    }
}

/// How a value's token probabilities become one number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// The product: the probability of the value's tokens.
    Product,
    /// The least probable token.
    Min,
    /// The product over the tokens that begin at or before the value's first byte: the
    /// choice of how the value starts.
    Start,
}

/// How `null` is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NullRule {
    /// Against the best value start, where the choice was recorded ([`NullOdds`]).
    Odds,
    /// Against the best whole value the document offers, where it was weighed
    /// ([`NullOdds::whole`]; the best value start elsewhere, or when it weighs more):
    /// `P(null) / (P(null) + P(value | a value))`.
    Weighed,
    /// As any value (its tokens' probabilities).
    Path,
    /// The chosen tokens that end where `null` starts (`":`, whose rivals such as
    /// `":"` start a value inside them), then the odds at its start: the choice of
    /// `null` over a value across both steps.
    Chain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub tokens: Combine,
    pub null: NullRule,
}

impl Rule {
    /// The confidence of the envelope (see the module doc).
    pub const DEFAULT: Rule = Rule {
        tokens: Combine::Product,
        null: NullRule::Weighed,
    };

    /// Every rule, the default first.
    pub fn all() -> Vec<Rule> {
        let mut v = vec![Rule::DEFAULT];
        for tokens in [Combine::Product, Combine::Min, Combine::Start] {
            for null in [
                NullRule::Chain,
                NullRule::Odds,
                NullRule::Path,
                NullRule::Weighed,
            ] {
                let r = Rule { tokens, null };
                if r != Rule::DEFAULT {
                    v.push(r);
                }
            }
        }
        v
    }

    /// `product+odds`, `min+path`, ...
    pub fn name(self) -> String {
        let t = match self.tokens {
            Combine::Product => "product",
            Combine::Min => "min",
            Combine::Start => "start",
        };
        let n = match self.null {
            NullRule::Odds => "odds",
            NullRule::Path => "path",
            NullRule::Chain => "chain",
            NullRule::Weighed => "weighed",
        };
        format!("{t}+{n}")
    }
}

/// One scalar value (or empty array or object) of a JSON text, by byte range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub pointer: String,
    pub start: usize,
    pub end: usize,
    pub null: bool,
}

/// The leaves of the JSON text `text` (surrounding whitespace allowed), in order;
/// `None` when it is not one JSON value or nests deeper than 256.
pub fn leaves(text: &[u8]) -> Option<Vec<Leaf>> {
    let mut p = Parser {
        b: text,
        i: 0,
        out: Vec::new(),
    };
    p.ws();
    p.value(&mut String::new(), 0)?;
    p.ws();
    (p.i == text.len()).then_some(p.out)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    out: Vec<Leaf>,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string's end (just past its closing quote), from its opening quote.
    fn string(&mut self) -> Option<usize> {
        let mut j = self.i + 1;
        loop {
            match *self.b.get(j)? {
                b'"' => break,
                b'\\' => j += 2,
                _ => j += 1,
            }
        }
        self.i = j + 1;
        Some(self.i)
    }

    fn value(&mut self, ptr: &mut String, depth: usize) -> Option<()> {
        if depth > 256 {
            return None;
        }
        self.ws();
        let start = self.i;
        match *self.b.get(self.i)? {
            c @ (b'{' | b'[') => {
                self.i += 1;
                let close = if c == b'{' { b'}' } else { b']' };
                if self.eat(close).is_some() {
                    self.leaf(ptr, start, false);
                    return Some(());
                }
                let mut n = 0usize;
                loop {
                    let len = ptr.len();
                    if c == b'{' {
                        self.ws();
                        let ks = self.i;
                        (self.b.get(ks) == Some(&b'"')).then_some(())?;
                        let ke = self.string()?;
                        let key: String = serde_json::from_slice(&self.b[ks..ke]).ok()?;
                        ptr.push('/');
                        ptr.push_str(&crate::pointer::escape(&key));
                        self.eat(b':')?;
                    } else {
                        ptr.push_str(&format!("/{n}"));
                    }
                    self.value(ptr, depth + 1)?;
                    ptr.truncate(len);
                    n += 1;
                    if self.eat(b',').is_none() {
                        return self.eat(close);
                    }
                }
            }
            b'"' => {
                self.string()?;
                self.leaf(ptr, start, false);
            }
            b'n' | b't' | b'f' => {
                let word: &[u8] = match self.b[self.i] {
                    b'n' => b"null",
                    b't' => b"true",
                    _ => b"false",
                };
                self.b[self.i..].starts_with(word).then_some(())?;
                self.i += word.len();
                self.leaf(ptr, start, word == b"null");
            }
            b'-' | b'0'..=b'9' => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    self.i += 1;
                }
                self.leaf(ptr, start, false);
            }
            _ => return None,
        }
        Some(())
    }

    fn leaf(&mut self, ptr: &str, start: usize, null: bool) {
        self.out.push(Leaf {
            pointer: ptr.to_string(),
            start,
            end: self.i,
            null,
        });
    }
}

/// Whether chosen token `c` belongs to the value at `[start, end)`: it overlaps it, or
/// ends exactly where it starts.
fn touches(c: &Chosen, start: usize, end: usize) -> bool {
    c.len > 0 && c.at < end && c.at + c.len >= start
}

/// The value at bytes `[start, end)` by its chosen tokens (1 when none was chosen).
pub fn value_p(chosen: &[Chosen], start: usize, end: usize, combine: Combine) -> f64 {
    let it = chosen.iter().filter(|c| touches(c, start, end));
    combine_p(it.map(|c| (c.at, c.p)), start, combine)
}

/// Combines the probabilities `ps` (each with the byte offset where its token
/// begins) of a value starting at `start`.
fn combine_p(ps: impl Iterator<Item = (usize, f64)>, start: usize, combine: Combine) -> f64 {
    match combine {
        Combine::Product => ps.map(|x| x.1).product(),
        Combine::Min => ps.map(|x| x.1).fold(1.0, f64::min),
        Combine::Start => ps.filter(|x| x.0 <= start).map(|x| x.1).product(),
    }
}

/// Every leaf's confidence by JSON Pointer (see the module doc), for the JSON text
/// `text` that `probs` was recorded against. `None` when `text` is not JSON.
pub fn confidence(text: &[u8], probs: &Probs, rule: Rule) -> Option<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for leaf in leaves(text)? {
        let c = if !leaf.null {
            value_p(&probs.chosen, leaf.start, leaf.end, rule.tokens)
        } else if let Some(t) = probs.taken_back.iter().find(|t| t.at == leaf.start) {
            1.0 - t.p
        } else {
            match probs.odds.iter().find(|o| o.at == leaf.start) {
                Some(o) if rule.null != NullRule::Path && o.null + o.value > 0.0 => {
                    let value = match (rule.null, o.whole) {
                        (NullRule::Weighed, Some(w)) => o.value.max(w),
                        _ => o.value,
                    };
                    let odds = o.null / (o.null + value);
                    let lead = (probs.chosen.iter())
                        .filter(|c| {
                            rule.null == NullRule::Chain
                                && touches(c, leaf.start, leaf.end)
                                && c.at + c.len <= leaf.start
                        })
                        .map(|c| (c.at, c.p));
                    combine_p(lead.chain([(leaf.start, odds)]), leaf.start, rule.tokens)
                }
                _ => value_p(&probs.chosen, leaf.start, leaf.end, rule.tokens),
            }
        };
        out.insert(leaf.pointer, c.clamp(0.0, 1.0));
    }
    Some(out)
}

/// The confidence of the value at `pointer`: its own, or for a container the least of
/// the leaves inside it; `None` when the map holds neither.
pub fn at_pointer(conf: &BTreeMap<String, f64>, pointer: &str) -> Option<f64> {
    if let Some(&c) = conf.get(pointer) {
        return Some(c);
    }
    let prefix = format!("{pointer}/");
    conf.range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(_, &c)| c)
        .reduce(f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_have_pointers_and_byte_ranges() {
        let t = br#"{"a":"x","b":{"c":null,"d~/":[1,true]},"e":[]}"#;
        let l = leaves(t).unwrap();
        let got: Vec<(&str, &[u8], bool)> = l
            .iter()
            .map(|x| (x.pointer.as_str(), &t[x.start..x.end], x.null))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/a", &b"\"x\""[..], false),
                ("/b/c", b"null", true),
                ("/b/d~0~1/0", b"1", false),
                ("/b/d~0~1/1", b"true", false),
                ("/e", b"[]", false),
            ]
        );
        assert_eq!(leaves(b" {\"a\": \"q\\\"\" } ").unwrap()[0].end, 12);
        assert!(leaves(b"{\"a\":").is_none());
        assert!(leaves(b"{} x").is_none());
    }

    #[test]
    fn a_value_is_its_tokens_and_null_its_odds() {
        // {"a":"xy","b":null}: `":"` crosses into a's value, `y"` is its last token;
        // `":` ends where b's null starts, `null` is chosen against the odds.
        let t = br#"{"a":"xy","b":null}"#;
        let probs = Probs {
            chosen: vec![
                Chosen {
                    at: 3,
                    len: 3,
                    p: 0.5,
                }, // `":"`
                Chosen {
                    at: 6,
                    len: 1,
                    p: 0.8,
                }, // `x`
                Chosen {
                    at: 7,
                    len: 2,
                    p: 0.9,
                }, // `y"`
                Chosen {
                    at: 12,
                    len: 2,
                    p: 0.6,
                }, // `":`
                Chosen {
                    at: 14,
                    len: 4,
                    p: 0.7,
                }, // `null`
            ],
            odds: vec![NullOdds {
                at: 14,
                null: 0.7,
                value: 0.1,
                whole: None,
            }],
            taken_back: Vec::new(),
        };
        let c = confidence(t, &probs, Rule::DEFAULT).unwrap();
        assert!((c["/a"] - 0.5 * 0.8 * 0.9).abs() < 1e-12);
        assert!((c["/b"] - 0.7 / 0.8).abs() < 1e-12);
        let path = Rule {
            tokens: Combine::Product,
            null: NullRule::Path,
        };
        let c = confidence(t, &probs, path).unwrap();
        assert!((c["/b"] - 0.6 * 0.7).abs() < 1e-12);
        // The token before null, then the odds.
        let chain = Rule {
            tokens: Combine::Product,
            null: NullRule::Chain,
        };
        let c = confidence(t, &probs, chain).unwrap();
        assert!((c["/b"] - 0.6 * 0.7 / 0.8).abs() < 1e-12);
        // Against the whole value the document offers.
        let weighed = Rule {
            tokens: Combine::Product,
            null: NullRule::Weighed,
        };
        let c = confidence(t, &probs, weighed).unwrap();
        assert!(
            (c["/b"] - 0.7 / 0.8).abs() < 1e-12,
            "the odds where none was weighed"
        );
        let mut w = probs.clone();
        w.odds[0].whole = Some(0.7);
        let c = confidence(t, &w, weighed).unwrap();
        assert!((c["/b"] - 0.5).abs() < 1e-12);
        let odds = Rule {
            tokens: Combine::Product,
            null: NullRule::Odds,
        };
        let c = confidence(t, &w, odds).unwrap();
        assert!(
            (c["/b"] - 0.7 / 0.8).abs() < 1e-12,
            "the odds rule ignores it"
        );
        assert!((c["/a"] - 0.5 * 0.8 * 0.9).abs() < 1e-12);
        let min = Rule {
            tokens: Combine::Min,
            null: NullRule::Path,
        };
        assert!((confidence(t, &probs, min).unwrap()["/a"] - 0.5).abs() < 1e-12);
        let start = Rule {
            tokens: Combine::Start,
            null: NullRule::Path,
        };
        assert!((confidence(t, &probs, start).unwrap()["/a"] - 0.5).abs() < 1e-12);
        // A value taken back by grounding: 1 minus its probability.
        let back = Probs {
            taken_back: vec![Chosen {
                at: 14,
                len: 5,
                p: 0.9,
            }],
            ..probs.clone()
        };
        assert!((confidence(t, &back, Rule::DEFAULT).unwrap()["/b"] - 0.1).abs() < 1e-12);
        // Shifted into a longer text.
        let s = probs.shifted(3);
        assert_eq!(
            s.chosen[0],
            Chosen {
                at: 0,
                len: 3,
                p: 0.5
            }
        );
        assert_eq!(s.odds[0].at, 11);
    }

    #[test]
    fn a_container_takes_its_least_confident_leaf() {
        let m: BTreeMap<String, f64> = [("/a/0", 0.9), ("/a/1", 0.4), ("/ab", 0.1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(at_pointer(&m, "/a"), Some(0.4));
        assert_eq!(at_pointer(&m, "/ab"), Some(0.1));
        assert_eq!(at_pointer(&m, "/z"), None);
    }
}
