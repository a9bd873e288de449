//! The masked decoding loop, independent of any real model or tokenizer: it runs
//! against `LanguageModel` (a real GGUF model, or a scripted one in tests) and a
//! `Codec` (the GGUF tokenizer, or a byte-level vocabulary in tests).
//!
//! One step:
//! 1. A sampled token is committed to the matcher at once but fed to the model only
//!    at the next step, so that forced bytes after it can join it. If the schema
//!    forces the next bytes (`{"sku":"` at the start, `,"date":` after a value),
//!    tokenise them *together with that pending token* (token healing: the model's
//!    `"` and the forced `,"date":` are fed as `","`, `date`, as the tokenizer writes
//!    the text), keep the canonical prefix (no token could span its end; the bytes
//!    after it are left to the model under the mask), commit those tokens without
//!    sampling and feed everything in one forward pass (jump-forward).
//! 2. Otherwise tell the matcher how many tokens are left (it steers to the shortest
//!    valid completion when the budget runs low), then sample. Greedy checks the
//!    argmax first and computes the full mask only when the argmax is refused;
//!    temperature sampling always computes the full mask. With `null_lookahead`, a
//!    nullable field's `null` is first weighed against its best value (see
//!    [`decode_masked`]).
//! 3. EOS is allowed only in an accepting state; the loop stops at EOS, or when the
//!    matcher is finished (accepting and nothing can follow; the last tokens are then
//!    not fed, as their logits would never be read).
//!
//! Each output records its jump-forward spans and whether they are canonical (the
//! tokenizer's own encoding of the final text at that place, [`canonical_spans`]).
//!
//! The stages, one file each: `options` (what a run is handed), `output` (what it
//! hands back, and the canonical check), `feed` (step 1: jump-forward and token
//! healing), `sample` (step 3: picking under the mask), `null` (picks where `null`
//! competes), `lookahead` (the null lookahead), `weigh` (a `null` weighed against the best
//! quotation of the document), `grounder` (grounding take-backs),
//! `masked` (the masked loop), `free` (the free loop) and `think` (a reasoning
//! model's think block of free text, closed by the model or by its budget, then the
//! masked answer).

mod feed;
mod free;
mod ground_args;
mod grounder;
mod lookahead;
mod mark;
mod masked;
mod null;
mod options;
mod output;
mod sample;
mod think;
mod weigh;

pub use free::{decode_free, Until};
pub use masked::decode_masked;
pub use options::{Codec, DecodeOptions, Redirect, Stop, Watch};
pub use output::{canonical_spans, DecodeOutput, DecodeStats, NullDecision, WeighedNull};
pub use think::{decode_think, think, ThinkOutput, ThinkPlan, Thought};
