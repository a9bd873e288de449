//! Tolerant extraction for free decoding: the first balanced JSON object or array in a text.
//!
//! A model left unconstrained says "Ecco il risultato: {...}" or wraps its answer in a
//! markdown fence. [`extract_json`] finds the value and says what it had to strip, so the
//! caller can report it (a constrained run never needs this).
//!
//! 1. If the text has a markdown fence (```` ``` ```` with an optional info string such as
//!    `json`), the search runs inside the first fenced block; when that block holds no JSON
//!    value, the whole text is searched.
//! 2. From each `{` or `[` in turn, a scan finds the matching closer, skipping over string
//!    literals (so braces inside `"sotto la soglia {10}"` do not count) and their escapes.
//! 3. The first balanced span that parses as JSON wins. When none parses, the first balanced
//!    span is returned anyway, so the caller reports its parse error; when none is balanced
//!    (a truncated answer), there is nothing to extract.
//!
//! At most [`MAX_STARTS`] start positions are tried, so a hostile text full of brackets costs
//! linear time, not quadratic.

/// How many `{` / `[` positions are tried before giving up.
pub const MAX_STARTS: usize = 64;

/// What [`extract_json`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The JSON text of the value, exactly as it appears in the input.
    pub value_text: String,
    /// A markdown fence was removed.
    pub stripped_fence: bool,
    /// Text other than whitespace (and the fence) surrounded the value.
    pub had_surrounding_text: bool,
}

/// Find the first balanced JSON object or array in `text` (see the module documentation).
pub fn extract_json(text: &str) -> Option<Extracted> {
    extract_counted(text, &mut 0)
}

/// [`extract_json`], adding to `scanned` every byte its bracket scans look at: at most
/// `(MAX_STARTS + 1) x len` for a fence's search and the whole text's (the tests hold it to
/// that, and `benches/validate_hostile.rs` times it).
fn extract_counted(text: &str, scanned: &mut usize) -> Option<Extracted> {
    if let Some((start, end)) = fenced_block(text) {
        if let Some(found) = extract_in(text, start, end, true, scanned) {
            return Some(found);
        }
    }
    // No fence, or nothing in it: search the whole text.
    extract_in(text, 0, text.len(), false, scanned)
}

/// Search `text[region_start..region_end]`; `stripped_fence` says that range is a fence's
/// content.
fn extract_in(
    text: &str,
    region_start: usize,
    region_end: usize,
    stripped_fence: bool,
    scanned: &mut usize,
) -> Option<Extracted> {
    let region = &text[region_start..region_end];
    let bytes = region.as_bytes();
    let mut first_balanced: Option<(usize, usize)> = None;
    let mut found: Option<(usize, usize)> = None;
    let mut tried = 0;
    let mut i = 0;
    while i < bytes.len() && tried < MAX_STARTS {
        *scanned += 1;
        if bytes[i] == b'{' || bytes[i] == b'[' {
            tried += 1;
            match balanced_end(bytes, i, scanned) {
                Some(end) => {
                    let span = &region[i..end];
                    if first_balanced.is_none() {
                        first_balanced = Some((i, end));
                    }
                    if serde_json::from_str::<serde::de::IgnoredAny>(span).is_ok() {
                        found = Some((i, end));
                        break;
                    }
                }
                None => {
                    // Nothing after an unbalanced opener can close at this level either; a
                    // later opener may still start a complete value.
                }
            }
        }
        i += 1;
    }
    let (s, e) = found.or(first_balanced)?;
    let before = &text[..region_start + s];
    let after = &text[region_start + e..];
    let outside_fence = |t: &str| t.replace("```", " ");
    let had_surrounding_text = if stripped_fence {
        // Inside the fence: anything other than whitespace around the value; outside: any
        // text other than the fence markers and the info string line.
        let inner_before = &region[..s];
        let inner_after = &region[e..];
        let fence_open = &text[..region_start];
        let open_line = fence_open.rfind("```").map_or("", |p| &fence_open[..p]);
        let close = &text[region_start + region.len()..];
        let close_rest = close.strip_prefix("```").unwrap_or(close);
        !inner_before.trim().is_empty()
            || !inner_after.trim().is_empty()
            || !outside_fence(open_line).trim().is_empty()
            || !close_rest.trim().is_empty()
    } else {
        !before.trim().is_empty() || !after.trim().is_empty()
    };
    Some(Extracted {
        value_text: text[region_start + s..region_start + e].to_string(),
        stripped_fence,
        had_surrounding_text,
    })
}

