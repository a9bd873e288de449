//! Shortest completions: per frame, the cheapest bytes that finish it
//! ([`Machine::finish_frame`]), per state the shortest text to acceptance
//! ([`Machine::shortest_completion`]), and the shortest-length pass over the IR
//! ([`Machine::compute_min_lens`]) that gives every node its `min_len` and drops the
//! alternatives with no valid text.

use super::string::{cont_ok, lead};
use super::{ArrPh, Frame, Machine, ObjPh, State, Thread, EXTRA};
use crate::config::{Budget, CompileError};
use crate::ir::{Alt, NodeId};
use crate::num;

impl Machine {
    /// Bytes that finish the top frame of `t` (a leaf or a container), assuming any child
    /// above it has finished.
    pub(super) fn finish_frame(&self, f: &Frame) -> Option<Vec<u8>> {
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

    pub(super) fn member_text(&self, spec: u32, j: u32) -> Vec<u8> {
        let mut m = vec![b'"'];
        m.extend(self.member_rest(spec, j, 0));
        m
    }

    /// The cheapest rest of listed member `j` after `pos` bytes of its key.
    pub(super) fn member_rest(&self, spec: u32, j: u32, pos: u32) -> Vec<u8> {
        let p = &self.ir.objs[spec as usize].props[j as usize];
        let mut m = p.key[pos as usize..].to_vec();
        m.extend_from_slice(b"\":");
        m.extend(self.min_text(p.node));
        m
    }

    /// Cheapest way to close an object from position `next` with `emitted` members so far.
    pub(super) fn obj_rest(
        &self,
        spec: u32,
        next: u32,
        emitted: u32,
        first: bool,
    ) -> Option<Vec<u8>> {
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
    pub(super) fn str_shortest(&self, f: &Frame) -> Option<Vec<u8>> {
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
    /// sweeps; the step budget bounds the rest (one sweep per cycle length at worst).
    pub(super) fn compute_min_lens(&mut self, budget: &Budget) -> Result<(), CompileError> {
        const INF: u64 = u64::MAX;
        let mut leaf: std::collections::HashMap<Alt, u64> = std::collections::HashMap::new();
        for n in &self.ir.nodes {
            for &a in &n.alts {
                if matches!(a, Alt::Arr(_) | Alt::Obj(_)) || leaf.contains_key(&a) {
                    continue;
                }
                if matches!(a, Alt::Str(_)) {
                    // A bounded search per string spec, but there may be many.
                    budget.check(1, &n.ptr)?;
                }
                let l = self.alt_min_text(a).map_or(INF, |t| t.len() as u64);
                leaf.insert(a, l);
            }
        }
        let mut lens: Vec<u64> = vec![INF; self.ir.nodes.len()];
        loop {
            let mut changed = false;
            for i in (0..self.ir.nodes.len()).rev() {
                budget.check(1, &self.ir.nodes[i].ptr)?;
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

    pub(super) fn single_alt_len(&self, a: Alt, lens: &[u64]) -> u64 {
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

    pub(super) fn thread_completion(&self, t: &Thread) -> Option<Vec<u8>> {
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
}
