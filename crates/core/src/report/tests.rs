//! The report's figures against hand-computed values of tiny run
//! directories written here.

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::replay::Fidelity;
use crate::replay::durable::tests::line;
use crate::replay::point::Lifecycle;

fn metrics(prefix: f64, suffix: f64, standalone: f64, avoided: f64) -> Value {
    json!({
        "shared_prefix_compute_minutes": prefix,
        "episode_suffix_compute_minutes": suffix,
        "standalone_compute_minutes": standalone,
        "effective_compute_minutes": prefix + suffix + standalone,
        "avoided_recompute_minutes": avoided,
        "successful_avoided_recompute_minutes": avoided,
        "episode_group_count": 1, "episode_count": 3, "episode_error_count": 1
    })
}

fn checkpoint(
    epoch: u32,
    elapsed: f64,
    raw: f64,
    novel: f64,
    coverage: usize,
    variants: u64,
) -> Value {
    json!({
        "epoch": epoch, "elapsed_minutes": elapsed, "raw_value_cum": raw,
        "novel_value_cum": novel, "coverage_count_cum": coverage,
        "variant_records_cum": variants, "requested_worker_minutes_cum": elapsed * 2.0,
        "execution_metrics_cum": metrics(0.0, 0.0, 0.0, 0.0)
    })
}

/// `summary.json` of an arm `arm` with the given checkpoints.
fn summary(
    arm: &str,
    budget: Option<f64>,
    elapsed: f64,
    novel: f64,
    checkpoints: Vec<Value>,
) -> Value {
    json!({
        "schema_version": "loopx_explore_harness_arm_v0",
        "arm_key": arm, "budget_minutes": budget, "worker_count": 2,
        "elapsed_minutes": elapsed, "stop_reason": "max_epochs",
        "epoch_count": checkpoints.len(), "record_count": 7,
        "raw_value_total": 13.0, "novel_value_total": novel, "variant_records_total": 3,
        "execution_metrics": metrics(0.01, 0.1, 0.65, 0.01),
        "coverage_count": 2, "coverage_first_seen_minutes": {"readme": 0.5, "license": 1.5},
        "checkpoints": checkpoints,
        "resume": {"schema_version": "loopx_explore_harness_resume_v0", "enabled": true,
                   "resumed": false, "checkpoint_schema_version": "v0",
                   "checkpoint_path": null, "restored_epoch_count": 0},
        "runtime_policy": {"schema_version": "p", "item_failure_policy": "record",
                           "item_exception_isolation": true,
                           "episode_execution": {"mode": "recoverable-v0", "adapter_owned_restore": true},
                           "duration_source": "host", "planner_guidance": {}},
        "adapter": {"path": "a.wasm", "sha256": "ab12", "size_bytes": 10, "protocols": ["legacy"]},
        "host_version": "0.1.0"
    })
}

fn epoch(n: u32, records: u64, specs: Vec<Value>, admitted: usize) -> Value {
    json!({
        "schema_version": "loopx_explore_harness_arm_v0", "epoch": n,
        "epoch_wall_minutes": 0.5, "queue_size": records, "execution_unit_count": 1,
        "record_count": records, "raw_value": 1.0, "novel_value": 1.0,
        "execution_metrics": metrics(0.01 * f64::from(n), 0.05, 0.0, 0.02),
        "frontier": {"requested_lanes": 0, "admitted": admitted, "catalog_pending_after": 0,
                     "specs": specs},
        "lanes": []
    })
}

fn spec(id: &str, family: &str, compile_error: bool) -> Value {
    json!({"spec_id": id, "seed_family": family, "intent": null, "gain": 1.0,
           "compile_error": compile_error})
}

