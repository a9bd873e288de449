//! Line errors in the order Pydantic gives them: a model's fields in their declared order
//! (the schema's `properties`), items by index, union members in the union's order, and
//! the keys no property names (`extra_forbidden`, a dict's entries) after the fields.
//! jsonschema reports by keyword (`required` before `properties`, ...), so without this a
//! missing field could come before the error of the field declared ahead of it.

use serde_json::Value;

use super::unions::{branch_label, is_null_schema, resolve};
use super::{LineError, LocItem};

/// Sort `lines` (stable) by where their `loc` falls in `schema`.
pub(super) fn in_field_order(lines: &mut [LineError], schema: &Value) {
    if lines.len() < 2 {
        return;
    }
    lines.sort_by_cached_key(|l| rank(schema, &l.loc));
}

/// How deep into nested unions (with no loc item of their own) the walk looks.
const MAX_HOPS: usize = 32;

/// One number per loc item: the field's place among `properties`, the item's index, the
/// union member's place; `usize::MAX` where the schema says nothing.
fn rank(root: &Value, loc: &[LocItem]) -> Vec<usize> {
    let mut out = Vec::with_capacity(loc.len());
    let mut here = Some(root);
    let mut hops = 0;
    let mut i = 0;
    while i < loc.len() {
        let Some(s) = here.map(|s| resolve(root, s)) else {
            out.push(match &loc[i] {
                LocItem::Index(n) => *n,
                LocItem::Key(_) => usize::MAX,
            });
            i += 1;
            continue;
        };
        // A union: a member named by the next item, or the one member besides `null`.
        if let Some(members) = s
            .get("anyOf")
            .or_else(|| s.get("oneOf"))
            .and_then(Value::as_array)
        {
            if hops < MAX_HOPS {
                hops += 1;
                if let LocItem::Key(k) = &loc[i] {
                    if let Some(m) = members
                        .iter()
                        .position(|m| branch_label(root, m, 0) == *k || tag_of(root, m) == Some(k))
                    {
                        out.push(m);
                        here = Some(&members[m]);
                        i += 1;
                        continue;
                    }
                }
                let others: Vec<&Value> = members
                    .iter()
                    .filter(|m| !is_null_schema(root, m))
                    .collect();
                if let [only] = others[..] {
                    here = Some(only);
                    continue;
                }
            }
        }
        match &loc[i] {
            LocItem::Key(k) => match s.get("properties").and_then(Value::as_object) {
                Some(props) if props.contains_key(k) => {
                    out.push(props.keys().position(|x| x == k).unwrap_or(usize::MAX));
                    here = props.get(k);
                }
                _ => {
                    out.push(usize::MAX);
                    here = s.get("additionalProperties").filter(|v| v.is_object());
                }
            },
            LocItem::Index(n) => {
                out.push(*n);
                here = match (s.get("prefixItems"), s.get("items")) {
                    (Some(Value::Array(p)), _) if *n < p.len() => p.get(*n),
                    (_, Some(items)) if items.is_object() => Some(items),
                    _ => None,
                };
            }
        }
        i += 1;
    }
    out
}

/// A tagged member's tag: its `properties/<any>/const` string, as the discriminated
/// union's errors name it.
fn tag_of<'s>(root: &'s Value, member: &'s Value) -> Option<&'s String> {
    let m = resolve(root, member);
    m.get("properties")?
        .as_object()?
        .values()
        .find_map(|p| match resolve(root, p).get("const") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        })
}
