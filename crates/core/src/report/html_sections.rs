//! The sections of one run's report page, in page order.

use std::fmt::Write;

use super::RunReport;
use super::counterfactuals::{CandidateEnd, CandidateRow};
use super::escape::escape;
use super::html_parts::{
    TimeUnit, bars, json_text, none, num, raw_novel_bars, section, table, table_of,
};
use super::svg::{Axis, COLORS, Series, line_chart};
use crate::episode::adapter::Protocols;

/// Parts of the page the adapter's protocols cannot fill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Unfilled {
    /// No `replay` interface and no replay data: "Replay" is left out.
    pub replay: bool,
    /// No `counterfactual` interface and no `counterfactuals.jsonl`:
    /// "Counterfactual fixes" is left out.
    pub counterfactuals: bool,
    /// No `variants` interface and no catalog yield: the yield table is
    /// left out.
    pub variants: bool,
}

impl Unfilled {
    /// What `run`'s adapter (its manifest's `adapter.protocols`) cannot
    /// fill and the run did not fill either.
    pub(super) fn of(run: &RunReport) -> Self {
        let protocols = Protocols::from_names(&run.manifest.adapter.protocols);
        let replay = &run.replay;
        Unfilled {
            replay: !protocols.replay
                && replay.points.is_none()
                && replay.children.forked == 0
                && replay.replays.is_empty(),
            counterfactuals: !protocols.counterfactual && run.counterfactuals.is_none(),
            variants: !protocols.variants && run.spec_yield.is_empty(),
        }
    }
}

/// The one note, under the page's title, naming what is not drawn
/// because the adapter cannot fill it, and why.
pub(super) fn unfilled_note(out: &mut String, unfilled: &Unfilled) {
    let mut parts = Vec::new();
    if unfilled.replay {
        parts.push("Replay (no replay interface)");
    }
    if unfilled.counterfactuals {
        parts.push("Counterfactual fixes (no counterfactual interface)");
    }
    if unfilled.variants {
        parts.push("the variant catalog's yield (no variants interface)");
    }
    if !parts.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"explain\">Not drawn, because this adapter does not export what fills them: {}. See the guide's chapter on protocols.</p>",
            escape(&parts.join("; "))
        );
    }
}

/// How many rows (or chart bars) a list shows at most; the rest is
/// counted in a note, so a huge run still makes a small page.
pub(super) const MAX_ROWS: usize = 40;

/// The first [`MAX_ROWS`] of `items`.
fn first<T>(items: &[T]) -> &[T] {
    &items[..items.len().min(MAX_ROWS)]
}

/// The note under a list cut to [`MAX_ROWS`] of `total` `what`.
fn more(out: &mut String, total: usize, what: &str) {
    if total > MAX_ROWS {
        none(
            out,
            &format!("the first {MAX_ROWS} of {total} {what} are shown"),
        );
    }
}

/// Minutes as milliseconds, for durations far below a minute.
fn ms(minutes: f64) -> String {
    format!("{} ms", num(minutes * 60_000.0))
}

/// The novelty curve, against records written and, for a run of more
/// than one epoch, against epochs.
pub(super) fn novelty(out: &mut String, run: &RunReport) {
    section(
        out,
        "novelty",
        "Novelty curve",
        "Cumulative novel value (observation keys seen for the first time), families covered and variant records as records were written and after each epoch; dashed lines mark the epochs in which the variant catalog admitted variants.",
    );
    let curve = &run.novelty;
    if curve.by_record.is_empty() && curve.points.is_empty() {
        none(out, "no records in this run yet");
        return;
    }
    out.push_str("<div class=\"grid2\">");
    if !curve.by_record.is_empty() {
        let points: Vec<CurveAt> = curve
            .by_record
            .iter()
            .map(|p| CurveAt {
                x: p.records as f64,
                novel: p.novel_value_cum,
                families: p.coverage_cum as f64,
                variants: p.variant_records_cum as f64,
            })
            .collect();
        curve_charts(out, ("record", "records"), &points, &[]);
    }
    let points = &curve.points;
    if points.len() > 1 {
        let markers: Vec<f64> = curve.variant_epochs().into_iter().map(f64::from).collect();
        let at: Vec<CurveAt> = points
            .iter()
            .map(|p| CurveAt {
                x: f64::from(p.epoch),
                novel: p.novel_value_cum,
                families: p.coverage_cum as f64,
                variants: p.variant_records_cum as f64,
            })
            .collect();
        curve_charts(out, ("epoch", "epoch"), &at, &markers);
    }
    out.push_str("</div>\n");
    if points.len() <= 1 {
        none(
            out,
            &format!(
                "{} epoch completed: the curves per epoch are drawn from two epochs on",
                points.len()
            ),
        );
    }
}