/// The byte range of the first fenced block's content: after the opening fence's line
/// (```` ``` ```` plus an optional info string) up to the closing ```` ``` ````.
fn fenced_block(text: &str) -> Option<(usize, usize)> {
    let open = text.find("```")?;
    let after_ticks = open + 3;
    // The info string runs to the end of the line; the content starts on the next line. A
    // fence with the value on the same line (```{"a":1}```) starts right after the ticks.
    let rest = &text[after_ticks..];
    let content_start = match rest.find('\n') {
        Some(nl) if !rest[..nl].contains(['{', '[']) => after_ticks + nl + 1,
        _ => after_ticks,
    };
    let close = text[content_start..].find("```")? + content_start;
    Some((content_start, close))
}

/// From an opener at `start`, the index just past its matching closer, skipping strings.
/// `None` when the brackets never balance or a closer does not match its opener.
fn balanced_end(bytes: &[u8], start: usize, scanned: &mut usize) -> Option<usize> {
    let mut stack: Vec<u8> = Vec::new();
    let mut i = start;
    let end = balanced_scan(bytes, &mut stack, &mut i);
    *scanned += i.min(bytes.len()) + 1 - start;
    end
}

fn balanced_scan(bytes: &[u8], stack: &mut Vec<u8>, at: &mut usize) -> Option<usize> {
    let i = at;
    while *i < bytes.len() {
        match bytes[*i] {
            b'"' => {
                *i += 1;
                while *i < bytes.len() && bytes[*i] != b'"' {
                    if bytes[*i] == b'\\' {
                        *i += 1;
                    }
                    *i += 1;
                }
                if *i >= bytes.len() {
                    return None;
                }
            }
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            c @ (b'}' | b']') => {
                if stack.pop() != Some(c) {
                    return None;
                }
                if stack.is_empty() {
                    return Some(*i + 1);
                }
            }
            _ => {}
        }
        *i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_object_after_text() {
        let e = extract_json("Ecco il risultato: {\"a\": 1} grazie").unwrap();
        assert_eq!(e.value_text, "{\"a\": 1}");
        assert!(!e.stripped_fence);
        assert!(e.had_surrounding_text);
    }

    #[test]
    fn strips_a_fence() {
        let e = extract_json("```json\n{\"a\": [1, 2]}\n```").unwrap();
        assert_eq!(e.value_text, "{\"a\": [1, 2]}");
        assert!(e.stripped_fence);
        assert!(!e.had_surrounding_text);
        let e = extract_json("Here:\n```json\n{\"a\": 1}\n```\nbye").unwrap();
        assert!(e.stripped_fence && e.had_surrounding_text);
    }

    #[test]
    fn braces_in_strings_do_not_count() {
        let e = extract_json("R: {\"m\": \"sotto {10} ma \\\"}\\\" e ]\"} fine.").unwrap();
        assert_eq!(e.value_text, "{\"m\": \"sotto {10} ma \\\"}\\\" e ]\"}");
    }

    #[test]
    fn skips_a_bracketed_aside_that_is_not_json() {
        let e = extract_json("Vedi [nota]: {\"a\": 1}").unwrap();
        assert_eq!(e.value_text, "{\"a\": 1}");
    }

    #[test]
    fn json_after_a_fenced_aside_is_found() {
        let e = extract_json("```\nsome code\n```\nthen {\"a\": 1}").unwrap();
        assert_eq!(e.value_text, "{\"a\": 1}");
        assert!(!e.stripped_fence);
        assert!(e.had_surrounding_text);
    }

    #[test]
    fn hostile_texts_cost_linear_scans() {
        let big = "x".repeat(1 << 20);
        let cases = [
            // One opener that never closes: one scan of the text.
            (format!("{{{big}"), 3),
            // Openers everywhere: MAX_STARTS scans at most, each to the end.
            ("[".repeat(1 << 16), MAX_STARTS + 2),
            // A string that never ends after each opener.
            (format!("{{\"{big}").repeat(4), 5),
            // A fence around nothing, then the whole text again.
            (format!("```\n{big}{{\n```"), 3),
        ];
        for (text, per_byte) in cases {
            let mut scanned = 0;
            let _ = extract_counted(&text, &mut scanned);
            assert!(
                scanned <= per_byte * text.len(),
                "{} bytes, {scanned} scanned ({} per byte)",
                text.len(),
                scanned / text.len()
            );
            assert!(scanned >= text.len() / 2, "the scan was counted: {scanned}");
        }
    }

    #[test]
    fn nothing_balanced_is_none() {
        assert_eq!(extract_json("{\"a\": 1"), None);
        assert_eq!(extract_json("no json here"), None);
    }
}
