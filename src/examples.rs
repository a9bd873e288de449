//! Worked examples for the prompt: loading (`--examples FILE.jsonl`), checking them
//! against the schema, and picking K of them for a document.
//!
//! A line is `{"text": ..., "expected": ...}`, or a dataset line (`{id, text, schema,
//! expected, schema_name}`). A dataset line whose `schema` differs from the schema
//! being extracted is left out (one file can serve several schemas); every other
//! line's `expected` must be valid under the schema, or loading fails naming the line.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::engine::prompt::Example;
use crate::validate::{Validator, Verdict};

/// An example as loaded, with what the picker needs to keep it apart from the record
/// being measured.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub id: Option<String>,
    pub example: Example,
}

/// How `pick` chooses K examples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pick {
    /// The K examples most similar to the document (BM25 over lowercase words).
    #[default]
    Bm25,
    /// The first K examples of the file, the same for every document (the whole
    /// examples block is then part of the prefix shared by a batch).
    First,
}

/// The schema without its `x-formwork-source` marks. They bind a value to the record's
/// own text, so they are no part of which schema an example line belongs to
/// (`--source-strings` adds them to the record's schema, never to the examples').
fn without_source_marks(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != crate::validate::source::KEYWORD)
                .map(|(k, v)| (k.clone(), without_source_marks(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_source_marks).collect()),
        v => v.clone(),
    }
}

/// Read the examples for `schema` from `path`. `validator` is the schema's validator.
pub fn load(path: &Path, schema: &Value, validator: &Validator) -> anyhow::Result<Vec<Loaded>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("examples {}", path.display()))?;
    let mut out = Vec::new();
    let unmarked = without_source_marks(schema);
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("examples {}:{}", path.display(), i + 1);
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
        if let Some(s) = v.get("schema") {
            if without_source_marks(s) != unmarked {
                continue;
            }
        }
        let text = v
            .get("text")
            .and_then(Value::as_str)
            .with_context(|| format!("{}: needs a string `text`", at()))?
            .to_string();
        let expected = v
            .get("expected")
            .cloned()
            .with_context(|| format!("{}: needs `expected`", at()))?;
        let compact = serde_json::to_string(&expected)?;
        match validator.check(&compact) {
            Verdict::Valid(_) => {}
            Verdict::NotJson(e) => anyhow::bail!("{}: `expected` is not JSON: {e}", at()),
            Verdict::SchemaInvalid(errs) | Verdict::SemanticInvalid(errs) => {
                let first = errs.first().map_or(String::new(), |e| {
                    let loc = e.loc_string();
                    format!(
                        ": {} at `{}`",
                        e.msg,
                        if loc.is_empty() { "(root)" } else { &loc }
                    )
                });
                anyhow::bail!(
                    "{}: `expected` does not fit the schema ({} error{}{first})",
                    at(),
                    errs.len(),
                    if errs.len() == 1 { "" } else { "s" }
                );
            }
        }
        let id = v.get("id").map(|x| match x {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        out.push(Loaded {
            id,
            example: Example { text, expected },
        });
    }
    Ok(out)
}

/// Lowercase alphanumeric words.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// K examples for `document`, never one whose text is the document or whose id is
/// `exclude_id` (the record being measured). BM25 puts the best match last, nearest
/// to the document.
pub fn pick(
    pool: &[Loaded],
    document: &str,
    exclude_id: Option<&str>,
    k: usize,
    how: Pick,
) -> Vec<Example> {
    let doc = document.trim();
    let eligible: Vec<&Loaded> = pool
        .iter()
        .filter(|l| l.example.text.trim() != doc)
        .filter(|l| exclude_id.is_none() || l.id.as_deref() != exclude_id)
        .collect();
    if k == 0 || eligible.is_empty() {
        return Vec::new();
    }
    match how {
        Pick::First => eligible.iter().take(k).map(|l| l.example.clone()).collect(),
        Pick::Bm25 => {
            let scores = bm25(&eligible, document);
            let mut order: Vec<usize> = (0..eligible.len()).collect();
            // Best first; ties keep file order, so the pick is deterministic.
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            order.truncate(k);
            order.reverse();
            order.iter().map(|&i| eligible[i].example.clone()).collect()
        }
    }
}

