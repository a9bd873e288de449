//! `formwork bench --dataset`: masked against free decoding on a labelled set.
//!
//! Each dataset line is `{id, text, schema, expected}` (plus an optional
//! `schema_name`). Every record runs in every requested mode with the same model,
//! greedy by default, and the seed is recorded, so a run is reproducible.
//!
//! Measures, per mode, overall and per schema:
//! - conformity: the share that parses, is schema-valid, is semantically valid;
//! - exact match with `expected`, and per-field accuracy. A record that is not
//!   schema-valid counts all of its expected fields as wrong, so the worst cases
//!   stay in the denominator;
//! - `needs_review` rate, attempts per record (free mode);
//! - tokens in the prompt, generated and forced; forward passes; decode tokens/s;
//!   wall time per valid object; mask time per token (p50, p99); peak RSS.
//!
//! Field comparison: exact for enums, numbers, booleans and null; strings are
//! compared after trimming and Unicode case-folding (lowercasing), unless
//! `exact_strings` is set.
//!
//! One stage a file: `dataset` (the cases and modes), `run` (every case in every mode),
//! `score` (one record against its gold, through `fields` and `locate`), `summary` and
//! `review` (aggregates of a group, with the arithmetic they share in `stats`), `report` (report.json and the markdown tables),
//! `html` (the HTML page); `masks` is `formwork bench masks`.

pub mod html;
pub mod masks;

mod dataset;
mod fields;
mod locate;
mod report;
mod review;
mod run;
mod score;
mod stats;
mod summary;

pub use dataset::{read_dataset, spread, BenchMode, Case};
pub use fields::{
    field_equal, find_placeholders, is_empty_value, leaf_fields, placeholder_texts, slot_outcome,
    spans_not_in_text, SlotOutcome,
};
pub use locate::pointer_at;
pub use report::{markdown, Report};
pub use review::{caught, review, Below, Bin, Review, REVIEW_THRESHOLDS};
pub use run::{peak_rss_mb, requests, run, BenchConfig};
pub use score::{score, FieldDecision, RecordResult};
pub use stats::percentile;
pub use summary::{summarize, SlotCounts, Summary};
