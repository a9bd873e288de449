//! A self-contained HTML report (inline SVG, no script, no network): per-field
//! accuracy by mode, validity by mode, latency distributions, tokens per record.

use std::fmt::Write;

use super::{BenchMode, Report};

const COLORS: [&str; 4] = ["#2b6cb0", "#dd6b20", "#38a169", "#805ad5"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Grouped horizontal bars: one group per label, one bar per series, values in 0..=1.
fn grouped_bars(title: &str, labels: &[String], series: &[(String, Vec<f64>)]) -> String {
    let bar_h = 12.0;
    let group_h = bar_h * series.len() as f64 + 10.0;
    let left = 230.0;
    let width = 760.0;
    let plot_w = width - left - 60.0;
    let height = 40.0 + group_h * labels.len() as f64 + 30.0;
    let mut s = format!(
        r#"<figure><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
    for (si, (name, _)) in series.iter().enumerate() {
        let x = left + si as f64 * 140.0;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="8" width="12" height="12" fill="{}"/><text x="{}" y="18" font-size="12">{}</text>"#,
            COLORS[si % COLORS.len()],
            x + 16.0,
            esc(name)
        );
    }
    for (li, label) in labels.iter().enumerate() {
        let y0 = 34.0 + li as f64 * group_h;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="end">{}</text>"#,
            left - 6.0,
            y0 + group_h / 2.0,
            esc(label)
        );
        for (si, (_, vals)) in series.iter().enumerate() {
            let v = vals.get(li).copied().unwrap_or(f64::NAN);
            let w = if v.is_nan() {
                0.0
            } else {
                v.clamp(0.0, 1.0) * plot_w
            };
            let y = y0 + si as f64 * bar_h;
            let _ = write!(
                s,
                r#"<rect x="{left}" y="{y}" width="{w:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{}" font-size="10">{}</text>"#,
                bar_h - 2.0,
                COLORS[si % COLORS.len()],
                left + w + 4.0,
                y + bar_h - 3.0,
                if v.is_nan() {
                    "–".to_string()
                } else {
                    format!("{:.0}%", v * 100.0)
                }
            );
        }
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="30" x2="{left}" y2="{}" stroke="#444"/></svg></figure>"##,
        height - 20.0
    );
    s
}

/// A calibration plot: per series, each bin's mean confidence (x) against its
/// accuracy (y), the diagonal beside; a point's area follows the bin's size.
fn calibration(title: &str, series: &[(String, Vec<super::Bin>)]) -> String {
    let (left, top, side) = (60.0, 30.0, 360.0);
    let width = left + side + 200.0;
    let height = top + side + 50.0;
    let mut s = format!(
        r#"<figure><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
    let x = |v: f64| left + v.clamp(0.0, 1.0) * side;
    let y = |v: f64| top + (1.0 - v.clamp(0.0, 1.0)) * side;
    let _ = write!(
        s,
        r##"<rect x="{left}" y="{top}" width="{side}" height="{side}" fill="none" stroke="#444"/><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#aaa" stroke-dasharray="4 3"/>"##,
        x(0.0),
        y(0.0),
        x(1.0),
        y(1.0)
    );
    for t in [0.0, 0.5, 1.0] {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{t}</text><text x="{}" y="{}" font-size="10" text-anchor="end">{t}</text>"#,
            x(t),
            top + side + 14.0,
            left - 4.0,
            y(t) + 3.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">confidence</text><text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">accuracy</text>"#,
        left + side / 2.0,
        top + side + 32.0,
        top + side / 2.0,
        top + side / 2.0
    );
    let most = (series.iter())
        .flat_map(|(_, b)| b.iter().map(|b| b.values))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    for (si, (name, bins)) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let pts: Vec<(f64, f64, usize)> = (bins.iter())
            .filter(|b| b.values > 0)
            .map(|b| (x(b.mean_confidence), y(b.accuracy), b.values))
            .collect();
        let path: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", p.0, p.1))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.5"/>"#,
            path.join(" ")
        );
        for (px, py, n) in pts {
            let _ = write!(
                s,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="{:.1}" fill="{color}" fill-opacity="0.6"><title>{}: {n} values</title></circle>"#,
                2.0 + 8.0 * (n as f64 / most).sqrt(),
                esc(name)
            );
        }
        let ly = top + 10.0 + si as f64 * 18.0;
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            left + side + 20.0,
            ly,
            left + side + 36.0,
            ly + 10.0,
            esc(name)
        );
    }
    s.push_str("</svg></figure>");
    s
}

