//! `discriminator` (OpenAPI; Pydantic's discriminated unions): a `oneOf`/`anyOf` whose
//! branches pin a tag property apart is disjoint by construction, and skips the generic
//! check of `narrow.rs`.

use serde_json::{Map, Value};

use super::*;
use crate::config::CompileError;

impl<'a> Builder<'a> {
    /// `discriminator` at `kp` (its object is `m["discriminator"]`): accepted when the
    /// sibling `oneOf` (else `anyOf`) is disjoint on the tag. Every alternative of every
    /// branch, read with the sibling keywords (`base`), must be an object that pins the
    /// tag property with `const` or `enum`; the pinned sets must be pairwise disjoint;
    /// and `mapping`, when present, must send each tag to the branch that pins it and list
    /// every pinned tag. A branch that lists the tag without requiring it (Pydantic's
    /// `Literal` tag with a default) is narrowed to require it: Pydantic and OpenAPI
    /// refuse an instance without its tag, and narrowing only drops instances. Then an
    /// instance the grammar produces carries its tag and fails every other branch, whose
    /// tag, when present, is pinned apart: the branches are disjoint without the generic
    /// check, which would find two branches that both take an instance without the tag.
    /// Returns the combinator's pointer and its branches so narrowed (with `base`); `None`
    /// when the keyword was relaxed (lenient) instead.
    pub(super) fn discriminator(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        kp: &str,
        base: &Typed,
    ) -> Result<Option<Tagged>, CompileError> {
        let d = m["discriminator"]
            .as_object()
            .ok_or_else(|| Self::invalid(kp, "not an object"))?;
        let name = match d.get("propertyName") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(Self::invalid(&format!("{kp}/propertyName"), "not a string")),
            None => return Err(Self::invalid(kp, "no propertyName")),
        };
        // Each target is a reference, or (Pydantic, for a branch that is itself a union)
        // the branch's schema written out.
        let mut mapping: Option<Vec<(String, &Value)>> = None;
        if let Some(x) = d.get("mapping") {
            let o = x
                .as_object()
                .ok_or_else(|| Self::invalid(&format!("{kp}/mapping"), "not an object"))?;
            let mut v = Vec::new();
            for (tag, target) in o {
                if !target.is_string() && !target.is_object() {
                    let at = format!("{kp}/mapping/{}", esc_ptr(tag));
                    return Err(Self::invalid(&at, "neither a reference nor a schema"));
                }
                v.push((tag.clone(), target));
            }
            mapping = Some(v);
        }
        let comb = if m.contains_key("oneOf") {
            "oneOf"
        } else if m.contains_key("anyOf") {
            "anyOf"
        } else {
            self.unsupported(
                "discriminator",
                kp,
                "no sibling oneOf or anyOf to discriminate",
            )?;
            return Ok(None);
        };
        let cp = format!("{ptr}/{comb}");
        let n = m[comb].as_array().map_or(0, Vec::len);
        let mut labels = Vec::new();
        let mut targets = Vec::new();
        let mut pinned: Vec<Vec<Value>> = Vec::new();
        let mut tagged: Vec<Vec<Typed>> = Vec::new();
        for i in 0..n {
            let bp = format!("{cp}/{i}");
            let bref = m[comb][i].get("$ref").and_then(Value::as_str);
            labels.push(format!(
                "branch {i} ({})",
                bref.map_or(format!("#{bp}"), String::from)
            ));
            let bl = self.loc(&bp);
            targets.push(match bref {
                Some(r) => vec![bl, self.resolve_ref(r, &format!("{bp}/$ref"))?],
                None => vec![bl],
            });
            let b = self.dnf(bl)?;
            let mut real = self.conj(vec![base.clone()], &b, kp)?;
            let mut set: Vec<Value> = Vec::new();
            for alt in &mut real {
                if alt.t & !T_OBJ != 0 {
                    let why = format!("{} admits values that are not objects", labels[i]);
                    self.unsupported("discriminator", kp, &why)?;
                    return Ok(None);
                }
                if !alt.req.contains(&name) {
                    alt.req.push(name.clone());
                }
                let Some(pk) = self.prop_key_full(alt, &name)? else {
                    let why = format!(
                        "{}: a pattern that cannot be read decides {name:?}",
                        labels[i]
                    );
                    self.unsupported("discriminator", kp, &why)?;
                    return Ok(None);
                };
                let pd = self.key_dnf(&pk).map_err(|e| at_ptr(e, kp))?;
                for pa in pd.iter() {
                    let Some(lits) = pa.lits.clone() else {
                        let why = format!(
                            "{} does not pin {name:?} to a literal (const or enum)",
                            labels[i]
                        );
                        self.unsupported("discriminator", kp, &why)?;
                        return Ok(None);
                    };
                    for v in lits {
                        if self.value_ok(pa, &v, true)? && !set.iter().any(|w| json_eq(&v, w)) {
                            set.push(v);
                        }
                    }
                }
            }
            if set.is_empty() {
                // Forbidden (`additionalProperties: false`, say) or unsatisfiable: the
                // branch could never be chosen, which is a schema bug worth naming.
                let why = format!("{} allows no value of {name:?}", labels[i]);
                self.unsupported("discriminator", kp, &why)?;
                return Ok(None);
            }
            pinned.push(set);
            tagged.push(real);
        }
        for i in 0..n {
            for j in i + 1..n {
                if let Some(v) = pinned[i]
                    .iter()
                    .find(|v| pinned[j].iter().any(|w| json_eq(v, w)))
                {
                    let why = format!("{} and {} both pin {name:?} to {v}", labels[i], labels[j]);
                    self.unsupported("discriminator", kp, &why)?;
                    return Ok(None);
                }
            }
        }
        if let Some(mapping) = mapping {
            // A tag as `mapping` spells it: strings as they are, other literals as JSON.
            let spelt = |v: &Value| match v {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let mut listed: Vec<(usize, String)> = Vec::new();
            for (tag, target) in &mapping {
                let at = format!("{kp}/mapping/{}", esc_ptr(tag));
                let found = match target {
                    Value::String(r) => {
                        let Ok(tl) = self.resolve_ref(r, &at) else {
                            let why = format!("mapping {tag:?}: cannot resolve {r:?}");
                            self.unsupported("discriminator", kp, &why)?;
                            return Ok(None);
                        };
                        (0..n).find(|&i| targets[i].contains(&tl))
                    }
                    schema => (0..n).find(|&i| m[comb][i] == **schema),
                };
                let Some(i) = found else {
                    let what = match target {
                        Value::String(r) => r.clone(),
                        _ => "a schema".to_string(),
                    };
                    let why =
                        format!("mapping {tag:?} names {what}, which is no branch of the {comb}");
                    self.unsupported("discriminator", kp, &why)?;
                    return Ok(None);
                };
                if !pinned[i].iter().any(|v| spelt(v) == *tag) {
                    let why = format!(
                        "mapping {tag:?} names {}, which does not pin {name:?} to {tag:?}",
                        labels[i]
                    );
                    self.unsupported("discriminator", kp, &why)?;
                    return Ok(None);
                }
                listed.push((i, tag.clone()));
            }
            for i in 0..n {
                for v in &pinned[i] {
                    if !listed.iter().any(|(j, t)| *j == i && *t == spelt(v)) {
                        let why = format!(
                            "{} pins {name:?} to {v}, which mapping does not list",
                            labels[i]
                        );
                        self.unsupported("discriminator", kp, &why)?;
                        return Ok(None);
                    }
                }
            }
        }
        Ok(Some((cp, tagged)))
    }
}
