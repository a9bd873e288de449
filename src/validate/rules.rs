//! `x-formwork-rules`: semantic rules kept in the schema (specification: `docs/rules.md`).
//!
//! ```json
//! "x-formwork-rules": [
//!   {"name": "dates_in_order", "field": "/end_date", "op": ">=", "other": "/start_date"},
//!   {"name": "complete_has_dates",
//!    "message": "a complete request has both dates and no question",
//!    "assert": {"if": {"properties": {"status": {"const": "complete"}}},
//!               "then": {"properties": {"start_date": {"type": "string"},
//!                                       "end_date": {"type": "string"},
//!                                       "clarification_question": {"type": "null"}}}}}
//! ]
//! ```
//!
//! A rule is a **comparison** (`field`, `op`, `other`: two JSON Pointers relative to the value
//! the surrounding subschema validates) or an **assertion** (`assert`: a standard JSON Schema,
//! typically `if`/`then`/`else`, `required` or `dependentRequired`). Either may carry `when`
//! (a JSON Schema the value must match for the rule to apply), `name` and `message`.
//!
//! How it runs: the keyword is registered with jsonschema as a custom keyword on a second
//! compiled validator, so rules apply wherever their subschema applies (under `properties`,
//! `items`, `$ref`, `allOf`, a matching `anyOf` branch). [`Validator`](super::Validator)
//! runs that validator only after the schema verdict is clean, and
//! [`collect_rule_errors`] keeps only the rules' own errors, which it turns into
//! `semantic` [`LineError`]s. The first validator ignores the keyword, as JSON Schema
//! ignores any unknown keyword, so rules never change the schema verdict.
//!
//! A rule's failure crosses jsonschema's custom-error channel (a message string) as a small
//! JSON payload ([`Failure`]) with the location relative to the keyword's instance; the
//! collector adds the instance path in front.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::pointer::{escape, unescape};

use super::errors::{self, cut_input, loc_from_pointer, pointer_from_loc};
use super::render::py_repr;
use super::{Draft, LineError, LocItem, SchemaError};

/// The keyword's name.
pub const KEYWORD: &str = "x-formwork-rules";

/// The keys a rule object may have; any other is a schema error.
const RULE_KEYS: &[&str] = &[
    "name",
    "message",
    "description",
    "when",
    "field",
    "op",
    "other",
    "assert",
];

/// Keywords whose subschemas are evaluated for a yes/no answer that changes other keywords'
/// meaning; a rule under them would change the schema verdict, so it is refused there.
const NO_RULES_UNDER: &[&str] = &["not", "if", "contains", "propertyNames"];

/// Keywords whose object value maps names (not keywords) to subschemas.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// The root schema's `$defs` / `definitions`, copied into each rule's sub-schema so that
/// `{"$ref": "#/$defs/X"}` inside `when` or `assert` resolves as it would at the root.
#[derive(Debug, Default)]
pub struct RootDefs {
    defs: Option<Value>,
    definitions: Option<Value>,
}

impl RootDefs {
    pub fn of(schema: &Value) -> RootDefs {
        RootDefs {
            defs: schema.get("$defs").cloned(),
            definitions: schema.get("definitions").cloned(),
        }
    }
}

