//! The byte automaton over the IR.
//!
//! A [`State`] is a sorted set of threads; a thread is a stack of [`Frame`]s, one per open
//! value (object, array, string, number, literal) under a root frame. A union (`anyOf`,
//! type arrays, `enum`) forks threads at the first byte of a value; threads that cannot
//! take a byte die, equal threads merge. Every frame only takes a byte when a valid
//! completion still exists after it, so no thread is ever a dead end.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::num;
use crate::config::{CompileError, Deadline, Whitespace};
use crate::ir::{Alt, Ir, NodeId, LIT_FALSE, LIT_NULL, LIT_TRUE};

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

/// The listed keys of one object as a trie over their encoded bytes; node 0 is the
/// empty prefix.
#[derive(Default)]
struct PropTrie {
    /// Per node: `(byte, child)`.
    children: Vec<Vec<(u8, u32)>>,
    /// Per node: the properties whose key starts with the node's prefix, ascending.
    props: Vec<Vec<u32>>,
    /// Per node: the property whose key is the node's prefix, or `OFF`.
    term: Vec<u32>,
    /// Per node: the prefix length.
    depth: Vec<u32>,
}

impl PropTrie {
    fn new(o: &crate::ir::ObjSpec) -> PropTrie {
        let mut t = PropTrie {
            children: vec![Vec::new()],
            props: vec![Vec::new()],
            term: vec![OFF],
            depth: vec![0],
        };
        for (j, p) in o.props.iter().enumerate() {
            let mut n = 0usize;
            t.props[0].push(j as u32);
            for &b in &p.key {
                n = match t.children[n].iter().find(|c| c.0 == b) {
                    Some(&(_, c)) => c as usize,
                    None => {
                        let c = t.children.len();
                        t.children.push(Vec::new());
                        t.props.push(Vec::new());
                        t.term.push(OFF);
                        t.depth.push(t.depth[n] + 1);
                        t.children[n].push((b, c as u32));
                        c
                    }
                };
                t.props[n].push(j as u32);
            }
            t.term[n] = j as u32;
        }
        t
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.children[node as usize]
            .iter()
            .find(|c| c.0 == b)
            .map(|c| c.1)
    }
}

/// Per DFA, for the plain-character hint: one representative byte per byte class of
/// each UTF-8 role, so a search looks up each class once, and the memoised depth.
struct PlainDfa {
    /// Plain ASCII (0x20..=0x7F but `"` and `\`).
    ascii: Vec<u8>,
    /// Lead bytes with their `lead` result, one per (class, count, range code).
    leads: Vec<(u8, u8, u8)>,
    /// Continuation bytes per range code of `cont_ok`.
    conts: [Vec<u8>; 5],
    /// Per state: how many plain characters any text may take from it ([`PLAIN_CAP`]
    /// at most), filled lazily; [`DEPTH_UNKNOWN`] until asked.
    depth: Vec<AtomicU8>,
    /// The DFA's transitions with each target multiplied by the number of classes
    /// (the row offset), for the table of [`Machine::plain_key`].
    rows: Vec<u32>,
}

impl PlainDfa {
    fn new(d: &crate::dfa::Dfa) -> PlainDfa {
        let reps = |bytes: &mut dyn Iterator<Item = u8>| {
            let mut seen = [false; 256];
            let mut v = Vec::new();
            for b in bytes {
                let c = d.classes[b as usize] as usize;
                if !seen[c] {
                    seen[c] = true;
                    v.push(b);
                }
            }
            v
        };
        let ascii = reps(&mut (0x20u8..=0x7F).filter(|&b| b != b'"' && b != b'\\'));
        let mut leads: Vec<(u8, u8, u8)> = Vec::new();
        for b in 0xC2u8..=0xF4 {
            let (n, code) = lead(b).unwrap();
            let c = d.classes[b as usize];
            if !leads
                .iter()
                .any(|&(x, m, k)| d.classes[x as usize] == c && m == n && k == code)
            {
                leads.push((b, n, code));
            }
        }
        let conts = std::array::from_fn(|code| {
            reps(&mut (0x80u8..=0xBF).filter(|&b| cont_ok(code as u8, b)))
        });
        PlainDfa {
            ascii,
            leads,
            conts,
            depth: (0..d.len()).map(|_| AtomicU8::new(DEPTH_UNKNOWN)).collect(),
            rows: d.trans.iter().map(|&q| q * d.nclasses as u32).collect(),
        }
    }
}

/// The plain hint never promises more than this many characters: the token side
/// precomputes plain tokens of up to 32 characters.
const PLAIN_CAP: u32 = 32;
const DEPTH_UNKNOWN: u8 = u8::MAX;
/// DFA lookups one plain-depth search may spend before it settles for the depth
/// verified so far.
const DEPTH_WORK: usize = 1 << 14;

