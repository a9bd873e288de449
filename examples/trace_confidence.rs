//! Prints what one extraction's confidence is made of: every token the model chose
//! with its probability under the mask, the odds of `null` where it competed, the
//! grounded values taken back, and the resulting confidence per value.
//!
//! `cargo run --release --example trace_confidence -- MODEL DATASET.jsonl RECORD_ID [EXAMPLES.jsonl]`
//! (with examples: three picked by BM25, and `--grounded=distinct`, as the measured
//! best setting of `formwork bench`).

use formwork::engine::ground::GroundMode;
use formwork::engine::{Engine, ExtractOptions, Schema};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() == 4 || args.len() == 5,
        "usage: trace_confidence MODEL DATASET.jsonl RECORD_ID [EXAMPLES.jsonl]"
    );
    let line = std::fs::read_to_string(&args[2])?
        .lines()
        .find(|l| l.contains(&format!("\"id\": \"{}\"", args[3])))
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no record {}", args[3]))?;
    let rec: serde_json::Value = serde_json::from_str(&line)?;
    let mut engine = Engine::new(formwork::load_model(&args[1], "auto".parse().unwrap())?);
    let mut schema = Schema::new(rec["schema"].clone())?;
    let text = rec["text"].as_str().unwrap_or_default();
    let examples = match args.get(4) {
        Some(path) => {
            let pool = formwork::examples::load(path.as_ref(), &schema.value, &schema.validator)?;
            formwork::examples::pick(&pool, text, Some(&args[3]), 3, Default::default())
        }
        None => Vec::new(),
    };
    let opts = ExtractOptions {
        max_tokens: 256,
        examples,
        grounded: Some(GroundMode::Distinct),
        ..Default::default()
    };
    let ex = engine.extract(&mut schema, text, &opts);
    println!(
        "document: {text}\nexpected: {}\noutput:   {}",
        rec["expected"], ex.text
    );
    let bytes = ex.text.as_bytes();
    let show = |at: usize, len: usize| {
        let end = (at + len).min(bytes.len());
        String::from_utf8_lossy(&bytes[at.min(end)..end]).into_owned()
    };
    for c in &ex.probs.chosen {
        println!(
            "  chose {:>4} {:<24} p {:.4}",
            c.at,
            format!("{:?}", show(c.at, c.len)),
            c.p
        );
    }
    for o in &ex.probs.odds {
        println!(
            "  null competes at {:>4}: P(null) {:.4}, best other {:.4}",
            o.at, o.null, o.value
        );
    }
    for t in &ex.probs.taken_back {
        println!(
            "  taken back at {:>4} (length {}): p {:.4}",
            t.at, t.len, t.p
        );
    }
    for (k, c) in &ex.confidence {
        println!("  {k:<32} {c:.4}");
    }
    Ok(())
}