/// Whether the schema has the keyword anywhere (an iterative walk).
pub fn mentions_rules(schema: &Value) -> bool {
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if m.contains_key(KEYWORD) {
                    return true;
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    false
}

/// Refuse rules placed under `not`, `if`, `contains` or `propertyNames` (see
/// [`NO_RULES_UNDER`]), naming the JSON Pointer.
pub fn check_placement(schema: &Value) -> Result<(), SchemaError> {
    // (value, path tokens, whether tokens so far passed a forbidden keyword)
    let mut stack: Vec<(&Value, Vec<String>, Option<String>)> = vec![(schema, Vec::new(), None)];
    while let Some((v, path, forbidden)) = stack.pop() {
        match v {
            Value::Object(m) => {
                let parent_is_name_map =
                    path.last().is_some_and(|p| NAME_MAPS.contains(&p.as_str()))
                        && !is_name_position(&path);
                for (k, child) in m {
                    let mut p = path.clone();
                    p.push(k.clone());
                    if k == KEYWORD && !parent_is_name_map {
                        if let Some(kw) = &forbidden {
                            return Err(SchemaError::Invalid {
                                pointer: errors::pointer_from_tokens(&p),
                                message: format!(
                                    "{KEYWORD} cannot sit under `{kw}`, whose subschema only \
                                     decides another keyword's outcome"
                                ),
                            });
                        }
                        continue;
                    }
                    let now_forbidden =
                        if !parent_is_name_map && NO_RULES_UNDER.contains(&k.as_str()) {
                            Some(k.clone())
                        } else {
                            forbidden.clone()
                        };
                    stack.push((child, p, now_forbidden));
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    let mut p = path.clone();
                    p.push(i.to_string());
                    stack.push((child, p, forbidden.clone()));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the last token of `path` is itself a name inside a name map (so a key called
/// `properties` under `properties` is a property, not the keyword).
fn is_name_position(path: &[String]) -> bool {
    let mut name_next = false;
    let mut last_was_name = false;
    for t in path {
        last_was_name = name_next;
        name_next = !name_next && NAME_MAPS.contains(&t.as_str());
    }
    last_was_name
}

/// One comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "<" => Op::Lt,
            "<=" => Op::Le,
            "==" => Op::Eq,
            "!=" => Op::Ne,
            ">=" => Op::Ge,
            ">" => Op::Gt,
            _ => return None,
        })
    }

    fn holds(self, ord: Ordering) -> bool {
        match self {
            Op::Lt => ord == Ordering::Less,
            Op::Le => ord != Ordering::Greater,
            Op::Eq => ord == Ordering::Equal,
            Op::Ne => ord != Ordering::Equal,
            Op::Ge => ord != Ordering::Less,
            Op::Gt => ord == Ordering::Greater,
        }
    }

    fn phrase(self) -> &'static str {
        match self {
            Op::Lt => "less than",
            Op::Le => "less than or equal to",
            Op::Eq => "equal to",
            Op::Ne => "different from",
            Op::Ge => "greater than or equal to",
            Op::Gt => "greater than",
        }
    }

    fn is_equality(self) -> bool {
        matches!(self, Op::Eq | Op::Ne)
    }
}

/// A `when` or `assert` schema, compiled on its own with the root's definitions.
struct Sub {
    validator: jsonschema::Validator,
    /// The schema compiled (the wrapper): error schema paths are pointers into it.
    schema: Value,
}

impl Sub {
    fn compile(schema: &Value, draft: Draft, defs: &RootDefs, at: &str) -> Result<Sub, String> {
        if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
            return Err(format!(
                "{at}: must be a JSON Schema (object or boolean), not {}",
                errors::json_type_name(schema)
            ));
        }
        if mentions_rules(schema) {
            return Err(format!("{at}: {KEYWORD} cannot be nested inside a rule"));
        }
        let mut wrapper = Map::new();
        wrapper.insert("$schema".into(), Value::String(draft.uri().into()));
        if let Some(d) = &defs.defs {
            wrapper.insert("$defs".into(), d.clone());
        }
        if let Some(d) = &defs.definitions {
            wrapper.insert("definitions".into(), d.clone());
        }
        wrapper.insert("allOf".into(), Value::Array(vec![schema.clone()]));
        let schema = Value::Object(wrapper);
        let validator = super::base_options(draft)
            .build(&schema)
            .map_err(|e| format!("{at}: {}", super::schema_error_from_build(&e)))?;
        Ok(Sub { validator, schema })
    }
}

enum Body {
    Compare {
        field: String,
        op: Op,
        other: String,
    },
    Assert(Sub),
}

struct Rule {
    index: usize,
    name: Option<String>,
    message: Option<String>,
    when: Option<Sub>,
    /// Fields named by `when` and by `assert`'s conditions (pointers, relative).
    fields: Vec<String>,
    body: Body,
}

/// The compiled rules of one `x-formwork-rules` keyword.
pub struct RuleSet {
    rules: Vec<Rule>,
}

/// A rule failure as it crosses jsonschema's custom error (relative to the keyword's value).
#[derive(Debug, Serialize, Deserialize)]
pub struct Failure {
    pub loc: Vec<LocItem>,
    pub msg: String,
    pub input: Value,
    /// Relative to the keyword: `/1` or `/0/assert/then/properties/end_date/type`.
    pub schema_path: String,
    pub fields: Vec<String>,
}

impl RuleSet {
    /// Parse and compile the keyword's value found at schema location `location`. The error
    /// is one line naming the JSON Pointer of the bad part.
    pub fn compile(
        value: &Value,
        location: &str,
        draft: Draft,
        defs: &RootDefs,
    ) -> Result<RuleSet, String> {
        let Value::Array(items) = value else {
            return Err(format!(
                "{location}: {KEYWORD} must be an array of rules, not {}",
                errors::json_type_name(value)
            ));
        };
        let mut rules = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let at = format!("{location}/{index}");
            let Value::Object(obj) = item else {
                return Err(format!(
                    "{at}: a rule must be an object, not {}",
                    errors::json_type_name(item)
                ));
            };
            if let Some(k) = obj.keys().find(|k| !RULE_KEYS.contains(&k.as_str())) {
                return Err(format!(
                    "{at}/{k}: unknown rule key; a rule has {}",
                    RULE_KEYS.join(", ")
                ));
            }
            let text = |key: &str| -> Result<Option<String>, String> {
                match obj.get(key) {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(other) => Err(format!(
                        "{at}/{key}: must be a string, not {}",
                        errors::json_type_name(other)
                    )),
                }
            };
            let name = text("name")?;
            let message = text("message")?;
            text("description")?;
            let mut fields = Vec::new();
            let when = match obj.get("when") {
                Some(w) => {
                    referenced_fields(w, "", &mut fields);
                    Some(Sub::compile(w, draft, defs, &format!("{at}/when"))?)
                }
                None => None,
            };
            let is_compare =
                obj.contains_key("field") || obj.contains_key("op") || obj.contains_key("other");
            let body = match (is_compare, obj.get("assert")) {
                (true, Some(_)) => {
                    return Err(format!(
                    "{at}: a rule is either a comparison (field, op, other) or an assert, not both"
                ))
                }
                (true, None) => {
                    let pointer = |key: &str| -> Result<String, String> {
                        let p = text(key)?.ok_or_else(|| {
                            format!("{at}: a comparison needs `field`, `op` and `other`; `{key}` is missing")
                        })?;
                        if !(p.is_empty() || p.starts_with('/')) {
                            return Err(format!(
                                "{at}/{key}: {p:?} is not a JSON Pointer (it must be empty or start with /)"
                            ));
                        }
                        Ok(p)
                    };
                    let field = pointer("field")?;
                    let other = pointer("other")?;
                    let op_text = text("op")?.ok_or_else(|| {
                        format!(
                            "{at}: a comparison needs `field`, `op` and `other`; `op` is missing"
                        )
                    })?;
                    let op = Op::parse(&op_text).ok_or_else(|| {
                        format!("{at}/op: {op_text:?} is not one of <, <=, ==, !=, >=, >")
                    })?;
                    Body::Compare { field, op, other }
                }
                (false, Some(a)) => {
                    referenced_fields_conditions(a, &mut fields);
                    Body::Assert(Sub::compile(a, draft, defs, &format!("{at}/assert"))?)
                }
                (false, None) => {
                    return Err(format!(
                        "{at}: a rule needs either `field`, `op` and `other`, or `assert`"
                    ))
                }
            };
            rules.push(Rule {
                index,
                name,
                message,
                when,
                fields,
                body,
            });
        }
        Ok(RuleSet { rules })
    }

    /// Every failure of every rule on `instance`, as JSON payloads.
    fn failures(&self, instance: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for rule in &self.rules {
            if let Some(when) = &rule.when {
                if !when.validator.is_valid(instance) {
                    continue;
                }
            }
            for f in rule.evaluate(instance) {
                out.push(serde_json::to_string(&f).unwrap_or_default());
            }
        }
        out
    }
}

