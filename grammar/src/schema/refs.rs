//! Drafts and references: which draft a document is written in (`$schema`), the index of
//! its `$id`/`id`/`$anchor`s built with the size and depth checks ([`Builder::new`]), and
//! `$ref` resolved to a location inside the document ([`Builder::resolve_ref`]).

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

use super::*;
use crate::config::{Budget, CompileError, Config};

pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Two hex digits after `%`, read as bytes: `%` before a multi-byte
        // character is kept as it is (slicing the str there would split it).
        let hex = |j: usize| b.get(j).and_then(|&c| (c as char).to_digit(16));
        if b[i] == b'%' {
            if let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl<'a> Builder<'a> {
    pub(crate) fn new(
        root: &'a Value,
        cfg: &'a Config,
        budget: &'a Budget,
    ) -> Result<Builder<'a>, CompileError> {
        let draft = match root.get("$schema").and_then(Value::as_str) {
            Some(s) if s.contains("draft-04") || s.contains("draft-03") => Draft::D4,
            Some(s) if s.contains("draft-06") => Draft::D6,
            Some(s) if s.contains("draft-07") => Draft::D7,
            Some(s) if s.contains("2019-09") => Draft::D2019,
            _ => Draft::D2020,
        };
        let mut b = Builder {
            root,
            cfg,
            draft,
            locs: vec!["<false>".into()],
            loc_ids: HashMap::new(),
            ids: HashMap::new(),
            root_id: None,
            dnf_memo: HashMap::new(),
            in_progress: HashSet::new(),
            node_memo: HashMap::new(),
            queue: VecDeque::new(),
            ir: Ir::default(),
            relaxed: Vec::new(),
            dfa_memo: HashMap::new(),
            key_memo: HashMap::new(),
            lit_ids: HashMap::new(),
            len_memo: HashMap::new(),
            budget,
            depth: 0,
            fmt_lits: 0,
            inexact: HashSet::new(),
            tainted: false,
        };
        // Size, depth and ids.
        let mut count = 0usize;
        let mut stack: Vec<(&Value, String, usize)> = vec![(root, String::new(), 0)];
        while let Some((v, ptr, d)) = stack.pop() {
            count += 1;
            if count > cfg.limits.schema_values {
                return Err(CompileError::Limit {
                    what: "schema values",
                    given: count,
                    limit: cfg.limits.schema_values,
                    pointer: String::new(),
                });
            }
            if d > cfg.limits.depth {
                return Err(CompileError::Limit {
                    what: "schema depth",
                    given: d,
                    limit: cfg.limits.depth,
                    pointer: ptr,
                });
            }
            match v {
                Value::Object(m) => {
                    for key in ["$id", "id"] {
                        if let Some(Value::String(s)) = m.get(key) {
                            if key == "id"
                                && m.get("id").is_some_and(|x| x.is_string())
                                && ptr.ends_with("/properties")
                            {
                                continue;
                            }
                            if ptr.is_empty() {
                                b.root_id = Some(s.trim_end_matches('#').to_string());
                            }
                            b.ids
                                .entry(s.trim_end_matches('#').to_string())
                                .or_insert(ptr.clone());
                        }
                    }
                    if let Some(Value::String(s)) = m.get("$anchor") {
                        b.ids.entry(format!("#{s}")).or_insert(ptr.clone());
                    }
                    for (k, x) in m {
                        stack.push((x, format!("{ptr}/{}", esc_ptr(k)), d + 1));
                    }
                }
                Value::Array(a) => {
                    for (i, x) in a.iter().enumerate() {
                        stack.push((x, format!("{ptr}/{i}"), d + 1));
                    }
                }
                _ => {}
            }
        }
        Ok(b)
    }

    pub(super) fn resolve_ref(&mut self, r: &str, at: &str) -> Result<u32, CompileError> {
        let r = r.trim();
        let target: Option<String> = if r == "#" || r.is_empty() {
            Some(String::new())
        } else if let Some(p) = r.strip_prefix("#/") {
            Some(format!("/{}", percent_decode(p)))
        } else if r.starts_with('#') {
            self.ids.get(r).cloned()
        } else {
            let (base, frag) = match r.find('#') {
                Some(i) => (&r[..i], &r[i + 1..]),
                None => (r, ""),
            };
            let base_ptr = if self.root_id.as_deref() == Some(base) {
                Some(String::new())
            } else {
                self.ids.get(base).cloned().or_else(|| {
                    // A relative id: match on the last path segment.
                    self.ids
                        .iter()
                        .find(|(k, _)| {
                            !base.is_empty()
                                && (k.ends_with(&format!("/{base}"))
                                    || base.ends_with(&format!("/{k}")))
                        })
                        .map(|(_, v)| v.clone())
                })
            };
            base_ptr.map(|bp| {
                if frag.is_empty() {
                    bp
                } else {
                    format!("{bp}{}", percent_decode(frag))
                }
            })
        };
        match target {
            Some(t) if self.root.pointer(&t).is_some() => Ok(self.loc(&t)),
            _ => Err(CompileError::Unsupported {
                keyword: "$ref".into(),
                pointer: at.to_string(),
                why: format!("cannot resolve {r:?} inside this document"),
            }),
        }
    }
}
