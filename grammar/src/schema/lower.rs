//! Lowering readings to IR: one node per distinct key (a conjunction of locations),
//! compiled on demand from a queue so recursive schemas become cycles of nodes
//! ([`Builder::build`]); each conjunction becomes literals, a number spec, a string spec
//! with its pattern DFA and length table, an array or an object spec.

use serde_json::Value;

use super::*;
use crate::config::{CompileError, Relaxed};
use crate::dfa::{Dfa, LenTable};
use crate::num;

impl<'a> Builder<'a> {
    /// The DFA of the intersection of anchored regexes (`Ok(None)`: the language is empty;
    /// `Err(msg)`: the regexes cannot be read). The outer error is the step limit alone.
    #[allow(clippy::type_complexity)]
    pub(super) fn dfa_for(
        &mut self,
        res: &[String],
    ) -> Result<Result<Option<u32>, String>, CompileError> {
        let mut key: Vec<String> = res.to_vec();
        key.sort();
        key.dedup();
        if let Some(r) = self.dfa_memo.get(&key) {
            return Ok(Ok(*r));
        }
        self.charge(1, "")?;
        let lim = self.cfg.limits.dfa_states;
        let dl = self.budget;
        let stop = |e: String| -> Result<Result<Option<u32>, String>, CompileError> {
            if dl.spent() {
                Err(dl.error(""))
            } else {
                Ok(Err(e))
            }
        };
        let mut acc: Option<Dfa> = None;
        // Complements last: an intersection with them stays inside the others' strings.
        let mut order: Vec<&String> = key.iter().collect();
        order.sort_by_key(|r| r.starts_with(pattern::NOT));
        for r in order {
            let d = match r.strip_prefix(pattern::NOT) {
                Some(r) => Dfa::from_regex(r, lim, dl).map(|d| d.complement()),
                None => Dfa::from_regex(r, lim, dl),
            };
            let d = match d {
                Ok(d) => d,
                Err(e) => return stop(e),
            };
            acc = Some(match acc {
                None => d,
                Some(a) => match a.product(&d, lim, dl) {
                    Ok(p) => p,
                    Err(e) => return stop(e),
                },
            });
        }
        let acc = acc.expect("at least one regex");
        let out = if acc.is_empty() {
            None
        } else {
            self.ir.dfas.push(acc);
            Some(self.ir.dfas.len() as u32 - 1)
        };
        self.dfa_memo.insert(key, out);
        Ok(Ok(out))
    }

    // ---------- nodes ----------

    pub(super) fn node_for(&mut self, k: Key) -> NodeId {
        if let Some(&n) = self.node_memo.get(&k) {
            return n;
        }
        let id = self.ir.nodes.len() as NodeId;
        let ptr = k
            .iter()
            .map(|&l| {
                // RFC 6901, like every pointer in an error: "" is the root.
                self.locs[l as usize].clone()
            })
            .collect::<Vec<_>>()
            .join(" & ");
        self.ir.nodes.push(Node {
            alts: Vec::new(),
            ptr: if k.is_empty() { "true".into() } else { ptr },
            min_len: u64::MAX,
            alt_len: Vec::new(),
        });
        self.node_memo.insert(k.clone(), id);
        self.queue.push_back((id, k));
        id
    }

    pub(super) fn lit(&mut self, text: Vec<u8>) -> u32 {
        if let Some(&i) = self.lit_ids.get(&text) {
            return i;
        }
        let i = self.ir.lits.len() as u32;
        self.lit_ids.insert(text.clone(), i);
        self.ir.lits.push(text);
        i
    }

    pub fn build(mut self) -> Result<(Ir, Vec<Relaxed>), CompileError> {
        for l in [&b"null"[..], b"true", b"false"] {
            self.lit(l.to_vec());
        }
        let root = self.loc("");
        self.ir.root = self.node_for(vec![root]);
        while let Some((id, k)) = self.queue.pop_front() {
            let ptr = self.ir.nodes[id as usize].ptr.clone();
            self.charge(1, &ptr)?;
            if self.ir.nodes.len() > self.cfg.limits.ir_nodes {
                return Err(CompileError::Limit {
                    what: "IR nodes",
                    given: self.ir.nodes.len(),
                    limit: self.cfg.limits.ir_nodes,
                    pointer: ptr,
                });
            }
            let d = self.key_dnf(&k).map_err(|e| at_ptr(e, &ptr))?;
            // Built once; the narrowing passes no longer need it.
            self.key_memo.remove(&k);
            let mut alts = Vec::new();
            for t in d.iter() {
                self.lower(t, &ptr, &mut alts)?;
            }
            alts.dedup();
            self.ir.nodes[id as usize].alts = alts;
        }
        Ok((self.ir, self.relaxed))
    }

