//! Exact numbers: decide, for a prefix of a JSON number, whether some completion lands
//! in `[lo, hi]` on the multiple-of grid, by integer arithmetic on values scaled by 10^15.
//!
//! Grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, no exponent, at most `MAX_DIGITS` digits
//! (integer digits other than a lone `0`, plus fraction digits), no negative zero.
//!
//! Far numbers: a range that lies wholly beyond what 15 digits reach (`minimum: 1e400`)
//! is compiled with a fixed exponent, [`NumSpec::exp`]: the text is a mantissa of the
//! grammar above followed by the literal `e<exp>`, and the mantissa's bounds and multiple
//! are those of the range divided by 10^exp ([`far_spec`]). The bounds are read exactly
//! ([`scaled_big`]), up to magnitudes of 10^[`FAR_DIGITS`].

use num_bigint::BigInt;
use num_integer::Integer;

use crate::ir::{NumSpec, BIG, MAX_DIGITS, SCALE};

/// A parsed prefix.
struct Prefix {
    neg: bool,
    /// Integer digits; empty right after `-`.
    int: Vec<u8>,
    /// `None`: still in the integer part; `Some(frac digits)` after the dot.
    frac: Option<Vec<u8>>,
}

fn parse(buf: &[u8]) -> Prefix {
    let mut i = 0;
    let neg = buf.first() == Some(&b'-');
    if neg {
        i = 1;
    }
    let mut int = Vec::new();
    while i < buf.len() && buf[i].is_ascii_digit() {
        int.push(buf[i]);
        i += 1;
    }
    let frac = if i < buf.len() && buf[i] == b'.' {
        Some(buf[i + 1..].to_vec())
    } else {
        None
    };
    Prefix { neg, int, frac }
}

fn pow10(e: usize) -> i128 {
    10i128.pow(e as u32)
}

fn digits_val(d: &[u8]) -> i128 {
    d.iter().fold(0i128, |a, &c| a * 10 + (c - b'0') as i128)
}

