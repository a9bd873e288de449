//! String frames: JSON string lexing (escapes, `\u00XX` controls, UTF-8 sequences),
//! `minLength`/`maxLength`, the pattern/format DFA and its length table
//! ([`crate::dfa::LenTable`]), names excluded by `propertyNames`; how a string frame
//! takes a byte ([`Machine::str_step`]) and which bytes it takes ([`Machine::str_bytes`]).

use super::{add, Frame, Machine, OFF};

/// Decoded byte of a short escape.
pub(super) fn short_escape(b: u8) -> Option<u8> {
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

pub(super) fn hexval(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Range of the next continuation byte for a code: 0 80-BF, 1 A0-BF, 2 80-9F, 3 90-BF, 4 80-8F.
pub(super) fn cont_ok(code: u8, b: u8) -> bool {
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
pub(super) fn lead(b: u8) -> Option<(u8, u8)> {
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
    pub(super) fn str_frame(&self, spec: u32) -> Frame {
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
    pub(super) fn str_char(
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

    pub(super) fn str_can_close(&self, spec: u32, len: u32, dfa: u32, excl: u32) -> bool {
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
    pub(super) fn str_step(&self, f: &Frame, b: u8) -> Option<Option<Frame>> {
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
    pub(super) fn ctrl_ok(&self, spec: u32, len: u32, dfa: u32, c: u8) -> bool {
        c < 0x20
            && !matches!(c, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D)
            && self.str_char(spec, len, dfa, &[c], true).is_some()
    }

    pub(super) fn ctrl_possible(&self, spec: u32, len: u32, dfa: u32) -> bool {
        (0..0x20u8).any(|c| self.ctrl_ok(spec, len, dfa, c))
    }

    /// The bytes a string frame takes.
    pub(super) fn str_bytes(&self, f: &Frame, set: &mut [u64; 4]) {
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
}