    pub(super) fn lower(
        &mut self,
        t: &Typed,
        ptr: &str,
        alts: &mut Vec<Alt>,
    ) -> Result<(), CompileError> {
        if let Some(lits) = &t.lits {
            if let Some((_, sp)) = &t.src {
                if t.t & T_STR != 0 {
                    self.unsupported(
                        "x-formwork-source",
                        sp,
                        "enum or const with x-formwork-source: the listed values are not checked against the document",
                    )?;
                }
            }
            let ids = self.literal_ids(t).map_err(|e| at_ptr(e, ptr))?;
            self.fmt_lits += lits.len() - ids.len();
            let mut seen: HashSet<Alt> = alts.iter().copied().collect();
            for id in ids {
                if seen.insert(Alt::Lit(id)) {
                    alts.push(Alt::Lit(id));
                }
            }
            return Ok(());
        }
        if t.t & T_NULL != 0 {
            alts.push(Alt::Lit(LIT_NULL));
        }
        if t.t & T_BOOL != 0 {
            alts.push(Alt::Lit(LIT_TRUE));
            alts.push(Alt::Lit(LIT_FALSE));
        }
        if t.t & (T_INT | T_NUM) != 0 {
            let int_only = t.t & T_NUM == 0;
            let q = if int_only {
                (t.q / gcd(t.q, SCALE)).checked_mul(SCALE)
            } else {
                Some(t.q)
            };
            match q {
                Some(q) if q < BIG => {
                    let spec = match &t.far {
                        None => Some(NumSpec {
                            int_only,
                            lo: t.lo.max(-BIG),
                            hi: t.hi.min(BIG),
                            q,
                            exp: 0,
                        }),
                        Some(f) => num::far_spec(int_only, &f.0, &f.1, q),
                    };
                    if let Some(spec) = spec {
                        let id = match self.ir.nums.iter().position(|s| *s == spec) {
                            Some(i) => i as u32,
                            None => {
                                self.ir.nums.push(spec);
                                self.ir.nums.len() as u32 - 1
                            }
                        };
                        alts.push(Alt::Num(id));
                    }
                }
                _ => {}
            }
        }
        if t.t & T_STR != 0 {
            if let Some((p, f)) = t.bad_fmt.first() {
                self.unsupported("format", p, &format!("format {f:?} is not enforced"))?;
            }
            if let Some(s) = self.str_spec(t.smin, t.smax, &t.pats, None, ptr)? {
                if let Some((mode, sp)) = &t.src {
                    self.ir.strs[s as usize].source = Some(Source {
                        mode: *mode,
                        pointer: sp.clone(),
                    });
                }
                alts.push(Alt::Str(s));
            }
        }
        if t.t & T_ARR != 0 {
            let prefix: Vec<NodeId> = t.prefix.iter().map(|k| self.node_for(k.clone())).collect();
            let items = if t.items == vec![FALSE_LOC] {
                None
            } else {
                Some(self.node_for(t.items.clone()))
            };
            let mut unique = Vec::new();
            if let Some(up) = t.uniq.clone() {
                if !self.items_distinct(t).map_err(|e| at_ptr(e, ptr))? {
                    match self.unique_literals(t).map_err(|e| at_ptr(e, ptr))? {
                        Some(lits) => unique = lits,
                        None => self.unsupported(
                            "uniqueItems",
                            &up,
                            "items may repeat: more than one item, and neither a closed prefix of pairwise disjoint types or literal sets nor an open list of at most 64 literals",
                        )?,
                    }
                }
            }
            self.ir.arrs.push(ArrSpec {
                prefix,
                items,
                min: t.amin,
                max: t.amax,
                unique,
            });
            alts.push(Alt::Arr(self.ir.arrs.len() as u32 - 1));
        }
        if t.t & T_OBJ != 0 {
            // By name, not by scanning: linear in the properties (see `prop_index`).
            let listed = super::intersect::prop_index(t);
            let req: HashSet<&str> = t.req.iter().map(String::as_str).collect();
            let mut names: Vec<(String, bool)> = t
                .props
                .iter()
                .map(|(n, _)| (n.clone(), req.contains(n.as_str())))
                .collect();
            let mut named: HashSet<String> = names.iter().map(|(n, _)| n.clone()).collect();
            for r in &t.req {
                if named.insert(r.clone()) {
                    names.push((r.clone(), true));
                }
            }
            let mut extra = match &t.extra {
                Some(k) if *k == vec![FALSE_LOC] => None,
                Some(k) => Some(k.clone()),
                _ if !t.pprops.is_empty() => None,
                None if !t.has_props => Some(Vec::new()),
                None => None,
            };
            // `propertyNames`: extra keys are generated only inside the key language; an
            // enum of names turns into optional listed properties.
            let mut key_shape = (0, None, Vec::new());
            if !t.pnames.is_empty() && extra.is_some() {
                match self.extra_keys(t).map_err(|e| at_ptr(e, ptr))? {
                    Ok(Some(shape)) => key_shape = shape,
                    Ok(None) => extra = None,
                    Err(more) => {
                        extra = None;
                        for n in more {
                            if named.insert(n.clone()) {
                                names.push((n, false));
                            }
                        }
                    }
                }
            }
            let mut props = Vec::new();
            for (n, required) in names {
                let k = self.prop_key_listed(t, &n, listed.get(n.as_str()).copied());
                let Some(mut k) = k.map_err(|e| at_ptr(e, ptr))? else {
                    self.unsupported("patternProperties", ptr, "a pattern the DFA cannot read")?;
                    continue;
                };
                if !self.name_ok(t, &n).map_err(|e| at_ptr(e, ptr))? {
                    if required {
                        return Ok(()); // a required name that `propertyNames` rejects
                    }
                    k = vec![FALSE_LOC];
                }
                let node = self.node_for(k);
                let enc =
                    serde_json::to_string(&Value::String(n.clone())).expect("a string serialises");
                let key = enc.as_bytes()[1..enc.len() - 1].to_vec();
                props.push(PropSpec {
                    name: n,
                    key,
                    node,
                    required,
                });
            }
            let extra = extra.map(|k| self.node_for(k));
            let trie = KeyTrie::build(props.iter().map(|p| p.key.as_slice()));
            self.ir.tries.push(trie);
            let ti = self.ir.tries.len() as u32 - 1;
            let (kmin, kmax, kpats) = key_shape;
            let (ek, extra) = match self.str_spec(kmin, kmax, &kpats, Some(ti), ptr)? {
                Some(ek) => (ek, extra),
                None => (
                    self.str_spec(0, None, &[], Some(ti), ptr)?
                        .expect("unconstrained keys exist"),
                    None,
                ),
            };
            self.ir.objs.push(ObjSpec {
                props,
                extra,
                extra_key: ek,
                min: t.omin,
                max: t.omax,
            });
            alts.push(Alt::Obj(self.ir.objs.len() as u32 - 1));
        }
        Ok(())
    }

