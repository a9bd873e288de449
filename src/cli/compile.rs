//! `formwork compile`: compile a schema into its automaton; report sizes and time, or the
//! unsupported keyword at its JSON Pointer; optionally replay a text through the matcher.
//!
//! ```text
//! formwork compile --schema S [--model M | --tokenizer-from M] [--json] [--explain]
//!                  [--lenient] [--step-limit N] [--accepts FILE|-] [--canonicalize]
//! ```
//! The report gives the compile steps the schema took (`Limits::steps`, default 200M): a
//! count of work, the same on every machine, so `--step-limit` set to it compiles the
//! schema and one fewer is the step limit error.
//! Exit codes: 0 compiled (and, with `--accepts`, the text accepted to the end), 1 the
//! text was refused, 2 unsupported schema or bad input.
//!
//! `--accepts` replays the text byte by byte through the automaton and, with a model, token
//! by token (the model's own tokenizer) through a `Matcher`, checking each token against
//! the mask. `--canonicalize` first re-serialises the text compactly with object keys in
//! the order of the schema's `properties` (keys the schema doesn't list keep their order,
//! after the listed ones), which is what generation produces. Trailing whitespace (a final
//! newline) is dropped before the replay.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use formwork_grammar::compile::{compile, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::toktrie::{TokTrie, TokenSet};
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// The JSON Schema file (`-` for standard input).
    #[arg(long)]
    pub schema: String,
    /// A model whose tokenizer the token replay uses (registry name, .gguf path, or repo id).
    #[arg(long, alias = "tokenizer-from")]
    pub model: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print the IR and the automaton sizes.
    #[arg(long)]
    pub explain: bool,
    /// Relax what the grammar cannot enforce (the validator alone enforces it) instead of failing.
    #[arg(long)]
    pub lenient: bool,
    /// The compile step budget (a count of work, not time; default 200000000): over it,
    /// the schema is refused with the step limit error, exit 2.
    #[arg(long, value_name = "N")]
    pub step_limit: Option<u64>,
    /// Replay this text (a file, or `-` for standard input) through the matcher.
    #[arg(long)]
    pub accepts: Option<String>,
    /// With --accepts: re-serialise the text compactly, in schema property order, first.
    #[arg(long)]
    pub canonicalize: bool,
}

fn read_input(spec: &str) -> anyhow::Result<Vec<u8>> {
    if spec == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        Ok(buf)
    } else {
        std::fs::read(spec).with_context(|| format!("reading {spec}"))
    }
}

/// The schema `true`: anything goes.
static ANY: Value = Value::Bool(true);

/// Re-serialise `v` compactly with object keys in the order of `schema`'s `properties`.
fn canonical(v: &Value, schema: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let mut out = serde_json::Map::new();
            if let Some(props) = props {
                for (k, sub) in props {
                    if let Some(x) = map.get(k) {
                        out.insert(k.clone(), canonical(x, sub));
                    }
                }
            }
            let extra = schema.get("additionalProperties").unwrap_or(&ANY);
            for (k, x) in map {
                if !out.contains_key(k) {
                    out.insert(k.clone(), canonical(x, extra));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&ANY);
            Value::Array(items.iter().map(|x| canonical(x, item_schema)).collect())
        }
        other => other.clone(),
    }
}