/// The seven records of the tiny run (see [`write_tiny_run`]).
fn tiny_records() -> Vec<Value> {
    vec![
        json!({"item_id": "doc:shared-prefix", "family": "readme", "is_variant": false,
               "record_kind": "shared_prefix", "execution_group_id": "main:epoch-1:group-0001",
               "raw_value": 4.0, "novel_value": 4.0, "duration_minutes": 0.01}),
        json!({"item_id": "doc", "family": "readme", "is_variant": false,
               "record_kind": "episode_suffix", "raw_value": 4.0, "novel_value": 0.0,
               "duration_minutes": 0.02, "replay": {"replay_point_id": "rp-2",
               "error": {"stage": "finalize", "quarantined": true,
                         "message": "finalize said <b>no</b>"}}}),
        json!({"item_id": "doc~s1", "family": "readme", "is_variant": true, "variant_spec_id": "s1",
               "record_kind": "episode_suffix", "raw_value": 3.0, "novel_value": 2.0,
               "duration_minutes": 0.03,
               "replay": {"isolated": true, "replay_point_id": "rp-1", "fork": "state"}}),
        json!({"item_id": "doc~s3", "family": "readme", "is_variant": true, "variant_spec_id": "s3",
               "record_kind": "episode_suffix", "execution_status": "adapter_error",
               "adapter_error": {"type": "replay_risk_denied",
                                 "message": "<script>alert(1)</script>"},
               "raw_value": 0.0, "novel_value": 0.0, "duration_minutes": 0.05,
               "replay": {"isolated": true, "stage": "intent", "error_type": "replay_risk_denied",
                          "risk_assessment": {"disposition": "deny", "policy_id": "size"}}}),
        json!({"item_id": "lic", "family": "license", "is_variant": false,
               "record_kind": "standalone", "raw_value": 2.0, "novel_value": 1.0,
               "duration_minutes": 0.5}),
        json!({"item_id": "lic2", "family": "license", "is_variant": false,
               "execution_status": "adapter_error",
               "adapter_error": {"type": "deadline", "message": "call ran out of time"},
               "duration_minutes": 0.05}),
        json!({"item_id": "s2", "family": "license", "is_variant": true, "variant_spec_id": "s2",
               "execution_status": "adapter_error",
               "adapter_error": {"type": "adapter_error", "kind": "compile", "message": "bad op"},
               "duration_minutes": 0.05}),
    ]
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A two-epoch run: epoch 1 has a group of family `readme` (prefix, seed
/// suffix, an allowed child of spec s1 and a child of s3 denied at intent
/// by policy `size`), epoch 2 two standalone `license` records (one a
/// deadline) and the compile error of spec s2. Two replay points, rp-2
/// quarantined; one failed offline replay.
fn write_tiny_run(dir: &Path, arm: &str, with_replay: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let checkpoints = vec![
        checkpoint(1, 0.5, 11.0, 6.0, 1, 2),
        checkpoint(2, 1.5, 13.0, 7.0, 2, 3),
    ];
    std::fs::write(
        dir.join("summary.json"),
        summary(arm, None, 1.5, 7.0, checkpoints).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        json!({"adapter": {"sha256": "ab12", "path": "a.wasm",
                           "protocols": ["legacy", "recoverable-v0", "replayable-v2",
                                         "isolated-child-v0", "counterfactual-v0", "variants"]},
               "invocations": [{"options": {"workers": 2, "note": "<i>x</i>"}}]})
        .to_string(),
    )
    .unwrap();
    write_lines(
        &dir.join("epochs.jsonl"),
        &[
            epoch(
                1,
                4,
                vec![spec("s1", "readme", false), spec("s3", "readme", false)],
                2,
            ),
            epoch(2, 3, vec![spec("s2", "license", true)], 0),
        ],
    );
    write_lines(&dir.join("records.jsonl"), &tiny_records());
    if with_replay {
        let kept = line("rp-1", Lifecycle::Released);
        let mut quarantined = line("rp-2", Lifecycle::Failed);
        quarantined.point.fidelity = Fidelity::BestEffort;
        quarantined.quarantined = true;
        write_lines(
            &dir.join("replay-points.jsonl"),
            &[
                Value::Object(kept.to_record()),
                Value::Object(quarantined.to_record()),
            ],
        );
        write_lines(
            &dir.join("replays.jsonl"),
            &[
                json!({"item_id": "doc~s1", "succeeded": false, "restored_from": "state",
                     "replay_point": {"replay_point_id": "rp-1", "fidelity": "exact"},
                     "outcome": {"error": {"message": "trap: unreachable"}},
                     "replay_wall_minutes": 0.001}),
            ],
        );
    }
}

fn tiny(with_replay: bool) -> (tempfile::TempDir, RunReport) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    write_tiny_run(&run, "main", with_replay);
    let report = RunReport::load(&run).unwrap();
    (dir, report)
}

#[test]
fn records_are_given_their_epoch_by_position_and_kind_by_record_kind_and_replay() {
    let (_dir, report) = tiny(true);
    let files = load_run(&report.dir).unwrap();
    let epochs: Vec<u32> = files.records.iter().map(|r| r.epoch).collect();
    assert_eq!(epochs, [1, 1, 1, 1, 2, 2, 2]);
    let kinds: Vec<&str> = files.records.iter().map(|r| r.kind.label()).collect();
    assert_eq!(
        kinds,
        [
            "prefix",
            "suffix",
            "child",
            "child",
            "standalone",
            "standalone",
            "standalone"
        ]
    );
}

#[test]
fn the_novelty_curve_follows_the_checkpoints_and_marks_variant_epochs() {
    let (_dir, report) = tiny(true);
    let novel: Vec<f64> = report
        .novelty
        .points
        .iter()
        .map(|p| p.novel_value_cum)
        .collect();
    assert_eq!(novel, [6.0, 7.0]);
    let coverage: Vec<usize> = report
        .novelty
        .points
        .iter()
        .map(|p| p.coverage_cum)
        .collect();
    assert_eq!(coverage, [1, 2]);
    assert_eq!(report.novelty.variant_epochs(), [1]);
    // 0 until 0.5 min, 6 until 1.5, then 7 to the horizon of 2: 6 + 3.5.
    assert_eq!(step_auc(&report.novelty.points, 2.0), 9.5);
    // A horizon before the last point cuts the curve there.
    assert_eq!(step_auc(&report.novelty.points, 1.0), 3.0);
}

#[test]
fn value_by_family_and_the_catalog_yield_sum_the_records() {
    let (_dir, report) = tiny(true);
    let families: Vec<(&str, u64, f64, f64)> = report
        .families
        .iter()
        .map(|f| (f.family.as_str(), f.records, f.raw_value, f.novel_value))
        .collect();
    assert_eq!(
        families,
        [("readme", 4, 11.0, 6.0), ("license", 3, 2.0, 1.0)]
    );
    let readme = &report.spec_yield[1];
    assert_eq!(
        (
            readme.family.as_str(),
            readme.specs_taken,
            readme.compile_errors
        ),
        ("readme", 2, 0)
    );
    assert_eq!((readme.variant_records, readme.variant_errors), (2, 1));
    assert_eq!((readme.novel_value, readme.raw_value), (2.0, 3.0));
    assert_eq!(readme.novel_per_spec(), 1.0);
    let license = &report.spec_yield[0];
    assert_eq!(
        (
            license.specs_taken,
            license.compile_errors,
            license.variant_records,
            license.variant_errors
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn economics_are_each_epochs_execution_metrics() {
    let (_dir, report) = tiny(true);
    let prefix: Vec<f64> = report
        .economics
        .iter()
        .map(|e| e.metrics.shared_prefix_compute_minutes)
        .collect();
    assert_eq!(prefix, [0.01, 0.02]);
    assert_eq!(report.economics[1].metrics.avoided_recompute_minutes, 0.02);
    // The failed child and the two failed standalone records, 0.05 each.
    let charge: Vec<(f64, f64)> = report
        .economics
        .iter()
        .map(|e| {
            (
                e.error_charge.episode_suffix_minutes,
                e.error_charge.standalone_minutes,
            )
        })
        .collect();
    let total: f64 = charge.iter().map(|(s, t)| s + t).sum();
    assert!((total - 0.15).abs() < 1e-12, "{charge:?}");
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(
        page.contains(">error charge<") || page.contains("error charge"),
        "the series is drawn"
    );
    assert!(page.contains("#error charge min") || page.contains("error charge min"));
}

#[test]
fn errors_are_grouped_by_type_with_their_first_examples() {
    let (_dir, report) = tiny(true);
    let classes: Vec<(&str, u64)> = report
        .errors
        .iter()
        .map(|c| (c.class.as_str(), c.count))
        .collect();
    assert_eq!(
        classes,
        [
            ("adapter_error", 1),
            ("deadline", 1),
            ("replay_risk_denied", 1)
        ]
    );
    let deadline = &report.errors[1].examples[0];
    assert_eq!((deadline.item_id.as_str(), deadline.epoch), ("lic2", 2));
    assert_eq!(deadline.message, "call ran out of time");
    assert_eq!(
        report.errors[0].examples[0].kind.as_deref(),
        Some("compile")
    );
    // Only the first three examples of a class are kept.
    let records: Vec<record_facts::RecordFacts> = (0..5)
        .map(|i| {
            let mut record = load::load_run(&report.dir).unwrap().records[5].clone();
            record.item_id = format!("late-{i}");
            record
        })
        .collect();
    let classes = errors_by_class(&records);
    assert_eq!(classes[0].count, 5);
    let ids: Vec<&str> = classes[0]
        .examples
        .iter()
        .map(|e| e.item_id.as_str())
        .collect();
    assert_eq!(ids, ["late-0", "late-1", "late-2"]);
}

#[test]
fn replay_figures_count_points_quarantines_children_and_replays() {
    let (_dir, report) = tiny(true);
    let points = report.replay.points.as_ref().unwrap();
    assert_eq!(points.total, 2);
    assert_eq!(
        points
            .by_fidelity_lifecycle
            .iter()
            .map(|((f, l), n)| (f.as_str(), l.as_str(), *n))
            .collect::<Vec<_>>(),
        [("best_effort", "failed", 1), ("exact", "released", 1)]
    );
    assert_eq!(points.quarantines.len(), 1);
    assert_eq!(points.quarantines[0].replay_point_id, "rp-2");
    assert_eq!(points.quarantines[0].why, "finalize said <b>no</b>");
    let children = &report.replay.children;
    assert_eq!((children.forked, children.succeeded), (2, 1));
    assert_eq!(
        children
            .denied
            .iter()
            .map(|((s, p), n)| (s.as_str(), p.as_str(), *n))
            .collect::<Vec<_>>(),
        [("intent", "size", 1)]
    );
    assert!(children.failed.is_empty());
    assert_eq!(report.replay.replays.len(), 1);
    assert!(!report.replay.replays[0].succeeded);
    assert_eq!(
        report.replay.replays[0].message.as_deref(),
        Some("trap: unreachable")
    );
}

#[test]
fn duration_histograms_bin_each_kind() {
    let (_dir, report) = tiny(true);
    let labels: Vec<(&str, u64)> = report
        .durations
        .iter()
        .map(|h| (h.label.as_str(), h.count))
        .collect();
    // Failed records (one child, two standalone) are charged, not timed:
    // they are left out.
    assert_eq!(
        labels,
        [
            ("prefix", 1),
            ("suffix", 1),
            ("child", 1),
            ("standalone", 1)
        ]
    );
    let lic = load::load_run(&report.dir).unwrap().records[4].clone();
    let records: Vec<record_facts::RecordFacts> = [0.05, 0.05, 0.5]
        .into_iter()
        .map(|minutes| record_facts::RecordFacts {
            duration_minutes: minutes,
            ..lic.clone()
        })
        .collect();
    let histograms = duration_histograms(&records);
    let standalone = &histograms[0];
    assert_eq!(
        (standalone.min, standalone.median, standalone.max),
        (0.05, 0.05, 0.5)
    );
    assert!(!standalone.log_scale, "0.05..0.5 spans a factor of 10");
    assert_eq!(standalone.bins.len(), durations::HISTOGRAM_BINS);
    assert_eq!(standalone.bins[0].count, 2);
    assert_eq!(standalone.bins[15].count, 1);
    assert_eq!(standalone.bins.iter().map(|b| b.count).sum::<u64>(), 3);
    // One value: one bin.
    assert_eq!(report.durations[0].bins.len(), 1);
}

#[test]
fn histograms_go_logarithmic_over_a_wide_span() {
    let h = durations::histogram("x", &[1.0, 10.0, 100.0, 1000.0], 3);
    assert!(h.log_scale);
    let edges: Vec<f64> = h.bins.iter().map(|b| (b.lo * 1e6).round() / 1e6).collect();
    assert_eq!(edges, [1.0, 10.0, 100.0]);
    assert_eq!(
        h.bins.iter().map(|b| b.count).collect::<Vec<_>>(),
        [1, 1, 2]
    );
    assert_eq!(durations::histogram("x", &[], 3).bins, []);
}

#[test]
fn arms_compared_share_one_horizon_and_label_runs_of_the_same_arm_by_directory() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_run(&dir.path().join("a"), "main", false);
    write_tiny_run(&dir.path().join("b"), "main", false);
    write_tiny_run(&dir.path().join("c"), "other", false);
    let runs: Vec<RunReport> = ["a", "b", "c"]
        .iter()
        .map(|name| RunReport::load(&dir.path().join(name)).unwrap())
        .collect();
    let comparison = aggregate_arms(&runs);
    assert_eq!(comparison.horizon_minutes, 1.5);
    let labels: Vec<&str> = comparison.arms.iter().map(|a| a.label.as_str()).collect();
    assert_eq!(labels, ["main (a)", "main (b)", "other"]);
    let row = &comparison.arms[0];
    // 6 from 0.5 to 1.5 min.
    assert_eq!(row.novel_value_auc, 6.0);
    // 7 / (1.5 min * 2 workers).
    assert_eq!(row.novel_value_per_requested_worker_minute, 2.3333);
    // 7 / 0.76 effective minutes.
    assert_eq!(row.novel_value_per_effective_compute_minute, Some(9.2105));
}

#[test]
fn a_run_without_replay_files_renders_saying_so() {
    let (_dir, report) = tiny(false);
    assert_eq!(report.replay.points, None);
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains("no replay points in this run"), "{page}");
    assert!(page.contains("this run was never replayed"));
}

#[test]
fn an_examples_guest_output_is_shown_under_its_message_escaped() {
    let (dir, _) = tiny(true);
    let run = dir.path().join("run");
    let output = run.join("adapter-output");
    std::fs::create_dir_all(&output).unwrap();
    let line = json!({"item_id": "lic2", "call": "execute", "entries": [
        {"stream": "stderr", "text": "Traceback (most recent call last):\n  File \"/0/app.py\", line 7, in execute\nKeyError: '<b>'\n"}
    ]});
    std::fs::write(output.join("epoch-0002.jsonl"), format!("{line}\n")).unwrap();
    let report = RunReport::load(&run).unwrap();
    let deadline = &report.errors[1].examples[0];
    assert_eq!(deadline.item_id, "lic2");
    assert_eq!(deadline.guest_output.len(), 3);
    assert_eq!(deadline.guest_output[2], "KeyError: '<b>'");
    assert!(report.errors[0].examples[0].guest_output.is_empty());
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(
        page.contains("<pre class=\"guest\">Traceback (most recent call last):\n  File &quot;/0/app.py&quot;, line 7, in execute\nKeyError: &#39;&lt;b&gt;&#39;</pre>"),
        "{}",
        &page[page.find("id=\"errors\"").unwrap()..][..1500]
    );
}

#[test]
fn adapter_strings_are_escaped_and_the_page_loads_nothing() {
    let (_dir, report) = tiny(true);
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(
        !page.contains("<script>"),
        "an adapter's message became markup"
    );
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("finalize said &lt;b&gt;no&lt;/b&gt;"));
    assert!(
        page.contains("&lt;i&gt;x&lt;/i&gt;"),
        "manifest options are escaped"
    );
    assert!(page.contains("default-src 'none'"));
    let without_namespace = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!without_namespace.contains("http://") && !without_namespace.contains("https://"));
    let positions: Vec<usize> = html::RUN_SECTIONS
        .iter()
        .map(|heading| {
            page.find(&format!(">{heading}</h2>"))
                .unwrap_or_else(|| panic!("{heading} missing"))
        })
        .collect();
    assert!(
        positions.is_sorted(),
        "sections out of order: {positions:?}"
    );
    // Every chart draws marks.
    let charts = page.matches("<svg").count();
    assert!(charts >= 6, "{charts} charts");
    // Against records (novel value; families and variants) and per epoch.
    assert_eq!(page.matches("<path class=\"series\" d=\"M").count(), 6);
    assert_eq!(
        page.matches("<path class=\"marker\" d=\"M").count(),
        2,
        "epoch 1 in both curves"
    );
    assert!(page.matches("<path class=\"bar\" d=\"M").count() >= 8);
}

