//! The calendar days a document states, for grounding `format: date` strings.
//!
//! An ISO date is never a quotation ("on 2/6/2020" gives `2020-02-06`), so a date
//! field is grounded by its meaning: its value stands when the document states that
//! day with its day, month and year. Read here:
//! - numbers: `2/6/2020`, `2-6-2020`, `2.6.2020` (month/day and day/month both count,
//!   when each is a day of the calendar), `2020-02-06`;
//! - a month name, full or cut (`Dec.`, `sept`), with the day before or after it, as
//!   digits (`8`, `8th`) or words (`sixth`, `twenty-first`, `thirty one`), between
//!   `the`, `of`, `on` and commas, and a four-digit year after them: `march sixth,
//!   2038`, `june the 8th, 2029`, `the fifth of march 2030`, `5 March 2030`.
//!
//! A day without a year ("jun. 2") is not a calendar day: it is not stated. Pure.

/// A calendar day: (year, month 1..=12, day 1..=31), a day that exists.
pub type Day = (u32, u32, u32);

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

fn month(w: &str) -> Option<u32> {
    if w == "sept" {
        return Some(9);
    }
    MONTHS
        .iter()
        .position(|m| w == *m || (w.len() == 3 && m.starts_with(w)))
        .map(|i| i as u32 + 1)
}

const ORDINALS: [&str; 31] = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
    "twenty-first",
    "twenty-second",
    "twenty-third",
    "twenty-fourth",
    "twenty-fifth",
    "twenty-sixth",
    "twenty-seventh",
    "twenty-eighth",
    "twenty-ninth",
    "thirtieth",
    "thirty-first",
];

const CARDINALS: [&str; 19] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];

/// A day of the month written as one word: `8`, `08`, `8th`, `sixth`, `six`,
/// `twenty-first` (the caller joins `twenty first` into one word).
fn day_word(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !digits.is_empty() && digits.len() <= 2 && digits.bytes().all(|b| b.is_ascii_digit()) {
        let suffix = &w[digits.len()..];
        if matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
            return digits.parse().ok().filter(|d| (1..=31).contains(d));
        }
        return None;
    }
    if let Some(i) = ORDINALS.iter().position(|o| *o == w) {
        return Some(i as u32 + 1);
    }
    if let Some(i) = CARDINALS.iter().position(|o| *o == w) {
        return Some(i as u32 + 1);
    }
    match w {
        "twenty" => Some(20),
        "thirty" => Some(30),
        _ => {
            let (tens, unit) = w.split_once('-')?;
            let t = match tens {
                "twenty" => 20,
                "thirty" => 30,
                _ => return None,
            };
            let u = CARDINALS.iter().position(|o| *o == unit)? as u32 + 1;
            (u <= 9 && t + u <= 31).then_some(t + u)
        }
    }
}

fn year_word(w: &str) -> Option<u32> {
    (w.len() == 4 && w.bytes().all(|b| b.is_ascii_digit()))
        .then(|| w.parse().ok())
        .flatten()
        .filter(|y| *y >= 1)
}

fn days_in(y: u32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 0,
    }
}

fn day(y: u32, m: u32, d: u32) -> Option<Day> {
    (d >= 1 && d <= days_in(y, m)).then_some((y, m, d))
}

/// Parses an ISO calendar date `YYYY-MM-DD` (the `format: date` of JSON Schema).
pub fn parse_iso(s: &str) -> Option<Day> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let p = &s[r];
        p.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| p.parse().ok())
            .flatten()
    };
    day(num(0..4)?, num(5..7)?, num(8..10)?)
}

/// Numeric dates: three runs of digits joined by one kind of separator (`/`, `-`,
/// `.`), with a four-digit year first or last.
fn numeric_days(text: &str, out: &mut Vec<Day>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (b[i - 1].is_ascii_alphanumeric())) {
            i += 1;
            continue;
        }
        // Up to three digit runs with one separator kind.
        let mut parts: Vec<&str> = Vec::new();
        let mut sep = None;
        let mut j = i;
        loop {
            let s = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            parts.push(&text[s..j]);
            if parts.len() == 3 || j + 1 >= b.len() {
                break;
            }
            let c = b[j];
            if !matches!(c, b'/' | b'-' | b'.') || sep.is_some_and(|x| x != c) {
                break;
            }
            if !b[j + 1].is_ascii_digit() {
                break;
            }
            sep = Some(c);
            j += 1;
        }
        let ends_clean = j >= b.len() || !b[j].is_ascii_alphanumeric();
        if parts.len() == 3 && ends_clean {
            let n: Vec<u32> = parts.iter().filter_map(|p| p.parse().ok()).collect();
            if n.len() == 3 {
                if parts[0].len() == 4 && parts[1].len() <= 2 && parts[2].len() <= 2 {
                    out.extend(day(n[0], n[1], n[2]));
                } else if parts[2].len() == 4 && parts[0].len() <= 2 && parts[1].len() <= 2 {
                    // Month/day (US) and day/month: both are what the text may mean.
                    out.extend(day(n[2], n[0], n[1]));
                    out.extend(day(n[2], n[1], n[0]));
                }
            }
        }
        i = j.max(i + 1);
    }
}

