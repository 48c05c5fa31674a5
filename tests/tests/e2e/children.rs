//! Isolated child sessions across the WebAssembly boundary: every variant
//! of a seed forked from the seed's replay point into its own instance, run
//! in parallel, screened by the adapter's risk policy; a child that traps,
//! loops, exhausts its memory or scribbles over it touches nothing but its
//! own record.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{BENCH_ADAPTER, MARKDOWN_EXPLORER, REPLAY_PROBE};

/// Run the probe over one seed (with `seed_faults`) and one variant per
/// `(spec_id, faults)`, children on two workers.
fn children_run(
    dir: &Path,
    seed_faults: &[&str],
    specs: &[(&str, &[&str])],
    extra: &[&str],
) -> (PathBuf, Vec<Value>) {
    let items = write_items(
        dir,
        "items.jsonl",
        &[json!({"item_id": "s", "family": "probe", "text": "seed s", "faults": seed_faults})],
    );
    let specs: Vec<Value> = specs
        .iter()
        .map(|(id, faults)| json!({"spec_id": id, "seed_family": "probe", "faults": faults}))
        .collect();
    let catalog = write_catalog(dir, Value::from(specs));
    let out = dir.join("out");
    let mut args = vec![
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--variants",
        s(&catalog),
        "--out",
        s(&out),
        "--call-timeout",
        "2",
        "--max-memory",
        "64",
    ];
    if !extra.contains(&"--child-workers") {
        args.extend_from_slice(&["--child-workers", "2"]);
    }
    args.extend_from_slice(extra);
    let output = run(&args);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&out);
    (out, records)
}

fn variant<'a>(records: &'a [Value], spec: &str) -> &'a Value {
    find(records, &format!("s~{spec}"), "episode_suffix")
}

fn summary_replay(out: &Path) -> Value {
    json_file(&out.join("summary.json"))["replay"].clone()
}

#[test]
fn hostile_children_cost_their_siblings_and_the_parent_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let specs: &[(&str, &[&str])] = &[
        ("ok-1", &[]),
        ("traps", &["child_traps"]),
        ("loops", &["child_loops"]),
        ("bomb", &["child_memory_bomb"]),
        ("scribbles", &["child_scribbles"]),
        ("fails", &["child_fails"]),
        ("ok-2", &[]),
    ];
    let (out, records) = children_run(dir.path(), &[], specs, &[]);

    let honest = |id: &str, record: &Value| {
        assert!(record.get("adapter_error").is_none(), "{id}: {record}");
        assert_eq!(record["via"], "child", "{id}");
        assert_eq!(
            record["counter_before"], 0,
            "{id}: a fresh fork of the point"
        );
        let replay = &record["replay"];
        assert_eq!(replay["isolated"], true, "{id}");
        assert_eq!(replay["parallel"], true, "{id}");
        assert_eq!(replay["achieved_fidelity"], "exact", "{id}");
        assert_eq!(replay["promotion_eligible"], true, "{id}");
        assert_eq!(replay["child_id"], record["item_id"], "{id}");
        assert_eq!(
            replay["branch_id"], record["item_id"],
            "{id}: its own trace branch"
        );
        assert!(
            replay["end_sequence"].as_u64() > replay["first_sequence"].as_u64(),
            "{id}"
        );
    };
    honest("s", find(&records, "s", "episode_suffix"));
    honest("ok-1", variant(&records, "ok-1"));
    honest("ok-2", variant(&records, "ok-2"));
    let scribbled = variant(&records, "scribbles");
    honest("scribbles", scribbled);
    assert_eq!(
        scribbled["scribbled_bytes"],
        8 << 20,
        "the scribble happened, in its own memory"
    );

    for (spec, error_type) in [
        ("traps", "trap"),
        ("loops", "deadline"),
        ("bomb", "memory_limit"),
        ("fails", "adapter_error"),
    ] {
        let record = variant(&records, spec);
        assert_eq!(
            record["adapter_error"]["type"], error_type,
            "{spec}: {record}"
        );
        assert_eq!(record["replay"]["stage"], "suffix", "{spec}");
        assert_eq!(record["replay"]["isolated"], true, "{spec}");
        assert_eq!(
            record["replay"]["equivalent"], true,
            "{spec}: it forked fine"
        );
    }

    // The parent's state is what was captured, after all of it.
    let points = jsonl(&out.join("replay-points.jsonl"));
    assert_eq!(points.len(), 1);
    assert_eq!(points[0]["lifecycle"], "released");
    assert_eq!(points[0]["quarantined"], false);
    let traces = jsonl(&out.join("traces").join("epoch-0001.jsonl"));
    let released = traces
        .iter()
        .find(|e| e["public_payload"]["stage"] == "group_released")
        .expect("the probe traces its release");
    assert_eq!(
        released["public_payload"]["state_digest"], points[0]["captured_projection_digest"],
        "the parent's digest is unchanged"
    );
    // Each child appended to its own branch, forked after the capture event.
    for record in records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
    {
        let branch = record["item_id"].as_str().unwrap();
        let events: Vec<&Value> = traces.iter().filter(|e| e["branch_id"] == branch).collect();
        assert!(!events.is_empty(), "{branch} traced");
        assert_eq!(
            events[0]["parent_event_id"], points[0]["created_event_id"],
            "{branch}"
        );
    }

    let replay = summary_replay(&out);
    assert_eq!(replay["child_group_attempt_count"], 1);
    assert_eq!(replay["child_group_settled_count"], 1);
    assert_eq!(replay["child_parallel_group_count"], 1);
    assert_eq!(replay["child_session_fork_success_count"], 8);
    assert_eq!(replay["child_session_release_success_count"], 8);
    assert_eq!(replay["child_candidate_success_count"], 4);
    assert_eq!(replay["child_candidate_failure_count"], 4);
    assert_eq!(replay["replay_point_quarantine_count"], 0);
}

