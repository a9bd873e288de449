//! Object frames: the key trie of an object's listed properties ([`PropTrie`]), which
//! property may come next (required ones in order, `minProperties`/`maxProperties`,
//! unlisted keys under `additionalProperties`), how an object frame takes a byte
//! ([`Machine::obj_step`]) and which bytes it takes ([`Machine::obj_bytes`]).

use super::{add, is_ws, Frame, Machine, ObjPh, Thread, EXTRA, OFF};

/// The listed keys of one object as a trie over their encoded bytes; node 0 is the
/// empty prefix.
#[derive(Default)]
pub(super) struct PropTrie {
    /// Per node: `(byte, child)`.
    pub(super) children: Vec<Vec<(u8, u32)>>,
    /// Per node: the properties whose key starts with the node's prefix, ascending.
    pub(super) props: Vec<Vec<u32>>,
    /// Per node: the property whose key is the node's prefix, or `OFF`.
    pub(super) term: Vec<u32>,
    /// Per node: the prefix length.
    pub(super) depth: Vec<u32>,
}

impl PropTrie {
    pub(super) fn new(o: &crate::ir::ObjSpec) -> PropTrie {
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

    pub(super) fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.children[node as usize]
            .iter()
            .find(|c| c.0 == b)
            .map(|c| c.1)
    }
}

impl Machine {
    pub(super) fn obj_can_close(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        self.next_req[spec as usize][next as usize] as usize == o.props.len() && emitted >= o.min
    }

    /// Listed property `j` may be emitted next (from position `next`, `emitted` so far).
    pub(super) fn prop_ok(&self, spec: u32, next: u32, emitted: u32, j: u32) -> bool {
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
    pub(super) fn extra_live(&self, spec: u32) -> bool {
        self.ir.objs[spec as usize]
            .extra
            .is_some_and(|n| self.live(n))
    }

    /// An unlisted key may start. Extra keys come after the listed ones and may repeat
    /// (names are not tracked), so they count towards `minProperties` once: the first
    /// is allowed when it reaches `min`, and its name differs from every listed one.
    /// Repeats only add keys, and `emitted` counts them all against `maxProperties`.
    pub(super) fn extra_ok(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        self.extra_live(spec)
            && self.next_req[spec as usize][next as usize] as usize == o.props.len()
            && emitted + 1 >= o.min
            && o.max.is_none_or(|m| emitted < m)
    }

    /// The cheapest unlisted member, `"key":value`.
    pub(super) fn extra_member_text(&self, spec: u32) -> Option<Vec<u8>> {
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

    pub(super) fn can_continue(&self, spec: u32, next: u32, emitted: u32) -> bool {
        let o = &self.ir.objs[spec as usize];
        (next..o.props.len() as u32).any(|j| self.prop_ok(spec, next, emitted, j))
            || self.extra_ok(spec, next, emitted)
    }

    pub(super) fn sat_emitted(&self, spec: u32, e: u32) -> u32 {
        let o = &self.ir.objs[spec as usize];
        if o.max.is_none() {
            e.min(o.min)
        } else {
            e
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn obj_step(
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
    pub(super) fn key_thread(
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

    /// The bytes an object frame takes (see [`Machine::obj_step`]).
    pub(super) fn obj_bytes(
        &self,
        spec: u32,
        next: u32,
        emitted: u32,
        ph: ObjPh,
        n: u32,
        set: &mut [u64; 4],
    ) {
        let o = &self.ir.objs[spec as usize];
        if matches!(
            ph,
            ObjPh::Open | ObjPh::Comma | ObjPh::Colon { .. } | ObjPh::Value { .. } | ObjPh::After
        ) {
            self.ws_bytes(set, n);
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
