//! Validate a model's output: three kinds of failure, each line error Pydantic-style.
//!
//! The pipeline for one text:
//!
//! ```text
//! text --serde_json--> Value --jsonschema (rules inert)--> schema verdict
//!                             --jsonschema (x-formwork-rules live)--> semantic verdict
//! ```
//!
//! 1. **Parse.** Strict JSON (`serde_json`, recursion limit 128). A failure is
//!    [`Verdict::NotJson`] with the line and column. In free decoding the caller may first
//!    run [`extract_json`] (see [`Validator::check_tolerant`]) to find the first balanced
//!    object or array inside surrounding text or a markdown fence.
//! 2. **Schema.** The `jsonschema` crate does all JSON Schema work; this module does not
//!    interpret keywords itself. Every error is kept (not only the first) and mapped to a
//!    [`LineError`] with a pydantic-core `type` and message (see [`errors`]). Formats are
//!    asserted, not annotated, and numbers are exact (see "Numbers" below). A failure is
//!    [`Verdict::SchemaInvalid`].
//! 3. **Rules.** Only when the schema verdict is clean: the small extension keyword
//!    `x-formwork-rules` (documented in `docs/rules.md`, implemented in [`rules`]) compares two
//!    fields and holds standard `if`/`then`/`else` and `dependentRequired` conditions that
//!    belong to the contract's meaning rather than its shape. Every broken rule is a
//!    [`LineError`] typed `semantic` that names every field involved. A failure is
//!    [`Verdict::SemanticInvalid`]; otherwise [`Verdict::Valid`] carries the parsed value.
//!
//! ## Drafts
//!
//! The draft comes from `$schema` (2020-12, 2019-09, 7, 6 and 4; `http` or `https`, with or
//! without the trailing `#`). Any other `$schema` is a [`SchemaError`]. Without `$schema` the
//! default is [`DEFAULT_DRAFT`], draft 2020-12; see its documentation for why.
//!
//! ## Numbers
//!
//! serde_json's `arbitrary_precision` keeps every number's text, and jsonschema's
//! `arbitrary-precision` feature compares and divides on that text: integers beyond 64 bits,
//! `multipleOf: 0.01` on `19.99`, `minimum: 0.1000000000000000000001` against `0.1` are
//! exact. The tests in `tests/validate_numbers.rs` pin this; no decimal arithmetic of our own
//! is needed for the standard keywords. The rules' numeric comparisons use the exact
//! decimal comparison in [`number`].
//!
//! ## Limits
//!
//! Nesting deeper than [`MAX_DEPTH`] levels, in the schema or in the instance, is refused
//! before jsonschema sees it, so validation cannot overflow the stack (jsonschema recurses
//! once per level). The text parser has the same limit built in.
//!
//! ```
//! use formwork::validate::{Validator, Verdict};
//! let schema = serde_json::json!({
//!     "title": "Decisione", "type": "object",
//!     "properties": {"quantita": {"type": "integer", "maximum": 5000}},
//! });
//! let v = Validator::new(&schema).unwrap();
//! match v.check(r#"{"quantita": 9999}"#) {
//!     Verdict::SchemaInvalid(errors) => {
//!         assert_eq!(errors[0].r#type, "less_than_equal");
//!         assert_eq!(errors[0].msg, "Input should be less than or equal to 5000");
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub mod errors;
pub mod extract;
pub mod number;
mod order;
pub mod render;
pub mod rules;
pub mod source;
mod unions;

pub use extract::{extract_json, Extracted};
pub use render::render_pydantic;