#[test]
fn a_distributed_block_is_shown_only_when_the_summary_has_one() {
    let (dir, report) = tiny(false);
    assert!(!html::render_run(&report, &html::Drawing::now()).contains("Distributed run"));
    let path = dir.path().join("run/summary.json");
    let mut summary: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    summary["distributed"] = json!({"units_per_worker": {"w1": 3, "w2": 4}});
    std::fs::write(&path, summary.to_string()).unwrap();
    let report = RunReport::load(&dir.path().join("run")).unwrap();
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains("Distributed run"));
    assert!(page.contains("units_per_worker"));
}

#[test]
fn damaged_or_missing_files_are_named_with_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    write_tiny_run(&run, "main", true);
    let message = |run: &Path| RunReport::load(run).unwrap_err().to_string();

    let mut records = tiny_records();
    records[1]["novel_value"] = json!("lots");
    write_lines(&run.join("records.jsonl"), &records);
    let text = message(&run);
    assert!(
        text.contains("records.jsonl:2: novel_value: expected a number"),
        "{text}"
    );

    std::fs::write(run.join("records.jsonl"), "{}\nnot json\n").unwrap();
    let text = message(&run);
    assert!(text.contains("records.jsonl:2: "), "{text}");

    write_tiny_run(&run.join("emptied"), "main", true);
    std::fs::write(run.join("emptied/epochs.jsonl"), "").unwrap();
    let text = message(&run.join("emptied"));
    assert!(
        text.contains("epochs.jsonl: holds 0 epoch line(s), but ")
            && text.contains("summary.json counts "),
        "{text}"
    );

    std::fs::write(run.join("epochs.jsonl"), "{\"epoch\": \"one\"}\n").unwrap();
    let text = message(&run);
    assert!(
        text.contains("epochs.jsonl:1: epoch: invalid type"),
        "{text}"
    );

    std::fs::write(
        run.join("replay-points.jsonl"),
        "{\"replay_point_id\": 3}\n",
    )
    .unwrap();
    write_tiny_run(&run.join("x"), "main", false);
    std::fs::copy(
        run.join("replay-points.jsonl"),
        run.join("x/replay-points.jsonl"),
    )
    .unwrap();
    let text = message(&run.join("x"));
    assert!(text.contains("replay-points.jsonl:1: "), "{text}");

    // Without summary.json the run is partial, read all the same: its
    // damaged epoch line is still named; without manifest.json it is no run.
    std::fs::remove_file(run.join("summary.json")).unwrap();
    let text = message(&run);
    assert!(
        text.contains("epochs.jsonl:1: epoch: invalid type"),
        "{text}"
    );
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let text = message(&run);
    assert!(text.contains("manifest.json"), "{text}");
}

