//! Running the cases: handed the engine, the cases and the `BenchConfig`, `run`
//! plans every (mode, case) job with its options and examples, runs them serially or on
//! worker threads (`--parallel`), scores each, and summarises per mode and schema into
//! the `Report`.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;

use crate::engine::{Engine, ExtractOptions, Mode, Schema};

use super::{score, summarize, BenchMode, Case, RecordResult, Report, Summary};

/// Peak resident set size of this process (Linux: VmHWM), in MiB.
pub fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub struct BenchConfig {
    pub modes: Vec<BenchMode>,
    pub opts: ExtractOptions,
    pub exact_strings: bool,
    pub dataset_name: String,
    /// Worked examples (`--examples`): a JSONL file, read per schema.
    pub examples: Option<std::path::PathBuf>,
    /// How many examples each record gets (`--shots`).
    pub shots: usize,
    pub pick: crate::examples::Pick,
    /// Records decoded together (`--parallel`).
    pub parallel: usize,
}

/// One (mode, case) to run: its schema's key in the map and its options (examples
/// picked).
type Job<'a> = (BenchMode, &'a Case, String, ExtractOptions);

/// Every (mode, case) with its options, in the order a serial run takes them (grouped by
/// schema, so the shared prompt prefix is reused across records), and the schemas by key.
fn plan<'a>(
    cases: &'a [Case],
    cfg: &BenchConfig,
) -> anyhow::Result<(BTreeMap<String, Schema>, Vec<Job<'a>>)> {
    let mut schemas: BTreeMap<String, Schema> = BTreeMap::new();
    let mut pools: BTreeMap<String, Vec<crate::examples::Loaded>> = BTreeMap::new();
    // Group by schema so the shared prompt prefix is reused across records.
    let mut order: Vec<&Case> = cases.iter().collect();
    order.sort_by(|a, b| a.schema_name.cmp(&b.schema_name));
    let mut jobs: Vec<Job<'a>> = Vec::new();
    for &mode in &cfg.modes {
        let mut opts = cfg.opts.clone();
        opts.mode = if mode == BenchMode::Free {
            Mode::Free
        } else {
            Mode::Masked
        };
        opts.jump_forward = mode != BenchMode::MaskedNoJf && cfg.opts.jump_forward;
        opts.heal_forced = mode != BenchMode::MaskedUnhealed && cfg.opts.heal_forced;
        for case in &order {
            let key = serde_json::to_string(&case.schema)?;
            if !schemas.contains_key(&key) {
                let s = Schema::new(case.schema.clone())
                    .with_context(|| format!("case {}: schema", case.id))?;
                schemas.insert(key.clone(), s);
            }
            let schema = schemas.get_mut(&key).expect("inserted above");
            if let Some(path) = &cfg.examples {
                if !pools.contains_key(&key) {
                    let pool = crate::examples::load(path, &schema.value, &schema.validator)?;
                    anyhow::ensure!(
                        pool.len() >= cfg.shots,
                        "examples {}: {} example(s) for schema `{}`, fewer than --shots {}",
                        path.display(),
                        pool.len(),
                        case.schema_name,
                        cfg.shots
                    );
                    pools.insert(key.clone(), pool);
                }
                opts.examples = crate::examples::pick(
                    &pools[&key],
                    &case.text,
                    Some(&case.id),
                    cfg.shots,
                    cfg.pick,
                );
            }
            jobs.push((mode, case, key, opts.clone()));
        }
    }
    Ok((schemas, jobs))
}

/// The first attempt of every (mode, case) as an OpenAI chat completions request body,
/// for another server (`formwork bench --requests-out`, `benches/serve_bench.py
/// --request-file`): the messages `Engine::extract` renders (system message in the prompt
/// style, the picked examples as earlier turns, the document), greedy or the run's
/// temperature, `max_tokens`, and for the masked modes the case's schema as a strict
/// `json_schema` `response_format`. One object per job: `{id, schema_name, mode,
/// request}`.
pub fn requests(
    cases: &[Case],
    cfg: &BenchConfig,
    model: &str,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let (schemas, jobs) = plan(cases, cfg)?;
    let mut out = Vec::with_capacity(jobs.len());
    for (mode, case, key, opts) in &jobs {
        let schema = &schemas[key];
        let messages = crate::engine::extraction_messages(schema, &case.text, opts);
        let mut req = serde_json::json!({
            "model": model,
            "messages": messages,
            "max_tokens": opts.max_tokens,
            "temperature": match opts.sampling {
                crate::sampling::Sampling::Temperature { temperature, .. } => temperature,
                crate::sampling::Sampling::Greedy => 0.0,
            },
            "seed": opts.seed,
        });
        if *mode != BenchMode::Free {
            req["response_format"] = serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": case.schema_name, "strict": true, "schema": schema.value},
            });
        }
        out.push(serde_json::json!({
            "id": case.id,
            "schema_name": case.schema_name,
            "mode": mode.name(),
            "request": req,
        }));
    }
    Ok(out)
}

