//! Literal checks: whether a JSON value satisfies a reading ([`Builder::value_ok`], for
//! `enum`/`const` filtering, disjointness and `uniqueItems`), property names against
//! `properties`/`patternProperties`/`propertyNames`, and when the items of an array are
//! distinct by construction.

use serde_json::Value;

use super::*;
use crate::config::CompileError;
use crate::num;

impl<'a> Builder<'a> {
    /// Does `v` satisfy `t`? `superset`: read formats as satisfied (the real format is wider
    /// than our regex); otherwise decide conservatively (false when unsure).
    pub(super) fn value_ok(
        &mut self,
        t: &Typed,
        v: &Value,
        superset: bool,
    ) -> Result<bool, CompileError> {
        // Charged here, checked by the callers that know the pointer.
        self.budget.charge(t.steps());
        if let Some(l) = &t.lits {
            if !l.iter().any(|w| json_eq(v, w)) {
                return Ok(false);
            }
        }
        match v {
            Value::Null => Ok(t.t & T_NULL != 0),
            Value::Bool(_) => Ok(t.t & T_BOOL != 0),
            Value::Number(n) => {
                if t.t & (T_INT | T_NUM) == 0 {
                    return Ok(false);
                }
                let s = n.to_string();
                let Some((x, exact)) = num::scaled(&s) else {
                    return Ok(superset);
                };
                if !exact || x.abs() >= BIG {
                    return Ok(superset);
                }
                if t.t & T_NUM == 0 {
                    let plain = s.bytes().all(|c| c.is_ascii_digit() || c == b'-');
                    if !plain && !superset {
                        return Ok(false);
                    }
                    if x % SCALE != 0 {
                        return Ok(false);
                    }
                }
                let in_range = match &t.far {
                    Some(f) => {
                        let x = BigInt::from(x);
                        f.0 <= x && x <= f.1
                    }
                    None => x >= t.lo && x <= t.hi,
                };
                Ok(in_range && x % t.q == 0)
            }
            Value::String(s) => {
                if t.t & T_STR == 0 {
                    return Ok(false);
                }
                let n = s.chars().count() as u32;
                if n < t.smin || t.smax.is_some_and(|m| n > m) {
                    return Ok(false);
                }
                for Pat {
                    re, format: is_fmt, ..
                } in t.pats.clone()
                {
                    if is_fmt && superset {
                        continue;
                    }
                    match self.dfa_for(&[re])? {
                        Ok(Some(d)) => {
                            let dfa = &self.ir.dfas[d as usize];
                            let mut st = dfa.start;
                            for &b in s.as_bytes() {
                                st = dfa.next(st, b);
                            }
                            if st == 0 || !dfa.accept[st as usize] {
                                return Ok(false);
                            }
                        }
                        Ok(None) => return Ok(false),
                        Err(_) => return Ok(superset),
                    }
                }
                Ok(true)
            }
            Value::Array(a) => {
                if t.t & T_ARR == 0
                    || (a.len() as u32) < t.amin
                    || t.amax.is_some_and(|m| a.len() as u32 > m)
                {
                    return Ok(false);
                }
                if t.uniq.is_some() && (0..a.len()).any(|i| (0..i).any(|j| json_eq(&a[i], &a[j]))) {
                    return Ok(false);
                }
                for (i, x) in a.iter().enumerate() {
                    let k = t.item_key(i);
                    if !self.value_ok_key(&k, x, superset)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Value::Object(o) => {
                if t.t & T_OBJ == 0
                    || (o.len() as u32) < t.omin
                    || t.omax.is_some_and(|m| o.len() as u32 > m)
                {
                    return Ok(false);
                }
                if t.req.iter().any(|r| !o.contains_key(r)) {
                    return Ok(false);
                }
                for (k, x) in o {
                    if !t.pnames.is_empty() {
                        let ok = if superset {
                            let pn = t.pnames.clone();
                            self.value_ok_key(&pn, &Value::String(k.clone()), true)?
                        } else {
                            self.name_ok(t, k)?
                        };
                        if !ok {
                            return Ok(false);
                        }
                    }
                    let Some(key) = self.prop_key_full(t, k)? else {
                        return Ok(superset);
                    };
                    if !self.value_ok_key(&key, x, superset)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// The key of property `name` in `t`: its listed schema and every matching
    /// `patternProperties` schema, else `additionalProperties`. `None`: a pattern cannot
    /// be read.
    pub(super) fn prop_key_full(
        &mut self,
        t: &Typed,
        name: &str,
    ) -> Result<Option<Key>, CompileError> {
        // The scan of the listed names, a step per 8 (checked by the callers).
        self.budget.charge(1 + t.props.len() as u64 / 8);
        let listed = t.props.iter().find(|(n, _)| n == name).map(|(_, k)| k);
        self.prop_key_listed(t, name, listed)
    }

    /// [`Builder::prop_key_full`] with `name`'s listed key (`properties`) already found.
    pub(super) fn prop_key_listed(
        &mut self,
        t: &Typed,
        name: &str,
        listed: Option<&Key>,
    ) -> Result<Option<Key>, CompileError> {
        let listed = listed.cloned();
        let mut matched = false;
        let mut k = listed.clone().unwrap_or_default();
        for (re, _, pk) in &t.pprops {
            match self.dfa_for(std::slice::from_ref(re))? {
                Ok(Some(d)) => {
                    let dfa = &self.ir.dfas[d as usize];
                    let mut st = dfa.start;
                    for &b in name.as_bytes() {
                        st = dfa.next(st, b);
                    }
                    if st != 0 && dfa.accept[st as usize] {
                        k = union_key(&k, pk);
                        matched = true;
                    }
                }
                Ok(None) => {}
                Err(_) => return Ok(None),
            }
        }
        if listed.is_none() && !matched {
            k = union_key(&k, &t.extra.clone().unwrap_or_default());
        }
        Ok(Some(k))
    }

    /// Is `name` certainly a valid key under `t`'s `propertyNames`? False when unsure (a
    /// pattern whose DFA cannot be built): such a name is then not generated. A keyword the
    /// key schema cannot enforce is refused as anywhere else.
    pub(super) fn name_ok(&mut self, t: &Typed, name: &str) -> Result<bool, CompileError> {
        if t.pnames.is_empty() {
            return Ok(true);
        }
        let d = self.key_dnf(&t.pnames)?;
        let v = Value::String(name.to_string());
        for a in d.iter() {
            self.key_formats(a)?;
            if self.value_ok(a, &v, false)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// An unknown `format` in a `propertyNames` schema: refused (or relaxed when lenient).
    pub(super) fn key_formats(&mut self, a: &Typed) -> Result<(), CompileError> {
        if a.t & T_STR != 0 {
            if let Some((p, f)) = a.bad_fmt.first().cloned() {
                self.unsupported("format", &p, &format!("format {f:?} is not enforced"))?;
            }
        }
        Ok(())
    }

    /// The key language of extra keys under `propertyNames` (`t.pnames` non-empty):
    /// `Ok(Err(names))`: exactly these listed names (an `enum`/`const`);
    /// `Ok(Ok(Some((min, max, patterns))))`: strings of that shape; `Ok(Ok(None))`: none are
    /// generated (no key is valid, or the language cannot be expressed exactly). One
    /// alternative is kept when `propertyNames` has several: a subset of the keys is sound.
    #[allow(clippy::type_complexity)]
    pub(super) fn extra_keys(
        &mut self,
        t: &Typed,
    ) -> Result<Result<Option<(u32, Option<u32>, Vec<Pat>)>, Vec<String>>, CompileError> {
        let d = self.key_dnf(&t.pnames)?;
        for a in d.iter() {
            if a.t & T_STR == 0 {
                continue;
            }
            self.key_formats(a)?;
            if let Some(lits) = a.lits.clone() {
                let mut rest = a.clone();
                rest.lits = None;
                let mut names = Vec::new();
                for v in &lits {
                    if let Value::String(n) = v {
                        if !names.contains(n) && self.value_ok(&rest, v, false)? {
                            names.push(n.clone());
                        }
                    }
                }
                if names.is_empty() || names.len() > 256 {
                    continue;
                }
                return Ok(Err(names));
            }
            if a.smax.is_some_and(|m| m < a.smin) {
                continue;
            }
            if !a.pats.is_empty() {
                let res: Vec<String> = a.pats.iter().map(|p| p.re.clone()).collect();
                match self.dfa_for(&res)? {
                    Ok(Some(_)) => {}
                    _ => continue,
                }
            }
            return Ok(Ok(Some((a.smin, a.smax, a.pats.clone()))));
        }
        Ok(Ok(None))
    }

    /// The literal ids of the values of `t.lits` that pass the rest of `t` (in order,
    /// one per value kept), as `lower` turns them into alternatives.
    pub(super) fn literal_ids(&mut self, t: &Typed) -> Result<Vec<u32>, CompileError> {
        let Some(lits) = &t.lits else {
            return Ok(Vec::new());
        };
        let mut rest = t.clone();
        rest.lits = None;
        let mut ids = Vec::new();
        for v in lits {
            if self.value_ok(&rest, v, false)? {
                let text = serde_json::to_string(v)
                    .expect("a Value serialises")
                    .into_bytes();
                ids.push(self.lit(text));
            }
        }
        Ok(ids)
    }

    /// The literal ids of the items of `t` when `uniqueItems` can be kept by never
    /// repeating a literal: no prefix, items a finite set of literals (at most 64, at
    /// least `minItems`), and values whose canonical texts differ exactly when the
    /// values do (strings, booleans, null, integers; `1` and `1.0` are one value). The
    /// set is built the way `lower` builds the items' own literal alternatives.
    pub(super) fn unique_literals(&mut self, t: &Typed) -> Result<Option<Vec<u32>>, CompileError> {
        if !t.prefix.is_empty() || t.items == vec![FALSE_LOC] {
            return Ok(None);
        }
        let Some(d) = self.key_dnf_or_unsure(&t.items.clone())? else {
            return Ok(None);
        };
        let mut ids: Vec<u32> = Vec::new();
        for a in d.iter() {
            let mine = if a.lits.is_some() {
                self.literal_ids(a)?
            } else if a.t & !(T_NULL | T_BOOL) != 0 {
                return Ok(None);
            } else {
                let mut v = Vec::new();
                if a.t & T_NULL != 0 {
                    v.push(LIT_NULL);
                }
                if a.t & T_BOOL != 0 {
                    v.extend([LIT_TRUE, LIT_FALSE]);
                }
                v
            };
            for id in mine {
                let text = &self.ir.lits[id as usize];
                let exact = match text.first() {
                    Some(b'"' | b't' | b'f' | b'n') => true,
                    Some(b'-' | b'0'..=b'9') => {
                        text.iter().all(|b| b.is_ascii_digit() || *b == b'-')
                    }
                    _ => false,
                };
                if !exact {
                    return Ok(None);
                }
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        Ok((!ids.is_empty() && ids.len() <= 64 && t.amin as usize <= ids.len()).then_some(ids))
    }

    /// `uniqueItems` holds for every array `t` generates: at most one item, or no items
    /// beyond the prefix and prefix items pairwise of disjoint JSON types or literal sets.
    pub(super) fn items_distinct(&mut self, t: &Typed) -> Result<bool, CompileError> {
        let mut cap = t.amax;
        if t.items == vec![FALSE_LOC] {
            cap = min_opt(cap, Some(t.prefix.len() as u32));
        } else if let Some(d) = self.key_dnf_or_unsure(&t.items.clone())? {
            if d.is_empty() {
                cap = min_opt(cap, Some(t.prefix.len() as u32));
            }
        }
        let Some(cap) = cap else {
            return Ok(false);
        };
        if cap <= 1 {
            return Ok(true);
        }
        if cap as usize > t.prefix.len() || cap > 64 {
            return Ok(false);
        }
        // Per position: the JSON types it can take, and its literal set when finite.
        let num = T_INT | T_NUM;
        let kind = |v: &Value| match v {
            Value::Null => T_NULL,
            Value::Bool(_) => T_BOOL,
            Value::Number(_) => num,
            Value::String(_) => T_STR,
            Value::Array(_) => T_ARR,
            Value::Object(_) => T_OBJ,
        };
        let mut sets: Vec<(u8, Option<Vec<Value>>)> = Vec::new();
        for i in 0..cap as usize {
            let Some(d) = self.key_dnf_or_unsure(&t.prefix[i].clone())? else {
                return Ok(false);
            };
            let mut mask = 0u8;
            let mut vals = Some(Vec::new());
            for a in d.iter() {
                match &a.lits {
                    Some(l) => {
                        for v in l {
                            mask |= kind(v);
                        }
                        if let Some(vs) = vals.as_mut() {
                            vs.extend(l.iter().cloned());
                        }
                    }
                    None => {
                        let m = if a.t & num != 0 { a.t | num } else { a.t };
                        mask |= m;
                        if m & !(T_NULL | T_BOOL) != 0 {
                            vals = None;
                        } else if let Some(vs) = vals.as_mut() {
                            if m & T_NULL != 0 {
                                vs.push(Value::Null);
                            }
                            if m & T_BOOL != 0 {
                                vs.extend([Value::Bool(true), Value::Bool(false)]);
                            }
                        }
                    }
                }
            }
            if vals.as_ref().is_some_and(|v| v.len() > 256) {
                vals = None;
            }
            sets.push((mask, vals));
        }
        for i in 0..sets.len() {
            for j in 0..i {
                if sets[i].0 & sets[j].0 == 0 {
                    continue; // different JSON types are never equal
                }
                match (&sets[i].1, &sets[j].1) {
                    (Some(x), Some(y)) if !x.iter().any(|v| y.iter().any(|w| json_eq(v, w))) => {}
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }

    pub(super) fn value_ok_key(
        &mut self,
        k: &Key,
        v: &Value,
        superset: bool,
    ) -> Result<bool, CompileError> {
        let Some(d) = self.key_dnf_or_unsure(k)? else {
            return Ok(superset);
        };
        for t in d.iter() {
            if self.value_ok(t, v, superset)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