#[test]
fn the_risk_policy_screens_intents_and_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let specs: &[(&str, &[&str])] = &[("ok", &[]), ("denied", &["intent_denied"])];
    let (out, records) = children_run(dir.path(), &[], specs, &[]);
    let denied = variant(&records, "denied");
    assert_eq!(
        denied["adapter_error"]["type"], "replay_risk_denied",
        "{denied}"
    );
    assert_eq!(denied["replay"]["stage"], "intent");
    assert_eq!(denied["replay"]["risk_assessment"]["disposition"], "deny");
    assert_eq!(
        denied["replay"]["risk_assessment"]["policy_id"],
        "probe-policy"
    );
    assert!(
        denied.get("via").is_none(),
        "a denied intent never reached run-replay-child"
    );
    let ok = variant(&records, "ok");
    assert_eq!(ok["replay"]["intent_assessment"]["disposition"], "allow");
    assert_eq!(ok["replay"]["outcome_assessment"]["disposition"], "allow");
    let replay = summary_replay(&out);
    assert_eq!(replay["child_intent_denied_count"], 1);
    assert_eq!(replay["child_intent_allowed_count"], 2);

    // A denied outcome quarantines the point and fails the group.
    let dir = tempfile::tempdir().unwrap();
    let specs: &[(&str, &[&str])] = &[("ok", &[]), ("harmful", &["outcome_denied"])];
    let (out, records) = children_run(dir.path(), &[], specs, &[]);
    for record in records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
    {
        assert_eq!(
            record["adapter_error"]["type"], "replay_risk_denied",
            "{record}"
        );
        assert_eq!(record["replay"]["error"]["quarantined"], true);
    }
    let points = jsonl(&out.join("replay-points.jsonl"));
    assert_eq!(points[0]["quarantined"], true);
    assert_eq!(summary_replay(&out)["replay_point_quarantine_count"], 1);
}

