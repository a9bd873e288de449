//! The batch's input lines, read without a model: a line is a record (`{id, text}`) or
//! an error record, and [`plan`] applies the rules for resume and duplicates. Pure
//! (`serde_json` and std only), so the fuzz target `batch_line` and its smoke test call
//! it directly.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use serde_json::{json, Value};

/// The key of an id as the user wrote it: a string and a number are two ids, even
/// when they read alike (`"1"` and `1`), and a number is known by its text as written.
fn id_key(id: &Value) -> Key {
    match id {
        Value::String(s) => Key::Id(s.clone()),
        other => Key::Num(other.to_string()),
    }
}

/// What the duplicate check and a resume know a line by: its own `id` (a string, or a
/// number by its JSON text), or, for a line without a usable one, its line number. They
/// never meet, so no id a user writes (`"line:5"` included) is taken for a malformed
/// line's, and `"1"` is not `1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Id(String),
    Num(String),
    Line(usize),
}

/// The id of the error record of line `lineno` when it has no usable id of its own
/// (the record also says `"id_from_line": true`).
pub fn line_id(lineno: usize) -> Value {
    json!(format!("line:{lineno}"))
}

impl Key {
    /// The key of a record already in the output: [`Key::Line`] for an error record
    /// whose line had no id (`"id_from_line": true`, its id [`line_id`]), else its id.
    /// None for a line without an id.
    pub fn of_record(record: &Value) -> Option<Key> {
        let id = record.get("id")?;
        let line = (record.get("id_from_line") == Some(&Value::Bool(true)))
            .then(|| id.as_str()?.strip_prefix("line:")?.parse().ok())
            .flatten();
        Some(line.map_or_else(|| id_key(id), Key::Line))
    }
}

/// A parsed input line (`{id, text}`), or its own id (None when it has no usable one)
/// and why it could not be used. The line is raw bytes: one that is not UTF-8 is an
/// error like any other malformed line.
#[allow(clippy::type_complexity)]
pub fn parse_line(line: &[u8], lineno: usize) -> Result<(Value, String), (Option<Value>, String)> {
    let line = match std::str::from_utf8(line) {
        Ok(l) => l,
        Err(e) => {
            return Err((
                None,
                format!(
                    "input line {lineno}: not valid UTF-8 (byte {} of the line)",
                    e.valid_up_to() + 1
                ),
            ))
        }
    };
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Err((None, format!("input line {lineno}: not JSON: {e}"))),
    };
    let id = match v.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        Some(_) => {
            return Err((
                None,
                format!("input line {lineno}: field `id` must be a string or a number"),
            ))
        }
        None => return Err((None, format!("input line {lineno}: missing field `id`"))),
    };
    match v.get("text") {
        Some(Value::String(t)) => Ok((id, t.clone())),
        Some(_) => Err((
            Some(id),
            format!("input line {lineno}: field `text` must be a string"),
        )),
        None => Err((
            Some(id),
            format!("input line {lineno}: missing field `text`"),
        )),
    }
}

/// The input's lines as bytes, without their `\n` (or `\r\n`). Decoding is per line
/// ([`parse_line`]), so one bad byte spoils one record, not the batch.
pub fn read_lines(mut r: impl BufRead) -> std::io::Result<Vec<Vec<u8>>> {
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(lines);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        lines.push(line);
    }
}

/// What the batch does with one non-blank input line.
#[derive(Debug, PartialEq)]
pub enum Item {
    /// Its id was finished in an earlier run (it is in the output): skipped.
    Done,
    /// Extract from `text`.
    Record { id: Value, text: String },
    /// Write an error record: the line is malformed, or (`duplicate`) an earlier line of
    /// this run had the same id. `from_line`: the line has no usable id, and `id` is
    /// [`line_id`].
    Error {
        id: Value,
        msg: String,
        duplicate: bool,
        from_line: bool,
    },
}

/// The work for `lines` (blank ones left out), given the ids `done` in earlier runs.
/// Pure: the batch's rules for resume and duplicates, testable without a model.
pub fn plan(lines: &[Vec<u8>], done: &HashSet<Key>) -> Vec<Item> {
    let mut seen: HashMap<Key, usize> = HashMap::new();
    let mut items = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let lineno = i + 1;
        let parsed = parse_line(line, lineno);
        let (key, id) = match &parsed {
            Ok((id, _)) | Err((Some(id), _)) => (id_key(id), id.clone()),
            Err((None, _)) => (Key::Line(lineno), line_id(lineno)),
        };
        let from_line = matches!(key, Key::Line(_));
        if done.contains(&key) {
            items.push(Item::Done);
            continue;
        }
        if let Some(first) = seen.get(&key) {
            items.push(Item::Error {
                msg: format!("input line {lineno}: duplicate id {id} (first on line {first})"),
                id,
                duplicate: true,
                from_line,
            });
            continue;
        }
        seen.insert(key, lineno);
        items.push(match parsed {
            Ok((id, text)) => Item::Record { id, text },
            Err((_, msg)) => Item::Error {
                id,
                msg,
                duplicate: false,
                from_line,
            },
        });
    }
    items
}
