//! Pydantic's text layout for a list of line errors.
//!
//! ```text
//! 2 validation errors for Decisione
//! quantita
//!   Input should be less than or equal to 5000 [type=less_than_equal, input_value=9999, input_type=int]
//! esito
//!   Input should be 'riordina', 'non_riordinare' or 'dati_insufficienti' [type=literal_error, input_value='forse', input_type=str]
//! ```
//!
//! As pydantic-core prints it (without the documentation URL line): a header, then for each
//! error its location joined with `.` on a line of its own (left out for the root), and the
//! message indented by two spaces with the type, the input's Python `repr` (cut to 25 + `...`
//! + 24 characters past 50) and the input's Python type name.

use serde_json::Value;

use super::LineError;

/// Render `errors` exactly as pydantic's `str(ValidationError)` does, with no trailing newline.
pub fn render_pydantic(title: &str, errors: &[LineError]) -> String {
    let n = errors.len();
    let mut out = format!(
        "{n} validation error{} for {title}",
        if n == 1 { "" } else { "s" }
    );
    for e in errors {
        out.push('\n');
        if !e.loc.is_empty() {
            out.push_str(&e.loc_string());
            out.push('\n');
        }
        let repr = py_repr(&e.input);
        out.push_str(&format!(
            "  {} [type={}, input_value={}, input_type={}]",
            e.msg,
            e.r#type,
            truncate_repr(&repr),
            py_type(&e.input)
        ));
    }
    out
}

/// pydantic-core's cut of a long repr: the first 25 and the last 24 characters around `...`.
fn truncate_repr(s: &str) -> String {
    let n = s.chars().count();
    if n <= 50 {
        return s.to_string();
    }
    let head: String = s.chars().take(25).collect();
    let tail: String = s.chars().skip(n - 24).collect();
    format!("{head}...{tail}")
}

/// The Python type name pydantic would print for this JSON value.
pub fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) => {
            let t = n.to_string();
            if t.contains(['.', 'e', 'E']) {
                "float"
            } else {
                "int"
            }
        }
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `repr` of the value `json.loads` would give: `'text'`, `None`, `True`,
/// `{'a': [1, 2]}`. Numbers keep their JSON text (exact).
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(v, &mut out);
    out
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => out.push_str(&py_str_repr(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&py_str_repr(k));
                out.push_str(": ");
                write_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has a `'` and no `"`.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::LocItem;
    use serde_json::json;

    #[test]
    fn renders_the_issue_example() {
        let e = LineError {
            loc: vec![LocItem::Key("quantita".into())],
            msg: "Input should be less than or equal to 5000".into(),
            r#type: "less_than_equal".into(),
            input: json!(9999),
            schema_path: "/properties/quantita/maximum".into(),
            fields: vec![],
        };
        let text = render_pydantic("Decisione", &[e.clone(), e]);
        assert_eq!(
            text,
            "2 validation errors for Decisione\nquantita\n  Input should be less than or equal to 5000 [type=less_than_equal, input_value=9999, input_type=int]\nquantita\n  Input should be less than or equal to 5000 [type=less_than_equal, input_value=9999, input_type=int]"
        );
    }

    #[test]
    fn python_reprs() {
        assert_eq!(
            py_repr(&json!({"a": [1, null, true, "it's"]})),
            "{'a': [1, None, True, \"it's\"]}"
        );
        assert_eq!(py_repr(&json!("a\nb")), "'a\\nb'");
        assert_eq!(truncate_repr(&"x".repeat(60)).len(), 52);
    }
}