impl Rule {
    fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("rule '{n}'"),
            None => format!("rule {}", self.index),
        }
    }

    fn evaluate(&self, instance: &Value) -> Vec<Failure> {
        match &self.body {
            Body::Compare { field, op, other } => {
                let (Some(a), Some(b)) = (instance.pointer(field), instance.pointer(other)) else {
                    return Vec::new();
                };
                if a.is_null() || b.is_null() {
                    return Vec::new();
                }
                let name_a = display_name(field);
                let name_b = display_name(other);
                let mut fields = self.fields.clone();
                for p in [field, other] {
                    if !fields.contains(p) {
                        fields.push(p.clone());
                    }
                }
                let detail = match compare_values(a, b) {
                    Some(ord) if op.holds(ord) => return Vec::new(),
                    Some(_) => format!(
                        "{name_a} should be {} {name_b} ({name_a}={}, {name_b}={})",
                        op.phrase(),
                        short_repr(a),
                        short_repr(b)
                    ),
                    None if op.is_equality() => {
                        let equal = a == b;
                        if equal == (*op == Op::Eq) {
                            return Vec::new();
                        }
                        format!(
                            "{name_a} should be {} {name_b} ({name_a}={}, {name_b}={})",
                            op.phrase(),
                            short_repr(a),
                            short_repr(b)
                        )
                    }
                    None => format!(
                        "{name_a} and {name_b} cannot be ordered: `{}` needs two numbers, two \
                         dates, two date-times or two times, not {} and {}",
                        op_symbol(*op),
                        value_kind(a),
                        value_kind(b)
                    ),
                };
                let msg = match &self.message {
                    Some(m) => format!("{m}: {detail}"),
                    None => detail,
                };
                vec![Failure {
                    loc: loc_from_pointer(instance, field),
                    msg,
                    input: cut_input(a),
                    schema_path: format!("/{}", self.index),
                    fields,
                }]
            }
            Body::Assert(sub) => {
                let mut lines = Vec::new();
                for err in sub.validator.iter_errors(instance) {
                    errors::map_error(&err, instance, &sub.schema, &mut lines);
                }
                let head = match &self.message {
                    Some(m) => m.clone(),
                    None => format!("{} failed", self.label()),
                };
                lines
                    .into_iter()
                    .map(|line| {
                        let mut fields = self.fields.clone();
                        let at = pointer_from_loc(&line.loc);
                        if !fields.contains(&at) {
                            fields.push(at);
                        }
                        let names: Vec<String> = fields.iter().map(|f| display_name(f)).collect();
                        let rel = line
                            .schema_path
                            .strip_prefix("/allOf/0")
                            .unwrap_or(&line.schema_path);
                        Failure {
                            msg: format!("{head}: {} (fields: {})", line.msg, names.join(", ")),
                            loc: line.loc,
                            input: line.input,
                            schema_path: format!("/{}/assert{rel}", self.index),
                            fields,
                        }
                    })
                    .collect()
            }
        }
    }
}

