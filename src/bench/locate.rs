//! Where the decoding loop was when it chose: handed the text written so far and a
//! byte offset, `pointer_at` walks the JSON frames (objects, arrays, keys) up to it and
//! names the JSON Pointer of the value that starts there.

use crate::pointer::escape;

/// The JSON Pointer of the value that starts at byte `at` of `text`, a prefix of a
/// JSON document (what the decoding loop had written when it chose). `None` when
/// `at` is not inside the text or is not where a value starts.
pub fn pointer_at(text: &str, at: usize) -> Option<String> {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes().get(..at)?;
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    // A string just read, that becomes the current key when a `:` follows.
    let mut last_string: Option<String> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let raw = std::str::from_utf8(bytes.get(start..i.min(bytes.len()))?).ok()?;
                last_string = Some(
                    serde_json::from_str::<String>(&format!("\"{raw}\"")).unwrap_or(raw.into()),
                );
            }
            b'{' => stack.push(Frame::Object(None)),
            b'[' => stack.push(Frame::Array(0)),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object(k)) = stack.last_mut() {
                    *k = last_string.take();
                }
            }
            b',' => {
                if let Some(Frame::Array(n)) = stack.last_mut() {
                    *n += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut ptr = String::new();
    for f in &stack {
        ptr.push('/');
        match f {
            Frame::Object(Some(k)) => ptr.push_str(&escape(k)),
            Frame::Object(None) => return None,
            Frame::Array(n) => ptr.push_str(&n.to_string()),
        }
    }
    Some(ptr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_at_names_the_value_being_started() {
        let at = |t: &str| pointer_at(t, t.len());
        assert_eq!(at(r#"{"a":"#).as_deref(), Some("/a"));
        assert_eq!(
            at(r#"{"a":1,"loc":{"x":"},","state":"#).as_deref(),
            Some("/loc/state")
        );
        assert_eq!(at(r#"{"a":{"b":null},"c":"#).as_deref(), Some("/c"));
        assert_eq!(
            at(r#"{"rows":[{"q":1},{"q":"#).as_deref(),
            Some("/rows/1/q")
        );
        assert_eq!(at(r#"{"rows":["#).as_deref(), Some("/rows/0"));
        // Escapes in keys and the pointer's own escapes.
        assert_eq!(at(r#"{"a\"b/c~":"#).as_deref(), Some("/a\"b~1c~0"));
        // Not where a value starts, or past the text.
        assert_eq!(at("{"), None);
        assert_eq!(pointer_at("{}", 9), None);
        assert_eq!(at("").as_deref(), Some(""));
    }
}
