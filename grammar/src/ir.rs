//! The intermediate representation between a JSON Schema and the byte automaton.
//!
//! A schema is read (module `schema`) into a graph of [`Node`]s. A node is a union of
//! alternatives ([`Alt`]); each alternative is one lexical or structural shape with its
//! constraints already merged (`allOf` intersected, `$ref` resolved, `type` split):
//! a literal (`null`, `true`, `false`, an `enum`/`const` value), a number with exact
//! bounds, a string with lengths and a pattern DFA, an array, an object. Children are
//! node ids, so recursion through `$ref` is a cycle in the graph, and the automaton keeps
//! a stack. Every alternative left in the IR has at least one valid text; `min_len` is the
//! length in bytes of the shortest one.

use crate::dfa::{Dfa, LenTable};

pub type NodeId = u32;

/// Lits 0, 1, 2 are always `null`, `true`, `false`.
pub const LIT_NULL: u32 = 0;
pub const LIT_TRUE: u32 = 1;
pub const LIT_FALSE: u32 = 2;

/// Values are scaled by 10^15: a number is the integer `X` with value `X / SCALE`.
pub const SCALE: i128 = 1_000_000_000_000_000;
/// Numbers carry at most this many digits (integer part, except a lone `0`, plus fraction),
/// so every emitted number is exact in binary64 and on the scaled grid.
pub const MAX_DIGITS: usize = 15;
/// Bounds beyond this magnitude (scaled) are out of reach of any emitted number.
pub const BIG: i128 = 10i128.pow(31);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alt {
    Lit(u32),
    Num(u32),
    Str(u32),
    Arr(u32),
    Obj(u32),
}

#[derive(Debug, Clone)]
pub struct Node {
    pub alts: Vec<Alt>,
    /// JSON Pointer(s) of the schema(s) this node stands for, for `explain`.
    pub ptr: String,
    /// Shortest valid text in bytes; `u64::MAX` when the node has none (then `alts` is empty).
    pub min_len: u64,
    /// Shortest text of each alternative (same order as `alts`).
    pub alt_len: Vec<u64>,
}

/// A number: `lo <= X <= hi` (scaled, inclusive) and `X % q == 0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NumSpec {
    pub int_only: bool,
    pub lo: i128,
    pub hi: i128,
    pub q: i128,
    /// Far numbers (`crate::num`): every text is a mantissa within `lo..=hi` on the
    /// grid of `q`, then the literal `e<exp>`. 0: no exponent (the usual case).
    pub exp: u32,
}

impl NumSpec {
    pub fn unconstrained(&self) -> bool {
        self.lo <= -BIG && self.hi >= BIG && (self.q == 1 || (self.int_only && self.q == SCALE))
    }
}

#[derive(Debug, Clone)]
pub struct StrSpec {
    pub min: u32,
    pub max: Option<u32>,
    /// Index into `Ir::dfas`, over the decoded bytes of the string.
    pub dfa: Option<u32>,
    /// Index into `Ir::lens` (present with `dfa` when lengths are bounded).
    pub lens: Option<u32>,
    /// Extra object keys: a trie of the listed names the key must not equal.
    pub excl: Option<u32>,
    /// Human description (pattern/format) for `explain`.
    pub desc: String,
    /// `x-formwork-source`: the value must be a span of the document. Without a
    /// document the string is compiled as an ordinary one; `Automaton::with_source`
    /// replaces `dfa` and `lens` with the span automaton joined with the pattern.
    pub source: Option<Source>,
}

/// How a marked string relates to the document (`x-formwork-source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceMode {
    /// Any non-empty contiguous substring.
    Substring,
    /// A non-empty substring that starts and ends at word boundaries.
    Words,
}

/// The marker of a string spec under `x-formwork-source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub mode: SourceMode,
    /// JSON Pointer of the keyword.
    pub pointer: String,
}

#[derive(Debug, Clone)]
pub struct ArrSpec {
    pub prefix: Vec<NodeId>,
    /// Items after the prefix; `None`: no more items allowed.
    pub items: Option<NodeId>,
    pub min: u32,
    pub max: Option<u32>,
    /// `uniqueItems` over an open list of literals: the literal ids of `items` (at most
    /// 64); an array frame keeps the ones used so far and never repeats one. Empty
    /// otherwise.
    pub unique: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct PropSpec {
    pub name: String,
    /// The key as it appears between the quotes (canonical JSON escaping).
    pub key: Vec<u8>,
    pub node: NodeId,
    pub required: bool,
}

#[derive(Debug, Clone)]
pub struct ObjSpec {
    pub props: Vec<PropSpec>,
    /// Schema of unlisted keys, generated after the listed ones; `None`: never generated.
    pub extra: Option<NodeId>,
    /// `StrSpec` index for extra keys (excludes every listed name).
    pub extra_key: u32,
    /// Only listed properties count towards `min` (extra keys could repeat).
    pub min: u32,
    pub max: Option<u32>,
}

/// A trie over encoded key bodies; node 0 is the root.
#[derive(Debug, Default, Clone)]
pub struct KeyTrie {
    pub next: Vec<Vec<(u8, u32)>>,
    pub terminal: Vec<bool>,
}

impl KeyTrie {
    pub fn build<'a>(keys: impl Iterator<Item = &'a [u8]>) -> KeyTrie {
        let mut t = KeyTrie {
            next: vec![Vec::new()],
            terminal: vec![false],
        };
        for k in keys {
            let mut n = 0usize;
            for &b in k {
                n = match t.next[n].iter().find(|(c, _)| *c == b) {
                    Some(&(_, m)) => m as usize,
                    None => {
                        let m = t.next.len();
                        t.next.push(Vec::new());
                        t.terminal.push(false);
                        t.next[n].push((b, m as u32));
                        m
                    }
                };
            }
            t.terminal[n] = true;
        }
        t
    }
    pub fn step(&self, n: u32, b: u8) -> u32 {
        if n == u32::MAX {
            return n;
        }
        self.next[n as usize]
            .iter()
            .find(|(c, _)| *c == b)
            .map(|&(_, m)| m)
            .unwrap_or(u32::MAX)
    }
    pub fn is_terminal(&self, n: u32) -> bool {
        n != u32::MAX && self.terminal[n as usize]
    }
}