#[test]
fn long_lists_are_cut_with_a_note_so_a_huge_run_makes_a_small_page() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    let mut records = tiny_records();
    records.extend((0..45).map(|i| {
        json!({"item_id": format!("x{i}"), "family": format!("f{i:02}"), "duration_minutes": 0.1})
    }));
    write_lines(&run.join("records.jsonl"), &records);
    let report = RunReport::load(&run).unwrap();
    assert_eq!(report.families.len(), 47);
    let page = html::render_run(&report, &html::Drawing::now());
    // readme and license (by novel value), then f00..f37 by name.
    assert!(page.contains("the first 40 of 47 families, by novel value, are shown"));
    assert!(page.contains("f37 novel value: 0"));
    assert!(!page.contains("f38 novel value"));
}

/// An evaluated candidate of a `counterfactuals.jsonl` group.
fn evaluated(id: &str, decision: &str, reason: &str, fidelity: &str, equivalent: bool) -> Value {
    json!({"candidate_id": id, "status": "evaluated", "execution_failure": null,
           "execution_result": {"isolated": true},
           "replay_result": {"candidate_id": id, "decision": decision, "reason": reason,
               "failed_fixes": [], "regressed_guards": [], "missing_validations": [],
               "outcomes": [{"validation_id": "rows-kept", "passed": true, "public_summary": "4 of 4"}],
               "restore": {"achieved_fidelity": fidelity, "equivalent": equivalent,
                           "promotion_eligible": equivalent, "prefix_reused": equivalent},
               "addressed_prefix_event_count": 3,
               "verified_reused_prefix_event_count": if equivalent { 3 } else { 0 },
               "replay_distance_events": 4}})
}

