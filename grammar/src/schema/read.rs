//! Reading one schema object's keywords into [`Typed`] conjunctions: the keyword table
//! ([`Builder::keyword`]) and one reader per keyword that needs more than a line. The
//! keywords that need every sibling (`oneOf`, `not`, `if`, `discriminator`) are collected
//! here and applied in `narrow.rs` and `discriminator.rs`.

use std::rc::Rc;

use num_bigint::BigInt;
use serde_json::{Map, Value};

use super::*;
use crate::config::CompileError;
use crate::num;

/// What one schema object's keywords gave, before the keywords that need every sibling
/// (`discriminator`, `oneOf`, `not`, `if`) are applied in [`Builder::combine`].
struct Reading {
    /// The sibling keywords read into one conjunction.
    base: Typed,
    /// Disjunctions to intersect with `base`: `$ref`, `allOf`, `anyOf`, exact `not`s,
    /// dependencies.
    conjs: Vec<Rc<Vec<Typed>>>,
    one_ofs: Vec<(String, Vec<Rc<Vec<Typed>>>)>,
    nots: Vec<(String, Rc<Vec<Typed>>)>,
    ifs: Vec<IfThenElse>,
    disc: Option<String>,
    /// `oneOf`s with a narrowed branch: exactly-one cannot be checked against it.
    narrowed_one_ofs: Vec<String>,
}

/// An `if` at its pointer: the condition, `then` and `else`.
pub(super) type IfThenElse = (String, Rc<Vec<Typed>>, Vec<Typed>, Vec<Typed>);