/// Overlaid histograms of `values` per series.
fn histogram(title: &str, unit: &str, series: &[(String, Vec<f64>)]) -> String {
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|v| v.is_finite())
        .collect();
    let (lo, hi) = all
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let (width, height, left, bottom) = (760.0, 260.0, 50.0, 40.0);
    let mut s = format!(
        r#"<figure><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
    if all.is_empty() {
        s.push_str(r#"<text x="20" y="40">no data</text></svg></figure>"#);
        return s;
    }
    let bins = 20usize;
    let span = if hi > lo { hi - lo } else { 1.0 };
    let counts: Vec<Vec<usize>> = series
        .iter()
        .map(|(_, vs)| {
            let mut c = vec![0usize; bins];
            for &v in vs.iter().filter(|v| v.is_finite()) {
                let b = (((v - lo) / span) * bins as f64).floor() as usize;
                c[b.min(bins - 1)] += 1;
            }
            c
        })
        .collect();
    let max = counts.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let plot_w = width - left - 20.0;
    let plot_h = height - bottom - 30.0;
    let bw = plot_w / bins as f64;
    for (si, c) in counts.iter().enumerate() {
        let sub = bw / series.len() as f64;
        for (b, &n) in c.iter().enumerate() {
            let h = n as f64 / max * plot_h;
            let x = left + b as f64 * bw + si as f64 * sub;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}" fill-opacity="0.85"/>"#,
                30.0 + plot_h - h,
                (sub - 1.0).max(1.0),
                COLORS[si % COLORS.len()]
            );
        }
        let _ = write!(
            s,
            r#"<rect x="{}" y="8" width="12" height="12" fill="{}"/><text x="{}" y="18" font-size="12">{}</text>"#,
            left + si as f64 * 140.0,
            COLORS[si % COLORS.len()],
            left + si as f64 * 140.0 + 16.0,
            esc(&series[si].0)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#444"/><text x="{left}" y="{}" font-size="11">{lo:.0} {unit}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{hi:.0} {unit}</text><text x="8" y="40" font-size="11">{}</text></svg></figure>"##,
        left + plot_w,
        height - 22.0,
        left + plot_w,
        height - 22.0,
        max as usize,
        y = 30.0 + plot_h,
    );
    s
}

