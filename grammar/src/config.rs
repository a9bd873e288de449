//! What one compile is asked and how it fails: [`Config`] (whitespace, lenient, the
//! [`Limits`]), [`Relaxed`] (a keyword lenient mode left to the validator),
//! [`CompileError`] (every failure, at its JSON Pointer) and the compile's one
//! [`Deadline`]. The schema reader ([`crate::schema`]), the lexical automata
//! ([`crate::dfa`]) and the machine ([`crate::compile::machine`]) all import these from
//! here, and [`crate::compile`] re-exports the public ones, so no stage imports another
//! stage for its vocabulary.

use std::time::Instant;

/// Whitespace between tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Whitespace {
    /// None at all: the canonical compact form.
    #[default]
    Compact,
    /// Runs of at most `max_run` bytes of space, tab, CR or LF wherever JSON allows them.
    Flexible { max_run: u32 },
}

/// Documented limits; exceeding one is a [`CompileError::Limit`] with the numbers.
#[derive(Clone, Debug)]
pub struct Limits {
    /// JSON values in the schema document.
    pub schema_values: usize,
    /// Nesting depth of the document, and of combinators and `$ref`s read inline.
    pub depth: usize,
    /// IR nodes (distinct subschema conjunctions).
    pub ir_nodes: usize,
    /// Alternatives of one subschema after distributing `anyOf`/`oneOf` over `allOf`.
    pub alternatives: usize,
    /// States of one pattern/format DFA (or of an intersection).
    pub dfa_states: usize,
    /// DFA states x (string length bound + 1) for pattern-with-length tables.
    pub length_bits: usize,
    /// Wall-clock compile time in milliseconds.
    pub time_ms: u64,
    /// States of the span automaton of one document (`x-formwork-source`): about two
    /// per document byte.
    pub source_states: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            schema_values: 1_000_000,
            depth: 128,
            ir_nodes: 50_000,
            alternatives: 256,
            dfa_states: 20_000,
            length_bits: 64 << 20,
            time_ms: 5_000,
            source_states: 400_000,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Config {
    pub whitespace: Whitespace,
    /// Relax keywords the grammar cannot enforce instead of refusing the schema.
    pub lenient: bool,
    pub limits: Limits,
}

/// A keyword the grammar did not enforce (lenient mode only): the validator alone does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relaxed {
    pub keyword: String,
    pub pointer: String,
    pub why: String,
}

/// Why a schema did not compile. Every `pointer` is a JSON Pointer (RFC 6901) into the
/// schema document, in that one form everywhere: `""` is the document itself,
/// `/properties/a/pattern` the `pattern` keyword of property `a` (`~0` and `~1` escape `~`
/// and `/`). Where a subschema is the conjunction of several places (an `allOf`, a `$ref`
/// beside other keywords), their pointers are joined by ` & `.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("unsupported keyword `{keyword}` at {pointer:?}: {why}")]
    Unsupported {
        keyword: String,
        pointer: String,
        why: String,
    },
    #[error("invalid schema at {pointer:?}: {msg}")]
    InvalidSchema { pointer: String, msg: String },
    #[error("limit exceeded: {what} {given} > {limit}{}", at(.pointer))]
    Limit {
        what: &'static str,
        given: usize,
        limit: usize,
        /// JSON Pointer(s) of the subschema being compiled when the limit was hit; empty
        /// when the limit is not tied to one place (the document size, say).
        pointer: String,
    },
    #[error("schema at {pointer:?} has no valid instance the grammar can produce")]
    Empty { pointer: String },
    /// `x-formwork-source`: the schema needs a string that no span of this document
    /// gives (under its pattern and lengths).
    #[error("no span of the document satisfies the string at {pointer:?} (x-formwork-source), and the schema needs one")]
    NoSpan { pointer: String },
}

fn at(pointer: &str) -> String {
    if pointer.is_empty() {
        String::new()
    } else {
        format!(" at {pointer:?}")
    }
}

/// The wall-clock budget of one compile ([`Limits::time_ms`]), checked by every pass whose
/// work can grow faster than the schema: reading combinators, narrowing `not`/`if`/`oneOf`,
/// pattern DFAs and their products, length tables, shortest lengths.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    start: Instant,
    limit_ms: u64,
}

impl Deadline {
    pub(crate) fn new(limit_ms: u64) -> Deadline {
        Deadline {
            start: Instant::now(),
            limit_ms,
        }
    }

    pub(crate) fn expired(&self) -> bool {
        self.start.elapsed().as_millis() > u128::from(self.limit_ms)
    }

    /// The time limit error, at `pointer`, once the budget is spent.
    pub(crate) fn check(&self, pointer: &str) -> Result<(), CompileError> {
        if self.expired() {
            return Err(self.error(pointer));
        }
        Ok(())
    }

    pub(crate) fn error(&self, pointer: &str) -> CompileError {
        CompileError::Limit {
            what: "compile time (ms)",
            given: self.start.elapsed().as_millis() as usize,
            limit: self.limit_ms as usize,
            pointer: pointer.to_string(),
        }
    }
}

impl CompileError {
    /// Is this the compile-time limit? (Passes that read other errors as "not sure" must
    /// still stop on this one.)
    pub fn is_time_limit(&self) -> bool {
        matches!(self, CompileError::Limit { what, .. } if what.starts_with("compile time"))
    }
}
