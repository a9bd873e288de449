//! `x-formwork-source` in the validator: with a source document, every marked string must
//! be a span of it (after JSON decoding; see `docs/source.md` and
//! [`formwork_grammar::source`], whose [`is_span`] is the one definition both sides use).
//! A value that is not is a `semantic` failure typed `not_in_source`. Without a document
//! the keyword is inert, like any unknown keyword.

use std::sync::Arc;

use formwork_grammar::source::{is_span, SourceMode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::errors::{cut_input, loc_from_pointer};
use super::LineError;

pub const KEYWORD: &str = "x-formwork-source";

/// Does the schema use the keyword anywhere? (A property of that name also counts: it
/// only costs a validator that checks nothing.)
pub fn mentions_source(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.iter().any(|(k, v)| k == KEYWORD || mentions_source(v)),
        Value::Array(a) => a.iter().any(mentions_source),
        _ => false,
    }
}

/// The payload of the keyword's custom error (told apart from other custom errors by
/// its `source_mode` field).
#[derive(Serialize, Deserialize)]
struct Failure {
    source_mode: String,
    msg: String,
}

pub(crate) struct SourceCheck {
    mode: SourceMode,
    doc: Arc<str>,
}

impl SourceCheck {
    /// The keyword's compile step: its value must be `"substring"` or `"words"`.
    pub(crate) fn compile(value: &Value, doc: Arc<str>, at: &str) -> Result<SourceCheck, String> {
        let mode = value.as_str().and_then(SourceMode::parse).ok_or_else(|| {
            format!("{at}: x-formwork-source is {value}, not \"substring\" or \"words\"")
        })?;
        Ok(SourceCheck { mode, doc })
    }

    fn fails(&self, instance: &Value) -> bool {
        matches!(instance, Value::String(s) if !is_span(&self.doc, s, self.mode))
    }
}

impl<'i> jsonschema::Keyword<'i> for SourceCheck {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        if !self.fails(instance) {
            return Ok(());
        }
        let msg = match self.mode {
            SourceMode::Substring => "Input should be a substring of the source document",
            SourceMode::Words => {
                "Input should be a substring of the source document that starts and ends at word boundaries"
            }
        };
        let f = Failure {
            source_mode: self.mode.as_str().into(),
            msg: msg.into(),
        };
        Err(jsonschema::ValidationError::custom(
            serde_json::to_string(&f).unwrap_or_default(),
        ))
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        !self.fails(instance)
    }
}

/// Union levels looked into (bounds the recursion whatever the instance).
const MAX_UNION_DEPTH: usize = 16;

/// The source validator's errors as `not_in_source` line errors: the keyword's own, and
/// those inside `anyOf`/`oneOf` branches that failed on the keyword alone.
pub(crate) fn collect_source_errors(
    err: &jsonschema::ValidationError<'_>,
    root: &Value,
    out: &mut Vec<LineError>,
    depth: usize,
) {
    use jsonschema::error::ValidationErrorKind as K;
    match err.kind() {
        K::Custom { message, .. } => {
            let Ok(f) = serde_json::from_str::<Failure>(message) else {
                return;
            };
            let ptr = err.instance_path().to_string();
            let mut schema_path = err.schema_path().to_string();
            if !schema_path.ends_with(KEYWORD) {
                schema_path = format!("{schema_path}/{KEYWORD}");
            }
            let e = LineError {
                loc: loc_from_pointer(root, &ptr),
                msg: f.msg,
                r#type: "not_in_source".into(),
                input: cut_input(root.pointer(&ptr).unwrap_or(&Value::Null)),
                schema_path,
                fields: vec![ptr],
            };
            if !out.contains(&e) {
                out.push(e);
            }
        }
        K::AnyOf { context } | K::OneOfNotValid { context } => {
            if depth >= MAX_UNION_DEPTH {
                return;
            }
            for branch in context {
                if branch.iter().all(|e| only_source(e, depth + 1)) {
                    for e in branch {
                        collect_source_errors(e, root, out, depth + 1);
                    }
                }
            }
        }
        _ => {}
    }
}

fn only_source(err: &jsonschema::ValidationError<'_>, depth: usize) -> bool {
    use jsonschema::error::ValidationErrorKind as K;
    match err.kind() {
        K::Custom { message, .. } => serde_json::from_str::<Failure>(message).is_ok(),
        K::AnyOf { context } | K::OneOfNotValid { context } => {
            depth < MAX_UNION_DEPTH
                && context
                    .iter()
                    .any(|b| b.iter().all(|e| only_source(e, depth + 1)))
        }
        _ => false,
    }
}
