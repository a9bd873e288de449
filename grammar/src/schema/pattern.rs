//! ECMA-262 `pattern`s translated to regex-automata syntax, and the formats as regexes.
//!
//! The translation is narrow on purpose: ASCII `\d`/`\w`, ECMA's `\s` set, `.` without line
//! terminators. Anything whose meaning differs between the two dialects (POSIX classes,
//! nested classes, class set operations, back-references, look-around) is refused, so a
//! string the DFA accepts is one the validator's ECMA regex matches.

const ECMA_WS: &str = r"\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";

/// Translates an ECMA pattern into the body of a Rust regex (not anchored).
pub fn translate(p: &str) -> Result<String, String> {
    let cs: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_class = false;
    let mut class_start = false;
    while i < cs.len() {
        let c = cs[i];
        if c == '\\' {
            i += 1;
            let Some(&e) = cs.get(i) else {
                return Err("trailing backslash".into());
            };
            match e {
                'd' => out.push_str(if in_class { "0-9" } else { "[0-9]" }),
                // Inside a class, a negated escape is a nested class: regex-syntax takes
                // the union (`[a\D]` is `[a[^0-9]]`), as ECMA does.
                'D' => out.push_str("[^0-9]"),
                'w' => out.push_str(if in_class {
                    "A-Za-z0-9_"
                } else {
                    "[A-Za-z0-9_]"
                }),
                'W' => out.push_str("[^A-Za-z0-9_]"),
                's' => {
                    if in_class {
                        out.push_str(ECMA_WS)
                    } else {
                        out.push('[');
                        out.push_str(ECMA_WS);
                        out.push(']');
                    }
                }
                'S' => {
                    out.push_str("[^");
                    out.push_str(ECMA_WS);
                    out.push(']');
                }
                'b' if !in_class => out.push_str("(?-u:\\b)"),
                'B' if !in_class => out.push_str("(?-u:\\B)"),
                'b' => out.push_str("\\x08"),
                'n' | 'r' | 't' | 'f' | 'v' => {
                    out.push_str(match e {
                        'n' => "\\n",
                        'r' => "\\r",
                        't' => "\\t",
                        'f' => "\\x0C",
                        _ => "\\x0B",
                    });
                }
                '0' if !cs.get(i + 1).is_some_and(|c| c.is_ascii_digit()) => out.push_str("\\x00"),
                'x' => {
                    let h: String = cs.get(i + 1..i + 3).ok_or("short \\x")?.iter().collect();
                    if !h.chars().all(|c| c.is_ascii_hexdigit()) {
                        return Err("bad \\x escape".into());
                    }
                    out.push_str(&format!("\\x{{{h}}}"));
                    i += 2;
                }
                'u' => {
                    if cs.get(i + 1) == Some(&'{') {
                        return Err("\\u{...} needs the u flag".into());
                    }
                    let h: String = cs.get(i + 1..i + 5).ok_or("short \\u")?.iter().collect();
                    if !h.chars().all(|c| c.is_ascii_hexdigit()) {
                        return Err("bad \\u escape".into());
                    }
                    let v = u32::from_str_radix(&h, 16).unwrap();
                    if (0xD800..=0xDFFF).contains(&v) {
                        return Err("surrogate escape".into());
                    }
                    out.push_str(&format!("\\x{{{h}}}"));
                    i += 4;
                }
                c if c.is_ascii_punctuation() => {
                    out.push('\\');
                    out.push(c);
                }
                c => return Err(format!("escape \\{c}")),
            }
            i += 1;
            class_start = false;
            continue;
        }
        if in_class {
            match c {
                ']' if !class_start => in_class = false,
                '[' => return Err("'[' inside a class".into()),
                '&' | '~' if cs.get(i + 1) == Some(&c) => return Err("class set operator".into()),
                '-' if cs.get(i + 1) == Some(&'-') => return Err("class set operator".into()),
                ']' => {
                    // `[]` matches nothing in ECMA; `[^]` anything.
                    return Err("empty class".into());
                }
                _ => {}
            }
            if c == '^' && class_start {
                out.push('^');
                i += 1;
                // `[^]`
                if cs.get(i) == Some(&']') {
                    return Err("empty negated class".into());
                }
                continue;
            }
            class_start = false;
            if c == ']' {
                out.push(']');
            } else {
                push_lit(&mut out, c, true);
            }
            i += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                class_start = true;
                out.push('[');
                i += 1;
                continue;
            }
            '.' => out.push_str("[^\\n\\r\\x{2028}\\x{2029}]"),
            '(' => {
                if cs.get(i + 1) == Some(&'?') {
                    match cs.get(i + 2) {
                        Some(':') => {
                            out.push_str("(?:");
                            i += 3;
                            continue;
                        }
                        Some('<') if cs.get(i + 3).is_some_and(|c| c.is_alphabetic()) => {
                            // Named group: keep as non-capturing.
                            let close = cs[i..]
                                .iter()
                                .position(|&c| c == '>')
                                .ok_or("bad group name")?;
                            out.push_str("(?:");
                            i += close + 1;
                            continue;
                        }
                        _ => return Err("look-around or group flag".into()),
                    }
                }
                out.push_str("(?:");
            }
            '{' => {
                // A quantifier must look like {n}, {n,}, {n,m}; else ECMA reads a literal.
                let close = cs[i..].iter().position(|&c| c == '}');
                let ok = close.is_some_and(|k| {
                    let inner: String = cs[i + 1..i + k].iter().collect();
                    let mut parts = inner.splitn(2, ',');
                    let a = parts.next().unwrap_or("");
                    !a.is_empty()
                        && a.chars().all(|c| c.is_ascii_digit())
                        && parts
                            .next()
                            .is_none_or(|b| b.chars().all(|c| c.is_ascii_digit()))
                });
                if ok {
                    let k = close.unwrap();
                    let inner: String = cs[i..=i + k].iter().collect();
                    out.push_str(&inner);
                    i += k + 1;
                    // Lazy marker.
                    if cs.get(i) == Some(&'?') {
                        i += 1;
                    }
                    continue;
                } else {
                    out.push_str("\\{");
                }
            }
            '}' => out.push_str("\\}"),
            '*' | '+' | '?' => {
                out.push(c);
                // Lazy quantifiers do not change which strings match.
                if cs.get(i + 1) == Some(&'?') {
                    i += 1;
                }
            }
            '^' | '$' | '|' | ')' => out.push(c),
            _ => push_lit(&mut out, c, false),
        }
        i += 1;
    }
    if in_class {
        return Err("unterminated class".into());
    }
    Ok(out)
}