#[test]
fn replay_refuses_an_item_whose_intent_the_policy_denied() {
    // The same policy screens `sandloop replay`, from a state point and
    // from a snapshot point alike.
    for fork in ["state", "snapshot"] {
        let dir = tempfile::tempdir().unwrap();
        let specs: &[(&str, &[&str])] = &[("ok", &[]), ("denied", &["intent_denied"])];
        let (out, records) = children_run(dir.path(), &[], specs, &["--fork", fork]);
        let denied = variant(&records, "denied");
        assert_eq!(denied["replay"]["stage"], "intent", "{fork}: {denied}");
        assert_eq!(denied["replay"]["fork"], fork, "{fork}");

        let output = run(&["replay", "--run", s(&out), "--item", "s~denied"]);
        assert_exit(&output, 1, &["denied", "probe-policy"]);
        let report = jsonl(&out.join("replays.jsonl")).pop().unwrap();
        assert_eq!(report["succeeded"], false, "{fork}: {report}");
        let assessment = &report["intent_assessment"];
        assert_eq!(assessment["disposition"], "deny", "{fork}: {report}");
        assert_eq!(assessment["policy_id"], "probe-policy", "{fork}");
        assert_eq!(report["outcome"]["error"]["stage"], "intent", "{fork}");
        assert_eq!(
            report["outcome"]["error"]["type"], "replay_risk_denied",
            "{fork}"
        );
        assert_eq!(report["restore"], Value::Null, "{fork}: nothing restored");
        assert_eq!(
            report["trace_events"],
            json!([]),
            "{fork}: the denied suffix never ran"
        );
        assert_eq!(report["metrics"]["child_intent_denied_count"], 1, "{fork}");

        // An allowed intent replays, its assessment beside the result.
        let report = replay_report(&out, "s~ok");
        assert_eq!(report["succeeded"], true, "{fork}: {report}");
        assert_eq!(report["intent_assessment"]["disposition"], "allow");
        assert_eq!(report["outcome"]["record"]["via"], "replay", "{fork}");
    }
}

#[test]
fn fork_failures_fail_the_group_and_serial_leases_downgrade_it() {
    for (faults, error_type, quarantined) in [
        (&["fork_fails"][..], "adapter_error", false),
        (&["fork_traps"][..], "trap", false),
        (&["child_validate_lies"][..], "replay_contract", false),
        (&["child_release_fails"][..], "adapter_error", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let specs: &[(&str, &[&str])] = &[("ok", &[]), ("bad", faults)];
        let (out, records) = children_run(dir.path(), &[], specs, &[]);
        let suffixes: Vec<&Value> = records
            .iter()
            .filter(|r| r["record_kind"] == "episode_suffix")
            .collect();
        assert_eq!(suffixes.len(), 3);
        for record in suffixes {
            assert_eq!(
                record["adapter_error"]["type"], error_type,
                "{faults:?}: {record}"
            );
            assert_eq!(
                record["replay"]["error"]["quarantined"], quarantined,
                "{faults:?}"
            );
        }
        assert_eq!(
            jsonl(&out.join("replay-points.jsonl"))[0]["quarantined"],
            quarantined,
            "{faults:?}"
        );
        assert_eq!(
            summary_replay(&out)["child_group_failure_count"],
            1,
            "{faults:?}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let specs: &[(&str, &[&str])] = &[("ok", &[]), ("serial", &["child_serial_only"])];
    let (out, records) = children_run(dir.path(), &[], specs, &[]);
    for record in records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
    {
        assert!(record.get("adapter_error").is_none(), "{record}");
        assert_eq!(
            record["replay"]["parallel"], false,
            "one serial-only lease makes the group serial"
        );
    }
    assert_eq!(
        summary_replay(&out)["child_parallel_downgrade_group_count"],
        1
    );

    // Without child workers, each suffix runs from the point in the parent.
    let dir = tempfile::tempdir().unwrap();
    let (_, records) = children_run(dir.path(), &[], &[("ok", &[])], &["--child-workers", "0"]);
    let ok = variant(&records, "ok");
    assert_eq!(ok["via"], "replay");
    assert!(ok["replay"].get("isolated").is_none());
}

#[test]
fn markdown_explorer_runs_variants_as_children_and_denies_oversized_edits() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    for entry in
        std::fs::read_dir(workspace_file("examples/markdown-explorer/sample-docs")).unwrap()
    {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), docs.join(entry.file_name())).unwrap();
        }
    }
    std::fs::write(
        docs.join("LICENSE.md"),
        "# License\n\nPermission is granted.\n",
    )
    .unwrap();
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
    // The same policy screens children forked by state and by snapshot.
    for fork in ["state", "snapshot"] {
        check_screened_children(dir.path(), &grant, &catalog, fork);
    }
}