/// The draft used when a schema has no `$schema`.
///
/// Draft 2020-12, because the schemas formwork meets without `$schema` are mostly written
/// today: Pydantic v2 and most LLM tool-calling stacks emit `$defs`, `prefixItems` and
/// `dependentRequired`, which draft 7 does not know (draft 7 would silently ignore them,
/// accepting invalid output). The other large group, old hand-written schemas, uses
/// `definitions`, which still resolves as a JSON Pointer under 2020-12; what changes is
/// array-form `items` (a tuple in draft 4 to 7, a schema error under 2020-12) and boolean
/// `exclusiveMaximum` (draft 4), and both fail loudly at [`Validator::new`] instead of
/// validating differently. JSONSchemaBench counts 4,087 of 9,557 schemas declaring draft-04
/// and 4,563 declaring nothing: a draft-04 schema that says so gets draft 4, and one that
/// does not can say so with one line of `$schema`.
pub const DEFAULT_DRAFT: Draft = Draft::Draft202012;

/// The deepest nesting of arrays and objects accepted in a schema or an instance.
///
/// Equal to serde_json's own recursion limit for parsing, so a text and an already parsed
/// value meet the same limit. jsonschema recurses once per level; at 128 levels a debug
/// build uses well under a 2 MiB thread stack (it overflows near 1,000).
pub const MAX_DEPTH: usize = 128;

/// The JSON Schema drafts formwork validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Draft {
    Draft4,
    Draft6,
    Draft7,
    Draft201909,
    Draft202012,
}

impl Draft {
    /// The draft named by a `$schema` URI, or `None` for a URI that names none of the five.
    pub fn from_uri(uri: &str) -> Option<Draft> {
        let u = uri.trim_end_matches('#');
        let u = u
            .strip_prefix("https://")
            .or_else(|| u.strip_prefix("http://"))?;
        match u {
            "json-schema.org/draft-04/schema" => Some(Draft::Draft4),
            "json-schema.org/draft-06/schema" => Some(Draft::Draft6),
            "json-schema.org/draft-07/schema" => Some(Draft::Draft7),
            "json-schema.org/draft/2019-09/schema" => Some(Draft::Draft201909),
            "json-schema.org/draft/2020-12/schema" => Some(Draft::Draft202012),
            _ => None,
        }
    }

    pub(crate) fn to_jsonschema(self) -> jsonschema::Draft {
        match self {
            Draft::Draft4 => jsonschema::Draft::Draft4,
            Draft::Draft6 => jsonschema::Draft::Draft6,
            Draft::Draft7 => jsonschema::Draft::Draft7,
            Draft::Draft201909 => jsonschema::Draft::Draft201909,
            Draft::Draft202012 => jsonschema::Draft::Draft202012,
        }
    }

    /// The canonical `$schema` URI of this draft.
    pub fn uri(self) -> &'static str {
        match self {
            Draft::Draft4 => "http://json-schema.org/draft-04/schema#",
            Draft::Draft6 => "http://json-schema.org/draft-06/schema#",
            Draft::Draft7 => "http://json-schema.org/draft-07/schema#",
            Draft::Draft201909 => "https://json-schema.org/draft/2019-09/schema",
            Draft::Draft202012 => "https://json-schema.org/draft/2020-12/schema",
        }
    }
}

/// A schema formwork cannot use. The message is one line naming the JSON Pointer, the
/// `$ref` or the keyword.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema document is neither an object nor a boolean.
    #[error("schema must be a JSON object or a boolean, not {found}")]
    NotASchema { found: &'static str },
    /// `$schema` names no draft formwork knows.
    #[error(
        "$schema {uri:?} is not one of the drafts formwork validates (2020-12, 2019-09, 7, 6, 4)"
    )]
    UnknownDraft { uri: String },
    /// A `$ref` points outside the document (never fetched) or nowhere inside it.
    #[error("$ref {reference:?} cannot be resolved: {reason}")]
    Reference { reference: String, reason: String },
    /// The schema nests deeper than [`MAX_DEPTH`].
    #[error("schema nests deeper than {limit} levels at {pointer}")]
    TooDeep { pointer: String, limit: usize },
    /// The schema is not valid for its draft's meta-schema, or a keyword's value is unusable.
    #[error("schema is invalid at {pointer}: {message}")]
    Invalid { pointer: String, message: String },
}

