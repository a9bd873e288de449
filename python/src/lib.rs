//! `formwork._formwork`: the grammar crate for Python (PyO3, abi3).
//!
//! `Tokenizer` (token bytes, EOS and special ids, the model's vocabulary size) ->
//! `Compiler.json_schema(schema)` -> `Grammar` (shared, cached by schema text) ->
//! `Grammar.matcher()` -> `Matcher` (one per sequence: mask, commit, rollback) ->
//! `fill_mask` / `fill_masks` into an int32 bitmask.
//!
//! Bitmask layout (SGLang's and vLLM's): one bit per token id, `ceil(vocab_size / 32)`
//! int32 words per row, token `t` at bit `t % 32` of word `t / 32`; a set bit allows the
//! token. Compiling and batched mask fills release the GIL; a `Matcher` is guarded by a
//! mutex, so it may be used from several Python threads.

mod hf;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use formwork_grammar::compile::{self, CompileError as CoreCompileError, Config, Whitespace};
use formwork_grammar::{
    CommitError, Grammar as CoreGrammar, Matcher as CoreMatcher, TokTrie, TokenSet,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

pyo3::create_exception!(
    _formwork,
    CompileError,
    PyValueError,
    "A schema formwork cannot enforce exactly, or not a schema: `kind`, `keyword`, `pointer` (RFC 6901) and `why`."
);
pyo3::create_exception!(
    _formwork,
    TokenError,
    PyValueError,
    "A token the grammar refuses: `token`, `index` (its position in the call) and `why`. The matcher is unchanged."
);

fn words_for(vocab: usize) -> usize {
    vocab.div_ceil(32)
}

// ---------------------------------------------------------------- Tokenizer

/// A vocabulary: token bytes, EOS ids and the special ids no grammar allows.
#[pyclass(frozen, module = "formwork._formwork")]
struct Tokenizer {
    trie: Arc<TokTrie>,
}

fn build_trie(
    bytes: Vec<Vec<u8>>,
    mut special: Vec<bool>,
    eos_ids: &[u32],
    special_ids: &[u32],
) -> PyResult<Arc<TokTrie>> {
    let n = bytes.len();
    if n == 0 {
        return Err(PyValueError::new_err("the vocabulary is empty"));
    }
    if eos_ids.is_empty() {
        return Err(PyValueError::new_err(
            "no EOS id: a grammar ends a sequence by allowing EOS, so give eos_ids",
        ));
    }
    for &id in eos_ids.iter().chain(special_ids) {
        if id as usize >= n {
            return Err(PyValueError::new_err(format!(
                "token id {id} is outside the vocabulary of {n} ids"
            )));
        }
    }
    special.resize(n, false);
    for &id in special_ids {
        special[id as usize] = true;
    }
    Ok(Arc::new(TokTrie::new(bytes, &special, eos_ids)))
}

#[pymethods]
impl Tokenizer {
    /// From a Hugging Face `tokenizer.json`: its path, or its text. `vocab_size`: the
    /// model's vocabulary (its logits' width), at least the tokenizer's; the ids past
    /// the tokenizer's are padding, never allowed.
    #[staticmethod]
    #[pyo3(signature = (path_or_json, *, eos_ids, vocab_size=None, special_ids=Vec::new()))]
    fn from_hf(
        py: Python<'_>,
        path_or_json: std::path::PathBuf,
        eos_ids: Vec<u32>,
        vocab_size: Option<usize>,
        special_ids: Vec<u32>,
    ) -> PyResult<Tokenizer> {
        py.detach(move || {
            let text = path_or_json.to_string_lossy();
            let json = if text.trim_start().starts_with('{') {
                text.into_owned()
            } else {
                std::fs::read_to_string(&path_or_json).map_err(|e| {
                    PyValueError::new_err(format!("{}: {e}", path_or_json.display()))
                })?
            };
            let v = hf::read(&json, vocab_size).map_err(PyValueError::new_err)?;
            let trie = build_trie(v.bytes, v.special, &eos_ids, &special_ids)?;
            Ok(Tokenizer { trie })
        })
    }

    /// From the bytes of every token id (`b""` for ids without text). `vocab_size` pads
    /// the list with never-allowed ids.
    #[staticmethod]
    #[pyo3(signature = (tokens, *, eos_ids, vocab_size=None, special_ids=Vec::new()))]
    fn from_token_bytes(
        py: Python<'_>,
        tokens: Vec<Vec<u8>>,
        eos_ids: Vec<u32>,
        vocab_size: Option<usize>,
        special_ids: Vec<u32>,
    ) -> PyResult<Tokenizer> {
        let mut tokens = tokens;
        if let Some(v) = vocab_size {
            if v < tokens.len() {
                return Err(PyValueError::new_err(format!(
                    "vocab_size {v} is smaller than the {} tokens given",
                    tokens.len()
                )));
            }
            tokens.resize(v, Vec::new());
        }
        py.detach(move || {
            let trie = build_trie(tokens, Vec::new(), &eos_ids, &special_ids)?;
            Ok(Tokenizer { trie })
        })
    }

    /// The mask width in token ids (padding included).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.trie.vocab_size()
    }

    /// int32 words per bitmask row: `ceil(vocab_size / 32)`.
    #[getter]
    fn mask_words(&self) -> usize {
        words_for(self.trie.vocab_size())
    }

    #[getter]
    fn eos_ids(&self) -> Vec<u32> {
        self.trie.eos_ids().to_vec()
    }

    /// The bytes of token `id` (`b""` for ids without text).
    fn token_bytes<'py>(&self, py: Python<'py>, id: u32) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, self.trie.token_bytes(id))
    }

    /// Whether a grammar may ever allow `id` (not special, not EOS, not padding).
    fn is_usable(&self, id: u32) -> bool {
        self.trie.is_usable(id)
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(vocab_size={}, eos_ids={:?})",
            self.trie.vocab_size(),
            self.trie.eos_ids()
        )
    }
}