/// A line of `counterfactuals.jsonl` for hypothesis `id` of `item`, from
/// point rp-1 (exact, restored from state), with `group` and `error`.
fn counterfactual(id: &str, item: &str, proposed: &[&str], group: Value, error: Value) -> Value {
    let candidates: Vec<Value> = proposed
        .iter()
        .map(|c| json!({"candidate_id": c, "target_branch_id": format!("cf-{c}"), "public_change_set": {}}))
        .collect();
    json!({"schema_version": "sandloop_counterfactual_v0",
           "hypothesis": {"hypothesis_id": id, "item_id": item, "epoch": null,
               "first_affected_event_id": "g/item/5", "first_affected_sequence": 5,
               "minimum_fidelity": "semantic_equivalent", "fix_set": [], "guard_set": [],
               "candidates": candidates},
           "execution_group_id": "main:epoch-1:group-0001",
           "replay_point": {"replay_point_id": "rp-1", "fidelity": "exact", "lifecycle": "ready"},
           "selection": {"fidelity_fallback": false}, "restored_from": "state",
           "snapshot_compile": null, "child_workers": 2, "group": group, "error": error,
           "promoted": [], "wall_minutes": 0.01, "metrics": {}, "release_error": null})
}

/// Two runs of hypothesis `h1` on item `2024-q2`: the first decides four
/// candidates (promoted; rejected for a failed fix and a regressed guard;
/// observed only after a best-effort restore; denied at intent), the
/// second's group failed at restore.
fn counterfactual_lines() -> Vec<Value> {
    let mut rejected = evaluated(
        "drop-rows",
        "rejected",
        "one or more guard targets regressed",
        "exact",
        true,
    );
    rejected["replay_result"]["failed_fixes"] = json!(["amounts-parse"]);
    rejected["replay_result"]["regressed_guards"] = json!(["rows-kept", "totals"]);
    let failed = json!({"candidate_id": "widen-scope", "status": "execution_failed",
        "replay_result": null, "execution_result": null,
        "execution_failure": {"stage": "intent", "error_type": "replay_risk_denied",
            "message": "change outside the declared scope", "risk_assessment": null}});
    let group = json!({"hypothesis_id": "h1", "replay_point_id": "rp-1",
    "parallel_requested": true, "candidate_count": 4, "evaluated_count": 3,
    "execution_failure_count": 1,
    "candidates": [
        evaluated("read-separators", "promoted", "all fix targets passed", "exact", true),
        rejected,
        evaluated("reparse", "observed_only", "restore fidelity is insufficient", "best_effort", false),
        failed,
    ]});
    vec![
        counterfactual(
            "h1",
            "2024-q2",
            &["read-separators", "drop-rows", "reparse", "widen-scope"],
            group,
            Value::Null,
        ),
        counterfactual(
            "h1",
            "2024-q2",
            &["read-separators", "drop-rows"],
            Value::Null,
            json!({"stage": "restore", "type": "restore_failed", "message": "state file is gone"}),
        ),
    ]
}

