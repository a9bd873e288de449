//! Snapshot tests of the rendered text (pydantic layout) and of the JSON output, for the
//! design examples in `tests/data/validate/schemas/` (copied from `../shared/fixtures/schemas`).
//!
//! Snapshots live in `tests/data/validate/snapshots/<name>.txt`. A mismatch fails and prints
//! both; `FORMWORK_BLESS=1` rewrites them (then read the diff before committing).

use std::path::{Path, PathBuf};

use formwork::validate::{render_pydantic, Validator, Verdict};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/validate")
}

fn validator(name: &str) -> Validator {
    let text = std::fs::read_to_string(data().join("schemas").join(name)).unwrap();
    Validator::new(&serde_json::from_str::<Value>(&text).unwrap()).unwrap()
}

fn snapshot(name: &str, actual: &str) {
    let path = data().join("snapshots").join(format!("{name}.txt"));
    if std::env::var("FORMWORK_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}; run with FORMWORK_BLESS=1. Actual:\n{actual}",
            path.display()
        )
    });
    assert_eq!(
        expected, actual,
        "snapshot {name} differs (FORMWORK_BLESS=1 rewrites it)"
    );
}

/// Render a verdict the way `formwork validate` prints it, and its JSON.
fn both(v: &Validator, text: &str) -> String {
    let verdict = v.check(text);
    let rendered = match &verdict {
        Verdict::SchemaInvalid(e) | Verdict::SemanticInvalid(e) => render_pydantic(v.title(), e),
        Verdict::NotJson(e) => format!("not JSON: {e}"),
        Verdict::Valid(_) => "valid".into(),
    };
    format!(
        "{rendered}\n--- json\n{}\n",
        serde_json::to_string_pretty(&verdict.to_json()).unwrap()
    )
}

#[test]
fn decision_out_of_range_and_not_in_the_enum() {
    let v = validator("decision.schema.json");
    let text = r#"{"sku": "SKU-11", "esito": "forse", "quantita": 9999, "motivo": "sotto soglia", "dati_usati": []}"#;
    let verdict = v.check(text);
    let rendered = render_pydantic(v.title(), verdict.errors());
    // Pydantic's layout, line for line.
    assert!(rendered.starts_with("2 validation errors for Decisione\n"));
    assert!(rendered.contains(
        "\nquantita\n  Input should be less than or equal to 5000 [type=less_than_equal, input_value=9999, input_type=int]"
    ));
    snapshot("decision_two_errors", &both(&v, text));
}

#[test]
fn decision_missing_extra_and_types() {
    let v = validator("decision.schema.json");
    snapshot(
        "decision_missing",
        &both(&v, r#"{"sku": "SKU-11", "esito": "riordina"}"#),
    );
    snapshot(
        "decision_wrong_types",
        &both(
            &v,
            r#"{"sku": 11, "esito": "riordina", "quantita": "250", "motivo": "x", "dati_usati": "leggi_giacenza", "note": "in più"}"#,
        ),
    );
    let long = "sotto soglia ".repeat(20);
    snapshot(
        "decision_long_motivo",
        &both(
            &v,
            &format!(
                r#"{{"sku": "SKU-11", "esito": "riordina", "quantita": 250, "motivo": "{long}", "dati_usati": []}}"#
            ),
        ),
    );
}

#[test]
fn order_email_nested_lines_and_nullables() {
    let v = validator("order_email.schema.json");
    snapshot(
        "order_email_nested",
        &both(
            &v,
            r#"{"righe": [{"ragionamento": "12 pz dello SKU 11", "sku_grezzo": "SKU 11", "quantita": 12, "quantita_testuale": null, "urgenza": "standard"}, {"ragionamento": "una decina dei 42", "sku_grezzo": "42", "quantita": "una decina", "quantita_testuale": "una decina", "urgenza": "subito"}], "indirizzo_spedizione": "Via Roma 3, Lecce", "cliente_fatturazione": null}"#,
        ),
    );
}

#[test]
fn review_enum_and_length() {
    let v = validator("review.schema.json");
    let long = "x".repeat(401);
    snapshot(
        "review_invalid",
        &both(
            &v,
            &format!(r#"{{"verdetto": "boh", "motivo": "{long}", "citazione": null}}"#),
        ),
    );
}

#[test]
fn vacation_semantic() {
    let v = validator("vacation.rules.schema.json");
    snapshot(
        "vacation_semantic",
        &both(
            &v,
            r#"{"status":"complete","start_date":"2027-06-12","end_date":"2027-06-10","clarification_question":"which year?"}"#,
        ),
    );
    snapshot(
        "vacation_not_json",
        &both(&v, r#"{"status":"complete","start_date":"2027-06-12","#),
    );
}
