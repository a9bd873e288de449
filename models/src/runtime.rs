//! Loading a GGUF model and running it: the one place that turns a file into logits.
//!
//! `load(spec)` goes: spec -> file ([`crate::registry::resolve`]) -> checked GGUF header
//! (magic, every tensor inside the file, a supported `general.architecture`) -> tokenizer
//! from the GGUF metadata -> weights on the chosen device, behind [`LanguageModel`].
//!
//! Each check runs before the expensive step after it, so a bad file fails in milliseconds
//! with one line that names the file and the field.
//!
//! ## Requantisation at load
//! candle 0.11.1 has no SIMD kernel for Q4_1, Q5_0 and Q5_1 matmuls on x86 or ARM: they run
//! scalar, about 4x slower than Q8_0. Those tensors are dequantised and quantised again to
//! Q8_0 in memory while loading (Q8_0 keeps 8 bits per weight where they had 4-5, so this is
//! near-lossless). SmolLM2 Q4_1 then decodes about 4x faster. [`LoadOptions::requantize`]
//! turns it off. Only on the CPU: candle's CUDA and Metal kernels take those types as stored.
//!
//! ## Two model files
//! Every architecture (`llama`, `qwen2`, `qwen3`, `gemma2`, `gemma3`, `phi3`) has two model
//! files, which read the same normalised config ([`crate::llama::Config`]):
//! - formwork's own CPU file ([`crate::llama`]), which computes Q4_1, Q5_0, Q8_0, Q4_K and
//!   Q6_K tensors from the file's blocks with AVX2 / AVX-512 VNNI kernels and keeps a KV
//!   cache that grows in place; Q4_1 and Q5_0 are then not requantised;
//! - the model graph ([`crate::graph`]): the same families in candle tensor ops and
//!   `QMatMul`, so it runs on any candle device (CPU, CUDA, Metal), with its KV cache on
//!   the device (f32 or f16, grown in place), and batches on the device too.
//!
//! [`LoadOptions::backend`] chooses: [`Backend::Auto`] takes the CPU file on a CPU that
//! has the SIMD kernels (x86-64 with AVX2, FMA and F16C) and the graph elsewhere (GPUs,
//! ARM, old x86), with the requantisation above on the CPU. `--device cpu --backend
//! candle` runs the graph on candle's CPU device: that is how it is tested here
//! (`tests/graph_parity.rs`, against the CPU file and llama.cpp).
//!
//! ## On a GPU
//! `--device cuda` (or `metal`) runs every architecture on the GPU through the graph. A
//! forward pass returns the last position's logits as a `Vec<f32>` on the host, where the
//! token mask is applied: one copy of `vocab` floats per sequence per pass (0.2 MB for
//! SmolLM2, 1 MB for Gemma 3), timed apart from the compute in [`ForwardTimings`]
//! (`formwork generate --verbose` prints both). [`forward_batch`] runs snapshots of one
//! graph in one pass on the device, as it does for the CPU file.
//!
//! ## Threads
//! candle's CPU pool takes `CANDLE_NUM_THREADS` (else `RAYON_NUM_THREADS`, else the number
//! of physical cores), and its idle workers spin for `CANDLE_BARRIER_POOL_SPIN_LIMIT`
//! iterations before sleeping. On a small machine shared with other work the spinning can
//! slow decoding 30x; [`configure_threads`] sets the limit to 0 unless the user chose one.
//! Both are read once, when candle first spawns its pool, so set them first.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};

use crate::llama::KvType;
use crate::registry;
use crate::tokenizer::GgufTokenizer;
use crate::{ModelError, Result};

/// Where the model runs: `--device auto|cpu|cuda|metal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// CUDA if this build has it and a GPU is present, else Metal likewise, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
    Metal,
}

impl FromStr for DeviceChoice {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda),
            "metal" => Ok(Self::Metal),
            other => Err(ModelError::Device(format!(
                "unknown device `{other}`: use auto, cpu, cuda or metal"
            ))),
        }
    }
}

/// The device a [`DeviceChoice`] resolved to, and for `auto` the line that says which
/// device it took and why (the command line prints it on stderr).
#[derive(Debug, Clone)]
pub struct PickedDevice {
    pub device: Device,
    pub note: Option<String>,
}

