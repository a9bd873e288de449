//! What a run is handed: the tokenizer it speaks through (`Codec`), the options
//! (`DecodeOptions`: budget, jump-forward, null bias and lookahead, grounding,
//! confidence, deadline), the `Watch` that may cancel it, the tool turns' `Redirect`,
//! and why it stopped (`Stop`).

use std::time::Instant;

use formwork_grammar::toktrie::TokenSet;

use super::super::ground::Grounding;

/// What the loop needs from a tokenizer.
pub trait Codec {
    /// Token ids for `text`, special-token text *not* interpreted.
    fn encode(&self, text: &str) -> Vec<u32>;
    /// Raw bytes of every token id.
    fn token_bytes(&self) -> &[Vec<u8>];
    /// Ids that end a generation.
    fn eos_ids(&self) -> &[u32];
}

impl Codec for formwork_models::tokenizer::GgufTokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        // Forced text is plain JSON; a failure here would be a tokenizer bug, and
        // the loop then falls back to sampling (an empty list forces nothing).
        self.encode_plain(text).unwrap_or_default()
    }
    fn token_bytes(&self) -> &[Vec<u8>] {
        formwork_models::tokenizer::GgufTokenizer::token_bytes(self)
    }
    fn eos_ids(&self) -> &[u32] {
        formwork_models::tokenizer::GgufTokenizer::eos_ids(self)
    }
}

/// Why the loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model chose EOS in an accepting state.
    Eos,
    /// The text is complete and nothing may follow it.
    Finished,
    /// The token budget ran out before acceptance (cannot happen when steering
    /// works; reported, never hidden).
    Budget,
    /// The per-record time limit ran out.
    Timeout,
    /// The [`Watch`] asked to stop (a server's client went away).
    Cancelled,
}

/// Watches a run: called with the output bytes so far before every step (so the
/// text grows between two calls by what the last feed added). Returning `false`
/// stops the run with [`Stop::Cancelled`]. A server streams deltas and notices a
/// client that went away through it.
#[derive(Clone)]
pub struct Watch(pub std::sync::Arc<dyn Fn(&[u8]) -> bool + Send + Sync>);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch(..)")
    }
}

impl Watch {
    pub(super) fn stops(opts: &DecodeOptions, bytes: &[u8]) -> bool {
        opts.watch.as_ref().is_some_and(|w| !(w.0)(bytes))
    }
}

#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub max_tokens: usize,
    /// Feed the bytes the schema forces without sampling them (see the module doc).
    pub jump_forward: bool,
    /// With jump-forward: tokenise a sampled token together with the forced bytes
    /// after it (token healing at the left edge of a forced span). On by default;
    /// off only to measure the split of forced text tokenised alone.
    pub heal_forced: bool,
    /// Greedy only: at a nullable field, score the `null` branch against the best
    /// value branch before committing (see [`decode_masked`]).
    ///
    /// [`decode_masked`]: super::decode_masked
    pub null_lookahead: bool,
    /// Added to the logits of the tokens that start `null` where a nullable field's
    /// `null` competes with a value ([`Matcher::null_competes`]), before the token is
    /// picked: a prior for "null unless the document says so", in nats. 0 leaves the
    /// model's choice alone.
    ///
    /// [`Matcher::null_competes`]: formwork_grammar::matcher::Matcher::null_competes
    pub null_bias: f32,
    /// Where the model picks `null` for a grounded text field, weigh it against the
    /// best whole value the document offers ([`NullOdds::whole`], decoded as a
    /// quotation on the model and taken back; with `null_lookahead`, kept when it
    /// weighs more). Needs `confidence` and `grounding`.
    ///
    /// [`NullOdds::whole`]: crate::engine::confidence::NullOdds::whole
    pub weigh_nulls: bool,
    /// Greedy, with `weigh_nulls`: write the weighed value instead of the `null` when
    /// its probability given a value is above this (the document offers a value the
    /// model writes with near certainty once it writes one). `None`: never (the null
    /// lookahead still takes it where it weighs more than the `null`).
    pub fill_above: Option<f64>,
    pub deadline: Option<Instant>,
    /// Sees the text as it grows, and may stop the run (see [`Watch`]).
    pub watch: Option<Watch>,
    /// Grounded fields ([`ground`](crate::engine::ground)): each grounded string is
    /// judged as it is completed, and one the document does not state is taken back
    /// and written `null`.
    pub grounding: Option<std::sync::Arc<Grounding>>,
    /// A tool turn's grounded arguments ([`crate::engine::ground::args`]).
    pub arg_grounding: Option<std::sync::Arc<super::super::ground::ArgGrounding>>,
    /// Tool turns: where the model's own best token is refused and begins like a
    /// call, the call's opener is picked (see [`Redirect`]).
    pub redirect: Option<std::sync::Arc<Redirect>>,
    /// Record each chosen token's probability under the mask, and the odds of `null`
    /// where it competes ([`DecodeOutput::probs`], read by [`confidence`]).
    /// Greedy decoding then computes the full mask at every step it picks a token.
    ///
    /// [`DecodeOutput::probs`]: super::DecodeOutput::probs
    /// [`confidence`]: crate::engine::confidence
    pub confidence: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_tokens: 512,
            jump_forward: true,
            heal_forced: true,
            null_lookahead: false,
            null_bias: 0.0,
            weigh_nulls: false,
            fill_above: None,
            deadline: None,
            watch: None,
            grounding: None,
            arg_grounding: None,
            redirect: None,
            confidence: false,
        }
    }
}