/// One point of a novelty curve, whatever its x axis counts.
struct CurveAt {
    x: f64,
    novel: f64,
    families: f64,
    variants: f64,
}

/// The two charts of a novelty curve over `x` (`(per, axis label)`):
/// cumulative novel value, and families covered with variant records;
/// dashed `markers` where variants entered.
fn curve_charts(
    out: &mut String,
    (per, x_label): (&str, &str),
    points: &[CurveAt],
    markers: &[f64],
) {
    let series = |label: &str, color, value: fn(&CurveAt) -> f64| Series {
        label: label.to_owned(),
        color,
        points: points.iter().map(|p| (p.x, value(p))).collect(),
    };
    let marker_label = "variants entered in epoch";
    out.push_str(&line_chart(
        &format!("cumulative novel value per {per}"),
        x_label,
        Axis::values("novel value"),
        &[series("novel value", COLORS[0], |p| p.novel)],
        markers,
        marker_label,
    ));
    out.push_str(&line_chart(
        &format!("families covered and variant records per {per}"),
        x_label,
        Axis::counts("count"),
        &[
            series("families covered", COLORS[2], |p| p.families),
            series("variant records", COLORS[3], |p| p.variants),
        ],
        markers,
        marker_label,
    ));
}

/// Value by family and, when `catalog_yield`, the catalog's yield.
pub(super) fn families(out: &mut String, run: &RunReport, catalog_yield: bool) {
    section(
        out,
        "families",
        "Value by family",
        "Raw value (every observation key) against novel value (first-seen keys only) of each family's records.",
    );
    if run.families.is_empty() {
        none(out, "no records in this run");
    } else {
        let shown = first(&run.families);
        let labels: Vec<String> = shown
            .iter()
            .map(|f| {
                if f.family.is_empty() {
                    "(none)".to_owned()
                } else {
                    f.family.clone()
                }
            })
            .collect();
        out.push_str(&raw_novel_bars(
            "raw and novel value per family",
            &labels,
            shown.iter().map(|f| f.raw_value).collect(),
            shown.iter().map(|f| f.novel_value).collect(),
        ));
        more(out, run.families.len(), "families, by novel value,");
    }
    if !catalog_yield {
        return;
    }
    let _ = write!(
        out,
        "<h3>Variant catalog yield per spec family</h3><p class=\"explain\">{}</p>",
        escape(
            "Specs the frontier took from the catalog per seed family, and what their variant records earned."
        )
    );
    table_of(
        out,
        &run.spec_yield,
        "no variant catalog in this run",
        &[
            "seed family",
            "#specs taken",
            "#compile errors",
            "#variant records",
            "#failed",
            "#raw value",
            "#novel value",
            "#novel per spec",
        ],
        |y| {
            vec![
                escape(&y.family),
                y.specs_taken.to_string(),
                y.compile_errors.to_string(),
                y.variant_records.to_string(),
                y.variant_errors.to_string(),
                num(y.raw_value),
                num(y.novel_value),
                num(y.novel_per_spec()),
            ]
        },
    );
}

