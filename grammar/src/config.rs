//! What one compile is asked and how it fails: [`Config`] (whitespace, lenient, the
//! [`Limits`]), [`Relaxed`] (a keyword lenient mode left to the validator),
//! [`CompileError`] (every failure, at its JSON Pointer) and the compile's one step
//! `Budget`. The schema reader ([`crate::schema`]), the lexical automata
//! ([`crate::dfa`]) and the machine ([`crate::compile::machine`]) all import these from
//! here, and [`crate::compile`] re-exports the public ones, so no stage imports another
//! stage for its vocabulary.

use std::cell::Cell;

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
    /// Work units of one compile, the step budget: about one per transition of a DFA
    /// built (by regex-automata or here), per state of a length table's layer, per byte
    /// class of a state's predecessors, per 8 bits of a length table; per property,
    /// literal or pattern of the two conjunctions that one intersection, narrowing or
    /// disjointness test compares; one per subschema read and per node of a
    /// shortest-length sweep. A count, not a clock: the same schema takes the same
    /// steps, and stops at the same place, on any machine under any load
    /// ([`Stats::steps`](crate::compile::Stats::steps) tells what a schema took). In a
    /// release build a step of the heavy passes took 5 to 20 ns on the project's 2-core
    /// machine (`cargo bench -p formwork-grammar --bench compile_limits`, 2026-12-05), so
    /// the default, 200M, is 3 to 4 s of them; it is 40x the most any JSONSchemaBench
    /// schema takes (4.7M steps, `Github_hard/o21072.json`).
    pub steps: u64,
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
            steps: 200_000_000,
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
    #[error("{}", limit_message(what, *given, *limit, pointer))]
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

fn limit_message(what: &str, given: usize, limit: usize, pointer: &str) -> String {
    if what == CompileError::STEPS {
        format!(
            "compile step limit of {limit} reached after {given} steps{}",
            at(pointer)
        )
    } else {
        format!("limit exceeded: {what} {given} > {limit}{}", at(pointer))
    }
}

/// The step budget of one compile ([`Limits::steps`]), charged by every pass whose work
/// can grow faster than the schema: reading subschemas and combinators, narrowing
/// `not`/`if`/`oneOf`, pattern DFAs and their products, length tables, shortest lengths.
/// One per compile, shared by reference (a `Cell`: a compile is one thread).
#[derive(Debug)]
pub(crate) struct Budget {
    used: Cell<u64>,
    limit: u64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Budget {
        Budget {
            used: Cell::new(0),
            limit,
        }
    }

    /// Charges `n` steps; true once the budget is spent (more used than the limit).
    pub(crate) fn charge(&self, n: u64) -> bool {
        self.used.set(self.used.get().saturating_add(n));
        self.spent()
    }

    pub(crate) fn spent(&self) -> bool {
        self.used.get() > self.limit
    }

    /// Steps charged so far.
    pub(crate) fn used(&self) -> u64 {
        self.used.get()
    }

    /// Charges `n` steps; the step limit error, at `pointer`, once the budget is spent.
    pub(crate) fn check(&self, n: u64, pointer: &str) -> Result<(), CompileError> {
        if self.charge(n) {
            return Err(self.error(pointer));
        }
        Ok(())
    }

    pub(crate) fn error(&self, pointer: &str) -> CompileError {
        let sat = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        CompileError::Limit {
            what: CompileError::STEPS,
            given: sat(self.used.get()),
            limit: sat(self.limit),
            pointer: pointer.to_string(),
        }
    }
}

impl CompileError {
    /// The `what` of the step limit's [`CompileError::Limit`] ([`Limits::steps`]).
    pub const STEPS: &'static str = "compile steps";

    /// Is this the compile step limit? (Passes that read other errors as "not sure" must
    /// still stop on this one.)
    pub fn is_step_limit(&self) -> bool {
        matches!(self, CompileError::Limit { what, .. } if *what == CompileError::STEPS)
    }
}