/// A model that means to call a tool but starts it its own way (a bare `{"name"`, a
/// code fence, a tag) is taken at its word: where its best token, before the mask, is
/// one of `from` and refused, and `to` is allowed, `to` is picked. The tool grammar
/// refuses `from` exactly where a line of text begins and allows the opener there,
/// so this is the decision "call or text" read from the model, not a change of the
/// mask: the output stays what the grammar allows. A code fence is either: ```` ```json ````
/// opens a call, ```` ```python ```` a code answer. So for a token of `fence` the model is
/// asked one token further (a forward pass on a snapshot): a language other than JSON
/// leaves the choice to the mask (text). The best token is the argmax of the logits
/// under any sampling, so the decision is the same at every temperature.
#[derive(Clone, Debug)]
pub struct Redirect {
    pub from: TokenSet,
    /// The tokens of `from` that open a code fence without naming JSON.
    pub fence: TokenSet,
    pub to: u32,
    /// Nats added to every call start (`from`, the opener among them) at the start of
    /// the turn, where a call competes with the answer: negative leans to answering.
    pub open_bias: f32,
    /// Nats taken from EOS right after a call, where another call competes with the
    /// end of the turn: positive leans to one more call.
    pub more_bias: f32,
}

impl Redirect {
    /// Tokens whose bytes, after any whitespace, begin with one of `starts`; `to` is
    /// the opener's token.
    pub fn new(codec: &dyn Codec, starts: &[u8], to: u32) -> Redirect {
        let vocab = codec.token_bytes();
        let eos = codec.eos_ids();
        let mut from = TokenSet::new(vocab.len());
        let mut fence = TokenSet::new(vocab.len());
        for (i, b) in vocab.iter().enumerate() {
            let first = b.iter().find(|c| !c.is_ascii_whitespace());
            if first.is_some_and(|c| starts.contains(c)) && !eos.contains(&(i as u32)) {
                from.allow(i as u32);
                if first == Some(&b'`') && !b.windows(4).any(|w| w.eq_ignore_ascii_case(b"json")) {
                    fence.allow(i as u32);
                }
            }
        }
        Redirect {
            from,
            fence,
            to,
            open_bias: 0.0,
            more_bias: 0.0,
        }
    }

    /// Adds the turn's call biases to `logits`, the logits of the step after `out`:
    /// [`Redirect::open_bias`] at the turn's start, [`Redirect::more_bias`] right after
    /// a call.
    pub fn bias(&self, logits: &mut [f32], out: &[u8], eos: &[u32]) {
        if out.is_empty() && self.open_bias != 0.0 {
            for (i, l) in logits.iter_mut().enumerate() {
                if self.from.contains(i as u32) || i as u32 == self.to {
                    *l += self.open_bias;
                }
            }
        } else if self.more_bias != 0.0 && out.ends_with(b"</tool_call>") {
            for &e in eos {
                if let Some(l) = logits.get_mut(e as usize) {
                    *l -= self.more_bias;
                }
            }
        }
    }

    /// Whether the token after a fence (its language, or the text on its next line)
    /// begins a call: JSON, a brace, a bracket, a tag, or nothing yet.
    pub fn fence_opens_call(next: &[u8]) -> bool {
        let t: Vec<u8> = next
            .iter()
            .copied()
            .skip_while(|c| c.is_ascii_whitespace() || *c == b'`')
            .collect();
        t.is_empty()
            || matches!(t[0], b'{' | b'[' | b'<')
            || t.len() >= 4 && t[..4].eq_ignore_ascii_case(b"json")
            || t.len() >= 4 && t[..4].eq_ignore_ascii_case(b"tool")
    }
}
