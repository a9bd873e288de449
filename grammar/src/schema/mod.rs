//! JSON Schema -> IR.
//!
//! Each subschema location (a JSON Pointer into the document) is read into a disjunction of
//! [`Typed`] conjunctions: `type` splits, `allOf` and `$ref` intersect, `anyOf`/`oneOf`
//! distribute. Children (properties, items) stay as *keys*: sets of locations whose
//! conjunction is the child's schema, compiled on demand into IR nodes, so recursive
//! schemas are cycles in the node graph and intersections of recursive schemas terminate.

pub mod pattern;

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use num_bigint::BigInt;
use serde_json::{Map, Value};

use crate::dfa::{Dfa, LenTable};
use crate::num;
use crate::config::{CompileError, Config, Deadline, Relaxed};
use crate::ir::*;

type Key = Vec<u32>;
/// A `oneOf`/`anyOf` a `discriminator` proved disjoint: its pointer and its branches.
type Tagged = (String, Vec<Vec<Typed>>);
const FALSE_LOC: u32 = 0;
static FALSE_VALUE: Value = Value::Bool(false);

const T_NULL: u8 = 1;
const T_BOOL: u8 = 2;
const T_INT: u8 = 4;
const T_NUM: u8 = 8;
const T_STR: u8 = 16;
const T_ARR: u8 = 32;
const T_OBJ: u8 = 64;
const T_ALL: u8 = 127;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Draft {
    D4,
    D6,
    D7,
    D2019,
    D2020,
}

/// One anchored regex a string must match, from a `pattern` or a `format` keyword.
#[derive(Clone, Debug)]
struct Pat {
    re: String,
    /// `pattern "..."` or `format "..."`, for `explain`.
    label: String,
    /// From `format`: a subset of the real format.
    format: bool,
    /// JSON Pointer (RFC 6901) of the keyword, where its errors are reported.
    ptr: String,
}

#[derive(Clone, Debug)]
struct Typed {
    t: u8,
    lo: i128,
    hi: i128,
    q: i128,
    smin: u32,
    smax: Option<u32>,
    /// Anchored regexes from `pattern` and `format`.
    pats: Vec<Pat>,
    amin: u32,
    amax: Option<u32>,
    prefix: Vec<Key>,
    items: Key,
    props: Vec<(String, Key)>,
    req: Vec<String>,
    extra: Option<Key>,
    has_props: bool,
    omin: u32,
    omax: Option<u32>,
    lits: Option<Vec<Value>>,
    /// Unknown `format`s (pointer, name): refused or relaxed if a string can be produced.
    bad_fmt: Vec<(String, String)>,
    /// `patternProperties`: (anchored search regex, its pattern, key of the schema).
    pprops: Vec<(String, String, Key)>,
    /// `propertyNames`: every key must satisfy each of these schemas (their conjunction).
    pnames: Key,
    /// `uniqueItems: true`, with its pointer (the first one when several are merged).
    uniq: Option<String>,
    /// `x-formwork-source`, with its pointer (`words` wins when both are merged: it is
    /// the narrower).
    src: Option<(SourceMode, String)>,
    /// Exact numeric bounds `(lo, hi)` in units of 10^-15 (`±num::far_inf()` when
    /// unbounded), once a bound beyond `±BIG` was read (`minimum: 1e400`): then they,
    /// not the clamped `lo`/`hi`, are the bounds. `None` for every usual schema.
    far: Option<Rc<(BigInt, BigInt)>>,
}

impl Typed {
    /// The exact numeric bounds (see [`Typed::far`]).
    fn bounds_x(&self) -> (BigInt, BigInt) {
        match &self.far {
            Some(f) => (f.0.clone(), f.1.clone()),
            None => {
                let inf = num::far_inf();
                (
                    if self.lo <= -BIG {
                        -inf.clone()
                    } else {
                        BigInt::from(self.lo)
                    },
                    if self.hi >= BIG {
                        inf
                    } else {
                        BigInt::from(self.hi)
                    },
                )
            }
        }
    }