// ---------------------------------------------------------------- Compiler

#[derive(Clone)]
struct ErrInfo {
    kind: &'static str,
    keyword: Option<String>,
    pointer: Option<String>,
    why: String,
    message: String,
}

impl ErrInfo {
    fn of(e: &CoreCompileError) -> ErrInfo {
        let message = e.to_string();
        let (kind, keyword, pointer, why) = match e {
            CoreCompileError::Unsupported {
                keyword,
                pointer,
                why,
            } => (
                "unsupported",
                Some(keyword.clone()),
                Some(pointer.clone()),
                why.clone(),
            ),
            CoreCompileError::InvalidSchema { pointer, msg } => {
                ("invalid_schema", None, Some(pointer.clone()), msg.clone())
            }
            CoreCompileError::Limit { pointer, .. } => {
                ("limit", None, Some(pointer.clone()), message.clone())
            }
            CoreCompileError::Empty { pointer } => {
                ("empty", None, Some(pointer.clone()), message.clone())
            }
            CoreCompileError::NoSpan { pointer } => {
                ("no_span", None, Some(pointer.clone()), message.clone())
            }
        };
        ErrInfo {
            kind,
            keyword,
            pointer,
            why,
            message,
        }
    }

    fn to_py(&self, py: Python<'_>) -> PyErr {
        let err = CompileError::new_err(self.message.clone());
        let v = err.value(py);
        let set = || -> PyResult<()> {
            v.setattr("kind", self.kind)?;
            v.setattr("keyword", self.keyword.clone())?;
            v.setattr("pointer", self.pointer.clone())?;
            v.setattr("why", self.why.clone())?;
            Ok(())
        };
        match set() {
            Ok(()) => err,
            Err(e) => e,
        }
    }
}

type Compiled = Result<(Arc<CoreGrammar>, Vec<(String, String, String)>), ErrInfo>;

struct Cache {
    map: HashMap<String, Arc<OnceLock<Compiled>>>,
    order: VecDeque<String>,
}