#[test]
fn counterfactual_lines_are_counted_and_each_candidate_decided() {
    let (dir, _) = tiny(true);
    let run = dir.path().join("run");
    write_lines(&run.join("counterfactuals.jsonl"), &counterfactual_lines());
    let report = RunReport::load(&run).unwrap();
    let figures = report.counterfactuals.as_ref().unwrap();
    assert_eq!(figures.lines.len(), 2);
    assert_eq!(figures.hypotheses, 1, "both lines test h1");
    assert_eq!(figures.candidates, 4, "the failed group decided none");
    assert_eq!(figures.promoted, 1);
    assert_eq!(figures.failed_groups, 1);
    let first = &figures.lines[0];
    assert_eq!(first.item_id, "2024-q2");
    assert_eq!(first.replay_point_id, "rp-1");
    assert_eq!(first.fidelity, Fidelity::Exact);
    assert_eq!(first.restored_from, "state");
    let decisions: Vec<Option<counterfactuals::Decision>> =
        first.candidates.iter().map(|c| c.decision()).collect();
    use counterfactuals::Decision::*;
    assert_eq!(
        decisions,
        [Some(Promoted), Some(Rejected), Some(ObservedOnly), None]
    );
    let second = &figures.lines[1];
    assert!(second.candidates.is_empty());
    assert_eq!(second.proposed, ["read-separators", "drop-rows"]);
    assert_eq!(second.error.as_ref().unwrap().stage, "restore");

    let page = html::render_run(&report, &html::Drawing::now());
    assert!(
        page.contains("hypotheses: 1 (2 runs); candidates run: 4, promoted: 1; groups failed: 1."),
        "{page}"
    );
    assert!(page.contains("from point <code>rp-1</code> (exact fidelity, forked from state)"));
    assert!(page.contains(
        "<td><code>drop-rows</code></td><td>rejected</td><td>one or more guard targets regressed</td>\
<td>amounts-parse</td><td>rows-kept, totals</td><td></td><td>exact, equivalent; 3 of 3 prefix events verified</td>"
    ));
    assert!(page.contains(
        "<td>observed only</td><td>restore fidelity is insufficient</td><td></td><td></td><td></td>\
<td>best_effort, not verified equivalent; 0 of 3 prefix events verified</td>"
    ));
    assert!(page.contains(
        "<td>failed at intent</td><td>replay_risk_denied: change outside the declared scope</td>"
    ));
    assert!(page.contains(
        "The group failed at restore (restore_failed): state file is gone; its 2 candidates were not decided."
    ));
}

