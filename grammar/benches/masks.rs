//! Mask benchmark: JSONSchemaBench schemas, one valid instance each, replayed token by
//! token through the matcher, timing `compute_mask` and `commit` per token.
//!
//! ```text
//! cargo bench -p formwork-grammar --bench masks [--features llguidance-bench]
//! FORMWORK_BENCH_N=200  schemas sampled (every k-th file in sorted order; 0 = all)
//! FORMWORK_BENCH_FILTER=o21135  only schema paths containing this text
//! FORMWORK_BENCH_MODEL=smollm2  one vocabulary only (smollm2, gemma3 or qwen2.5)
//! FORMWORK_BENCH_REPEAT=50  replay each first document 50 more times, cold (for perf)
//! FORMWORK_BENCH_PROBE=75  one line per mask slower than 75 µs: time, text before, state
//! FORMWORK_SHARED=..    folder holding data/jsonschemabench (default ../shared)
//! FORMWORK_MODELS=..    folder holding smollm2-135m/, gemma3-270m/, qwen2.5-coder-0.5b/
//! ```
//!
//! Per vocabulary it prints mean/p50/p99/max of the mask time over all tokens of the
//! first document of each schema (cold cache), of a second document (same instance,
//! new matcher, warm cache), compile time p50/p99 and memory per compiled schema. With
//! the feature, llguidance replays the same tokens in the same run, and the ratios are
//! printed over the schemas both compile.
//!
//! The instance is a random walk of the automaton to acceptance (seeded per schema,
//! printable ASCII preferred). Tokens come from a greedy longest-match split with the
//! model's own vocabulary (this crate has no tokenizer; the root `formwork bench`
//! uses the real one). Runs on one thread.

#[path = "../tests/matcher_support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use formwork_grammar::compile::{compile, Config};
use formwork_grammar::matcher::{Grammar, Matcher};
use formwork_grammar::sample::random_instance;
use formwork_grammar::toktrie::{TokTrie, TokenSet};