impl DeviceChoice {
    /// The candle device, or a one-line error saying which build feature is missing.
    pub fn device(self) -> Result<Device> {
        Ok(self.pick()?.device)
    }

    /// [`DeviceChoice::device`], with the note of an `auto` choice.
    ///
    /// `auto` takes CUDA GPU 0 when this build has CUDA and the GPU answers (the driver
    /// loads, a device is there, candle's kernels load), then Metal likewise, else the CPU.
    pub fn pick(self) -> Result<PickedDevice> {
        let plain = |device| PickedDevice { device, note: None };
        match self {
            Self::Cpu => Ok(plain(Device::Cpu)),
            Self::Auto => {
                let mut why = Vec::new();
                if candle_core::utils::cuda_is_available() {
                    match Device::new_cuda(0) {
                        Ok(d) => {
                            return Ok(PickedDevice {
                                device: d,
                                note: Some("device: cuda, GPU 0 (--device auto)".into()),
                            })
                        }
                        Err(e) => why.push(format!(
                            "this build has CUDA but GPU 0 did not answer: {}",
                            one_line(&e)
                        )),
                    }
                } else {
                    why.push("this build has no CUDA".to_string());
                }
                if candle_core::utils::metal_is_available() {
                    match Device::new_metal(0) {
                        Ok(d) => {
                            return Ok(PickedDevice {
                                device: d,
                                note: Some("device: metal, GPU 0 (--device auto)".into()),
                            })
                        }
                        Err(e) => why.push(format!(
                            "this build has Metal but GPU 0 did not answer: {}",
                            one_line(&e)
                        )),
                    }
                }
                Ok(PickedDevice {
                    device: Device::Cpu,
                    note: Some(format!("device: cpu (--device auto: {})", why.join("; "))),
                })
            }
            Self::Cuda => {
                if !candle_core::utils::cuda_is_available() {
                    return Err(ModelError::Device(
                        "--device cuda: this build has no CUDA support; rebuild with `--features cuda` (README \"GPU\"), or use --device cpu".into(),
                    ));
                }
                Device::new_cuda(0).map(plain).map_err(|e| {
                    ModelError::Device(format!(
                        "--device cuda: no usable GPU 0 ({}); use --device cpu",
                        one_line(&e)
                    ))
                })
            }
            Self::Metal => {
                if !candle_core::utils::metal_is_available() {
                    return Err(ModelError::Device(
                        "--device metal: this build has no Metal support; rebuild with `--features metal`, or use --device cpu".into(),
                    ));
                }
                Device::new_metal(0).map(plain).map_err(|e| {
                    ModelError::Device(format!(
                        "--device metal: no usable GPU 0 ({}); use --device cpu",
                        one_line(&e)
                    ))
                })
            }
        }
    }
}

/// Set candle's thread settings in this process before candle starts its pool: the
/// number of threads when `threads` is given, and `CANDLE_BARRIER_POOL_SPIN_LIMIT=0`
/// unless the environment already chose a value. Call it early, before other threads run.
pub fn configure_threads(threads: Option<usize>) {
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    }
    if let Some(n) = threads.filter(|&n| n > 0) {
        std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
}