#[test]
fn a_real_counterfactual_line_reads_as_promoted_rejected_and_observed_only() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    std::fs::write(
        run.join("counterfactuals.jsonl"),
        include_str!("testdata/counterfactuals.jsonl"),
    )
    .unwrap();
    let report = RunReport::load(&run).unwrap();
    let figures = report.counterfactuals.unwrap();
    assert_eq!(
        (figures.hypotheses, figures.candidates, figures.promoted),
        (1, 3, 1)
    );
    let line = &figures.lines[0];
    assert_eq!(line.hypothesis_id, "q2-thousands-separator");
    assert_eq!(line.item_id, "2024-q2");
    assert_eq!(line.replay_point_id, "rp-1dd0a35fd270a2fb13b2");
    let ids: Vec<(&str, Option<counterfactuals::Decision>)> = line
        .candidates
        .iter()
        .map(|c| (c.candidate_id.as_str(), c.decision()))
        .collect();
    use counterfactuals::Decision::*;
    assert_eq!(
        ids,
        [
            ("read-thousands-separators", Some(Promoted)),
            ("drop-unreadable-rows", Some(Rejected)),
            ("reparse-with-separators", Some(ObservedOnly)),
        ]
    );
}

#[test]
fn counterfactual_strings_from_the_adapter_are_escaped() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    let mut lines = counterfactual_lines();
    let candidate = &mut lines[0]["group"]["candidates"][0];
    candidate["candidate_id"] = json!("<script>id()</script>");
    candidate["replay_result"]["reason"] = json!("<script>reason()</script>");
    candidate["replay_result"]["outcomes"][0]["public_summary"] = json!("<script>s()</script>");
    candidate["replay_result"]["regressed_guards"] = json!(["<b>guard</b>"]);
    lines[0]["hypothesis"]["item_id"] = json!("q2 <img src=x>");
    lines[1]["error"]["message"] = json!("<script>gone()</script>");
    write_lines(&run.join("counterfactuals.jsonl"), &lines);
    let page = html::render_run(&RunReport::load(&run).unwrap(), &html::Drawing::now());
    assert!(
        !page.contains("<script>"),
        "an adapter string became markup"
    );
    assert!(!page.contains("<img") && !page.contains("<b>guard"));
    assert!(page.contains("<code>&lt;script&gt;id()&lt;/script&gt;</code>"));
    assert!(page.contains("&lt;script&gt;reason()&lt;/script&gt;"));
    assert!(page.contains("&lt;b&gt;guard&lt;/b&gt;"));
    assert!(page.contains("q2 &lt;img src=x&gt;"));
    assert!(page.contains("&lt;script&gt;gone()&lt;/script&gt;"));
}

#[test]
fn a_damaged_counterfactual_line_is_named_with_its_line_and_field() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    let message = |lines: &[Value]| {
        write_lines(&run.join("counterfactuals.jsonl"), lines);
        RunReport::load(&run).unwrap_err().to_string()
    };
    let mut lines = counterfactual_lines();
    lines[1]["error"] = Value::Null;
    let text = message(&lines);
    assert!(
        text.contains("counterfactuals.jsonl:2: group: null without an error"),
        "{text}"
    );

    let mut lines = counterfactual_lines();
    lines[0]["group"]["candidates"][1]["replay_result"]["decision"] = json!("maybe");
    let text = message(&lines);
    assert!(
        text.contains("counterfactuals.jsonl:1: group.candidates[1].replay_result.decision: unknown variant `maybe`"),
        "{text}"
    );

    let mut lines = counterfactual_lines();
    lines[0]["group"]["candidates"][2]["replay_result"] = Value::Null;
    let text = message(&lines);
    assert!(
        text.contains("counterfactuals.jsonl:1: group.candidates[2].replay_result: null for an evaluated candidate"),
        "{text}"
    );

    let mut lines = counterfactual_lines();
    lines[1]["replay_point"]["fidelity"] = json!(7);
    let text = message(&lines);
    assert!(
        text.contains("counterfactuals.jsonl:2: replay_point.fidelity: invalid type"),
        "{text}"
    );
}

#[test]
fn sections_a_plain_adapter_cannot_fill_are_left_out_with_one_note() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    let path = run.join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["adapter"]["protocols"] = json!(["legacy"]);
    std::fs::write(&path, manifest.to_string()).unwrap();
    // Records that never ran from a replay point.
    let plain: Vec<Value> = tiny_records()
        .into_iter()
        .map(|mut record| {
            record.as_object_mut().unwrap().remove("replay");
            record
        })
        .collect();
    write_lines(&run.join("records.jsonl"), &plain);
    let page = html::render_run(&RunReport::load(&run).unwrap(), &html::Drawing::now());
    assert!(!page.contains(">Replay</h2>") && !page.contains(">Counterfactual fixes</h2>"));
    assert_eq!(
        page.matches("Not drawn, because this adapter does not export what fills them: Replay (no replay interface); Counterfactual fixes (no counterfactual interface).").count(),
        1,
        "{page}"
    );
    // The catalog's yield has data, so it stays although `variants` is
    // not listed; the other sections are all there.
    assert!(page.contains("Variant catalog yield per spec family"));
    for heading in [
        "Novelty curve",
        "Value by family",
        "Execution economics",
        "Errors by class",
        "Durations",
        "Manifest",
    ] {
        assert!(page.contains(&format!(">{heading}</h2>")), "{heading}");
    }
    // A run with replay data keeps its Replay section whatever it lists.
    let (dir, _) = tiny(true);
    let run = dir.path().join("run");
    let path = run.join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["adapter"]["protocols"] = json!(["legacy"]);
    std::fs::write(&path, manifest.to_string()).unwrap();
    let page = html::render_run(&RunReport::load(&run).unwrap(), &html::Drawing::now());
    assert!(page.contains(">Replay</h2>"));
    assert!(page.contains("them: Counterfactual fixes (no counterfactual interface)."));
}