/// Execution economics per epoch.
pub(super) fn economics(out: &mut String, run: &RunReport) {
    section(
        out,
        "economics",
        "Execution economics",
        "Compute minutes per epoch by kind (shared prefixes prepared once, suffixes run on them, standalone items), the error charge on its own (a failed call is charged at least 0.05 minutes, as the reference does; the chart's kinds are what succeeded, the table's include the charge, as effective minutes do), and the prefix recomputation the groups avoided.",
    );
    if run.economics.is_empty() {
        none(out, "no epoch completed in this run");
        return;
    }
    let m = &run.head.execution_metrics;
    let unit = TimeUnit::for_minutes(run.head.elapsed_minutes.max(m.effective_compute_minutes));
    let categories: Vec<String> = run.economics.iter().map(|e| e.epoch.to_string()).collect();
    let column = |f: fn(&super::EpochEconomics) -> f64| {
        run.economics
            .iter()
            .map(|e| unit.of(f(e)))
            .collect::<Vec<f64>>()
    };
    out.push_str(&bars(
        &format!("compute {} per epoch", unit.name()),
        Axis::values(unit.name()),
        &categories,
        vec![
            (
                "shared prefix",
                column(|e| {
                    (e.metrics.shared_prefix_compute_minutes - e.error_charge.shared_prefix_minutes)
                        .max(0.0)
                }),
            ),
            (
                "suffix",
                column(|e| {
                    (e.metrics.episode_suffix_compute_minutes
                        - e.error_charge.episode_suffix_minutes)
                        .max(0.0)
                }),
            ),
            (
                "standalone",
                column(|e| {
                    (e.metrics.standalone_compute_minutes - e.error_charge.standalone_minutes)
                        .max(0.0)
                }),
            ),
            ("error charge", column(|e| e.error_charge.total_minutes())),
        ],
        true,
    ));
    let t = |minutes: f64| num(unit.of(minutes));
    let mut rows: Vec<Vec<String>> = run
        .economics
        .iter()
        .map(|e| {
            let m = &e.metrics;
            vec![
                e.epoch.to_string(),
                t(e.wall_minutes),
                t(m.effective_compute_minutes),
                t(m.shared_prefix_compute_minutes),
                t(m.episode_suffix_compute_minutes),
                t(m.standalone_compute_minutes),
                t(e.error_charge.total_minutes()),
                t(m.avoided_recompute_minutes),
                t(m.successful_avoided_recompute_minutes),
                m.episode_group_count.to_string(),
            ]
        })
        .collect();
    let charged: f64 = run
        .economics
        .iter()
        .map(|e| e.error_charge.total_minutes())
        .sum();
    rows.push(vec![
        "<b>total</b>".to_owned(),
        t(run.head.elapsed_minutes),
        t(m.effective_compute_minutes),
        t(m.shared_prefix_compute_minutes),
        t(m.episode_suffix_compute_minutes),
        t(m.standalone_compute_minutes),
        t(charged),
        t(m.avoided_recompute_minutes),
        t(m.successful_avoided_recompute_minutes),
        m.episode_group_count.to_string(),
    ]);
    let header: Vec<String> = [
        "wall",
        "effective",
        "shared prefix",
        "suffix",
        "standalone",
        "error charge",
        "avoided",
        "avoided by successes",
    ]
    .iter()
    .map(|name| format!("#{name} {}", unit.symbol()))
    .collect();
    let mut header: Vec<&str> = header.iter().map(String::as_str).collect();
    header.insert(0, "epoch");
    header.push("#groups");
    table(out, &header, &rows);
}