/// Okapi BM25 (k1 = 1.2, b = 0.75) of each example's text against the query's words.
fn bm25(pool: &[&Loaded], query: &str) -> Vec<f64> {
    let docs: Vec<Vec<String>> = pool.iter().map(|l| words(&l.example.text)).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let mut q = words(query);
    q.sort();
    q.dedup();
    let df = |t: &str| docs.iter().filter(|d| d.iter().any(|w| w == t)).count() as f64;
    let idf: Vec<f64> = q
        .iter()
        .map(|t| {
            let d = df(t);
            ((n - d + 0.5) / (d + 0.5) + 1.0).ln()
        })
        .collect();
    docs.iter()
        .map(|d| {
            let len = d.len() as f64;
            q.iter()
                .zip(&idf)
                .map(|(t, idf)| {
                    let tf = d.iter().filter(|w| *w == t).count() as f64;
                    idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ex(id: &str, text: &str) -> Loaded {
        Loaded {
            id: Some(id.into()),
            example: Example {
                text: text.into(),
                expected: json!({}),
            },
        }
    }

    #[test]
    fn bm25_picks_the_most_similar_last_and_never_the_record() {
        let pool = vec![
            ex("a", "book a table for two in Paris"),
            ex("b", "what is the weather in Paris tomorrow"),
            ex("c", "rate this novel four stars"),
            ex("d", "weather forecast for Rome next week"),
        ];
        let got = pick(&pool, "weather in Rome tomorrow", None, 2, Pick::Bm25);
        let texts: Vec<&str> = got.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts.len(), 2);
        assert!(texts.iter().all(|t| t.contains("weather")), "{texts:?}");
        // The record's own id and its own text are never picked.
        let got = pick(
            &pool,
            "rate this novel four stars",
            Some("b"),
            4,
            Pick::Bm25,
        );
        assert_eq!(got.len(), 2);
        assert!(got
            .iter()
            .all(|e| !e.text.contains("novel") && !e.text.contains("weather in Paris")));
        // First: file order, the same whatever the document.
        let got = pick(&pool, "anything", None, 2, Pick::First);
        assert_eq!(got[0].text, pool[0].example.text);
        assert_eq!(got[1].text, pool[1].example.text);
    }
}

#[cfg(test)]
mod source_marks {
    use super::*;
    use serde_json::json;

    /// `--source-strings` marks the record's schema; dataset-line examples of the same
    /// schema (unmarked) still belong to it, and lines of another schema still do not.
    #[test]
    fn examples_of_a_schema_still_match_it_once_source_strings_mark_it() {
        let schema =
            json!({"type": "object", "properties": {"city": {"type": ["string", "null"]}}});
        let marked = crate::engine::source::mark_free_text(
            &schema,
            formwork_grammar::source::SourceMode::Words,
        );
        assert_ne!(marked, schema);
        let other = json!({"type": "object", "properties": {"town": {"type": ["string", "null"]}}});
        let dir = std::env::temp_dir().join(format!("formwork-ex-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ex.jsonl");
        let line = |s: &Value, text: &str, e: Value| {
            json!({"text": text, "schema": s, "expected": e}).to_string() + "\n"
        };
        std::fs::write(
            &path,
            line(&schema, "I live in Rome", json!({"city": "Rome"}))
                + &line(&other, "I live in Oslo", json!({"town": "Oslo"})),
        )
        .unwrap();
        let validator = Validator::new(&marked).unwrap();
        let got = load(&path, &marked, &validator).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].example.text, "I live in Rome");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
