//! Replay points across the WebAssembly boundary: capture after each
//! prefix, every suffix restored from its point, durable points replayed by
//! `sandloop replay` in a new process, every contract rule checked with the
//! `replay-probe` component, and `sandloop plan` over a run.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, MARKDOWN_EXPLORER, REPLAY_PROBE};

fn markdown_run(out: &Path) {
    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
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
        "--workers",
        "2",
        "--child-workers",
        "0",
        "--out",
        s(out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("replay "), "{}", stdout(&output));
}

#[test]
fn markdown_explorer_captures_exact_durable_points_and_replays_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    markdown_run(&out);

    let records = records(&out);
    let prefixes: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "shared_prefix")
        .collect();
    let suffixes: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
        .collect();
    assert!(!prefixes.is_empty() && suffixes.len() > prefixes.len());
    for prefix in &prefixes {
        assert_eq!(prefix["replay_fidelity"], "exact", "{prefix}");
        assert!(
            prefix["replay_point_id"]
                .as_str()
                .unwrap()
                .starts_with("rp-")
        );
    }
    for suffix in &suffixes {
        let replay = &suffix["replay"];
        assert_eq!(replay["achieved_fidelity"], "exact", "{suffix}");
        assert_eq!(replay["equivalent"], true);
        assert_eq!(replay["promotion_eligible"], true);
        assert_eq!(replay["prefix_reused"], true);
        assert_eq!(replay["expected_digest"], replay["observed_digest"]);
        assert_eq!(replay["trace_id"], suffix["execution_group_id"]);
        let prefix = prefixes
            .iter()
            .find(|p| p["execution_group_id"] == suffix["execution_group_id"])
            .unwrap();
        assert_eq!(replay["replay_point_id"], prefix["replay_point_id"]);
        assert!(
            replay["end_sequence"].as_u64() > replay["first_sequence"].as_u64(),
            "every suffix leaves trace events: {replay}"
        );
    }

    let points = jsonl(&out.join("replay-points.jsonl"));
    assert_eq!(points.len(), prefixes.len());
    for point in &points {
        assert_eq!(point["lifecycle"], "released");
        assert_eq!(point["quarantined"], false);
        assert_eq!(point["fidelity"], "exact");
        let durable = &point["durable_state"];
        assert_eq!(durable["file"], "replay-points/states.pack", "{durable}");
        let (bytes, items) = durable_bytes(&out, durable);
        assert_eq!(bytes.len() as u64, durable["size_bytes"].as_u64().unwrap());
        let items: Vec<Value> = serde_json::from_slice(&items).unwrap();
        assert!(
            items
                .iter()
                .any(|item| item["item_id"] == point["seed_item_id"]),
            "the group's items hold its seed: {durable}"
        );
        assert!(!has_absolute_path(point), "{point}");
        for key in ["binding", "binding_key", "agent_state_key"] {
            assert!(point.get(key).is_none(), "{key} must never be written");
        }
    }
    // The capture event sits in the group's trace, bound to its point.
    let traces = jsonl(&out.join("traces").join("epoch-0001.jsonl"));
    let captured: Vec<&Value> = traces
        .iter()
        .filter(|e| e["public_payload"]["operation"] == "replay_point_captured")
        .collect();
    assert!(!captured.is_empty());
    for event in &captured {
        let point = points
            .iter()
            .find(|p| p["replay_point_id"] == event["replay_point_id"])
            .expect("the event names a recorded point");
        assert_eq!(point["created_event_id"], event["event_id"]);
        assert_eq!(point["next_sequence"], event["sequence"]);
    }

    let summary = json_file(&out.join("summary.json"));
    let replay = &summary["replay"];
    let n = |field: &str| replay[field].as_u64().unwrap() as usize;
    assert_eq!(n("capture_success_count"), prefixes.len());
    assert_eq!(n("replay_success_count"), suffixes.len());
    assert_eq!(n("equivalence_verified_count"), suffixes.len());
    assert_eq!(n("release_success_count"), prefixes.len());
    assert_eq!(n("replay_failure_count"), 0);
    assert_eq!(replay["restored_fidelity_counts"]["exact"], suffixes.len());

    // A new process restores the durable point and runs the suffix again.
    let variant = suffixes.iter().find(|r| r["is_variant"] == true).unwrap();
    let item = variant["item_id"].as_str().unwrap();
    let output = run(&["replay", "--run", s(&out), "--item", item]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("exact, verified equivalent, promotion eligible"),
        "{text}"
    );
    let replays = jsonl(&out.join("replays.jsonl"));
    assert_eq!(replays.len(), 1);
    let report = &replays[0];
    assert_eq!(report["succeeded"], true);
    assert_eq!(report["restore"]["achieved_fidelity"], "exact");
    assert_eq!(report["restore"]["equivalent"], true);
    assert_eq!(
        report["replay_point"]["replay_point_id"],
        variant["replay"]["replay_point_id"]
    );
    assert_eq!(
        report["outcome"]["record"]["observation_keys"], variant["observation_keys"],
        "the replayed suffix observes what the run observed"
    );
    let first = &report["trace_events"][0];
    assert_eq!(
        first["sequence"].as_u64().unwrap(),
        report["replay_point"]["next_sequence"].as_u64().unwrap() + 1,
        "the replay branch continues after the capture event"
    );
    assert_eq!(
        first["parent_event_id"],
        report["replay_point"]["created_event_id"]
    );

    let json_report = replay_report(&out, item);
    assert_eq!(json_report["schema_version"], "sandloop_replay_v0");
    assert_eq!(jsonl(&out.join("replays.jsonl")).len(), 2);

    let output = run(&["plan", "--run", s(&out)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("no failed suffixes"),
        "{}",
        stdout(&output)
    );
}