    fn any() -> Typed {
        Typed {
            t: T_ALL,
            lo: -BIG,
            hi: BIG,
            q: 1,
            far: None,
            smin: 0,
            smax: None,
            pats: Vec::new(),
            amin: 0,
            amax: None,
            prefix: Vec::new(),
            items: Vec::new(),
            props: Vec::new(),
            req: Vec::new(),
            extra: None,
            has_props: false,
            omin: 0,
            omax: None,
            lits: None,
            bad_fmt: Vec::new(),
            pprops: Vec::new(),
            pnames: Vec::new(),
            uniq: None,
            src: None,
        }
    }
    fn item_key(&self, i: usize) -> Key {
        self.prefix
            .get(i)
            .cloned()
            .unwrap_or_else(|| self.items.clone())
    }
}

/// `t` restricted to objects without property `p`.
fn forbid(t: &mut Typed, p: &str) {
    match t.props.iter_mut().find(|(n, _)| n == p) {
        Some(x) => x.1 = vec![FALSE_LOC],
        None => t.props.push((p.to_string(), vec![FALSE_LOC])),
    }
}

fn union_key(a: &Key, b: &Key) -> Key {
    let mut k: Key = a.iter().chain(b.iter()).copied().collect();
    k.sort_unstable();
    k.dedup();
    k
}

