//! `formwork validate --schema S [FILE|-] [--tolerant] [--json] [--source DOC]`
//!
//! Exit codes: 0 valid; 1 invalid for the schema or for its `x-formwork-rules`; 2 the input
//! is not JSON, or the schema is unusable (one line on stderr).
//!
//! Text output (stdout) is pydantic's layout, "2 validation errors for Decisione"; `--json`
//! prints one object whose `verdict` keeps the kinds apart: `valid`, `schema_invalid`,
//! `semantic_invalid` or `not_json`.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::validate::{render_pydantic, Validator, Verdict};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// The JSON Schema file (draft from `$schema`, default 2020-12; may carry x-formwork-rules).
    #[arg(long, value_name = "S")]
    pub schema: PathBuf,
    /// The text to check; `-` or nothing reads standard input.
    #[arg(value_name = "FILE|-")]
    pub input: Option<PathBuf>,
    /// Accept JSON inside surrounding text or a markdown fence (reported on stderr and in --json).
    #[arg(long)]
    pub tolerant: bool,
    /// Print the verdict as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The source document: every `x-formwork-source` string must be a span of it
    /// (a `semantic` error typed `not_in_source` otherwise). Without it the keyword is
    /// not checked.
    #[arg(long, value_name = "FILE")]
    pub source: Option<PathBuf>,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let schema_text = std::fs::read_to_string(&args.schema)
        .with_context(|| format!("reading schema {}", args.schema.display()))?;
    let schema: serde_json::Value = serde_json::from_str(&schema_text).map_err(|e| {
        anyhow::anyhow!(
            "schema {} is not JSON: {}",
            args.schema.display(),
            crate::validate::ParseError::from_serde(&e)
        )
    })?;
    let validator = match &args.source {
        Some(p) => {
            let doc = std::fs::read_to_string(p)
                .with_context(|| format!("reading source document {}", p.display()))?;
            Validator::with_source(&schema, &doc)
        }
        None => Validator::new(&schema),
    }
    .map_err(|e| anyhow::anyhow!("schema {}: {e}", args.schema.display()))?;

    let (text, source) = match &args.input {
        None => (read_stdin()?, "<stdin>".to_string()),
        Some(p) if p.as_os_str() == "-" => (read_stdin()?, "<stdin>".to_string()),
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading input {}", p.display()))?,
            p.display().to_string(),
        ),
    };

    let (verdict, extracted) = if args.tolerant {
        validator.check_tolerant(&text)
    } else {
        (validator.check(&text), None)
    };

    if let Some(x) = &extracted {
        let mut what = Vec::new();
        if x.stripped_fence {
            what.push("stripped a markdown fence");
        }
        if x.had_surrounding_text {
            what.push("ignored text around the JSON value");
        }
        if !what.is_empty() {
            eprintln!("note: {source}: {}", what.join(" and "));
        }
    }

    if args.json {
        let mut out = verdict.to_json();
        if let serde_json::Value::Object(m) = &mut out {
            m.insert("title".into(), validator.title().into());
            m.insert(
                "extracted".into(),
                match &extracted {
                    Some(x) => serde_json::json!({
                        "stripped_fence": x.stripped_fence,
                        "had_surrounding_text": x.had_surrounding_text,
                    }),
                    None => serde_json::Value::Null,
                },
            );
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    }

    Ok(match &verdict {
        Verdict::Valid(_) => {
            if !args.json {
                println!("valid: {source} ({})", validator.title());
            }
            ExitCode::SUCCESS
        }
        Verdict::SchemaInvalid(errors) | Verdict::SemanticInvalid(errors) => {
            if !args.json {
                println!("{}", render_pydantic(validator.title(), errors));
            }
            ExitCode::from(1)
        }
        Verdict::NotJson(e) => {
            eprintln!("error: {source} is not JSON: {e}");
            ExitCode::from(2)
        }
    })
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("reading standard input")?;
    Ok(s)
}
