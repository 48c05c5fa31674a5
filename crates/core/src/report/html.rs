//! Renders a [`RunReport`] (or several, as arms compared) as one
//! self-contained HTML page: inline CSS, inline SVG charts, no script and
//! no external resource (a Content-Security-Policy forbids both). Every
//! adapter-provided string is escaped.

use std::fmt::Write;

use serde_json::Value;

use super::RunReport;
use super::arms::aggregate_arms;
use super::svg::{COLORS, Series, bar_chart, hbar_chart, line_chart, short_number};

use super::html_sections as sections;

/// The section headings of one run's page, in page order (the manifest
/// last; "Distributed run" comes before it only when the summary has a
/// `distributed` block).
pub const RUN_SECTIONS: [&str; 8] = [
    "Novelty curve",
    "Value by family",
    "Execution economics",
    "Errors by class",
    "Replay",
    "Counterfactual fixes",
    "Durations",
    "Manifest",
];

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, safe in element content
/// and in quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;\
margin:0 auto;max-width:1100px;padding:16px 24px;color:#222;background:#fff}\
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid #ddd}\
h3{font-size:15px;margin:16px 0 4px}p.explain{color:#555;margin:2px 0 10px}\
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}\
.chart{max-width:100%;height:auto;display:block;margin:4px 0}\
.chart text{font-size:11px;fill:#333}.chart .axis{font-size:12px;fill:#555}\
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:8px}.none{color:#777;font-style:italic}\
pre.guest{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;margin:4px 0 8px;\
padding:4px 6px;background:#f7f7f7;border-left:3px solid #c33;white-space:pre-wrap;word-break:break-all}\
p.partial{background:#fff4d6;border:1px solid #e0b84c;padding:6px 10px}\
footer{margin-top:32px;color:#777;font-size:12px}";

/// When a page is drawn, and whether it asks the browser to load it
/// again (`sandloop report --watch` rewrites it as the run goes).
#[derive(Clone, Copy, Debug)]
pub struct Drawing {
    /// When the page was drawn (its footer says so, in UTC).
    pub at: std::time::SystemTime,
    /// Seconds after which the browser reloads the page; `None`: never.
    pub refresh_secs: Option<u32>,
}

impl Drawing {
    /// A page drawn now that is not reloaded.
    pub fn now() -> Self {
        Drawing {
            at: std::time::SystemTime::now(),
            refresh_secs: None,
        }
    }
}

/// The page around `body`.
fn page(title: &str, body: &str, drawing: &Drawing) -> String {
    let refresh = drawing
        .refresh_secs
        .map(|secs| format!("<meta http-equiv=\"refresh\" content=\"{secs}\">"))
        .unwrap_or_default();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">{refresh}\
<title>{}</title><style>{STYLE}</style></head><body>\n{body}\n\
<footer>Drawn at {} by sandloop {} from the run directory's files alone.</footer></body></html>\n",
        escape(title),
        humantime::format_rfc3339_seconds(drawing.at),
        env!("CARGO_PKG_VERSION"),
    )
}

/// A section heading with its one-line explanation.
pub(super) fn section(out: &mut String, id: &str, title: &str, explain: &str) {
    let _ = writeln!(
        out,
        "<h2 id=\"{id}\">{}</h2><p class=\"explain\">{}</p>",
        escape(title),
        escape(explain)
    );
}

/// A table: header cells (a leading `#` marks a numeric column) and rows
/// of already-escaped cells.
pub(super) fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    out.push_str("<table><tr>");
    let numeric: Vec<bool> = header.iter().map(|h| h.starts_with('#')).collect();
    for h in header {
        let (class, text) = match h.strip_prefix('#') {
            Some(text) => (" class=\"n\"", text),
            None => ("", *h),
        };
        let _ = write!(out, "<th{class}>{}</th>", escape(text));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if numeric.get(i).copied().unwrap_or(false) {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{cell}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A table of `items`, one row each made by `row`, or the sentence `empty`
/// when there are none.
pub(super) fn table_of<T>(
    out: &mut String,
    items: &[T],
    empty: &str,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) {
    if items.is_empty() {
        none(out, empty);
    } else {
        table(out, header, &items.iter().map(row).collect::<Vec<_>>());
    }
}

/// A paragraph saying there is nothing to show.
pub(super) fn none(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p class=\"none\">{}</p>", escape(text));
}

/// A number cell.
pub(super) fn num(x: f64) -> String {
    short_number(x)
}

/// A JSON value as escaped text (strings without quotes).
pub(super) fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

/// The report of one run.
pub fn render_run(run: &RunReport, drawing: &Drawing) -> String {
    let arm = &run.head;
    let mut body = String::new();
    if arm.state.is_partial() {
        let _ = writeln!(
            body,
            "<p class=\"partial\">A partial run: {} — no <code>summary.json</code> yet. The figures \
are what its files hold now: totals over every record written, the curves and metrics as of its \
last checkpoint.</p>",
            escape(&arm.state.label())
        );
    }
    let _ = writeln!(
        body,
        "<h1>sandloop report: {}</h1><p class=\"explain\">arm <b>{}</b>: {} records in {} epochs, \
{}, {} min elapsed on {} workers; raw value {}, novel value {}, {} families, {} variant records.</p>",
        escape(&run.dir.display().to_string()),
        escape(&arm.arm_key),
        arm.record_count,
        arm.epoch_count,
        escape(&arm.state.label()),
        num(arm.elapsed_minutes),
        arm.worker_count,
        num(arm.raw_value_total),
        num(arm.novel_value_total),
        arm.coverage_count,
        arm.variant_records_total,
    );
    sections::novelty(&mut body, run);
    sections::families(&mut body, run);
    sections::economics(&mut body, run);
    sections::errors(&mut body, run);
    sections::replay(&mut body, run);
    sections::counterfactuals(&mut body, run);
    sections::durations(&mut body, run);
    sections::distributed(&mut body, run);
    sections::manifest(&mut body, run);
    page(
        &format!("sandloop report: {}", run.dir_name()),
        &body,
        drawing,
    )
}

/// Several runs compared as arms: per-arm totals and economics in one
/// table (reference `aggregate_arms`), novelty and coverage curves
/// overlaid, and each arm's adapter.
pub fn render_arms(runs: &[RunReport], drawing: &Drawing) -> String {
    let comparison = aggregate_arms(runs);
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>sandloop report: {} arms compared</h1>",
        runs.len()
    );
    section(
        &mut body,
        "arms",
        "Arms",
        &format!(
            "Totals and economics per arm; AUC is the area under the novel-value step curve to a common horizon of {} min, per requested worker minute uses that horizon times the arm's workers.",
            short_number(comparison.horizon_minutes)
        ),
    );
    let rows: Vec<Vec<String>> = comparison
        .arms
        .iter()
        .zip(runs)
        .map(|(row, run)| {
            let m = &row.execution_metrics;
            vec![
                escape(&row.label),
                escape(&run.dir.display().to_string()),
                num(row.novel_value_endpoint),
                num(row.novel_value_auc),
                num(row.raw_value_total),
                row.coverage_count.to_string(),
                row.variant_records_total.to_string(),
                row.epoch_count.to_string(),
                num(row.elapsed_minutes),
                escape(&row.stop_reason),
                num(m.effective_compute_minutes),
                num(m.avoided_recompute_minutes),
                num(row.novel_value_per_requested_worker_minute),
                row.novel_value_per_effective_compute_minute
                    .map_or_else(|| "–".to_owned(), num),
            ]
        })
        .collect();
    table(
        &mut body,
        &[
            "arm",
            "run directory",
            "#novel value",
            "#novel AUC",
            "#raw value",
            "#families",
            "#variant records",
            "#epochs",
            "#elapsed min",
            "stop",
            "#effective min",
            "#avoided min",
            "#novel / worker min",
            "#novel / effective min",
        ],
        &rows,
    );
    let curves = |value: fn(&super::novelty::CurvePoint) -> f64| -> Vec<Series> {
        comparison
            .arms
            .iter()
            .zip(runs)
            .enumerate()
            .map(|(i, (row, run))| Series {
                label: row.label.clone(),
                color: COLORS[i % COLORS.len()],
                points: run
                    .novelty
                    .points
                    .iter()
                    .map(|p| (f64::from(p.epoch), value(p)))
                    .collect(),
            })
            .collect()
    };
    section(
        &mut body,
        "curves",
        "Novelty curves overlaid",
        "Cumulative novel value and families covered after each epoch, one line per arm.",
    );
    body.push_str("<div class=\"grid2\">");
    body.push_str(&line_chart(
        "cumulative novel value per arm",
        "epoch",
        "novel value",
        &curves(|p| p.novel_value_cum),
        &[],
        "",
    ));
    body.push_str(&line_chart(
        "families covered per arm",
        "epoch",
        "families",
        &curves(|p| p.coverage_cum as f64),
        &[],
        "",
    ));
    body.push_str("</div>\n");
    section(
        &mut body,
        "adapters",
        "Adapters",
        "The component each arm ran (from its manifest.json).",
    );
    let rows: Vec<Vec<String>> = comparison
        .arms
        .iter()
        .zip(runs)
        .map(|(row, run)| {
            vec![
                escape(&row.label),
                format!("<code>{}</code>", escape(&run.manifest.adapter.sha256)),
                escape(&run.manifest.adapter.path),
                escape(&run.manifest.host.version),
            ]
        })
        .collect();
    table(&mut body, &["arm", "adapter sha256", "path", "host"], &rows);
    page("sandloop report: arms compared", &body, drawing)
}

/// `hbar_chart` of raw and novel value per label.
pub(super) fn raw_novel_bars(
    title: &str,
    labels: &[String],
    raw: Vec<f64>,
    novel: Vec<f64>,
) -> String {
    let series = |label: &str, color, values: Vec<f64>| Series {
        label: label.to_owned(),
        color,
        points: values.into_iter().map(|v| (0.0, v)).collect(),
    };
    hbar_chart(
        title,
        labels,
        &[
            series("raw value", COLORS[1], raw),
            series("novel value", COLORS[0], novel),
        ],
    )
}

/// `bar_chart` of named per-category values.
pub(super) fn bars(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: Vec<(&str, Vec<f64>)>,
    stacked: bool,
) -> String {
    let series: Vec<Series> = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, values))| Series {
            label: label.to_owned(),
            color: COLORS[i % COLORS.len()],
            points: values.into_iter().map(|v| (0.0, v)).collect(),
        })
        .collect();
    bar_chart(title, y_label, categories, &series, stacked)
}