fn push_lit(out: &mut String, c: char, in_class: bool) {
    if in_class {
        // `-` stays unescaped: inside a class it is the range operator (`a-z`), or a
        // literal when first or last, in ECMA and in regex-syntax alike.
        if matches!(c, '\\' | '[' | '&' | '~') {
            out.push('\\');
        }
        out.push(c);
    } else if regex_syntax_is_meta(c) {
        out.push('\\');
        out.push(c);
    } else if c.is_whitespace() || c == '#' {
        // Literal whitespace/`#` stay literal (no verbose mode).
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    } else {
        out.push(c);
    }
}

fn regex_syntax_is_meta(c: char) -> bool {
    matches!(
        c,
        '\\' | '.'
            | '+'
            | '*'
            | '?'
            | '('
            | ')'
            | '|'
            | '['
            | ']'
            | '{'
            | '}'
            | '^'
            | '$'
            | '#'
            | '&'
            | '-'
            | '~'
    )
}

/// The anchored regex for a JSON Schema `pattern`: a search, so the pattern may match
/// anywhere unless it anchors itself.
pub fn search_regex(p: &str) -> Result<String, String> {
    let body = translate(p)?;
    Ok(format!("^(?s:.)*?(?:{body})(?s:.)*$"))
}

/// Marks a regex in [`search_regexes`]' answer whose *complement* is meant.
pub const NOT: char = '!';

/// [`search_regex`], and for a pattern that opens with a negative look-ahead at its
/// anchor, `^(?!X)Y` (Pydantic's `Decimal`: `^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$`), the
/// two regexes whose intersection it is: `^Y` as a search, and [`NOT`] before `^X` as a
/// search (the strings where the look-ahead would match). `Y` may not hold a `|` (it
/// would bind looser than the look-ahead); `X` and `Y` are translated as any pattern.
pub fn search_regexes(p: &str) -> Result<Vec<String>, String> {
    let Some(after) = p.strip_prefix("^(?!") else {
        return Ok(vec![search_regex(p)?]);
    };
    let cs: Vec<char> = after.chars().collect();
    let (mut depth, mut i, mut in_class) = (0usize, 0usize, false);
    let close = loop {
        let Some(&c) = cs.get(i) else {
            return Err("unclosed look-ahead".into());
        };
        match c {
            '\\' => i += 1,
            '[' => in_class = true,
            ']' => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class && depth == 0 => break i,
            ')' if !in_class => depth -= 1,
            _ => {}
        }
        i += 1;
    };
    let x: String = cs[..close].iter().collect();
    let y: String = cs[close + 1..].iter().collect();
    if y.contains('|') {
        return Err("look-around or group flag".into());
    }
    Ok(vec![
        search_regex(&format!("^(?:{y})"))?,
        format!("{NOT}{}", search_regex(&format!("^(?:{x})"))?),
    ])
}

const H16: &str = "[0-9a-fA-F]{1,4}";
const LABEL: &str = "[A-Za-z0-9]{1,20}(?:-[A-Za-z0-9]{1,20}){0,2}";

fn ipv4() -> String {
    let o = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
    format!("{o}\\.{o}\\.{o}\\.{o}")
}

