//! Quotations: a string written as a piece of a text (the conversation for grounded
//! tool arguments, the document's body for the weighing of a `null`), token by token.
//! [`quotable_in`] says whether a text may be or begin a quotation of another;
//! [`quoted_fits`] whether one more token keeps a string's content one. Pure.

/// A text a quotation is read from.
pub trait Quotable {
    /// May `text` be (`closed`) or begin a quotation ([`quotable_in`])?
    fn quotable(&self, text: &str, closed: bool) -> bool;
    /// Do these bytes (a quotation's start that ends inside a character) occur?
    fn quotable_bytes(&self, bytes: &[u8]) -> bool;
}

/// Is `text` a piece of `doc` that a quotation may be or begin with: it occurs there
/// (as given: fold both the same way for a case-blind test), starting at the start of
/// a word (when it starts with a letter or digit), with no leading whitespace; when
/// `closed`, also ending at the end of a word, with no trailing whitespace, and not
/// empty. A quotation is the text's own, not cut mid-word ("t" of "the").
pub fn quotable_in(doc: &str, text: &str, closed: bool) -> bool {
    if text.is_empty() {
        return !closed;
    }
    if text.starts_with(char::is_whitespace) || (closed && text.ends_with(char::is_whitespace)) {
        return false;
    }
    let alnum = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let word_start = !alnum(text.chars().next());
    let word_end = !alnum(text.chars().next_back());
    let mut from = 0;
    while let Some(k) = doc[from..].find(text) {
        let i = from + k;
        let j = i + text.len();
        let starts = word_start || !alnum(doc[..i].chars().next_back());
        let ends = !closed || word_end || !alnum(doc[j..].chars().next());
        if starts && ends {
            return true;
        }
        from = i + doc[i..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// Do `bytes` (a quotation's start that ends inside a character) occur in `doc`? Never
/// when empty.
pub fn bytes_occur(doc: &[u8], bytes: &[u8]) -> bool {
    !bytes.is_empty() && doc.windows(bytes.len()).any(|w| w == bytes)
}

/// Does `tok` after the string content `so_far` (raw, as written) keep it a piece of
/// `q`: the content with the token's bytes up to a closing quote is a quotation
/// (closed) or may still become one (open)? A backslash (an escape) never fits.
pub fn quoted_fits(q: &impl Quotable, so_far: &[u8], tok: &[u8]) -> bool {
    let close = tok.iter().position(|&b| b == b'"');
    let piece = &tok[..close.unwrap_or(tok.len())];
    if piece.contains(&b'\\') || so_far.contains(&b'\\') {
        return false;
    }
    let mut content = so_far.to_vec();
    content.extend_from_slice(piece);
    match std::str::from_utf8(&content) {
        Ok(t) => q.quotable(t, close.is_some()),
        // A token may end inside a character: the whole characters before it must be
        // quotable, and the text must go on with the bytes after them.
        Err(e) if e.error_len().is_none() && close.is_none() => {
            let whole = std::str::from_utf8(&content[..e.valid_up_to()]).unwrap_or_default();
            q.quotable(whole, false) && q.quotable_bytes(&content)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quotation_keeps_to_word_edges_and_single_spaces() {
        let d = "book a table in new york city";
        assert!(quotable_in(d, "new york", true));
        assert!(quotable_in(d, "new yo", false), "open: may go on");
        assert!(!quotable_in(d, "new yo", true), "closed mid-word");
        assert!(!quotable_in(d, "ew york", false), "from mid-word");
        assert!(!quotable_in(d, " new", false), "leading space");
        assert!(!quotable_in(d, "new ", true), "trailing space, closed");
        assert!(!quotable_in(d, "", true), "the empty string is never one");
        assert!(quotable_in(d, "", false));
        assert!(!quotable_in(d, "new  york", false), "two spaces");
        // A later occurrence can hold where the first does not.
        assert!(quotable_in("cityscape of the city", "city", true));
    }
}