fn check_screened_children(dir: &Path, grant: &str, catalog: &Path, fork: &str) {
    let out = dir.join(fork);
    let output = run(&[
        "run",
        "--adapter",
        MARKDOWN_EXPLORER,
        "--dir",
        grant,
        "--variants",
        s(catalog),
        "--child-workers",
        "2",
        "--fork",
        fork,
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{fork}: {}", stderr(&output));
    let records = records(&out);
    let variants: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix" && r["is_variant"] == true)
        .collect();
    assert!(variants.len() >= 4);
    let denied: Vec<&&Value> = variants
        .iter()
        .filter(|r| r.get("adapter_error").is_some())
        .collect();
    assert_eq!(denied.len(), 1, "{fork}: only the oversized edit is denied");
    assert_eq!(denied[0]["variant_spec_id"], "license-duplicate-eight");
    assert_eq!(denied[0]["adapter_error"]["type"], "replay_risk_denied");
    assert_eq!(
        denied[0]["replay"]["risk_assessment"]["policy_id"],
        "edit-size-budget"
    );
    for record in variants.iter().filter(|r| r.get("adapter_error").is_none()) {
        assert_eq!(record["replay"]["isolated"], true, "{record}");
        assert_eq!(record["replay"]["fork"], fork, "{record}");
        assert_eq!(record["replay"]["achieved_fidelity"], "exact");
        assert_eq!(
            record["replay"]["outcome_assessment"]["policy_id"],
            "document-growth"
        );
    }
    assert!(!records.iter().any(has_absolute_path));

    // A child's item replays later from the durable point its parent held.
    let child = variants
        .iter()
        .find(|r| r.get("adapter_error").is_none())
        .unwrap();
    let report = replay_report(&out, child["item_id"].as_str().unwrap());
    assert_eq!(
        report["replay_point"]["replay_point_id"],
        child["replay"]["replay_point_id"]
    );
    assert_eq!(
        report["outcome"]["record"]["observation_keys"],
        child["observation_keys"]
    );
}

#[test]
fn snapshot_forks_run_each_child_in_its_own_copy_of_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let specs: &[(&str, &[&str])] = &[
        ("ok-1", &[]),
        ("traps", &["suffix_traps"]),
        ("scribbles", &["child_scribbles"]),
        ("fails", &["suffix_fails"]),
        ("ok-2", &[]),
    ];
    let (out, records) = children_run(dir.path(), &[], specs, &["--fork", "snapshot"]);
    // A child that scribbles over the heap it inherited from the parent
    // returns normally; its siblings (run after it) start from the point.
    let scribbled = variant(&records, "scribbles");
    assert!(scribbled.get("adapter_error").is_none(), "{scribbled}");
    assert!(scribbled["scribbled_bytes"].as_u64().unwrap() >= 1 << 20);
    let seed = find(&records, "s", "episode_suffix");
    for (id, record) in [
        ("s", seed),
        ("ok-1", variant(&records, "ok-1")),
        ("ok-2", variant(&records, "ok-2")),
    ] {
        assert!(record.get("adapter_error").is_none(), "{id}: {record}");
        assert_eq!(
            record["via"], "replay",
            "{id}: the suffix ran on the resumed binding"
        );
        assert_eq!(
            record["counter_before"], seed["counter_before"],
            "{id}: every child starts from the point, unseen by its siblings"
        );
        let replay = &record["replay"];
        assert_eq!(replay["fork"], "snapshot", "{id}");
        assert_eq!(replay["isolated"], true, "{id}");
        assert_eq!(replay["achieved_fidelity"], "exact", "{id}");
        assert_eq!(replay["promotion_eligible"], true, "{id}");
        assert_eq!(replay["branch_id"], record["item_id"], "{id}");
    }
    for (spec, error_type) in [("traps", "trap"), ("fails", "adapter_error")] {
        let record = variant(&records, spec);
        assert_eq!(
            record["adapter_error"]["type"], error_type,
            "{spec}: {record}"
        );
        assert_eq!(record["replay"]["stage"], "suffix", "{spec}");
        assert_eq!(record["replay"]["fork"], "snapshot", "{spec}");
    }
    let points = jsonl(&out.join("replay-points.jsonl"));
    assert_eq!(points.len(), 1);
    let snapshot = &points[0]["snapshot"];
    assert!(snapshot["bytes"].as_u64().unwrap() > 64 << 10, "{snapshot}");
    assert_eq!(snapshot["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(points[0]["quarantined"], false);
    let replay = summary_replay(&out);
    assert_eq!(replay["child_session_fork_success_count"], 6, "{replay}");
    assert_eq!(replay["child_session_release_success_count"], 6, "{replay}");

    let totals = &json_file(&out.join("summary.json"))["snapshots"];
    assert_eq!(totals["taken"], 1, "{totals}");
    assert_eq!(totals["failed"], 0, "{totals}");
    assert_eq!(totals["bytes"], snapshot["bytes"], "{totals}");
    assert_eq!(totals["durable_bytes"], snapshot["bytes"], "{totals}");

    // The snapshot is the point's durable form, not an exported state.
    let durable = &points[0]["durable_state"];
    assert_eq!(durable["kind"], "snapshot", "{durable}");
    assert_eq!(durable["sha256"], snapshot["sha256"]);
    assert_eq!(durable["size_bytes"], snapshot["bytes"]);
    assert!(durable["binding_token"].as_u64().is_some(), "{durable}");
    let file = out.join(durable["file"].as_str().unwrap());
    assert!(file.extension().is_some_and(|e| e == "wasm"), "{file:?}");
    assert!(!out.join("replay-points").read_dir().unwrap().any(|entry| {
        entry
            .unwrap()
            .path()
            .extension()
            .is_some_and(|e| e == "bin" || e == "pack")
    }));

    // A later process replays a child's item from that snapshot: the
    // instance starts as the parent was at the capture, the binding is
    // resumed by its token and checked against the captured digest.
    for (round, id) in ["ok-2", "ok-1"].into_iter().enumerate() {
        let child = variant(&records, id);
        let report = replay_report(&out, child["item_id"].as_str().unwrap());
        assert_eq!(report["restored_from"], "snapshot", "{report}");
        assert!(report["snapshot_compile"]["compile_ms"].as_f64().unwrap() > 0.0);
        assert_eq!(report["restore"]["achieved_fidelity"], "exact", "{report}");
        assert_eq!(report["restore"]["equivalent"], true, "{report}");
        let record = &report["outcome"]["record"];
        assert_eq!(record["via"], "replay", "{id}: {record}");
        assert_eq!(
            record["counter_before"], seed["counter_before"],
            "{id}: the replay starts from the point, whatever ran since"
        );
        assert_eq!(
            record["observation_keys"], child["observation_keys"],
            "{id}"
        );
        assert_eq!(
            jsonl(&out.join("replays.jsonl")).len(),
            round + 1,
            "one line per replay"
        );
    }

    // A snapshot file changed after the run is refused by name.
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let output = run(&["replay", "--run", s(&out), "--item", "s~ok-1"]);
    assert_exit(&output, 2, &["was changed after the run wrote it"]);
}

#[test]
fn a_point_that_cannot_be_snapshotted_runs_as_it_would_by_state() {
    // replay-probe exports child-risk, which screens children on the
    // exported state; a seed whose state cannot be exported forks no
    // children by state, and none by snapshot either: its suffixes run
    // from the point in the parent, and the failure is reported.
    let mut runs = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    for fork in ["snapshot", "state"] {
        let here = dir.path().join(fork);
        std::fs::create_dir(&here).unwrap();
        let (out, records) = children_run(
            &here,
            &["export_none"],
            &[("a", &[]), ("b", &[])],
            &["--fork", fork],
        );
        for record in records
            .iter()
            .filter(|r| r["record_kind"] == "episode_suffix")
        {
            assert!(record.get("adapter_error").is_none(), "{fork}: {record}");
            assert_eq!(record["via"], "replay", "{fork}: ran from the point");
            assert!(record["replay"].get("fork").is_none(), "{fork}: {record}");
        }
        let summary = json_file(&out.join("summary.json"));
        // No child forked: the group ran serially from the point, and is
        // counted as such (reference `run_child_group_from`).
        let replay = &summary["replay"];
        assert_eq!(replay["child_group_attempt_count"], 1, "{fork}: {replay}");
        assert_eq!(replay["child_serial_fallback_group_count"], 1, "{fork}");
        assert_eq!(replay["child_group_success_count"], 1, "{fork}");
        assert_eq!(replay["child_group_failure_count"], 0, "{fork}");
        assert_eq!(replay["child_session_fork_attempt_count"], 0, "{fork}");
        let points = jsonl(&out.join("replay-points.jsonl"));
        if fork == "snapshot" {
            let why = points[0]["snapshot_error"].as_str().unwrap();
            assert!(why.contains("export-replay-state gave none"), "{why}");
            assert_eq!(summary["snapshots"]["failed"], 1, "{summary}");
            assert_eq!(summary["snapshots"]["taken"], 0, "{summary}");
        } else {
            assert!(summary.get("snapshots").is_none(), "{summary}");
        }
        runs.push(
            records
                .into_iter()
                .map(|mut record| {
                    let map = record.as_object_mut().unwrap();
                    map.remove("duration_minutes");
                    if let Some(Value::Object(replay)) = map.get_mut("replay") {
                        replay.retain(|key, _| !key.ends_with("_minutes"));
                    }
                    (map["item_id"].as_str().unwrap().to_string(), record)
                })
                .collect(),
        );
    }
    assert_same_records(&runs[0], &runs[1], "snapshot against state");
}

#[test]
fn groups_run_serially_with_no_child_workers_count_as_serial_fallbacks() {
    // `--child-workers 0`: each group's suffixes run from its point in the
    // parent, one after another; a group with a failed suffix is a failed
    // group attempt.
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            json!({"item_id": "good", "family": "good", "text": "seed"}),
            json!({"item_id": "bad", "family": "bad", "text": "seed"}),
        ],
    );
    let catalog = write_catalog(
        dir.path(),
        json!([
            {"spec_id": "gv", "seed_family": "good"},
            {"spec_id": "bv", "seed_family": "bad", "faults": ["suffix_fails"]},
        ]),
    );
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--variants",
        s(&catalog),
        "--child-workers",
        "0",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&out);
    assert!(
        find(&records, "bad~bv", "episode_suffix")
            .get("adapter_error")
            .is_some()
    );
    let good = find(&records, "good~gv", "episode_suffix");
    assert_eq!(good["via"], "replay", "{good}");
    assert_eq!(good["replay"]["isolated"], Value::Null, "{good}");
    let replay = summary_replay(&out);
    assert_eq!(replay["child_group_attempt_count"], 2, "{replay}");
    assert_eq!(replay["child_serial_fallback_group_count"], 2, "{replay}");
    assert_eq!(replay["child_group_success_count"], 1, "{replay}");
    assert_eq!(replay["child_group_failure_count"], 1, "{replay}");
    assert_eq!(replay["child_session_fork_attempt_count"], 0, "{replay}");
}