/// Errors by class.
pub(super) fn errors(out: &mut String, run: &RunReport) {
    section(
        out,
        "errors",
        "Errors by class",
        "Failed records by adapter_error.type, with the first examples' item ids, messages and the first lines their calls printed (adapter-output/).",
    );
    let header = ["class", "#records", "first examples"];
    table_of(
        out,
        &run.errors,
        "no failed records in this run",
        &header,
        |class| {
            let examples: Vec<String> = class
                .examples
                .iter()
                .map(|e| {
                    let kind = e
                        .kind
                        .as_deref()
                        .map(|k| format!(" [{}]", escape(k)))
                        .unwrap_or_default();
                    let output = if e.guest_output.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "<pre class=\"guest\">{}</pre>",
                            escape(&e.guest_output.join("\n"))
                        )
                    };
                    format!(
                        "<code>{}</code> (epoch {}){kind}: {}{output}",
                        escape(&e.item_id),
                        e.epoch,
                        escape(&e.message)
                    )
                })
                .collect();
            vec![
                escape(&class.class),
                class.count.to_string(),
                examples.join("<br>"),
            ]
        },
    );
}

/// Replay points, children, snapshots and offline replays (left out of a
/// page whose adapter has no replay protocol: see [`Unfilled`]).
pub(super) fn replay(out: &mut String, run: &RunReport) {
    section(
        out,
        "replay",
        "Replay",
        "Replay points by fidelity and final lifecycle, quarantined points and why, isolated children by how they ended, snapshot costs, and the outcomes of sandloop replay.",
    );
    let figures = &run.replay;
    match &figures.points {
        None => none(out, "no replay points in this run"),
        Some(points) => replay_points(out, points),
    }
    children(out, run);
    out.push_str("<h3>sandloop replay outcomes (replays.jsonl)</h3>");
    let header = [
        "item",
        "outcome",
        "point",
        "fidelity",
        "restored from",
        "#wall",
        "error",
    ];
    table_of(
        out,
        first(&figures.replays),
        "this run was never replayed",
        &header,
        |r| {
            vec![
                format!("<code>{}</code>", escape(&r.item_id)),
                if r.succeeded { "succeeded" } else { "failed" }.to_owned(),
                format!("<code>{}</code>", escape(&r.replay_point_id)),
                escape(&r.fidelity),
                escape(&r.restored_from),
                ms(r.wall_minutes),
                escape(r.message.as_deref().unwrap_or("")),
            ]
        },
    );
    more(out, figures.replays.len(), "replays");
}

/// The outcomes of `sandloop counterfactual`, one table per line (left
/// out of a page whose adapter has no counterfactual protocol: see
/// [`Unfilled`]).
pub(super) fn counterfactuals(out: &mut String, run: &RunReport) {
    section(
        out,
        "counterfactuals",
        "Counterfactual fixes",
        "Each sandloop counterfactual of the run: the hypothesis and its failed item, the replay point its candidates were forked from, and how each candidate was decided (promoted only when every fix passed, no guard regressed and the restore was verified).",
    );
    let Some(figures) = &run.counterfactuals else {
        none(out, "no counterfactual replays in this run");
        return;
    };
    let _ = writeln!(
        out,
        "<p>hypotheses: {} ({} runs); candidates run: {}, promoted: {}; groups failed: {}.</p>",
        figures.hypotheses,
        figures.lines.len(),
        figures.candidates,
        figures.promoted,
        figures.failed_groups,
    );
    for line in first(&figures.lines) {
        let _ = write!(
            out,
            "<h3>Hypothesis <code>{}</code> for item <code>{}</code></h3>\
<p class=\"explain\">from point <code>{}</code> ({} fidelity, forked from {})</p>",
            escape(&line.hypothesis_id),
            escape(&line.item_id),
            escape(&line.replay_point_id),
            line.fidelity.as_str(),
            escape(&line.restored_from),
        );
        if let Some(error) = &line.error {
            let _ = writeln!(
                out,
                "<p>The group failed at {} ({}): {}; its {} candidates were not decided.</p>",
                escape(&error.stage),
                escape(&error.error_type),
                escape(&error.message),
                line.proposed.len(),
            );
        }
        if line.candidates.is_empty() {
            continue;
        }
        let header = [
            "candidate",
            "decision",
            "reason",
            "failed fixes",
            "regressed guards",
            "missing",
            "restore",
        ];
        let rows: Vec<Vec<String>> = first(&line.candidates)
            .iter()
            .map(candidate_cells)
            .collect();
        table(out, &header, &rows);
        more(out, line.candidates.len(), "candidates");
    }
    more(out, figures.lines.len(), "counterfactual runs");
}

