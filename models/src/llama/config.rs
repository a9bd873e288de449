//! GGUF metadata -> [`Config`]: the hyper-parameters of a llama, Qwen2, Qwen3, Gemma 2,
//! Gemma 3 or Phi-3 model, read from the `{arch}.*` keys and checked, so that a model this
//! file cannot run (another architecture, experts, an odd head size) fails here with the
//! key named, before any tensor is read. The one description of every family: formwork's
//! CPU file ([`super`]) and the model graph ([`crate::graph`]) both read it.

use candle_core::quantized::gguf_file;
use candle_core::Result;

use super::bail;

/// The model families this file runs: they differ in the layer's details (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    /// Qwen2's layer without the q/k/v biases, with per-head RMS norms of q and k.
    Qwen3,
    /// Gemma 3's layer without the q/k norms, with soft-capped attention scores and
    /// logits, every other layer local.
    Gemma2,
    Gemma3,
    /// Llama's layer with fused `attn_qkv` and `ffn_up` (gate and up halves) matrices,
    /// NeoX RoPE with LongRoPE's per-pair factors (`rope_factors_long` / `_short`).
    Phi3,
}

impl Arch {
    /// The `general.architecture` value, and the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [
            Arch::Llama,
            Arch::Qwen2,
            Arch::Qwen3,
            Arch::Gemma2,
            Arch::Gemma3,
            Arch::Phi3,
        ]
        .into_iter()
        .find(|a| a.name() == name)
    }

    /// How RoPE pairs a head's values: the GGUF converter permutes llama's Wq and Wk for
    /// interleaved pairs, and leaves Qwen2's, Qwen3's and Gemma's in the NeoX order
    /// (llama.cpp's `rope_type`), and Phi-3's too.
    pub fn rope(self) -> RopeStyle {
        match self {
            Arch::Llama => RopeStyle::Interleaved,
            Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma2 | Arch::Gemma3 | Arch::Phi3 => RopeStyle::Neox,
        }
    }

    /// Gemma's layer: the embedding scaled by `sqrt(embedding_length)`, norms after the
    /// attention and the feed-forward block, GELU-tanh.
    pub fn gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }

    /// Whether each head of q and k is RMS-normed before RoPE (`attn_q_norm`,
    /// `attn_k_norm`).
    pub fn qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }
}

/// Gemma's local layers: they attend to the last `window` positions (themselves
/// included) and rotate with their own RoPE base; every `pattern`-th layer is global.
#[derive(Debug, Clone, PartialEq)]
pub struct Sliding {
    /// `{arch}.attention.sliding_window` (Gemma 2: else 4096).
    pub window: usize,
    /// `{arch}.attention.sliding_window_pattern`, else 6 for Gemma 3 and 2 for Gemma 2
    /// (llama.cpp's defaults; the files carry no key): Gemma 2's even layers are local.
    /// 0 makes every layer local.
    pub pattern: usize,
    /// `{arch}.rope.freq_base_swa`, or `gemma3.rope.local_freq_base`, else 10,000 for
    /// Gemma 3 and the global base for Gemma 2.
    pub rope_theta: f32,
}

/// Which values of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`.
    Interleaved,
    /// Pairs `(i, i + rope_dim / 2)`.
    Neox,
}

/// The hyper-parameters of a model, read from the `{arch}.*` GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// `{arch}.attention.key_length`, else `embedding_length / head_count`. The queries
    /// are `head_count * head_dim` wide, which need not be the embedding length (Gemma 3).
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    /// `{arch}.rope.dimension_count`, else the head size: RoPE turns the first `rope_dim`
    /// values of each head and leaves the rest (Phi-4-mini: 96 of 128).
    pub rope_dim: usize,
    /// RoPE base (of the global layers, where some are local).
    pub rope_theta: f32,
    /// Linear RoPE scaling (`{arch}.rope.scaling.factor` with type `linear`, else 1); not
    /// applied to local layers.
    pub rope_scaling_factor: f32,
    /// `{arch}.context_length`; positions past it are refused.
    pub context_length: usize,
    /// `{arch}.rope.scaling.original_context_length` (Phi-3's LongRoPE): a file with
    /// `rope_factors_long.weight` uses those factors when the context it runs with
    /// (`context_length`) is longer than this, else `rope_factors_short.weight`, as
    /// llama.cpp picks them by its context size (`n_ctx`), not by position.
    pub rope_original_context: Option<usize>,
    /// `{arch}.rope.scaling.attn_factor`, else 1: RoPE's cos and sin are multiplied by it
    /// (llama.cpp's `attn_factor`), so q.k by its square on the turned values. Phi-3's
    /// converter writes `sqrt(1 + ln(s) / ln(original_context))`, `s` = context /
    /// original context, for LongRoPE files; it applies with either set of factors.
    pub rope_attn_factor: f32,
    /// The embedding is multiplied by this: `sqrt(embedding_length)` for Gemma 3, else 1.
    pub embed_scale: f32,
    /// The factor on `q k^T`: `1 / sqrt(head_dim)`, except Gemma 3 27B (62 layers), whose
    /// `query_pre_attn_scalar` is `embedding_length / head_count` (as llama.cpp).
    pub attn_scale: f32,
    /// Local layers (Gemma 2, 3); `None`: every layer sees every earlier position.
    pub sliding: Option<Sliding>,
    /// Gemma 2's soft-capping of the attention scores (after `attn_scale`, before the
    /// mask): `s = cap * tanh(s / cap)`, `gemma2.attn_logit_softcapping` (else 50).
    pub attn_softcap: Option<f32>,
    /// The same on the output logits: `gemma2.final_logit_softcapping` (else 30).
    pub final_softcap: Option<f32>,
}

