//! The byte automaton over the IR.
//!
//! A [`State`] is a sorted set of threads; a thread is a stack of [`Frame`]s, one per open
//! value (object, array, string, number, literal) under a root frame. A union (`anyOf`,
//! type arrays, `enum`) forks threads at the first byte of a value; threads that cannot
//! take a byte die, equal threads merge. Every frame only takes a byte when a valid
//! completion still exists after it, so no thread is ever a dead end.
//!
//! This file holds the frames, the dispatch of a byte to the top frame
//! ([`Machine::step`]) and of the allowed-bytes question ([`Machine::allowed_bytes`]),
//! and how a value starts. Each frame kind has its own file: `object.rs` (with the key
//! trie), `array.rs`, `string.rs` (lexing, lengths, the pattern DFA), `plain.rs` (the
//! plain-character hint and key of string bodies), `number.rs`, `literal.rs`; the
//! shortest completions and the shortest-length pass are in `shortest.rs`.
//!
//! **Invariant:** for every state, `allowed_bytes` is exactly the set of bytes `step`
//! takes, and `shortest_completion` is a byte path that `step` takes to acceptance.

use crate::config::{Budget, CompileError, Whitespace};
use crate::num;

mod array;
mod literal;
mod number;
mod object;
mod plain;
mod shortest;
mod string;

use crate::ir::{Alt, Ir, NodeId, LIT_FALSE, LIT_NULL, LIT_TRUE};
use object::PropTrie;
use plain::PlainDfa;

const EXTRA: u32 = u32::MAX;
const OFF: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjPh {
    /// After `{`.
    Open,
    /// After `,`.
    Comma,
    /// Inside the key of listed property `prop`, `pos` body bytes matched.
    Key { prop: u32, pos: u32 },
    /// Inside a key that two or more listed properties still share: `node` of the
    /// object's [`PropTrie`]. One thread instead of one per candidate property (an
    /// object with a hundred optional properties forked a hundred stacks at `"`); it
    /// becomes `Key` once one candidate is left. `next` and `emitted` are still those
    /// before the key.
    Keys { node: u32 },
    /// Extra key: a string frame is on top.
    ExtraKey,
    /// After the key's closing quote.
    Colon { prop: u32 },
    /// After `:`.
    Value { prop: u32 },
    /// The value is on top.
    InValue,
    /// After a value.
    After,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArrPh {
    Open,
    Comma,
    InValue,
    After,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    Root {
        ph: u8,
        ws: u32,
    },
    Obj {
        spec: u32,
        next: u32,
        emitted: u32,
        ph: ObjPh,
        ws: u32,
    },
    Arr {
        spec: u32,
        count: u32,
        ph: ArrPh,
        ws: u32,
        /// With `ArrSpec::unique`: the literals used so far, by index in that list.
        used: u64,
    },
    /// `lex`: 0 body, 1 after `\`, 2 `\u`, 3 `\u0`, 4 `\u00`, 5 `\u00X` (hex holds X).
    /// `utf`: pending UTF-8 continuation bytes (high nibble) and their range code.
    Str {
        spec: u32,
        len: u32,
        dfa: u32,
        lex: u8,
        hex: u8,
        utf: u8,
        excl: u32,
    },
    Num {
        spec: u32,
        buf: Vec<u8>,
    },
    Lit {
        id: u32,
        pos: u32,
    },
}

pub type Thread = Vec<Frame>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub(crate) threads: Vec<Thread>,
}

pub struct Machine {
    pub ir: Ir,
    pub ws_max: u32,
    /// Per object spec: how many live listed properties from index i to the end.
    suffix_live: Vec<Vec<u32>>,
    /// Per object spec: index of the first required property at or after i (or len).
    next_req: Vec<Vec<u32>>,
    /// Per DFA: what the plain-character hint needs (see [`PlainDfa`]).
    plain_dfa: Vec<PlainDfa>,
    /// Per object spec: the trie of its listed keys.
    prop_tries: Vec<PropTrie>,
}