/// A causal language model with a KV cache.
pub trait LanguageModel: Send {
    /// Feed `tokens` at positions pos..pos+len; return the logits (f32, len = vocab) of the LAST position.
    ///
    /// `pos` is 0 (start over, dropping the cache) or the number of positions already fed.
    fn forward(&mut self, tokens: &[u32], pos: usize) -> crate::Result<Vec<f32>>;
    fn vocab_size(&self) -> usize;
    fn clear_kv_cache(&mut self);
    /// A cheap copy of the model including its current KV cache (weights shared); used to reuse a prompt prefix across records.
    fn snapshot(&self) -> Box<dyn LanguageModel>;
    /// Forgets the positions from `len` on, so that the next feed is at `len`: going
    /// back without a snapshot. False (nothing changed) where the model cannot, or its
    /// cache holds fewer than `len` positions.
    fn truncate(&mut self, _len: usize) -> bool {
        false
    }
    /// What the forward passes have cost so far, this model's and its snapshots' together.
    fn timings(&self) -> ForwardTimings {
        ForwardTimings::default()
    }
    /// This model as `Any`, so that [`forward_batch`] can recognise models that compute
    /// several sequences in one pass. `None` (the default): they run one after another.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// Forward several sequences: `models[i]` is fed `feeds[i] = (tokens, pos)` and gets its
/// own result, as [`LanguageModel::forward`] would give it. Snapshots of one formwork
/// CPU model ([`crate::llama`]) or of one model graph on a device ([`crate::graph`], every
/// candle path) run in one pass whose matmuls cover all of their rows, so the weights are
/// read once for the batch; other models run one after another.
pub fn forward_batch(
    models: &mut [Box<dyn LanguageModel>],
    feeds: &[(&[u32], usize)],
) -> Vec<Result<Vec<f32>>> {
    assert_eq!(models.len(), feeds.len(), "one feed per model");
    if models.len() > 1 {
        if all_are::<crate::llama::ModelWeights>(models) {
            return batch_of::<crate::llama::ModelWeights>(models, feeds);
        }
        if all_are::<crate::graph::GraphModel>(models) {
            return batch_of::<crate::graph::GraphModel>(models, feeds);
        }
    }
    models
        .iter_mut()
        .zip(feeds)
        .map(|(m, &(t, p))| m.forward(t, p))
        .collect()
}

fn all_are<W: Batched>(models: &mut [Box<dyn LanguageModel>]) -> bool {
    models
        .iter_mut()
        .all(|m| m.as_any_mut().is_some_and(|a| a.is::<CandleModel<W>>()))
}

/// A model file that runs several sequences in one pass.
trait Batched: Weights {
    fn forward_batch(
        models: &mut [&mut Self],
        feeds: &[(&[u32], usize)],
    ) -> Vec<candle_core::Result<Vec<f32>>>;
}

impl Batched for crate::llama::ModelWeights {
    fn forward_batch(
        models: &mut [&mut Self],
        feeds: &[(&[u32], usize)],
    ) -> Vec<candle_core::Result<Vec<f32>>> {
        crate::llama::ModelWeights::forward_batch(models, feeds)
    }
}

impl Batched for crate::graph::GraphModel {
    fn forward_batch(
        models: &mut [&mut Self],
        feeds: &[(&[u32], usize)],
    ) -> Vec<candle_core::Result<Vec<f32>>> {
        crate::graph::GraphModel::forward_batch(models, feeds)
    }
}

/// [`forward_batch`] over models that are all `CandleModel<W>`.
fn batch_of<W: Batched>(
    models: &mut [Box<dyn LanguageModel>],
    feeds: &[(&[u32], usize)],
) -> Vec<Result<Vec<f32>>> {
    let own: Vec<&mut CandleModel<W>> = models
        .iter_mut()
        .filter_map(|m| m.as_any_mut()?.downcast_mut::<CandleModel<W>>())
        .collect();
    let mut results: Vec<Option<Result<Vec<f32>>>> = (0..own.len()).map(|_| None).collect();
    let started = Instant::now();
    let timing = own[0].timing.clone();
    // The feeds their models accept, with their indices; the others get their error.
    let mut run = Vec::with_capacity(own.len());
    let mut picked: Vec<&mut CandleModel<W>> = Vec::with_capacity(own.len());
    let mut sub: Vec<(&[u32], usize)> = Vec::with_capacity(own.len());
    for (i, (m, &(t, p))) in own.into_iter().zip(feeds).enumerate() {
        match m.check(t, p) {
            Ok(()) => {
                run.push(i);
                sub.push((t, p));
                picked.push(m);
            }
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    let mut weights: Vec<&mut W> = picked.iter_mut().map(|m| &mut m.weights).collect();
    let out = W::forward_batch(&mut weights, &sub);
    let mut bytes = 0;
    for ((m, &i), (r, &(t, p))) in picked.iter_mut().zip(&run).zip(out.into_iter().zip(&sub)) {
        results[i] = Some(match r {
            Ok(l) => {
                m.cached = p + t.len();
                bytes += l.len() * std::mem::size_of::<f32>();
                Ok(l)
            }
            Err(e) => {
                m.clear_kv_cache();
                Err(e.into())
            }
        });
    }
    if !run.is_empty() {
        timing.add(started.elapsed(), Duration::ZERO, bytes);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(forward_err("forward: no result".into()))))
        .collect()
}

/// The cost of forward passes, split where the logits leave the device: `compute` runs
/// until the device has finished the pass (a GPU works asynchronously, so the model waits
/// for it), `to_host` is the copy of the last position's logits into a `Vec<f32>`, which
/// the decoding loop masks on the host. On the CPU `to_host` is a copy in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ForwardTimings {
    pub forwards: u64,
    pub compute: Duration,
    pub to_host: Duration,
    pub to_host_bytes: u64,
}

impl ForwardTimings {
    /// Microseconds per copy of the logits to the host (0 before the first forward).
    pub fn to_host_us_mean(&self) -> f64 {
        if self.forwards == 0 {
            0.0
        } else {
            self.to_host.as_secs_f64() * 1e6 / self.forwards as f64
        }
    }
}

/// [`ForwardTimings`] counted by a model and every snapshot of it.
#[derive(Debug, Default)]
struct TimingCounters {
    forwards: AtomicU64,
    compute_ns: AtomicU64,
    to_host_ns: AtomicU64,
    to_host_bytes: AtomicU64,
}

impl TimingCounters {
    fn add(&self, compute: Duration, to_host: Duration, bytes: usize) {
        self.forwards.fetch_add(1, Ordering::Relaxed);
        self.compute_ns
            .fetch_add(compute.as_nanos() as u64, Ordering::Relaxed);
        self.to_host_ns
            .fetch_add(to_host.as_nanos() as u64, Ordering::Relaxed);
        self.to_host_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn get(&self) -> ForwardTimings {
        ForwardTimings {
            forwards: self.forwards.load(Ordering::Relaxed),
            compute: Duration::from_nanos(self.compute_ns.load(Ordering::Relaxed)),
            to_host: Duration::from_nanos(self.to_host_ns.load(Ordering::Relaxed)),
            to_host_bytes: self.to_host_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A model ready to run, with the tokenizer from the same file.
pub struct LoadedModel {
    pub model: Box<dyn LanguageModel>,
    /// Shared by every [`LoadedModel::share`]: a 152k-token vocabulary with its merges
    /// takes about 60 MB, which a copy per batch worker would repeat.
    pub tokenizer: Arc<crate::tokenizer::GgufTokenizer>,
    /// `general.architecture`: `llama`, `gemma3` or `qwen2`.
    pub arch: String,
    /// The registry name, the file stem, or the Hugging Face repo id.
    pub name: String,
    pub path: PathBuf,
    pub device: candle_core::Device,
    /// For `--device auto`: which device it took and why, one line (see [`DeviceChoice::pick`]).
    pub device_note: Option<String>,
    /// The most positions one sequence may use (prompt and output together).
    pub context_length: usize,
    /// How the KV cache stores its values (`LoadOptions::kv`).
    pub kv: KvType,
}

impl LoadedModel {
    /// A model made elsewhere, on the CPU, with its tokenizer: `name` is what the
    /// envelope reports, `context_length` the positions it may use. Tests wrap a model
    /// that scripts its logits this way, to run the whole engine on it.
    pub fn from_model(
        model: Box<dyn LanguageModel>,
        tokenizer: crate::tokenizer::GgufTokenizer,
        name: &str,
        context_length: usize,
    ) -> LoadedModel {
        LoadedModel {
            model,
            tokenizer: Arc::new(tokenizer),
            arch: "scripted".into(),
            name: name.into(),
            path: PathBuf::new(),
            device: Device::Cpu,
            device_note: None,
            context_length,
            kv: KvType::default(),
        }
    }

    /// Another handle on the same model: the weights are shared (through
    /// [`LanguageModel::snapshot`]), the KV cache is the snapshot's (the CPU file's shares
    /// its blocks until one is written) and the tokenizer a copy. One per
    /// worker thread lets several sequences run at once without loading the file again.
    pub fn share(&self) -> LoadedModel {
        LoadedModel {
            model: self.model.snapshot(),
            tokenizer: self.tokenizer.clone(),
            arch: self.arch.clone(),
            name: self.name.clone(),
            path: self.path.clone(),
            device: self.device.clone(),
            device_note: self.device_note.clone(),
            context_length: self.context_length,
            kv: self.kv,
        }
    }
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("arch", &self.arch)
            .field("name", &self.name)
            .field("path", &self.path)
            .field("device", &self.device)
            .field("context_length", &self.context_length)
            .finish_non_exhaustive()
    }
}

/// Which model file runs a `llama`, `qwen2`, `qwen3` or `gemma3` GGUF (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// formwork's own on a CPU with its SIMD kernels, else candle's.
    #[default]
    Auto,
    /// formwork's own ([`crate::llama`]); CPU only (its scalar kernel where there is no SIMD).
    Formwork,
    /// The model graph ([`crate::graph`]) in candle tensor ops, on any device.
    Candle,
}

/// How to load a model.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub device: DeviceChoice,
    /// Requantise Q4_1 / Q5_0 / Q5_1 tensors to Q8_0 at load (see the module doc); Q4_1
    /// and Q5_0 stay as stored when formwork's own model file runs them.
    pub requantize: bool,
    /// For `llama`, `qwen2` and `gemma3` files: formwork's own CPU model file or candle's path.
    pub backend: Backend,
    /// How the KV cache stores keys and values. [`KvType::F16`] halves its memory, on the
    /// CPU file and on the graph (on the device) alike.
    pub kv: KvType,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            device: DeviceChoice::Auto,
            requantize: true,
            backend: Backend::Auto,
            kv: KvType::F32,
        }
    }
}