fn int_count(int: &[u8]) -> usize {
    if int == b"0" {
        0
    } else {
        int.len()
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i128, b: i128) -> Option<i128> {
    (a / gcd(a, b)).checked_mul(b)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

/// Smallest X in [a, b] with X % l == 0.
fn first_multiple(a: i128, b: i128, l: i128) -> Option<i128> {
    if a > b {
        return None;
    }
    let x = ceil_div(a, l).checked_mul(l)?;
    (x <= b).then_some(x)
}

/// Magnitude bounds for the sign of the prefix.
fn mag_bounds(spec: &NumSpec, neg: bool) -> (i128, i128) {
    if neg {
        ((-spec.hi).max(1), -spec.lo)
    } else {
        (spec.lo.max(0), spec.hi)
    }
}

/// The magnitude sets reachable from a prefix: `(from, to, step)` triples meaning every
/// multiple of `step` in `[from, to]` has a spelling that extends the prefix, plus the
/// number of bytes that spelling adds (for shortest completions).
fn shapes(spec: &NumSpec, p: &Prefix, mut f: impl FnMut(i128, i128, i128, usize) -> bool) -> bool {
    match &p.frac {
        None => {
            if p.int.is_empty() {
                return false;
            }
            if p.int == b"0" {
                if f(0, 0, SCALE, 0) {
                    return true;
                }
                if !spec.int_only {
                    for fd in 1..=MAX_DIGITS {
                        let step = pow10(MAX_DIGITS - fd);
                        if f(0, SCALE - step, step, 1 + fd) {
                            return true;
                        }
                    }
                }
                return false;
            }
            let k = p.int.len();
            if k > MAX_DIGITS {
                return false;
            }
            let d = digits_val(&p.int);
            for j in 0..=(MAX_DIGITS - k) {
                let lo = d * pow10(j) * SCALE;
                let hi = (d + 1) * pow10(j) * SCALE;
                if f(lo, hi - SCALE, SCALE, j) {
                    return true;
                }
                if !spec.int_only {
                    for fd in 1..=(MAX_DIGITS - k - j) {
                        let step = pow10(MAX_DIGITS - fd);
                        if f(lo, hi - step, step, j + 1 + fd) {
                            return true;
                        }
                    }
                }
            }
            false
        }
        Some(fr) => {
            let k = int_count(&p.int);
            let t = fr.len();
            if k + t > MAX_DIGITS {
                return false;
            }
            let v = digits_val(&p.int) * SCALE + digits_val(fr) * pow10(MAX_DIGITS - t);
            let start = if t == 0 { 1 } else { t };
            for fd in start..=(MAX_DIGITS - k) {
                let step = pow10(MAX_DIGITS - fd);
                let width = pow10(MAX_DIGITS - t);
                if f(v, v + width - step, step, fd - t) {
                    return true;
                }
            }
            false
        }
    }
}

/// Splits a prefix of a far number (`spec.exp > 0`) into its mantissa and the part of
/// the `e<exp>` suffix written so far (`None` before the `e`).
fn split_far(buf: &[u8]) -> (&[u8], Option<&[u8]>) {
    match buf.iter().position(|&b| b == b'e') {
        Some(i) => (&buf[..i], Some(&buf[i..])),
        None => (buf, None),
    }
}

fn far_suffix(spec: &NumSpec) -> Vec<u8> {
    format!("e{}", spec.exp).into_bytes()
}

/// Some completion of `buf` (possibly empty) is an accepted number.
pub fn feasible(spec: &NumSpec, buf: &[u8]) -> bool {
    if spec.exp == 0 {
        return feasible_mant(spec, buf);
    }
    match split_far(buf) {
        (m, None) => feasible_mant(spec, m),
        (m, Some(e)) => accepting_mant(spec, m) && far_suffix(spec).starts_with(e),
    }
}

/// `buf` is a complete accepted number.
pub fn accepting(spec: &NumSpec, buf: &[u8]) -> bool {
    if spec.exp == 0 {
        return accepting_mant(spec, buf);
    }
    match split_far(buf) {
        (_, None) => false,
        (m, Some(e)) => accepting_mant(spec, m) && e == far_suffix(spec).as_slice(),
    }
}

/// `buf` followed by `c` is still a prefix of an accepted number (`buf` may be empty).
pub fn allows(spec: &NumSpec, buf: &[u8], c: u8) -> bool {
    if spec.exp == 0 {
        return allows_mant(spec, buf, c);
    }
    match split_far(buf) {
        (m, None) if c == b'e' => accepting_mant(spec, m),
        (m, None) => allows_mant(spec, m, c),
        (m, Some(e)) => accepting_mant(spec, m) && far_suffix(spec).get(e.len()) == Some(&c),
    }
}

/// Shortest bytes that complete `buf` into an accepted number (`None`: none exist).
pub fn shortest(spec: &NumSpec, buf: &[u8]) -> Option<Vec<u8>> {
    if spec.exp == 0 {
        return shortest_mant(spec, buf);
    }
    let suffix = far_suffix(spec);
    match split_far(buf) {
        (m, None) => {
            let mut out = shortest_mant(spec, m)?;
            out.extend_from_slice(&suffix);
            Some(out)
        }
        (m, Some(e)) => {
            (accepting_mant(spec, m) && suffix.starts_with(e)).then(|| suffix[e.len()..].to_vec())
        }
    }
}

/// [`feasible`] for the mantissa (all of a number without [`NumSpec::exp`]).
fn feasible_mant(spec: &NumSpec, buf: &[u8]) -> bool {
    if buf == b"-" {
        return (b'0'..=b'9').any(|d| feasible_mant(spec, &[b'-', d]));
    }
    let p = parse(buf);
    let (lo, hi) = mag_bounds(spec, p.neg);
    shapes(spec, &p, |a, b, step, _| match lcm(step, spec.q) {
        Some(l) => first_multiple(a.max(lo), b.min(hi), l).is_some(),
        None => false,
    })
}

/// [`accepting`] for the mantissa.
fn accepting_mant(spec: &NumSpec, buf: &[u8]) -> bool {
    let p = parse(buf);
    if p.int.is_empty() {
        return false;
    }
    let x = match &p.frac {
        None => digits_val(&p.int) * SCALE,
        Some(fr) => {
            if fr.is_empty() || int_count(&p.int) + fr.len() > MAX_DIGITS {
                return false;
            }
            digits_val(&p.int) * SCALE + digits_val(fr) * pow10(MAX_DIGITS - fr.len())
        }
    };
    let (lo, hi) = mag_bounds(spec, p.neg);
    x >= lo && x <= hi && x % spec.q == 0
}

/// [`allows`] for the mantissa.
fn allows_mant(spec: &NumSpec, buf: &[u8], c: u8) -> bool {
    let mut nb = buf.to_vec();
    nb.push(c);
    if !syntax_ok(spec, &nb) {
        return false;
    }
    feasible_mant(spec, &nb)
}

fn syntax_ok(spec: &NumSpec, b: &[u8]) -> bool {
    let p = parse(b);
    // Re-serialise the parse and compare, to reject anything out of the grammar.
    let mut re = Vec::new();
    if p.neg {
        re.push(b'-');
    }
    re.extend_from_slice(&p.int);
    if let Some(f) = &p.frac {
        if spec.int_only || p.int.is_empty() || !f.iter().all(u8::is_ascii_digit) {
            return false;
        }
        re.push(b'.');
        re.extend_from_slice(f);
    }
    if re != b {
        return false;
    }
    if p.int.len() > 1 && p.int[0] == b'0' {
        return false;
    }
    let k = int_count(&p.int);
    k + p.frac.as_ref().map_or(0, |f| f.len()) <= MAX_DIGITS
}

fn spell(x: i128, int_digits: &[u8], frac_digits: usize) -> Vec<u8> {
    let _ = int_digits;
    let ip = x / SCALE;
    let fp = x % SCALE;
    let mut s = ip.to_string().into_bytes();
    if frac_digits > 0 {
        s.push(b'.');
        let fs = format!("{:015}", fp);
        s.extend_from_slice(&fs.as_bytes()[..frac_digits]);
    }
    s
}

/// [`shortest`] for the mantissa.
fn shortest_mant(spec: &NumSpec, buf: &[u8]) -> Option<Vec<u8>> {
    if buf.is_empty() || buf == b"-" {
        let mut best: Option<Vec<u8>> = None;
        let firsts: &[u8] = if buf.is_empty() {
            b"-0123456789"
        } else {
            b"0123456789"
        };
        for &c in firsts {
            if allows_mant(spec, buf, c) {
                let mut nb = buf.to_vec();
                nb.push(c);
                if let Some(rest) = shortest_mant(spec, &nb) {
                    let mut cand = vec![c];
                    cand.extend(rest);
                    if best.as_ref().is_none_or(|b| cand.len() < b.len()) {
                        best = Some(cand);
                    }
                }
            }
        }
        return best;
    }
    let p = parse(buf);
    let (lo, hi) = mag_bounds(spec, p.neg);
    let mut best: Option<(usize, i128, usize)> = None; // (added, x, frac digits)
    let in_frac = p.frac.is_some();
    let cur_t = p.frac.as_ref().map_or(0, |f| f.len());
    shapes(spec, &p, |a, b, step, added| {
        if let Some(l) = lcm(step, spec.q) {
            if let Some(x) = first_multiple(a.max(lo), b.min(hi), l) {
                if best.is_none_or(|(ba, _, _)| added < ba) {
                    // Fraction digits of this shape.
                    let fd = if step == SCALE && !in_frac {
                        0
                    } else {
                        MAX_DIGITS - (step.trailing_zeros_10())
                    };
                    best = Some((added, x, fd.max(cur_t)));
                }
            }
        }
        false
    });
    let (_, x, fd) = best?;
    let full = spell(x, &p.int, fd);
    let mag_buf: &[u8] = if p.neg { &buf[1..] } else { buf };
    if full.len() < mag_buf.len() || &full[..mag_buf.len()] != mag_buf {
        // The trailing-zero spelling differs from the prefix (e.g. prefix "1." with x = 1):
        // extend the prefix by zeros to the shape's length instead.
        let mut out = Vec::new();
        let mut cur = buf.to_vec();
        while !accepting_mant(spec, &cur) {
            let c = if cur.ends_with(b".") || in_frac {
                b'0'
            } else {
                b'0'
            };
            cur.push(c);
            out.push(c);
            if out.len() > MAX_DIGITS + 2 {
                return None;
            }
        }
        return Some(out);
    }
    Some(full[mag_buf.len()..].to_vec())
}

trait Tz10 {
    fn trailing_zeros_10(self) -> usize;
}
impl Tz10 for i128 {
    fn trailing_zeros_10(self) -> usize {
        let mut x = self;
        let mut n = 0;
        while x != 0 && x % 10 == 0 {
            x /= 10;
            n += 1;
        }
        n
    }
}

/// Canonical form of a prefix for state interning: when no bound or multiple constrains the
/// value, only the shape matters.
pub fn canonical(spec: &NumSpec, buf: &mut [u8]) {
    if !spec.unconstrained() || spec.exp != 0 {
        return;
    }
    let mut in_int = true;
    let mut first_int = true;
    for c in buf.iter_mut() {
        match *c {
            b'-' => {}
            b'.' => in_int = false,
            b'0'..=b'9' => {
                if in_int && first_int && *c == b'0' {
                    // lone zero stays
                } else {
                    *c = b'1';
                }
                if in_int {
                    first_int = false;
                }
            }
            _ => {}
        }
    }
}

/// A number literal's parts: its sign, the digits before and after the point, and the
/// exponent (`None` when it has no digits or an unreadable exponent).
fn split_literal(text: &str) -> Option<(bool, &str, &str, i64)> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (mant, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i64>().ok()?),
        None => (t, 0),
    };
    let (ip, fp) = match mant.find('.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, ""),
    };
    if ip.is_empty() && fp.is_empty() {
        return None;
    }
    Some((neg, ip, fp, exp))
}

