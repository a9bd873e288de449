//! RFC 6901 JSON Pointer reference tokens: the one escaping every part of the crate
//! uses when it writes or reads an instance pointer (`/loc/a~1b`). It knows no other
//! module, so `validate`, `engine` and `bench` can all depend on it.

/// A key as a pointer token: `~` becomes `~0`, then `/` becomes `~1`.
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A pointer token as the key it names: `~1` becomes `/`, then `~0` becomes `~`.
pub fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

    #[test]
    fn tokens_round_trip_in_rfc_6901_order() {
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        // `~01` is `~` then `1`, never `/`.
        assert_eq!(escape("~1"), "~01");
        assert_eq!(unescape("~01"), "~1");
        for k in ["", "plain", "a/b", "~", "~0", "~1", "/~/"] {
            assert_eq!(unescape(&escape(k)), k);
        }
    }
}
