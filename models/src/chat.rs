//! Chat prompts from the model's own template.
//!
//! GGUF `tokenizer.chat_template` (a Hugging Face Jinja template) + messages -> prompt text,
//! rendered with minijinja set up the way `transformers.apply_chat_template` sets up Jinja:
//! `trim_blocks` and `lstrip_blocks`, loop controls (`break`, `continue`), Python string and
//! dict methods (`.strip()`, `.startswith()`, `.items()`, ... through minijinja-contrib's
//! pycompat), and the globals `raise_exception(msg)` and `strftime_now(format)`.
//! The prompt text still contains the special-token text (`<|im_start|>`); encode it with
//! `GgufTokenizer::encode`, which parses special tokens.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{context, Environment, Error, ErrorKind};

use crate::error::{ModelError, Result};

/// One chat turn: `role` is `system`, `user` or `assistant`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Renders `template` (the model's `tokenizer.chat_template`) for `messages`.
///
/// `add_generation_prompt` appends the opening of the assistant's turn. `bos_token` and
/// `eos_token` are the texts of those tokens, which many templates print.
///
/// ```
/// use formwork_models::chat::{render_chat, ChatMessage};
/// let template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
///                 {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
/// let text = render_chat(template, &[ChatMessage::new("user", "Hi")], true, "", "<|im_end|>").unwrap();
/// assert_eq!(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// ```
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    render_chat_thinking(
        template,
        messages,
        add_generation_prompt,
        bos_token,
        eos_token,
        None,
    )
}

/// [`render_chat`] with `enable_thinking` set for the template (Qwen3's switch: `false`
/// writes an empty think block after the generation prompt); `None` leaves it undefined,
/// as `transformers` does unless asked.
pub fn render_chat_thinking(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
    enable_thinking: Option<bool>,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template("chat_template", template)
        .map_err(|e| ModelError::ChatTemplate(describe(&e)))?;
    let tmpl = env
        .get_template("chat_template")
        .map_err(|e| ModelError::ChatTemplate(describe(&e)))?;
    let base = context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    };
    let ctx = match enable_thinking {
        Some(on) => context! { enable_thinking => on, ..base },
        None => base,
    };
    tmpl.render(ctx)
        .map_err(|e| ModelError::ChatTemplate(describe(&e)))
}

/// The error with its line and the chain of causes, on one line.
fn describe(e: &Error) -> String {
    let mut msg = match e.line() {
        Some(line) => format!("line {line}: {e}"),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// `raise_exception(msg)`: the template refuses the conversation (for example, roles that do
/// not alternate).
fn raise_exception(msg: String) -> std::result::Result<String, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("the template raised: {msg}"),
    ))
}

/// `strftime_now(format)`: the current UTC time, for templates that print today's date.
/// Supports %Y %y %m %d %e %j %H %M %S %A %a %B %b and %%.
fn strftime_now(format: String) -> std::result::Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime_utc(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Formats the Unix time `secs` (UTC) with the strftime subset listed on [`strftime_now`].
fn strftime_utc(format: &str, secs: i64) -> std::result::Result<String, Error> {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let year_day = days - days_from_civil(year, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('j') => out.push_str(&format!("{year_day:03}")),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('%') => out.push('%'),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: directive %{} in {format:?} is not supported",
                        other.map(String::from).unwrap_or_default()
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// Days since 1970-01-01 -> (year, month 1..=12, day 1..=31), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) -> days since 1970-01-01, the inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday, day 60 of a leap year.
        let t = 1_709_211_909;
        assert_eq!(
            strftime_utc("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %e%%", t).unwrap(),
            "2024-02-29 13:05:09 Thu Thursday Feb February 060 24 29%"
        );
        assert_eq!(strftime_utc("%d %b %Y", 0).unwrap(), "01 Jan 1970");
        assert_eq!(
            strftime_utc("%d %B %Y", 951_782_400).unwrap(),
            "29 February 2000"
        );
        assert!(strftime_utc("%Q", 0).is_err());
        for days in [-800_000, -1, 0, 59, 10_957, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }
}
