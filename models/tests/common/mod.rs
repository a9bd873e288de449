//! Helpers shared by the model tests (each test file uses the ones it needs).
#![allow(dead_code)]

pub mod family;
#[path = "../../../tests/support/skip.rs"]
pub mod skip;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use candle_core::quantized::gguf_file;
use candle_core::Device;
use formwork_models::quant::Isa;
use formwork_models::registry;
use formwork_models::runtime::{load_file, Backend, DeviceChoice, LoadOptions, LoadedModel};

/// The index of the largest logit (the first one on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Whether SmolLM2 is in the model cache; prints the `SKIPPED:` note when it is not.
/// Also sets `CANDLE_BARRIER_POOL_SPIN_LIMIT=0` for the runs that follow.
pub fn smollm2_present() -> bool {
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let path = registry::model_path(registry::lookup("smollm2-135m").unwrap());
    if !path.is_file() {
        skip::skipped(format_args!(
            "SKIPPED: {} is absent; run `formwork models fetch smollm2-135m` (or set FORMWORK_HOME)",
            path.display()
        ));
    }
    path.is_file()
}

/// The Gemma 3 GGUF: `FORMWORK_GEMMA3_GGUF`, else the model cache; None when absent.
pub fn gemma3_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FORMWORK_GEMMA3_GGUF") {
        return Some(PathBuf::from(p));
    }
    let home = match std::env::var_os("FORMWORK_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/formwork"),
    };
    let p = home.join("models/gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    p.exists().then_some(p)
}

/// The Qwen2.5-Coder GGUF: `FORMWORK_QWEN2_GGUF`, else the model cache; None (after
/// printing the `SKIPPED:` note) when absent. Also sets `CANDLE_BARRIER_POOL_SPIN_LIMIT=0`.
pub fn qwen2_path() -> Option<PathBuf> {
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let path = match std::env::var_os("FORMWORK_QWEN2_GGUF") {
        Some(p) => PathBuf::from(p),
        None => registry::model_path(registry::lookup("qwen2.5-coder-0.5b").unwrap()),
    };
    if !path.is_file() {
        skip::skipped(format_args!(
            "SKIPPED: {} is absent; run `formwork models fetch qwen2.5-coder-0.5b` (or set FORMWORK_HOME)",
            path.display()
        ));
        return None;
    }
    Some(path)
}

/// A chat prompt and answer, so the positions cover control tokens, prose and JSON.
pub const TEXT: &str = "<|im_start|>system\nYou extract facts as JSON.<|im_end|>\n<|im_start|>user\n\
The Eiffel Tower, completed in 1889 for the World's Fair in Paris, is 330 metres tall and was \
designed by the engineering firm of Gustave Eiffel. It was the tallest man-made structure in the \
world until the Chrysler Building in New York was finished in 1930. Give its name, city, year and \
height.<|im_end|>\n<|im_start|>assistant\n{\"name\": \"Eiffel Tower\", \"city\": \"Paris\", \"year\": 1889, \
\"height_m\": 330, \"designer\": \"Gustave Eiffel\", \"tallest_until\": 1930}<|im_end|>\n";

/// [`TEXT`] in `m`'s tokens (over 100 of them).
pub fn text_ids(m: &LoadedModel) -> Vec<u32> {
    let ids = m.tokenizer.encode(TEXT).unwrap();
    assert!(ids.len() > 100, "{} tokens", ids.len());
    ids
}

/// Load options for the CPU with `backend`.
pub fn cpu_options(backend: Backend) -> LoadOptions {
    LoadOptions {
        device: DeviceChoice::Cpu,
        backend,
        ..LoadOptions::default()
    }
}

/// SmolLM2 on the CPU with `backend`; None (after the `SKIPPED:` note) when absent.
pub fn load_smollm2(backend: Backend) -> Option<LoadedModel> {
    load_registry("smollm2-135m", cpu_options(backend))
}

/// Qwen2.5-Coder on the CPU with `backend`; None (after the `SKIPPED:` note) when absent.
pub fn load_qwen2(backend: Backend) -> Option<LoadedModel> {
    load_registry("qwen2.5-coder-0.5b", cpu_options(backend))
}

