//! Renders a [`RunReport`] (or several, as arms compared) as one
//! self-contained HTML page: inline CSS, inline SVG charts, no script and
//! no external resource (a Content-Security-Policy forbids both). Every
//! adapter-provided string is escaped.

use std::fmt::Write;

use serde_json::Value;

use super::RunReport;
use super::arms::aggregate_arms;
use super::escape::escape;
use super::html_parts::{TimeUnit, duration, json_text, num, section, table, table_of};
use super::svg::{Axis, COLORS, Series, line_chart};

use super::html_sections as sections;

/// The section headings of one run's page, in page order (the manifest
/// last; "Distributed run" comes before it only when the summary has a
/// `distributed` block). "Replay" and "Counterfactual fixes" are left out
/// when the adapter has no such protocol and the run no such data; the
/// page then says so once, under its title.
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

const STYLE: &str = "body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;\
margin:0 auto;max-width:1800px;padding:16px 32px;color:#222;background:#fff}\
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid #ddd}\
h3{font-size:15px;margin:16px 0 4px}p.explain{color:#555;margin:2px 0 10px}\
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}\
.chart{width:100%;max-width:820px;height:auto;display:block;margin:4px 0}\
.chart text{font-size:12px;fill:#333}.chart .axis{font-size:13px;fill:#555}\
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px 24px}\
.grid2 .chart{max-width:none}.none{color:#777;font-style:italic}\
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

/// `1 epoch`, `2 epochs`.
fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
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
        "<h1>sandloop report: {}</h1><p class=\"explain\">arm <b>{}</b>: {} in {}, \
{}, {} elapsed on {} workers; raw value {}, novel value {}, {} families, {} variant records.</p>",
        escape(&run.dir.display().to_string()),
        escape(&arm.arm_key),
        plural(arm.record_count, "record", "records"),
        plural(arm.epoch_count as u64, "epoch", "epochs"),
        escape(&arm.state.label()),
        duration(arm.elapsed_minutes),
        arm.worker_count,
        num(arm.raw_value_total),
        num(arm.novel_value_total),
        arm.coverage_count,
        arm.variant_records_total,
    );
    let unfilled = sections::Unfilled::of(run);
    sections::unfilled_note(&mut body, &unfilled);
    sections::novelty(&mut body, run);
    sections::families(&mut body, run, !unfilled.variants);
    sections::economics(&mut body, run);
    sections::errors(&mut body, run);
    if !unfilled.replay {
        sections::replay(&mut body, run);
    }
    if !unfilled.counterfactuals {
        sections::counterfactuals(&mut body, run);
    }
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
/// overlaid (each arm its own colour, dash and point shape), the options
/// the arms' runs differ in, and each arm's adapter.
pub fn render_arms(runs: &[RunReport], drawing: &Drawing) -> String {
    let comparison = aggregate_arms(runs);
    let unit = TimeUnit::for_minutes(comparison.horizon_minutes);
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
            "Totals and economics per arm; AUC is the area under the novel-value step curve (value × minutes) to a common horizon of {}, per requested worker minute uses that horizon times the arm's workers.",
            duration(comparison.horizon_minutes)
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
                duration(row.elapsed_minutes),
                escape(&row.stop_reason),
                num(unit.of(m.effective_compute_minutes)),
                num(unit.of(m.avoided_recompute_minutes)),
                num(row.novel_value_per_requested_worker_minute),
                row.novel_value_per_effective_compute_minute
                    .map_or_else(|| "–".to_owned(), num),
            ]
        })
        .collect();
    let effective = format!("#effective {}", unit.symbol());
    let avoided = format!("#avoided {}", unit.symbol());
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
            "#elapsed",
            "stop",
            &effective,
            &avoided,
            "#novel / worker min",
            "#novel / effective min",
        ],
        &rows,
    );
    arms_options(&mut body, &comparison, runs);
    // One series per arm, its points drawn from the arm's run by `points`.
    let overlay = |points: &dyn Fn(&RunReport) -> Vec<(f64, f64)>| -> Vec<Series> {
        comparison
            .arms
            .iter()
            .zip(runs)
            .enumerate()
            .map(|(i, (row, run))| Series {
                label: row.label.clone(),
                color: COLORS[i % COLORS.len()],
                points: points(run),
            })
            .collect()
    };
    let by_record = |value: fn(&super::novelty::RecordPoint) -> f64| {
        overlay(&|run: &RunReport| {
            run.novelty
                .by_record
                .iter()
                .map(|p| (p.records as f64, value(p)))
                .collect()
        })
    };
    let by_epoch = |value: fn(&super::novelty::CurvePoint) -> f64| {
        overlay(&|run: &RunReport| {
            run.novelty
                .points
                .iter()
                .map(|p| (f64::from(p.epoch), value(p)))
                .collect()
        })
    };
    let several_epochs = runs.iter().any(|run| run.novelty.points.len() > 1);
    section(
        &mut body,
        "curves",
        "Novelty curves overlaid",
        "Cumulative novel value and families covered as records were written and, when an arm ran more than one epoch, after each epoch; one line per arm (told apart by colour, dash and point shape).",
    );
    body.push_str("<div class=\"grid2\">");
    let mut overlays = vec![(
        ("record", "records"),
        by_record(|p| p.novel_value_cum),
        by_record(|p| p.coverage_cum as f64),
    )];
    if several_epochs {
        overlays.push((
            ("epoch", "epoch"),
            by_epoch(|p| p.novel_value_cum),
            by_epoch(|p| p.coverage_cum as f64),
        ));
    }
    for ((per, x_label), novel, families) in overlays {
        body.push_str(&line_chart(
            &format!("cumulative novel value per arm, per {per}"),
            x_label,
            Axis::values("novel value"),
            &novel,
            &[],
            "",
        ));
        body.push_str(&line_chart(
            &format!("families covered per arm, per {per}"),
            x_label,
            Axis::counts("families"),
            &families,
            &[],
            "",
        ));
    }
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

/// The table of the `sandloop run` options (each arm's last invocation,
/// as its manifest recorded them) whose values are not the same in every
/// arm; `out`, which always differs, is left out.
fn arms_options(out: &mut String, comparison: &super::ArmsComparison, runs: &[RunReport]) {
    let options: Vec<Option<&serde_json::Map<String, Value>>> = runs
        .iter()
        .map(|run| run.manifest.last_invocation().map(|i| &i.options))
        .collect();
    let keys: std::collections::BTreeSet<&String> = options
        .iter()
        .flatten()
        .flat_map(|map| map.keys())
        .filter(|key| key.as_str() != "out")
        .collect();
    let value = |arm: usize, key: &str| options[arm].and_then(|map| map.get(key));
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|key| (1..runs.len()).any(|arm| value(arm, key) != value(0, key)))
        .collect();
    let mut header = vec!["option".to_owned()];
    header.extend(comparison.arms.iter().map(|row| row.label.clone()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let _ = write!(
        out,
        "<h3>Options that differ</h3><p class=\"explain\">{}</p>",
        escape(
            "The sandloop run options of each arm's last invocation (manifest.json) that are not the same in every arm; a dash: not recorded."
        )
    );
    table_of(
        out,
        &differing,
        "every arm ran with the same options",
        &header,
        |key| {
            let mut cells = vec![escape(key)];
            cells.extend((0..runs.len()).map(|arm| {
                value(arm, key).map_or_else(
                    || "–".to_owned(),
                    |v| format!("<span class=\"mono\">{}</span>", json_text(v)),
                )
            }));
            cells
        },
    );
}