/// Compiles JSON Schemas for one tokenizer. Thread-safe: compiles with the GIL released,
/// and keeps the last `cache_size` schemas (keyed by their compact text, property order
/// kept: it is the order formwork writes) with their errors.
#[pyclass(frozen, module = "formwork._formwork")]
struct Compiler {
    trie: Arc<TokTrie>,
    cfg: Config,
    cache_size: usize,
    cache: Mutex<Cache>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves data that is still consistent here (the
    // matcher changes state only on success), so a poisoned lock is taken over.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl Compiler {
    /// `whitespace`: `None` for the compact form (no whitespace at all), or the longest
    /// run of whitespace allowed between tokens. `lenient`: relax what cannot be enforced
    /// (listed in `Grammar.relaxed`) instead of raising. `step_limit`: the compile step
    /// budget per schema (default 200_000_000, `Limits::steps`: a count of work, the same
    /// on every machine; over it, `CompileError` with `kind == "limit"` and the numbers).
    /// `time_limit_ms`, the wall-clock limit it replaced, raises `TypeError`.
    #[new]
    #[pyo3(signature = (tokenizer, *, whitespace=None, lenient=false, step_limit=None, cache_size=1024, time_limit_ms=None))]
    fn new(
        tokenizer: &Tokenizer,
        whitespace: Option<u32>,
        lenient: bool,
        step_limit: Option<u64>,
        cache_size: usize,
        time_limit_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Compiler> {
        if time_limit_ms.is_some() {
            return Err(PyTypeError::new_err(
                "time_limit_ms was replaced by step_limit (a count of compile work, default 200000000)",
            ));
        }
        let mut cfg = Config {
            whitespace: match whitespace {
                None => Whitespace::Compact,
                Some(max_run) => Whitespace::Flexible { max_run },
            },
            lenient,
            ..Config::default()
        };
        if let Some(n) = step_limit {
            cfg.limits.steps = n;
        }
        Ok(Compiler {
            trie: tokenizer.trie.clone(),
            cfg,
            cache_size: cache_size.max(1),
            cache: Mutex::new(Cache {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
        })
    }

    /// Compiles `schema` (JSON text, or a dict). Raises `CompileError` with the keyword and JSON
    /// Pointer of what cannot be enforced.
    fn json_schema(&self, py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<Grammar> {
        let text: String = match schema.extract::<String>() {
            Ok(s) => s,
            // A dict (or any JSON-serialisable value): Python's json module writes it.
            Err(_) => py
                .import("json")?
                .call_method1("dumps", (schema,))?
                .extract()?,
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ErrInfo {
                kind: "invalid_json",
                keyword: None,
                pointer: None,
                why: e.to_string(),
                message: format!("the schema is not JSON: {e}"),
            }
            .to_py(py)
        })?;
        let key = value.to_string();
        let entry = {
            let mut c = lock(&self.cache);
            if let Some(e) = c.map.get(&key) {
                e.clone()
            } else {
                while c.map.len() >= self.cache_size {
                    let Some(old) = c.order.pop_front() else {
                        break;
                    };
                    c.map.remove(&old);
                }
                let e = Arc::new(OnceLock::new());
                c.map.insert(key.clone(), e.clone());
                c.order.push_back(key);
                e
            }
        };
        let cfg = self.cfg.clone();
        let compiled = py.detach(|| {
            entry
                .get_or_init(|| match compile::compile(&value, &cfg) {
                    Ok(a) => {
                        let relaxed = a
                            .relaxed()
                            .iter()
                            .map(|r| (r.keyword.clone(), r.pointer.clone(), r.why.clone()))
                            .collect();
                        Ok((CoreGrammar::new(a), relaxed))
                    }
                    Err(e) => Err(ErrInfo::of(&e)),
                })
                .clone()
        });
        match compiled {
            Ok((grammar, relaxed)) => Ok(Grammar {
                grammar,
                trie: self.trie.clone(),
                relaxed,
            }),
            Err(e) => Err(e.to_py(py)),
        }
    }

    /// Schemas in the cache.
    fn cache_len(&self) -> usize {
        lock(&self.cache).map.len()
    }
}

// ---------------------------------------------------------------- Grammar

/// A compiled schema with its mask cache, shared by every sequence that uses it.
#[pyclass(frozen, module = "formwork._formwork")]
struct Grammar {
    grammar: Arc<CoreGrammar>,
    trie: Arc<TokTrie>,
    relaxed: Vec<(String, String, String)>,
}

#[pymethods]
impl Grammar {
    /// A matcher at the start of the text. `budget`: steer to finish within that many
    /// tokens (EOS not counted).
    #[pyo3(signature = (budget=None))]
    fn matcher(&self, budget: Option<usize>) -> Matcher {
        let mut m = CoreMatcher::new(self.grammar.clone(), self.trie.clone());
        if let Some(b) = budget {
            m.set_budget(b);
        }
        Matcher::wrap(m, budget)
    }

    /// `(keyword, pointer, why)` for each keyword relaxed in lenient mode.
    #[getter]
    fn relaxed(&self) -> Vec<(String, String, String)> {
        self.relaxed.clone()
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.trie.vocab_size()
    }

    /// Cache sizes so far: interned states and memory in bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.grammar.stats();
        let d = PyDict::new(py);
        d.set_item("states", s.states)?;
        d.set_item("memory_bytes", s.memory_bytes)?;
        Ok(d)
    }
}

// ---------------------------------------------------------------- Matcher

/// The constraint state of one sequence.
#[pyclass(frozen, module = "formwork._formwork")]
struct Matcher {
    inner: Arc<Mutex<CoreMatcher>>,
    budget: Option<usize>,
}

impl Matcher {
    fn wrap(m: CoreMatcher, budget: Option<usize>) -> Matcher {
        Matcher {
            inner: Arc::new(Mutex::new(m)),
            budget,
        }
    }
}

fn token_error(py: Python<'_>, index: usize, e: &CommitError) -> PyErr {
    let token = match e {
        CommitError::OutOfVocabulary { token, .. }
        | CommitError::NeverAllowed { token }
        | CommitError::TokenRefused { token, .. }
        | CommitError::EosNotAccepting { token, .. }
        | CommitError::AfterEos { token }
        | CommitError::OverBudget { token, .. } => Some(*token),
        CommitError::BytesRefused { .. } => None,
    };
    let err = TokenError::new_err(format!("token #{index}: {e}"));
    let v = err.value(py);
    let set = || -> PyResult<()> {
        v.setattr("token", token)?;
        v.setattr("index", index)?;
        v.setattr("why", e.to_string())?;
        Ok(())
    };
    match set() {
        Ok(()) => err,
        Err(x) => x,
    }
}

/// Copies a token set into int32 words, lowest bit first.
fn write_words(set: &TokenSet, out: &mut [u32]) {
    for (i, &w) in set.as_words().iter().enumerate() {
        let lo = 2 * i;
        if lo < out.len() {
            out[lo] = w as u32;
        }
        if lo + 1 < out.len() {
            out[lo + 1] = (w >> 32) as u32;
        }
    }
}

/// A writable int32 target: base address, rows, words per row.
struct Target {
    addr: usize,
    rows: usize,
    words: usize,
}

fn shape_of(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    shape.extract::<Vec<usize>>()
}

/// Reads a numpy array (or anything with `__array_interface__`) or a CPU torch tensor:
/// int32, C-contiguous, writable, one or two dimensions.
fn target_of(obj: &Bound<'_, PyAny>) -> PyResult<Target> {
    let (addr, shape) = if let Ok(ai) = obj.getattr("__array_interface__") {
        let typestr: String = ai.get_item("typestr")?.extract()?;
        if typestr != "<i4" && typestr != "<u4" {
            return Err(PyTypeError::new_err(format!(
                "the bitmask must be int32, not {typestr}"
            )));
        }
        let strides = ai.get_item("strides")?;
        if !strides.is_none() {
            return Err(PyValueError::new_err("the bitmask must be C-contiguous"));
        }
        let (addr, readonly): (usize, bool) = ai.get_item("data")?.extract()?;
        if readonly {
            return Err(PyValueError::new_err("the bitmask is read-only"));
        }
        (addr, shape_of(&ai.get_item("shape")?)?)
    } else if obj.hasattr("data_ptr")? && obj.hasattr("is_contiguous")? {
        let dtype = obj.getattr("dtype")?.str()?.to_string();
        if dtype != "torch.int32" {
            return Err(PyTypeError::new_err(format!(
                "the bitmask must be int32, not {dtype}"
            )));
        }
        let device = obj.getattr("device")?.getattr("type")?.str()?.to_string();
        if device != "cpu" {
            return Err(PyValueError::new_err(format!(
                "the bitmask must be on the CPU, not {device}: fill it there and move it"
            )));
        }
        if !obj.call_method0("is_contiguous")?.extract::<bool>()? {
            return Err(PyValueError::new_err("the bitmask must be contiguous"));
        }
        let addr: usize = obj.call_method0("data_ptr")?.extract()?;
        (addr, shape_of(&obj.getattr("shape")?)?)
    } else {
        return Err(PyTypeError::new_err(
            "the bitmask must be a numpy array or a CPU torch tensor of int32 \
             (for another buffer, numpy.frombuffer(buf, dtype=numpy.int32))",
        ));
    };
    let (rows, words) = match shape.as_slice() {
        [w] => (1, *w),
        [r, w] => (*r, *w),
        _ => {
            return Err(PyValueError::new_err(format!(
                "the bitmask must have 1 or 2 dimensions, not {}",
                shape.len()
            )))
        }
    };
    if addr == 0 && rows * words > 0 {
        return Err(PyValueError::new_err("the bitmask has no data"));
    }
    Ok(Target { addr, rows, words })
}

fn check_words(t: &Target, trie: &TokTrie) -> PyResult<()> {
    let want = words_for(trie.vocab_size());
    if t.words != want {
        return Err(PyValueError::new_err(format!(
            "the bitmask has {} words per row; the vocabulary of {} ids needs {want}",
            t.words,
            trie.vocab_size()
        )));
    }
    Ok(())
}

/// # Safety
/// `addr` must point at `words` writable u32s that nothing else writes meanwhile.
unsafe fn fill_at(m: &mut CoreMatcher, set: &mut TokenSet, addr: usize, words: usize) {
    if m.is_stopped() {
        // After EOS the row allows EOS alone, as llguidance's does: an engine that still
        // samples the row (speculative steps) gets EOS again, never a row of -inf.
        set.clear();
        for &e in m.trie().eos_ids() {
            set.allow(e);
        }
    } else {
        m.compute_mask(set);
    }
    // SAFETY: the caller's promise.
    let out = unsafe { std::slice::from_raw_parts_mut(addr as *mut u32, words) };
    write_words(set, out);
}

#[pymethods]
impl Matcher {
    /// Commits tokens in order. On a refused token raises `TokenError` and leaves the
    /// matcher as it was before the call.
    fn commit_tokens(&self, py: Python<'_>, tokens: Vec<u32>) -> PyResult<()> {
        let mut m = lock(&self.inner);
        for (i, &t) in tokens.iter().enumerate() {
            if let Err(e) = m.commit(t) {
                m.rollback(i);
                return Err(token_error(py, i, &e));
            }
        }
        Ok(())
    }

    /// How many leading tokens the grammar accepts in order. Changes nothing.
    fn validate_tokens(&self, tokens: Vec<u32>) -> usize {
        let mut m = lock(&self.inner);
        let mut n = 0;
        for &t in &tokens {
            if m.commit(t).is_err() {
                break;
            }
            n += 1;
        }
        m.rollback(n);
        n
    }

    /// Undoes the last `n` committed tokens; returns how many were undone (fewer when
    /// fewer were committed).
    fn rollback(&self, n: usize) -> usize {
        lock(&self.inner).rollback(n)
    }

    /// Writes the allowed tokens into `bitmask[row]` (a numpy array or a CPU torch
    /// tensor of int32, one row of `Tokenizer.mask_words` words, or a 2-D batch).
    #[pyo3(signature = (bitmask, row=0))]
    fn fill_mask(&self, py: Python<'_>, bitmask: &Bound<'_, PyAny>, row: usize) -> PyResult<()> {
        let t = target_of(bitmask)?;
        let mut m = lock(&self.inner);
        check_words(&t, m.trie())?;
        if row >= t.rows {
            return Err(PyValueError::new_err(format!(
                "row {row} is outside the bitmask's {} rows",
                t.rows
            )));
        }
        let mut set = TokenSet::new(m.trie().vocab_size());
        let addr = t.addr + row * t.words * 4;
        let words = t.words;
        let m: &mut CoreMatcher = &mut m;
        // SAFETY: the row lies in the caller's array, which `bitmask` keeps alive; the
        // matcher's lock is held.
        py.detach(|| unsafe { fill_at(m, &mut set, addr, words) });
        Ok(())
    }

    /// Raw form of `fill_mask`: `words` int32s at address `ptr`, which the caller keeps
    /// alive and writable.
    fn unsafe_fill_mask_ptr(&self, py: Python<'_>, ptr: usize, words: usize) -> PyResult<()> {
        let mut m = lock(&self.inner);
        check_words(
            &Target {
                addr: ptr,
                rows: 1,
                words,
            },
            m.trie(),
        )?;
        if ptr == 0 {
            return Err(PyValueError::new_err("null pointer"));
        }
        let mut set = TokenSet::new(m.trie().vocab_size());
        let m: &mut CoreMatcher = &mut m;
        // SAFETY: the caller's promise.
        py.detach(|| unsafe { fill_at(m, &mut set, ptr, words) });
        Ok(())
    }

    /// The allowed token ids, as a list (for tests and small vocabularies); the same set
    /// as `fill_mask` writes (after EOS: EOS alone).
    fn allowed_tokens(&self) -> Vec<u32> {
        let mut m = lock(&self.inner);
        let n = m.trie().vocab_size();
        let mut set = TokenSet::new(n);
        let mut words = vec![0u32; words_for(n)];
        // SAFETY: `words` is a live buffer of exactly that many words.
        unsafe { fill_at(&mut m, &mut set, words.as_mut_ptr() as usize, words.len()) };
        set.iter().collect()
    }

    /// Whether the text so far is a complete instance (EOS is allowed).
    fn is_accepting(&self) -> bool {
        lock(&self.inner).is_accepting()
    }

    /// Whether EOS has been committed: the sequence is over.
    fn is_terminated(&self) -> bool {
        lock(&self.inner).is_stopped()
    }

    /// Whether the text is complete and no byte may follow (only EOS is allowed).
    fn is_finished(&self) -> bool {
        lock(&self.inner).is_finished()
    }

    /// The bytes the grammar allows in only one way from here.
    fn forced_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &lock(&self.inner).forced_bytes())
    }

    /// A shortest byte string that completes the text from here.
    fn shortest_completion<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &lock(&self.inner).shortest_completion())
    }

    /// Tokens that spell the forced bytes (longest token first) and are safe to commit
    /// without a model: the last ones are dropped where a longer token could span the
    /// boundary, so the sequence stays as the tokenizer would write it.
    fn forced_tokens(&self) -> Vec<u32> {
        let m = lock(&self.inner);
        let bytes = m.forced_bytes();
        if bytes.is_empty() {
            return Vec::new();
        }
        let trie = m.trie();
        let mut toks = Vec::new();
        let mut rest: &[u8] = &bytes;
        while let Some((t, n)) = trie.longest_prefix_token(rest) {
            toks.push(t);
            rest = &rest[n..];
        }
        let keep = m.canonical_forced_prefix(&toks);
        toks.truncate(keep);
        toks
    }

    /// A copy with the same state and history (for beams and speculation).
    fn fork(&self) -> Matcher {
        Matcher {
            inner: Arc::new(Mutex::new(lock(&self.inner).clone())),
            budget: self.budget,
        }
    }

    /// Back to the start of the text (and the budget it was made with).
    fn reset(&self) {
        let mut m = lock(&self.inner);
        let mut fresh = CoreMatcher::new(m.grammar().clone(), m.trie().clone());
        if let Some(b) = self.budget {
            fresh.set_budget(b);
        }
        *m = fresh;
    }

    /// Steers the rest of the run to end within `tokens_left` tokens; `None` removes it.
    fn set_budget(&self, tokens_left: Option<usize>) {
        let mut m = lock(&self.inner);
        match tokens_left {
            Some(b) => m.set_budget(b),
            None => m.clear_budget(),
        }
    }

    /// The current state's interned id: equal ids give equal masks (for tests).
    fn state_id(&self) -> u32 {
        lock(&self.inner).state_id()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", *lock(&self.inner))
    }
}