#[derive(Debug, Default, Clone)]
pub struct Ir {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    pub lits: Vec<Vec<u8>>,
    pub nums: Vec<NumSpec>,
    pub strs: Vec<StrSpec>,
    pub arrs: Vec<ArrSpec>,
    pub objs: Vec<ObjSpec>,
    pub dfas: Vec<Dfa>,
    pub lens: Vec<LenTable>,
    pub tries: Vec<KeyTrie>,
}

fn fmt_scaled(x: i128) -> String {
    if x <= -BIG || x >= BIG {
        return if x < 0 { "-inf".into() } else { "inf".into() };
    }
    let neg = x < 0;
    let a = x.unsigned_abs();
    let s = SCALE as u128;
    let mut out = format!("{}{}", if neg { "-" } else { "" }, a / s);
    let f = a % s;
    if f != 0 {
        let fs = format!("{:015}", f);
        out.push('.');
        out.push_str(fs.trim_end_matches('0'));
    }
    out
}

impl Ir {
    /// A readable listing of the nodes and the sizes of the lexical automata.
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "root: n{}  nodes: {}  literals: {}  numbers: {}  strings: {}  arrays: {}  objects: {}  dfas: {} ({} states)",
            self.root,
            self.nodes.len(),
            self.lits.len(),
            self.nums.len(),
            self.strs.len(),
            self.arrs.len(),
            self.objs.len(),
            self.dfas.len(),
            self.dfas.iter().map(|d| d.len()).sum::<usize>()
        );
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = write!(
                o,
                "n{i} [{:?}] min_len={}:",
                n.ptr,
                if n.min_len == u64::MAX {
                    "none".to_string()
                } else {
                    n.min_len.to_string()
                }
            );
            if n.alts.is_empty() {
                o.push_str(" (no valid value)");
            }
            for a in &n.alts {
                o.push_str("\n    ");
                match *a {
                    Alt::Lit(l) => {
                        let _ = write!(
                            o,
                            "literal {}",
                            String::from_utf8_lossy(&self.lits[l as usize])
                        );
                    }
                    Alt::Num(k) => {
                        let s = &self.nums[k as usize];
                        let _ = write!(
                            o,
                            "{} in [{}, {}]{}{}",
                            if s.int_only { "integer" } else { "number" },
                            fmt_scaled(s.lo),
                            fmt_scaled(s.hi),
                            if s.q > 1 && !(s.int_only && s.q == SCALE) {
                                format!(" multipleOf {}", fmt_scaled(s.q))
                            } else {
                                String::new()
                            },
                            if s.exp > 0 {
                                format!(" times 1e{} (written with that exponent)", s.exp)
                            } else {
                                String::new()
                            }
                        );
                    }
                    Alt::Str(k) => {
                        let s = &self.strs[k as usize];
                        let _ = write!(
                            o,
                            "string length [{}, {}]{}",
                            s.min,
                            s.max.map(|m| m.to_string()).unwrap_or_else(|| "inf".into()),
                            if s.desc.is_empty() {
                                String::new()
                            } else {
                                format!(" {}", s.desc)
                            }
                        );
                        if let Some(src) = &s.source {
                            let _ = write!(o, " source {:?} ({})", src.mode, src.pointer);
                        }
                    }
                    Alt::Arr(k) => {
                        let s = &self.arrs[k as usize];
                        let pre: Vec<String> = s.prefix.iter().map(|n| format!("n{n}")).collect();
                        let _ = write!(
                            o,
                            "array [{}] items {} count [{}, {}]",
                            pre.join(", "),
                            s.items
                                .map(|n| format!("n{n}"))
                                .unwrap_or_else(|| "none".into()),
                            s.min,
                            s.max.map(|m| m.to_string()).unwrap_or_else(|| "inf".into())
                        );
                    }
                    Alt::Obj(k) => {
                        let s = &self.objs[k as usize];
                        let props: Vec<String> = s
                            .props
                            .iter()
                            .map(|p| {
                                format!(
                                    "{}{}: n{}",
                                    p.name,
                                    if p.required { "" } else { "?" },
                                    p.node
                                )
                            })
                            .collect();
                        let _ = write!(
                            o,
                            "object {{{}}} extra {} count [{}, {}]",
                            props.join(", "),
                            s.extra
                                .map(|n| format!("n{n}"))
                                .unwrap_or_else(|| "none".into()),
                            s.min,
                            s.max.map(|m| m.to_string()).unwrap_or_else(|| "inf".into())
                        );
                    }
                }
            }
            o.push('\n');
        }
        o
    }
}
