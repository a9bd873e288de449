//! Schema compiler: `serde_json::Value` (a JSON Schema) -> IR -> byte automaton.
//!
//! 1. `schema` reads the document the way the validator does (drafts 4 to 2020-12): every
//!    subschema becomes a union of typed conjunctions; `$ref` and `allOf` intersect,
//!    `anyOf`/`oneOf` distribute, children are compiled on demand into IR nodes.
//! 2. The IR ([`crate::ir`]) holds literals, exact numbers, strings with a pattern/format
//!    DFA and lengths, arrays and objects in schema order, each with its shortest text.
//! 3. [`Automaton`] steps over bytes with a stack of frames per thread; it implements
//!    [`ByteAutomaton`](crate::ByteAutomaton) for the token side.
//!
//! What the grammar cannot enforce exactly is an error ([`CompileError::Unsupported`]) at
//! its JSON Pointer, or with [`Config::lenient`] relaxed and listed in
//! [`Automaton::relaxed`]. Policy choices that keep output valid but narrow it: unlisted
//! properties are generated only where `additionalProperties` gives a schema (or an object
//! lists no properties at all); numbers carry at most 15 digits and no exponent (a range
//! wholly beyond 15 digits, `minimum: 1e400`, is written with one fixed exponent: see
//! [`crate::num`]); strings use serde_json's escapes only; formats are sound subsets of what they
//! name. A narrowed reading (`not`, `if`, a `oneOf`) is never negated or tested for
//! disjointness as if it were exact: a `not`, an `if` condition or a `oneOf` branch that
//! is itself narrowed is refused at its pointer.

pub mod machine;

use std::sync::Arc;
use std::time::Instant;

use crate::automaton::ByteAutomaton;
use crate::config::Budget;
pub use crate::config::{CompileError, Config, Limits, Relaxed, Whitespace};
use machine::{Machine, State};

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub nodes: usize,
    pub alternatives: usize,
    pub literals: usize,
    pub numbers: usize,
    pub strings: usize,
    pub arrays: usize,
    pub objects: usize,
    pub dfas: usize,
    pub dfa_states: usize,
    /// Approximate heap bytes of the compiled automaton.
    pub bytes: usize,
    pub compile_us: u64,
    /// Compile steps taken ([`Limits::steps`]): the same on every machine.
    pub steps: u64,
    /// Shortest valid instance, in bytes.
    pub min_len: u64,
}

/// A compiled schema. Immutable; share it across sequences with `Arc`.
pub struct Automaton {
    m: Machine,
    relaxed: Vec<Relaxed>,
    stats: Stats,
    /// With `x-formwork-source` strings: the IR before the shortest-length pass dropped
    /// dead alternatives, and the settings, for [`Automaton::with_source`].
    source: Option<Box<SourceBase>>,
}

struct SourceBase {
    ir: crate::ir::Ir,
    whitespace: Whitespace,
    limits: Limits,
}

/// Compiles a JSON Schema.
pub fn compile(schema: &serde_json::Value, cfg: &Config) -> Result<Arc<Automaton>, CompileError> {
    let t0 = Instant::now();
    let budget = Budget::new(cfg.limits.steps);
    let b = crate::schema::Builder::new(schema, cfg, &budget)?;
    let (ir, relaxed) = b.build()?;
    let source = ir.strs.iter().any(|s| s.source.is_some()).then(|| {
        Box::new(SourceBase {
            ir: ir.clone(),
            whitespace: cfg.whitespace,
            limits: cfg.limits.clone(),
        })
    });
    let m = Machine::new(ir, cfg.whitespace, &budget)?;
    // Some steps are charged where no pointer is known and checked later: a compile that
    // took more than the limit fails, whichever step went over.
    budget.check(0, "")?;
    let root = &m.ir.nodes[m.ir.root as usize];
    if root.min_len == u64::MAX {
        return Err(CompileError::Empty {
            pointer: String::new(),
        });
    }
    let stats = stats_of(&m, t0, &budget);
    Ok(Arc::new(Automaton {
        m,
        relaxed,
        stats,
        source,
    }))
}

fn stats_of(m: &Machine, t0: Instant, budget: &Budget) -> Stats {
    let root = &m.ir.nodes[m.ir.root as usize];
    let ir = &m.ir;
    let dfa_bytes: usize = ir
        .dfas
        .iter()
        .map(|d| d.trans.len() * 4 + d.accept.len() + 256)
        .sum();
    Stats {
        nodes: ir.nodes.len(),
        alternatives: ir.nodes.iter().map(|n| n.alts.len()).sum(),
        literals: ir.lits.len(),
        numbers: ir.nums.len(),
        strings: ir.strs.len(),
        arrays: ir.arrs.len(),
        objects: ir.objs.len(),
        dfas: ir.dfas.len(),
        dfa_states: ir.dfas.iter().map(|d| d.len()).sum(),
        bytes: dfa_bytes
            + ir.nodes.len() * 64
            + ir.lits.iter().map(|l| l.len() + 24).sum::<usize>()
            + ir.objs
                .iter()
                .map(|o| o.props.iter().map(|p| p.key.len() * 2 + 64).sum::<usize>() + 64)
                .sum::<usize>()
            + ir.lens.len() * 64,
        compile_us: t0.elapsed().as_micros() as u64,
        steps: budget.used(),
        min_len: root.min_len,
    }
}