/// Parses a JSON number literal into (floor(v * 10^15), exact) with magnitude clamped to BIG.
pub fn scaled(text: &str) -> Option<(i128, bool)> {
    use crate::ir::BIG;
    let (neg, ip, fp, exp) = split_literal(text)?;
    let mut digits: Vec<u8> = ip.bytes().chain(fp.bytes()).collect();
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // value = digits * 10^(exp - fp.len()); scaled: * 10^15.
    let mut e = exp - fp.len() as i64 + 15;
    while digits.len() > 1 && digits[0] == b'0' {
        digits.remove(0);
    }
    if digits.iter().all(|&d| d == b'0') {
        return Some((0, true));
    }
    // Magnitude in decimal digits of the scaled value.
    let mag_digits = digits.len() as i64 + e;
    if mag_digits > 32 {
        return Some((if neg { -BIG } else { BIG }, false));
    }
    let mut exact = true;
    if e < 0 {
        let cut = (-e) as usize;
        if cut >= digits.len() {
            // |v| < 1 unit.
            let v = if neg { -1 } else { 0 };
            return Some((v, false));
        }
        let (keep, drop) = digits.split_at(digits.len() - cut);
        if drop.iter().any(|&d| d != b'0') {
            exact = false;
        }
        digits = keep.to_vec();
        e = 0;
    }
    let mut v: i128 = 0;
    for &d in &digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as i128)?;
    }
    for _ in 0..e {
        v = v.checked_mul(10)?;
    }
    let v = v.min(BIG);
    if neg {
        // floor of a negative non-exact value is one below the truncation.
        Some((if exact { -v } else { -v - 1 }, exact))
    } else {
        Some((v, exact))
    }
}

