//! formwork-grammar: JSON Schema -> token masks. Pure: no I/O, no model runtime.
//!
//! (The pipeline narrative is written as the pieces land.)

pub mod automaton;
pub mod compile;
pub mod config;
pub mod dfa;
pub mod ir;
pub mod matcher;
pub mod num;
pub mod sample;
pub mod schema;
pub mod source;
pub mod toktrie;

pub use automaton::ByteAutomaton;
pub use matcher::{CommitError, Grammar, GrammarStats, Matcher};
pub use toktrie::{TokTrie, TokenSet};