/// Run every case in every mode. `progress` is called after each record.
pub fn run(
    engine: &mut Engine,
    cases: &[Case],
    cfg: &BenchConfig,
    mut progress: impl FnMut(&RecordResult),
) -> anyhow::Result<Report> {
    let started = Instant::now();
    let (mut schemas, jobs) = plan(cases, cfg)?;
    let one = |engine: &mut Engine,
               schemas: &mut BTreeMap<String, Schema>,
               (mode, case, key, opts): &Job| {
        let schema = schemas
            .get_mut(key)
            .expect("every job's schema is in the map");
        let ex = engine.extract(schema, &case.text, opts);
        let mut r = score(case, *mode, &ex, cfg.exact_strings);
        r.shots = opts.examples.len();
        r
    };
    let mut records = Vec::with_capacity(jobs.len());
    let mut batching = None;
    if cfg.parallel <= 1 {
        for job in &jobs {
            let r = one(engine, &mut schemas, job);
            progress(&r);
            records.push(r);
        }
    } else {
        // Each grammar compiled once, before the workers clone the schemas.
        if cfg.modes.iter().any(|&m| m != BenchMode::Free) {
            for s in schemas.values_mut() {
                let _ = s.grammar();
            }
        }
        let mut indexed = Vec::with_capacity(jobs.len());
        let work = |engine: &mut Engine, schemas: &mut BTreeMap<String, Schema>, job| {
            one(engine, schemas, job)
        };
        let finished = crate::engine::workers::run(
            engine,
            &schemas,
            jobs.iter().collect(),
            cfg.parallel,
            "formwork-bench",
            &|| true,
            &work,
            |idx, r: RecordResult| {
                progress(&r);
                indexed.push((idx, r));
                std::ops::ControlFlow::Continue(())
            },
        )?;
        anyhow::ensure!(
            finished.panicked == 0,
            "{} bench worker(s) panicked; no report written",
            finished.panicked
        );
        // The serial run's order, whatever order the workers finished in.
        indexed.sort_by_key(|(i, _)| *i);
        records.extend(indexed.into_iter().map(|(_, r)| r));
        batching = Some((finished.stats.passes, finished.stats.mean_batch()));
    }
    let mut overall = BTreeMap::new();
    let mut per_schema: BTreeMap<String, BTreeMap<String, Summary>> = BTreeMap::new();
    for &mode in &cfg.modes {
        let rs: Vec<&RecordResult> = records.iter().filter(|r| r.mode == mode).collect();
        overall.insert(mode.name().to_string(), summarize(&rs));
        let mut names: Vec<&str> = rs.iter().map(|r| r.schema_name.as_str()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let sub: Vec<&RecordResult> = rs
                .iter()
                .copied()
                .filter(|r| r.schema_name == name)
                .collect();
            per_schema
                .entry(name.to_string())
                .or_default()
                .insert(mode.name().to_string(), summarize(&sub));
        }
    }
    Ok(Report {
        dataset: cfg.dataset_name.clone(),
        model: engine.model().name.clone(),
        seed: cfg.opts.seed,
        sampling: format!("{:?}", cfg.opts.sampling),
        exact_strings: cfg.exact_strings,
        max_tokens: cfg.opts.max_tokens,
        retries: cfg.opts.retries,
        modes: cfg.modes.clone(),
        prompt: cfg.opts.prompt,
        examples: cfg.examples.as_ref().map(|p| p.display().to_string()),
        shots: if cfg.examples.is_some() { cfg.shots } else { 0 },
        pick: cfg.pick,
        null_bias: cfg.opts.null_bias,
        grounded: cfg.opts.grounded,
        weigh_nulls: cfg.opts.weigh_nulls,
        fill_above: cfg.opts.fill_above,
        think: cfg.opts.think,
        kv_cache: engine.model().kv.name(),
        overall,
        per_schema,
        peak_rss_mb: peak_rss_mb(),
        wall_s: started.elapsed().as_secs_f64(),
        parallel: cfg.parallel.max(1),
        batched_passes: batching.map(|b| b.0),
        mean_batch: batching.map(|b| b.1),
        records,
    })
}