    pub(super) fn str_spec(
        &mut self,
        min: u32,
        max: Option<u32>,
        pats: &[Pat],
        excl: Option<u32>,
        node_ptr: &str,
    ) -> Result<Option<u32>, CompileError> {
        if max.is_some_and(|m| m < min) {
            return Ok(None);
        }
        let (dfa, lens) = if pats.is_empty() {
            (None, None)
        } else {
            let res: Vec<String> = pats.iter().map(|p| p.re.clone()).collect();
            // Errors of the regexes are reported at their keywords (`/pattern`), not at
            // the subschema holding them.
            let mut at: Vec<&str> = pats.iter().map(|p| p.ptr.as_str()).collect();
            at.dedup();
            let ptr = &at.join(" & ");
            let d = match self.dfa_for(&res).map_err(|e| at_ptr(e, ptr))? {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(None),
                Err(e) => {
                    let kw = if pats.iter().all(|p| p.format) {
                        "format"
                    } else {
                        "pattern"
                    };
                    if e.contains("DFA states") {
                        return Err(CompileError::Limit {
                            what: "DFA states",
                            given: self.cfg.limits.dfa_states + 1,
                            limit: self.cfg.limits.dfa_states,
                            pointer: ptr.to_string(),
                        });
                    }
                    self.unsupported(kw, ptr, &e)?;
                    return Ok(Some(
                        self.str_spec(min, max, &[], excl, node_ptr)?
                            .expect("unconstrained strings exist"),
                    ));
                }
            };
            let lens = if min > 0 || max.is_some() {
                let cap = min.max(max.map_or(0, |m| m.saturating_add(1)));
                let li = match self.len_memo.get(&(d, cap)) {
                    Some(&l) => l,
                    None => {
                        let lt = LenTable::build(
                            &self.ir.dfas[d as usize],
                            cap,
                            self.cfg.limits.length_bits,
                            self.budget,
                        )
                        .map_err(|_| {
                            if self.budget.spent() {
                                return self.budget.error(ptr);
                            }
                            CompileError::Limit {
                                what: "DFA states x string lengths",
                                given: self.ir.dfas[d as usize].len() * (cap as usize + 1),
                                limit: self.cfg.limits.length_bits,
                                pointer: ptr.to_string(),
                            }
                        })?;
                        self.ir.lens.push(lt);
                        let l = self.ir.lens.len() as u32 - 1;
                        self.len_memo.insert((d, cap), l);
                        l
                    }
                };
                Some(li)
            } else {
                None
            };
            (Some(d), lens)
        };
        let desc = pats
            .iter()
            .map(|p| p.label.clone())
            .collect::<Vec<_>>()
            .join(" & ");
        self.ir.strs.push(StrSpec {
            min,
            max,
            dfa,
            lens,
            excl,
            desc,
            source: None,
        });
        Ok(Some(self.ir.strs.len() as u32 - 1))
    }
}
