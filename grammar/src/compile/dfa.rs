//! Explicit DFAs over the decoded bytes of a JSON string, built from regex-automata's
//! dense DFA, intersected by product, pruned so that every non-dead state can reach a
//! match, plus per-state tables of the character counts that can still reach a match.

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::{start, syntax};
use regex_automata::Anchored;

/// State 0 is dead. `accept[s]`: the input read so far is a full match.
#[derive(Debug, Clone)]
pub struct Dfa {
    pub classes: [u8; 256],
    pub nclasses: usize,
    pub trans: Vec<u32>,
    pub accept: Vec<bool>,
    pub start: u32,
}

impl Dfa {
    pub fn len(&self) -> usize {
        self.accept.len()
    }
    pub fn is_empty(&self) -> bool {
        self.start == 0
    }
    #[inline]
    pub fn next(&self, s: u32, b: u8) -> u32 {
        self.trans[s as usize * self.nclasses + self.classes[b as usize] as usize]
    }

    /// `pat` must already be anchored at both ends. Errors carry regex-automata's message.
    pub fn from_regex(pat: &str, max_states: usize) -> Result<Dfa, String> {
        let re = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .minimize(false)
                    .accelerate(false)
                    .dfa_size_limit(Some(16 << 20))
                    .determinize_size_limit(Some(16 << 20)),
            )
            .syntax(syntax::Config::new().utf8(true).unicode(true))
            .build(pat)
            .map_err(|e| e.to_string())?;
        let s0 = re
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|e| e.to_string())?;
        let bc = re.byte_classes();
        let mut classes = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        for b in 0..=255u8 {
            let c = bc.get(b);
            classes[b as usize] = c;
            if c as usize >= reps.len() {
                reps.resize(c as usize + 1, b);
            }
        }
        // The first byte seen in each class is its representative.
        let mut seen = vec![false; reps.len()];
        for b in 0..=255u8 {
            let c = classes[b as usize] as usize;
            if !seen[c] {
                seen[c] = true;
                reps[c] = b;
            }
        }
        let nclasses = reps.len();
        let mut ids = std::collections::HashMap::new();
        let mut order = vec![s0];
        let mut trans = vec![0u32; nclasses]; // dead row
        let mut accept = vec![false];
        ids.insert(s0, 1u32);
        trans.extend(std::iter::repeat(0).take(nclasses));
        accept.push(false);
        let mut i = 0;
        while i < order.len() {
            let s = order[i];
            let me = (i + 1) as usize;
            if re.is_quit_state(s) {
                return Err("the pattern needs a look-around the DFA cannot do".into());
            }
            accept[me] = re.is_match_state(re.next_eoi_state(s));
            for (c, &b) in reps.iter().enumerate() {
                let t = re.next_state(s, b);
                if re.is_quit_state(t) {
                    return Err("the pattern needs a look-around the DFA cannot do".into());
                }
                let id = if re.is_dead_state(t) {
                    0
                } else if let Some(&id) = ids.get(&t) {
                    id
                } else {
                    let id = (order.len() + 1) as u32;
                    if id as usize > max_states {
                        return Err(format!("more than {max_states} DFA states"));
                    }
                    ids.insert(t, id);
                    order.push(t);
                    trans.extend(std::iter::repeat(0).take(nclasses));
                    accept.push(false);
                    id
                };
                trans[me * nclasses + c] = id;
            }
            i += 1;
        }
        Ok(Dfa {
            classes,
            nclasses,
            trans,
            accept,
            start: 1,
        }
        .prune())
    }

    /// Intersection.
    pub fn product(&self, o: &Dfa, max_states: usize) -> Result<Dfa, String> {
        let mut pair_class = std::collections::HashMap::new();
        let mut classes = [0u8; 256];
        let mut reps = Vec::new();
        for b in 0..=255u8 {
            let k = (self.classes[b as usize], o.classes[b as usize]);
            let n = pair_class.len();
            let c = *pair_class.entry(k).or_insert_with(|| {
                reps.push(b);
                n
            });
            classes[b as usize] = c as u8;
        }
        let nclasses = reps.len();
        let mut ids = std::collections::HashMap::new();
        let mut order = vec![(self.start, o.start)];
        ids.insert((self.start, o.start), 1u32);
        let mut trans = vec![0u32; 2 * nclasses];
        let mut accept = vec![false, false];
        let mut i = 0;
        while i < order.len() {
            let (a, b) = order[i];
            let me = i + 1;
            accept[me] = self.accept[a as usize] && o.accept[b as usize];
            for (c, &r) in reps.iter().enumerate() {
                let t = (self.next(a, r), o.next(b, r));
                let id = if t.0 == 0 || t.1 == 0 {
                    0
                } else if let Some(&id) = ids.get(&t) {
                    id
                } else {
                    let id = (order.len() + 1) as u32;
                    if id as usize > max_states {
                        return Err(format!("more than {max_states} DFA states"));
                    }
                    ids.insert(t, id);
                    order.push(t);
                    trans.extend(std::iter::repeat(0).take(nclasses));
                    accept.push(false);
                    id
                };
                trans[me * nclasses + c] = id;
            }
            i += 1;
        }
        if self.start == 0 || o.start == 0 {
            return Ok(Dfa {
                classes,
                nclasses,
                trans: vec![0; nclasses],
                accept: vec![false],
                start: 0,
            });
        }
        Ok(Dfa {
            classes,
            nclasses,
            trans,
            accept,
            start: 1,
        }
        .prune())
    }

    /// Sends every state that cannot reach a match to the dead state 0 and renumbers.
    fn prune(self) -> Dfa {
        let n = self.accept.len();
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 1..n {
            for c in 0..self.nclasses {
                let t = self.trans[s * self.nclasses + c] as usize;
                if t != 0 {
                    preds[t].push(s as u32);
                }
            }
        }
        let mut live = vec![false; n];
        let mut stack: Vec<usize> = (1..n).filter(|&s| self.accept[s]).collect();
        for &s in &stack {
            live[s] = true;
        }
        while let Some(t) = stack.pop() {
            for &p in &preds[t] {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p as usize);
                }
            }
        }
        let mut map = vec![0u32; n];
        let mut k = 1u32;
        for s in 1..n {
            if live[s] {
                map[s] = k;
                k += 1;
            }
        }
        let mut trans = vec![0u32; k as usize * self.nclasses];
        let mut accept = vec![false; k as usize];
        for s in 1..n {
            if live[s] {
                let m = map[s] as usize;
                accept[m] = self.accept[s];
                for c in 0..self.nclasses {
                    trans[m * self.nclasses + c] = map[self.trans[s * self.nclasses + c] as usize];
                }
            }
        }
        let start = map[self.start as usize];
        Dfa {
            classes: self.classes,
            nclasses: self.nclasses,
            trans,
            accept,
            start,
        }
    }
}