impl<'i> jsonschema::Keyword<'i> for RuleSet {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        match self.failures(instance).into_iter().next() {
            Some(payload) => Err(jsonschema::ValidationError::custom(payload)),
            None => Ok(()),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        self.failures(instance).is_empty()
    }

    fn iter_errors(
        &self,
        instance: &'i Value,
    ) -> Box<dyn Iterator<Item = jsonschema::ValidationError<'i>> + 'i> {
        let errors: Vec<jsonschema::ValidationError<'i>> = self
            .failures(instance)
            .into_iter()
            .map(|payload| -> jsonschema::ValidationError<'i> {
                jsonschema::ValidationError::custom(payload)
            })
            .collect();
        Box::new(errors.into_iter())
    }
}

/// Turn the rules validator's errors into `semantic` line errors: the keyword's own errors,
/// and those inside `anyOf`/`oneOf` branches that failed on rules alone. Anything else is
/// ignored: the schema verdict was already clean.
pub fn collect_rule_errors(
    err: &jsonschema::ValidationError<'_>,
    root: &Value,
    out: &mut Vec<LineError>,
) {
    collect_at(err, root, out, 0)
}

/// Union levels looked into for rule errors (bounds the recursion whatever the instance).
const MAX_UNION_DEPTH: usize = 16;