/// Gemma 3 270M on the CPU with `backend`; None (after the `SKIPPED:` note) when absent.
pub fn load_gemma3(backend: Backend) -> Option<LoadedModel> {
    load_registry("gemma3-270m", cpu_options(backend))
}

/// The registry model `name` (`smollm2-135m`, `qwen2.5-coder-0.5b` or `gemma3-270m`)
/// with `options`; None (after the `SKIPPED:` note) when absent.
pub fn load_registry(name: &str, options: LoadOptions) -> Option<LoadedModel> {
    let path = match name {
        "smollm2-135m" => {
            smollm2_present().then(|| registry::model_path(registry::lookup(name).unwrap()))?
        }
        "qwen2.5-coder-0.5b" => qwen2_path()?,
        "gemma3-270m" => {
            std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
            let Some(path) = gemma3_path() else {
                skip::skipped(format_args!(
                    "SKIPPED: Gemma 3 GGUF not found; run `formwork models fetch gemma3-270m` \
                     or set FORMWORK_GEMMA3_GGUF=/path/to/gemma-3-270m-q4_k_m.gguf"
                ));
                return None;
            };
            path
        }
        other => panic!("no test loader for `{other}`"),
    };
    Some(load_file(&path, name, options).unwrap_or_else(|e| panic!("load {name}: {e}")))
}

/// A model a test binary loads once and its tests share (they take snapshots).
pub type Shared = OnceLock<Option<Mutex<LoadedModel>>>;