fn probe_item(id: &str, faults: &[&str]) -> Value {
    json!({"item_id": id, "family": "probe", "text": format!("seed {id}"), "faults": faults})
}

/// Run the probe over one-item groups, one per fault list; returns the
/// run directory's records by item id and the point lines by seed.
fn probe_run(
    dir: &Path,
    cases: &[(&str, &[&str])],
) -> (std::path::PathBuf, Vec<Value>, Vec<Value>) {
    let lines: Vec<Value> = cases
        .iter()
        .map(|(id, faults)| probe_item(id, faults))
        .collect();
    let items = write_items(dir, "items.jsonl", &lines);
    let out = dir.join("out");
    let output = run(&[
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--out",
        s(&out),
        "--workers",
        "2",
        "--call-timeout",
        "5",
        "--child-workers",
        "0",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&out);
    let points = jsonl(&out.join("replay-points.jsonl"));
    (out, records, points)
}

fn suffix<'a>(records: &'a [Value], id: &str) -> &'a Value {
    find(records, id, "episode_suffix")
}

fn point<'a>(points: &'a [Value], seed: &str) -> &'a Value {
    points
        .iter()
        .find(|p| p["seed_item_id"] == seed)
        .unwrap_or_else(|| panic!("no point for {seed}"))
}

#[test]
fn every_replay_rule_is_enforced_across_the_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[&str])] = &[
        ("honest", &[]),
        ("capture-fails", &["capture_fails"]),
        ("marker", &["capture_non_replayable"]),
        ("best-effort", &["capture_best_effort"]),
        ("semantic", &["capture_semantic"]),
        ("restore-fails", &["restore_fails"]),
        ("restore-traps", &["trap_in_restore"]),
        ("stronger", &["capture_best_effort", "restore_stronger"]),
        ("restore-marker", &["restore_non_replayable"]),
        ("disagrees", &["report_disagrees"]),
        ("digest-mismatch", &["digest_mismatch"]),
        ("expected-wrong", &["expected_digest_wrong"]),
        (
            "no-checks",
            &["capture_semantic", "semantic_without_checks"],
        ),
        ("failed-check", &["equivalent_with_failed_check"]),
        ("unverified", &["unverified"]),
        ("suffix-fails", &["suffix_fails"]),
        ("suffix-traps", &["suffix_traps"]),
        ("finalize-fails", &["finalize_fails"]),
        ("release-once", &["release_fails_once"]),
        ("release-never", &["release_fails"]),
        ("no-export", &["export_none"]),
    ];
    let (out, records, points) = probe_run(dir.path(), cases);

    let ok = |id: &str, fidelity: &str, eligible: bool| {
        let record = suffix(&records, id);
        assert!(record.get("adapter_error").is_none(), "{id}: {record}");
        assert_eq!(record["via"], "replay", "{id}");
        assert_eq!(
            record["counter_before"], 0,
            "{id}: a restored copy starts fresh"
        );
        assert_eq!(record["replay"]["achieved_fidelity"], fidelity, "{id}");
        assert_eq!(record["replay"]["promotion_eligible"], eligible, "{id}");
    };
    ok("honest", "exact", true);
    ok("best-effort", "best_effort", false);
    ok("semantic", "semantic_equivalent", true);
    ok("release-once", "exact", true);
    ok("no-export", "exact", true);

    // No usable point: the suffix runs on the prepared group instead.
    for id in ["capture-fails", "marker"] {
        let record = suffix(&records, id);
        assert_eq!(record["via"], "episode", "{id}");
        assert!(record.get("replay").is_none(), "{id}");
    }
    let prefix = find(&records, "capture-fails:shared-prefix", "shared_prefix");
    assert_eq!(prefix["replay_capture_error"]["stage"], "capture");
    assert_eq!(prefix["replay_capture_error"]["type"], "adapter_error");
    assert!(
        points.iter().all(|p| p["seed_item_id"] != "capture-fails"),
        "a failed capture leaves no point"
    );
    assert_eq!(
        find(&records, "marker:shared-prefix", "shared_prefix")["replay_fidelity"],
        "non_replayable"
    );
    assert_eq!(point(&points, "marker")["durable_state"], Value::Null);

    let failed = |id: &str, error_type: &str, stage: &str, says: &str| {
        let record = suffix(&records, id);
        assert_eq!(
            record["adapter_error"]["type"], error_type,
            "{id}: {record}"
        );
        assert_eq!(record["replay"]["error"]["stage"], stage, "{id}: {record}");
        let message = record["adapter_error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{id}: {message}");
    };
    failed(
        "restore-fails",
        "adapter_error",
        "restore",
        "injected fault",
    );
    failed("restore-traps", "trap", "restore", "restore");
    failed(
        "stronger",
        "replay_contract",
        "restore",
        "claims exact but the point was captured at best_effort",
    );
    failed(
        "restore-marker",
        "replay_contract",
        "restore",
        "reported non_replayable",
    );
    failed(
        "disagrees",
        "replay_contract",
        "equivalence",
        "disagree on fidelity",
    );
    failed(
        "digest-mismatch",
        "replay_contract",
        "equivalence",
        "equal, non-empty state digests",
    );
    failed(
        "expected-wrong",
        "replay_contract",
        "equivalence",
        "not the replay point's captured digest",
    );
    failed(
        "no-checks",
        "replay_contract",
        "equivalence",
        "at least one explicit equivalence check",
    );
    failed(
        "failed-check",
        "replay_contract",
        "equivalence",
        "while one of its checks fails",
    );
    failed(
        "unverified",
        "replay_contract",
        "equivalence",
        "needs verified state equivalence",
    );
    failed("suffix-fails", "adapter_error", "suffix", "injected fault");
    failed("suffix-traps", "trap", "suffix", "");
    failed(
        "finalize-fails",
        "adapter_error",
        "finalize",
        "injected fault",
    );

    // A failed suffix still ran on a verified restore.
    let record = suffix(&records, "suffix-fails");
    assert_eq!(record["replay"]["equivalent"], true);
    assert!(
        record["replay"]["end_sequence"].as_u64() > record["replay"]["first_sequence"].as_u64()
    );
    // A failed finalisation quarantines the point; failed releases too.
    assert_eq!(
        suffix(&records, "finalize-fails")["replay"]["error"]["quarantined"],
        true
    );
    assert_eq!(point(&points, "finalize-fails")["quarantined"], true);
    assert_eq!(point(&points, "release-never")["lifecycle"], "failed");
    assert_eq!(point(&points, "release-once")["lifecycle"], "released");
    assert_eq!(point(&points, "honest")["lifecycle"], "released");
    assert_eq!(point(&points, "no-export")["durable_state"], Value::Null);
    assert!(point(&points, "honest")["durable_state"]["sha256"].is_string());

    let summary = json_file(&out.join("summary.json"));
    let replay = &summary["replay"];
    assert_eq!(replay["capture_failure_count"], 1);
    assert_eq!(replay["restore_failure_count"], 4);
    assert_eq!(replay["equivalence_failure_count"], 6);
    assert_eq!(replay["suffix_finalization_failure_count"], 1);
    assert_eq!(replay["replay_point_quarantine_count"], 1);
    assert!(replay["release_failure_count"].as_u64().unwrap() >= 3);
}