#[test]
fn short_runs_are_timed_in_seconds_and_long_ones_in_minutes() {
    let (dir, report) = tiny(false);
    // 1.5 minutes.
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains("1.5 min elapsed"), "{page}");
    assert!(page.contains(">wall min<"));
    let path = dir.path().join("run/summary.json");
    let mut summary: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    summary["elapsed_minutes"] = json!(0.0125);
    std::fs::write(&path, summary.to_string()).unwrap();
    let report = RunReport::load(&dir.path().join("run")).unwrap();
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains("0.75 s elapsed"), "{page}");
    assert!(page.contains("compute seconds per epoch") && page.contains(">wall s<"));
    assert!(!page.contains(" 0 min"));
}

#[test]
fn the_curve_against_records_runs_through_every_record_in_file_order() {
    let (_dir, report) = tiny(false);
    let points = &report.novelty.by_record;
    let records = tiny_records();
    assert_eq!(points.len(), records.len() + 1, "0 records, then each");
    assert_eq!(points[0].records, 0);
    let novel: f64 = records
        .iter()
        .map(|r| r["novel_value"].as_f64().unwrap_or(0.0))
        .sum();
    let last = points.last().unwrap();
    assert_eq!(last.records, records.len() as u64);
    assert!((last.novel_value_cum - novel).abs() < 1e-9);
    assert!(
        points
            .windows(2)
            .all(|w| w[0].coverage_cum <= w[1].coverage_cum)
    );
}

#[test]
fn arms_that_differ_in_options_show_them_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    for (name, workers) in [("a", 2), ("b", 4)] {
        write_tiny_run(&dir.path().join(name), "main", false);
        let path = dir.path().join(name).join("manifest.json");
        let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        manifest["invocations"][0]["options"]["workers"] = json!(workers);
        manifest["invocations"][0]["options"]["out"] = json!(name);
        std::fs::write(&path, manifest.to_string()).unwrap();
    }
    let runs: Vec<RunReport> = ["a", "b"]
        .iter()
        .map(|name| RunReport::load(&dir.path().join(name)).unwrap())
        .collect();
    let page = html::render_arms(&runs, &html::Drawing::now());
    let table = &page[page.find("<h3>Options that differ</h3>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(
        table.contains("<th>main (a)</th><th>main (b)</th>"),
        "{table}"
    );
    assert!(table.contains("<td>workers</td><td><span class=\"mono\">2</span></td><td><span class=\"mono\">4</span></td>"), "{table}");
    assert!(!table.contains(">out<"), "out always differs: {table}");
    assert!(
        !table.contains(">note<"),
        "equal options are left out: {table}"
    );
}

#[test]
fn a_run_without_counterfactuals_says_so_and_shows_no_table() {
    let (_dir, report) = tiny(true);
    assert_eq!(report.counterfactuals, None);
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains(">Counterfactual fixes</h2>"));
    assert!(page.contains("no counterfactual replays in this run"));
    assert!(!page.contains("<h3>Hypothesis"));
}

#[test]
fn a_long_candidate_list_is_cut_with_a_note() {
    let (dir, _) = tiny(false);
    let run = dir.path().join("run");
    let candidates: Vec<Value> = (0..45)
        .map(|i| {
            evaluated(
                &format!("c{i:02}"),
                "rejected",
                "a fix failed",
                "exact",
                true,
            )
        })
        .collect();
    let line = counterfactual(
        "h1",
        "q2",
        &[],
        json!({"candidates": candidates}),
        Value::Null,
    );
    write_lines(&run.join("counterfactuals.jsonl"), &[line]);
    let report = RunReport::load(&run).unwrap();
    assert_eq!(report.counterfactuals.as_ref().unwrap().candidates, 45);
    let page = html::render_run(&report, &html::Drawing::now());
    assert!(page.contains("<code>c39</code>"));
    assert!(!page.contains("<code>c40</code>"));
    assert!(page.contains("the first 40 of 45 candidates are shown"));
}

#[test]
fn a_run_given_twice_is_refused_whatever_its_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let twice = [run.clone(), dir.path().join("other/../run")];
    let message = check_distinct_runs(&twice).unwrap_err();
    assert!(
        message.contains("are the same run directory")
            && message.contains(&run.display().to_string()),
        "{message}"
    );
    check_distinct_runs(&[run, other]).unwrap();
}
