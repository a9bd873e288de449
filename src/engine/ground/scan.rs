//! The scanner grounding reads the output with: which string values a prefix of a
//! JSON text holds and at which pointers, where the next value goes, and the object
//! rows of arrays that have closed. Pure: bytes in, offsets out.

use crate::pointer::escape;

/// One string value of a JSON text (not a key), complete.
#[derive(Clone, Debug, PartialEq)]
pub struct StringValue {
    /// Its pattern (`/rows/*/note`).
    pub pattern: String,
    /// Byte offset of its opening quote.
    pub start: usize,
    /// Byte offset just past its closing quote.
    pub end: usize,
    /// The decoded string.
    pub value: String,
    /// Byte offset of the `{` of the object it is a field of (`None` in an array or
    /// at the root): values with the same one are fields of one row.
    pub obj: Option<usize>,
}

/// One number value of a JSON text, complete (a delimiter follows it).
#[derive(Clone, Debug, PartialEq)]
pub struct NumberValue {
    pub pattern: String,
    /// Byte offsets of its first character and just past its last.
    pub start: usize,
    pub end: usize,
    /// As written (`45`, `-2.5`).
    pub text: String,
    /// As [`StringValue::obj`].
    pub obj: Option<usize>,
}

/// What a prefix of a JSON text holds, for grounding.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scan {
    /// The complete string values, in order.
    pub strings: Vec<StringValue>,
    /// The complete number values, in order.
    pub numbers: Vec<NumberValue>,
    /// When the text ends where no value has started yet (before a key, inside a
    /// key, after a key or its colon, after `[` or `,` in an array): the pattern of
    /// the container the next value goes in.
    pub before_value_in: Option<String>,
    /// Then, when it is already known (an array's next item, an object's key read
    /// and its value not started): the pattern of the next value.
    pub next_value: Option<String>,
    /// The complete objects that are items of an array, in the order they closed.
    pub items: Vec<Item>,
    /// Does the text end inside an array (at any depth)?
    pub in_array: bool,
    /// Does the text end inside a string value that has not closed (not a key), or
    /// inside a number or literal (no delimiter after it yet)?
    pub open_value: bool,
    /// When the text ends inside a string value that has not closed: its pattern and
    /// the offset of its opening quote.
    pub open_string: Option<(String, usize)>,
}

/// One complete object item of an array.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Byte offset of the array's `[`: which array it is in.
    pub array: usize,
    /// Byte offsets of its `{` and just past its `}`.
    pub start: usize,
    pub end: usize,
}

enum Frame {
    /// An object: its pattern, the current key, whether the key's value is next (after
    /// its colon), and whether that value has started.
    Object {
        pat: String,
        key: Option<String>,
        value_next: bool,
        has_value: bool,
        /// As an array's item: the offsets of the array's `[` and of this `{`.
        item_of: Option<(usize, usize)>,
        /// The offset of this `{`.
        start: usize,
    },
    Array {
        pat: String,
        value_next: bool,
        start: usize,
    },
}

impl Frame {
    fn pat(&self) -> &str {
        match self {
            Frame::Object { pat, .. } | Frame::Array { pat, .. } => pat,
        }
    }
}