pub fn run(args: CompileArgs) -> anyhow::Result<ExitCode> {
    let raw = match read_input(&args.schema) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let schema: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {}: not JSON: {e}", args.schema);
            return Ok(ExitCode::from(2));
        }
    };
    let mut cfg = Config {
        lenient: args.lenient,
        ..Config::default()
    };
    if let Some(n) = args.step_limit {
        cfg.limits.steps = n;
    }
    let t0 = Instant::now();
    let automaton = match compile(&schema, &cfg) {
        Ok(a) => a,
        Err(e) => {
            let us = t0.elapsed().as_micros();
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"ok": false, "error": e.to_string(), "compile_us": us})
                );
            } else {
                println!("error: {e}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    let compile_us = t0.elapsed().as_micros();
    let stats = automaton.stats();
    let relaxed: Vec<Value> = automaton
        .relaxed()
        .iter()
        .map(|r| serde_json::json!({"keyword": r.keyword, "pointer": r.pointer, "why": r.why}))
        .collect();
    let mut report = serde_json::json!({
        "ok": true,
        "compile_us": compile_us,
        "compile_steps": stats.steps,
        "ir_nodes": stats.nodes,
        "dfas": stats.dfas,
        "dfa_states": stats.dfa_states,
        "bytes": stats.bytes,
        "shortest_instance_bytes": stats.min_len,
        "relaxed": relaxed,
    });
    if !args.json {
        println!(
            "ok: {} IR nodes, {} DFA states in {} DFAs, ~{} KiB, shortest instance {} bytes, compiled in {} steps, {:.2} ms",
            stats.nodes,
            stats.dfa_states,
            stats.dfas,
            stats.bytes / 1024,
            stats.min_len,
            stats.steps,
            compile_us as f64 / 1000.0
        );
        for r in automaton.relaxed() {
            println!(
                "relaxed: `{}` at {:?} (the validator alone enforces it): {}",
                r.keyword, r.pointer, r.why
            );
        }
    }
    if args.explain {
        print!("{}", automaton.explain());
    }

    let mut code = ExitCode::SUCCESS;
    if let Some(spec) = &args.accepts {
        let mut text = match read_input(spec) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e:#}");
                return Ok(ExitCode::from(2));
            }
        };
        // A final newline (as editors save files) is not part of the instance.
        while text.last().is_some_and(|b| b.is_ascii_whitespace()) {
            text.pop();
        }
        if args.canonicalize {
            let v: Value = match serde_json::from_slice(&text) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("error: --canonicalize: {spec} is not JSON: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            text = serde_json::to_vec(&canonical(&v, &schema))?;
        }
        let prefix = automaton.accepted_prefix(&text);
        let accepted = automaton.accepts(&text);
        let bytes_report = if accepted {
            serde_json::json!({"accepted": true, "bytes": text.len()})
        } else if prefix == text.len() {
            serde_json::json!({"accepted": false, "incomplete_at": prefix, "bytes": text.len()})
        } else {
            serde_json::json!({"accepted": false, "refused_at": prefix, "bytes": text.len()})
        };
        if !args.json {
            if accepted {
                println!("bytes: accepted ({} bytes)", text.len());
            } else if prefix == text.len() {
                println!("bytes: refused: the text ends at byte {prefix} before the instance is complete");
            } else {
                let ctx = String::from_utf8_lossy(
                    &text[prefix.saturating_sub(20)..(prefix + 1).min(text.len())],
                )
                .into_owned();
                println!("bytes: refused at byte offset {prefix} (…{ctx})");
            }
        }
        report["bytes_replay"] = bytes_report;
        if !accepted {
            code = ExitCode::from(1);
        }
        if let Some(model) = &args.model {
            let loaded = formwork_models::runtime::load(model, "cpu".parse()?)
                .with_context(|| format!("loading the tokenizer of {model}"))?;
            let tok = &loaded.tokenizer;
            let special: Vec<bool> = (0..tok.vocab_size() as u32)
                .map(|i| tok.is_special(i))
                .collect();
            let trie = Arc::new(TokTrie::new(
                tok.token_bytes().to_vec(),
                &special,
                tok.eos_ids(),
            ));
            let s = String::from_utf8_lossy(&text).into_owned();
            let ids = tok.encode_plain(&s)?;
            let mut m = Matcher::new(Grammar::new(automaton.clone()), trie.clone());
            let mut mask = TokenSet::new(trie.vocab_size());
            let mut offset = 0usize;
            let mut refused: Option<(usize, usize, u32)> = None;
            for (i, &id) in ids.iter().enumerate() {
                m.compute_mask(&mut mask);
                if !mask.contains(id) || m.commit(id).is_err() {
                    refused = Some((i, offset, id));
                    break;
                }
                offset += trie.token_bytes(id).len();
            }
            let ends = refused.is_none() && m.is_accepting();
            let tok_report = match refused {
                None => serde_json::json!({"accepted": ends, "tokens": ids.len()}),
                Some((i, off, id)) => {
                    serde_json::json!({"accepted": false, "refused_token_index": i, "refused_at": off, "token": id, "tokens": ids.len()})
                }
            };
            if !args.json {
                match refused {
                    None if ends => println!(
                        "tokens: accepted ({} tokens, {} tokenizer)",
                        ids.len(),
                        loaded.name
                    ),
                    None => println!(
                        "tokens: all {} tokens allowed, but the instance is incomplete",
                        ids.len()
                    ),
                    Some((i, off, id)) => println!(
                        "tokens: token {i} (id {id}, {:?}) refused at byte offset {off}",
                        String::from_utf8_lossy(trie.token_bytes(id))
                    ),
                }
            }
            report["token_replay"] = tok_report;
            if !ends {
                code = ExitCode::from(1);
            }
        }
    }
    if args.json {
        println!("{report}");
    }
    Ok(code)
}
