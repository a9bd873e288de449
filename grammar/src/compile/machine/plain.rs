//! The plain-character hint and the plain key for string bodies
//! ([`crate::ByteAutomaton::plain_chars_allowed`], [`crate::ByteAutomaton::plain_key`]):
//! per pattern DFA, one representative byte per class and UTF-8 role ([`PlainDfa`]),
//! the memoised depth to which plain characters are always taken, and the searches
//! near the length bounds.

use std::sync::atomic::{AtomicU8, Ordering};

use super::string::{cont_ok, lead};
use super::{Frame, Machine, State, Thread};

/// Per DFA, for the plain-character hint: one representative byte per byte class of
/// each UTF-8 role, so a search looks up each class once, and the memoised depth.
pub(super) struct PlainDfa {
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
    pub(super) fn new(d: &crate::dfa::Dfa) -> PlainDfa {
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
pub(super) const PLAIN_CAP: u32 = 32;
pub(super) const DEPTH_UNKNOWN: u8 = u8::MAX;
/// DFA lookups one plain-depth search may spend before it settles for the depth
/// verified so far.
pub(super) const DEPTH_WORK: usize = 1 << 14;

/// `(spec, len, dfa)` of a thread whose top is a string body at a character boundary
/// (no escape or UTF-8 sequence pending).
pub(super) fn body_at_boundary(t: &Thread) -> Option<(u32, u32, u32)> {
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

impl Machine {
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
    pub(super) fn lens_free(&self, spec: u32, nlen: u32) -> bool {
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
    pub(super) fn key_room(&self, spec: u32, len: u32) -> u32 {
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
    pub(super) fn dfa_plain_depth(&self, di: u32, d: u32) -> u32 {
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
    pub(super) fn plain_search(&self, spec: u32, len: u32, d: u32, cap: u32) -> u32 {
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
    pub(super) fn plain_search_dfa(
        &self,
        di: u32,
        d: u32,
        lens: Option<(u32, u32)>,
        cap: u32,
    ) -> u32 {
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
}