/// A text that is not JSON: serde_json's message without its position, and the position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParseError {
    pub msg: String,
    /// 1-based line; 0 when the error has no position.
    pub line: usize,
    /// 1-based column; 0 when the error has no position.
    pub column: usize,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.msg)
        } else {
            write!(
                f,
                "{} at line {} column {}",
                self.msg, self.line, self.column
            )
        }
    }
}

impl ParseError {
    pub(crate) fn from_serde(err: &serde_json::Error) -> ParseError {
        let full = err.to_string();
        let msg = match full.rfind(" at line ") {
            Some(i) if err.line() > 0 => full[..i].to_string(),
            _ => full,
        };
        ParseError {
            msg,
            line: err.line(),
            column: err.column(),
        }
    }
}

/// One step of an error location: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum LocItem {
    Index(usize),
    Key(String),
}

impl std::fmt::Display for LocItem {
    /// Pydantic's way: a key with a dot in it is put in backticks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocItem::Key(k) if k.contains('.') => write!(f, "`{k}`"),
            LocItem::Key(k) => write!(f, "{k}"),
            LocItem::Index(i) => write!(f, "{i}"),
        }
    }
}

/// One failure, in pydantic-core's shape plus the schema keyword that failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineError {
    /// The path of keys and indices to the failing value (empty for the root).
    pub loc: Vec<LocItem>,
    /// The pydantic-style message, e.g. "Input should be less than or equal to 5000".
    pub msg: String,
    /// A stable snake_case name: the pydantic-core name where one exists; `semantic` for a
    /// broken `x-formwork-rules` rule.
    pub r#type: String,
    /// The failing value, cut to about 50 characters (see [`errors::cut_input`]).
    pub input: Value,
    /// JSON Pointer of the keyword that failed, in the schema document, e.g.
    /// `/properties/quantita/maximum` or `/x-formwork-rules/1`.
    pub schema_path: String,
    /// For `semantic` errors: JSON Pointers (into the instance) of every field the rule
    /// involves. Empty, and left out of the JSON, for schema errors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

impl LineError {
    /// The location as pydantic prints it: `righe.0.quantita`.
    pub fn loc_string(&self) -> String {
        self.loc
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// The outcome of checking one text. The three kinds of failure stay apart.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The text is not JSON.
    NotJson(ParseError),
    /// JSON, but not valid for the schema: every error.
    SchemaInvalid(Vec<LineError>),
    /// Valid for the schema, but breaks `x-formwork-rules`: every rule broken.
    SemanticInvalid(Vec<LineError>),
    /// Valid: the parsed value.
    Valid(Value),
}

impl Verdict {
    /// `valid`, `schema_invalid`, `semantic_invalid` or `not_json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::NotJson(_) => "not_json",
            Verdict::SchemaInvalid(_) => "schema_invalid",
            Verdict::SemanticInvalid(_) => "semantic_invalid",
            Verdict::Valid(_) => "valid",
        }
    }

    pub fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid(_))
    }

    /// The line errors of either invalid verdict; empty otherwise.
    pub fn errors(&self) -> &[LineError] {
        match self {
            Verdict::SchemaInvalid(e) | Verdict::SemanticInvalid(e) => e,
            _ => &[],
        }
    }

    /// The verdict as one JSON object: `{"verdict": ..., "errors": [...]}` for the invalid
    /// kinds, `{"verdict": "not_json", "error": {msg, line, column}}`, or
    /// `{"verdict": "valid", "value": ...}`.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        out.insert("verdict".into(), Value::String(self.kind().into()));
        match self {
            Verdict::NotJson(e) => {
                out.insert(
                    "error".into(),
                    serde_json::to_value(e).unwrap_or(Value::Null),
                );
            }
            Verdict::SchemaInvalid(errs) | Verdict::SemanticInvalid(errs) => {
                out.insert("error_count".into(), Value::from(errs.len()));
                out.insert(
                    "errors".into(),
                    serde_json::to_value(errs).unwrap_or(Value::Null),
                );
            }
            Verdict::Valid(v) => {
                out.insert("value".into(), v.clone());
            }
        }
        Value::Object(out)
    }
}