/// Bounds are read exactly up to this many decimal digits of magnitude; beyond it they
/// are infinite ([`far_inf`]): a maximum of 1e20000 is no bound, a minimum of 1e20000
/// leaves nothing the grammar can produce.
pub const FAR_DIGITS: i64 = 10_000;

/// Infinity for exact bounds, in units of 10^-15: 10^(FAR_DIGITS + 15).
pub fn far_inf() -> BigInt {
    BigInt::from(10).pow((FAR_DIGITS + 15) as u32)
}

/// [`scaled`] without the clamp: `(floor(v * 10^15), exact)`, as a big integer, for the
/// bounds that `scaled` clamps (magnitude `BIG` and beyond). Magnitudes of 10^FAR_DIGITS
/// and more give `±far_inf()`, not exact.
pub fn scaled_big(text: &str) -> Option<(BigInt, bool)> {
    let (neg, ip, fp, exp) = split_literal(text)?;
    let digits: String = ip.chars().chain(fp.chars()).collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some((BigInt::from(0), true));
    }
    // value = digits * 10^(exp - fp.len()); scaled: * 10^15.
    let e = exp.checked_sub(fp.len() as i64)?.checked_add(15)?;
    if digits.len() as i64 + e > FAR_DIGITS + 16 {
        let inf = far_inf();
        return Some((if neg { -inf } else { inf }, false));
    }
    let (v, exact) = if e < 0 {
        let cut = (-e) as usize;
        if cut >= digits.len() {
            (BigInt::from(0), false)
        } else {
            let (keep, drop) = digits.split_at(digits.len() - cut);
            (
                keep.parse::<BigInt>().ok()?,
                drop.bytes().all(|d| d == b'0'),
            )
        }
    } else {
        (
            digits.parse::<BigInt>().ok()? * BigInt::from(10).pow(e as u32),
            true,
        )
    };
    Some(if neg {
        // floor of a negative non-exact value is one below the truncation.
        (if exact { -v } else { -v - 1 }, exact)
    } else {
        (v, exact)
    })
}