/// The model in `cell`, loaded by `load` on first use; None when it is absent.
pub fn once(
    cell: &'static Shared,
    load: impl FnOnce() -> Option<LoadedModel>,
) -> Option<MutexGuard<'static, LoadedModel>> {
    let m = cell.get_or_init(|| load().map(Mutex::new));
    Some(m.as_ref()?.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Teacher-forced over the last `steps` positions of `ids`, `a` against `b`: how many
/// next-token argmaxes agree, the largest logit difference, and the largest |logit|
/// of `b`'s last logits.
pub fn teacher_forced(
    a: &LoadedModel,
    b: &LoadedModel,
    ids: &[u32],
    steps: usize,
) -> (usize, f32, f32) {
    let start = ids.len() - steps;
    let (mut a, mut b) = (a.model.snapshot(), b.model.snapshot());
    let mut la = a.forward(&ids[..start], 0).unwrap();
    let mut lb = b.forward(&ids[..start], 0).unwrap();
    let (mut agree, mut worst) = (0, 0f32);
    for i in start..ids.len() {
        agree += usize::from(argmax(&la) == argmax(&lb));
        worst = worst.max(max_abs_diff(&la, &lb));
        la = a.forward(&ids[i..i + 1], i).unwrap();
        lb = b.forward(&ids[i..i + 1], i).unwrap();
    }
    eprintln!(
        "argmax agreement {agree}/{steps}, largest logit difference {worst:.3} (max |logit| {:.1})",
        scale(&lb)
    );
    (agree, worst, scale(&lb))
}

/// The largest |logit|.
pub fn scale(logits: &[f32]) -> f32 {
    logits.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// The logits after `ids` in one prefill, and after prefills in chunks of 7 and of 1
/// (one token at a time): `(full, [(7, last), (1, last)])`, on one snapshot of `m`.
pub fn chunked_prefills(m: &LoadedModel, ids: &[u32]) -> (Vec<f32>, Vec<(usize, Vec<f32>)>) {
    let mut model = m.model.snapshot();
    let full = model.forward(ids, 0).unwrap();
    let chunked = [7, 1]
        .into_iter()
        .map(|chunk| {
            let mut last = Vec::new();
            for (i, c) in ids.chunks(chunk).enumerate() {
                last = model.forward(c, i * chunk).unwrap();
            }
            (chunk, last)
        })
        .collect();
    (full, chunked)
}

/// A snapshot taken after 60 tokens of `ids` decodes on while the original decodes
/// other tokens well past it. Returns two (got, want) pairs: the snapshot's next 10
/// tokens against one prefill of the same 70, and the original's next token against
/// one prefill of what the original was fed.
pub fn snapshot_runs(m: &LoadedModel, ids: &[u32]) -> [(Vec<f32>, Vec<f32>); 2] {
    let (prefix, rest) = ids.split_at(60);
    let mut base = m.model.snapshot();
    base.forward(prefix, 0).unwrap();
    let mut snap = base.snapshot();
    let mut pos = prefix.len();
    for &t in &rest[20..50] {
        base.forward(&[t], pos).unwrap();
        pos += 1;
    }
    let from_snap = snap.forward(&rest[..10], prefix.len()).unwrap();
    let mut fresh = m.model.snapshot();
    let want_snap = fresh.forward(&ids[..70], 0).unwrap();
    let next = base.forward(&rest[50..51], pos).unwrap();
    let mut seq: Vec<u32> = prefix.to_vec();
    seq.extend_from_slice(&rest[20..51]);
    let want_next = fresh.forward(&seq, 0).unwrap();
    [(from_snap, want_snap), (next, want_next)]
}

/// formwork's CPU file read from `path` with the portable scalar kernels and with each
/// SIMD set this CPU runs, over `ids`: asserts the same argmax and logits within
/// `tol` of the scalar ones (the integer sums are exact; only the order of the f32
/// sums differs, and a flipped 8-bit rounding of an activation grows over the layers).
pub fn scalar_and_simd_agree(path: &Path, ids: &[u32], tol: f32) {
    let load = |isa| {
        let mut f = std::fs::File::open(path).unwrap();
        let ct = gguf_file::Content::read(&mut f).unwrap();
        formwork_models::llama::ModelWeights::from_gguf_with_isa(ct, &mut f, &Device::Cpu, isa)
            .unwrap()
    };
    let want = load(Isa::Scalar).forward_tokens(ids, 0).unwrap();
    for isa in Isa::available() {
        let got = load(isa).forward_tokens(ids, 0).unwrap();
        let d = max_abs_diff(&want, &got);
        eprintln!("{isa:?}: largest difference from scalar {d}");
        assert!(d <= tol, "{isa:?}: {d}");
        assert_eq!(argmax(&want), argmax(&got), "{isa:?}");
    }
}

/// Bad input is an error with its numbers, never a panic, and leaves the model usable:
/// a token id of `vocab`, an empty feed, a gap in positions, a position `beyond` the
/// context.
pub fn bad_input_is_an_error(m: &LoadedModel, vocab: u32, beyond: usize) {
    let mut model = m.model.snapshot();
    assert_eq!(model.vocab_size(), vocab as usize);
    let e = model.forward(&[vocab], 0).unwrap_err().to_string();
    assert!(e.contains(&vocab.to_string()), "{e}");
    assert!(model.forward(&[], 0).is_err());
    model.forward(&[1, 2, 3], 0).unwrap();
    let e = model.forward(&[4], 7).unwrap_err().to_string();
    assert!(e.contains('3'), "{e}");
    model.forward(&[4], 3).unwrap();
    let e = model.forward(&[4], beyond).unwrap_err().to_string();
    assert!(e.contains("context"), "{e}");
}

/// [`chunked_prefills`] over the first 90 tokens of [`TEXT`]: the same argmax, and
/// logits within `tol`.
pub fn assert_chunked_prefills_agree(m: &LoadedModel, tol: f32) {
    let (full, chunked) = chunked_prefills(m, &text_ids(m)[..90]);
    for (chunk, last) in chunked {
        let d = max_abs_diff(&full, &last);
        eprintln!("chunks of {chunk}: largest difference {d}");
        assert!(d <= tol, "chunks of {chunk}: largest difference {d}");
        assert_eq!(argmax(&full), argmax(&last), "chunks of {chunk}");
    }
}

/// [`snapshot_runs`] over [`TEXT`]: both pairs within `tol`.
pub fn assert_snapshots_independent(m: &LoadedModel, tol: f32) {
    let runs = snapshot_runs(m, &text_ids(m));
    for (what, (got, want)) in ["snapshot", "original"].into_iter().zip(runs) {
        let d = max_abs_diff(&got, &want);
        assert!(d <= tol, "{what}: largest difference {d}");
    }
}

/// llama.cpp's greedy tokens on the Gemma 3 GGUF (`testdata/gemma3-greedy.json`, recorded
/// by `testdata/gemma3-greedy.py`).
#[derive(serde::Deserialize)]
pub struct GemmaReference {
    pub source: String,
    pub cases: Vec<GemmaReferenceCase>,
}

#[derive(serde::Deserialize)]
pub struct GemmaReferenceCase {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    pub greedy_text: String,
    pub first_top5_logits: Vec<(u32, f32)>,
}

pub fn gemma_reference() -> GemmaReference {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/gemma3-greedy.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Teacher-forced against llama.cpp's greedy tokens ([`gemma_reference`]; f16 K/V and
/// activations quantised as ours are, in another order, so a free-running text may part
/// at a near tie): `forward(ids, pos)` feeds a model (pos 0 starts over). At every step
/// llama.cpp's choice must be our argmax or within `TIE` of our best logit, at least 90%
/// of steps must agree exactly, and the first step's top-5 logits must be within
/// `LOGIT_TOL`. `decode` renders tokens for the failure message.
pub fn assert_agrees_with_gemma_reference(
    name: &str,
    mut forward: impl FnMut(&[u32], usize) -> Vec<f32>,
    decode: impl Fn(&[u32]) -> String,
) {
    // Measured: the largest gap at a disagreement is 0.28, and the largest first-step
    // logit difference 0.79 (llama.cpp keeps K/V in f16; we keep f32).
    const TIE: f32 = 0.5;
    const LOGIT_TOL: f32 = 1.0;
    let r = gemma_reference();
    eprintln!("reference: {}", r.source);
    let (mut steps, mut exact) = (0, 0);
    for c in &r.cases {
        let mut logits = forward(&c.prompt_ids, 0);
        for &(t, want) in &c.first_top5_logits {
            let got = logits[t as usize];
            eprintln!(
                "{name} {:?}: top-5 logit of {t}: ours {got}, llama.cpp {want}",
                c.prompt
            );
            assert!(
                (got - want).abs() < LOGIT_TOL,
                "{name} {:?}: logit of {t} is {got}, llama.cpp {want}",
                c.prompt
            );
        }
        let mut pos = c.prompt_ids.len();
        for (k, &t) in c.greedy_ids.iter().enumerate() {
            let ours = argmax(&logits);
            let gap = logits[ours as usize] - logits[t as usize];
            steps += 1;
            if ours == t {
                exact += 1;
            } else {
                eprintln!(
                    "{name} {:?} step {k}: llama.cpp {t}, ours {ours}, gap {gap:.3}",
                    c.prompt
                );
            }
            assert!(
                gap <= TIE,
                "{name} {:?} step {k}: llama.cpp chose {t} ({:?} so far, {:?} in all), our best {ours} is {gap} above it",
                c.prompt,
                decode(&c.greedy_ids[..=k]),
                c.greedy_text,
            );
            logits = forward(&[t], pos);
            pos += 1;
        }
    }
    eprintln!("{name}: {exact} of {steps} steps pick llama.cpp's token exactly");
    assert!(
        exact * 10 >= steps * 9,
        "{name}: only {exact} of {steps} exact"
    );
}

/// llama.cpp's `models/` folder of vocab-only GGUFs with their test strings
/// (`scripts/llamacpp-vocab`): `FORMWORK_LLAMACPP_VOCAB`, else where that script puts it
/// under `$FORMWORK_HOME`. None (after a `SKIPPED:` note) when absent.
pub fn llamacpp_vocab_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("FORMWORK_LLAMACPP_VOCAB") {
        Some(d) => PathBuf::from(d),
        None => registry::formwork_home()
            .join("llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/models"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        skip::skipped(format_args!(
            "SKIPPED: llama.cpp's vocabularies are absent ({}); run scripts/llamacpp-vocab",
            dir.display()
        ));
        None
    }
}
