//! JSON Schema -> IR.
//!
//! Each subschema location (a JSON Pointer into the document) is read into a disjunction of
//! [`Typed`] conjunctions: `type` splits, `allOf` and `$ref` intersect, `anyOf`/`oneOf`
//! distribute. Children (properties, items) stay as *keys*: sets of locations whose
//! conjunction is the child's schema, compiled on demand into IR nodes, so recursive
//! schemas are cycles in the node graph and intersections of recursive schemas terminate.
//!
//! This file holds the reading ([`Typed`]), the [`Builder`] and its memoised
//! [`Builder::dnf`]. The stages, one file each:
//! - `refs.rs`: drafts, the `$id`/`$anchor` index, `$ref` resolution;
//! - `read.rs`: one schema object's keywords into a [`Typed`] conjunction;
//! - `intersect.rs`: `allOf`, `$ref` beside siblings, keys as conjunctions;
//! - `narrow.rs`: narrowing and disjointness for `oneOf`, `not`, `if`;
//! - `discriminator.rs`: `oneOf`/`anyOf` made disjoint by a pinned tag;
//! - `literal.rs`: whether a value satisfies a reading, names, distinct items;
//! - `lower.rs`: readings to IR nodes, string specs with their DFAs;
//! - `pattern.rs`: ECMA 262 patterns and formats to `regex-automata` syntax.

pub mod pattern;

mod discriminator;
mod intersect;
mod literal;
mod lower;
mod narrow;
mod read;
mod refs;

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use num_bigint::BigInt;
use serde_json::Value;

use crate::config::{Budget, CompileError, Config, Relaxed};
use crate::ir::*;
use crate::num;

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
    /// About the work of cloning or comparing this conjunction, in compile steps: one,
    /// plus one per property, required name, literal, pattern and tuple item.
    fn steps(&self) -> u64 {
        (1 + self.props.len()
            + self.req.len()
            + self.lits.as_ref().map_or(0, |l| l.len())
            + self.pats.len()
            + self.prefix.len()
            + self.pprops.len()) as u64
    }

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

fn esc_ptr(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
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
    budget: &'a Budget,
    depth: usize,
    fmt_lits: usize,
    /// Locations whose reading narrowed (`not`, `if`, a generic `oneOf`, here or in a
    /// subschema read with it): their disjunction is a subset of what the schema allows,
    /// so it must not be negated or tested for disjointness as if it were exact.
    inexact: HashSet<u32>,
    /// Set while reading a location when something narrowed (see `inexact`).
    tainted: bool,
}

impl<'a> Builder<'a> {
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

    /// Charges `n` compile steps ([`crate::config::Limits::steps`]); the step limit
    /// error at `ptr` once the budget is spent.
    fn charge(&self, n: u64, ptr: &str) -> Result<(), CompileError> {
        self.budget.check(n, ptr)
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
        self.charge(1, &ptr)?;
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
}