/// Load `spec` (a registry name, a path to a `.gguf` file, or a Hugging Face repo id in the
/// local hf-hub cache) onto `device`.
pub fn load(spec: &str, device: DeviceChoice) -> crate::Result<LoadedModel> {
    load_with(
        spec,
        LoadOptions {
            device,
            ..LoadOptions::default()
        },
    )
}

/// [`load`] with every option.
pub fn load_with(spec: &str, options: LoadOptions) -> Result<LoadedModel> {
    let resolved = registry::resolve(spec)?;
    load_file(&resolved.path, &resolved.name, options)
}

/// The architectures [`load`] runs.
pub const SUPPORTED_ARCHS: &[&str] = &["llama", "gemma2", "gemma3", "phi3", "qwen2", "qwen3"];

/// Load a GGUF file by path; `name` is what messages call it.
pub fn load_file(path: &Path, name: &str, options: LoadOptions) -> Result<LoadedModel> {
    let file_err = |msg: String| ModelError::File {
        path: path.to_path_buf(),
        msg,
    };
    let mut gguf = GgufFile::open(path)?;
    let arch = gguf.architecture()?;
    if !SUPPORTED_ARCHS.contains(&arch.as_str()) {
        return Err(ModelError::UnsupportedArch {
            arch,
            path: path.to_path_buf(),
        });
    }
    // The tokenizer comes before the weights: it is cheap and names the missing key.
    let tokenizer = GgufTokenizer::from_gguf(&gguf.content).map_err(|e| file_err(one_line(&e)))?;
    let picked = options.device.pick()?;
    let device = picked.device;
    let own = matches!(
        arch.as_str(),
        "llama" | "qwen2" | "qwen3" | "gemma2" | "gemma3" | "phi3"
    ) && match options.backend {
        Backend::Candle => false,
        Backend::Auto => device.is_cpu() && crate::quant::Isa::detect().is_simd(),
        Backend::Formwork => {
            if !device.is_cpu() {
                return Err(ModelError::Device(format!(
                        "formwork's own {arch} model runs on the CPU only, not {device:?}; use --device cpu"
                    )));
            }
            true
        }
    };
    // Only the CPU lacks the kernels; candle's CUDA and Metal kernels run Q4_1 / Q5_x as stored.
    if options.requantize && device.is_cpu() {
        // formwork's own model file has Q4_1 and Q5_0 kernels; Q5_1 still goes to Q8_0.
        let keep: &[GgmlDType] = if own {
            &[GgmlDType::Q4_1, GgmlDType::Q5_0]
        } else {
            &[]
        };
        gguf.requantize_slow_tensors(keep)?;
    }
    let (model, context_length): (Box<dyn LanguageModel>, usize) = match arch.as_str() {
        "llama" | "qwen2" | "qwen3" | "gemma2" | "gemma3" | "phi3" if own => {
            let weights =
                crate::llama::ModelWeights::from_gguf(gguf.content, &mut gguf.reader, &device)
                    .map_err(|e| file_err(format!("loading {arch} weights: {}", one_line(&e))))?
                    .with_kv_type(options.kv);
            let vocab = weights.config().vocab_size;
            let ctx = weights.config().context_length;
            (
                Box::new(CandleModel::new(weights, vocab, ctx, device.clone())),
                ctx,
            )
        }
        "llama" | "qwen2" | "qwen3" | "gemma2" | "gemma3" | "phi3" => {
            let weights =
                crate::graph::GraphModel::from_gguf(gguf.content, &mut gguf.reader, &device)
                    .map_err(|e| file_err(format!("loading {arch} weights: {}", one_line(&e))))?
                    .with_kv_type(options.kv);
            let vocab = weights.config().vocab_size;
            let ctx = weights.config().context_length;
            (
                Box::new(CandleModel::new(weights, vocab, ctx, device.clone())),
                ctx,
            )
        }
        _ => {
            return Err(ModelError::UnsupportedArch {
                arch,
                path: path.to_path_buf(),
            })
        }
    };
    Ok(LoadedModel {
        model,
        tokenizer: Arc::new(tokenizer),
        arch,
        name: name.to_string(),
        path: path.to_path_buf(),
        device,
        device_note: picked.note,
        context_length,
        kv: options.kv,
    })
}