impl Config {
    /// Read and check the metadata; a model this file cannot run (another architecture,
    /// experts) is an error that names the key.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let arch_name = match ct.metadata.get("general.architecture") {
            Some(v) => v.to_string()?.clone(),
            None => return bail("GGUF metadata `general.architecture` is missing".into()),
        };
        let Some(arch) = Arch::from_name(&arch_name) else {
            return bail(format!(
                "GGUF metadata `general.architecture` is `{arch_name}`; formwork's model files run llama, qwen2, qwen3, gemma2, gemma3 and phi3"
            ));
        };
        let a = arch.name();
        let value = |k: &str| ct.metadata.get(&format!("{a}.{k}"));
        let wrap = |k: &str, e: candle_core::Error| {
            candle_core::Error::Msg(format!("GGUF metadata `{a}.{k}`: {e}"))
        };
        let get = |k: &str| match value(k) {
            Some(v) => v.to_u64().map(|v| v as usize).map_err(|e| wrap(k, e)),
            None => bail(format!("GGUF metadata `{a}.{k}` is missing")),
        };
        let opt_f32 = |k: &str| -> Result<Option<f32>> {
            value(k)
                .map(|v| v.to_f32().map_err(|e| wrap(k, e)))
                .transpose()
        };
        let experts = value("expert_count")
            .and_then(|v| v.to_u64().ok())
            .unwrap_or(0);
        if experts > 0 {
            return bail(format!(
                "{a}.expert_count is {experts}: formwork's model files run no mixture-of-experts models"
            ));
        }
        let hidden_size = get("embedding_length")?;
        let num_attention_heads = get("attention.head_count")?;
        let num_key_value_heads = get("attention.head_count_kv")?;
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
            || hidden_size % num_attention_heads != 0
        {
            return bail(format!(
                "{a}.attention.head_count {num_attention_heads} and head_count_kv {num_key_value_heads} do not divide the embedding length {hidden_size}"
            ));
        }
        let head_dim = match value("attention.key_length") {
            Some(_) => get("attention.key_length")?,
            None => hidden_size / num_attention_heads,
        };
        if value("attention.value_length").is_some() {
            let v = get("attention.value_length")?;
            if v != head_dim {
                return bail(format!(
                    "{a}.attention.value_length {v} differs from the key length {head_dim}; formwork's model files need them equal"
                ));
            }
        }
        if head_dim == 0 {
            return bail(format!("{a}.attention.key_length is 0"));
        }
        if head_dim % 2 != 0 {
            return bail(format!(
                "the head size {head_dim} ({a}.embedding_length / head_count) is odd; RoPE needs pairs"
            ));
        }
        let rope_dim = match value("rope.dimension_count") {
            Some(_) => get("rope.dimension_count")?,
            None => head_dim,
        };
        if rope_dim == 0 || rope_dim % 2 != 0 || rope_dim > head_dim {
            return bail(format!(
                "{a}.rope.dimension_count {rope_dim} must be even, above 0 and at most the head size {head_dim}"
            ));
        }
        let rope_scaling_factor = match value("rope.scaling.type") {
            None => 1.0,
            Some(v) => match v.to_string().map_err(|e| wrap("rope.scaling.type", e))?.as_str() {
                "none" => 1.0,
                "linear" => match opt_f32("rope.scaling.factor")? {
                    Some(f) if f > 0.0 => f,
                    _ => 1.0,
                },
                other => {
                    return bail(format!(
                        "GGUF metadata `{a}.rope.scaling.type`: `{other}` is not supported (formwork runs `none` and `linear`)"
                    ))
                }
            },
        };
        // llama.cpp's defaults where a llama file leaves a key out; Qwen2, Qwen3 and
        // Gemma files carry them.
        let (rms_norm_eps, context_length) = match arch {
            Arch::Llama => (
                opt_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
                get("context_length").unwrap_or(4096),
            ),
            Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma2 | Arch::Gemma3 | Arch::Phi3 => (
                match opt_f32("attention.layer_norm_rms_epsilon")? {
                    Some(e) => e,
                    None => {
                        return bail(format!(
                            "GGUF metadata `{a}.attention.layer_norm_rms_epsilon` is missing"
                        ))
                    }
                },
                get("context_length")?,
            ),
        };
        let vocab_size = ct
            .tensor_infos
            .get("token_embd.weight")
            .map(|i| i.shape.dims()[0])
            .ok_or_else(|| {
                candle_core::Error::Msg("GGUF tensor `token_embd.weight` is missing".into())
            })?;
        let num_hidden_layers = get("block_count")?;
        let global_theta = opt_f32("rope.freq_base")?.unwrap_or(10_000.0);
        let (embed_scale, attn_scale, sliding) = match arch {
            // Phi-3's `phi3.attention.sliding_window` (2047 in Phi-3-mini-4k, 262144 in
            // 3.5, 0 in Phi-4-mini) is read by llama.cpp and then switched off ("Phi SWA
            // is currently disabled"): every layer sees every position, here too.
            Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Phi3 => {
                (1.0, 1.0 / (head_dim as f32).sqrt(), None)
            }
            Arch::Gemma2 | Arch::Gemma3 => {
                let gemma2 = arch == Arch::Gemma2;
                let window = match value("attention.sliding_window") {
                    None if gemma2 => 4096,
                    _ => get("attention.sliding_window")?,
                };
                if window == 0 {
                    return bail(format!("{a}.attention.sliding_window is 0"));
                }
                let pattern = match value("attention.sliding_window_pattern") {
                    Some(_) => get("attention.sliding_window_pattern")?,
                    None if gemma2 => 2,
                    None => 6,
                };
                let rope_theta = match opt_f32("rope.freq_base_swa")? {
                    Some(f) => f,
                    None if gemma2 => global_theta,
                    None => opt_f32("rope.local_freq_base")?.unwrap_or(10_000.0),
                };
                // llama.cpp's `query_pre_attn_scalar`: the head size, except for the
                // largest of each (Gemma 2 27B, 46 layers; Gemma 3 27B, 62 layers).
                let big = if gemma2 { 46 } else { 62 };
                let scalar = if num_hidden_layers == big {
                    hidden_size / num_attention_heads
                } else {
                    head_dim
                };
                (
                    (hidden_size as f32).sqrt(),
                    1.0 / (scalar as f32).sqrt(),
                    Some(Sliding {
                        window,
                        pattern,
                        rope_theta,
                    }),
                )
            }
        };
        let (attn_softcap, final_softcap) = if arch == Arch::Gemma2 {
            let cap = |k: &str, default: f32| -> Result<Option<f32>> {
                let c = opt_f32(k)?.unwrap_or(default);
                if !(c > 0.0 && c.is_finite()) {
                    return bail(format!(
                        "GGUF metadata `{a}.{k}` is {c}; it must be positive"
                    ));
                }
                Ok(Some(c))
            };
            (
                cap("attn_logit_softcapping", 50.0)?,
                cap("final_logit_softcapping", 30.0)?,
            )
        } else {
            (None, None)
        };
        let rope_original_context = match value("rope.scaling.original_context_length") {
            Some(_) => Some(get("rope.scaling.original_context_length")?),
            None => None,
        };
        let rope_attn_factor = match opt_f32("rope.scaling.attn_factor")? {
            None => 1.0,
            Some(f) if f > 0.0 && f.is_finite() => f,
            Some(f) => {
                return bail(format!(
                    "GGUF metadata `{a}.rope.scaling.attn_factor` is {f}; it must be positive"
                ))
            }
        };
        Ok(Self {
            arch,
            vocab_size,
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            rope_dim,
            rope_theta: global_theta,
            rope_scaling_factor,
            context_length,
            rope_original_context,
            rope_attn_factor,
            embed_scale,
            attn_scale,
            sliding,
            attn_softcap,
            final_softcap,
        })
    }

    pub(crate) fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    pub(crate) fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// The window of layer `l` when it is local.
    pub fn window(&self, l: usize) -> Option<usize> {
        let s = self.sliding.as_ref()?;
        (s.pattern == 0 || (l + 1) % s.pattern != 0).then_some(s.window)
    }
}