fn ipv6() -> String {
    let h = H16;
    [
        format!("(?:{h}:){{7}}{h}"),
        format!("(?:{h}:){{1,7}}:"),
        format!("(?:{h}:){{1,6}}:{h}"),
        format!("(?:{h}:){{1,5}}(?::{h}){{1,2}}"),
        format!("(?:{h}:){{1,4}}(?::{h}){{1,3}}"),
        format!("(?:{h}:){{1,3}}(?::{h}){{1,4}}"),
        format!("(?:{h}:){{1,2}}(?::{h}){{1,5}}"),
        format!("{h}:(?::{h}){{1,6}}"),
        format!(":(?:(?::{h}){{1,7}}|:)"),
    ]
    .join("|")
}

fn hostname() -> String {
    format!("{LABEL}(?:\\.{LABEL}){{0,3}}")
}

/// Years 0001 to 9999: RFC 3339 also has 0000, which Python's `date` and `datetime` (so
/// Pydantic) refuse.
fn date() -> String {
    let y = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})";
    let leap =
        "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)";
    format!(
        "(?:{y}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|{leap}-02-29)"
    )
}

fn time() -> String {
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])".into()
}

fn uri() -> String {
    format!(
        "(?:https?|ftp)://{}(?::[0-9]{{1,4}})?(?:/[A-Za-z0-9._~-]*)*(?:\\?[A-Za-z0-9._~=&-]*)?(?:#[A-Za-z0-9._~-]*)?",
        hostname()
    )
}

fn duration() -> String {
    let n = "[0-9]{1,9}";
    let date = format!("(?:{n}Y(?:{n}M(?:{n}D)?)?|{n}M(?:{n}D)?|{n}D)");
    let time = format!("T(?:{n}H(?:{n}M(?:{n}S)?)?|{n}M(?:{n}S)?|{n}S)");
    format!("P(?:{date}(?:{time})?|{time}|{n}W)")
}

/// [`format_regex`], with the strings it must not take as [`NOT`] regexes: an `email`
/// whose domain ends in a special-use name (RFC 6761: `.test`, `.local`, ...), which
/// email-validator, so Pydantic's `EmailStr`, refuses.
pub fn format_regexes(f: &str) -> Option<Vec<String>> {
    let mut v = vec![format_regex(f)?];
    if matches!(f, "email" | "idn-email") {
        v.push(format!(
            "{NOT}^(?s:.)*\\.(?i:arpa|invalid|local|localhost|onion|test)$"
        ));
    }
    Some(v)
}

/// The anchored regex of a sound subset of `format`, or `None` for an unknown format.
pub fn format_regex(f: &str) -> Option<String> {
    let body = match f {
        "date" => date(),
        "time" => time(),
        "date-time" => format!("{}[Tt]{}", date(), time()),
        "email" | "idn-email" => {
            format!("[A-Za-z0-9_+-]{{1,32}}(?:\\.[A-Za-z0-9_+-]{{1,15}})?@{LABEL}(?:\\.{LABEL}){{0,2}}\\.[A-Za-z]{{2,10}}")
        }
        "hostname" | "idn-hostname" => hostname(),
        "ipv4" => ipv4(),
        "ipv6" => ipv6(),
        "uuid" => {
            "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".into()
        }
        "uri" | "uri-reference" | "iri" | "iri-reference" => uri(),
        "duration" => duration(),
        "json-pointer" => "(?:/(?:[A-Za-z0-9_-]|~[01])*)*".into(),
        "relative-json-pointer" => {
            "(?:0|[1-9][0-9]{0,8})(?:#|(?:/(?:[A-Za-z0-9_-]|~[01])*)*)".into()
        }
        "uri-template" => "[A-Za-z0-9/._-]*".into(),
        "regex" => "[A-Za-z0-9 _-]*".into(),
        // Names the validator does not know (so it does not check them): a sound reading of
        // their usual meaning.
        "url" => uri(),
        "int32" | "int64" | "integer" | "int" | "long" | "uint32" | "uint64" => {
            "-?(?:0|[1-9][0-9]{0,8})".into()
        }
        "double" | "float" | "number" | "decimal" => {
            "-?(?:0|[1-9][0-9]{0,8})(?:\\.[0-9]{1,6})?".into()
        }
        "byte" | "base64" => {
            "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?".into()
        }
        "utc-millisec" => "(?:0|[1-9][0-9]{0,12})".into(),
        "color" => "#[0-9a-fA-F]{6}".into(),
        "phone" => "\\+?[0-9]{7,15}".into(),
        "cidr" => format!("{}/(?:3[0-2]|[12]?[0-9])", ipv4()),
        "path" => "/?[A-Za-z0-9._-]{1,30}(?:/[A-Za-z0-9._-]{1,30}){0,5}".into(),
        "password" | "textarea" | "markdown" | "html" | "text" | "multiline" | "binary"
        | "string" => "(?s:.)*".into(),
        _ => return None,
    };
    Some(format!("^(?:{body})$"))
}