/// What a candle model file offers: the shape every candle model file shares.
trait Weights: Clone + Send + 'static {
    fn forward(&mut self, input: &Tensor, index_pos: usize) -> candle_core::Result<Tensor>;
    fn clear_kv_cache(&mut self);
    /// Keeps the first `len` positions of the KV cache; false where not supported.
    fn truncate_kv_cache(&mut self, _len: usize) -> bool {
        false
    }
}

impl Weights for crate::llama::ModelWeights {
    fn forward(&mut self, input: &Tensor, index_pos: usize) -> candle_core::Result<Tensor> {
        crate::llama::ModelWeights::forward(self, input, index_pos)
    }
    fn clear_kv_cache(&mut self) {
        crate::llama::ModelWeights::clear_kv_cache(self)
    }
    fn truncate_kv_cache(&mut self, len: usize) -> bool {
        crate::llama::ModelWeights::truncate_kv_cache(self, len)
    }
}

impl Weights for crate::graph::GraphModel {
    fn forward(&mut self, input: &Tensor, index_pos: usize) -> candle_core::Result<Tensor> {
        crate::graph::GraphModel::forward(self, input, index_pos)
    }
    fn clear_kv_cache(&mut self) {
        crate::graph::GraphModel::clear_kv_cache(self)
    }
    fn truncate_kv_cache(&mut self, len: usize) -> bool {
        crate::graph::GraphModel::truncate_kv_cache(self, len)
    }
}