/// The whole page.
pub fn render(r: &Report, markdown_table: &str) -> String {
    let modes: Vec<BenchMode> = r.modes.clone();
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>formwork bench</title>\
         <style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1000px}figure{margin:24px 0}\
         figcaption{font-weight:600;margin-bottom:6px}pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:12px}</style></head><body>",
    );
    let _ = write!(
        html,
        "<h1>formwork bench: {} on {}</h1>",
        esc(&r.model),
        esc(&r.dataset)
    );
    let _ =
        write!(
        html,
        "<p>{} modes, sampling {}, seed {}, max tokens {}, retries {}, prompt {:?}, {} example(s) per record, strings compared {}.</p>",
        modes.len(),
        esc(&r.sampling),
        r.seed,
        r.max_tokens,
        r.retries,
        r.prompt,
        r.shots,
        if r.exact_strings { "exactly" } else { "after trimming and case-folding" }
    );
    let mode_names: Vec<String> = modes.iter().map(|m| m.name().to_string()).collect();

    // Validity by mode.
    let labels = vec![
        "parses".to_string(),
        "schema-valid".into(),
        "semantic-valid".into(),
        "exact match".into(),
        "field accuracy".into(),
    ];
    let series: Vec<(String, Vec<f64>)> = mode_names
        .iter()
        .filter_map(|m| {
            r.overall.get(m).map(|x| {
                (
                    m.clone(),
                    vec![
                        x.parse_rate,
                        x.schema_valid_rate,
                        x.semantic_valid_rate,
                        x.exact_match,
                        x.field_accuracy,
                    ],
                )
            })
        })
        .collect();
    html.push_str(&grouped_bars(
        "Validity and accuracy by mode",
        &labels,
        &series,
    ));

    // Right, not only valid: slot F1 and false fills by mode, the all-null answer beside.
    let labels = vec![
        "field accuracy".to_string(),
        "all-null answer (field accuracy)".into(),
        "slot precision".into(),
        "slot recall".into(),
        "slot F1".into(),
        "false-fill rate".into(),
        "miss rate".into(),
    ];
    let series: Vec<(String, Vec<f64>)> = mode_names
        .iter()
        .filter_map(|m| {
            r.overall.get(m).map(|x| {
                (
                    m.clone(),
                    vec![
                        x.field_accuracy,
                        x.null_baseline_accuracy,
                        x.slot_precision,
                        x.slot_recall,
                        x.slot_f1,
                        x.false_fill_rate,
                        x.miss_rate,
                    ],
                )
            })
        })
        .collect();
    html.push_str(
        "<p>Valid is not right: a schema-valid answer can still be wrong in every field. \
         The all-null answer (null, or false, everywhere) is the floor a model must beat; \
         slot F1 counts only the fields whose gold value is filled.</p>",
    );
    html.push_str(&grouped_bars(
        "Slot F1 and false fills by mode (all-null answer beside)",
        &labels,
        &series,
    ));
    let mut labels = Vec::new();
    let mut per_mode_vals: Vec<Vec<f64>> = vec![Vec::new(); mode_names.len()];
    for (name, by_mode) in &r.per_schema {
        for (what, get) in [
            (
                "slot F1",
                (|x: &super::Summary| x.slot_f1) as fn(&super::Summary) -> f64,
            ),
            ("false fills", |x: &super::Summary| x.false_fill_rate),
        ] {
            labels.push(format!("{name}: {what}"));
            for (mi, m) in mode_names.iter().enumerate() {
                per_mode_vals[mi].push(by_mode.get(m).map_or(f64::NAN, get));
            }
        }
    }
    let series: Vec<(String, Vec<f64>)> = mode_names.iter().cloned().zip(per_mode_vals).collect();
    html.push_str(&grouped_bars(
        "Slot F1 and false fills per schema, by mode",
        &labels,
        &series,
    ));

    // Per-field accuracy by mode.
    let mut fields: Vec<String> = r
        .overall
        .values()
        .flat_map(|x| x.per_field.keys().cloned())
        .collect();
    fields.sort();
    fields.dedup();
    let series: Vec<(String, Vec<f64>)> = mode_names
        .iter()
        .filter_map(|m| {
            r.overall.get(m).map(|x| {
                (
                    m.clone(),
                    fields
                        .iter()
                        .map(|f| x.per_field.get(f).copied().unwrap_or(f64::NAN))
                        .collect(),
                )
            })
        })
        .collect();
    html.push_str(&grouped_bars(
        "Per-field accuracy by mode",
        &fields,
        &series,
    ));

    // Calibration: confidence bins against the share of right values in them.
    let series: Vec<(String, Vec<super::Bin>)> = mode_names
        .iter()
        .filter_map(|m| {
            r.overall
                .get(m)
                .map(|x| (m.clone(), x.review.calibration.clone()))
        })
        .collect();
    html.push_str(
        "<p>Confidence is the model's probability of each value under the mask (forced \
         tokens count 1; <code>null</code> weighed against the best value start). A \
         calibrated confidence lies on the diagonal: values given 0.7 are right 70% of \
         the time. Each point is a bin of values, its area the bin's size.</p>",
    );
    html.push_str(&calibration(
        "Calibration: confidence against accuracy, by mode",
        &series,
    ));

    // Latency and tokens.
    let per_mode = |f: &dyn Fn(&super::RecordResult) -> f64| -> Vec<(String, Vec<f64>)> {
        modes
            .iter()
            .map(|&m| {
                (
                    m.name().to_string(),
                    r.records.iter().filter(|x| x.mode == m).map(f).collect(),
                )
            })
            .collect()
    };
    html.push_str(&histogram(
        "Latency per record",
        "ms",
        &per_mode(&|x| x.ms as f64),
    ));
    html.push_str(&histogram(
        "Tokens per record (generated + forced)",
        "tokens",
        &per_mode(&|x| (x.tokens_generated + x.tokens_forced) as f64),
    ));

    let _ = write!(
        html,
        "<h2>Table</h2><pre>{}</pre></body></html>\n",
        esc(markdown_table)
    );
    html
}