/// Scans a prefix of a JSON text (compact or not). Invalid JSON gives what was read
/// before the fault.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut stack: Vec<Frame> = Vec::new();
    // The root's value has not started.
    let mut root_next = true;
    let mut i = 0;
    // Inside a scalar (number, literal): it ends at a delimiter.
    let mut in_scalar = false;
    let value_pattern = |stack: &Vec<Frame>| -> String {
        match stack.last() {
            Some(Frame::Object { pat, key, .. }) => {
                format!("{pat}/{}", escape(key.as_deref().unwrap_or("")))
            }
            Some(Frame::Array { pat, .. }) => format!("{pat}/*"),
            None => String::new(),
        }
    };
    let obj_of = |stack: &Vec<Frame>| match stack.last() {
        Some(Frame::Object { start, .. }) => Some(*start),
        _ => None,
    };
    // The number being read: its pattern, start and object.
    let mut number: Option<(String, usize, Option<usize>)> = None;
    let mut unterminated = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_scalar {
            if matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace() {
                in_scalar = false;
                if let Some((pattern, start, obj)) = number.take() {
                    out.numbers.push(NumberValue {
                        pattern,
                        start,
                        end: i,
                        text: String::from_utf8_lossy(&bytes[start..i]).into_owned(),
                        obj,
                    });
                }
            } else {
                i += 1;
                continue;
            }
        }
        // Is a value expected here?
        let value_next = match stack.last() {
            Some(Frame::Object { value_next, .. }) | Some(Frame::Array { value_next, .. }) => {
                *value_next
            }
            None => root_next,
        };
        match c {
            b'"' => {
                let start = i;
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if j >= bytes.len() {
                    unterminated = true;
                    out.open_value = value_next;
                    if value_next {
                        out.open_string = Some((value_pattern(&stack), start));
                    }
                    // An open key still lies before its value; an open value does not.
                    if let (false, Some(f @ Frame::Object { .. })) = (value_next, stack.last()) {
                        out.before_value_in = Some(f.pat().to_string());
                    }
                    break;
                }
                let decoded: String = serde_json::from_slice(&bytes[start..=j]).unwrap_or_default();
                if value_next {
                    out.strings.push(StringValue {
                        pattern: value_pattern(&stack),
                        start,
                        end: j + 1,
                        value: decoded,
                        obj: obj_of(&stack),
                    });
                    set_value_done(&mut stack, &mut root_next);
                } else if let Some(Frame::Object { key, has_value, .. }) = stack.last_mut() {
                    *key = Some(decoded);
                    *has_value = false;
                }
                i = j + 1;
                continue;
            }
            b'{' | b'[' => {
                let pat = value_pattern(&stack);
                let item_of = match stack.last() {
                    Some(Frame::Array { start, .. }) => Some((*start, i)),
                    _ => None,
                };
                set_value_done(&mut stack, &mut root_next);
                stack.push(if c == b'{' {
                    Frame::Object {
                        pat,
                        key: None,
                        value_next: false,
                        has_value: false,
                        item_of,
                        start: i,
                    }
                } else {
                    Frame::Array {
                        pat,
                        value_next: true,
                        start: i,
                    }
                });
            }
            b'}' | b']' => {
                if let Some(Frame::Object {
                    item_of: Some((array, start)),
                    ..
                }) = stack.pop()
                {
                    out.items.push(Item {
                        array,
                        start,
                        end: i + 1,
                    });
                }
            }
            b':' => {
                if let Some(Frame::Object { value_next, .. }) = stack.last_mut() {
                    *value_next = true;
                }
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { key, .. }) => *key = None,
                Some(Frame::Array { value_next, .. }) => *value_next = true,
                None => {}
            },
            c if c.is_ascii_whitespace() => {}
            _ => {
                if value_next {
                    if c == b'-' || c.is_ascii_digit() {
                        number = Some((value_pattern(&stack), i, obj_of(&stack)));
                    }
                    set_value_done(&mut stack, &mut root_next);
                }
                in_scalar = true;
            }
        }
        i += 1;
    }
    if !unterminated && !in_scalar {
        out.before_value_in = stack.last().map(|f| f.pat().to_string());
        out.next_value = match stack.last() {
            Some(Frame::Object {
                pat,
                key: Some(k),
                has_value: false,
                ..
            }) => Some(format!("{pat}/{}", escape(k))),
            Some(Frame::Array {
                pat,
                value_next: true,
                ..
            }) => Some(format!("{pat}/*")),
            _ => None,
        };
    }
    out.in_array = stack.iter().any(|f| matches!(f, Frame::Array { .. }));
    out.open_value |= in_scalar;
    out
}