#[test]
fn a_lane_snapshotting_group_after_group_stays_inside_its_memory_and_disk_budgets() {
    // Every snapshot leaves a 64 KiB page per memory read behind in the
    // parent (wizer's accessors), and memories never shrink: under a 2 MiB
    // limit, replay-probe's parent runs out after about a dozen snapshots
    // unless the host replaces it between groups.
    let dir = tempfile::tempdir().unwrap();
    let seeds: Vec<Value> = (1..=24)
        .map(|i| json!({"item_id": format!("s{i}"), "family": format!("f{i}"), "text": "seed"}))
        .collect();
    let items = write_items(dir.path(), "items.jsonl", &seeds);
    let specs: Vec<Value> = (1..=24)
        .map(|i| json!({"spec_id": format!("v{i}"), "seed_family": format!("f{i}")}))
        .collect();
    let catalog = write_catalog(dir.path(), Value::from(specs));
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--variants",
        s(&catalog),
        "--fork",
        "snapshot",
        "--max-memory",
        "2",
        "--max-durable-snapshots",
        "1",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let points = jsonl(&out.join("replay-points.jsonl"));
    assert_eq!(points.len(), 24);
    let (mut kept, mut by_state) = (0, 0);
    for point in &points {
        assert!(point.get("snapshot_error").is_none(), "{point}");
        // Past the budget, the probe's exported state keeps the point
        // durable instead of its snapshot.
        assert!(point["durable_error"].is_null(), "{point}");
        if point["durable_state"]["kind"] == "snapshot" {
            kept += point["durable_state"]["size_bytes"].as_u64().unwrap();
        } else {
            assert_eq!(point["durable_state"]["kind"], "state", "{point}");
            by_state += 1;
        }
    }
    assert!(by_state > 0, "some points were past the budget");
    // Each snapshot is ~300 KB: a few are kept, within the 1 MiB budget.
    assert!(kept > 0 && kept <= 1 << 20, "{kept} bytes kept");
    let on_disk: u64 = std::fs::read_dir(out.join("replay-points"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "wasm"))
        .map(|path| std::fs::metadata(path).unwrap().len())
        .sum();
    assert_eq!(on_disk, kept);
    let records = records(&out);
    let children: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
        .collect();
    assert_eq!(children.len(), 48);
    for record in children {
        assert!(record.get("adapter_error").is_none(), "{record}");
        assert_eq!(record["replay"]["fork"], "snapshot", "{record}");
    }
}