/// One candidate's row of the counterfactual table.
fn candidate_cells(candidate: &CandidateRow) -> Vec<String> {
    let id = format!("<code>{}</code>", escape(&candidate.candidate_id));
    let ids = |ids: &[String]| escape(&ids.join(", "));
    match &candidate.end {
        CandidateEnd::Evaluated(result) => vec![
            id,
            result.decision.label().to_owned(),
            escape(&result.reason),
            ids(&result.failed_fixes),
            ids(&result.regressed_guards),
            ids(&result.missing_validations),
            format!(
                "{}, {}; {} of {} prefix events verified",
                result.restore.achieved_fidelity.as_str(),
                if result.restore.equivalent {
                    "equivalent"
                } else {
                    "not verified equivalent"
                },
                result.verified_reused_prefix_event_count,
                result.addressed_prefix_event_count,
            ),
        ],
        CandidateEnd::Failed(failure) => vec![
            id,
            format!("failed at {}", escape(&failure.stage)),
            escape(&format!("{}: {}", failure.error_type, failure.message)),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ],
    }
}

/// Replay points by fidelity and lifecycle, quarantines, snapshot costs.
fn replay_points(out: &mut String, points: &super::replay::PointFigures) {
    let _ = write!(
        out,
        "<h3>Replay points: {} ({} durable)</h3>",
        points.total, points.durable
    );
    let rows: Vec<Vec<String>> = points
        .by_fidelity_lifecycle
        .iter()
        .map(|((fidelity, lifecycle), n)| vec![escape(fidelity), escape(lifecycle), n.to_string()])
        .collect();
    table(out, &["fidelity", "final lifecycle", "#points"], &rows);
    out.push_str("<h3>Quarantines</h3>");
    let header = ["point", "seed item", "lifecycle", "why"];
    table_of(
        out,
        first(&points.quarantines),
        "no point was quarantined",
        &header,
        |q| {
            vec![
                format!("<code>{}</code>", escape(&q.replay_point_id)),
                format!("<code>{}</code>", escape(&q.seed_item_id)),
                escape(&q.lifecycle),
                escape(&q.why),
            ]
        },
    );
    more(out, points.quarantines.len(), "quarantined points");
    let s = &points.snapshots;
    out.push_str("<h3>Snapshot costs</h3>");
    if s.taken == 0 && s.failed == 0 {
        none(
            out,
            "no point was snapshotted (children forked by exported state, or none)",
        );
    } else {
        table(
            out,
            &[
                "#taken",
                "#failed",
                "#snapshot ms",
                "#compile ms",
                "#bytes",
                "#durable bytes",
                "first error",
            ],
            &[vec![
                s.taken.to_string(),
                s.failed.to_string(),
                num(s.snapshot_ms),
                num(s.compile_ms),
                s.bytes.to_string(),
                s.durable_bytes.to_string(),
                escape(s.first_error.as_deref().unwrap_or("")),
            ]],
        );
    }
}

/// Isolated children by how they ended.
fn children(out: &mut String, run: &RunReport) {
    let c = &run.replay.children;
    let _ = write!(out, "<h3>Children: {} forked</h3>", c.forked);
    if c.forked == 0 {
        none(out, "no isolated children in this run");
        return;
    }
    let mut rows = vec![vec![
        "succeeded".to_owned(),
        String::new(),
        c.succeeded.to_string(),
    ]];
    for ((stage, policy), n) in &c.denied {
        rows.push(vec![
            format!("denied by {}", escape(stage)),
            escape(policy),
            n.to_string(),
        ]);
    }
    for (stage, n) in &c.failed {
        rows.push(vec![
            format!("failed at {}", escape(stage)),
            String::new(),
            n.to_string(),
        ]);
    }
    table(out, &["outcome", "policy", "#children"], &rows);
}