/// A compiled schema: the jsonschema validator, the rules (if any) and the title.
///
/// Build once, check many texts; `Send + Sync`.
pub struct Validator {
    schema: jsonschema::Validator,
    /// The schema as given: errors look up the keywords around them (a model's
    /// `properties`, a union's `discriminator`, its branches' names).
    schema_value: Value,
    /// The same schema with `x-formwork-rules` live; `None` when the schema has no rules.
    rules: Option<jsonschema::Validator>,
    /// The same schema with `x-formwork-source` live against one document; `None`
    /// without a document ([`Validator::with_source`]) or without the keyword.
    source: Option<jsonschema::Validator>,
    title: String,
    draft: Draft,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("title", &self.title)
            .field("draft", &self.draft)
            .field("has_rules", &self.rules.is_some())
            .finish()
    }
}

impl Validator {
    /// Compile `schema`; its draft comes from `$schema`, else [`DEFAULT_DRAFT`].
    pub fn new(schema: &Value) -> Result<Validator, SchemaError> {
        Validator::with_default_draft(schema, DEFAULT_DRAFT)
    }

    /// Compile `schema`, taking `default` as the draft when it has no `$schema`
    /// (the JSON-Schema-Test-Suite's draft7 files, for instance, carry none).
    pub fn with_default_draft(schema: &Value, default: Draft) -> Result<Validator, SchemaError> {
        match schema {
            Value::Object(_) | Value::Bool(_) => {}
            other => {
                return Err(SchemaError::NotASchema {
                    found: errors::json_type_name(other),
                })
            }
        }
        if let Some(pointer) = too_deep(schema) {
            return Err(SchemaError::TooDeep {
                pointer,
                limit: MAX_DEPTH,
            });
        }
        let draft = match schema.get("$schema") {
            None => default,
            Some(Value::String(uri)) => Draft::from_uri(uri)
                .ok_or_else(|| SchemaError::UnknownDraft { uri: uri.clone() })?,
            Some(other) => {
                return Err(SchemaError::Invalid {
                    pointer: "/$schema".into(),
                    message: format!("must be a string, not {}", errors::json_type_name(other)),
                })
            }
        };
        let title = schema
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("Model")
            .to_string();

        let compiled = base_options(draft)
            .build(schema)
            .map_err(|e| schema_error_from_build(&e))?;
        let rules = if rules::mentions_rules(schema) {
            rules::check_placement(schema)?;
            let defs = Arc::new(rules::RootDefs::of(schema));
            let opts = base_options(draft).with_keyword(
                rules::KEYWORD,
                move |_parent: &serde_json::Map<String, Value>,
                      value: &Value,
                      location: jsonschema::paths::Location| {
                    rules::RuleSet::compile(value, &location.to_string(), draft, &defs)
                        .map(|r| Box::new(r) as Box<dyn for<'i> jsonschema::Keyword<'i>>)
                        .map_err(|msg| jsonschema::ValidationError::custom(msg))
                },
            );
            Some(
                opts.build(schema)
                    .map_err(|e| schema_error_from_build(&e))?,
            )
        } else {
            None
        };
        Ok(Validator {
            schema: compiled,
            schema_value: schema.clone(),
            rules,
            source: None,
            title,
            draft,
        })
    }

    /// Like [`Validator::new`], and every `x-formwork-source` string must also be a span
    /// of `doc` (after JSON decoding): a value that is not is a `semantic` failure typed
    /// `not_in_source`, checked once the schema verdict is clean, beside the rules.
    pub fn with_source(schema: &Value, doc: &str) -> Result<Validator, SchemaError> {
        let mut v = Validator::new(schema)?;
        if source::mentions_source(schema) {
            let doc: Arc<str> = Arc::from(doc);
            let opts = base_options(v.draft).with_keyword(
                source::KEYWORD,
                move |_parent: &serde_json::Map<String, Value>,
                      value: &Value,
                      location: jsonschema::paths::Location| {
                    source::SourceCheck::compile(value, doc.clone(), &location.to_string())
                        .map(|r| Box::new(r) as Box<dyn for<'i> jsonschema::Keyword<'i>>)
                        .map_err(|msg| jsonschema::ValidationError::custom(msg))
                },
            );
            v.source = Some(
                opts.build(schema)
                    .map_err(|e| schema_error_from_build(&e))?,
            );
        }
        Ok(v)
    }