/// Lowercase words (letters, digits, and `-` inside a word), with `twenty first`
/// joined to `twenty-first`.
fn words(text: &str) -> Vec<String> {
    let raw: Vec<String> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .map(|w| w.trim_matches('-').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for w in raw {
        if let Some(last) = out.last_mut() {
            let tens = last == "twenty" || last == "thirty";
            let unit = ORDINALS[..9].contains(&w.as_str()) || CARDINALS[..9].contains(&w.as_str());
            if tens && unit {
                last.push('-');
                last.push_str(&w);
                continue;
            }
        }
        out.push(w);
    }
    out
}

fn filler(w: &str) -> bool {
    matches!(w, "the" | "of" | "on")
}

/// Day and month in words, then the year: `MONTH [the] DAY [of] YEAR`,
/// `[the] DAY [of] MONTH YEAR`.
fn worded_days(text: &str, out: &mut Vec<Day>) {
    let w = words(text);
    for i in 0..w.len() {
        let Some(m) = month(&w[i]) else { continue };
        // Month first: the day, then the year.
        let mut j = i + 1;
        while j < w.len() && filler(&w[j]) {
            j += 1;
        }
        if let Some(d) = w.get(j).and_then(|x| day_word(x)) {
            let mut k = j + 1;
            while k < w.len() && filler(&w[k]) {
                k += 1;
            }
            if let Some(y) = w.get(k).and_then(|x| year_word(x)) {
                out.extend(day(y, m, d));
            }
        }
        // Day first: the day before the month, the year after it.
        let mut j = i;
        while j > 0 && filler(&w[j - 1]) {
            j -= 1;
        }
        if j > 0 {
            if let Some(d) = day_word(&w[j - 1]) {
                if let Some(y) = w.get(i + 1).and_then(|x| year_word(x)) {
                    out.extend(day(y, m, d));
                }
            }
        }
    }
}

/// The calendar days `text` states, each once, in order of first mention.
pub fn stated_days(text: &str) -> Vec<Day> {
    let mut out = Vec::new();
    numeric_days(text, &mut out);
    worded_days(text, &mut out);
    let mut seen = std::collections::HashSet::new();
    out.retain(|d| seen.insert(*d));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Vec<Day> {
        stated_days(text)
    }

    #[test]
    fn the_snips_forms_are_read() {
        let cases: &[(&str, Day)] = &[
            ("rebecca and loraine on 2/6/2020.", (2020, 2, 6)),
            (
                "book John Pearson Soda Works restaurant on 7/27/2036",
                (2036, 7, 27),
            ),
            (
                "at Turtle Creek neighboring on march sixth, 2038 for eight",
                (2038, 3, 6),
            ),
            ("On Dec. 13, 2018 I need a reservation", (2018, 12, 13)),
            ("at a pub on mar. 8, 2020 that is close", (2020, 3, 8)),
            ("at The French Laundry on june the 8th, 2029", (2029, 6, 8)),
            (
                "in Seeley Lake on july the fourteenth, 2022.",
                (2022, 7, 14),
            ),
            (
                "a cafe in Botswana on Apr. the seventeenth, 2024",
                (2024, 4, 17),
            ),
            ("in Conshohocken on Jul. the 18th, 2024", (2024, 7, 18)),
            ("Territories on dec. the fifth, 2026 for two", (2026, 12, 5)),
            ("sep. the fifth, 2030", (2030, 9, 5)),
            ("on the twenty first of Sept 2031", (2031, 9, 21)),
            ("due 5 March 2030.", (2030, 3, 5)),
            ("on 2030-09-05", (2030, 9, 5)),
            ("on twenty-ninth of february 2024", (2024, 2, 29)),
        ];
        for (text, want) in cases {
            let got = one(text);
            assert!(got.contains(want), "{text}: {got:?}");
        }
        // Both readings of an ambiguous numeric date; one when the other is no day.
        assert_eq!(one("on 2/6/2020"), [(2020, 2, 6), (2020, 6, 2)]);
        assert_eq!(one("on 11/23/2031"), [(2031, 11, 23)]);
    }

    #[test]
    fn what_is_not_a_stated_day() {
        for text in [
            "book a table on jun. 2.",
            "next friday",
            "in 2 weeks at 5 pm, 2020",
            "on 29 february 2023",
            "room 12/13/20",
            "version 1.2.2020a",
            "march 2030",
            "may I book for 4 people 2030",
        ] {
            assert_eq!(one(text), [], "{text}");
        }
    }

    #[test]
    fn iso_values_parse_and_must_exist() {
        assert_eq!(parse_iso("2020-02-06"), Some((2020, 2, 6)));
        assert_eq!(parse_iso("2023-02-29"), None);
        assert_eq!(parse_iso("2020-2-06"), None);
        assert_eq!(parse_iso("2020-02-06T00:00"), None);
    }
}
