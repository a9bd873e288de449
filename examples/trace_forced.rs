//! Prints how one extraction's output was tokenised and fed: every token between
//! `|`, jump-forward spans in `[ ]`, and the tokenizer's own encoding of the same
//! text below it, with the forced-text split before healing and after.
//!
//! `cargo run --release --example trace_forced -- MODEL DATASET.jsonl RECORD_ID [EXAMPLES.jsonl]`
//! (with examples: the first three, as `formwork bench --shots 3 --pick first`).

use formwork::engine::{Engine, ExtractOptions, Schema};

fn show(
    tok: &formwork_models::tokenizer::GgufTokenizer,
    ids: &[u32],
    ranges: &[(usize, usize)],
) -> String {
    let mut s = String::new();
    for (i, &t) in ids.iter().enumerate() {
        if ranges.iter().any(|&(a, _)| a == i) {
            s.push('[');
        }
        s.push_str(&String::from_utf8_lossy(&tok.token_bytes()[t as usize]));
        if ranges.iter().any(|&(_, b)| b == i + 1) {
            s.push(']');
        }
        s.push('|');
    }
    s
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() == 4 || args.len() == 5,
        "usage: trace_forced MODEL DATASET.jsonl RECORD_ID [EXAMPLES.jsonl]"
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
            formwork::examples::pick(
                &pool,
                text,
                Some(&args[3]),
                3,
                formwork::examples::Pick::First,
            )
        }
        None => Vec::new(),
    };
    for heal in [false, true] {
        let opts = ExtractOptions {
            heal_forced: heal,
            max_tokens: 256,
            examples: examples.clone(),
            ..Default::default()
        };
        let ex = engine.extract(&mut schema, text, &opts);
        let tok = &engine.model().tokenizer;
        let canon = tok.encode_plain(&ex.text)?;
        println!(
            "heal_forced={heal}: {} forced spans, {} not canonical; tokens canonical: {}",
            ex.forced_spans, ex.forced_spans_noncanonical, !ex.noncanonical
        );
        println!("  fed:       {}", show(tok, &ex.tokens, &ex.forced_ranges));
        println!("  tokenizer: {}", show(tok, &canon, &[]));
    }
    Ok(())
}
