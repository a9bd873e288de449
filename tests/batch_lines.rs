//! The batch's rules for input lines, without a model (`formwork::batch::plan`): what is
//! extracted, what becomes an error record, what a resume skips.

use std::collections::HashSet;

use formwork::batch::{plan, read_lines, Item, Key};
use serde_json::json;

fn lines(v: &[&[u8]]) -> Vec<Vec<u8>> {
    v.iter().map(|l| l.to_vec()).collect()
}

fn record(id: &str, text: &str) -> Item {
    Item::Record {
        id: json!(id),
        text: text.into(),
    }
}

// A regression: a batch whose input had one line with an invalid UTF-8 byte stopped at
// once. The line becomes an error record under `line:N`, and the lines after it run.
#[test]
fn batch_line_with_invalid_utf8_is_an_error_record_and_the_batch_goes_on() {
    let input = lines(&[
        br#"{"id":"a","text":"one"}"#,
        b"{\"id\":\"b\",\"text\":\"caf\xe9\"}",
        br#"{"id":"c","text":"three"}"#,
    ]);
    let items = plan(&input, &HashSet::new());
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0], record("a", "one"));
    match &items[1] {
        Item::Error {
            id,
            msg,
            duplicate,
            from_line,
        } => {
            assert_eq!(id, &json!("line:2"));
            assert_eq!(msg, "input line 2: not valid UTF-8 (byte 22 of the line)");
            assert!(!duplicate && *from_line);
        }
        other => panic!("expected an error record, got {other:?}"),
    }
    assert_eq!(items[2], record("c", "three"));
}

// A regression: a second input line with an id already seen in the same run was
// silently dropped. It is an error record, counted as a duplicate.
#[test]
fn batch_second_line_with_a_seen_id_is_a_duplicate_id_error() {
    let input = lines(&[
        br#"{"id":"a","text":"one"}"#,
        br#"{"id":"b","text":"two"}"#,
        br#"{"id":"a","text":"again"}"#,
        br#"{"id":7,"text":"number id"}"#,
        br#"{"id":7,"text":"number id again"}"#,
    ]);
    let items = plan(&input, &HashSet::new());
    assert_eq!(items.len(), 5, "{items:?}");
    assert_eq!(
        items[2],
        Item::Error {
            id: json!("a"),
            msg: r#"input line 3: duplicate id "a" (first on line 1)"#.into(),
            duplicate: true,
            from_line: false,
        }
    );
    assert_eq!(
        items[4],
        Item::Error {
            id: json!(7),
            msg: "input line 5: duplicate id 7 (first on line 4)".into(),
            duplicate: true,
            from_line: false,
        }
    );
    assert!(matches!(items[3], Item::Record { .. }));
}

// Only ids finished in an earlier run are skipped; blank lines are not records.
#[test]
fn batch_resume_skips_only_ids_finished_in_an_earlier_run() {
    let input = lines(&[
        br#"{"id":"a","text":"one"}"#,
        b"   ",
        br#"{"id":"b","text":"two"}"#,
        br#"{"id":"a","text":"again"}"#,
        b"not json",
    ]);
    let done: HashSet<Key> = [Key::Id("a".into()), Key::Line(5)].into();
    let items = plan(&input, &done);
    assert_eq!(
        items,
        vec![Item::Done, record("b", "two"), Item::Done, Item::Done]
    );
}

// The input is split into lines as bytes (`\n` or `\r\n`), so a bad byte is one line's
// problem; the last line needs no newline.
#[test]
fn batch_input_is_split_into_byte_lines() {
    let input: &[u8] = b"{\"id\":1}\r\n\xff\xfe\n\nlast";
    let lines = read_lines(input).unwrap();
    assert_eq!(
        lines,
        vec![
            b"{\"id\":1}".to_vec(),
            b"\xff\xfe".to_vec(),
            Vec::new(),
            b"last".to_vec()
        ]
    );
}

// Found by the `batch_line` fuzz target (libFuzzer, 2026-12-02; corpus
// `user_id_like_a_line_id`): a malformed line is reported under `line:N`, and a user's
// own id may read `line:N` too. They were one key, so a user's record `line:5` after a
// malformed line 5 became a "duplicate id" error and was never extracted, and a resume
// skipped it. Now a line without an id is known by its number, a line with one by its
// id, and the two never meet.
#[test]
fn a_user_id_that_reads_like_a_line_id_is_its_own_record() {
    let input = lines(&[
        b"not json",
        br#"{"id":"line:1","text":"mine"}"#,
        br#"{"id":"line:1","text":"mine again"}"#,
    ]);
    let items = plan(&input, &HashSet::new());
    assert!(
        matches!(&items[0], Item::Error { id, duplicate: false, from_line: true, .. } if id == &json!("line:1")),
        "{items:?}"
    );
    assert_eq!(items[1], record("line:1", "mine"));
    assert!(
        matches!(
            &items[2],
            Item::Error {
                duplicate: true,
                from_line: false,
                ..
            }
        ),
        "{items:?}"
    );
    // Resume: the malformed line's record does not stand for the user's, nor the reverse.
    let done: HashSet<Key> = [Key::Line(1)].into();
    let items = plan(&input[..2], &done);
    assert_eq!(items, vec![Item::Done, record("line:1", "mine")]);
    let done: HashSet<Key> = [Key::Id("line:1".into())].into();
    let items = plan(&input[..2], &done);
    assert!(
        matches!(
            &items[..],
            [
                Item::Error {
                    from_line: true,
                    ..
                },
                Item::Done
            ]
        ),
        "{items:?}"
    );
}

// A resume reads the output's records back into keys: an error record whose line had
// no id by its line number, any other record by its id (`line:N` included).
#[test]
fn output_records_are_read_back_into_their_keys() {
    let key = |v: serde_json::Value| Key::of_record(&v);
    assert_eq!(
        key(json!({"id": "line:4", "id_from_line": true, "verdict": "error"})),
        Some(Key::Line(4))
    );
    assert_eq!(
        key(json!({"id": "line:4", "verdict": "valid"})),
        Some(Key::Id("line:4".into()))
    );
    assert_eq!(key(json!({"id": 7})), Some(Key::Num("7".into())));
    assert_eq!(key(json!({"id": "7"})), Some(Key::Id("7".into())));
    assert_eq!(key(json!({"verdict": "error"})), None);
}

// Ids keep their JSON type: `"1"` and `1` are two records, not a duplicate, and a
// resume that finished one does not skip the other.
#[test]
fn a_string_id_and_a_number_id_that_read_alike_are_two_records() {
    let input = lines(&[
        br#"{"id":"1","text":"string"}"#,
        br#"{"id":1,"text":"number"}"#,
        br#"{"id":1,"text":"number again"}"#,
    ]);
    let items = plan(&input, &HashSet::new());
    assert_eq!(items[0], record("1", "string"));
    assert_eq!(
        items[1],
        Item::Record {
            id: json!(1),
            text: "number".into()
        }
    );
    assert!(
        matches!(
            &items[2],
            Item::Error {
                duplicate: true,
                ..
            }
        ),
        "{items:?}"
    );
    let done: HashSet<Key> = [Key::of_record(&json!({"id": "1"})).unwrap()].into();
    let items = plan(&input[..2], &done);
    assert_eq!(items[0], Item::Done);
    assert!(matches!(&items[1], Item::Record { .. }), "{items:?}");
}
