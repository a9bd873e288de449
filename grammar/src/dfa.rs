//! Explicit DFAs over the decoded bytes of a JSON string, built from regex-automata's
//! dense DFA, intersected by product, pruned so that every non-dead state can reach a
//! match, plus per-state tables of the character counts that can still reach a match.

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::{start, syntax};
use regex_automata::Anchored;

use crate::config::Budget;

/// The error of a loop below that spent the compile's step budget (the caller turns it
/// into the step limit error at its pointer).
const OUT_OF_STEPS: &str = "out of compile steps";

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
    /// (regex-automata's determinization is bounded by its size limits, not the step budget;
    /// each state of the explicit DFA costs a step per byte class.)
    pub(crate) fn from_regex(pat: &str, max_states: usize, budget: &Budget) -> Result<Dfa, String> {
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
        // The determinization, after the fact: a step per transition it built.
        if budget.charge(re.memory_usage() as u64 / 4) {
            return Err(OUT_OF_STEPS.into());
        }
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
            if budget.charge(nclasses as u64) {
                return Err(OUT_OF_STEPS.into());
            }
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
    pub(crate) fn product(
        &self,
        o: &Dfa,
        max_states: usize,
        budget: &Budget,
    ) -> Result<Dfa, String> {
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
            if budget.charge(nclasses as u64) {
                return Err(OUT_OF_STEPS.into());
            }
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

    /// The complement over all byte strings: every state's acceptance flipped, and what
    /// fell into the dead state goes to a new accepting sink instead. It takes bytes that
    /// are not UTF-8 too, so it is meant for a [`product`](Dfa::product) with a DFA that
    /// reads strings (the pattern after a leading negative look-ahead).
    pub(crate) fn complement(&self) -> Dfa {
        let n = self.accept.len();
        let sink = n as u32;
        let mut trans = vec![0u32; (n + 1) * self.nclasses];
        for s in 1..n {
            for c in 0..self.nclasses {
                let t = self.trans[s * self.nclasses + c];
                trans[s * self.nclasses + c] = if t == 0 { sink } else { t };
            }
        }
        for c in 0..self.nclasses {
            trans[n * self.nclasses + c] = sink;
        }
        let mut accept: Vec<bool> = self.accept.iter().map(|a| !a).collect();
        accept[0] = false;
        accept.push(true);
        Dfa {
            classes: self.classes,
            nclasses: self.nclasses,
            trans,
            accept,
            start: if self.start == 0 { sink } else { self.start },
        }
    }

    /// The non-empty substrings of `doc` (its bytes, which are UTF-8): the suffix
    /// automaton (Blumer et al.), built online in O(n) states and transitions, as a
    /// table with one class per byte the document holds. Every state but the start
    /// accepts. Err when it would need more than `max_states` states.
    pub(crate) fn substrings(doc: &[u8], max_states: usize) -> Result<Dfa, String> {
        // Online construction over byte maps; states 0.. here, shifted by one below.
        struct St {
            len: u32,
            link: i32,
            next: Vec<(u8, u32)>,
        }
        let get = |st: &St, b: u8| st.next.iter().find(|e| e.0 == b).map(|e| e.1);
        let set = |st: &mut St, b: u8, t: u32| match st.next.iter_mut().find(|e| e.0 == b) {
            Some(e) => e.1 = t,
            None => st.next.push((b, t)),
        };
        if 2 * doc.len() + 1 > max_states {
            return Err(format!(
                "more than {max_states} DFA states (a document of {} bytes)",
                doc.len()
            ));
        }
        let mut sts = vec![St {
            len: 0,
            link: -1,
            next: Vec::new(),
        }];
        let mut last = 0u32;
        for &c in doc {
            let cur = sts.len() as u32;
            sts.push(St {
                len: sts[last as usize].len + 1,
                link: 0,
                next: Vec::new(),
            });
            let mut p = last as i32;
            while p >= 0 && get(&sts[p as usize], c).is_none() {
                set(&mut sts[p as usize], c, cur);
                p = sts[p as usize].link;
            }
            if p >= 0 {
                let q = get(&sts[p as usize], c).expect("found above");
                if sts[p as usize].len + 1 == sts[q as usize].len {
                    sts[cur as usize].link = q as i32;
                } else {
                    let clone = sts.len() as u32;
                    let st = St {
                        len: sts[p as usize].len + 1,
                        link: sts[q as usize].link,
                        next: sts[q as usize].next.clone(),
                    };
                    sts.push(st);
                    while p >= 0 && get(&sts[p as usize], c) == Some(q) {
                        set(&mut sts[p as usize], c, clone);
                        p = sts[p as usize].link;
                    }
                    sts[q as usize].link = clone as i32;
                    sts[cur as usize].link = clone as i32;
                }
            }
            last = cur;
        }
        let (classes, nclasses) = doc_classes(doc);
        let n = sts.len() + 1;
        let mut trans = vec![0u32; n * nclasses];
        for (i, st) in sts.iter().enumerate() {
            for &(b, t) in &st.next {
                trans[(i + 1) * nclasses + classes[b as usize] as usize] = t + 1;
            }
        }
        let mut accept = vec![true; n];
        accept[0] = false;
        accept[1] = false;
        Ok(Dfa {
            classes,
            nclasses,
            trans,
            accept,
            start: 1,
        }
        .prune())
    }

    /// The non-empty substrings `doc[i..j]` with `i` and `j` at word boundaries: `i` is 0
    /// or follows a character that is not alphanumeric (`char::is_alphanumeric`), `j` is
    /// the end or precedes a character that is not alphanumeric. By subset construction
    /// over the positions: a state is the set of end offsets of the occurrences of the
    /// text read so far that start at a boundary, and accepts when one of them ends at a
    /// boundary. Err beyond `max_states` states or when the step budget is spent.
    pub(crate) fn word_spans(doc: &str, max_states: usize, budget: &Budget) -> Result<Dfa, String> {
        let bytes = doc.as_bytes();
        let n = bytes.len();
        let mut starts = Vec::new();
        let mut ends = vec![false; n + 1];
        let mut prev_alnum = false;
        for (i, ch) in doc.char_indices() {
            if !prev_alnum {
                starts.push(i as u32);
            }
            let a = ch.is_alphanumeric();
            if i > 0 && !a {
                ends[i] = true;
            }
            prev_alnum = a;
        }
        ends[n] = true;
        let (classes, nclasses) = doc_classes(bytes);
        let mut ids: std::collections::HashMap<Vec<u32>, u32> = Default::default();
        let mut order: Vec<Vec<u32>> = vec![starts.clone()];
        ids.insert(starts, 1);
        let mut trans = vec![0u32; 2 * nclasses];
        let mut accept = vec![false, false];
        let mut i = 0;
        let mut by_class: Vec<Vec<u32>> = vec![Vec::new(); nclasses];
        while i < order.len() {
            if budget.charge((nclasses + order[i].len()) as u64) {
                return Err(OUT_OF_STEPS.into());
            }
            let me = i + 1;
            let cur = std::mem::take(&mut order[i]);
            if i > 0 {
                accept[me] = cur.iter().any(|&p| ends[p as usize]);
            }
            for &p in &cur {
                if (p as usize) < n {
                    by_class[classes[bytes[p as usize] as usize] as usize].push(p + 1);
                }
            }
            for (c, set) in by_class.iter_mut().enumerate() {
                if set.is_empty() {
                    continue;
                }
                let set = std::mem::take(set);
                let id = match ids.get(&set) {
                    Some(&id) => id,
                    None => {
                        let id = (order.len() + 1) as u32;
                        if id as usize > max_states {
                            return Err(format!(
                                "more than {max_states} DFA states (a document of {n} bytes)"
                            ));
                        }
                        ids.insert(set.clone(), id);
                        order.push(set);
                        trans.extend(std::iter::repeat_n(0, nclasses));
                        accept.push(false);
                        id
                    }
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

/// One class per byte value `doc` holds, plus class 0 for every other byte (always dead).
fn doc_classes(doc: &[u8]) -> ([u8; 256], usize) {
    let mut present = [false; 256];
    for &b in doc {
        present[b as usize] = true;
    }
    let mut classes = [0u8; 256];
    let mut n = 1usize;
    for b in 0..256 {
        if present[b] {
            classes[b] = n as u8;
            n += 1;
        }
    }
    // 256 distinct bytes cannot occur in UTF-8 text (0xC0, 0xC1, 0xF5..=0xFF never do).
    (classes, n)
}

/// For each DFA state, the set of character counts (counting UTF-8 lead bytes) of the
/// suffixes that reach a match, saturated at `cap` (bit `cap`: some count >= cap).
#[derive(Debug, Clone)]
pub struct LenTable {
    pub cap: u32,
    words: usize,
    bits: Vec<u64>,
    /// The smallest `t` such that, from every live state, every count in `t..=cap`
    /// reaches a match (`u32::MAX` when some state has no suffix of `cap` or more
    /// characters). Then `any_in(s, lo, hi)` holds for every live `s` whenever
    /// `min(hi, cap) >= max(t, lo)`.
    full_from: u32,
}

#[inline]
fn weight(b: u8) -> u32 {
    u32::from(!(0x80..=0xBF).contains(&b))
}

impl LenTable {
    /// Layer by layer: `L[k]`, the states with an accepted suffix of exactly `k` characters,
    /// is `F(L[k-1])` for one map `F` (a lead-byte edge back, then continuation-byte edges
    /// back), so the layers become periodic as soon as one repeats, and the table costs
    /// O(min(cap, first repeat) x edges) plus one bit per state and length. (Propagating
    /// whole length sets to a fixpoint instead went round a cycle once per length: a
    /// `format: uri` with `maxLength: 65536` took minutes.)
    pub(crate) fn build(
        d: &Dfa,
        cap: u32,
        max_bits: usize,
        budget: &Budget,
    ) -> Result<LenTable, String> {
        let n = d.len();
        let words = cap as usize / 64 + 1;
        if n.saturating_mul(words * 64) > max_bits {
            return Err(format!("{} DFA states x {} lengths", n, cap + 1));
        }
        // Distinct predecessors per state, by edge weight: a step per byte and state.
        if budget.charge(256 * n as u64) {
            return Err(OUT_OF_STEPS.into());
        }
        let mut pre: [Vec<Vec<u32>>; 2] = [vec![Vec::new(); n], vec![Vec::new(); n]];
        for s in 1..n {
            let mut e: Vec<(u32, u32)> = (0..=255u8)
                .map(|b| (d.next(s as u32, b), weight(b)))
                .filter(|e| e.0 != 0)
                .collect();
            e.sort_unstable();
            e.dedup();
            for (t, w) in e {
                pre[w as usize][t as usize].push(s as u32);
            }
        }
        let lw = n.div_ceil(64);
        let has = |l: &[u64], s: usize| (l[s / 64] >> (s % 64)) & 1 == 1;
        // Adds every state that reaches `l` over continuation bytes alone.
        let close0 = |mut l: Vec<u64>| -> Vec<u64> {
            let mut stack: Vec<usize> = (1..n).filter(|&s| has(&l, s)).collect();
            while let Some(t) = stack.pop() {
                for &p in &pre[0][t] {
                    let p = p as usize;
                    if !has(&l, p) {
                        l[p / 64] |= 1 << (p % 64);
                        stack.push(p);
                    }
                }
            }
            l
        };
        let step = |l: &[u64]| -> Vec<u64> {
            let mut out = vec![0u64; lw];
            for t in (1..n).filter(|&t| has(l, t)) {
                for &p in &pre[1][t] {
                    out[p as usize / 64] |= 1 << (p % 64);
                }
            }
            close0(out)
        };
        // Layers 0..=upto of the sequence from `first`, as (layers, start of the cycle):
        // layer k >= len is layers[c + (k - c) % (len - c)].
        let layers = |first: Vec<u64>, upto: usize| -> Result<(Vec<Vec<u64>>, usize), String> {
            let mut seen: std::collections::HashMap<Vec<u64>, usize> = Default::default();
            let mut seq = vec![first];
            loop {
                let last = seq.last().expect("one layer at least");
                if let Some(&j) = seen.get(last) {
                    seq.pop();
                    return Ok((seq, j));
                }
                if seq.len() > upto {
                    return Ok((seq, usize::MAX));
                }
                if budget.charge(n as u64) {
                    return Err(OUT_OF_STEPS.into());
                }
                seen.insert(last.clone(), seq.len() - 1);
                let next = step(last);
                seq.push(next);
            }
        };
        let at = |seq: &[Vec<u64>], c: usize, k: usize| -> usize {
            if k < seq.len() {
                k
            } else {
                c + (k - c) % (seq.len() - c)
            }
        };
        let mut accept = vec![0u64; lw];
        for s in (1..n).filter(|&s| d.accept[s]) {
            accept[s / 64] |= 1 << (s % 64);
        }
        let mut bits = vec![0u64; n * words];
        let (exact, c) = layers(close0(accept.clone()), cap as usize)?;
        // A step per state and 8 lengths (a bit each).
        if budget.charge(n as u64 * u64::from(cap) / 8) {
            return Err(OUT_OF_STEPS.into());
        }
        for k in 0..cap as usize {
            let l = &exact[at(&exact, c, k)];
            for s in (1..n).filter(|&s| has(l, s)) {
                bits[s * words + k / 64] |= 1 << (k % 64);
            }
        }
        // Bit `cap`: `cap` characters lead to a state that still reaches a match.
        let mut live = accept;
        let mut stack: Vec<usize> = (1..n).filter(|&s| has(&live, s)).collect();
        while let Some(t) = stack.pop() {
            for &p in pre[0][t].iter().chain(&pre[1][t]) {
                let p = p as usize;
                if !has(&live, p) {
                    live[p / 64] |= 1 << (p % 64);
                    stack.push(p);
                }
            }
        }
        let (far, c) = layers(live, cap as usize)?;
        let l = &far[at(&far, c, cap as usize)];
        let k = cap as usize;
        for s in (1..n).filter(|&s| has(l, s)) {
            bits[s * words + k / 64] |= 1 << (k % 64);
        }
        // Per live state: one past its largest missing count (all of `t..=cap` present).
        let mut full_from = 0u32;
        for s in 1..n {
            let row = &bits[s * words..(s + 1) * words];
            // The highest zero among bits 0..=cap, a word at a time from the top.
            let mut missing = None;
            for w in (0..words).rev() {
                let valid = if w == cap as usize / 64 {
                    u64::MAX >> (63 - cap % 64)
                } else {
                    u64::MAX
                };
                let zeros = !row[w] & valid;
                if zeros != 0 {
                    missing = Some(w as u32 * 64 + 63 - zeros.leading_zeros());
                    break;
                }
            }
            let t = match missing {
                None => 0,
                Some(r) if r == cap => u32::MAX,
                Some(r) => r + 1,
            };
            full_from = full_from.max(t);
        }
        Ok(LenTable {
            cap,
            words,
            bits,
            full_from,
        })
    }

    /// See the field: every live state has a suffix of every count in
    /// `full_from()..=cap` (`u32::MAX`: not so).
    pub fn full_from(&self) -> u32 {
        self.full_from
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts reachable from each state, by a forward search over (state, saturated count).
    fn reference(d: &Dfa, cap: u32) -> Vec<Vec<bool>> {
        let n = d.len();
        let mut out = vec![vec![false; cap as usize + 1]; n];
        for (s0, row) in out.iter_mut().enumerate().skip(1) {
            let mut seen = std::collections::HashSet::new();
            let mut stack = vec![(s0 as u32, 0u32)];
            seen.insert((s0 as u32, 0u32));
            while let Some((s, c)) = stack.pop() {
                if d.accept[s as usize] {
                    row[c as usize] = true;
                }
                for b in 0..=255u8 {
                    let t = d.next(s, b);
                    if t == 0 {
                        continue;
                    }
                    let nc = (c + weight(b)).min(cap);
                    if seen.insert((t, nc)) {
                        stack.push((t, nc));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn length_tables_match_a_forward_search() {
        let dl = Budget::new(u64::MAX);
        let pats = [
            r"^(?:aaa|aaaaa)*$",
            r"^[a-z][a-z0-9_]*$",
            r"^(?:é|ab|x{3})+z?$",
            r"^(?:[0-9]{4}-[0-9]{2})?$",
            r"^(?:(?:ab)*c|d(?:efg)*)$",
            r"^[^\x00-\x1f]{2,5}(?:€€)*$",
        ];
        for p in pats {
            let d = Dfa::from_regex(p, 10_000, &dl).unwrap();
            for cap in [0u32, 1, 2, 7, 13, 64, 65, 130] {
                let t = LenTable::build(&d, cap, 1 << 30, &dl).unwrap();
                let r = reference(&d, cap);
                let full_from = r
                    .iter()
                    .skip(1)
                    .map(|row| match row.iter().rposition(|&x| !x) {
                        None => 0,
                        Some(k) if k == cap as usize => u32::MAX,
                        Some(k) => k as u32 + 1,
                    })
                    .max()
                    .unwrap_or(0);
                assert_eq!(t.full_from(), full_from, "{p} cap {cap}");
                for (s, row) in r.iter().enumerate().skip(1) {
                    for k in 0..=cap {
                        assert_eq!(
                            t.any_in(s as u32, k, k),
                            row[k as usize],
                            "{p} cap {cap} state {s} length {k}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_length_bound_is_cheap() {
        // `format: uri` with `maxLength: 65536` (JsonSchemaStore sourcery_yaml_schema.json)
        // once propagated length sets around the DFA's cycles one length at a time.
        let dl = Budget::new(u64::MAX);
        let re = crate::schema::pattern::format_regex("uri").unwrap();
        let d = Dfa::from_regex(&re, 20_000, &dl).unwrap();
        let before = dl.used();
        let t = LenTable::build(&d, 65_537, 64 << 20, &dl).unwrap();
        assert!(t.any_in(d.start, 10, 65_536));
        // A step per state for each layer, for each byte and for each 8 lengths: the
        // layers repeat after a few dozen, where the old propagation went once round per
        // length (65 536 layers).
        let per_state = (dl.used() - before) / d.len() as u64;
        let layers = per_state - 256 - 65_537 / 8;
        assert!(layers <= 64, "{layers} layers for {} states", d.len());
    }
}
