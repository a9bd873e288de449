//! The dataset and the modes: reads the JSONL file (`{id, text, schema, expected}`
//! a line, plus an optional `schema_name`) into `Case`s, spreads a sample evenly over
//! it, and names the `BenchMode`s a record runs in.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

/// A benchmark mode: masked, free, or masked without jump-forward (to measure
/// what jump-forward saves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchMode {
    Masked,
    Free,
    MaskedNoJf,
    /// Jump-forward with the forced text tokenised alone, not together with the
    /// sampled token before it (the split without healing), for comparison.
    MaskedUnhealed,
}

impl std::str::FromStr for BenchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "masked" => Ok(BenchMode::Masked),
            "free" => Ok(BenchMode::Free),
            "masked-nojf" | "masked_nojf" => Ok(BenchMode::MaskedNoJf),
            "masked-unhealed" | "masked_unhealed" => Ok(BenchMode::MaskedUnhealed),
            other => Err(format!(
                "unknown mode `{other}`: use masked, free, masked-nojf or masked-unhealed"
            )),
        }
    }
}

impl BenchMode {
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::Masked => "masked",
            BenchMode::Free => "free",
            BenchMode::MaskedNoJf => "masked-nojf",
            BenchMode::MaskedUnhealed => "masked-unhealed",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    pub schema_name: String,
    pub text: String,
    pub schema: Value,
    pub expected: Value,
}

/// Read a dataset; a malformed line is an error naming its line number.
pub fn read_dataset(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("dataset {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let field = |k: &str| {
            v.get(k)
                .cloned()
                .with_context(|| format!("{}:{}: missing field `{k}`", path.display(), i + 1))
        };
        let id = match field("id")? {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let text = field("text")?
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("{}:{}: `text` must be a string", path.display(), i + 1))?;
        let schema = field("schema")?;
        let schema_name = v
            .get("schema_name")
            .and_then(Value::as_str)
            .or_else(|| schema.get("title").and_then(Value::as_str))
            .unwrap_or("schema")
            .to_string();
        out.push(Case {
            id,
            schema_name,
            text,
            schema,
            expected: field("expected")?,
        });
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
    }
    Ok(out)
}

/// `n` items spread evenly over `items` (every k-th, in order), so a sample of a file
/// grouped by schema keeps every schema in proportion. Keeps all when `n` is 0 or
/// not smaller.
pub fn spread<T>(items: Vec<T>, n: usize) -> Vec<T> {
    if n == 0 || n >= items.len() {
        return items;
    }
    let step = items.len() as f64 / n as f64;
    let picks: Vec<usize> = (0..n).map(|i| (i as f64 * step) as usize).collect();
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| picks.binary_search(i).is_ok())
        .map(|(_, c)| c)
        .collect()
}