#[inline]
fn add(set: &mut [u64; 4], b: u8) {
    set[b as usize >> 6] |= 1u64 << (b & 63);
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// `(spec, len, dfa)` of a thread whose top is a string body at a character boundary
/// (no escape or UTF-8 sequence pending).
fn body_at_boundary(t: &Thread) -> Option<(u32, u32, u32)> {
    match t.last() {
        Some(&Frame::Str {
            spec,
            len,
            dfa,
            lex: 0,
            utf: 0,
            ..
        }) => Some((spec, len, dfa)),
        _ => None,
    }
}

/// Decoded byte of a short escape.
fn short_escape(b: u8) -> Option<u8> {
    Some(match b {
        b'"' => b'"',
        b'\\' => b'\\',
        b'n' => b'\n',
        b't' => b'\t',
        b'r' => b'\r',
        b'b' => 0x08,
        b'f' => 0x0C,
        _ => return None,
    })
}

fn hexval(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Range of the next continuation byte for a code: 0 80-BF, 1 A0-BF, 2 80-9F, 3 90-BF, 4 80-8F.
fn cont_ok(code: u8, b: u8) -> bool {
    match code {
        0 => (0x80..=0xBF).contains(&b),
        1 => (0xA0..=0xBF).contains(&b),
        2 => (0x80..=0x9F).contains(&b),
        3 => (0x90..=0xBF).contains(&b),
        4 => (0x80..=0x8F).contains(&b),
        _ => false,
    }
}

/// For a lead byte: (continuation count, range code of the first continuation).
fn lead(b: u8) -> Option<(u8, u8)> {
    Some(match b {
        0xC2..=0xDF => (1, 0),
        0xE0 => (2, 1),
        0xE1..=0xEC | 0xEE..=0xEF => (2, 0),
        0xED => (2, 2),
        0xF0 => (3, 3),
        0xF1..=0xF3 => (3, 0),
        0xF4 => (3, 4),
        _ => return None,
    })
}

impl Machine {
    /// Builds the tables the steps read; the shortest-length pass stops with the time limit
    /// error once `deadline` passes.
    pub(crate) fn new(
        ir: Ir,
        ws: Whitespace,
        deadline: &Deadline,
    ) -> Result<Machine, CompileError> {
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
        m.compute_min_lens(deadline)?;
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
            Frame::Lit { id, pos } => {
                let lit = &self.ir.lits[id as usize];
                if lit.get(pos as usize) == Some(&b) {
                    if pos as usize + 1 == lit.len() {
                        self.finish(t, out);
                    } else {
                        *t.last_mut().unwrap() = Frame::Lit { id, pos: pos + 1 };
                        out.push(t);
                    }
                }
            }
            Frame::Num { spec, ref buf } => {
                let ns = &self.ir.nums[spec as usize];
                if num::allows(ns, buf, b) {
                    let mut nb = buf.clone();
                    nb.push(b);
                    num::canonical(ns, &mut nb);
                    let mut t2 = t.clone();
                    *t2.last_mut().unwrap() = Frame::Num { spec, buf: nb };
                    out.push(t2);
                }
                if num::accepting(ns, buf) {
                    t.pop();
                    self.child_done(&mut t);
                    self.advance(t, b, out);
                }
            }
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
            } => {
                let a = &self.ir.arrs[spec as usize];
                let set = |t: &mut Thread, count: u32, ph: ArrPh, ws: u32| {
                    *t.last_mut().unwrap() = Frame::Arr {
                        spec,
                        count,
                        ph,
                        ws,
                        used,
                    };
                };
                if is_ws(b) && ph != ArrPh::InValue {
                    if ws < self.ws_max {
                        set(&mut t, count, ph, ws + 1);
                        out.push(t);
                    }
                    return;
                }
                match ph {
                    ArrPh::Open | ArrPh::After if b == b']' => {
                        if count >= a.min {
                            self.finish(t, out);
                        }
                    }
                    ArrPh::After if b == b',' => {
                        if self.arr_can_add(spec, count, used) {
                            set(&mut t, count, ArrPh::Comma, 0);
                            out.push(t);
                        }
                    }
                    ArrPh::Open | ArrPh::Comma if !a.unique.is_empty() => {
                        // The unused literals only; the thread records its choice.
                        if self.arr_can_add(spec, count, used) {
                            let c2 = self.sat_count(spec, count + 1);
                            for (k, &id) in a.unique.iter().enumerate() {
                                let lit = &self.ir.lits[id as usize];
                                if used >> k & 1 == 1 || lit[0] != b {
                                    continue;
                                }
                                let mut t2 = t.clone();
                                *t2.last_mut().unwrap() = Frame::Arr {
                                    spec,
                                    count: c2,
                                    ph: ArrPh::InValue,
                                    ws: 0,
                                    used: used | 1 << k,
                                };
                                out.push(self.lit_started(t2, id));
                            }
                        }
                    }
                    ArrPh::Open | ArrPh::Comma => {
                        if let Some(n) = self.arr_item(spec, count) {
                            if self.arr_can_add(spec, count, used) {
                                let c2 = self.sat_count(spec, count + 1);
                                set(&mut t, c2, ArrPh::InValue, 0);
                                self.start_value(t, n, b, out);
                            }
                        }
                    }
                    _ => {}
                }
            }
            Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ws,
            } => self.obj_step(t, spec, next, emitted, ph, ws, b, out),
        }
    }

    /// Thread `t` after the first byte of literal `id`.
    fn lit_started(&self, mut t: Thread, id: u32) -> Thread {
        if self.ir.lits[id as usize].len() == 1 {
            self.child_done(&mut t);
        } else {
            t.push(Frame::Lit { id, pos: 1 });
        }
        t
    }

    fn sat_count(&self, spec: u32, c: u32) -> u32 {
        let a = &self.ir.arrs[spec as usize];
        if a.max.is_none() && a.items.is_some() {
            c.min((a.prefix.len() as u32).max(a.min))
        } else {
            c
        }
    }

    fn arr_item(&self, spec: u32, i: u32) -> Option<NodeId> {
        let a = &self.ir.arrs[spec as usize];
        let n = match a.prefix.get(i as usize) {
            Some(&n) => n,
            None => a.items?,
        };
        self.live(n).then_some(n)
    }

    /// Item `count` may start (with `used` literals taken, under `ArrSpec::unique`) and
    /// the array can still reach `min` afterwards.
    fn arr_can_add(&self, spec: u32, count: u32, used: u64) -> bool {
        let a = &self.ir.arrs[spec as usize];
        if a.max.is_some_and(|m| count >= m) || self.arr_item(spec, count).is_none() {
            return false;
        }
        if !a.unique.is_empty() && used.count_ones() as usize >= a.unique.len() {
            return false;
        }
        // Items needed beyond this one must be live (min_len computation guarantees the first
        // `min` are; later ones are optional).
        true
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

    fn str_frame(&self, spec: u32) -> Frame {
        let s = &self.ir.strs[spec as usize];
        let dfa = s.dfa.map_or(0, |d| self.ir.dfas[d as usize].start);
        Frame::Str {
            spec,
            len: 0,
            dfa,
            lex: 0,
            hex: 0,
            utf: 0,
            excl: if s.excl.is_some() { 0 } else { OFF },
        }
    }

    // ---------- strings ----------

    /// Can a character (as decoded bytes, the first being counted) follow, given the
    /// length and the pattern? Returns the new (len, dfa) state.
    fn str_char(
        &self,
        spec: u32,
        len: u32,
        dfa: u32,
        bytes: &[u8],
        counts: bool,
    ) -> Option<(u32, u32)> {
        let s = &self.ir.strs[spec as usize];
        let nlen = len + u32::from(counts);
        if s.max.is_some_and(|m| nlen > m) {
            return None;
        }
        let mut d = dfa;
        if let Some(di) = s.dfa {
            let dd = &self.ir.dfas[di as usize];
            for &x in bytes {
                d = dd.next(d, x);
                if d == 0 {
                    return None;
                }
            }
            if let Some(li) = s.lens {
                let lt = &self.ir.lens[li as usize];
                let lo = s.min.saturating_sub(nlen);
                let hi = s.max.map_or(u32::MAX, |m| m - nlen);
                if !lt.any_in(d, lo, hi) {
                    return None;
                }
            }
        }
        // Saturate the length when only a minimum matters.
        let nlen = if s.max.is_none() {
            nlen.min(s.min)
        } else {
            nlen
        };
        Some((nlen, d))
    }

    fn str_can_close(&self, spec: u32, len: u32, dfa: u32, excl: u32) -> bool {
        let s = &self.ir.strs[spec as usize];
        if len < s.min || s.max.is_some_and(|m| len > m) {
            return false;
        }
        if let Some(di) = s.dfa {
            if !self.ir.dfas[di as usize].accept[dfa as usize] {
                return false;
            }
        }
        if let Some(ti) = s.excl {
            if self.ir.tries[ti as usize].is_terminal(excl) {
                return false;
            }
        }
        true
    }

    /// `None`: refused; `Some(None)`: the string closed; `Some(Some(f))`: the new frame.
    fn str_step(&self, f: &Frame, b: u8) -> Option<Option<Frame>> {
        let Frame::Str {
            spec,
            len,
            dfa,
            lex,
            hex,
            utf,
            excl,
        } = *f
        else {
            return None;
        };
        let trie = |n: u32| match self.ir.strs[spec as usize].excl {
            Some(ti) => self.ir.tries[ti as usize].step(n, b),
            None => OFF,
        };
        let mk = |len, dfa, lex, hex, utf, excl| {
            Some(Some(Frame::Str {
                spec,
                len,
                dfa,
                lex,
                hex,
                utf,
                excl,
            }))
        };
        if utf != 0 {
            let rem = utf >> 4;
            let code = utf & 0xF;
            if !cont_ok(code, b) {
                return None;
            }
            let (l2, d2) = self.str_char(spec, len, dfa, &[b], false)?;
            let nutf = if rem == 1 { 0 } else { ((rem - 1) << 4) | 0 };
            return mk(l2, d2, 0, 0, nutf, trie(excl));
        }
        match lex {
            0 => match b {
                b'"' => {
                    if self.str_can_close(spec, len, dfa, excl) {
                        Some(None)
                    } else {
                        None
                    }
                }
                b'\\' => {
                    // Some escape must be possible.
                    let ok = b"\"\\ntrbf".iter().any(|&e| {
                        self.str_char(spec, len, dfa, &[short_escape(e).unwrap()], true)
                            .is_some()
                    }) || self.ctrl_possible(spec, len, dfa);
                    if ok {
                        mk(len, dfa, 1, 0, 0, trie(excl))
                    } else {
                        None
                    }
                }
                0x00..=0x1F => None,
                0x20..=0x7F => {
                    let (l2, d2) = self.str_char(spec, len, dfa, &[b], true)?;
                    mk(l2, d2, 0, 0, 0, trie(excl))
                }
                _ => {
                    let (n, code) = lead(b)?;
                    let (l2, d2) = self.str_char(spec, len, dfa, &[b], true)?;
                    mk(l2, d2, 0, 0, (n << 4) | code, trie(excl))
                }
            },
            1 => {
                if let Some(d) = short_escape(b) {
                    let (l2, d2) = self.str_char(spec, len, dfa, &[d], true)?;
                    mk(l2, d2, 0, 0, 0, trie(excl))
                } else if b == b'u' && self.ctrl_possible(spec, len, dfa) {
                    mk(len, dfa, 2, 0, 0, trie(excl))
                } else {
                    None
                }
            }
            2 | 3 => {
                if b == b'0' {
                    mk(len, dfa, lex + 1, 0, 0, trie(excl))
                } else {
                    None
                }
            }
            4 => {
                if b == b'0' || b == b'1' {
                    let x = b - b'0';
                    let any = (0..16u8).any(|y| self.ctrl_ok(spec, len, dfa, x * 16 + y));
                    if any {
                        mk(len, dfa, 5, x, 0, trie(excl))
                    } else {
                        None
                    }
                } else {
                    None
                }
            }
            5 => {
                let y = hexval(b)?;
                let c = hex * 16 + y;
                if !self.ctrl_ok(spec, len, dfa, c) {
                    return None;
                }
                let (l2, d2) = self.str_char(spec, len, dfa, &[c], true)?;
                mk(l2, d2, 0, 0, 0, trie(excl))
            }
            _ => None,
        }
    }

    /// A control character that is written `\u00XX` canonically.
    fn ctrl_ok(&self, spec: u32, len: u32, dfa: u32, c: u8) -> bool {
        c < 0x20
            && !matches!(c, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D)
            && self.str_char(spec, len, dfa, &[c], true).is_some()
    }

    fn ctrl_possible(&self, spec: u32, len: u32, dfa: u32) -> bool {
        (0..0x20u8).any(|c| self.ctrl_ok(spec, len, dfa, c))
    }

    // ---------- objects ----------

    fn obj_can_close(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        self.next_req[spec as usize][next as usize] as usize == o.props.len() && emitted >= o.min
    }

    /// Listed property `j` may be emitted next (from position `next`, `emitted` so far).
    fn prop_ok(&self, spec: u32, next: u32, emitted: u32, j: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        if j < next || j as usize >= o.props.len() {
            return false;
        }
        if self.next_req[spec as usize][next as usize] < j {
            return false; // would skip a required property
        }
        if !self.live(o.props[j as usize].node) {
            return false;
        }
        if o.max.is_some_and(|m| emitted + 1 > m) {
            return false;
        }
        // Enough live properties after j to reach min (one extra key may add one).
        emitted
            + 1
            + self.suffix_live[spec as usize][j as usize + 1]
            + u32::from(self.extra_live(spec))
            >= o.min
    }

    /// Whether unlisted keys can be generated at all (a live value schema; `new` drops
    /// `extra` when no key name is left).
    fn extra_live(&self, spec: u32) -> bool {
        self.ir.objs[spec as usize]
            .extra
            .is_some_and(|n| self.live(n))
    }

    /// An unlisted key may start. Extra keys come after the listed ones and may repeat
    /// (names are not tracked), so they count towards `minProperties` once: the first
    /// is allowed when it reaches `min`, and its name differs from every listed one.
    /// Repeats only add keys, and `emitted` counts them all against `maxProperties`.
    fn extra_ok(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        self.extra_live(spec)
            && self.next_req[spec as usize][next as usize] as usize == o.props.len()
            && emitted + 1 >= o.min
            && o.max.is_none_or(|m| emitted < m)
    }

    /// The cheapest unlisted member, `"key":value`.
    fn extra_member_text(&self, spec: u32) -> Option<Vec<u8>> {
        let o = &self.ir.objs[spec as usize];
        let n = o.extra?;
        if !self.live(n) {
            return None;
        }
        let mut c = b"\"".to_vec();
        c.extend(self.str_shortest(&self.str_frame(o.extra_key))?);
        c.push(b':');
        c.extend(self.min_text(n));
        Some(c)
    }

    fn can_continue(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        (next..o.props.len() as u32).any(|j| self.prop_ok(spec, next, emitted, j))
            || self.extra_ok(spec, next, emitted)
    }

    fn sat_emitted(&self, spec: u32, e: u32) -> u32 {
        let o = &self.ir.objs[spec as usize];
        if o.max.is_none() {
            e.min(o.min)
        } else {
            e
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn obj_step(
        &self,
        mut t: Thread,
        spec: u32,
        next: u32,
        emitted: u32,
        ph: ObjPh,
        ws: u32,
        b: u8,
        out: &mut Vec<Thread>,
    ) {
        let o = &self.ir.objs[spec as usize];
        let set = |t: &mut Thread, next: u32, emitted: u32, ph: ObjPh, ws: u32| {
            *t.last_mut().unwrap() = Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ws,
            };
        };
        let ws_here = matches!(
            ph,
            ObjPh::Open | ObjPh::Comma | ObjPh::Colon { .. } | ObjPh::Value { .. } | ObjPh::After
        );
        if ws_here && is_ws(b) {
            if ws < self.ws_max {
                set(&mut t, next, emitted, ph, ws + 1);
                out.push(t);
            }
            return;
        }
        match ph {
            ObjPh::Open | ObjPh::Comma => {
                if b == b'}' && ph == ObjPh::Open {
                    if self.obj_can_close(spec, next, emitted) {
                        self.finish(t, out);
                    }
                    return;
                }
                if b != b'"' {
                    return;
                }
                // The key trie's root holds every listed property.
                self.key_thread(t.clone(), spec, next, emitted, 0, out);
                if self.extra_ok(spec, next, emitted) {
                    let e2 = self.sat_emitted(spec, emitted + 1);
                    set(&mut t, o.props.len() as u32, e2, ObjPh::ExtraKey, 0);
                    t.push(self.str_frame(o.extra_key));
                    out.push(t);
                }
            }
            ObjPh::Key { prop, pos } => {
                let key = &o.props[prop as usize].key;
                if pos as usize == key.len() {
                    if b == b'"' {
                        set(&mut t, next, emitted, ObjPh::Colon { prop }, 0);
                        out.push(t);
                    }
                } else if key[pos as usize] == b {
                    set(&mut t, next, emitted, ObjPh::Key { prop, pos: pos + 1 }, 0);
                    out.push(t);
                }
            }
            ObjPh::Keys { node } => {
                let pt = &self.prop_tries[spec as usize];
                if b == b'"' {
                    let j = pt.term[node as usize];
                    if j != OFF && self.prop_ok(spec, next, emitted, j) {
                        let mut t2 = t.clone();
                        let e2 = self.sat_emitted(spec, emitted + 1);
                        set(&mut t2, j + 1, e2, ObjPh::Colon { prop: j }, 0);
                        out.push(t2);
                    }
                }
                if let Some(c) = pt.child(node, b) {
                    self.key_thread(t, spec, next, emitted, c, out);
                }
            }
            ObjPh::Colon { prop } => {
                if b == b':' {
                    set(&mut t, next, emitted, ObjPh::Value { prop }, 0);
                    out.push(t);
                }
            }
            ObjPh::Value { prop } => {
                let n = if prop == EXTRA {
                    o.extra.unwrap()
                } else {
                    o.props[prop as usize].node
                };
                set(&mut t, next, emitted, ObjPh::InValue, 0);
                self.start_value(t, n, b, out);
            }
            ObjPh::After => {
                if b == b'}' {
                    if self.obj_can_close(spec, next, emitted) {
                        self.finish(t, out);
                    }
                } else if b == b',' && self.can_continue(spec, next, emitted) {
                    set(&mut t, next, emitted, ObjPh::Comma, 0);
                    out.push(t);
                }
            }
            ObjPh::ExtraKey | ObjPh::InValue => {}
        }
    }

    /// The thread inside a key at node `node` of the object's key trie (`t`'s top is
    /// that object): none when no candidate property is left, `Key` when one is (its
    /// position and emitted count are fixed then), else `Keys`. `prop_ok` admits no
    /// property past the first required one.
    fn key_thread(
        &self,
        mut t: Thread,
        spec: u32,
        next: u32,
        emitted: u32,
        node: u32,
        out: &mut Vec<Thread>,
    ) {
        let pt = &self.prop_tries[spec as usize];
        let mut cands = pt.props[node as usize]
            .iter()
            .copied()
            .filter(|&j| self.prop_ok(spec, next, emitted, j));
        let (next, emitted, ph) = match (cands.next(), cands.next()) {
            (None, _) => return,
            (Some(j), None) => (
                j + 1,
                self.sat_emitted(spec, emitted + 1),
                ObjPh::Key {
                    prop: j,
                    pos: pt.depth[node as usize],
                },
            ),
            _ => (next, emitted, ObjPh::Keys { node }),
        };
        *t.last_mut().unwrap() = Frame::Obj {
            spec,
            next,
            emitted,
            ph,
            ws: 0,
        };
        out.push(t);
    }

    // ---------- shortest completion ----------

    /// Bytes that finish the top frame of `t` (a leaf or a container), assuming any child
    /// above it has finished.
    fn finish_frame(&self, f: &Frame) -> Option<Vec<u8>> {
        match f {
            Frame::Root { ph, .. } => {
                if *ph == 0 {
                    Some(self.min_text(self.ir.root))
                } else {
                    Some(Vec::new())
                }
            }
            Frame::Lit { id, pos } => Some(self.ir.lits[*id as usize][*pos as usize..].to_vec()),
            Frame::Num { spec, buf } => num::shortest(&self.ir.nums[*spec as usize], buf),
            Frame::Str { .. } => self.str_shortest(f),
            Frame::Arr {
                spec,
                count,
                ph,
                used,
                ..
            } => {
                let a = &self.ir.arrs[*spec as usize];
                let mut o = Vec::new();
                let mut c = *count;
                let mut first = matches!(ph, ArrPh::Open);
                if !a.unique.is_empty() {
                    // The shortest literals not used yet, as many as `min` still needs
                    // (one at least after a comma). `count` saturates for open lists, so
                    // the used literals count the items.
                    let mut free: Vec<&Vec<u8>> = (0..a.unique.len())
                        .filter(|k| used >> k & 1 == 0)
                        .map(|k| &self.ir.lits[a.unique[k] as usize])
                        .collect();
                    free.sort_by_key(|l| l.len());
                    let have = used.count_ones();
                    let mut need = a.min.saturating_sub(have) as usize;
                    if matches!(ph, ArrPh::Comma) {
                        need = need.max(1);
                    }
                    if free.len() < need {
                        return None;
                    }
                    for (i, l) in free.iter().take(need).enumerate() {
                        if i > 0 || !(first || matches!(ph, ArrPh::Comma)) {
                            o.push(b',');
                        }
                        o.extend_from_slice(l);
                    }
                    o.push(b']');
                    return Some(o);
                }
                if matches!(ph, ArrPh::Comma) {
                    let n = self.arr_item(*spec, c)?;
                    o.extend(self.min_text(n));
                    c += 1;
                    first = false;
                }
                while c < a.min {
                    let n = self.arr_item(*spec, c)?;
                    if !first {
                        o.push(b',');
                    }
                    o.extend(self.min_text(n));
                    c += 1;
                    first = false;
                }
                o.push(b']');
                Some(o)
            }
            Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ..
            } => {
                let o = &self.ir.objs[*spec as usize];
                if let ObjPh::Keys { node } = *ph {
                    // The cheapest candidate: the rest of its key, its value, the rest.
                    let pt = &self.prop_tries[*spec as usize];
                    let e2 = self.sat_emitted(*spec, emitted + 1);
                    let mut best: Option<Vec<u8>> = None;
                    for &j in &pt.props[node as usize] {
                        if !self.prop_ok(*spec, *next, *emitted, j) {
                            continue;
                        }
                        let mut c = self.member_rest(*spec, j, pt.depth[node as usize]);
                        let Some(rest) = self.obj_rest(*spec, j + 1, e2, false) else {
                            continue;
                        };
                        c.extend(rest);
                        if best.as_ref().is_none_or(|b| c.len() < b.len()) {
                            best = Some(c);
                        }
                    }
                    return best;
                }
                let mut out = Vec::new();
                let (next, emitted, first) = match *ph {
                    ObjPh::Open => (*next, *emitted, true),
                    ObjPh::After => (*next, *emitted, false),
                    ObjPh::Comma
                    | ObjPh::Key { .. }
                    | ObjPh::Keys { .. }
                    | ObjPh::Colon { .. }
                    | ObjPh::Value { .. }
                    | ObjPh::ExtraKey
                    | ObjPh::InValue => {
                        // Finish the current member first.
                        match *ph {
                            ObjPh::Comma => {
                                // Need one member: the cheapest allowed.
                                let mut best: Option<(Vec<u8>, u32)> = None;
                                for j in *next..o.props.len() as u32 {
                                    if self.prop_ok(*spec, *next, *emitted, j) {
                                        let m = self.member_text(*spec, j);
                                        let rest = self.obj_rest(
                                            *spec,
                                            j + 1,
                                            self.sat_emitted(*spec, emitted + 1),
                                            false,
                                        )?;
                                        let mut c = m;
                                        c.extend(rest);
                                        if best.as_ref().is_none_or(|(b, _)| c.len() < b.len()) {
                                            best = Some((c, j));
                                        }
                                    }
                                    if o.props[j as usize].required {
                                        break;
                                    }
                                }
                                if best.is_none() && self.extra_ok(*spec, *next, *emitted) {
                                    let mut c = self.extra_member_text(*spec)?;
                                    c.push(b'}');
                                    best = Some((c, 0));
                                }
                                return best.map(|b| b.0);
                            }
                            ObjPh::Key { prop, pos } => {
                                out.extend(self.member_rest(*spec, prop, pos));
                            }
                            ObjPh::Colon { prop } => {
                                out.push(b':');
                                out.extend(self.min_text(if prop == EXTRA {
                                    o.extra.unwrap()
                                } else {
                                    o.props[prop as usize].node
                                }));
                            }
                            ObjPh::Value { prop } => {
                                out.extend(self.min_text(if prop == EXTRA {
                                    o.extra.unwrap()
                                } else {
                                    o.props[prop as usize].node
                                }));
                            }
                            ObjPh::ExtraKey => {
                                // The key string on top finished: colon and value follow.
                                out.push(b':');
                                out.extend(self.min_text(o.extra.unwrap()));
                            }
                            _ => {}
                        }
                        (*next, *emitted, false)
                    }
                };
                out.extend(self.obj_rest(*spec, next, emitted, first)?);
                Some(out)
            }
        }
    }

    fn member_text(&self, spec: u32, j: u32) -> Vec<u8> {
        let mut m = vec![b'"'];
        m.extend(self.member_rest(spec, j, 0));
        m
    }

    /// The cheapest rest of listed member `j` after `pos` bytes of its key.
    fn member_rest(&self, spec: u32, j: u32, pos: u32) -> Vec<u8> {
        let p = &self.ir.objs[spec as usize].props[j as usize];
        let mut m = p.key[pos as usize..].to_vec();
        m.extend_from_slice(b"\":");
        m.extend(self.min_text(p.node));
        m
    }

    /// Cheapest way to close an object from position `next` with `emitted` members so far.
    fn obj_rest(&self, spec: u32, next: u32, emitted: u32, first: bool) -> Option<Vec<u8>> {
        let o = &self.ir.objs[spec as usize];
        let n = o.props.len() as u32;
        // Required members after next, plus cheapest optional ones to reach min.
        let mut chosen: Vec<u32> = (next..n)
            .filter(|&j| o.props[j as usize].required)
            .collect();
        let mut count = emitted + chosen.len() as u32;
        if count < o.min {
            let mut opt: Vec<(u64, u32)> = (next..n)
                .filter(|&j| !o.props[j as usize].required && self.live(o.props[j as usize].node))
                .map(|j| {
                    (
                        self.ir.nodes[o.props[j as usize].node as usize].min_len
                            + o.props[j as usize].key.len() as u64,
                        j,
                    )
                })
                .collect();
            opt.sort();
            for (_, j) in opt {
                if count >= o.min {
                    break;
                }
                chosen.push(j);
                count += 1;
            }
            chosen.sort();
        }
        // Short by one: an unlisted key, after the listed ones, brings the last one.
        let extra = if count < o.min {
            if count + 1 < o.min {
                return None;
            }
            Some(self.extra_member_text(spec)?)
        } else {
            None
        };
        let mut out = Vec::new();
        let mut first = first;
        for m in chosen
            .into_iter()
            .map(|j| self.member_text(spec, j))
            .chain(extra)
        {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend(m);
        }
        out.push(b'}');
        Some(out)
    }

    /// Shortest bytes that close a string frame (BFS over the frame's own states).
    fn str_shortest(&self, f: &Frame) -> Option<Vec<u8>> {
        if let Frame::Str {
            spec,
            len,
            lex,
            hex,
            utf,
            ..
        } = *f
        {
            let sp = &self.ir.strs[spec as usize];
            if sp.max.is_some_and(|m| m < sp.min) {
                return None; // no length fits (a marked string with no span)
            }
            if sp.dfa.is_none() && sp.excl.is_none() {
                // Finish the pending character, pad to the minimum, close.
                let mut out = Vec::new();
                let mut len = len;
                if utf != 0 {
                    let rem = utf >> 4;
                    out.push(match utf & 0xF {
                        1 => 0xA0,
                        3 => 0x90,
                        _ => 0x80,
                    });
                    out.extend(std::iter::repeat_n(0x80, rem as usize - 1));
                }
                match lex {
                    1 => {
                        out.push(b'n');
                        len += 1;
                    }
                    2 => {
                        out.extend_from_slice(b"0001");
                        len += 1;
                    }
                    3 => {
                        out.extend_from_slice(b"001");
                        len += 1;
                    }
                    4 => {
                        out.extend_from_slice(b"01");
                        len += 1;
                    }
                    5 => {
                        out.push(if hex == 0 { b'1' } else { b'0' });
                        len += 1;
                    }
                    _ => {}
                }
                out.extend(std::iter::repeat_n(
                    b'a',
                    sp.min.saturating_sub(len) as usize,
                ));
                out.push(b'"');
                return Some(out);
            }
        }
        use std::collections::{HashMap, VecDeque};
        let key = |f: &Frame| match f {
            Frame::Str {
                spec,
                len,
                dfa,
                lex,
                hex,
                utf,
                excl,
            } => {
                let s = &self.ir.strs[*spec as usize];
                (
                    len.min(&s.min.max(1)).to_owned(),
                    *dfa,
                    *lex,
                    *hex,
                    *utf,
                    (*excl).min(u32::MAX),
                    s.max.is_some().then_some(*len),
                )
            }
            _ => unreachable!(),
        };
        let mut prev: HashMap<_, (Option<_>, u8)> = HashMap::new();
        let mut q = VecDeque::new();
        let k0 = key(f);
        prev.insert(k0, (None, 0));
        q.push_back(f.clone());
        // Candidate bytes: ASCII letters first, then everything. In a string body (no
        // escape pending) a byte acts through its DFA class and its UTF-8 role alone, so
        // one byte per (class, role) is tried: 282 bytes a state made the search run out
        // of budget on a pattern DFA of a few hundred states under a length bound.
        let order: Vec<u8> = (b'a'..=b'z').chain(0u8..=255).collect();
        let reps: Vec<u8> = {
            let Frame::Str { spec, .. } = *f else {
                unreachable!()
            };
            let classes = self.ir.strs[spec as usize]
                .dfa
                .map(|di| &self.ir.dfas[di as usize].classes);
            let mut seen = std::collections::HashSet::new();
            order
                .iter()
                .copied()
                .filter(|&b| {
                    let role: u16 = match b {
                        b'"' => 1,
                        b'\\' => 2,
                        0x00..=0x1F => 3,
                        0x20..=0x7F => 4,
                        0x80..=0xBF => {
                            // Which continuation ranges (`cont_ok` codes) take it.
                            16 + (0..5u8).fold(0, |m, c| m | (u16::from(cont_ok(c, b)) << c))
                        }
                        _ => lead(b).map_or(5, |(n, c)| 64 + u16::from(n) * 8 + u16::from(c)),
                    };
                    seen.insert((classes.map_or(0, |c| c[b as usize]), role))
                })
                .collect()
        };
        let mut budget = 200_000usize;
        while let Some(cur) = q.pop_front() {
            let kc = key(&cur);
            let in_body = matches!(cur, Frame::Str { lex: 0, .. });
            for &b in if in_body { &reps } else { &order } {
                budget = budget.checked_sub(1)?;
                match self.str_step(&cur, b) {
                    None => {}
                    Some(None) => {
                        // Closed: rebuild the path.
                        let mut path = vec![b];
                        let mut k = kc;
                        while let Some((Some(pk), pb)) = prev.get(&k).cloned() {
                            path.push(pb);
                            k = pk;
                        }
                        path.reverse();
                        return Some(path);
                    }
                    Some(Some(nf)) => {
                        let kn = key(&nf);
                        if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(kn) {
                            e.insert((Some(kc), b));
                            q.push_back(nf);
                        }
                    }
                }
            }
        }
        None
    }

    /// Shortest text of a value of node `n` (the node must be live).
    pub fn min_text(&self, n: NodeId) -> Vec<u8> {
        let node = &self.ir.nodes[n as usize];
        let best = (0..node.alts.len()).min_by_key(|&i| node.alt_len[i]);
        match best {
            Some(i) => self.alt_min_text(node.alts[i]).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Shortest lengths of every node (a fixpoint: recursion through children), then drop
    /// the alternatives that have no valid text. Lengths only fall, and children are
    /// numbered after their parents, so sweeping from the last node converges in a few
    /// sweeps; the deadline bounds the rest (one sweep per cycle length at worst).
    fn compute_min_lens(&mut self, deadline: &Deadline) -> Result<(), CompileError> {
        const INF: u64 = u64::MAX;
        let mut leaf: std::collections::HashMap<Alt, u64> = std::collections::HashMap::new();
        for n in &self.ir.nodes {
            for &a in &n.alts {
                if matches!(a, Alt::Arr(_) | Alt::Obj(_)) || leaf.contains_key(&a) {
                    continue;
                }
                if matches!(a, Alt::Str(_)) {
                    // A bounded search per string spec, but there may be many.
                    deadline.check(&n.ptr)?;
                }
                let l = self.alt_min_text(a).map_or(INF, |t| t.len() as u64);
                leaf.insert(a, l);
            }
        }
        let mut lens: Vec<u64> = vec![INF; self.ir.nodes.len()];
        loop {
            let mut changed = false;
            for i in (0..self.ir.nodes.len()).rev() {
                if i % 1024 == 0 {
                    deadline.check(&self.ir.nodes[i].ptr)?;
                }
                let mut best = INF;
                for &a in &self.ir.nodes[i].alts {
                    let l = match a {
                        Alt::Arr(_) | Alt::Obj(_) => self.single_alt_len(a, &lens),
                        _ => leaf[&a],
                    };
                    best = best.min(l);
                }
                if best < lens[i] {
                    lens[i] = best;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for (i, n) in self.ir.nodes.iter_mut().enumerate() {
            n.min_len = lens[i];
        }
        // Per-alternative lengths with the final node lengths; drop dead alternatives.
        for i in 0..self.ir.nodes.len() {
            let alts = self.ir.nodes[i].alts.clone();
            let mut keep = Vec::new();
            let mut al = Vec::new();
            for a in alts {
                let l = match a {
                    Alt::Arr(_) | Alt::Obj(_) => self.single_alt_len(a, &lens),
                    _ => leaf[&a],
                };
                if l != INF {
                    keep.push(a);
                    al.push(l);
                }
            }
            self.ir.nodes[i].alts = keep;
            self.ir.nodes[i].alt_len = al;
        }
        Ok(())
    }

    fn single_alt_len(&self, a: Alt, lens: &[u64]) -> u64 {
        const INF: u64 = u64::MAX;
        let add = |a: u64, b: u64| if a == INF || b == INF { INF } else { a + b };
        match a {
            Alt::Arr(s) => {
                let sp = &self.ir.arrs[s as usize];
                if sp.max.is_some_and(|m| m < sp.min) {
                    return INF;
                }
                let mut t = 2 + u64::from(sp.min.saturating_sub(1));
                for k in 0..sp.min as usize {
                    let item = sp.prefix.get(k).copied().or(sp.items);
                    t = add(t, item.map_or(INF, |n| lens[n as usize]));
                }
                t
            }
            Alt::Obj(s) => {
                let sp = &self.ir.objs[s as usize];
                let mut t = 2u64;
                let mut count = 0u32;
                let mut opt = Vec::new();
                for p in &sp.props {
                    let c = add(p.key.len() as u64 + 3, lens[p.node as usize]);
                    if p.required {
                        t = add(t, c);
                        count += 1;
                    } else if c != INF {
                        opt.push(c);
                    }
                }
                opt.sort();
                let mut it = opt.into_iter();
                while count < sp.min {
                    match it.next() {
                        Some(c) => {
                            t = add(t, c);
                            count += 1;
                        }
                        None if count + 1 == sp.min => {
                            // One unlisted key may bring the last one (see `extra_ok`).
                            let extra = sp.extra.map_or(INF, |n| lens[n as usize]);
                            let key = self
                                .str_shortest(&self.str_frame(sp.extra_key))
                                .map_or(INF, |k| k.len() as u64 + 2);
                            t = add(t, add(key, extra));
                            count += 1;
                        }
                        None => return INF,
                    }
                }
                if sp.max.is_some_and(|m| count > m) {
                    return INF;
                }
                add(t, u64::from(count.saturating_sub(1)))
            }
            _ => INF,
        }
    }

    pub fn alt_min_text(&self, a: Alt) -> Option<Vec<u8>> {
        match a {
            Alt::Lit(id) => Some(self.ir.lits[id as usize].clone()),
            Alt::Num(s) => num::shortest(&self.ir.nums[s as usize], b""),
            Alt::Str(s) => {
                let mut v = vec![b'"'];
                v.extend(self.str_shortest(&self.str_frame(s))?);
                Some(v)
            }
            Alt::Arr(s) => {
                let mut v = vec![b'['];
                v.extend(self.finish_frame(&Frame::Arr {
                    spec: s,
                    count: 0,
                    ph: ArrPh::Open,
                    ws: 0,
                    used: 0,
                })?);
                Some(v)
            }
            Alt::Obj(s) => {
                let mut v = vec![b'{'];
                v.extend(self.obj_rest(s, 0, 0, true)?);
                Some(v)
            }
        }
    }

    pub fn shortest_completion(&self, s: &State) -> Vec<u8> {
        let mut best: Option<Vec<u8>> = None;
        for t in &s.threads {
            if let Some(c) = self.thread_completion(t) {
                if best.as_ref().is_none_or(|b| c.len() < b.len()) {
                    best = Some(c);
                }
            }
        }
        best.unwrap_or_default()
    }

    fn thread_completion(&self, t: &Thread) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut stack = t.clone();
        while let Some(top) = stack.last().cloned() {
            out.extend(self.finish_frame(&top)?);
            stack.pop();
            if stack.is_empty() {
                break;
            }
            self.child_done(&mut stack);
            // The root after its value has nothing more to add.
        }
        Some(out)
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
        // Where whitespace is read first, a value byte never is.
        let ws = |set: &mut [u64; 4], n: u32| {
            if n < self.ws_max {
                for b in [b' ', b'\n', b'\t', b'\r'] {
                    add(set, b);
                }
            }
        };
        match *top {
            Frame::Root { ph, ws: n } => {
                if ph != 1 {
                    ws(set, n);
                }
                if ph == 0 {
                    self.value_first_bytes(self.ir.root, set);
                }
            }
            Frame::Lit { id, pos } => {
                if let Some(&b) = self.ir.lits[id as usize].get(pos as usize) {
                    add(set, b);
                }
            }
            Frame::Num { spec, ref buf } => {
                let ns = &self.ir.nums[spec as usize];
                // `num::allows` re-serialises the prefix: nothing else passes. Only a far
                // number (`NumSpec::exp`) writes an `e`.
                let bytes: &[u8] = if ns.exp > 0 {
                    b"-.0123456789e"
                } else {
                    b"-.0123456789"
                };
                for &b in bytes {
                    if num::allows(ns, buf, b) {
                        add(set, b);
                    }
                }
                if num::accepting(ns, buf) {
                    if let Some((parent, rest)) = below.split_last() {
                        let mut p = vec![parent.clone()];
                        self.child_done(&mut p);
                        self.top_bytes(rest, &p[0], set);
                    }
                }
            }
            Frame::Str { .. } => self.str_bytes(top, set),
            Frame::Arr {
                spec,
                count,
                ph,
                ws: n,
                used,
            } => {
                let a = &self.ir.arrs[spec as usize];
                if ph != ArrPh::InValue {
                    ws(set, n);
                }
                if matches!(ph, ArrPh::Open | ArrPh::After) && count >= a.min {
                    add(set, b']');
                }
                if ph == ArrPh::After && self.arr_can_add(spec, count, used) {
                    add(set, b',');
                }
                if matches!(ph, ArrPh::Open | ArrPh::Comma) {
                    if let Some(n) = self.arr_item(spec, count) {
                        if self.arr_can_add(spec, count, used) {
                            if a.unique.is_empty() {
                                self.value_first_bytes(n, set);
                            } else {
                                for (k, &id) in a.unique.iter().enumerate() {
                                    if used >> k & 1 == 0 {
                                        add(set, self.ir.lits[id as usize][0]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Frame::Obj {
                spec,
                next,
                emitted,
                ph,
                ws: n,
            } => {
                let o = &self.ir.objs[spec as usize];
                if matches!(
                    ph,
                    ObjPh::Open
                        | ObjPh::Comma
                        | ObjPh::Colon { .. }
                        | ObjPh::Value { .. }
                        | ObjPh::After
                ) {
                    ws(set, n);
                }
                match ph {
                    ObjPh::Open | ObjPh::Comma => {
                        if ph == ObjPh::Open && self.obj_can_close(spec, next, emitted) {
                            add(set, b'}');
                        }
                        let mut key = self.extra_ok(spec, next, emitted);
                        for j in next..o.props.len() as u32 {
                            if key || self.prop_ok(spec, next, emitted, j) {
                                key = true;
                                break;
                            }
                            if o.props[j as usize].required {
                                break;
                            }
                        }
                        if key {
                            add(set, b'"');
                        }
                    }
                    ObjPh::Key { prop, pos } => {
                        let key = &o.props[prop as usize].key;
                        add(set, key.get(pos as usize).copied().unwrap_or(b'"'));
                    }
                    ObjPh::Keys { node } => {
                        let pt = &self.prop_tries[spec as usize];
                        let j = pt.term[node as usize];
                        if j != OFF && self.prop_ok(spec, next, emitted, j) {
                            add(set, b'"');
                        }
                        for &(b, c) in &pt.children[node as usize] {
                            if pt.props[c as usize]
                                .iter()
                                .any(|&j| self.prop_ok(spec, next, emitted, j))
                            {
                                add(set, b);
                            }
                        }
                    }
                    ObjPh::Colon { .. } => add(set, b':'),
                    ObjPh::Value { prop } => {
                        let n = if prop == EXTRA {
                            o.extra.unwrap()
                        } else {
                            o.props[prop as usize].node
                        };
                        self.value_first_bytes(n, set);
                    }
                    ObjPh::After => {
                        if self.obj_can_close(spec, next, emitted) {
                            add(set, b'}');
                        }
                        if self.can_continue(spec, next, emitted) {
                            add(set, b',');
                        }
                    }
                    ObjPh::ExtraKey | ObjPh::InValue => {}
                }
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

    /// The bytes a string frame takes.
    fn str_bytes(&self, f: &Frame, set: &mut [u64; 4]) {
        let Frame::Str {
            spec,
            len,
            lex,
            utf,
            ..
        } = *f
        else {
            return;
        };
        let sp = &self.ir.strs[spec as usize];
        if lex == 0 && utf == 0 && sp.dfa.is_none() && sp.max.is_none_or(|m| len < m) {
            // Any character fits: printable ASCII and every UTF-8 lead byte (`lead`),
            // except `"` and `\`, which are asked.
            let mut own = [!0u64 << 32, !0, 0, ((1u64 << (0xF5 - 0xC0)) - 1) & !0b11];
            for b in [b'"', b'\\'] {
                if self.str_step(f, b).is_none() {
                    own[b as usize >> 6] &= !(1u64 << (b & 63));
                }
            }
            for (w, o) in set.iter_mut().zip(own) {
                *w |= o;
            }
            return;
        }
        if lex == 0 {
            if let Some(di) = sp.dfa {
                let Frame::Str { dfa, .. } = *f else {
                    return;
                };
                // Where the length tests cannot fail for this character, `str_char`
                // is the DFA's transition alone: read its row, no `str_step` per class.
                let nlen = if utf != 0 { len } else { len + 1 };
                if self.lens_free(spec, nlen) {
                    let dd = &self.ir.dfas[di as usize];
                    for b in 0..=255u8 {
                        let byte_ok = if utf != 0 {
                            cont_ok(utf & 0xF, b)
                        } else {
                            matches!(b, 0x20..=0x7F | 0xC2..=0xF4) && b != b'"' && b != b'\\'
                        };
                        if byte_ok && dd.next(dfa, b) != 0 {
                            add(set, b);
                        }
                    }
                    if utf == 0 {
                        for b in [b'"', b'\\'] {
                            if self.str_step(f, b).is_some() {
                                add(set, b);
                            }
                        }
                    }
                    return;
                }
                // `str_char` depends on the byte only through its DFA class: ask each
                // class once. `"` and `\` are asked apart.
                let classes = &self.ir.dfas[di as usize].classes;
                let mut memo = [0u8; 256]; // 0 unknown, 1 taken, 2 refused
                for b in 0..=255u8 {
                    let byte_ok = if utf != 0 {
                        cont_ok(utf & 0xF, b)
                    } else {
                        matches!(b, 0x20..=0x7F | 0xC2..=0xF4) && b != b'"' && b != b'\\'
                    };
                    if !byte_ok {
                        if utf == 0 && (b == b'"' || b == b'\\') && self.str_step(f, b).is_some() {
                            add(set, b);
                        }
                        continue;
                    }
                    let m = &mut memo[classes[b as usize] as usize];
                    if *m == 0 {
                        *m = if self.str_step(f, b).is_some() { 1 } else { 2 };
                    }
                    if *m == 1 {
                        add(set, b);
                    }
                }
                return;
            }
        }
        for b in 0..=255u8 {
            if self.str_step(f, b).is_some() {
                add(set, b);
            }
        }
    }

    /// The plain-character hint (see [`crate::ByteAutomaton::plain_chars_allowed`]): the
    /// largest `n` over the threads whose top is a string body at a character boundary
    /// such that every run of at most `n` plain characters is taken. Without a pattern
    /// that is the room left under `maxLength`; with one, the depth to which no run of
    /// plain characters leads the DFA (and its length table) to a dead end, at most
    /// [`PLAIN_CAP`].
    pub fn plain_chars_allowed(&self, s: &State) -> Option<u32> {
        let mut best: Option<u32> = None;
        for t in &s.threads {
            if let Some((spec, len, dfa)) = body_at_boundary(t) {
                let sp = &self.ir.strs[spec as usize];
                let room = sp.max.map_or(u32::MAX, |m| m - len);
                let n = match sp.dfa {
                    None => room,
                    Some(di) if sp.lens.is_none() => self.dfa_plain_depth(di, dfa).min(room),
                    Some(di) => {
                        // Where the length table cannot bite, the DFA's memoised depth
                        // decides; the level-by-level search (up to tens of µs per
                        // state) only runs near the bounds.
                        let k = self.key_room(spec, len);
                        let d = self.dfa_plain_depth(di, dfa);
                        if k >= d.min(room).min(PLAIN_CAP) {
                            d.min(room)
                        } else {
                            self.plain_search(spec, len, dfa, room.min(PLAIN_CAP))
                        }
                    }
                };
                if n == 0 && sp.dfa.is_some() {
                    continue;
                }
                best = Some(best.map_or(n, |b: u32| b.max(n)));
            }
        }
        best
    }

    /// The plain-token key (see [`crate::ByteAutomaton::plain_key`]): for a lone thread
    /// whose top is a string body under a pattern or format, at a character boundary,
    /// the DFA and its state, and how many plain characters the length bounds cannot
    /// tell apart from the DFA alone. Within those `n` characters `str_step` refuses a
    /// plain character only when the DFA dies: the `maxLength` test passes
    /// (`len + n <= max`) and so does every length-table test, because every live DFA
    /// state has suffixes of every count from `full_from()` on (see
    /// [`crate::dfa::LenTable`]). Names excluded by `propertyNames` only matter at the
    /// closing quote, which no plain character is.
    pub fn plain_key(&self, s: &State) -> Option<crate::automaton::PlainKey<'_>> {
        let [t] = s.threads.as_slice() else {
            return None;
        };
        let (spec, len, dfa) = body_at_boundary(t)?;
        let di = self.ir.strs[spec as usize].dfa?;
        let n = self.key_room(spec, len);
        let d = &self.ir.dfas[di as usize];
        (n >= 1).then(|| crate::automaton::PlainKey {
            key: (u64::from(di) << 32) | u64::from(dfa),
            n,
            // Within the key's `n` characters the DFA is all `str_step` tests for a
            // plain byte: UTF-8 holds by construction, and the length tests pass.
            table: crate::automaton::KeyTable {
                classes: &d.classes,
                trans: &self.plain_dfa[di as usize].rows,
                state: dfa * d.nclasses as u32,
            },
        })
    }

    /// Whether `str_char`'s length tests pass for every live DFA state at character
    /// count `nlen`: `nlen <= max`, and `any_in(q, min - nlen, max - nlen)` for every
    /// live `q`, which holds when `min(max - nlen, cap) >= max(full_from, min - nlen)`
    /// (see [`crate::dfa::LenTable`]). True for every count below one that passes.
    fn lens_free(&self, spec: u32, nlen: u32) -> bool {
        let sp = &self.ir.strs[spec as usize];
        if sp.max.is_some_and(|m| nlen > m) {
            return false;
        }
        let Some(li) = sp.lens else {
            return true;
        };
        let lt = &self.ir.lens[li as usize];
        let f = lt.full_from();
        if f == u32::MAX {
            return false;
        }
        let lo = sp.min.saturating_sub(nlen);
        let hi = sp.max.map_or(u32::MAX, |m| m - nlen).min(lt.cap);
        hi >= f.max(lo)
    }

    /// The largest `n <= PLAIN_CAP` such that the length checks of `str_char` pass
    /// for every live DFA state after `1..=n` more characters (0 when none is sure).
    fn key_room(&self, spec: u32, len: u32) -> u32 {
        let sp = &self.ir.strs[spec as usize];
        let room = sp.max.map_or(PLAIN_CAP, |m| (m - len).min(PLAIN_CAP));
        // `lens_free` holds for the counts up to some bound and fails above it. Below
        // `minLength` no key is given: there the walk of the state itself, cut short by
        // the lengths, costs less than a keyed walk of the whole vocabulary.
        if len + 1 < sp.min {
            return 0;
        }
        (1..=room)
            .rev()
            .find(|&n| self.lens_free(spec, len + n))
            .unwrap_or(0)
    }

    /// [`Machine::plain_search`] for a pattern without length bounds, memoised per state.
    fn dfa_plain_depth(&self, di: u32, d: u32) -> u32 {
        let cell = &self.plain_dfa[di as usize].depth[d as usize];
        let v = cell.load(Ordering::Relaxed);
        if v != DEPTH_UNKNOWN {
            return v as u32;
        }
        let n = self.plain_search_dfa(di, d, None, PLAIN_CAP);
        cell.store(n as u8, Ordering::Relaxed);
        n
    }

    /// The largest `k <= cap` such that every run of at most `k` plain characters is
    /// taken by the string body of `spec` at length `len`, DFA state `d`.
    fn plain_search(&self, spec: u32, len: u32, d: u32, cap: u32) -> u32 {
        let sp = &self.ir.strs[spec as usize];
        match sp.dfa {
            None => sp.max.map_or(cap, |m| (m - len).min(cap)),
            Some(di) => self.plain_search_dfa(di, d, Some((spec, len)), cap),
        }
    }

    /// Level by level over the sets of DFA states reached after `k` plain characters,
    /// byte by byte through the UTF-8 ranges `lead` and `cont_ok` allow (one byte per
    /// class). A byte is taken when the DFA state is live and, with `lens`,
    /// `str_char`'s length tests pass. Stops at the first refused byte, at `cap`, when
    /// no new DFA state appears (without `lens`: then every depth is safe), or when the
    /// work runs out (then the depth verified so far).
    fn plain_search_dfa(&self, di: u32, d: u32, lens: Option<(u32, u32)>, cap: u32) -> u32 {
        let dd = &self.ir.dfas[di as usize];
        let pd = &self.plain_dfa[di as usize];
        let ok = |q: u32, nlen: u32| -> bool {
            if q == 0 {
                return false;
            }
            let Some((spec, _)) = lens else {
                return true;
            };
            let s = &self.ir.strs[spec as usize];
            if s.max.is_some_and(|m| nlen > m) {
                return false;
            }
            match s.lens {
                Some(li) => {
                    let lo = s.min.saturating_sub(nlen);
                    let hi = s.max.map_or(u32::MAX, |m| m - nlen);
                    self.ir.lens[li as usize].any_in(q, lo, hi)
                }
                None => true,
            }
        };
        let len0 = lens.map_or(0, |(_, l)| l);
        let mut work = 0usize;
        let mut level: Vec<u32> = vec![d];
        // Without lengths the depth of a state depends on the state alone: once a level
        // holds only states already expanded, nothing new can fail.
        let mut expanded: Vec<u32> = Vec::new();
        let mut next: Vec<u32> = Vec::new();
        let mut pending: Vec<(u32, u8, u8)> = Vec::new();
        let mut seen: Vec<(u32, u8, u8)> = Vec::new();
        for k in 0..cap {
            let nlen = len0.saturating_add(k + 1);
            next.clear();
            pending.clear();
            seen.clear();
            for &q in &level {
                for &b in &pd.ascii {
                    let q1 = dd.next(q, b);
                    if !ok(q1, nlen) {
                        return k;
                    }
                    next.push(q1);
                }
                for &(b, n, code) in &pd.leads {
                    let q1 = dd.next(q, b);
                    if !ok(q1, nlen) {
                        return k;
                    }
                    let item = (q1, n, code);
                    if !seen.contains(&item) {
                        seen.push(item);
                        pending.push(item);
                    }
                }
                work += pd.ascii.len() + pd.leads.len() + seen.len();
            }
            while let Some((q, rem, code)) = pending.pop() {
                let conts = &pd.conts[code as usize];
                for &c in conts {
                    let q2 = dd.next(q, c);
                    if !ok(q2, nlen) {
                        return k;
                    }
                    if rem == 1 {
                        next.push(q2);
                    } else {
                        let item = (q2, rem - 1, 0);
                        if !seen.contains(&item) {
                            seen.push(item);
                            pending.push(item);
                        }
                    }
                }
                work += conts.len() + seen.len();
                if work > DEPTH_WORK {
                    return k;
                }
            }
            next.sort_unstable();
            next.dedup();
            work += next.len() * 4;
            if lens.is_none() {
                expanded.extend_from_slice(&level);
                expanded.sort_unstable();
                next.retain(|q| expanded.binary_search(q).is_err());
                if next.is_empty() {
                    return cap;
                }
                work += expanded.len();
            }
            std::mem::swap(&mut level, &mut next);
            if work > DEPTH_WORK {
                return k + 1;
            }
        }
        cap
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
