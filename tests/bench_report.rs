//! `formwork bench` end to end on the real default model (3 SNIPS records, CC0, copied
//! into tests/data), then its HTML report opened in a headless browser, as a person
//! would: the page must parse into its four figures, and the screenshot must show the
//! bars of both modes in their colours.
//!
//! Skipped (with a message) when the model is not fetched (`formwork models fetch`), and
//! the browser part when no Chromium is found (`apt-get install chromium`, or set
//! `FORMWORK_CHROMIUM` to a Chromium or Chrome binary).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;

fn home() -> Option<PathBuf> {
    common::home_with_smollm2()
}

/// `formwork bench` on the small model, with the test environment.
fn bench(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"));
    c.env("FORMWORK_HOME", home)
        .env("FORMWORK_MODEL", "smollm2-135m")
        .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
        .arg("bench");
    c
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FORMWORK_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

fn browser(bin: &Path, profile: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Pixels whose colour is within a small distance of `rgb`.
fn count_colour(png_path: &Path, rgb: [u8; 3]) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected screenshot colour type {other:?}"),
    };
    buf[..info.buffer_size()]
        .chunks(step)
        .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= 6))
        .count()
}

#[test]
fn bench_report_renders_in_a_browser() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-bench-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dataset = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snips_sample.jsonl");
    let out = bench(&home)
        .args([
            "--modes",
            "masked,free",
            "--retries",
            "1",
            "--max-tokens",
            "160",
        ])
        .arg("--dataset")
        .arg(&dataset)
        .arg("--report")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The markdown table names both modes.
    assert!(
        stdout.contains("| masked") && stdout.contains("| free"),
        "{stdout}"
    );

    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["seed"], 0, "the seed is recorded");
    let masked = &report["overall"]["masked"];
    assert_eq!(masked["records"], 3, "{masked}");
    // Masked decoding is valid by construction.
    assert_eq!(masked["schema_valid_rate"], 1.0, "{masked}");
    assert!(report["overall"]["free"]["attempts_mean"].as_f64().unwrap() >= 1.0);
    // Valid is not right: the all-null baseline and the slot measures sit beside the
    // accuracy, computed from the gold of these three records (23 of their 32 leaf
    // fields are null or false).
    for mode in ["masked", "free"] {
        let x = &report["overall"][mode];
        let base = x["null_baseline_accuracy"].as_f64().unwrap();
        assert!((base - 23.0 / 32.0).abs() < 1e-9, "{mode}: {x}");
        for k in [
            "slot_precision",
            "slot_recall",
            "slot_f1",
            "false_fill_rate",
            "miss_rate",
        ] {
            assert!(x.get(k).is_some(), "{mode} lacks {k}: {x}");
        }
        assert!(x["per_field_slots"]["/object_name"]["hit"].is_u64(), "{x}");
        // Review by confidence: every leaf field is a value, and the calibration bins
        // hold them all.
        let r = &x["review"];
        assert_eq!(r["values"], 32, "{mode}: {r}");
        let binned: u64 = (r["calibration"].as_array().unwrap().iter())
            .map(|b| b["values"].as_u64().unwrap())
            .sum();
        assert_eq!(binned, 32, "{mode}: {r}");
        assert!(r["rules"]["product+odds"].is_array(), "{mode}: {r}");
    }
    assert!(stdout.contains("least 10%"), "{stdout}");
    assert!(
        stdout.contains("all-null") && stdout.contains("slot F1"),
        "{stdout}"
    );

    let html = dir.join("index.html");
    let Some(bin) = chromium() else {
        common::skip::skipped(format_args!(
            "SKIPPED (browser part): no Chromium; install it (apt-get install chromium) \
             or set FORMWORK_CHROMIUM"
        ));
        return;
    };
    let profile = dir.join("chromium-profile");
    // The DOM the browser built: seven figures, each an <svg> with its caption.
    let dom = browser(&bin, &profile)
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    assert_eq!(dom_text.matches("<svg").count(), 7, "{dom_text}");
    for caption in [
        "Validity and accuracy by mode",
        "Slot F1 and false fills by mode (all-null answer beside)",
        "Slot F1 and false fills per schema, by mode",
        "Per-field accuracy by mode",
        "Calibration: confidence against accuracy, by mode",
        "Latency per record",
        "Tokens per record",
    ] {
        assert!(dom_text.contains(caption), "missing figure {caption:?}");
    }
    // The picture: bars of both modes are drawn in their colours.
    let shot = dir.join("report.png");
    let s = browser(&bin, &profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1100,2600")
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&s.stderr)
    );
    let blue = count_colour(&shot, [0x2b, 0x6c, 0xb0]);
    let orange = count_colour(&shot, [0xdd, 0x6b, 0x20]);
    assert!(blue > 2000, "masked bars: {blue} pixels");
    assert!(orange > 500, "free bars: {orange} pixels");
    eprintln!(
        "screenshot {}: {blue} masked-colour and {orange} free-colour pixels",
        shot.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench --parallel 3`: the three records and both modes decode together (six jobs
/// on three workers in one batch group), and the report's records are the serial
/// run's, in the same order, with the same answers; the batching is reported.
#[test]
fn parallel_bench_reports_what_a_serial_bench_reports() {
    let Some(home) = home() else { return };
    let dataset = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snips_sample.jsonl");
    let run = |parallel: &str| -> Value {
        let dir = std::env::temp_dir().join(format!(
            "formwork-bench-parallel-{parallel}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let out = bench(&home)
            .args(["--modes", "masked,free", "--max-tokens", "96"])
            .args(["--parallel", parallel])
            .arg("--dataset")
            .arg(&dataset)
            .arg("--report")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = std::fs::read(dir.join("report.json")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        serde_json::from_slice(&report).unwrap()
    };
    let (serial, parallel) = (run("1"), run("3"));
    let key = |r: &Value| {
        let r = r["records"].as_array().unwrap().clone();
        r.iter()
            .map(|x| {
                (
                    x["id"].clone(),
                    x["mode"].clone(),
                    x["value"].clone(),
                    x["tokens_generated"].clone(),
                    x["verdict"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&serial).len(), 6);
    assert_eq!(key(&parallel), key(&serial));
    assert_eq!(parallel["parallel"], 3);
    assert!(
        serial["batched_passes"].is_null(),
        "{}",
        serial["batched_passes"]
    );
    let mean = parallel["mean_batch"].as_f64().unwrap();
    assert!(mean > 1.0 && mean <= 3.0, "mean batch {mean}");
}

/// `bench --requests-out`: every record's first attempt as an OpenAI request, written
/// without loading the model (the model named is a file that does not exist): the
/// system message, the picked examples as user/assistant turns, the record's text
/// last, the record's schema as a strict `json_schema` response format, greedy, and
/// the run's `max_tokens`.
#[test]
fn requests_out_writes_each_record_as_a_request_without_a_model() {
    let dataset = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snips_sample.jsonl");
    let dir = std::env::temp_dir().join(format!("formwork-requests-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let records: Vec<Value> = std::fs::read_to_string(&dataset)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Two worked examples per schema: the record's own answer under another text.
    let mut examples = String::new();
    for r in &records {
        for k in ["one", "two"] {
            let mut e = r.clone();
            e["id"] = Value::from(format!("{}-{k}", r["id"].as_str().unwrap()));
            e["text"] = Value::from(format!(
                "example {k} of {}",
                r["schema_name"].as_str().unwrap()
            ));
            examples.push_str(&format!("{e}\n"));
        }
    }
    std::fs::write(dir.join("examples.jsonl"), examples).unwrap();
    let out_path = dir.join("requests.jsonl");
    let missing = dir.join("no-such-model.gguf");
    let out = bench(&dir)
        .args(["--modes", "masked", "--max-tokens", "300", "--shots", "2"])
        .arg("--model")
        .arg(&missing)
        .arg("--dataset")
        .arg(&dataset)
        .arg("--examples")
        .arg(dir.join("examples.jsonl"))
        .arg("--requests-out")
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = std::fs::read_to_string(&out_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), records.len());
    for r in &records {
        let line = lines
            .iter()
            .find(|l| l["id"] == r["id"])
            .expect("every record");
        assert_eq!(line["schema_name"], r["schema_name"]);
        assert_eq!(line["mode"], "masked");
        let req = &line["request"];
        assert_eq!(req["model"], Value::from(missing.display().to_string()));
        assert_eq!(req["max_tokens"], 300);
        assert_eq!(req["temperature"], 0.0);
        let f = &req["response_format"];
        assert_eq!(f["type"], "json_schema");
        assert_eq!(f["json_schema"]["strict"], true);
        assert_eq!(f["json_schema"]["schema"], r["schema"]);
        let m = req["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "user", "assistant", "user"]
        );
        assert!(m[0]["content"].as_str().unwrap().contains("Null policy"));
        let name = r["schema_name"].as_str().unwrap();
        for (turn, answer) in [(&m[1], &m[2]), (&m[3], &m[4])] {
            assert!(turn["content"]
                .as_str()
                .unwrap()
                .ends_with(&format!("of {name}")));
            let v: Value = serde_json::from_str(answer["content"].as_str().unwrap()).unwrap();
            assert_eq!(v, r["expected"]);
        }
        assert_eq!(m[5]["content"], r["text"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