fn min_opt(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// JSON equality with numbers compared by value.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (xs, ys) = (x.to_string(), y.to_string());
            match (num::scaled(&xs), num::scaled(&ys)) {
                (Some((p, true)), Some((q, true))) => p == q,
                _ => xs == ys,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Fills in the pointer of a limit error raised where it was not known.
fn at_ptr(e: CompileError, ptr: &str) -> CompileError {
    match e {
        CompileError::Limit {
            what,
            given,
            limit,
            pointer,
        } if pointer.is_empty() => CompileError::Limit {
            what,
            given,
            limit,
            pointer: ptr.to_string(),
        },
        e => e,
    }
}

/// `a` and `b` together: `Ok(None)` when a pattern decides a merged property and cannot be
/// read, `Ok(Some(None))` when nothing satisfies both.
fn intersect(
    a: &Typed,
    b: &Typed,
    pk: &mut dyn FnMut(&Typed, &str) -> Result<Option<Key>, CompileError>,
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
    let mut props: Vec<(String, Key)> = Vec::new();
    for (name, _) in a.props.iter().chain(b.props.iter()) {
        if props.iter().any(|(n, _)| n == name) {
            continue;
        }
        let (Some(ka), Some(kb)) = (pk(a, name)?, pk(b, name)?) else {
            return Ok(None);
        };
        props.push((name.clone(), union_key(&ka, &kb)));
    }
    r.props = props;
    for q in &b.req {
        if !r.req.contains(q) {
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

/// Keywords that carry no constraint.
const IGNORED: &[&str] = &[
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "example",
    "readOnly",
    "writeOnly",
    "deprecated",
    "nullable",
    "$vocabulary",
];

pub struct Builder<'a> {
    root: &'a Value,
    cfg: &'a Config,
    draft: Draft,
    locs: Vec<String>,
    loc_ids: HashMap<String, u32>,
    ids: HashMap<String, String>,
    root_id: Option<String>,
    dnf_memo: HashMap<u32, Rc<Vec<Typed>>>,
    in_progress: HashSet<u32>,
    node_memo: HashMap<Key, NodeId>,
    queue: VecDeque<(NodeId, Key)>,
    pub ir: Ir,
    pub relaxed: Vec<Relaxed>,
    dfa_memo: HashMap<Vec<String>, Option<u32>>,
    key_memo: HashMap<Key, Rc<Vec<Typed>>>,
    lit_ids: HashMap<Vec<u8>, u32>,
    len_memo: HashMap<(u32, u32), u32>,
    deadline: Deadline,
    depth: usize,
    fmt_lits: usize,
    /// Locations whose reading narrowed (`not`, `if`, a generic `oneOf`, here or in a
    /// subschema read with it): their disjunction is a subset of what the schema allows,
    /// so it must not be negated or tested for disjointness as if it were exact.
    inexact: HashSet<u32>,
    /// Set while reading a location when something narrowed (see `inexact`).
    tainted: bool,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() + 0 && i + 2 <= b.len() - 1 {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn esc_ptr(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

impl<'a> Builder<'a> {
    pub(crate) fn new(
        root: &'a Value,
        cfg: &'a Config,
        deadline: Deadline,
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
            deadline,
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

    fn loc(&mut self, ptr: &str) -> u32 {
        if let Some(&i) = self.loc_ids.get(ptr) {
            return i;
        }
        let i = self.locs.len() as u32;
        self.locs.push(ptr.to_string());
        self.loc_ids.insert(ptr.to_string(), i);
        i
    }

    fn value(&self, loc: u32) -> &'a Value {
        if loc == FALSE_LOC {
            return &FALSE_VALUE;
        }
        self.root
            .pointer(&self.locs[loc as usize])
            .unwrap_or(&FALSE_VALUE)
    }

    fn unsupported(&mut self, kw: &str, ptr: &str, why: &str) -> Result<(), CompileError> {
        if self.cfg.lenient {
            let r = Relaxed {
                keyword: kw.to_string(),
                pointer: ptr.to_string(),
                why: why.to_string(),
            };
            if !self.relaxed.contains(&r) {
                self.relaxed.push(r);
            }
            Ok(())
        } else {
            Err(CompileError::Unsupported {
                keyword: kw.to_string(),
                pointer: ptr.to_string(),
                why: why.to_string(),
            })
        }
    }

    fn invalid(ptr: &str, msg: impl Into<String>) -> CompileError {
        CompileError::InvalidSchema {
            pointer: ptr.to_string(),
            msg: msg.into(),
        }
    }

    fn check_time(&self, ptr: &str) -> Result<(), CompileError> {
        self.deadline.check(ptr)
    }

    fn resolve_ref(&mut self, r: &str, at: &str) -> Result<u32, CompileError> {
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

    fn key_of(&mut self, ptr: &str) -> Key {
        vec![self.loc(ptr)]
    }

    /// The disjunction of conjunctions a location stands for.
    fn dnf(&mut self, loc: u32) -> Result<Rc<Vec<Typed>>, CompileError> {
        if let Some(r) = self.dnf_memo.get(&loc) {
            if self.inexact.contains(&loc) {
                self.tainted = true;
            }
            return Ok(r.clone());
        }
        let ptr = self.locs[loc as usize].clone();
        self.check_time(&ptr)?;
        if self.in_progress.contains(&loc) {
            return Err(CompileError::Unsupported {
                keyword: "$ref".into(),
                pointer: ptr,
                why: "a reference cycle that does not go through a property or item".into(),
            });
        }
        if self.depth + 1 > self.cfg.limits.depth {
            return Err(CompileError::Limit {
                what: "combinator depth",
                given: self.depth + 1,
                limit: self.cfg.limits.depth,
                pointer: ptr,
            });
        }
        self.depth += 1;
        self.in_progress.insert(loc);
        let outer = std::mem::replace(&mut self.tainted, false);
        let r = self.dnf_inner(loc, &ptr);
        let narrowed = self.tainted;
        self.tainted = outer || narrowed;
        self.in_progress.remove(&loc);
        self.depth -= 1;
        let r = Rc::new(r?);
        if narrowed {
            self.inexact.insert(loc);
        }
        self.dnf_memo.insert(loc, r.clone());
        Ok(r)
    }

    /// [`Builder::dnf`], and whether it is exact: no narrowing in it (see `inexact`).
    fn dnf_exact(&mut self, loc: u32) -> Result<(Rc<Vec<Typed>>, bool), CompileError> {
        let outer = std::mem::replace(&mut self.tainted, false);
        let r = self.dnf(loc);
        let narrowed = self.tainted;
        self.tainted = outer || narrowed;
        Ok((r?, !narrowed))
    }

    fn conj(&mut self, a: Vec<Typed>, b: &[Typed], ptr: &str) -> Result<Vec<Typed>, CompileError> {
        let mut out = Vec::new();
        for x in &a {
            self.check_time(ptr)?;
            for y in b {
                let r = intersect(x, y, &mut |t: &Typed, n: &str| self.prop_key_full(t, n))
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

    fn dnf_inner(&mut self, loc: u32, ptr: &str) -> Result<Vec<Typed>, CompileError> {
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
        let mut base = Typed::any();
        let mut conjs: Vec<Rc<Vec<Typed>>> = Vec::new();
        let mut one_ofs: Vec<(String, Vec<Rc<Vec<Typed>>>)> = Vec::new();
        let mut nots: Vec<(String, Rc<Vec<Typed>>)> = Vec::new();
        #[allow(clippy::type_complexity)]
        let mut ifs: Vec<(String, Rc<Vec<Typed>>, Vec<Typed>, Vec<Typed>)> = Vec::new();
        let mut disc: Option<String> = None;
        // `oneOf`s with a narrowed branch: exactly-one cannot be checked against it.
        let mut narrowed_one_ofs: Vec<String> = Vec::new();
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
            conjs.push(d);
        }
        let p = |k: &str| format!("{ptr}/{}", esc_ptr(k));
        for (k, x) in m {
            let kp = p(k);
            match k.as_str() {
                "$ref" => {}
                "type" => {
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
                            _ => return Err(Self::invalid(&kp, format!("unknown type {n}"))),
                        };
                    }
                    base.t &= t;
                }
                "enum" => {
                    let a = x
                        .as_array()
                        .ok_or_else(|| Self::invalid(&kp, "not an array"))?;
                    base.lits = Some(a.clone());
                }
                "const" => base.lits = Some(vec![x.clone()]),
                "multipleOf" => {
                    let s = x
                        .as_number()
                        .ok_or_else(|| Self::invalid(&kp, "not a number"))?
                        .to_string();
                    match num::scaled(&s) {
                        Some((q, true)) if q > 0 && q < BIG => base.q = q,
                        _ => self.unsupported(
                            k,
                            &kp,
                            &format!("multipleOf {s} is not a positive decimal with at most 15 fraction digits"),
                        )?,
                    }
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                    if let Value::Bool(_) = x {
                        continue; // draft-04 modifier, read with its bound
                    }
                    let s = x
                        .as_number()
                        .ok_or_else(|| Self::invalid(&kp, "not a number"))?
                        .to_string();
                    let (v, exact) =
                        num::scaled(&s).ok_or_else(|| Self::invalid(&kp, "not a number"))?;
                    let excl_flag =
                        |name: &str| m.get(name).and_then(Value::as_bool).unwrap_or(false);
                    let ex = match k.as_str() {
                        "minimum" => excl_flag("exclusiveMinimum"),
                        "maximum" => excl_flag("exclusiveMaximum"),
                        _ => true,
                    };
                    let is_min = k == "minimum" || k == "exclusiveMinimum";
                    // A bound `scaled` clamps is kept exactly as well (see `Typed::far`);
                    // the exact bounds so far are taken before the clamped ones move.
                    let far = (v.abs() >= BIG || base.far.is_some()).then(|| base.bounds_x());
                    match (is_min, ex) {
                        (true, false) => base.lo = base.lo.max(if exact { v } else { v + 1 }),
                        (true, true) => base.lo = base.lo.max(v + 1),
                        (false, false) => base.hi = base.hi.min(v),
                        (false, true) => base.hi = base.hi.min(if exact { v - 1 } else { v }),
                    }
                    if let Some((mut lo, mut hi)) = far {
                        let (vx, exact) = if v.abs() >= BIG {
                            num::scaled_big(&s).ok_or_else(|| Self::invalid(&kp, "not a number"))?
                        } else {
                            (BigInt::from(v), exact)
                        };
                        match (is_min, ex) {
                            (true, false) if exact => lo = lo.max(vx),
                            (true, _) => lo = lo.max(vx + 1),
                            (false, true) if exact => hi = hi.min(vx - 1),
                            (false, _) => hi = hi.min(vx),
                        }
                        base.far = Some(Rc::new((lo, hi)));
                    }
                }
                "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
                | "maxProperties" => {
                    let n = x
                        .as_u64()
                        .or_else(|| {
                            x.as_f64()
                                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                                .map(|f| f as u64)
                        })
                        .ok_or_else(|| Self::invalid(&kp, "not a non-negative integer"))?;
                    let n = n.min(u32::MAX as u64 / 2) as u32;
                    match k.as_str() {
                        "minLength" => base.smin = base.smin.max(n),
                        "maxLength" => base.smax = min_opt(base.smax, Some(n)),
                        "minItems" => base.amin = base.amin.max(n),
                        "maxItems" => base.amax = min_opt(base.amax, Some(n)),
                        "minProperties" => base.omin = base.omin.max(n),
                        _ => base.omax = min_opt(base.omax, Some(n)),
                    }
                }
                "pattern" => {
                    let s = x
                        .as_str()
                        .ok_or_else(|| Self::invalid(&kp, "not a string"))?;
                    match pattern::search_regexes(s) {
                        Ok(rs) => {
                            for r in rs {
                                base.pats.push(Pat {
                                    re: r,
                                    label: format!("pattern {s:?}"),
                                    format: false,
                                    ptr: kp.clone(),
                                });
                            }
                        }
                        Err(e) => self.unsupported(k, &kp, &format!("pattern {s:?}: {e}"))?,
                    }
                }
                "format" => {
                    let s = x.as_str().unwrap_or("");
                    match pattern::format_regexes(s) {
                        Some(rs) => {
                            for r in rs {
                                base.pats.push(Pat {
                                    re: r,
                                    label: format!("format {s:?}"),
                                    format: true,
                                    ptr: kp.clone(),
                                });
                            }
                        }
                        None => base.bad_fmt.push((kp.clone(), s.to_string())),
                    }
                }
                "items" => match x {
                    Value::Array(a) => {
                        base.prefix = (0..a.len())
                            .map(|i| self.key_of(&format!("{kp}/{i}")))
                            .collect();
                        base.items = match m.get("additionalItems") {
                            Some(_) => self.key_of(&p("additionalItems")),
                            None => Vec::new(),
                        };
                    }
                    _ => {
                        if m.contains_key("prefixItems") {
                            base.items = self.key_of(&kp);
                        } else {
                            base.items = self.key_of(&kp);
                        }
                    }
                },
                "prefixItems" => {
                    let a = x
                        .as_array()
                        .ok_or_else(|| Self::invalid(&kp, "not an array"))?;
                    base.prefix = (0..a.len())
                        .map(|i| self.key_of(&format!("{kp}/{i}")))
                        .collect();
                }
                "additionalItems" => {}
                "properties" => {
                    let o = x
                        .as_object()
                        .ok_or_else(|| Self::invalid(&kp, "not an object"))?;
                    base.has_props = true;
                    base.props = o
                        .keys()
                        .map(|n| (n.clone(), self.key_of(&format!("{kp}/{}", esc_ptr(n)))))
                        .collect();
                }
                "required" => {
                    if let Value::Array(a) = x {
                        for n in a {
                            let n = n
                                .as_str()
                                .ok_or_else(|| Self::invalid(&kp, "not a string"))?;
                            if !base.req.iter().any(|r| r == n) {
                                base.req.push(n.to_string());
                            }
                        }
                    } else if x.is_boolean() && self.draft == Draft::D4 {
                    } else {
                        return Err(Self::invalid(&kp, "not an array"));
                    }
                }
                "additionalProperties" => match x {
                    Value::Bool(true) => {}
                    Value::Bool(false) => base.extra = Some(vec![FALSE_LOC]),
                    _ => base.extra = Some(self.key_of(&kp)),
                },
                "patternProperties" => {
                    let o = x
                        .as_object()
                        .ok_or_else(|| Self::invalid(&kp, "not an object"))?;
                    if !o.is_empty() {
                        base.has_props = true;
                    }
                    // Listed properties also satisfy every matching pattern's schema; keys that
                    // only a pattern admits are not generated (an instance without them is valid).
                    for pat in o.keys() {
                        match pattern::search_regex(pat) {
                            Ok(re) => base.pprops.push((
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
                }
                "allOf" | "anyOf" | "oneOf" => {
                    let a = x
                        .as_array()
                        .ok_or_else(|| Self::invalid(&kp, "not an array"))?;
                    let mut branches = Vec::new();
                    let mut exact = true;
                    for i in 0..a.len() {
                        let l = self.loc(&format!("{kp}/{i}"));
                        let (d, ex) = self.dnf_exact(l)?;
                        exact &= ex;
                        branches.push(d);
                    }
                    if !exact && k == "oneOf" {
                        narrowed_one_ofs.push(kp.clone());
                    }
                    // An `anyOf` that a `discriminator` reads waits for it with the `oneOf`s.
                    let tagged = m.contains_key("discriminator") && !m.contains_key("oneOf");
                    match k.as_str() {
                        "allOf" => conjs.extend(branches),
                        "anyOf" if !tagged => conjs.push(Rc::new(
                            branches.iter().flat_map(|b| b.iter().cloned()).collect(),
                        )),
                        _ => one_ofs.push((kp.clone(), branches)),
                    }
                }
                "not" => {
                    // `not` of something nothing satisfies is no constraint; `not: {required}`
                    // and `not: {type}` have exact complements.
                    let l = self.loc(&kp);
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
                        conjs.push(Rc::new(alts));
                    } else if keys == ["type"] && d.len() == 1 {
                        let mut a = Typed::any();
                        a.t &= !d[0].t;
                        if d[0].t & (T_INT | T_NUM) != 0 {
                            a.t &= !(T_INT | T_NUM);
                        }
                        conjs.push(Rc::new(vec![a]));
                    } else if !exact {
                        // Its complement would contain what the narrowing dropped.
                        self.unsupported(
                            "not",
                            &kp,
                            "the negated schema is itself narrowed (a nested not, if or oneOf), so its complement is not known",
                        )?;
                    } else {
                        nots.push((kp.clone(), d));
                    }
                }
                "uniqueItems" => {
                    // Checked where an array is lowered: only arrays whose items are
                    // distinct by construction are generated.
                    if x.as_bool() == Some(true) {
                        base.uniq = Some(kp.clone());
                    }
                }
                "propertyNames" => {
                    // Checked where an object is lowered: listed names are tested, extra
                    // keys are generated only inside the key language.
                    if x.as_bool() != Some(true) {
                        base.pnames = union_key(&base.pnames, &self.key_of(&kp));
                    }
                }
                "if" => {
                    if m.contains_key("then") || m.contains_key("else") {
                        let l = self.loc_of(&kp);
                        let (d, exact) = self.dnf_exact(l)?;
                        if !exact {
                            self.unsupported(
                                "if",
                                &kp,
                                "the condition is itself narrowed (a nested not, if or oneOf), so its complement is not known",
                            )?;
                            continue;
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
                        ifs.push((kp.clone(), d, then, els));
                    }
                }
                "then" | "else" => {}
                "x-formwork-source" => {
                    let mode = match x.as_str() {
                        Some("substring") => SourceMode::Substring,
                        Some("words") => SourceMode::Words,
                        _ => {
                            return Err(Self::invalid(
                                &kp,
                                format!("x-formwork-source is {x}, not \"substring\" or \"words\""),
                            ))
                        }
                    };
                    base.src = Some((mode, kp.clone()));
                }
                "dependencies" | "dependentRequired" | "dependentSchemas" => {
                    // Exact: for each trigger, either it is absent or the dependency holds.
                    let o = x
                        .as_object()
                        .ok_or_else(|| Self::invalid(&kp, "not an object"))?;
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
                        conjs.push(Rc::new(alts));
                    }
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
                // Read after the loop, with its sibling `oneOf`/`anyOf` and `base`.
                "discriminator" => disc = Some(kp.clone()),
                "contentEncoding" | "contentMediaType" | "contentSchema" => {
                    if matches!(self.draft, Draft::D6 | Draft::D7) {
                        self.unsupported(k, &kp, "content is not enforced")?;
                    }
                }
                _ => {
                    let _ = IGNORED;
                }
            }
        }
        // A verified `discriminator` hands over its combinator's branches, each with the
        // tag required, pairwise disjoint by the tag (see `discriminator`).
        let mut by_tag = match disc {
            Some(dkp) => self.discriminator(m, ptr, &dkp, &base)?,
            None => None,
        };
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
        let mut acc = vec![base];
        for c in conjs {
            acc = self.conj(acc, &c, ptr)?;
        }
        Ok(acc)
    }

    // ---------- discriminator (OpenAPI; Pydantic's discriminated unions) ----------

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
    fn discriminator(
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

    // ---------- disjointness (for oneOf) ----------

    /// Narrows `oneOf` branches so that what each generates fails the others: a value of
    /// branch i omits a property another branch requires (S1), or carries a property a
    /// closed branch does not list (S2). Narrowing only drops instances, so it stays sound.
    fn separate(
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

    fn fail_all(
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

    fn loc_of(&mut self, ptr: &str) -> u32 {
        self.loc(ptr)
    }

    /// Parts of `c` whose values all fail `y` (a subset of `c`; empty if none found).
    /// Stops with the time limit error at `ptr` once the compile budget is spent.
    fn narrow(&mut self, c: Typed, y: &Typed, ptr: &str) -> Result<Vec<Typed>, CompileError> {
        self.check_time(ptr)?;
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
    fn key_dnf(&mut self, k: &Key) -> Result<Rc<Vec<Typed>>, CompileError> {
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

    /// `key_dnf` for passes that read an error as "not sure": only the time limit stops them.
    fn key_dnf_or_unsure(&mut self, k: &Key) -> Result<Option<Rc<Vec<Typed>>>, CompileError> {
        match self.key_dnf(k) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.is_time_limit() => Err(e),
            Err(_) => Ok(None),
        }
    }

    fn dnf_disjoint(&mut self, a: &[Typed], b: &[Typed], depth: u32) -> Result<bool, CompileError> {
        for x in a {
            for y in b {
                if !self.typed_disjoint(x, y, depth)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    fn key_disjoint(&mut self, a: &Key, b: &Key, depth: u32) -> Result<bool, CompileError> {
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
    fn typed_disjoint(&mut self, a: &Typed, b: &Typed, depth: u32) -> Result<bool, CompileError> {
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

    /// Does `v` satisfy `t`? `superset`: read formats as satisfied (the real format is wider
    /// than our regex); otherwise decide conservatively (false when unsure).
    fn value_ok(&mut self, t: &Typed, v: &Value, superset: bool) -> Result<bool, CompileError> {
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
    fn prop_key_full(&mut self, t: &Typed, name: &str) -> Result<Option<Key>, CompileError> {
        let listed = t
            .props
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, k)| k.clone());
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
    fn name_ok(&mut self, t: &Typed, name: &str) -> Result<bool, CompileError> {
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
    fn key_formats(&mut self, a: &Typed) -> Result<(), CompileError> {
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
    fn extra_keys(
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
    fn literal_ids(&mut self, t: &Typed) -> Result<Vec<u32>, CompileError> {
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
    fn unique_literals(&mut self, t: &Typed) -> Result<Option<Vec<u32>>, CompileError> {
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
    fn items_distinct(&mut self, t: &Typed) -> Result<bool, CompileError> {
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

    fn value_ok_key(&mut self, k: &Key, v: &Value, superset: bool) -> Result<bool, CompileError> {
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

    // ---------- lexical automata ----------

    /// The DFA of the intersection of anchored regexes (`Ok(None)`: the language is empty;
    /// `Err(msg)`: the regexes cannot be read). The outer error is the time limit alone.
    #[allow(clippy::type_complexity)]
    fn dfa_for(&mut self, res: &[String]) -> Result<Result<Option<u32>, String>, CompileError> {
        let mut key: Vec<String> = res.to_vec();
        key.sort();
        key.dedup();
        if let Some(r) = self.dfa_memo.get(&key) {
            return Ok(Ok(*r));
        }
        self.check_time("")?;
        let lim = self.cfg.limits.dfa_states;
        let dl = self.deadline;
        let stop = |e: String| -> Result<Result<Option<u32>, String>, CompileError> {
            if dl.expired() {
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
                Some(r) => Dfa::from_regex(r, lim, &dl).map(|d| d.complement()),
                None => Dfa::from_regex(r, lim, &dl),
            };
            let d = match d {
                Ok(d) => d,
                Err(e) => return stop(e),
            };
            acc = Some(match acc {
                None => d,
                Some(a) => match a.product(&d, lim, &dl) {
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

    fn node_for(&mut self, k: Key) -> NodeId {
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

    fn lit(&mut self, text: Vec<u8>) -> u32 {
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
            self.check_time(&ptr)?;
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

    fn lower(&mut self, t: &Typed, ptr: &str, alts: &mut Vec<Alt>) -> Result<(), CompileError> {
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
            let mut names: Vec<(String, bool)> = t
                .props
                .iter()
                .map(|(n, _)| (n.clone(), t.req.contains(n)))
                .collect();
            for r in &t.req {
                if !names.iter().any(|(n, _)| n == r) {
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
                            if !names.iter().any(|(m, _)| *m == n) {
                                names.push((n, false));
                            }
                        }
                    }
                }
            }
            let mut props = Vec::new();
            for (n, required) in names {
                let Some(mut k) = self.prop_key_full(t, &n).map_err(|e| at_ptr(e, ptr))? else {
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

    fn str_spec(
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
                            &self.deadline,
                        )
                        .map_err(|_| {
                            if self.deadline.expired() {
                                return self.deadline.error(ptr);
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