/// A candle model file behind [`LanguageModel`], tracking how many positions its cache holds.
#[derive(Clone)]
struct CandleModel<W: Weights> {
    weights: W,
    vocab: usize,
    context_length: usize,
    device: Device,
    /// Positions in the KV cache.
    cached: usize,
    /// Shared with every snapshot.
    timing: Arc<TimingCounters>,
}

impl<W: Weights> CandleModel<W> {
    fn new(weights: W, vocab: usize, context_length: usize, device: Device) -> Self {
        Self {
            weights,
            vocab,
            context_length,
            device,
            cached: 0,
            timing: Arc::default(),
        }
    }
}

impl<W: Weights> CandleModel<W> {
    /// What [`LanguageModel::forward`] refuses before it computes anything.
    fn check(&self, tokens: &[u32], pos: usize) -> Result<()> {
        if tokens.is_empty() {
            return Err(forward_err(format!("forward at position {pos}: no tokens")));
        }
        let end = pos + tokens.len();
        if end > self.context_length {
            return Err(forward_err(format!(
                "forward of {} tokens at position {pos} reaches position {end}, past the context length {}; shorten the prompt or --max-tokens",
                tokens.len(),
                self.context_length
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(forward_err(format!(
                "token id {bad} is out of range for a vocabulary of {}",
                self.vocab
            )));
        }
        if pos != 0 && pos != self.cached {
            return Err(forward_err(format!(
                "forward at position {pos}: the KV cache holds {} positions; pass pos 0 to start over or {} to continue",
                self.cached, self.cached
            )));
        }
        Ok(())
    }
}

fn forward_err(msg: String) -> ModelError {
    ModelError::Candle(candle_core::Error::Msg(msg))
}

impl<W: Weights> LanguageModel for CandleModel<W> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>> {
        self.check(tokens, pos)?;
        if pos == 0 {
            self.weights.clear_kv_cache();
            self.cached = 0;
        }
        let started = Instant::now();
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        let logits = match self.weights.forward(&input, pos) {
            Ok(l) => l,
            Err(e) => {
                // Some layers may have grown their cache: start clean rather than half-updated.
                self.clear_kv_cache();
                return Err(e.into());
            }
        };
        self.cached = pos + tokens.len();
        // Wait for the device, so that the copy below is timed alone (a no-op on the CPU).
        self.device.synchronize()?;
        let computed = Instant::now();
        let logits = logits
            .flatten_all()?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?;
        self.timing.add(
            computed - started,
            computed.elapsed(),
            logits.len() * std::mem::size_of::<f32>(),
        );
        Ok(logits)
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn clear_kv_cache(&mut self) {
        self.weights.clear_kv_cache();
        self.cached = 0;
    }

    fn snapshot(&self) -> Box<dyn LanguageModel> {
        Box::new(self.clone())
    }

    fn truncate(&mut self, len: usize) -> bool {
        if len > self.cached || !self.weights.truncate_kv_cache(len) {
            return false;
        }
        self.cached = len;
        true
    }

    fn timings(&self) -> ForwardTimings {
        self.timing.get()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

/// An opened GGUF file: the parsed header and a reader over the tensor data.
struct GgufFile {
    path: PathBuf,
    content: gguf_file::Content,
    reader: SplicedReader,
}

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

impl GgufFile {
    /// Open and check: the magic, the header, and that every tensor lies inside the file.
    fn open(path: &Path) -> Result<Self> {
        let err = |msg: String| ModelError::File {
            path: path.to_path_buf(),
            msg,
        };
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                err("no such file; check the path, or fetch a registry model with `formwork models fetch`".into())
            } else {
                err(format!("cannot open: {e}"))
            }
        })?;
        let len = file
            .metadata()
            .map_err(|e| err(format!("cannot stat: {e}")))?
            .len();
        let mut reader = BufReader::new(file);
        let mut magic = [0u8; 4];
        if len < 8 || reader.read_exact(&mut magic).is_err() {
            return Err(err(format!(
                "not a GGUF file: {len} bytes, shorter than a GGUF header; pass a .gguf model file"
            )));
        }
        if &magic != GGUF_MAGIC {
            return Err(err(format!(
                "not a GGUF file: it starts with bytes {:02x?}, a GGUF file starts with \"GGUF\"; pass a .gguf model file",
                magic
            )));
        }
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| err(e.to_string()))?;
        let content = gguf_file::Content::read(&mut reader).map_err(|e| {
            err(format!(
                "the GGUF header cannot be read ({}); the file is truncated or corrupt, download it again",
                one_line(&e)
            ))
        })?;
        // Every tensor must lie inside the file: a truncated download fails here, not mid-load.
        let mut need = content.tensor_data_offset;
        let mut last = String::new();
        for (name, info) in &content.tensor_infos {
            let block = info.ggml_dtype.block_size();
            let size = (info.shape.elem_count() / block * info.ggml_dtype.type_size()) as u64;
            let end = content.tensor_data_offset + info.offset + size;
            if end > need {
                need = end;
                last = name.clone();
            }
        }
        if need > len {
            return Err(err(format!(
                "truncated: tensor `{last}` ends at byte {need} but the file has {len} bytes; download it again"
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader: SplicedReader::new(reader.into_inner(), len),
        })
    }

    fn architecture(&self) -> Result<String> {
        const KEY: &str = "general.architecture";
        match self.content.metadata.get(KEY) {
            None => Err(ModelError::File {
                path: self.path.clone(),
                msg: format!("GGUF metadata `{KEY}` is missing; the file is not a model, or was written by an old converter"),
            }),
            Some(v) => v.to_string().cloned().map_err(|_| ModelError::File {
                path: self.path.clone(),
                msg: format!("GGUF metadata `{KEY}` is not a string"),
            }),
        }
    }

    /// Requantise the tensors candle has no SIMD kernel for (Q4_1, Q5_0, Q5_1) to Q8_0,
    /// but those of a type in `keep`.
    /// The new data goes after the end of the file in [`SplicedReader`], and the tensor
    /// infos are pointed at it, so the model file's own loader reads Q8_0 without knowing.
    fn requantize_slow_tensors(&mut self, keep: &[GgmlDType]) -> Result<usize> {
        let mut names: Vec<String> = self
            .content
            .tensor_infos
            .iter()
            .filter(|(_, info)| needs_requant(info) && !keep.contains(&info.ggml_dtype))
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        let data_offset = self.content.tensor_data_offset;
        for name in &names {
            let info = self
                .content
                .tensor_infos
                .get_mut(name)
                .expect("listed above");
            let err = |e: candle_core::Error| ModelError::File {
                path: self.path.clone(),
                msg: format!("requantising tensor `{name}` to Q8_0: {}", one_line(&e)),
            };
            let q = info
                .read(&mut self.reader, data_offset, &Device::Cpu)
                .map_err(err)?;
            let f = q.dequantize(&Device::Cpu).map_err(err)?;
            let q8 = QTensor::quantize(&f, GgmlDType::Q8_0).map_err(err)?;
            let data = q8.data().map_err(err)?;
            let at = self.reader.append(&data);
            info.offset = at - data_offset;
            info.ggml_dtype = GgmlDType::Q8_0;
        }
        Ok(names.len())
    }
}

/// An error message on one line: candle's messages can end in a newline or carry a backtrace.
fn one_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text.split("\nStack backtrace").next().unwrap_or("");
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn needs_requant(info: &gguf_file::TensorInfo) -> bool {
    matches!(
        info.ggml_dtype,
        GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
    ) && info.shape.elem_count() % GgmlDType::Q8_0.block_size() == 0
        && info
            .shape
            .dims()
            .last()
            .is_some_and(|d| d % GgmlDType::Q8_0.block_size() == 0)
}

/// The model file followed by an in-memory tail of requantised tensors, as one seekable stream.
struct SplicedReader {
    file: File,
    file_len: u64,
    tail: Vec<u8>,
    pos: u64,
}

impl SplicedReader {
    fn new(file: File, file_len: u64) -> Self {
        Self {
            file,
            file_len,
            tail: Vec::new(),
            pos: 0,
        }
    }

    /// Append `data` (32-byte aligned) and return its absolute offset in the stream.
    fn append(&mut self, data: &[u8]) -> u64 {
        let pad = (32 - (self.file_len + self.tail.len() as u64) % 32) % 32;
        self.tail.extend(std::iter::repeat_n(0u8, pad as usize));
        let at = self.file_len + self.tail.len() as u64;
        self.tail.extend_from_slice(data);
        at
    }

    fn len(&self) -> u64 {
        self.file_len + self.tail.len() as u64
    }
}

impl Read for SplicedReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos < self.file_len {
            let want = buf.len().min((self.file_len - self.pos) as usize);
            self.file.seek(SeekFrom::Start(self.pos))?;
            let n = self.file.read(&mut buf[..want])?;
            self.pos += n as u64;
            Ok(n)
        } else {
            let at = (self.pos - self.file_len) as usize;
            if at >= self.tail.len() {
                return Ok(0);
            }
            let n = buf.len().min(self.tail.len() - at);
            buf[..n].copy_from_slice(&self.tail[at..at + n]);
            self.pos += n as u64;
            Ok(n)
        }
    }
}

impl Seek for SplicedReader {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::End(d) => self.len() as i128 + d as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
        };
        if new < 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "seek before the start of the stream",
            ));
        }
        self.pos = new as u64;
        Ok(self.pos)
    }
}