impl Automaton {
    /// Does the schema mark strings with `x-formwork-source`? Only then does
    /// [`Automaton::with_source`] build anything.
    pub fn uses_source(&self) -> bool {
        self.source.is_some()
    }

    /// The marked strings: `(JSON Pointer of the keyword, mode)`, in IR order.
    pub fn source_strings(&self) -> Vec<(String, crate::ir::SourceMode)> {
        let mut v: Vec<(String, crate::ir::SourceMode)> = Vec::new();
        for s in &self.m.ir.strs {
            if let Some(src) = &s.source {
                if !v.iter().any(|(p, m)| *p == src.pointer && *m == src.mode) {
                    v.push((src.pointer.clone(), src.mode));
                }
            }
        }
        v
    }

    /// The automaton for one document: every `x-formwork-source` string takes only
    /// spans of `doc` (non-empty; word-aligned for `words`, see [`crate::source`]),
    /// intersected exactly with its pattern, format and lengths. The span automaton
    /// (a suffix automaton, or for `words` a subset construction over positions) steps
    /// over the decoded bytes of the string, so JSON escapes (`\"`, `\\`, `\n`,
    /// `\u0001`) stand for the document's characters. The result is a new automaton:
    /// give it its own [`crate::Grammar`], so the shared caches of the schema never see
    /// a document's states. Without marked strings it is `self`. Errors: the span
    /// automaton's size limit ([`Limits::source_states`]) or the product's
    /// ([`Limits::dfa_states`]) at the keyword's pointer, the step limit
    /// ([`Limits::steps`], a budget of its own per document), and [`CompileError::NoSpan`]
    /// when the schema needs a marked string no span satisfies.
    pub fn with_source(self: &Arc<Self>, doc: &str) -> Result<Arc<Automaton>, CompileError> {
        use crate::dfa::{Dfa, LenTable};
        use crate::ir::SourceMode;
        use std::collections::HashMap;
        let Some(base) = &self.source else {
            return Ok(self.clone());
        };
        let t0 = Instant::now();
        let lim = &base.limits;
        let budget = Budget::new(lim.steps);
        let mut ir = base.ir.clone();
        let mut spans: HashMap<SourceMode, Dfa> = HashMap::new();
        let mut joined: HashMap<(SourceMode, Option<u32>), Option<u32>> = HashMap::new();
        let mut lens: HashMap<(u32, u32), u32> = HashMap::new();
        let mut marked: Vec<(u32, String)> = Vec::new();
        for i in 0..ir.strs.len() {
            let Some(src) = ir.strs[i].source.clone() else {
                continue;
            };
            let ptr = src.pointer.clone();
            let limit = |what: &'static str, given: usize, limit: usize| CompileError::Limit {
                what,
                given,
                limit,
                pointer: ptr.clone(),
            };
            let key = (src.mode, ir.strs[i].dfa);
            let d = match joined.get(&key) {
                Some(&d) => d,
                None => {
                    if let std::collections::hash_map::Entry::Vacant(slot) = spans.entry(src.mode) {
                        let built = match src.mode {
                            SourceMode::Substring => {
                                Dfa::substrings(doc.as_bytes(), lim.source_states)
                            }
                            SourceMode::Words => Dfa::word_spans(doc, lim.source_states, &budget),
                        };
                        let span = built.map_err(|_| {
                            if budget.spent() {
                                return budget.error(&ptr);
                            }
                            limit(
                                "source automaton states",
                                lim.source_states + 1,
                                lim.source_states,
                            )
                        })?;
                        slot.insert(span);
                    }
                    let span = &spans[&src.mode];
                    let dfa = match ir.strs[i].dfa {
                        None => span.clone(),
                        Some(p) => span
                            .product(&ir.dfas[p as usize], lim.dfa_states, &budget)
                            .map_err(|_| {
                                if budget.spent() {
                                    return budget.error(&ptr);
                                }
                                limit("DFA states", lim.dfa_states + 1, lim.dfa_states)
                            })?,
                    };
                    let d = if dfa.is_empty() {
                        None
                    } else {
                        ir.dfas.push(dfa);
                        Some(ir.dfas.len() as u32 - 1)
                    };
                    joined.insert(key, d);
                    d
                }
            };
            let sp = &mut ir.strs[i];
            marked.push((i as u32, ptr.clone()));
            let Some(d) = d else {
                // No span: the string has no valid text (the shortest-length pass drops
                // the alternative).
                sp.min = 1;
                sp.max = Some(0);
                sp.dfa = None;
                sp.lens = None;
                continue;
            };
            sp.dfa = Some(d);
            sp.lens = None;
            if sp.min == 1 && sp.max.is_none() {
                // Spans are never empty (the start state does not accept, and no edge
                // leads back to it): `minLength: 1` holds already, and without a length
                // table the string body keeps its plain-token key (`plain_key`).
                sp.min = 0;
            }
            if sp.min > 0 || sp.max.is_some() {
                let cap = sp.min.max(sp.max.map_or(0, |m| m.saturating_add(1)));
                let li = match lens.get(&(d, cap)) {
                    Some(&l) => l,
                    None => {
                        let lt =
                            LenTable::build(&ir.dfas[d as usize], cap, lim.length_bits, &budget)
                                .map_err(|_| {
                                    if budget.spent() {
                                        return budget.error(&ptr);
                                    }
                                    limit(
                                        "DFA states x string lengths",
                                        ir.dfas[d as usize].len() * (cap as usize + 1),
                                        lim.length_bits,
                                    )
                                })?;
                        ir.lens.push(lt);
                        let l = ir.lens.len() as u32 - 1;
                        lens.insert((d, cap), l);
                        l
                    }
                };
                ir.strs[i].lens = Some(li);
            }
        }
        let m = Machine::new(ir, base.whitespace, &budget)?;
        budget.check(0, "")?;
        if m.ir.nodes[m.ir.root as usize].min_len == u64::MAX {
            // Name a marked string that lost every text (the likely cause).
            let dead = marked
                .iter()
                .find(|(i, _)| m.alt_min_text(crate::ir::Alt::Str(*i)).is_none());
            return Err(match dead {
                Some((_, p)) => CompileError::NoSpan { pointer: p.clone() },
                None => CompileError::Empty {
                    pointer: String::new(),
                },
            });
        }
        let stats = stats_of(&m, t0, &budget);
        Ok(Arc::new(Automaton {
            m,
            relaxed: self.relaxed.clone(),
            stats,
            source: None,
        }))
    }

    pub fn stats(&self) -> Stats {
        self.stats.clone()
    }
    pub fn relaxed(&self) -> &[Relaxed] {
        &self.relaxed
    }
    /// The IR and automaton sizes, readable.
    pub fn explain(&self) -> String {
        let mut s = self.m.ir.explain();
        let st = &self.stats;
        s.push_str(&format!(
            "automaton: {} nodes, {} alternatives, {} DFAs with {} states, ~{} bytes, shortest instance {} bytes, compiled in {} us\n",
            st.nodes, st.alternatives, st.dfas, st.dfa_states, st.bytes, st.min_len, st.compile_us
        ));
        for (p, mode) in self.source_strings() {
            let how = if self.source.is_some() {
                "an ordinary string until a document is given (with_source)"
            } else {
                "spans of this automaton's document"
            };
            s.push_str(&format!("source: {mode:?} at {p:?}: {how}\n"));
        }
        for r in &self.relaxed {
            s.push_str(&format!(
                "relaxed: `{}` at {:?}: {}\n",
                r.keyword, r.pointer, r.why
            ));
        }
        s
    }
    /// Accepts `text` from the start state to an accepting state?
    pub fn accepts(&self, text: &[u8]) -> bool {
        let mut s = self.start();
        for &b in text {
            match self.step(&s, b) {
                Some(n) => s = n,
                None => return false,
            }
        }
        self.is_accepting(&s)
    }
    /// Length of the longest prefix of `text` the automaton takes.
    pub fn accepted_prefix(&self, text: &[u8]) -> usize {
        let mut s = self.start();
        for (i, &b) in text.iter().enumerate() {
            match self.step(&s, b) {
                Some(n) => s = n,
                None => return i,
            }
        }
        text.len()
    }
}

impl ByteAutomaton for Automaton {
    type State = State;
    fn start(&self) -> State {
        self.m.start()
    }
    fn step(&self, s: &State, b: u8) -> Option<State> {
        self.m.step(s, b)
    }
    fn is_accepting(&self, s: &State) -> bool {
        self.m.is_accepting(s)
    }
    fn shortest_completion(&self, s: &State) -> Vec<u8> {
        self.m.shortest_completion(s)
    }
    fn plain_chars_allowed(&self, s: &State) -> Option<u32> {
        self.m.plain_chars_allowed(s)
    }
    fn plain_key(&self, s: &State) -> Option<crate::automaton::PlainKey<'_>> {
        self.m.plain_key(s)
    }
    /// Exact: the matcher only uses it as a filter, but the equality is tested.
    fn allowed_bytes(&self, s: &State) -> Option<[u64; 4]> {
        Some(self.m.allowed_bytes(s))
    }
}