#[test]
fn a_trap_in_a_binding_destructor_is_the_release_that_dropped_it() {
    let dir = tempfile::tempdir().unwrap();
    // One lane: the honest group runs on the instance the trap poisoned,
    // unless it is replaced first.
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            probe_item("drop-traps", &["binding_drop_traps"]),
            probe_item("after", &[]),
        ],
    );
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--out",
        s(&out),
        "--workers",
        "1",
        "--child-workers",
        "0",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&out);
    let points = jsonl(&out.join("replay-points.jsonl"));

    // The suffix ran before the release: it is not blamed.
    let ran = suffix(&records, "drop-traps");
    assert!(ran.get("adapter_error").is_none(), "{ran}");
    assert_eq!(ran["via"], "replay");
    // The group's release is where the destructor ran, and says so.
    let prefix = find(&records, "drop-traps:shared-prefix", "shared_prefix");
    let release = &prefix["episode_release_error"]["adapter_error"];
    assert_eq!(release["type"], "trap", "{prefix}");
    let message = release["message"].as_str().unwrap();
    assert!(
        message.contains("replay binding") && message.contains("binding_drop_traps"),
        "{message}"
    );
    assert!(!message.contains("cannot enter"), "{message}");
    // So does the point: not released cleanly.
    let dropped = point(&points, "drop-traps");
    assert_eq!(dropped["lifecycle"], "failed", "{dropped}");
    assert_eq!(dropped["release_error"]["stage"], "release", "{dropped}");
    assert_eq!(dropped["release_error"]["type"], "trap", "{dropped}");
    assert!(
        dropped["release_error"]["message"]
            .as_str()
            .unwrap()
            .contains("binding_drop_traps"),
        "{dropped}"
    );

    // The next group ran on a fresh instance, untouched.
    let after = suffix(&records, "after");
    assert!(after.get("adapter_error").is_none(), "{after}");
    assert_eq!(after["via"], "replay");
    assert_eq!(after["counter_before"], 0);
    let prefix = find(&records, "after:shared-prefix", "shared_prefix");
    assert!(prefix.get("episode_release_error").is_none(), "{prefix}");
    let released = point(&points, "after");
    assert_eq!(released["lifecycle"], "released");
    assert_eq!(released["release_error"], Value::Null);
}