fn shared_dir() -> PathBuf {
    std::env::var("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

fn schema_files(n: usize) -> Vec<PathBuf> {
    let root = shared_dir().join("data/jsonschemabench");
    let mut all = Vec::new();
    let Ok(dirs) = std::fs::read_dir(&root) else {
        return all;
    };
    for d in dirs.flatten() {
        if let Ok(files) = std::fs::read_dir(d.path()) {
            for f in files.flatten() {
                if f.path().extension().is_some_and(|e| e == "json") {
                    all.push(f.path());
                }
            }
        }
    }
    all.sort();
    if let Ok(f) = std::env::var("FORMWORK_BENCH_FILTER") {
        all.retain(|p| p.to_string_lossy().contains(&f));
    }
    if n == 0 || n >= all.len() {
        return all;
    }
    let step = all.len() as f64 / n as f64;
    (0..n)
        .map(|i| all[(i as f64 * step) as usize].clone())
        .collect()
}

#[derive(Default)]
struct Dist(Vec<f64>);
impl Dist {
    fn push(&mut self, us: f64) {
        self.0.push(us);
    }
    fn summary(&mut self) -> String {
        if self.0.is_empty() {
            return "n=0".into();
        }
        self.0.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = self.0.len();
        let q = |p: f64| self.0[((n as f64 * p) as usize).min(n - 1)];
        let mean = self.0.iter().sum::<f64>() / n as f64;
        format!(
            "n={n} mean={mean:.2} p50={:.2} p99={:.2} max={:.1} (us)",
            q(0.5),
            q(0.99),
            self.0[n - 1]
        )
    }
    fn p(&mut self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_by(|a, b| a.partial_cmp(b).unwrap());
        self.0[((self.0.len() as f64 * p) as usize).min(self.0.len() - 1)]
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64 / 1000.0
}

#[cfg(feature = "llguidance-bench")]
mod llg {
    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
    use llguidance::ParserFactory;
    use std::sync::Arc;

    pub struct Llg {
        pub factory: ParserFactory,
    }

    impl Llg {
        pub fn new(bytes: &[Vec<u8>], special: &[bool], eos: u32) -> Llg {
            let words: Vec<Vec<u8>> = bytes
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if special.get(i).copied().unwrap_or(false) || i as u32 == eos {
                        let mut w = vec![0xFF];
                        w.extend_from_slice(format!("<special_{i}>").as_bytes());
                        w
                    } else {
                        b.clone()
                    }
                })
                .collect();
            let info = TokRxInfo::new(words.len() as u32, eos);
            let trie = TokTrie::from(&info, &words);
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
            let mut factory = ParserFactory::new_simple(&env).unwrap();
            factory.quiet();
            Llg { factory }
        }

        /// Compact JSON, like formwork's default.
        pub fn matcher(&self, schema: &serde_json::Value) -> Option<llguidance::Matcher> {
            let mut s = schema.clone();
            if let Some(o) = s.as_object_mut() {
                o.insert(
                    "x-guidance".into(),
                    serde_json::json!({"whitespace_flexible": false}),
                );
            } else {
                return None;
            }
            let p = self
                .factory
                .create_parser(TopLevelGrammar::from_json_schema(s))
                .ok()?;
            let m = llguidance::Matcher::new(Ok(p));
            (!m.is_error()).then_some(m)
        }
    }
}

fn main() {
    let n: usize = std::env::var("FORMWORK_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let files = schema_files(n);
    if files.is_empty() {
        eprintln!(
            "SKIPPED: no schemas under {:?}; set FORMWORK_SHARED",
            shared_dir().join("data/jsonschemabench")
        );
        return;
    }
    // Profiling aids: cold first documents replayed again and again (fresh caches);
    // masks slower than the probe's µs described after each document (describing them
    // during the replay would disturb the timings).
    let repeat: usize = std::env::var("FORMWORK_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let probe: Option<f64> = std::env::var("FORMWORK_BENCH_PROBE")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut models = support::model_paths();
    if let Ok(only) = std::env::var("FORMWORK_BENCH_MODEL") {
        models.retain(|(name, _)| *name == only);
    }
    if models.is_empty() {
        eprintln!("SKIPPED: no GGUF models; set FORMWORK_MODELS");
        return;
    }
    for (name, path) in models {
        let (bytes, special, eos) = support::gguf_vocab(&path).expect("GGUF vocabulary");
        let t0 = Instant::now();
        let trie = Arc::new(TokTrie::new(bytes.clone(), &special, &eos));
        println!(
            "== {name}: {} tokens, trie nodes (full, plain, rest) {:?}, built in {:.1} ms, {} KiB, {} schemas sampled",
            trie.vocab_size(),
            trie.node_counts(),
            us(t0) / 1000.0,
            trie.memory_bytes() / 1024,
            files.len()
        );
        #[cfg(feature = "llguidance-bench")]
        let llg = {
            let t0 = Instant::now();
            let l = llg::Llg::new(&bytes, &special, eos[0]);
            println!("llguidance factory built in {:.1} ms", us(t0) / 1000.0);
            l
        };
        let (mut first, mut second, mut commit, mut compile_t, mut mem) = (
            Dist::default(),
            Dist::default(),
            Dist::default(),
            Dist::default(),
            Dist::default(),
        );
        let (mut f_common, mut l_common, mut l_compile, mut f_compile_common) = (
            Dist::default(),
            Dist::default(),
            Dist::default(),
            Dist::default(),
        );
        let (mut ok, mut failed, mut llg_ok, mut llg_refused) = (0, 0, 0, 0);
        let mut mask = TokenSet::new(trie.vocab_size());
        for (i, f) in files.iter().enumerate() {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            let Ok(schema) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            let t0 = Instant::now();
            let a = match compile(&schema, &Config::default()) {
                Ok(a) => a,
                Err(_) => {
                    failed += 1;
                    continue;
                }
            };
            let ct = us(t0);
            compile_t.push(ct);
            ok += 1;
            let Some(inst) = random_instance(&*a, i as u64 + 1, 400) else {
                failed += 1;
                continue;
            };
            let Some(tokens) = trie.greedy_tokenize(&inst) else {
                continue;
            };
            for _ in 0..repeat {
                let mut m = Matcher::new(Grammar::new(a.clone()), trie.clone());
                for &t in &tokens {
                    m.compute_mask(&mut mask);
                    m.commit(t).unwrap();
                }
            }
            let g = Grammar::new(a.clone());
            let mut per_schema = Vec::with_capacity(tokens.len());
            let mut m = Matcher::new(g.clone(), trie.clone());
            let mut slow = Vec::new();
            for &t in &tokens {
                let t1 = Instant::now();
                m.compute_mask(&mut mask);
                let d = us(t1);
                if probe.is_some_and(|p| d > p) {
                    slow.push((per_schema.len(), d));
                }
                first.push(d);
                per_schema.push(d);
                assert!(
                    mask.contains(t),
                    "{f:?}: token {t} of its own instance refused"
                );
                let t2 = Instant::now();
                m.commit(t).unwrap();
                commit.push(us(t2));
            }
            m.compute_mask(&mut mask);
            assert!(mask.contains(eos[0]), "{f:?}: instance not accepted");
            for (k, d) in slow {
                let upto: usize = tokens[..k].iter().map(|&t| trie.token_bytes(t).len()).sum();
                let tail = String::from_utf8_lossy(&inst[upto.saturating_sub(40)..upto]);
                let mut st = formwork_grammar::ByteAutomaton::start(&*a);
                for &b in &inst[..upto] {
                    st = formwork_grammar::ByteAutomaton::step(&*a, &st, b).unwrap();
                }
                let hint = (
                    formwork_grammar::ByteAutomaton::plain_chars_allowed(&*a, &st),
                    formwork_grammar::ByteAutomaton::plain_key(&*a, &st).map(|k| (k.key, k.n)),
                );
                let dbg = format!("{st:?}");
                println!(
                    "probe {d:.2} us in {:?} after ...{tail:?} hint {hint:?} tops {}",
                    f.file_name().unwrap_or_default(),
                    &dbg[dbg.len().saturating_sub(200)..]
                );
            }
            let mut m2 = Matcher::new(g.clone(), trie.clone());
            for &t in &tokens {
                let t1 = Instant::now();
                m2.compute_mask(&mut mask);
                second.push(us(t1));
                m2.commit(t).unwrap();
            }
            mem.push((a.stats().bytes + g.stats().memory_bytes) as f64 / 1024.0);
            if std::env::var_os("FORMWORK_BENCH_VERBOSE").is_some() {
                let st = g.stats();
                let worst = per_schema.iter().cloned().fold(0.0, f64::max);
                println!(
                    "  {:?}: {} tokens, first doc {:.2} ms (worst mask {:.0} us), {} states, {} transitions, {} KiB",
                    f.strip_prefix(shared_dir()).unwrap_or(f),
                    tokens.len(),
                    per_schema.iter().sum::<f64>() / 1000.0,
                    worst,
                    st.states,
                    st.transitions,
                    st.memory_bytes / 1024
                );
            }

            #[cfg(feature = "llguidance-bench")]
            {
                let t0 = Instant::now();
                let lm = llg.matcher(&schema);
                let lct = us(t0);
                if let Some(mut lm) = lm {
                    let mut times = Vec::with_capacity(tokens.len());
                    let mut refused = false;
                    for &t in &tokens {
                        let t1 = Instant::now();
                        let mk = lm.compute_mask();
                        times.push(us(t1));
                        match mk {
                            Ok(v) if v.is_allowed(t) => {}
                            _ => {
                                refused = true;
                                break;
                            }
                        }
                        if lm.consume_token(t).is_err() {
                            refused = true;
                            break;
                        }
                    }
                    if refused {
                        llg_refused += 1;
                    } else {
                        llg_ok += 1;
                        l_compile.push(lct);
                        f_compile_common.push(ct);
                        for (x, y) in per_schema.iter().zip(&times) {
                            f_common.push(*x);
                            l_common.push(*y);
                        }
                    }
                }
            }
        }
        let _ = (&mut llg_ok, &mut llg_refused);
        println!("compiled {ok}, refused/unsupported {failed}");
        println!("formwork mask, 1st document: {}", first.summary());
        println!("formwork mask, 2nd document: {}", second.summary());
        println!("formwork commit:             {}", commit.summary());
        println!("formwork compile:            {}", compile_t.summary());
        println!(
            "memory per schema (automaton + cache after 2 docs): {} KiB",
            mem.summary().replace("(us)", "(KiB)")
        );
        if llg_ok + llg_refused > 0 {
            println!(
                "side by side on {llg_ok} schemas both compile and replay ({llg_refused} instances llguidance refused):"
            );
            let (fp50, fp99, lp50, lp99) = (
                f_common.p(0.5),
                f_common.p(0.99),
                l_common.p(0.5),
                l_common.p(0.99),
            );
            println!("  formwork   mask: {}", f_common.summary());
            println!("  llguidance mask: {}", l_common.summary());
            println!(
                "  ratio llguidance/formwork: p50 {:.1}x, p99 {:.1}x",
                lp50 / fp50,
                lp99 / fp99
            );
            println!("  formwork   compile: {}", f_compile_common.summary());
            println!("  llguidance compile: {}", l_compile.summary());
        }
    }
}