/// Duration histograms.
pub(super) fn durations(out: &mut String, run: &RunReport) {
    section(
        out,
        "durations",
        "Durations",
        "How long each kind of record that succeeded took (host-measured duration_minutes, shown in ms; a failed record's duration is its error charge, so failures are left out); bins are logarithmic when durations span more than a factor of 20.",
    );
    if run.durations.is_empty() {
        none(out, "no records in this run");
        return;
    }
    out.push_str("<div class=\"grid2\">");
    for h in &run.durations {
        let categories: Vec<String> = h.bins.iter().map(|b| num(b.lo * 60_000.0)).collect();
        let _ = write!(
            out,
            "<div><h3>{}: {} records, min {}, median {}, max {}</h3>",
            escape(&h.label),
            h.count,
            ms(h.min),
            ms(h.median),
            ms(h.max)
        );
        out.push_str(&bars(
            &format!("{} durations", h.label),
            Axis::counts("records"),
            &categories,
            vec![(
                &format!("{} (bin start, ms)", h.label),
                h.bins.iter().map(|b| b.count as f64).collect(),
            )],
            false,
        ));
        out.push_str("</div>");
    }
    out.push_str("</div>\n");
}

/// The `distributed` block, when a summary has one.
pub(super) fn distributed(out: &mut String, run: &RunReport) {
    let Some(block) = &run.distributed else {
        return;
    };
    section(
        out,
        "distributed",
        "Distributed run",
        "The summary's distributed block (units per worker), as written.",
    );
    let rows: Vec<Vec<String>> = block
        .iter()
        .map(|(key, value)| vec![escape(key), json_text(value)])
        .collect();
    table(out, &["field", "value"], &rows);
}

/// The manifest, at the bottom.
pub(super) fn manifest(out: &mut String, run: &RunReport) {
    section(
        out,
        "manifest",
        "Manifest",
        "Which host and adapter made this run, and every invocation's options (manifest.json).",
    );
    let m = &run.manifest;
    table(
        out,
        &["field", "value"],
        &[
            vec![
                "host".into(),
                escape(&format!("{} {}", m.host.name, m.host.version)),
            ],
            vec!["WIT".into(), escape(&m.wit)],
            vec!["adapter".into(), escape(&m.adapter.path)],
            vec![
                "adapter sha256".into(),
                format!("<code>{}</code>", escape(&m.adapter.sha256)),
            ],
            vec![
                "adapter size".into(),
                format!("{} bytes", m.adapter.size_bytes),
            ],
            vec!["protocols".into(), escape(&m.adapter.protocols.join(", "))],
        ],
    );
    for (i, invocation) in m.invocations.iter().enumerate() {
        let _ = write!(
            out,
            "<h3>Invocation {}{}</h3>",
            i + 1,
            if invocation.resume { " (resume)" } else { "" }
        );
        let mut rows = vec![vec![
            "cwd".to_owned(),
            invocation
                .cwd
                .as_ref()
                .map(|cwd| escape(&cwd.display().to_string()))
                .unwrap_or_default(),
        ]];
        rows.extend(invocation.options.iter().map(|(key, value)| {
            vec![
                escape(key),
                format!("<span class=\"mono\">{}</span>", json_text(value)),
            ]
        }));
        table(out, &["option", "value"], &rows);
    }
    if !m.grants.is_empty() {
        out.push_str("<h3>Directory grants</h3>");
        let rows: Vec<Vec<String>> = m
            .grants
            .iter()
            .map(|(guest, grant)| vec![escape(guest), escape(&grant.host)])
            .collect();
        table(out, &["guest path", "host directory"], &rows);
    }
}