#[inline]
fn add(set: &mut [u64; 4], b: u8) {
    set[b as usize >> 6] |= 1u64 << (b & 63);
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

impl Machine {
    /// Builds the tables the steps read; the shortest-length pass stops with the step limit
    /// error once the budget is spent.
    pub(crate) fn new(ir: Ir, ws: Whitespace, budget: &Budget) -> Result<Machine, CompileError> {
        let ws_max = match ws {
            Whitespace::Compact => 0,
            Whitespace::Flexible { max_run } => max_run,
        };
        let mut suffix_live = Vec::new();
        let mut next_req = Vec::new();
        let mut m = Machine {
            ir,
            ws_max,
            suffix_live: Vec::new(),
            next_req: Vec::new(),
            plain_dfa: Vec::new(),
            prop_tries: Vec::new(),
        };
        m.compute_min_lens(budget)?;
        for o in &m.ir.objs {
            let n = o.props.len();
            let mut sl = vec![0u32; n + 1];
            let mut nr = vec![n as u32; n + 1];
            for i in (0..n).rev() {
                let live = m.ir.nodes[o.props[i].node as usize].min_len != u64::MAX;
                sl[i] = sl[i + 1] + u32::from(live);
                nr[i] = if o.props[i].required {
                    i as u32
                } else {
                    nr[i + 1]
                };
            }
            suffix_live.push(sl);
            next_req.push(nr);
        }
        m.suffix_live = suffix_live;
        m.next_req = next_req;
        m.plain_dfa = m.ir.dfas.iter().map(PlainDfa::new).collect();
        m.prop_tries = m.ir.objs.iter().map(PropTrie::new).collect();
        // Extra keys under `propertyNames` can have an empty language once the listed names
        // are excluded; such objects never start an extra key (and never get stuck in one).
        for i in 0..m.ir.objs.len() {
            let o = &m.ir.objs[i];
            let s = &m.ir.strs[o.extra_key as usize];
            if o.extra.is_some()
                && (s.dfa.is_some() || s.max.is_some())
                && m.str_shortest(&m.str_frame(o.extra_key)).is_none()
            {
                m.ir.objs[i].extra = None;
            }
        }
        Ok(m)
    }

    fn live(&self, n: NodeId) -> bool {
        self.ir.nodes[n as usize].min_len != u64::MAX
    }

    pub fn start(&self) -> State {
        State {
            threads: vec![vec![Frame::Root { ph: 0, ws: 0 }]],
        }
    }

    pub fn step(&self, s: &State, b: u8) -> Option<State> {
        let mut out: Vec<Thread> = Vec::new();
        for t in &s.threads {
            self.advance(t.clone(), b, &mut out);
        }
        if out.is_empty() {
            return None;
        }
        out.sort();
        out.dedup();
        Some(State { threads: out })
    }

    pub fn is_accepting(&self, s: &State) -> bool {
        s.threads.iter().any(|t| self.thread_accepting(t))
    }

    fn thread_accepting(&self, t: &Thread) -> bool {
        match t.as_slice() {
            [Frame::Root { ph: 2, .. }] => true,
            [Frame::Root { ph: 1, .. }, Frame::Num { spec, buf }] => {
                num::accepting(&self.ir.nums[*spec as usize], buf)
            }
            _ => false,
        }
    }

    // ---------- transitions ----------

    /// The frame below a finished value moves on.
    fn child_done(&self, t: &mut Thread) {
        if let Some(top) = t.last_mut() {
            match top {
                Frame::Root { ph, ws } => {
                    *ph = 2;
                    *ws = 0;
                }
                Frame::Obj { ph, ws, .. } => {
                    *ph = match *ph {
                        ObjPh::ExtraKey => ObjPh::Colon { prop: EXTRA },
                        _ => ObjPh::After,
                    };
                    *ws = 0;
                }
                Frame::Arr { ph, ws, .. } => {
                    *ph = ArrPh::After;
                    *ws = 0;
                }
                _ => {}
            }
        }
    }

    fn finish(&self, mut t: Thread, out: &mut Vec<Thread>) {
        t.pop();
        self.child_done(&mut t);
        out.push(t);
    }

    fn advance(&self, mut t: Thread, b: u8, out: &mut Vec<Thread>) {
        let top = match t.last() {
            Some(f) => f.clone(),
            None => return,
        };
        match top {
            Frame::Root { ph, ws } => {
                if is_ws(b) && ph != 1 {
                    if ws < self.ws_max {
                        *t.last_mut().unwrap() = Frame::Root { ph, ws: ws + 1 };
                        out.push(t);
                    }
                    return;
                }
                if ph == 0 {
                    *t.last_mut().unwrap() = Frame::Root { ph: 1, ws: 0 };
                    self.start_value(t, self.ir.root, b, out);
                }
            }
            Frame::Lit { id, pos } => self.lit_step(t, id, pos, b, out),
            Frame::Num { spec, ref buf } => self.num_step(t, spec, buf, b, out),
            Frame::Str { .. } => {
                if let Some(r) = self.str_step(&top, b) {
                    match r {
                        None => self.finish(t, out),
                        Some(f) => {
                            *t.last_mut().unwrap() = f;
                            out.push(t);
                        }
                    }
                }
            }
            Frame::Arr {
                spec,
                count,
                ph,
                ws,
                used,
            } => self.arr_step(t, spec, count, ph, ws, used, b, out),
            Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ws,
            } => self.obj_step(t, spec, next, emitted, ph, ws, b, out),
        }
    }

    fn start_value(&self, t: Thread, node: NodeId, b: u8, out: &mut Vec<Thread>) {
        for alt in &self.ir.nodes[node as usize].alts {
            match *alt {
                Alt::Lit(id) => {
                    if self.ir.lits[id as usize][0] == b {
                        out.push(self.lit_started(t.clone(), id));
                    }
                }
                Alt::Num(spec) => {
                    let ns = &self.ir.nums[spec as usize];
                    if (b == b'-' || b.is_ascii_digit()) && num::allows(ns, &[], b) {
                        let mut t2 = t.clone();
                        let mut buf = vec![b];
                        num::canonical(ns, &mut buf);
                        t2.push(Frame::Num { spec, buf });
                        out.push(t2);
                    }
                }
                Alt::Str(spec) => {
                    if b == b'"' {
                        let mut t2 = t.clone();
                        t2.push(self.str_frame(spec));
                        out.push(t2);
                    }
                }
                Alt::Arr(spec) => {
                    if b == b'[' {
                        let mut t2 = t.clone();
                        t2.push(Frame::Arr {
                            spec,
                            count: 0,
                            ph: ArrPh::Open,
                            ws: 0,
                            used: 0,
                        });
                        out.push(t2);
                    }
                }
                Alt::Obj(spec) => {
                    if b == b'{' {
                        let mut t2 = t.clone();
                        t2.push(Frame::Obj {
                            spec,
                            next: 0,
                            emitted: 0,
                            ph: ObjPh::Open,
                            ws: 0,
                        });
                        out.push(t2);
                    }
                }
            }
        }
    }

    // ---------- allowed bytes ----------

    /// Exactly the bytes `b` for which [`Machine::step`] from `s` is `Some`, as a 256-bit
    /// set (byte `b` at bit `b % 64` of word `b / 64`). It mirrors `advance` frame by frame
    /// without cloning threads; the `allowed_bytes_match_step` test pins the equality.
    pub fn allowed_bytes(&self, s: &State) -> [u64; 4] {
        let mut set = [0u64; 4];
        for t in &s.threads {
            if let Some((top, below)) = t.split_last() {
                self.top_bytes(below, top, &mut set);
            }
        }
        set
    }

    /// The bytes `advance` takes for a thread `below` + `[top]`.
    fn top_bytes(&self, below: &[Frame], top: &Frame, set: &mut [u64; 4]) {
        match *top {
            Frame::Root { ph, ws: n } => {
                if ph != 1 {
                    self.ws_bytes(set, n);
                }
                if ph == 0 {
                    self.value_first_bytes(self.ir.root, set);
                }
            }
            Frame::Lit { id, pos } => self.lit_bytes(id, pos, set),
            Frame::Num { spec, ref buf } => self.num_bytes(below, spec, buf, set),
            Frame::Str { .. } => self.str_bytes(top, set),
            Frame::Arr {
                spec,
                count,
                ph,
                ws: n,
                used,
            } => self.arr_bytes(spec, count, ph, n, used, set),
            Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ws: n,
            } => self.obj_bytes(spec, next, emitted, ph, n, set),
        }
    }

    /// Whitespace, where a run of `n` may still grow. Where whitespace is read first, a
    /// value byte never is.
    fn ws_bytes(&self, set: &mut [u64; 4], n: u32) {
        if n < self.ws_max {
            for b in [b' ', b'\n', b'\t', b'\r'] {
                add(set, b);
            }
        }
    }

    /// The first bytes of the values of node `n` (`start_value`'s tests).
    fn value_first_bytes(&self, n: NodeId, set: &mut [u64; 4]) {
        for alt in &self.ir.nodes[n as usize].alts {
            match *alt {
                Alt::Lit(id) => {
                    // A literal is compact JSON: it never starts with whitespace.
                    add(set, self.ir.lits[id as usize][0]);
                }
                Alt::Num(spec) => {
                    let ns = &self.ir.nums[spec as usize];
                    for &b in b"-0123456789" {
                        if num::allows(ns, &[], b) {
                            add(set, b);
                        }
                    }
                }
                Alt::Str(_) => add(set, b'"'),
                Alt::Arr(_) => add(set, b'['),
                Alt::Obj(_) => add(set, b'{'),
            }
        }
    }

    /// Does the node accept exactly this text (compact)? Used for literal filtering.
    pub fn node_accepts(&self, n: NodeId, text: &[u8]) -> bool {
        let mut st = State {
            threads: Vec::new(),
        };
        let mut first = true;
        for &b in text {
            let mut out = Vec::new();
            if first {
                self.start_value(vec![Frame::Root { ph: 1, ws: 0 }], n, b, &mut out);
                first = false;
            } else {
                for t in &st.threads {
                    self.advance(t.clone(), b, &mut out);
                }
            }
            out.sort();
            out.dedup();
            if out.is_empty() {
                return false;
            }
            st.threads = out;
        }
        !first && self.is_accepting(&st)
    }

    pub fn lit_ids(&self) -> (u32, u32, u32) {
        (LIT_NULL, LIT_TRUE, LIT_FALSE)
    }
}
