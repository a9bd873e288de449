//! Compiled schemas, keyed by the sha256 of the canonical schema text (object keys
//! sorted, no whitespace), so a repeated schema costs one hash. Compilation runs on
//! tokio's blocking pool, never on an engine thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use formwork_grammar::compile::CompileError;
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::TokTrie;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::ApiError;
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
}

/// The canonical text: keys sorted at every level, compact.
pub fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sort(v)).unwrap_or_default()
}

pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl SchemaCache {
    pub fn new(cap: usize) -> SchemaCache {
        SchemaCache {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    fn get(&self, sha: &str) -> Option<Arc<Compiled>> {
        self.map.lock().ok()?.get(sha).cloned()
    }

    fn put(&self, c: Arc<Compiled>) {
        if let Ok(mut m) = self.map.lock() {
            if m.len() >= self.cap {
                m.clear();
            }
            m.insert(c.sha256.clone(), c);
        }
    }

    /// The compiled schema and whether it came from the cache. `name` is the
    /// `response_format` name quoted in errors.
    pub async fn get_or_compile(
        self: &Arc<Self>,
        name: &str,
        schema: Value,
        trie: Arc<TokTrie>,
    ) -> Result<(Arc<Compiled>, bool), ApiError> {
        let text = canonical(&schema);
        let sha = sha256_hex(&text);
        if let Some(c) = self.get(&sha) {
            metrics::counter!("formwork_schema_cache_hits_total").increment(1);
            return Ok((c, true));
        }
        metrics::counter!("formwork_schema_cache_misses_total").increment(1);
        let name = name.to_string();
        let sha2 = sha.clone();
        let compiled = tokio::task::spawn_blocking(move || compile(&name, schema, sha2, &trie))
            .await
            .map_err(|e| ApiError::internal(format!("the schema compiler failed: {e}")))??;
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
    let p = prefix(name);
    match e {
        CompileError::Unsupported {
            keyword,
            pointer,
            why,
        } => ApiError::bad(
            "unsupported_schema_keyword",
            "response_format",
            format!(
                "{p} keyword '{keyword}' at JSON Pointer '{}' is not supported: {why}",
                if pointer.is_empty() { "" } else { &pointer }
            ),
        ),
        CompileError::Limit {
            what,
            given,
            limit,
            pointer,
        } => ApiError::bad(
            "schema_too_complex",
            "response_format",
            format!(
                "{p} the schema is too complex: {what} {given} is over the limit of {limit}{}",
                if pointer.is_empty() {
                    String::new()
                } else {
                    format!(" (at JSON Pointer '{pointer}')")
                }
            ),
        ),
        other => ApiError::bad("invalid_schema", "response_format", format!("{p} {other}")),
    }
}