// ---------------------------------------------------------------- batched fill

/// One batched fill, shared by the calling thread and rayon's workers. Each takes the
/// next row from `next` until none is left; the caller fills rows too and returns once
/// every row is `done`. So the call never waits for a worker to wake up (on a loaded
/// machine that took milliseconds, longer than 256 warm rows take on one thread), and
/// a worker that wakes after the last row was taken finds nothing to do and never
/// touches the caller's buffer.
struct Batch {
    jobs: Vec<(Arc<Mutex<CoreMatcher>>, usize)>,
    addr: usize,
    words: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

impl Batch {
    fn work(&self) {
        let mut set: Option<TokenSet> = None;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some((m, row)) = self.jobs.get(i) else {
                return;
            };
            let fill = std::panic::AssertUnwindSafe(|| {
                let mut m = lock(m);
                let n = m.trie().vocab_size();
                let set = match &mut set {
                    Some(s) if s.len() == n => s,
                    _ => set.insert(TokenSet::new(n)),
                };
                // SAFETY: rows are distinct and inside the caller's array, which stays
                // alive until every row is done (`fill_masks` waits for that).
                unsafe { fill_at(&mut m, set, self.addr + row * self.words * 4, self.words) };
            });
            if std::panic::catch_unwind(fill).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            // Release: the row's words are written before it counts as done.
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Fills many rows in one call, in parallel (rayon), with the GIL released. `rows`: a
/// list of `(matcher, row)` pairs, or of matchers (row = position in the list). Each row
/// at most once.
#[pyfunction]
fn fill_masks(py: Python<'_>, rows: &Bound<'_, PyAny>, bitmask: &Bound<'_, PyAny>) -> PyResult<()> {
    let t = target_of(bitmask)?;
    let mut jobs: Vec<(Arc<Mutex<CoreMatcher>>, usize)> = Vec::new();
    for (i, item) in rows.try_iter()?.enumerate() {
        let item = item?;
        let (m, row) = if let Ok(m) = item.cast::<Matcher>() {
            (m.get().inner.clone(), i)
        } else if let Ok(tup) = item.cast::<PyTuple>() {
            if tup.len() != 2 {
                return Err(PyTypeError::new_err("each row is (matcher, row index)"));
            }
            let m = tup.get_item(0)?;
            let m = m
                .cast::<Matcher>()
                .map_err(|_| PyTypeError::new_err("each row is (matcher, row index)"))?;
            (m.get().inner.clone(), tup.get_item(1)?.extract::<usize>()?)
        } else {
            return Err(PyTypeError::new_err(
                "rows must be matchers or (matcher, row index) pairs",
            ));
        };
        jobs.push((m, row));
    }
    let mut seen = vec![false; t.rows];
    for (m, row) in &jobs {
        if *row >= t.rows {
            return Err(PyValueError::new_err(format!(
                "row {row} is outside the bitmask's {} rows",
                t.rows
            )));
        }
        if std::mem::replace(&mut seen[*row], true) {
            return Err(PyValueError::new_err(format!("row {row} is given twice")));
        }
        check_words(&t, lock(m).trie())?;
    }
    let n = jobs.len();
    let batch = Arc::new(Batch {
        jobs,
        addr: t.addr,
        words: t.words,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    });
    py.detach(|| {
        for _ in 0..rayon::current_num_threads().min(n.saturating_sub(1)) {
            let b = batch.clone();
            rayon::spawn(move || b.work());
        }
        batch.work();
        // Rows a worker took are still being filled: wait for them (at most one row a
        // worker), never for a worker that has not started.
        let mut spins = 0u32;
        while batch.done.load(Ordering::Acquire) < n {
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    });
    if batch.panicked.load(Ordering::Relaxed) {
        return Err(PyRuntimeError::new_err(
            "formwork: a mask fill panicked (a bug); the rows are not filled",
        ));
    }
    Ok(())
}

/// Threads in the pool `fill_masks` uses.
#[pyfunction]
fn num_threads() -> usize {
    rayon::current_num_threads()
}

#[pymodule]
fn _formwork(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tokenizer>()?;
    m.add_class::<Compiler>()?;
    m.add_class::<Grammar>()?;
    m.add_class::<Matcher>()?;
    m.add_function(wrap_pyfunction!(fill_masks, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("TokenError", m.py().get_type::<TokenError>())?;
    Ok(())
}
