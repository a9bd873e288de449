//! The batch's rules for input lines, without a model (`formwork::batch::plan`): what is
//! extracted, what becomes an error record, what a resume skips.

use std::collections::HashSet;

use formwork::batch::{plan, read_lines, Item};
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

// See: issue 17 ("a batch whose input has one line with an invalid UTF-8 byte stops at
// once"). The line becomes an error record under `line:N`, and the lines after it run.
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
        Item::Error { id, msg, duplicate } => {
            assert_eq!(id, &json!("line:2"));
            assert_eq!(msg, "input line 2: not valid UTF-8 (byte 22 of the line)");
            assert!(!duplicate);
        }
        other => panic!("expected an error record, got {other:?}"),
    }
    assert_eq!(items[2], record("c", "three"));
}

// See: issue 17 ("a second input line with an id already seen in the same run is
// silently dropped"). It is an error record, counted as a duplicate.
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
        }
    );
    assert_eq!(
        items[4],
        Item::Error {
            id: json!(7),
            msg: "input line 5: duplicate id 7 (first on line 4)".into(),
            duplicate: true,
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
    let done: HashSet<String> = ["a".to_string(), "line:5".to_string()].into();
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