/// The value in the current slot has started: the container waits for `,` or its end.
fn set_value_done(stack: &mut [Frame], root_next: &mut bool) {
    match stack.last_mut() {
        Some(Frame::Object {
            value_next,
            has_value,
            ..
        }) => {
            *value_next = false;
            *has_value = true;
        }
        Some(Frame::Array { value_next, .. }) => *value_next = false,
        None => *root_next = false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_string_values_and_where_the_next_value_goes() {
        let t = br#"{"a":"x\"y","b":{"c":null,"d":"z"},"e":[1,"w"],"f":"#;
        let s = scan(t);
        let got: Vec<(&str, &str)> = s
            .strings
            .iter()
            .map(|x| (x.pattern.as_str(), x.value.as_str()))
            .collect();
        assert_eq!(got, [("/a", "x\"y"), ("/b/d", "z"), ("/e/*", "w")]);
        assert_eq!(&t[s.strings[0].start..s.strings[0].end], br#""x\"y""#);
        assert_eq!(s.before_value_in.as_deref(), Some(""));
        // Inside a key: still before its value.
        assert_eq!(
            scan(br#"{"b":{"c":1,"do"#).before_value_in.as_deref(),
            Some("/b")
        );
        // Inside an open string value, a number or after a value: not before one.
        assert_eq!(scan(br#"{"a":"Ten"#).before_value_in, None);
        assert!(scan(br#"{"a":"Ten"#).open_value);
        assert_eq!(
            scan(br#"{"a":1,"b":["x","Te"#).open_string,
            Some(("/b/*".to_string(), 16))
        );
        assert_eq!(scan(br#"{"a":"Ten","b"#).open_string, None);
        assert!(
            !scan(br#"{"a":"Ten","b"#).open_value,
            "a key is not a value"
        );
        assert!(!scan(br#"{"a":"Ten""#).open_value);
        assert!(scan(br#"{"a":12"#).open_value, "a number may go on");
        // Numbers are complete once a delimiter follows; each knows its row.
        let t = br#"{"r":[{"q":"x","n":45},{"n":-2.5}],"m":7"#;
        let s = scan(t);
        let got: Vec<(&str, &str, Option<usize>)> = s
            .numbers
            .iter()
            .map(|x| (x.pattern.as_str(), x.text.as_str(), x.obj))
            .collect();
        assert_eq!(
            got,
            [("/r/*/n", "45", Some(6)), ("/r/*/n", "-2.5", Some(23))]
        );
        assert_eq!(s.strings[0].obj, Some(6));
        assert_eq!(&t[s.numbers[0].start..s.numbers[0].end], b"45");
        assert_eq!(scan(br#"{"a":12"#).before_value_in, None);
        // After a complete value: the next one goes in the same container.
        assert_eq!(scan(br#"{"a":"x""#).before_value_in.as_deref(), Some(""));
        assert_eq!(scan(br#"{"a":"x""#).next_value, None);
        assert_eq!(scan(br#"{"a":"x","#).before_value_in.as_deref(), Some(""));
        assert_eq!(scan(br#"{"a":"x","b""#).next_value.as_deref(), Some("/b"));
        assert_eq!(scan(br#"{"a":"x","b":"#).next_value.as_deref(), Some("/b"));
        assert_eq!(scan(br#"{"a":{"c":1},"#).next_value, None);
        assert_eq!(
            scan(br#"{"a":{"c":1}"#).before_value_in.as_deref(),
            Some("")
        );
        assert_eq!(scan(br#"{"a":{"c":1}"#).next_value, None);
        assert_eq!(scan(br#"{"e":["#).before_value_in.as_deref(), Some("/e"));
        assert_eq!(scan(br#"{"e":["#).next_value.as_deref(), Some("/e/*"));
        assert_eq!(scan(br#"{"e":[1"#).before_value_in, None);
        assert_eq!(scan(b"").before_value_in, None);
        // Whitespace between tokens.
        let s = scan(b"{ \"a\" : \"q\" , \"b\" : [ \"r\" ] }");
        assert_eq!(s.strings.len(), 2);
        assert_eq!(s.strings[1].pattern, "/b/*");
    }
}
