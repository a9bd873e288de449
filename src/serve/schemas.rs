//! Compiled schemas, keyed by the schema's one hash ([`crate::engine::schema_sha256`]:
//! compact text, keys in the order given, as `extract` reports it), so a repeated schema
//! costs one hash. Compilation runs on
//! tokio's blocking pool, never on an engine thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Semaphore;

use formwork_grammar::compile::CompileError;
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::TokTrie;
use serde_json::Value;

use super::error::{quote, ApiError};
use super::lock;
use crate::engine::schema_hash::{canonical, schema_sha256, sha256_hex};
use crate::engine::tools::{compile_toolbox, ToolChoice, ToolDef, Toolbox, ToolsError};
use crate::engine::Schema;
use crate::validate::Validator;

/// A schema ready to serve.
pub struct Compiled {
    pub sha256: String,
    pub value: Value,
    pub grammar: Arc<Grammar>,
    pub validator: std::sync::Arc<Validator>,
    /// Output tokens of the shortest valid answer (an upper bound: see
    /// `Matcher::min_completion_tokens`).
    pub min_tokens: usize,
    pub compile_ms: f64,
}

/// The cache. It holds at most `cap` schemas and starts over when full.
pub struct SchemaCache {
    map: Mutex<HashMap<String, Arc<Compiled>>>,
    cap: usize,
    compiler: Arc<Compiler>,
}

/// The compile semaphore before tokio's blocking pool: at most `--compile-slots`
/// schemas (or tool sets) compile at once, however many requests bring new ones. A
/// request waits for a slot holding its admission permit, so a full queue refuses a
/// new schema before anything compiles it.
pub struct Compiler {
    slots: Arc<Semaphore>,
}

impl Compiler {
    pub fn new(slots: usize) -> Compiler {
        Compiler {
            slots: Arc::new(Semaphore::new(slots.max(1))),
        }
    }

    /// Runs `f` on the blocking pool once a slot is free. The slot is held until `f`
    /// returns, also when the caller has gone (a compile cannot be stopped half-way).
    /// Counts each compile in `formwork_schema_compiles_total`.
    pub async fn run<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let slot = self.slots.clone().acquire_owned().await.map_err(|e| {
            ApiError::internal(format!("the {what} compiler's semaphore is closed: {e}"))
        })?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            metrics::counter!("formwork_schema_compiles_total").increment(1);
            f()
        })
        .await
        .map_err(|e| ApiError::internal(format!("the {what} compiler failed: {e}")))
    }
}

impl SchemaCache {
    pub fn new(cap: usize, compiler: Arc<Compiler>) -> SchemaCache {
        SchemaCache {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
            compiler,
        }
    }

    fn get(&self, sha: &str) -> Option<Arc<Compiled>> {
        lock(&self.map).get(sha).cloned()
    }

    fn put(&self, c: Arc<Compiled>) {
        let mut m = lock(&self.map);
        if m.len() >= self.cap {
            m.clear();
        }
        m.insert(c.sha256.clone(), c);
    }

    /// Test hook: poisons the map's lock.
    #[cfg(debug_assertions)]
    pub fn poison(&self) {
        super::poison(&self.map);
    }

    /// The compiled schema and whether it came from the cache. `name` is the
    /// `response_format` name quoted in errors.
    pub async fn get_or_compile(
        self: &Arc<Self>,
        name: &str,
        schema: Value,
        trie: Arc<TokTrie>,
    ) -> Result<(Arc<Compiled>, bool), ApiError> {
        let sha = schema_sha256(&schema);
        if let Some(c) = self.get(&sha) {
            metrics::counter!("formwork_schema_cache_hits_total").increment(1);
            return Ok((c, true));
        }
        metrics::counter!("formwork_schema_cache_misses_total").increment(1);
        let name = name.to_string();
        let sha2 = sha.clone();
        let compiled = self
            .compiler
            .run("schema", move || compile(&name, schema, sha2, &trie))
            .await??;
        let c = Arc::new(compiled);
        self.put(c.clone());
        Ok((c, false))
    }
}

fn prefix(name: &str) -> String {
    format!(
        "Invalid schema for response_format '{}':",
        super::error::quote(name)
    )
}

