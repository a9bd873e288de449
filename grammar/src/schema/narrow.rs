//! Narrowing and disjointness, for `oneOf`, `not` and `if`: a reading is cut down to the
//! parts that certainly fail another schema ([`Builder::narrow`]; only instances are
//! dropped, so it stays sound), and two readings are tested for disjointness
//! ([`Builder::typed_disjoint`]; true only when no value satisfies both). A narrowed
//! reading is never negated or tested as if it were exact (`Builder::inexact`).

use std::rc::Rc;

use super::read::IfThenElse;
use super::*;
use crate::config::CompileError;
use crate::num;

impl<'a> Builder<'a> {
    /// Each `oneOf` at its pointer, read with the siblings `base`: its branches as the
    /// `discriminator` handed them over, or narrowed until pairwise disjoint (else refused).
    pub(super) fn apply_one_ofs(
        &mut self,
        base: &Typed,
        one_ofs: Vec<(String, Vec<Rc<Vec<Typed>>>)>,
        narrowed_one_ofs: &[String],
        by_tag: &mut Option<Tagged>,
        conjs: &mut Vec<Rc<Vec<Typed>>>,
    ) -> Result<(), CompileError> {
        // oneOf, read together with the sibling keywords: what branch i generates must fail
        // the real branch j (both under the siblings).
        for (kp, branches) in one_ofs {
            if let Some(tagged) = by_tag.take_if(|(cp, _)| *cp == kp) {
                conjs.push(Rc::new(tagged.1.into_iter().flatten().collect()));
                continue;
            }
            if kp.ends_with("/anyOf") {
                // Its discriminator was relaxed: a plain anyOf.
                conjs.push(Rc::new(
                    branches.iter().flat_map(|b| b.iter().cloned()).collect(),
                ));
                continue;
            }
            if narrowed_one_ofs.contains(&kp) {
                self.unsupported(
                    "oneOf",
                    &kp,
                    "a branch is itself narrowed (a nested not, if or oneOf); exactly-one is not enforceable",
                )?;
                conjs.push(Rc::new(
                    branches.iter().flat_map(|b| b.iter().cloned()).collect(),
                ));
                continue;
            }
            // What is kept of each branch is a subset of it (narrowed).
            self.tainted = true;
            let mut real = Vec::new();
            for b in &branches {
                real.push(Rc::new(self.conj(vec![base.clone()], b, &kp)?));
            }
            let mut narrowed = real.clone();
            self.separate(&mut narrowed, &real, &kp)?;
            let mut overlap = None;
            'o: for i in 0..narrowed.len() {
                for j in 0..narrowed.len() {
                    self.charge(1, &kp)?;
                    if i != j && !self.dnf_disjoint(&narrowed[i], &real[j], 3)? {
                        overlap = Some((i, j));
                        break 'o;
                    }
                }
            }
            if overlap.is_none()
                && narrowed.iter().all(|b| b.is_empty())
                && real.iter().any(|b| !b.is_empty())
            {
                overlap = Some((0, 1));
            }
            if let Some((i, j)) = overlap {
                self.unsupported(
                    "oneOf",
                    &kp,
                    &format!("branches {i} and {j} may both match; exactly-one is not enforceable"),
                )?;
                narrowed = real;
            }
            conjs.push(Rc::new(
                narrowed.iter().flat_map(|b| b.iter().cloned()).collect(),
            ));
        }
        Ok(())
    }

    /// Each `not S`: what of `base` certainly fails every alternative of `S`.
    pub(super) fn apply_nots(
        &mut self,
        base: &Typed,
        nots: Vec<(String, Rc<Vec<Typed>>)>,
        conjs: &mut Vec<Rc<Vec<Typed>>>,
    ) -> Result<(), CompileError> {
        // `not S`: the parts of the siblings that certainly fail every alternative of S.
        for (kp, d) in nots {
            self.tainted = true;
            let cur = self.fail_all(vec![base.clone()], &d, &kp)?;
            if cur.is_empty() {
                self.unsupported(
                    "not",
                    &kp,
                    "no part of the schema is certain to fail the negated schema",
                )?;
                continue;
            }
            conjs.push(Rc::new(cur));
        }
        Ok(())
    }

    /// Each `if`/`then`/`else` against `base`.
    pub(super) fn apply_ifs(
        &mut self,
        base: &Typed,
        ifs: Vec<IfThenElse>,
        conjs: &mut Vec<Rc<Vec<Typed>>>,
    ) -> Result<(), CompileError> {
        // `if`/`then`/`else`: (if and then) or (certainly not if, and else).
        for (kp, d, then, els) in ifs {
            self.tainted = true;
            let a = self.conj(vec![base.clone()], &d, &kp)?;
            let mut a = self.conj(a, &then, &kp)?;
            let b = self.fail_all(vec![base.clone()], &d, &kp)?;
            let b = self.conj(b, &els, &kp)?;
            a.extend(b);
            if a.is_empty() {
                self.unsupported("if", &kp, "neither branch of the condition can be produced")?;
                continue;
            }
            conjs.push(Rc::new(a));
        }
        Ok(())
    }

    /// Narrows `oneOf` branches so that what each generates fails the others: a value of
    /// branch i omits a property another branch requires (S1), or carries a property a
    /// closed branch does not list (S2). Narrowing only drops instances, so it stays sound.
    pub(super) fn separate(
        &mut self,
        branches: &mut [Rc<Vec<Typed>>],
        real: &[Rc<Vec<Typed>>],
        ptr: &str,
    ) -> Result<(), CompileError> {
        let n = branches.len();
        for i in 0..n {
            let mut cur: Vec<Typed> = (*branches[i]).clone();
            for j in 0..n {
                if i == j {
                    continue;
                }
                let others = real[j].clone();
                for y in others.iter() {
                    let mut next = Vec::new();
                    for c in cur {
                        next.extend(self.narrow(c, y, ptr)?);
                    }
                    cur = next;
                    if cur.len() > self.cfg.limits.alternatives {
                        return Ok(());
                    }
                }
            }
            branches[i] = Rc::new(cur);
        }
        Ok(())
    }

    pub(super) fn fail_all(
        &mut self,
        mut cur: Vec<Typed>,
        d: &[Typed],
        ptr: &str,
    ) -> Result<Vec<Typed>, CompileError> {
        for y in d {
            let mut next = Vec::new();
            for c in cur {
                next.extend(self.narrow(c, y, ptr)?);
            }
            cur = next;
            if cur.len() > self.cfg.limits.alternatives {
                return Ok(Vec::new());
            }
        }
        Ok(cur)
    }

    pub(super) fn loc_of(&mut self, ptr: &str) -> u32 {
        self.loc(ptr)
    }

    /// Parts of `c` whose values all fail `y` (a subset of `c`; empty if none found).
    /// Stops with the step limit error at `ptr` once the compile budget is spent.
    pub(super) fn narrow(
        &mut self,
        c: Typed,
        y: &Typed,
        ptr: &str,
    ) -> Result<Vec<Typed>, CompileError> {
        self.charge(c.steps() + y.steps(), ptr)?;
        if self.typed_disjoint(&c, y, 3)? {
            return Ok(vec![c]);
        }
        let mut out = Vec::new();
        for g in [T_NULL, T_BOOL, T_INT | T_NUM, T_STR, T_ARR, T_OBJ] {
            if c.t & g == 0 {
                continue;
            }
            let mut cg = c.clone();
            cg.t &= g;
            if self.typed_disjoint(&cg, y, 3)? {
                out.push(cg);
                continue;
            }
            let mut cands = Vec::new();
            if g == T_INT | T_NUM && (cg.far.is_some() || y.far.is_some()) {
                let ((cl, ch), (yl, yh)) = (cg.bounds_x(), y.bounds_x());
                let inf = num::far_inf();
                if yl > -inf.clone() {
                    let mut a = cg.clone();
                    a.far = Some(Rc::new((cl.clone(), ch.clone().min(yl - 1))));
                    cands.push(a);
                }
                if yh < inf {
                    let mut a = cg.clone();
                    a.far = Some(Rc::new((cl.max(yh + 1), ch)));
                    cands.push(a);
                }
            } else if g == T_INT | T_NUM {
                if y.lo > -BIG {
                    let mut a = cg.clone();
                    a.hi = a.hi.min(y.lo - 1);
                    cands.push(a);
                }
                if y.hi < BIG {
                    let mut a = cg.clone();
                    a.lo = a.lo.max(y.hi + 1);
                    cands.push(a);
                }
            } else if g == T_STR {
                if let Some(m) = y.smax {
                    let mut a = cg.clone();
                    a.smin = a.smin.max(m + 1);
                    cands.push(a);
                }
                if y.smin > 0 {
                    let mut a = cg.clone();
                    a.smax = min_opt(a.smax, Some(y.smin - 1));
                    cands.push(a);
                }
            } else if g == T_OBJ {
                // S1: omit a property y requires.
                if let Some(p) = y.req.iter().find(|p| !cg.req.contains(p)).cloned() {
                    let mut a = cg.clone();
                    forbid(&mut a, &p);
                    cands.push(a);
                } else if y.extra.as_ref() == Some(&vec![FALSE_LOC]) && y.pprops.is_empty() {
                    // S2: carry a property closed y does not list.
                    for (q, k) in &cg.props {
                        if *k != vec![FALSE_LOC] && !y.props.iter().any(|(r, _)| r == q) {
                            let mut a = cg.clone();
                            if !a.req.contains(q) {
                                a.req.push(q.clone());
                            }
                            cands.push(a);
                        }
                    }
                }
            }
            for a in cands {
                if self.typed_disjoint(&a, y, 3)? {
                    out.push(a);
                }
            }
        }
        Ok(out)
    }

    /// The conjunction a key stands for (memoised: the narrowing passes ask again and again).
    pub(super) fn key_dnf(&mut self, k: &Key) -> Result<Rc<Vec<Typed>>, CompileError> {
        if let Some(r) = self.key_memo.get(k) {
            return Ok(r.clone());
        }
        let mut acc = vec![Typed::any()];
        for &l in k {
            let d = self.dnf(l)?;
            acc = self.conj(acc, &d, "")?;
        }
        let r = Rc::new(acc);
        self.key_memo.insert(k.clone(), r.clone());
        Ok(r)
    }

    /// `key_dnf` for passes that read an error as "not sure": only the step limit stops them.
    pub(super) fn key_dnf_or_unsure(
        &mut self,
        k: &Key,
    ) -> Result<Option<Rc<Vec<Typed>>>, CompileError> {
        match self.key_dnf(k) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.is_step_limit() => Err(e),
            Err(_) => Ok(None),
        }
    }

    pub(super) fn dnf_disjoint(
        &mut self,
        a: &[Typed],
        b: &[Typed],
        depth: u32,
    ) -> Result<bool, CompileError> {
        for x in a {
            for y in b {
                if !self.typed_disjoint(x, y, depth)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    pub(super) fn key_disjoint(
        &mut self,
        a: &Key,
        b: &Key,
        depth: u32,
    ) -> Result<bool, CompileError> {
        if depth == 0 {
            return Ok(false);
        }
        let (Some(x), Some(y)) = (self.key_dnf_or_unsure(a)?, self.key_dnf_or_unsure(b)?) else {
            return Ok(false);
        };
        // A narrowed child is a subset of its schema: disjoint from it says nothing.
        if a.iter().chain(b).any(|l| self.inexact.contains(l)) {
            return Ok(false);
        }
        self.dnf_disjoint(&x, &y, depth - 1)
    }

    /// True only when no JSON value satisfies both (as the validator reads them).
    pub(super) fn typed_disjoint(
        &mut self,
        a: &Typed,
        b: &Typed,
        depth: u32,
    ) -> Result<bool, CompileError> {
        // Charged here, checked by the callers that know the pointer (`narrow`, the
        // `oneOf` overlap test, `dnf`).
        self.budget.charge(a.steps() + b.steps());
        // Literal sets decide alone.
        if let Some(la) = a.lits.clone() {
            for v in &la {
                if self.value_ok(a, v, true)? && self.value_ok(b, v, true)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        if let Some(lb) = b.lits.clone() {
            for v in &lb {
                if self.value_ok(b, v, true)? && self.value_ok(a, v, true)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let common = a.t & b.t;
        if common & (T_NULL | T_BOOL) != 0 {
            return Ok(false);
        }
        if a.t & (T_INT | T_NUM) != 0 && b.t & (T_INT | T_NUM) != 0 {
            let overlap = if a.far.is_some() || b.far.is_some() {
                let ((al, ah), (bl, bh)) = (a.bounds_x(), b.bounds_x());
                al.max(bl) <= ah.min(bh)
            } else {
                a.lo.max(b.lo) <= a.hi.min(b.hi)
            };
            if overlap {
                return Ok(false);
            }
        }
        if common & T_STR != 0 {
            let lo = a.smin.max(b.smin);
            let hi = min_opt(a.smax, b.smax);
            if hi.is_none_or(|h| lo <= h) {
                return Ok(false);
            }
        }
        if common & T_ARR != 0 {
            let lo = a.amin.max(b.amin);
            let hi = min_opt(a.amax, b.amax);
            let by_len = hi.is_some_and(|h| lo > h);
            let mut by_item = false;
            for i in 0..a.amin.min(b.amin) as usize {
                if self.key_disjoint(&a.item_key(i), &b.item_key(i), depth)? {
                    by_item = true;
                    break;
                }
            }
            if !by_len && !by_item {
                return Ok(false);
            }
        }
        if common & T_OBJ != 0 {
            let lo = a.omin.max(b.omin);
            let hi = min_opt(a.omax, b.omax);
            let mut ok = hi.is_some_and(|h| lo > h);
            if !ok {
                let names: Vec<String> = a.req.iter().chain(b.req.iter()).cloned().collect();
                for n in names {
                    let ra = a.req.contains(&n);
                    let rb = b.req.contains(&n);
                    let (Some(ka), Some(kb)) =
                        (self.prop_key_full(a, &n)?, self.prop_key_full(b, &n)?)
                    else {
                        return Ok(false);
                    };
                    // Required on one side, impossible on the other.
                    if (ra && kb == vec![FALSE_LOC]) || (rb && ka == vec![FALSE_LOC]) {
                        ok = true;
                        break;
                    }
                    if ra && rb && self.key_disjoint(&ka, &kb, depth)? {
                        ok = true;
                        break;
                    }
                }
            }
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