    /// The schema's `title`, or `Model` when it has none: "2 validation errors for Decisione".
    pub fn title(&self) -> &str {
        &self.title
    }

    /// The draft the schema was compiled under.
    pub fn draft(&self) -> Draft {
        self.draft
    }

    /// Whether the schema carries `x-formwork-rules`.
    pub fn has_rules(&self) -> bool {
        self.rules.is_some()
    }

    /// Parse `text` strictly and check it.
    pub fn check(&self, text: &str) -> Verdict {
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.check_owned(value),
            Err(e) => Verdict::NotJson(ParseError::from_serde(&e)),
        }
    }

    /// Like [`Validator::check`], but when the text is not JSON as a whole, look for the first
    /// balanced object or array in it (stripping a markdown fence), and report that it did.
    /// The second element is `None` when the text parsed as it was.
    pub fn check_tolerant(&self, text: &str) -> (Verdict, Option<Extracted>) {
        let strict = self.check(text);
        let Verdict::NotJson(_) = strict else {
            return (strict, None);
        };
        match extract_json(text) {
            Some(found) => {
                let verdict = self.check(&found.value_text);
                (verdict, Some(found))
            }
            None => (strict, None),
        }
    }

    /// Check an already parsed value.
    pub fn check_value(&self, value: &Value) -> Verdict {
        match self.errors_for(value) {
            Ok(()) => Verdict::Valid(value.clone()),
            Err(v) => v,
        }
    }

    fn check_owned(&self, value: Value) -> Verdict {
        match self.errors_for(&value) {
            Ok(()) => Verdict::Valid(value),
            Err(v) => v,
        }
    }

    fn errors_for(&self, value: &Value) -> Result<(), Verdict> {
        if let Some(pointer) = too_deep(value) {
            let loc = errors::loc_from_pointer(value, &pointer);
            return Err(Verdict::SchemaInvalid(vec![LineError {
                loc,
                msg: format!("Input should nest at most {MAX_DEPTH} levels deep"),
                r#type: "nesting_too_deep".into(),
                input: Value::Null,
                schema_path: String::new(),
                fields: Vec::new(),
            }]));
        }
        let mut out = Vec::new();
        for err in self.schema.iter_errors(value) {
            errors::map_error(&err, value, &self.schema_value, &mut out);
        }
        order::in_field_order(&mut out, &self.schema_value);
        if !out.is_empty() {
            return Err(Verdict::SchemaInvalid(out));
        }
        let mut sem = Vec::new();
        if let Some(rv) = &self.rules {
            for err in rv.iter_errors(value) {
                rules::collect_rule_errors(&err, value, &mut sem);
            }
        }
        if let Some(sv) = &self.source {
            for err in sv.iter_errors(value) {
                source::collect_source_errors(&err, value, &mut sem, 0);
            }
        }
        if !sem.is_empty() {
            return Err(Verdict::SemanticInvalid(sem));
        }
        Ok(())
    }
}

/// Compile `schema` (draft from `$schema`, else [`DEFAULT_DRAFT`]) and check `text`.
pub fn check(schema: &Value, text: &str) -> Result<Verdict, SchemaError> {
    Ok(Validator::new(schema)?.check(text))
}

/// Options shared by both compiled validators: the draft, formats asserted, no retrieval.
///
/// `duration` and `uuid` entered JSON Schema in 2019-09, so jsonschema treats them as unknown
/// (not checked) under drafts 4 to 7; formwork asserts them in every draft, so under
/// those drafts they are registered with jsonschema's own 2020-12 checks.
pub(crate) fn base_options(draft: Draft) -> jsonschema::ValidationOptions<'static> {
    let opts = jsonschema::options()
        .with_draft(draft.to_jsonschema())
        .should_validate_formats(true)
        .with_retriever(NoRemote);
    if matches!(draft, Draft::Draft4 | Draft::Draft6 | Draft::Draft7) {
        opts.with_format("duration", |s: &str| modern_format("duration", s))
            .with_format("uuid", |s: &str| modern_format("uuid", s))
    } else {
        opts
    }
}