fn compile(
    name: &str,
    value: Value,
    sha256: String,
    trie: &Arc<TokTrie>,
) -> Result<Compiled, ApiError> {
    let started = Instant::now();
    let mut schema = Schema::new(value.clone()).map_err(|e| {
        ApiError::bad(
            "invalid_schema",
            "response_format",
            format!("{} {e:#}", prefix(name)),
        )
    })?;
    let grammar = schema.grammar().map_err(|e| compile_error(name, e))?;
    let min_tokens = Matcher::new(grammar.clone(), trie.clone()).min_completion_tokens();
    if min_tokens >= (u32::MAX / 2) as usize {
        return Err(ApiError::bad(
            "invalid_schema",
            "response_format",
            format!(
                "{} the model's vocabulary cannot spell every valid answer",
                prefix(name)
            ),
        ));
    }
    Ok(Compiled {
        sha256,
        value,
        grammar,
        validator: schema.validator,
        min_tokens,
        compile_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// The 400 for a schema the grammar refuses: the keyword and its JSON Pointer, or
/// the limit and the value.
pub fn compile_error(name: &str, e: CompileError) -> ApiError {
    schema_error(&prefix(name), "response_format", "invalid_schema", e)
}

/// A schema the grammar cannot compile, at `param`: the keyword and JSON Pointer of what
/// it does not support, the limit it is over, or else `code` with the compiler's words.
fn schema_error(p: &str, param: &str, code: &'static str, e: CompileError) -> ApiError {
    let at = |pointer: &str| if pointer.is_empty() { "" } else { pointer }.to_string();
    match e {
        CompileError::Unsupported {
            keyword,
            pointer,
            why,
        } => ApiError::bad(
            "unsupported_schema_keyword",
            param,
            format!(
                "{p} keyword '{keyword}' at JSON Pointer '{}' is not supported: {why}",
                at(&pointer)
            ),
        ),
        CompileError::Limit {
            what,
            given,
            limit,
            pointer,
        } => ApiError::bad(
            "schema_too_complex",
            param,
            format!(
                "{p} the schema is too complex: {what} {given} is over the limit of {limit}{}",
                if pointer.is_empty() {
                    String::new()
                } else {
                    format!(" (at JSON Pointer '{pointer}')")
                }
            ),
        ),
        other => ApiError::bad(code, param, format!("{p} {other}")),
    }
}

/// The compiled tools of a request (with its `tool_choice`, `parallel_tool_calls` and
/// answer schema), ready to serve: the turn's grammar and a validator per tool.
pub struct CompiledTools {
    pub sha256: String,
    pub toolbox: Toolbox,
    /// Output tokens of the shortest valid turn.
    pub min_tokens: usize,
    pub compile_ms: f64,
}

/// Compiled tool sets, keyed by the [`schema_sha256`] of the tools, choice, parallel
/// flag and answer schema: an agent sends the same tools on every turn, so its turns
/// share one grammar and its masks. At most `cap` entries; starts over when full.
pub struct ToolCache {
    map: Mutex<HashMap<String, Arc<CompiledTools>>>,
    cap: usize,
    compiler: Arc<Compiler>,
}

impl ToolCache {
    pub fn new(cap: usize, compiler: Arc<Compiler>) -> ToolCache {
        ToolCache {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
            compiler,
        }
    }

    /// Test hook: poisons the map's lock.
    #[cfg(debug_assertions)]
    pub fn poison(&self) {
        super::poison(&self.map);
    }

    /// The compiled tools and whether they came from the cache. `answer` is the
    /// final answer's schema and validator (`response_format`), if any.
    pub async fn get_or_compile(
        self: &Arc<Self>,
        tools: &[ToolDef],
        choice: &ToolChoice,
        parallel: bool,
        answer: Option<(Value, Arc<Validator>)>,
        trie: Arc<TokTrie>,
    ) -> Result<(Arc<CompiledTools>, bool), ApiError> {
        // Each schema in its canonical form (crate::engine::schema_hash), the rest as is.
        let key = serde_json::json!({
            "tools": tools.iter().map(|t| serde_json::json!({
                "name": t.name, "parameters": canonical(&t.parameters),
            })).collect::<Vec<_>>(),
            "choice": format!("{choice:?}"),
            "parallel": parallel,
            "answer": answer.as_ref().map(|(v, _)| canonical(v)),
        });
        let sha = sha256_hex(key.to_string().as_bytes());
        if let Some(c) = lock(&self.map).get(&sha).cloned() {
            metrics::counter!("formwork_tools_cache_hits_total").increment(1);
            return Ok((c, true));
        }
        metrics::counter!("formwork_tools_cache_misses_total").increment(1);
        let tools = tools.to_vec();
        let choice = choice.clone();
        let sha2 = sha.clone();
        let compiled = self
            .compiler
            .run("tool", move || {
                let started = Instant::now();
                let toolbox = compile_toolbox(
                    &tools,
                    &choice,
                    parallel,
                    answer.as_ref().map(|(v, val)| (v, val.clone())),
                )
                .map_err(|e| tools_error(&tools, e))?;
                let min_tokens =
                    Matcher::new(toolbox.grammar.clone(), trie.clone()).min_completion_tokens();
                if min_tokens >= (u32::MAX / 2) as usize {
                    return Err(ApiError::bad(
                        "invalid_function_parameters",
                        "tools",
                        "The model's vocabulary cannot spell every valid call of these tools.",
                    ));
                }
                Ok(CompiledTools {
                    sha256: sha2,
                    toolbox,
                    min_tokens,
                    compile_ms: started.elapsed().as_secs_f64() * 1000.0,
                })
            })
            .await??;
        let c = Arc::new(compiled);
        let mut m = lock(&self.map);
        if m.len() >= self.cap {
            m.clear();
        }
        m.insert(sha, c.clone());
        Ok((c, false))
    }
}

/// The 400 for tools the grammar cannot enforce: the tool, its parameter and the JSON
/// Pointer inside its `parameters`.
fn tools_error(tools: &[ToolDef], e: ToolsError) -> ApiError {
    match e {
        ToolsError::Parameters { index, name, error } => {
            let param = format!("tools[{index}].function.parameters");
            let p = format!("Invalid schema for function '{}' ('{param}'):", quote(&name));
            schema_error(&p, &param, "invalid_function_parameters", error)
        }
        ToolsError::Invalid {
            index,
            name,
            message,
        } => ApiError::bad(
            "invalid_function_parameters",
            format!("tools[{index}].function.parameters"),
            format!(
                "Invalid schema for function '{}' ('tools[{index}].function.parameters'): {message}",
                quote(&name)
            ),
        ),
        ToolsError::UnknownChoice(n) => {
            let mut e = ApiError::bad_param(
                "tool_choice",
                format!(
                    "Invalid 'tool_choice': no tool is named '{}' (the tools are: {}).",
                    quote(&n),
                    tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
            e.code = Some("unknown_tool");
            e
        }
        ToolsError::Answer(error) => compile_error("response", error),
        ToolsError::Turn(t) => ApiError::bad_param("tools", format!("Invalid 'tools': {t}.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Condvar;
    use std::time::Duration;

    /// Eight compiles on two slots: two run, the six others wait for a slot (not for
    /// a blocking thread: the pool has sixteen), and all eight finish.
    #[test]
    fn at_most_compile_slots_compiles_run_at_once() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(16)
            .enable_all()
            .build()
            .unwrap();
        let compiler = Arc::new(Compiler::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (c, running, peak, gate) = (
                    compiler.clone(),
                    running.clone(),
                    peak.clone(),
                    gate.clone(),
                );
                rt.spawn(async move {
                    c.run("schema", move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        let (open, cv) = &*gate;
                        let mut o = lock(open);
                        while !*o {
                            o = cv.wait(o).unwrap_or_else(|e| e.into_inner());
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                })
            })
            .collect();
        let mut waited = 0;
        while running.load(Ordering::SeqCst) < 2 {
            assert!(waited < 1000, "the first two compiles never started");
            std::thread::sleep(Duration::from_millis(10));
            waited += 1;
        }
        // Room for a third to start, were the slots not kept.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(running.load(Ordering::SeqCst), 2);
        *lock(&gate.0) = true;
        gate.1.notify_all();
        let done = rt.block_on(async {
            let mut n = 0;
            for t in tasks {
                t.await.unwrap().unwrap();
                n += 1;
            }
            n
        });
        assert_eq!((done, peak.load(Ordering::SeqCst)), (8, 2));
    }

    /// A panic while a cache's lock is held poisons it; the cache goes on working
    /// (a hit after a put), instead of missing for ever.
    #[test]
    fn a_poisoned_cache_lock_recovers() {
        let cache = SchemaCache::new(4, Arc::new(Compiler::new(1)));
        cache.poison();
        assert!(
            cache.map.lock().is_err(),
            "the hook did not poison the lock"
        );
        let value = serde_json::json!({"type": "object"});
        let mut schema = Schema::new(value.clone()).unwrap();
        let grammar = schema.grammar().unwrap();
        cache.put(Arc::new(Compiled {
            sha256: "s".into(),
            value,
            grammar,
            validator: schema.validator,
            min_tokens: 2,
            compile_ms: 0.0,
        }));
        assert_eq!(cache.get("s").map(|c| c.min_tokens), Some(2));
    }
}