fn collect_at(
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
            let base_ptr = err.instance_path().to_string();
            let mut loc = loc_from_pointer(root, &base_ptr);
            loc.extend(f.loc);
            let mut schema_path = err.schema_path().to_string();
            if !schema_path.ends_with(KEYWORD) {
                schema_path = format!("{schema_path}/{KEYWORD}");
            }
            out.push(LineError {
                loc,
                msg: f.msg,
                r#type: "semantic".into(),
                input: f.input,
                schema_path: format!("{schema_path}{}", f.schema_path),
                fields: f
                    .fields
                    .into_iter()
                    .map(|p| format!("{base_ptr}{p}"))
                    .collect(),
            });
        }
        K::AnyOf { context } | K::OneOfNotValid { context } => {
            if depth >= MAX_UNION_DEPTH {
                return;
            }
            for branch in context {
                if branch.iter().all(|e| only_rules(e, depth + 1)) {
                    for e in branch {
                        collect_at(e, root, out, depth + 1);
                    }
                }
            }
        }
        _ => {}
    }
}

fn only_rules(err: &jsonschema::ValidationError<'_>, depth: usize) -> bool {
    use jsonschema::error::ValidationErrorKind as K;
    match err.kind() {
        K::Custom { message, .. } => serde_json::from_str::<Failure>(message).is_ok(),
        K::AnyOf { context } | K::OneOfNotValid { context } => {
            depth < MAX_UNION_DEPTH
                && context
                    .iter()
                    .any(|b| b.iter().all(|e| only_rules(e, depth + 1)))
        }
        _ => false,
    }
}