#[test]
fn markdown_explorer_gives_the_same_records_forked_by_snapshot_or_by_state() {
    let dir = tempfile::tempdir().unwrap();
    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
    let mut runs = Vec::new();
    for fork in ["snapshot", "state"] {
        let out = dir.path().join(fork);
        let output = run(&[
            "run",
            "--adapter",
            MARKDOWN_EXPLORER,
            "--dir",
            &grant,
            "--variants",
            s(&catalog),
            "--epochs",
            "2",
            "--fork",
            fork,
            "--out",
            s(&out),
        ]);
        assert_eq!(code(&output), 0, "{fork}: {}", stderr(&output));
        // What legitimately differs: timings and the fork. The risk
        // policy screens snapshot children as it screens state forks.
        let comparable: std::collections::BTreeMap<String, Value> = records(&out)
            .into_iter()
            .map(|mut record| {
                let map = record.as_object_mut().unwrap();
                map.remove("duration_minutes");
                if let Some(Value::Object(replay)) = map.get_mut("replay") {
                    replay.retain(|key, _| !key.ends_with("_minutes") && key != "fork");
                }
                (map["item_id"].as_str().unwrap().to_string(), record)
            })
            .collect();
        runs.push(comparable);
    }
    let (snapshot, state) = (&runs[0], &runs[1]);

    let children = snapshot
        .values()
        .filter(|record| record["replay"]["isolated"] == true)
        .count();
    assert!(children >= 10, "variants ran as children: {children}");
    let screened = |outcome: &str| {
        snapshot
            .values()
            .filter(|record| record["replay"][outcome]["policy_id"].is_string())
            .count()
    };
    assert_eq!(screened("intent_assessment"), children, "every intent");
    let denied = snapshot
        .values()
        .filter(|record| record["adapter_error"]["type"] == "replay_risk_denied")
        .count();
    assert_eq!(screened("outcome_assessment"), children - denied);
    assert_same_records(snapshot, state, "forked by snapshot against by state");
}