/// jsonschema's 2020-12 check of `format` on `s`, compiled once per format.
fn modern_format(format: &'static str, s: &str) -> bool {
    static CHECKS: std::sync::OnceLock<Vec<(&'static str, jsonschema::Validator)>> =
        std::sync::OnceLock::new();
    let checks = CHECKS.get_or_init(|| {
        ["duration", "uuid"]
            .into_iter()
            .filter_map(|f| {
                jsonschema::draft202012::options()
                    .should_validate_formats(true)
                    .build(&serde_json::json!({"format": f}))
                    .ok()
                    .map(|v| (f, v))
            })
            .collect()
    });
    checks
        .iter()
        .find(|(f, _)| *f == format)
        .is_none_or(|(_, v)| v.is_valid(&Value::String(s.to_string())))
}

/// Refuses every `$ref` that leaves the document, naming it.
struct NoRemote;

impl jsonschema::Retrieve for NoRemote {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("formwork never fetches a remote $ref ({uri}); inline it under $defs").into())
    }
}

pub(crate) fn schema_error_from_build(err: &jsonschema::ValidationError<'_>) -> SchemaError {
    use jsonschema::error::ValidationErrorKind as K;
    match err.kind() {
        K::Referencing(r) => {
            let reference = match r {
                jsonschema::ReferencingError::Unretrievable { uri, .. } => uri.clone(),
                jsonschema::ReferencingError::PointerToNowhere { pointer } => format!("#{pointer}"),
                other => format!("{other}")
                    .split('\'')
                    .nth(1)
                    .unwrap_or_default()
                    .to_string(),
            };
            let reason = match r {
                jsonschema::ReferencingError::Unretrievable { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            SchemaError::Reference { reference, reason }
        }
        // The rules keyword's compile errors start with the JSON Pointer of the bad part.
        K::Custom { message, .. } => match message.split_once(": ") {
            Some((pointer, rest)) if pointer.starts_with('/') && !pointer.contains(' ') => {
                SchemaError::Invalid {
                    pointer: pointer.to_string(),
                    message: rest.to_string(),
                }
            }
            _ => SchemaError::Invalid {
                pointer: err.schema_path().to_string(),
                message: message.clone(),
            },
        },
        _ => {
            // A meta-schema failure: the error's instance is the schema, so its instance path
            // is the JSON Pointer into the schema document.
            let pointer = err.instance_path().to_string();
            let pointer = if pointer.is_empty() {
                "/".to_string()
            } else {
                pointer
            };
            let message = err.to_string().replace('\n', " ");
            SchemaError::Invalid { pointer, message }
        }
    }
}

/// The JSON Pointer of the first place where `value` nests deeper than [`MAX_DEPTH`], found
/// without recursion.
pub(crate) fn too_deep(value: &Value) -> Option<String> {
    let mut stack: Vec<(&Value, usize, Vec<String>)> = vec![(value, 0, Vec::new())];
    // The path is only materialised for the entry that fails; carry indices cheaply.
    while let Some((v, depth, path)) = stack.pop() {
        let children: Box<dyn Iterator<Item = (String, &Value)>> = match v {
            Value::Array(a) => Box::new(a.iter().enumerate().map(|(i, c)| (i.to_string(), c))),
            Value::Object(o) => Box::new(o.iter().map(|(k, c)| (k.clone(), c))),
            _ => continue,
        };
        if depth >= MAX_DEPTH {
            return Some(errors::pointer_from_tokens(&path));
        }
        for (k, c) in children {
            if matches!(c, Value::Array(_) | Value::Object(_)) {
                let mut p = path.clone();
                p.push(k);
                stack.push((c, depth + 1, p));
            }
        }
    }
    None
}
