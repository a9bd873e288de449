//! Exact comparison of JSON numbers on their text, for `x-formwork-rules`.
//!
//! The standard keywords need nothing from here: jsonschema's `arbitrary-precision` feature
//! is exact for them (see the module documentation of [`crate::validate`]). A rule that
//! compares two fields (`"op": ">="`) compares the numbers' decimal texts, so
//! `12345678901234567890.01 < 12345678901234567890.02` and `0.1 + tiny > 0.1` hold, and
//! `1e400` is larger than any f64.

use std::cmp::Ordering;

/// A JSON number as sign, significant digits and a power of ten: value = digits × 10^exp.
/// Normalised: no leading or trailing zeros in `digits`; zero has no digits and is positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i128,
}

impl Decimal {
    /// Parse JSON number text (`-12.5e3`). `None` for anything else.
    pub fn parse(text: &str) -> Option<Decimal> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let negative = bytes.first() == Some(&b'-');
        if negative {
            i += 1;
        }
        let mut digits = Vec::new();
        let mut exp: i128 = 0;
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            digits.push(bytes[i] - b'0');
            i += 1;
        }
        if i == int_start {
            return None;
        }
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                digits.push(bytes[i] - b'0');
                exp -= 1;
                i += 1;
            }
            if i == frac_start {
                return None;
            }
        }
        if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
            i += 1;
            let mut e_neg = false;
            if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
                e_neg = bytes[i] == b'-';
                i += 1;
            }
            let e_start = i;
            let mut e: i128 = 0;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                // Saturate: an exponent past 10^30 is already beyond any digit count.
                e = (e * 10 + i128::from(bytes[i] - b'0'))
                    .min(1_000_000_000_000_000_000_000_000_000_000);
                i += 1;
            }
            if i == e_start {
                return None;
            }
            exp += if e_neg { -e } else { e };
        }
        if i != bytes.len() {
            return None;
        }
        // Normalise.
        let lead = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..lead);
        while digits.last() == Some(&0) {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            return Some(Decimal {
                negative: false,
                digits,
                exp: 0,
            });
        }
        Some(Decimal {
            negative,
            digits,
            exp,
        })
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Compare magnitudes.
    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        // Position of the leading digit: len + exp.
        let a = self.digits.len() as i128 + self.exp;
        let b = other.digits.len() as i128 + other.exp;
        a.cmp(&b).then_with(|| self.digits.cmp(&other.digits))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_abs(other),
            (true, true) => other.cmp_abs(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Compare two JSON numbers exactly.
pub fn compare(a: &serde_json::Number, b: &serde_json::Number) -> Option<Ordering> {
    Some(Decimal::parse(&a.to_string())?.cmp(&Decimal::parse(&b.to_string())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    #[test]
    fn exact_order() {
        assert!(d("0.1000000000000000000001") > d("0.1"));
        assert!(d("12345678901234567890.01") < d("12345678901234567890.02"));
        assert!(d("1e400") > d("179769313486231570000000000000000000000"));
        assert!(d("-1e400") < d("-5"));
        assert_eq!(d("1.0"), d("1"));
        assert_eq!(d("10e-1"), d("1"));
        assert_eq!(d("-0.0"), d("0"));
        assert!(d("-0.5") < d("0"));
        assert!(d("0.99") < d("1"));
        assert!(d("19.99") < d("20"));
        assert_eq!(d("1.5E+2"), d("150"));
    }

    #[test]
    fn rejects_non_numbers() {
        assert!(Decimal::parse("1.").is_none());
        assert!(Decimal::parse("abc").is_none());
        assert!(Decimal::parse("1e").is_none());
    }
}