#[test]
fn replay_reruns_a_failed_suffix_and_refuses_bad_input_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[&str])] = &[
        ("honest", &[]),
        ("suffix-fails", &["suffix_fails"]),
        ("no-export", &["export_none"]),
        ("finalize-fails", &["finalize_fails"]),
        ("digest-mismatch", &["digest_mismatch"]),
        ("release-once", &["release_fails_once"]),
    ];
    let (out, _, points) = probe_run(dir.path(), cases);
    let replays = out.join("replays.jsonl");

    // The replay succeeds, but the adapter's failed release is reported, in
    // the line and on stderr, not swallowed.
    let output = run(&[
        "replay",
        "--run",
        s(&out),
        "--item",
        "release-once",
        "--json",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["succeeded"], true, "{report}");
    assert_eq!(report["release_error"]["stage"], "release", "{report}");
    assert!(
        report["release_error"]["message"]
            .as_str()
            .unwrap()
            .contains("release_fails_once"),
        "{report}"
    );
    assert!(
        stderr(&output).contains("warning: the adapter did not release replay point"),
        "{}",
        stderr(&output)
    );
    let honest = run(&["replay", "--run", s(&out), "--item", "honest", "--json"]);
    assert_eq!(code(&honest), 0, "{}", stderr(&honest));
    let honest: Value = serde_json::from_str(&stdout(&honest)).unwrap();
    assert_eq!(honest["release_error"], Value::Null, "{honest}");
    std::fs::remove_file(&replays).unwrap();

    // The failure reproduces from the restored point: exit 1, result kept.
    let output = run(&["replay", "--run", s(&out), "--item", "suffix-fails"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("verified equivalent"),
        "{}",
        stdout(&output)
    );
    let report = &jsonl(&replays)[0];
    assert_eq!(report["succeeded"], false);
    assert_eq!(report["restore"]["equivalent"], true);
    assert_eq!(report["outcome"]["error"]["stage"], "suffix");
    assert_eq!(report["original"]["adapter_error"]["type"], "adapter_error");

    // A broken contract is caught again in the new process.
    let output = run(&[
        "replay",
        "--run",
        s(&out),
        "--item",
        "digest-mismatch",
        "--json",
    ]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        report["outcome"]["error"]["stage"], "equivalence",
        "{report}"
    );
    assert!(
        report["outcome"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("equal, non-empty state digests"),
        "{report}"
    );

    let refused = |args: &[&str], says: &str| {
        let before = std::fs::read_to_string(&replays).unwrap();
        let output = run(args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(
            std::fs::read_to_string(&replays).unwrap(),
            before,
            "nothing written"
        );
    };
    refused(
        &["replay", "--run", s(&out), "--item", "nope"],
        "has no record of item \"nope\"",
    );
    refused(
        &["replay", "--run", s(&out), "--item", "no-export"],
        "the adapter did not export its state",
    );
    refused(
        &["replay", "--run", s(&out), "--item", "finalize-fails"],
        "it was quarantined during the run",
    );
    refused(
        &[
            "replay",
            "--run",
            s(&out),
            "--item",
            "honest",
            "--min-fidelity",
            "non_replayable",
        ],
        "cannot be a minimum",
    );
    refused(
        &["replay", "--run", s(&out), "--item", "honest:shared-prefix"],
        "is a shared-prefix record",
    );
    {
        // A run (or another replay) holding the directory.
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(out.join(".sandloop.lock"))
            .unwrap();
        lock.try_lock().unwrap();
        refused(
            &["replay", "--run", s(&out), "--item", "honest"],
            "is in use by another sandloop process",
        );
    }
    refused(
        &[
            "replay",
            "--run",
            s(&out),
            "--item",
            "honest",
            "--min-fidelity",
            "perfect",
        ],
        "unknown minimum fidelity \"perfect\"; expected one of exact, semantic_equivalent, best_effort",
    );
    refused(
        &[
            "replay",
            "--run",
            s(&dir.path().join("missing")),
            "--item",
            "honest",
        ],
        "is not a directory",
    );
    {
        // A records.jsonl that cannot be read is a failed read (exit 1),
        // not bad input; nothing is written.
        let records = out.join("records.jsonl");
        let aside = out.join("records.jsonl.aside");
        std::fs::rename(&records, &aside).unwrap();
        std::fs::create_dir(&records).unwrap();
        let before = std::fs::read_to_string(&replays).unwrap();
        let output = run(&["replay", "--run", s(&out), "--item", "honest"]);
        assert_eq!(code(&output), 1, "{}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot read ") && stderr(&output).contains("records.jsonl"),
            "{}",
            stderr(&output)
        );
        assert_eq!(std::fs::read_to_string(&replays).unwrap(), before);
        std::fs::remove_dir(&records).unwrap();
        std::fs::rename(&aside, &records).unwrap();
    }
    let honest = point(&points, "honest");
    let durable = &honest["durable_state"];
    let state = out.join(durable["file"].as_str().unwrap());
    let offset = durable["offset"].as_u64().unwrap();
    let mut bytes = std::fs::read(&state).unwrap();
    bytes[offset as usize] ^= 1;
    std::fs::write(&state, bytes).unwrap();
    // The message names the point, its line, the pack and where in it.
    let id = honest["replay_point_id"].as_str().unwrap();
    let number = 1 + points
        .iter()
        .rposition(|line| line["replay_point_id"] == id)
        .unwrap();
    refused(
        &["replay", "--run", s(&out), "--item", "honest"],
        &format!(
            "replay point {id} (replay-points.jsonl line {number}): {} was changed after the \
             run wrote it (sha256 of the bytes at offset {offset} ",
            state.display()
        ),
    );

    // A run made without replay.
    let plain = dir.path().join("plain");
    let items = write_items(
        dir.path(),
        "plain.jsonl",
        &[json!({"item_id": "a", "text": "x y"})],
    );
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&plain),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = run(&["replay", "--run", s(&plain), "--item", "a"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("has no replay-points.jsonl"),
        "{}",
        stderr(&output)
    );
    assert!(!plain.join("replays.jsonl").exists());
}

#[test]
fn plan_ranks_positions_from_a_run_and_from_explicit_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[&str])] = &[("honest", &[]), ("suffix-fails", &["suffix_fails"])];
    let (out, records, _) = probe_run(dir.path(), cases);
    let output = run(&["plan", "--run", s(&out), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let plan: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(plan["inputs"]["observation_count"], 1);
    let proposals = plan["proposals"].as_array().unwrap();
    assert!(!proposals.is_empty(), "{plan}");
    let failed = suffix(&records, "suffix-fails");
    let first = failed["replay"]["first_sequence"].as_u64().unwrap();
    for proposal in proposals {
        assert_eq!(proposal["trace_id"], failed["replay"]["trace_id"]);
        assert!(proposal["next_sequence"].as_u64().unwrap() <= first);
        assert_eq!(proposal["achievable_fidelity"], "exact");
    }
    // The best position reuses the most of the failed trace.
    assert_eq!(proposals[0]["next_sequence"].as_u64().unwrap(), first);

    let trace = write_items(
        dir.path(),
        "trace.jsonl",
        &(0..4)
            .map(|i| json!({"event_id": format!("e{i}"), "trace_id": "t", "branch_id": "main", "sequence": i}))
            .collect::<Vec<_>>(),
    );
    let candidates = dir.path().join("candidates.json");
    std::fs::write(
        &candidates,
        json!([
            {"after_event_id": null, "next_sequence": 0, "achievable_fidelity": "exact", "capture_minutes": 0.0, "restore_minutes": 0.0},
            {"after_event_id": "e1", "next_sequence": 2, "achievable_fidelity": "exact", "capture_minutes": 0.1, "restore_minutes": 0.1},
            {"after_event_id": "e2", "next_sequence": 3, "achievable_fidelity": "best_effort", "capture_minutes": 0.0, "restore_minutes": 0.0}
        ])
        .to_string(),
    )
    .unwrap();
    let observations = dir.path().join("observations.json");
    std::fs::write(
        &observations,
        json!([{"first_effect_sequence": 3, "terminal_sequence": 4, "full_replay_minutes": 4.0, "minimum_fidelity": "semantic_equivalent"}]).to_string(),
    )
    .unwrap();
    let args = [
        "plan",
        "--trace",
        s(&trace),
        "--candidates",
        s(&candidates),
        "--observations",
        s(&observations),
        "--json",
    ];
    let output = run(&args);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let plan: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let proposals = plan["proposals"].as_array().unwrap();
    // After e1: 4.0 * 2/4 - 0.1 restore - 0.1 capture = 1.8; the origin
    // saves nothing (score 0, kept at the default threshold 0); the
    // best-effort position is not eligible.
    assert_eq!(proposals.len(), 2, "{plan}");
    assert_eq!(proposals[0]["after_event_id"], "e1");
    assert!((proposals[0]["score_minutes"].as_f64().unwrap() - 1.8).abs() < 1e-9);
    assert_eq!(proposals[1]["next_sequence"], 0);
    let output = run(&[&args[..], &["--min-score", "0.5"]].concat());
    let plan: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(plan["proposals"].as_array().unwrap().len(), 1, "{plan}");

    std::fs::write(&observations, r#"[{"first_effect_sequence": 3, "terminal_sequence": 2, "full_replay_minutes": 1.0, "minimum_fidelity": "exact"}]"#).unwrap();
    let output = run(&args);
    assert_exit(&output, 2, &["observations.json", "terminal_sequence"]);
}

#[test]
fn replay_finds_relative_inputs_from_another_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(REPLAY_PROBE, dir.path().join("probe.wasm")).unwrap();
    write_items(dir.path(), "items.jsonl", &[probe_item("honest", &[])]);
    let output = sandloop()
        .current_dir(dir.path())
        .args([
            "run",
            "--adapter",
            "probe.wasm",
            "--items",
            "items.jsonl",
            "--out",
            "out",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = sandloop()
        .current_dir("/")
        .args([
            "replay",
            "--run",
            s(&dir.path().join("out")),
            "--item",
            "honest",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn replay_takes_the_item_as_it_ran_in_the_epoch_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(dir.path(), "items.jsonl", &[probe_item("honest", &[])]);
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        REPLAY_PROBE,
        "--items",
        s(&items),
        "--epochs",
        "2",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    for (epoch, expected) in [(None, "epoch-2"), (Some("1"), "epoch-1")] {
        let mut args = vec!["replay", "--run", s(&out), "--item", "honest", "--json"];
        args.extend(epoch.map(|epoch| ["--epoch", epoch]).iter().flatten());
        let output = run(&args);
        assert_eq!(code(&output), 0, "{epoch:?}: {}", stderr(&output));
        let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
        let group = report["execution_group_id"].as_str().unwrap();
        assert!(group.contains(expected), "{epoch:?}: {group}");
        assert_eq!(report["succeeded"], true);
    }
    let output = run(&[
        "replay",
        "--run",
        s(&out),
        "--item",
        "honest",
        "--epoch",
        "3",
    ]);
    assert_exit(
        &output,
        2,
        &["has no record in epoch 3; it ran in epoch 1, 2"],
    );
}

/// `sandloop ARGS` run with no file allowed to grow past `max_file_bytes`
/// (RLIMIT_FSIZE, SIGXFSZ ignored): every write past it fails with `EFBIG`
/// after writing what fits, as a disk that fills mid-line does.
fn with_file_size_limit(args: &[&str], max_file_bytes: u64) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut command = sandloop();
    command.args(args);
    // SAFETY: between fork and exec the closure calls only setrlimit and
    // signal, both async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: max_file_bytes,
                rlim_max: max_file_bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.output().expect("spawn sandloop")
}

#[test]
fn a_replay_whose_line_does_not_fit_on_disk_leaves_no_half_line_and_the_report_still_draws() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _, _) = probe_run(dir.path(), &[("honest", &[])]);
    let replays = out.join("replays.jsonl");
    replay_report(&out, "honest");
    let before = std::fs::read(&replays).unwrap();

    // Room for a few bytes of the next line only.
    let output = with_file_size_limit(
        &["replay", "--run", s(&out), "--item", "honest"],
        before.len() as u64 + 16,
    );
    assert_exit(&output, 1, &["cannot write", "replays.jsonl"]);
    assert_eq!(
        std::fs::read(&replays).unwrap(),
        before,
        "the failed write was cut back"
    );

    let page = dir.path().join("report.html");
    let output = run(&["report", s(&out), "--out", s(&page)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    replay_report(&out, "honest");
    assert_eq!(jsonl(&replays).len(), 2);
}