/// The number spec for exact bounds `[lo, hi]` (units of 10^-15, `±far_inf()` when
/// unbounded) and multiple `q` (units): the plain spec, clamped to `±BIG`, when the
/// range reaches numbers of at most 15 digits; otherwise a far spec whose mantissa lies
/// in [1, 10) at the bound nearest zero. `None`: no number the grammar writes.
pub fn far_spec(int_only: bool, lo: &BigInt, hi: &BigInt, q: i128) -> Option<NumSpec> {
    let inf = far_inf();
    let big = BigInt::from(BIG);
    if lo > hi || *lo >= inf || *hi <= -inf.clone() {
        return None;
    }
    let clamp = |x: &BigInt| -> i128 {
        if *x >= big {
            BIG
        } else if *x <= -big.clone() {
            -BIG
        } else {
            i128::try_from(x).expect("within BIG")
        }
    };
    if *lo < big && *hi > -big.clone() {
        return Some(NumSpec {
            int_only,
            lo: clamp(lo),
            hi: clamp(hi),
            q,
            exp: 0,
        });
    }
    // The bound nearest zero sets the exponent: it becomes a mantissa in [1, 10).
    let near = if *lo >= big { lo.clone() } else { -hi.clone() };
    let d = near.to_string().len() as u32;
    let exp = d - 16;
    let p = BigInt::from(10).pow(exp);
    let mlo = lo.div_ceil(&p);
    let mhi = hi.div_floor(&p);
    let g = BigInt::from(q).gcd(&p);
    let mq = i128::try_from(BigInt::from(q) / g).ok()?;
    Some(NumSpec {
        int_only,
        lo: clamp(&mlo),
        hi: clamp(&mhi),
        q: mq,
        exp,
    })
}