impl<'a> Builder<'a> {
    /// Reads the schema at `loc` into a disjunction of conjunctions: `$ref` (alone before
    /// 2019-09), every keyword in turn ([`Builder::keyword`]), then the keywords that need
    /// all their siblings ([`Builder::combine`]).
    pub(super) fn dnf_inner(&mut self, loc: u32, ptr: &str) -> Result<Vec<Typed>, CompileError> {
        let v = self.value(loc);
        let m: &Map<String, Value> = match v {
            Value::Bool(true) => return Ok(vec![Typed::any()]),
            Value::Bool(false) => return Ok(vec![]),
            Value::Object(m) => m,
            _ => {
                return Err(Self::invalid(
                    ptr,
                    "a schema must be an object or a boolean",
                ))
            }
        };
        let mut rd = Reading {
            base: Typed::any(),
            conjs: Vec::new(),
            one_ofs: Vec::new(),
            nots: Vec::new(),
            ifs: Vec::new(),
            disc: None,
            narrowed_one_ofs: Vec::new(),
        };
        let old_draft = matches!(self.draft, Draft::D4 | Draft::D6 | Draft::D7);
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::invalid(&format!("{ptr}/$ref"), "not a string"))?;
            let t = self.resolve_ref(r, &format!("{ptr}/$ref"))?;
            let d = self.dnf(t)?;
            if old_draft {
                return Ok((*d).clone());
            }
            rd.conjs.push(d);
        }
        for (k, x) in m {
            self.keyword(&mut rd, m, ptr, k, x)?;
        }
        self.combine(rd, m, ptr)
    }

    /// One keyword of the schema object `m` at `ptr` read into `r`.
    fn keyword(
        &mut self,
        rd: &mut Reading,
        m: &Map<String, Value>,
        ptr: &str,
        k: &str,
        x: &Value,
    ) -> Result<(), CompileError> {
        let p = |k: &str| format!("{ptr}/{}", esc_ptr(k));
        let kp = p(k);
        match k {
            "$ref" => {}
            "type" => self.kw_type(rd, x, &kp)?,
            "enum" => {
                let a = x
                    .as_array()
                    .ok_or_else(|| Self::invalid(&kp, "not an array"))?;
                rd.base.lits = Some(a.clone());
            }
            "const" => rd.base.lits = Some(vec![x.clone()]),
            "multipleOf" => self.kw_multiple_of(rd, k, x, &kp)?,
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                self.kw_bound(rd, m, k, x, &kp)?
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => self.kw_count(rd, k, x, &kp)?,
            "pattern" => self.kw_pattern(rd, k, x, &kp)?,
            "format" => self.kw_format(rd, x, &kp)?,
            "items" => self.kw_items(rd, m, ptr, x, &kp)?,
            "prefixItems" => {
                let a = x
                    .as_array()
                    .ok_or_else(|| Self::invalid(&kp, "not an array"))?;
                rd.base.prefix = (0..a.len())
                    .map(|i| self.key_of(&format!("{kp}/{i}")))
                    .collect();
            }
            "additionalItems" => {}
            "properties" => self.kw_properties(rd, x, &kp)?,
            "required" => self.kw_required(rd, x, &kp)?,
            "additionalProperties" => match x {
                Value::Bool(true) => {}
                Value::Bool(false) => rd.base.extra = Some(vec![FALSE_LOC]),
                _ => rd.base.extra = Some(self.key_of(&kp)),
            },
            "patternProperties" => self.kw_pattern_properties(rd, k, x, &kp)?,
            "allOf" | "anyOf" | "oneOf" => self.kw_combinator(rd, m, k, x, &kp)?,
            "not" => self.kw_not(rd, x, &kp)?,
            "uniqueItems" => {
                // Checked where an array is lowered: only arrays whose items are
                // distinct by construction are generated.
                if x.as_bool() == Some(true) {
                    rd.base.uniq = Some(kp.clone());
                }
            }
            "propertyNames" => {
                // Checked where an object is lowered: listed names are tested, extra
                // keys are generated only inside the key language.
                if x.as_bool() != Some(true) {
                    rd.base.pnames = union_key(&rd.base.pnames, &self.key_of(&kp));
                }
            }
            "if" => self.kw_if(rd, m, ptr, &kp)?,
            "then" | "else" => {}
            "x-formwork-source" => self.kw_source(rd, x, &kp)?,
            "dependencies" | "dependentRequired" | "dependentSchemas" => {
                self.kw_dependencies(rd, x, &kp)?
            }
            "contains"
            | "minContains"
            | "maxContains"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "$dynamicRef"
            | "$recursiveRef" => {
                self.unsupported(k, &kp, "not enforced by the grammar")?;
            }
            // Read after the loop, with its sibling `oneOf`/`anyOf` and `rd.base`.
            "discriminator" => rd.disc = Some(kp.clone()),
            "contentEncoding" | "contentMediaType" | "contentSchema" => {
                if matches!(self.draft, Draft::D6 | Draft::D7) {
                    self.unsupported(k, &kp, "content is not enforced")?;
                }
            }
            _ => {
                let _ = IGNORED;
            }
        }
        Ok(())
    }

    /// `type`: the JSON types allowed (a name or a list; draft 4 also reads `any`).
    fn kw_type(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        let mut t = 0u8;
        let names: Vec<&Value> = match x {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for n in names {
            t |= match n.as_str() {
                Some("null") => T_NULL,
                Some("boolean") => T_BOOL,
                Some("integer") => T_INT,
                Some("number") => T_NUM | T_INT,
                Some("string") => T_STR,
                Some("array") => T_ARR,
                Some("object") => T_OBJ,
                Some("any") if self.draft == Draft::D4 => T_ALL,
                _ => return Err(Self::invalid(kp, format!("unknown type {n}"))),
            };
        }
        rd.base.t &= t;
        Ok(())
    }

    /// `multipleOf`, exact in units of 10^-15.
    fn kw_multiple_of(
        &mut self,
        rd: &mut Reading,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let s = x
            .as_number()
            .ok_or_else(|| Self::invalid(kp, "not a number"))?
            .to_string();
        match num::scaled(&s) {
            Some((q, true)) if q > 0 && q < BIG => rd.base.q = q,
            _ => self.unsupported(
                k,
                kp,
                &format!(
                    "multipleOf {s} is not a positive decimal with at most 15 fraction digits"
                ),
            )?,
        }
        Ok(())
    }

    /// `minimum`/`maximum` and their exclusive forms (draft 4's boolean modifier too), exact beyond `BIG` in `Typed::far`.
    fn kw_bound(
        &mut self,
        rd: &mut Reading,
        m: &Map<String, Value>,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        if let Value::Bool(_) = x {
            return Ok(()); // draft-04 modifier, read with its bound
        }
        let s = x
            .as_number()
            .ok_or_else(|| Self::invalid(kp, "not a number"))?
            .to_string();
        let (v, exact) = num::scaled(&s).ok_or_else(|| Self::invalid(kp, "not a number"))?;
        let excl_flag = |name: &str| m.get(name).and_then(Value::as_bool).unwrap_or(false);
        let ex = match k {
            "minimum" => excl_flag("exclusiveMinimum"),
            "maximum" => excl_flag("exclusiveMaximum"),
            _ => true,
        };
        let is_min = k == "minimum" || k == "exclusiveMinimum";
        // A bound `scaled` clamps is kept exactly as well (see `Typed::far`);
        // the exact bounds so far are taken before the clamped ones move.
        let far = (v.abs() >= BIG || rd.base.far.is_some()).then(|| rd.base.bounds_x());
        match (is_min, ex) {
            (true, false) => rd.base.lo = rd.base.lo.max(if exact { v } else { v + 1 }),
            (true, true) => rd.base.lo = rd.base.lo.max(v + 1),
            (false, false) => rd.base.hi = rd.base.hi.min(v),
            (false, true) => rd.base.hi = rd.base.hi.min(if exact { v - 1 } else { v }),
        }
        if let Some((mut lo, mut hi)) = far {
            let (vx, exact) = if v.abs() >= BIG {
                num::scaled_big(&s).ok_or_else(|| Self::invalid(kp, "not a number"))?
            } else {
                (BigInt::from(v), exact)
            };
            match (is_min, ex) {
                (true, false) if exact => lo = lo.max(vx),
                (true, _) => lo = lo.max(vx + 1),
                (false, true) if exact => hi = hi.min(vx - 1),
                (false, _) => hi = hi.min(vx),
            }
            rd.base.far = Some(Rc::new((lo, hi)));
        }
        Ok(())
    }

    /// The counts: `minLength`, `maxLength`, `minItems`, `maxItems`, `minProperties`, `maxProperties`.
    fn kw_count(
        &mut self,
        rd: &mut Reading,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let n = x
            .as_u64()
            .or_else(|| {
                x.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| Self::invalid(kp, "not a non-negative integer"))?;
        let n = n.min(u32::MAX as u64 / 2) as u32;
        match k {
            "minLength" => rd.base.smin = rd.base.smin.max(n),
            "maxLength" => rd.base.smax = min_opt(rd.base.smax, Some(n)),
            "minItems" => rd.base.amin = rd.base.amin.max(n),
            "maxItems" => rd.base.amax = min_opt(rd.base.amax, Some(n)),
            "minProperties" => rd.base.omin = rd.base.omin.max(n),
            _ => rd.base.omax = min_opt(rd.base.omax, Some(n)),
        }
        Ok(())
    }

    /// `pattern`, as anchored search regexes.
    fn kw_pattern(
        &mut self,
        rd: &mut Reading,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let s = x
            .as_str()
            .ok_or_else(|| Self::invalid(kp, "not a string"))?;
        match pattern::search_regexes(s) {
            Ok(rs) => {
                for r in rs {
                    rd.base.pats.push(Pat {
                        re: r,
                        label: format!("pattern {s:?}"),
                        format: false,
                        ptr: kp.to_string(),
                    });
                }
            }
            Err(e) => self.unsupported(k, kp, &format!("pattern {s:?}: {e}"))?,
        }
        Ok(())
    }

    /// `format`: a sound subset regex, or an unknown format kept for `lower`.
    fn kw_format(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        let s = x.as_str().unwrap_or("");
        match pattern::format_regexes(s) {
            Some(rs) => {
                for r in rs {
                    rd.base.pats.push(Pat {
                        re: r,
                        label: format!("format {s:?}"),
                        format: true,
                        ptr: kp.to_string(),
                    });
                }
            }
            None => rd.base.bad_fmt.push((kp.to_string(), s.to_string())),
        }
        Ok(())
    }

    /// `items`: one schema for every item, or (before 2020-12) a tuple with `additionalItems`.
    fn kw_items(
        &mut self,
        rd: &mut Reading,
        m: &Map<String, Value>,
        ptr: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let p = |k: &str| format!("{ptr}/{}", esc_ptr(k));
        match x {
            Value::Array(a) => {
                rd.base.prefix = (0..a.len())
                    .map(|i| self.key_of(&format!("{kp}/{i}")))
                    .collect();
                rd.base.items = match m.get("additionalItems") {
                    Some(_) => self.key_of(&p("additionalItems")),
                    None => Vec::new(),
                };
            }
            // An object: the schema of every item (after `prefixItems`, when present).
            _ => rd.base.items = self.key_of(kp),
        }
        Ok(())
    }

    /// `properties`: each listed name with the key of its schema.
    fn kw_properties(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        let o = x
            .as_object()
            .ok_or_else(|| Self::invalid(kp, "not an object"))?;
        rd.base.has_props = true;
        rd.base.props = o
            .keys()
            .map(|n| (n.clone(), self.key_of(&format!("{kp}/{}", esc_ptr(n)))))
            .collect();
        Ok(())
    }

    /// `required` (draft 4 also allows a boolean inside a property, which says nothing here).
    fn kw_required(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        if let Value::Array(a) = x {
            for n in a {
                let n = n
                    .as_str()
                    .ok_or_else(|| Self::invalid(kp, "not a string"))?;
                if !rd.base.req.iter().any(|r| r == n) {
                    rd.base.req.push(n.to_string());
                }
            }
        } else if x.is_boolean() && self.draft == Draft::D4 {
        } else {
            return Err(Self::invalid(kp, "not an array"));
        }
        Ok(())
    }

    /// `patternProperties`: each pattern as a search regex with the key of its schema.
    fn kw_pattern_properties(
        &mut self,
        rd: &mut Reading,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let o = x
            .as_object()
            .ok_or_else(|| Self::invalid(kp, "not an object"))?;
        if !o.is_empty() {
            rd.base.has_props = true;
        }
        // Listed properties also satisfy every matching pattern's schema; keys that
        // only a pattern admits are not generated (an instance without them is valid).
        for pat in o.keys() {
            match pattern::search_regex(pat) {
                Ok(re) => rd.base.pprops.push((
                    re,
                    pat.clone(),
                    self.key_of(&format!("{kp}/{}", esc_ptr(pat))),
                )),
                Err(e) => self.unsupported(
                    k,
                    &format!("{kp}/{}", esc_ptr(pat)),
                    &format!("pattern {pat:?}: {e}"),
                )?,
            }
        }
        Ok(())
    }

    /// `allOf`, `anyOf`, `oneOf`: each branch read; `allOf` intersects, `anyOf` distributes, `oneOf` (and an `anyOf` a `discriminator` reads) waits for `combine`.
    fn kw_combinator(
        &mut self,
        rd: &mut Reading,
        m: &Map<String, Value>,
        k: &str,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        let a = x
            .as_array()
            .ok_or_else(|| Self::invalid(kp, "not an array"))?;
        let mut branches = Vec::new();
        let mut exact = true;
        for i in 0..a.len() {
            let l = self.loc(&format!("{kp}/{i}"));
            let (d, ex) = self.dnf_exact(l)?;
            exact &= ex;
            branches.push(d);
        }
        if !exact && k == "oneOf" {
            rd.narrowed_one_ofs.push(kp.to_string());
        }
        // An `anyOf` that a `discriminator` reads waits for it with the `oneOf`s.
        let tagged = m.contains_key("discriminator") && !m.contains_key("oneOf");
        match k {
            "allOf" => rd.conjs.extend(branches),
            "anyOf" if !tagged => rd.conjs.push(Rc::new(
                branches.iter().flat_map(|b| b.iter().cloned()).collect(),
            )),
            _ => rd.one_ofs.push((kp.to_string(), branches)),
        }
        Ok(())
    }

    /// `not`: exact complements where they exist (`required`, `type`), else kept for `combine`.
    fn kw_not(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        // `not` of something nothing satisfies is no constraint; `not: {required}`
        // and `not: {type}` have exact complements.
        let l = self.loc(kp);
        let (d, exact) = self.dnf_exact(l)?;
        let keys: Vec<&str> = x
            .as_object()
            .map(|o| {
                o.keys()
                    .map(String::as_str)
                    .filter(|k| !IGNORED.contains(k))
                    .collect()
            })
            .unwrap_or_default();
        if d.is_empty() {
        } else if keys == ["required"] && d.len() == 1 {
            let mut alts = Vec::new();
            let mut other = Typed::any();
            other.t &= !T_OBJ;
            alts.push(other);
            for r in &d[0].req {
                let mut a = Typed::any();
                forbid(&mut a, r);
                alts.push(a);
            }
            rd.conjs.push(Rc::new(alts));
        } else if keys == ["type"] && d.len() == 1 {
            let mut a = Typed::any();
            a.t &= !d[0].t;
            if d[0].t & (T_INT | T_NUM) != 0 {
                a.t &= !(T_INT | T_NUM);
            }
            rd.conjs.push(Rc::new(vec![a]));
        } else if !exact {
            // Its complement would contain what the narrowing dropped.
            self.unsupported(
                "not",
                kp,
                "the negated schema is itself narrowed (a nested not, if or oneOf), so its complement is not known",
            )?;
        } else {
            rd.nots.push((kp.to_string(), d));
        }
        Ok(())
    }

    /// `if` with `then`/`else`, kept for `combine`.
    fn kw_if(
        &mut self,
        rd: &mut Reading,
        m: &Map<String, Value>,
        ptr: &str,
        kp: &str,
    ) -> Result<(), CompileError> {
        let p = |k: &str| format!("{ptr}/{}", esc_ptr(k));
        if m.contains_key("then") || m.contains_key("else") {
            let l = self.loc_of(kp);
            let (d, exact) = self.dnf_exact(l)?;
            if !exact {
                self.unsupported(
                    "if",
                    kp,
                    "the condition is itself narrowed (a nested not, if or oneOf), so its complement is not known",
                )?;
                return Ok(());
            }
            let then = match m.get("then") {
                Some(_) => {
                    let l = self.loc_of(&p("then"));
                    (*self.dnf(l)?).clone()
                }
                None => vec![Typed::any()],
            };
            let els = match m.get("else") {
                Some(_) => {
                    let l = self.loc_of(&p("else"));
                    (*self.dnf(l)?).clone()
                }
                None => vec![Typed::any()],
            };
            rd.ifs.push((kp.to_string(), d, then, els));
        }
        Ok(())
    }

    /// `x-formwork-source`: this string is a span of the document (docs/source.md).
    fn kw_source(&mut self, rd: &mut Reading, x: &Value, kp: &str) -> Result<(), CompileError> {
        let mode = match x.as_str() {
            Some("substring") => SourceMode::Substring,
            Some("words") => SourceMode::Words,
            _ => {
                return Err(Self::invalid(
                    kp,
                    format!("x-formwork-source is {x}, not \"substring\" or \"words\""),
                ))
            }
        };
        rd.base.src = Some((mode, kp.to_string()));
        Ok(())
    }

    /// `dependencies`, `dependentRequired`, `dependentSchemas`.
    fn kw_dependencies(
        &mut self,
        rd: &mut Reading,
        x: &Value,
        kp: &str,
    ) -> Result<(), CompileError> {
        // Exact: for each trigger, either it is absent or the dependency holds.
        let o = x
            .as_object()
            .ok_or_else(|| Self::invalid(kp, "not an object"))?;
        for (name, dep) in o {
            let mut absent = Typed::any();
            forbid(&mut absent, name);
            let mut alts = vec![absent];
            match dep {
                Value::Array(names) => {
                    let mut need = Typed::any();
                    need.req = names
                        .iter()
                        .filter_map(|n| n.as_str().map(String::from))
                        .collect();
                    alts.push(need);
                }
                _ => {
                    let l = self.loc(&format!("{kp}/{}", esc_ptr(name)));
                    alts.extend(self.dnf(l)?.iter().cloned());
                }
            }
            rd.conjs.push(Rc::new(alts));
        }
        Ok(())
    }

    /// The keywords that need every sibling read, then the conjunction of all: a verified
    /// `discriminator`, each `oneOf`, `not` and `if` against `base` (`narrow.rs`).
    fn combine(
        &mut self,
        rd: Reading,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Result<Vec<Typed>, CompileError> {
        let Reading {
            base,
            mut conjs,
            one_ofs,
            nots,
            ifs,
            disc,
            narrowed_one_ofs,
        } = rd;
        // A verified `discriminator` hands over its combinator's branches, each with the
        // tag required, pairwise disjoint by the tag (see `discriminator`).
        let mut by_tag = match disc {
            Some(dkp) => self.discriminator(m, ptr, &dkp, &base)?,
            None => None,
        };
        self.apply_one_ofs(&base, one_ofs, &narrowed_one_ofs, &mut by_tag, &mut conjs)?;
        self.apply_nots(&base, nots, &mut conjs)?;
        self.apply_ifs(&base, ifs, &mut conjs)?;
        let mut acc = vec![base];
        for c in conjs {
            acc = self.conj(acc, &c, ptr)?;
        }
        Ok(acc)
    }
}
