//! Intersection: `allOf`, `$ref` beside other keywords, and every child key read as the
//! conjunction of its locations. Two [`Typed`] conjunctions meet field by field
//! ([`intersect`]); two disjunctions distribute ([`Builder::conj`]), within
//! `Limits::alternatives`.

use std::rc::Rc;

use super::*;
use crate::config::CompileError;

/// A property's key in a conjunction, given its listed key if any (`Builder::prop_key_listed`).
type PropKey<'k> = dyn FnMut(&Typed, &str, Option<&Key>) -> Result<Option<Key>, CompileError> + 'k;

/// `a` and `b` together: `Ok(None)` when a pattern decides a merged property and cannot be
/// read, `Ok(Some(None))` when nothing satisfies both.
pub(super) fn intersect(
    a: &Typed,
    b: &Typed,
    pk: &mut PropKey<'_>,
) -> Result<Option<Option<Typed>>, CompileError> {
    let mut r = a.clone();
    r.t &= b.t;
    // INT and NUM: NUM includes integers.
    let num_a = a.t & (T_INT | T_NUM);
    let num_b = b.t & (T_INT | T_NUM);
    let num = if num_a == 0 || num_b == 0 {
        0
    } else if num_a & T_NUM != 0 && num_b & T_NUM != 0 {
        T_NUM | T_INT
    } else {
        T_INT
    };
    r.t = (r.t & !(T_INT | T_NUM)) | num;
    r.lo = a.lo.max(b.lo);
    r.hi = a.hi.min(b.hi);
    if a.far.is_some() || b.far.is_some() {
        let ((al, ah), (bl, bh)) = (a.bounds_x(), b.bounds_x());
        r.far = Some(Rc::new((al.max(bl), ah.min(bh))));
    }
    r.q = match (a.q / gcd(a.q, b.q)).checked_mul(b.q) {
        Some(q) => q,
        None => return Ok(Some(None)),
    };
    r.smin = a.smin.max(b.smin);
    r.smax = min_opt(a.smax, b.smax);
    r.pats.extend(b.pats.iter().cloned());
    r.amin = a.amin.max(b.amin);
    r.amax = min_opt(a.amax, b.amax);
    let n = a.prefix.len().max(b.prefix.len());
    r.prefix = (0..n)
        .map(|i| union_key(&a.item_key(i), &b.item_key(i)))
        .collect();
    r.items = union_key(&a.items, &b.items);
    // Looked up by name, not scanned: two objects of n properties each meet in O(n)
    // (scanning made 30 000 properties a billion string comparisons, uncharged).
    let (ia, ib) = (prop_index(a), prop_index(b));
    let mut seen: HashSet<&str> = HashSet::with_capacity(a.props.len() + b.props.len());
    let mut props: Vec<(String, Key)> = Vec::new();
    for (name, _) in a.props.iter().chain(b.props.iter()) {
        if !seen.insert(name) {
            continue;
        }
        let (Some(ka), Some(kb)) = (
            pk(a, name, ia.get(name.as_str()).copied())?,
            pk(b, name, ib.get(name.as_str()).copied())?,
        ) else {
            return Ok(None);
        };
        props.push((name.clone(), union_key(&ka, &kb)));
    }
    r.props = props;
    let mut req: HashSet<&str> = a.req.iter().map(String::as_str).collect();
    for q in &b.req {
        if req.insert(q) {
            r.req.push(q.clone());
        }
    }
    r.extra = match (&a.extra, &b.extra) {
        (None, x) | (x, None) => x.clone(),
        (Some(x), Some(y)) => Some(union_key(x, y)),
    };
    r.has_props = a.has_props || b.has_props;
    r.bad_fmt.extend(b.bad_fmt.iter().cloned());
    r.pprops.extend(b.pprops.iter().cloned());
    r.pnames = union_key(&a.pnames, &b.pnames);
    r.uniq = a.uniq.clone().or_else(|| b.uniq.clone());
    r.src = match (&a.src, &b.src) {
        (None, x) | (x, None) => x.clone(),
        (Some(x), Some(y)) => Some(if y.0 == SourceMode::Words && x.0 != SourceMode::Words {
            y.clone()
        } else {
            x.clone()
        }),
    };
    r.omin = a.omin.max(b.omin);
    r.omax = min_opt(a.omax, b.omax);
    r.lits = match (&a.lits, &b.lits) {
        (None, x) | (x, None) => x.clone(),
        (Some(x), Some(y)) => Some(
            x.iter()
                .filter(|v| y.iter().any(|w| json_eq(v, w)))
                .cloned()
                .collect(),
        ),
    };
    if r.t == 0 || r.lits.as_ref().is_some_and(|l| l.is_empty()) {
        return Ok(Some(None));
    }
    Ok(Some(Some(r)))
}

/// The key of each listed property by name (the first, as a scan finds it).
pub(super) fn prop_index(t: &Typed) -> HashMap<&str, &Key> {
    let mut m = HashMap::with_capacity(t.props.len());
    for (n, k) in &t.props {
        m.entry(n.as_str()).or_insert(k);
    }
    m
}

impl<'a> Builder<'a> {
    pub(super) fn conj(
        &mut self,
        a: Vec<Typed>,
        b: &[Typed],
        ptr: &str,
    ) -> Result<Vec<Typed>, CompileError> {
        let mut out = Vec::new();
        for x in &a {
            let pairs: u64 = b.iter().map(|y| x.steps() + y.steps()).sum();
            self.charge(1 + pairs, ptr)?;
            for y in b {
                let r = intersect(x, y, &mut |t: &Typed, n: &str, listed: Option<&Key>| {
                    self.prop_key_listed(t, n, listed)
                })
                .map_err(|e| at_ptr(e, ptr))?;
                match r {
                    Some(Some(z)) => out.push(z),
                    Some(None) => {}
                    None => {
                        return Err(CompileError::Unsupported {
                            keyword: "patternProperties".into(),
                            pointer: ptr.to_string(),
                            why: "a pattern the DFA cannot read decides a merged property".into(),
                        })
                    }
                }
            }
            if out.len() > self.cfg.limits.alternatives {
                break;
            }
        }
        if out.len() > self.cfg.limits.alternatives {
            return Err(CompileError::Limit {
                what: "alternatives after distributing anyOf/oneOf/allOf",
                given: out.len(),
                limit: self.cfg.limits.alternatives,
                pointer: ptr.to_string(),
            });
        }
        Ok(out)
    }
}