/// For each DFA state, the set of character counts (counting UTF-8 lead bytes) of the
/// suffixes that reach a match, saturated at `cap` (bit `cap`: some count >= cap).
#[derive(Debug, Clone)]
pub struct LenTable {
    pub cap: u32,
    words: usize,
    bits: Vec<u64>,
}

#[inline]
fn weight(b: u8) -> u32 {
    u32::from(!(0x80..=0xBF).contains(&b))
}

impl LenTable {
    pub fn build(d: &Dfa, cap: u32, max_bits: usize) -> Result<LenTable, String> {
        let n = d.len();
        let words = cap as usize / 64 + 1;
        if n.saturating_mul(words * 64) > max_bits {
            return Err(format!("{} DFA states x {} lengths", n, cap + 1));
        }
        let mut bits = vec![0u64; n * words];
        // Distinct (target, weight) edges per state.
        let mut edges: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 1..n {
            let mut e: Vec<(u32, u32)> = (0..=255u8)
                .map(|b| (d.next(s as u32, b), weight(b)))
                .filter(|e| e.0 != 0)
                .collect();
            e.sort_unstable();
            e.dedup();
            for &(t, _) in &e {
                preds[t as usize].push(s as u32);
            }
            edges[s] = e;
            if d.accept[s] {
                bits[s * words] |= 1;
            }
        }
        let mut work: Vec<u32> = (1..n as u32).collect();
        let mut queued = vec![true; n];
        let mut tmp = vec![0u64; words];
        while let Some(s) = work.pop() {
            queued[s as usize] = false;
            let s = s as usize;
            tmp.copy_from_slice(&bits[s * words..(s + 1) * words]);
            for &(t, w) in &edges[s] {
                let t = t as usize;
                for i in 0..words {
                    let src = bits[t * words + i];
                    let v = if w == 0 {
                        src
                    } else {
                        (src << 1)
                            | if i > 0 {
                                bits[t * words + i - 1] >> 63
                            } else {
                                0
                            }
                    };
                    tmp[i] |= v;
                }
                if w == 1 && (bits[t * words + (cap as usize) / 64] >> (cap % 64)) & 1 == 1 {
                    tmp[cap as usize / 64] |= 1 << (cap % 64);
                }
            }
            // Saturate: anything beyond cap folds into cap.
            let ci = cap as usize / 64;
            let cb = cap % 64;
            let hi_mask = if cb == 63 { 0 } else { !0u64 << (cb + 1) };
            if tmp[ci] & hi_mask != 0 {
                tmp[ci] = (tmp[ci] & !hi_mask) | (1 << cb);
            }
            let mut changed = false;
            for i in 0..words {
                if tmp[i] != bits[s * words + i] {
                    changed = true;
                    bits[s * words + i] = tmp[i];
                }
            }
            if changed {
                for &p in &preds[s] {
                    if !queued[p as usize] {
                        queued[p as usize] = true;
                        work.push(p);
                    }
                }
            }
        }
        Ok(LenTable { cap, words, bits })
    }

    /// Some suffix from `s` with a count in `lo..=hi` (hi may exceed cap: then `cap` counts).
    pub fn any_in(&self, s: u32, lo: u32, hi: u32) -> bool {
        if s == 0 || lo > hi {
            return false;
        }
        let hi = hi.min(self.cap);
        if lo > hi {
            return false;
        }
        let base = s as usize * self.words;
        (lo..=hi).any(|r| (self.bits[base + r as usize / 64] >> (r % 64)) & 1 == 1)
    }
}
