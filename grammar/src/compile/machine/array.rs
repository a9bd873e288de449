//! Array frames: which item schema comes at each position (`prefixItems`, `items`),
//! whether one more item fits (`maxItems`, `minItems`, the literals `uniqueItems` has
//! used), how an array frame takes a byte ([`Machine::arr_step`]) and which bytes it
//! takes ([`Machine::arr_bytes`]).

use super::{add, is_ws, ArrPh, Frame, Machine, Thread};
use crate::ir::NodeId;

impl Machine {
    pub(super) fn sat_count(&self, spec: u32, c: u32) -> u32 {
        let a = &self.ir.arrs[spec as usize];
        if a.max.is_none() && a.items.is_some() {
            c.min((a.prefix.len() as u32).max(a.min))
        } else {
            c
        }
    }

    pub(super) fn arr_item(&self, spec: u32, i: u32) -> Option<NodeId> {
        let a = &self.ir.arrs[spec as usize];
        let n = match a.prefix.get(i as usize) {
            Some(&n) => n,
            None => a.items?,
        };
        self.live(n).then_some(n)
    }

    /// Item `count` may start (with `used` literals taken, under `ArrSpec::unique`) and
    /// the array can still reach `min` afterwards.
    pub(super) fn arr_can_add(&self, spec: u32, count: u32, used: u64) -> bool {
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

    /// An array frame takes `b`: whitespace, `]`, `,`, or the first byte of an item.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn arr_step(
        &self,
        mut t: Thread,
        spec: u32,
        count: u32,
        ph: ArrPh,
        ws: u32,
        used: u64,
        b: u8,
        out: &mut Vec<Thread>,
    ) {
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

    /// The bytes an array frame takes (see [`Machine::arr_step`]).
    pub(super) fn arr_bytes(
        &self,
        spec: u32,
        count: u32,
        ph: ArrPh,
        n: u32,
        used: u64,
        set: &mut [u64; 4],
    ) {
        let a = &self.ir.arrs[spec as usize];
        if ph != ArrPh::InValue {
            self.ws_bytes(set, n);
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
}