/// Property names a condition mentions, as pointers relative to the rule's value: the keys of
/// `properties`, the names in `required` and `dependentRequired`, through `if`, `then`,
/// `else`, `allOf`, `anyOf`, `oneOf` and `not`, and nested `properties`.
fn referenced_fields(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    let Value::Object(m) = schema else { return };
    let push = |name: &str, out: &mut Vec<String>| {
        let p = format!("{prefix}/{}", escape(name));
        if !out.contains(&p) {
            out.push(p);
        }
    };
    if let Some(Value::Object(props)) = m.get("properties") {
        for (k, sub) in props {
            push(k, out);
            let p = format!("{prefix}/{}", escape(k));
            let mut nested = Vec::new();
            referenced_fields(sub, &p, &mut nested);
            for n in nested {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
    }
    if let Some(Value::Array(req)) = m.get("required") {
        for r in req.iter().filter_map(Value::as_str) {
            push(r, out);
        }
    }
    if let Some(Value::Object(dep)) = m.get("dependentRequired") {
        for (k, v) in dep {
            push(k, out);
            for r in v.as_array().into_iter().flatten().filter_map(Value::as_str) {
                push(r, out);
            }
        }
    }
    for key in ["if", "then", "else", "not"] {
        if let Some(sub) = m.get(key) {
            referenced_fields(sub, prefix, out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = m.get(key) {
            for sub in subs {
                referenced_fields(sub, prefix, out);
            }
        }
    }
}

/// For an `assert`, the fields its conditions test (`if`, and `dependentRequired` keys):
/// the failing field itself is added per error.
fn referenced_fields_conditions(schema: &Value, out: &mut Vec<String>) {
    let Value::Object(m) = schema else { return };
    if let Some(cond) = m.get("if") {
        referenced_fields(cond, "", out);
    }
    if let Some(Value::Object(dep)) = m.get("dependentRequired") {
        for k in dep.keys() {
            let p = format!("/{}", escape(k));
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    if let Some(Value::Array(subs)) = m.get("allOf") {
        for sub in subs {
            referenced_fields_conditions(sub, out);
        }
    }
}

/// `/a/0/b` -> `a.0.b`, the way pydantic prints a location; the root is `(root)`.
fn display_name(pointer: &str) -> String {
    if pointer.is_empty() {
        return "(root)".into();
    }
    pointer
        .split('/')
        .skip(1)
        .map(unescape)
        .collect::<Vec<_>>()
        .join(".")
}

fn short_repr(v: &Value) -> String {
    py_repr(&cut_input(v))
}

fn op_symbol(op: Op) -> &'static str {
    match op {
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Eq => "==",
        Op::Ne => "!=",
        Op::Ge => ">=",
        Op::Gt => ">",
    }
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::String(s) if parse_datetime(s).is_some() => "a date-time",
        Value::String(s) if parse_date(s).is_some() => "a date",
        Value::String(s) if parse_time(s).is_some() => "a time",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Order two values when they are of one orderable kind: numbers (exact), RFC 3339
/// date-times (as instants, offsets applied), dates, or times (offsets applied).
fn compare_values(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => super::number::compare(x, y),
        (Value::String(x), Value::String(y)) => {
            if let (Some(p), Some(q)) = (parse_datetime(x), parse_datetime(y)) {
                return Some(cmp_instant(&p, &q));
            }
            if let (Some(p), Some(q)) = (parse_date(x), parse_date(y)) {
                return Some(p.cmp(&q));
            }
            if let (Some(p), Some(q)) = (parse_time(x), parse_time(y)) {
                return Some(cmp_instant(&p, &q));
            }
            None
        }
        _ => None,
    }
}

/// Seconds and the fraction's digits (trailing zeros removed).
type Instant = (i64, String);

fn cmp_instant(a: &Instant, b: &Instant) -> Ordering {
    a.0.cmp(&b.0).then_with(|| {
        let n = a.1.len().max(b.1.len());
        let pa = format!("{:0<n$}", a.1);
        let pb = format!("{:0<n$}", b.1);
        pa.cmp(&pb)
    })
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `YYYY-MM-DD` as (year, month, day), with the month's real length.
fn parse_date(s: &str) -> Option<(i64, i64, i64)> {
    if s.len() != 10 || s.as_bytes()[4] != b'-' || s.as_bytes()[7] != b'-' {
        return None;
    }
    let y = digits(&s[0..4])?;
    let m = digits(&s[5..7])?;
    let d = digits(&s[8..10])?;
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let len = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    (1..=len).contains(&d).then_some((y, m, d))
}

/// Days since 1970-01-01 (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `HH:MM:SS[.frac](Z|±HH:MM)` as seconds from midnight UTC and the fraction's digits.
/// The offset is optional here (a bare time compares as written).
fn parse_time(s: &str) -> Option<Instant> {
    let b = s.as_bytes();
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let h = digits(&s[0..2])?;
    let mi = digits(&s[3..5])?;
    let sec = digits(&s[6..8])?;
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[8..];
    let mut frac = String::new();
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        frac = r[..n].trim_end_matches('0').to_string();
        rest = &r[n..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let oh = digits(&o[1..3])?;
            let om = digits(&o[4..6])?;
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    Some((h * 3600 + mi * 60 + sec - offset, frac))
}

/// RFC 3339 `date-time` (`T`, `t` or a space between) as a UTC instant.
fn parse_datetime(s: &str) -> Option<Instant> {
    if s.len() < 19 {
        return None;
    }
    let sep = s.as_bytes()[10];
    if !(sep == b'T' || sep == b't' || sep == b' ') {
        return None;
    }
    let (y, m, d) = parse_date(&s[..10])?;
    let time = &s[11..];
    // A date-time needs its offset.
    if !(time.ends_with('Z')
        || time.ends_with('z')
        || time.len() > 8 && time[time.len().saturating_sub(6)..].starts_with(['+', '-']))
    {
        return None;
    }
    let (secs, frac) = parse_time(time)?;
    Some((days_from_civil(y, m, d) * 86_400 + secs, frac))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_instants_order() {
        assert_eq!(
            compare_values(&Value::from("2027-06-10"), &Value::from("2027-06-12")),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare_values(
                &Value::from("2027-06-12T10:00:00+02:00"),
                &Value::from("2027-06-12T08:30:00Z")
            ),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare_values(&Value::from("10:00:00.5Z"), &Value::from("10:00:00.25Z")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            compare_values(&Value::from("abc"), &Value::from("abd")),
            None
        );
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11017);
        assert!(parse_date("2027-02-29").is_none());
        assert!(parse_date("2028-02-29").is_some());
    }

    #[test]
    fn placement_is_checked() {
        let bad = serde_json::json!({"not": {"x-formwork-rules": []}});
        assert!(check_placement(&bad).is_err());
        let ok = serde_json::json!({"properties": {"not": {"x-formwork-rules": []}}});
        assert!(check_placement(&ok).is_ok());
        let ok = serde_json::json!({"$defs": {"A": {"x-formwork-rules": []}}});
        assert!(check_placement(&ok).is_ok());
    }
}