#[test]
fn explicit_forks_are_refused_where_there_is_nothing_to_fork() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "family": "f", "text": "hello"})],
    );
    for (adapter, extra, expected) in [
        (
            sandloop_tests::HELLO_ADAPTER,
            &["--fork", "snapshot"][..],
            "does not export `replay`",
        ),
        (
            REPLAY_PROBE,
            &["--fork", "snapshot", "--child-workers", "0"][..],
            "--child-workers 1 or more",
        ),
        (
            REPLAY_PROBE,
            &["--fork", "snapshot", "--no-replay"][..],
            "needs replay",
        ),
        (
            REPLAY_PROBE,
            &["--fork", "state", "--child-workers", "0"][..],
            "--fork state forks children",
        ),
        (
            REPLAY_PROBE,
            &["--fork", "state", "--no-replay"][..],
            "--fork state forks children",
        ),
        (
            sandloop_tests::HELLO_ADAPTER,
            &["--fork", "state"][..],
            "--fork state: ",
        ),
    ] {
        let out = dir.path().join("out");
        let mut args = vec!["run", "--adapter", adapter, "--items", s(&items)];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", s(&out)]);
        assert_exit(&run(&args), 2, &[expected]);
        assert!(!out.exists(), "{extra:?}: nothing is written");
    }
}

#[test]
fn bench_adapter_children_honour_the_contract_in_chunks_on_two_workers() {
    // bench-adapter's no-op replay exports, through the real CLI: one seed
    // and 40 variants (two child groups of at most 32), forked by state
    // transfer and by snapshot, each child in its own instance started
    // ahead on the two workers.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![json!({"item_id": "s", "family": "f", "text": "seed"})];
    lines.extend((0..40).map(|v| {
        json!({"item_id": format!("s~v{v}"), "family": "f", "is_variant": true,
               "seed_item_id": "s", "variant_spec": {"spec_id": format!("v{v}")}})
    }));
    let items = write_items(dir.path(), "items.jsonl", &lines);
    for fork in ["state", "snapshot"] {
        let out = dir.path().join(fork);
        let output = run(&[
            "run",
            "--adapter",
            BENCH_ADAPTER,
            "--items",
            s(&items),
            "--child-workers",
            "2",
            "--fork",
            fork,
            "--out",
            s(&out),
        ]);
        assert_eq!(code(&output), 0, "{fork}: {}", stderr(&output));
        let records = records(&out);
        let children: Vec<&Value> = records
            .iter()
            .filter(|r| r["record_kind"] == "episode_suffix")
            .collect();
        assert_eq!(children.len(), 41, "{fork}: every item ran as a child");
        for record in &children {
            assert!(record.get("adapter_error").is_none(), "{fork}: {record}");
            assert_eq!(record["accepted"], true, "{fork}: {record}");
            let replay = &record["replay"];
            assert_eq!(replay["isolated"], true, "{fork}: {replay}");
            assert_eq!(replay["parallel"], true, "{fork}: {replay}");
            assert_eq!(replay["fork"], fork, "{fork}: {replay}");
            assert_eq!(replay["achieved_fidelity"], "exact", "{fork}: {replay}");
            assert_eq!(replay["equivalent"], true, "{fork}: {replay}");
            assert_eq!(replay["promotion_eligible"], true, "{fork}: {replay}");
            assert_eq!(replay["child_id"], record["item_id"], "{fork}");
        }
        let replay = summary_replay(&out);
        assert_eq!(replay["child_group_attempt_count"], 2, "{fork}: {replay}");
        assert_eq!(replay["child_parallel_group_count"], 2, "{fork}: {replay}");
        for key in [
            "child_session_fork_success_count",
            "child_session_release_success_count",
            "child_intent_allowed_count",
            "child_outcome_allowed_count",
        ] {
            assert_eq!(replay[key], 41, "{fork}: {key}: {replay}");
        }
        assert_eq!(replay["replay_point_quarantine_count"], 0, "{fork}");
    }
}
