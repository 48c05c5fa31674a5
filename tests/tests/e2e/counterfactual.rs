//! `sandloop counterfactual` on the `examples/counterfactual` adapter
//! (ledger-import): its demo, snapshot points, exit codes and bad input;
//! and on its Python and JavaScript ports (`examples/python-adapter/ledger.py`,
//! `examples/js-adapter/ledger.js`), which `SANDLOOP_SKIP_GUEST_LANGS=1`
//! skips when their toolchains are missing (see conformance.rs).

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{
    assert_exit, code, guest_langs, inspect_info, jsonl, records, run, run_markdown_explorer, s,
    sandloop, stderr, stdout, workspace_file, write_items,
};

/// Each candidate's decision in a `counterfactuals.jsonl` line, by id.
fn decisions(line: &Value) -> Vec<(String, String)> {
    line["group"]["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|candidate| {
            let decision = candidate["replay_result"]["decision"]
                .as_str()
                .unwrap_or(candidate["status"].as_str().unwrap());
            (
                candidate["candidate_id"].as_str().unwrap().to_string(),
                decision.to_string(),
            )
        })
        .collect()
}

fn expected_decisions() -> Vec<(String, String)> {
    [
        ("read-thousands-separators", "promoted"),
        ("drop-unreadable-rows", "rejected"),
        ("reparse-with-separators", "observed_only"),
    ]
    .into_iter()
    .map(|(id, decision)| (id.to_string(), decision.to_string()))
    .collect()
}

/// The demo's hypothesis, for a run whose failed item ran in `group`.
fn hypothesis(group: &str, candidates: Value) -> Value {
    json!({
        "hypothesis_id": "q2",
        "item_id": "2024-q2",
        "first_affected_event_id": format!("{group}/2024-q2/5"),
        "first_affected_sequence": 5,
        "fix_set": [{"validation_id": "amounts-parse", "baseline_passed": false}],
        "guard_set": [
            {"validation_id": "header-valid", "baseline_passed": true},
            {"validation_id": "rows-kept", "baseline_passed": true}
        ],
        "candidates": candidates,
    })
}

fn demo_candidates() -> Value {
    json!([
        {"candidate_id": "read-thousands-separators",
         "public_change_set": {"amount_format": "thousands-separator"}},
        {"candidate_id": "drop-unreadable-rows",
         "public_change_set": {"on_bad_amount": "drop-row"}},
        {"candidate_id": "reparse-with-separators",
         "target_branch_id": "rebuild/reparse-with-separators",
         "public_change_set": {"amount_format": "thousands-separator"}}
    ])
}

/// The execution group the run's `2024-q2` record ran in.
fn failed_group(run_dir: &Path) -> String {
    let records = records(run_dir);
    let failed = records
        .iter()
        .find(|r| r["item_id"] == "2024-q2" && r["record_kind"] != "shared_prefix")
        .expect("a record of 2024-q2");
    assert_eq!(failed["execution_status"], "adapter_error", "{failed}");
    failed["execution_group_id"].as_str().unwrap().to_string()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, value.to_string()).unwrap();
}

/// Run the demo's candidates on the failed `2024-q2` of `run_dir` (the
/// hypothesis written to `dir/h.json`), asserting exit 0 (`what` names the
/// component in a failure), and return the printed JSON line.
fn demo_counterfactual(dir: &Path, run_dir: &Path, what: &str) -> Value {
    let hypothesis_path = dir.join("h.json");
    write_json(
        &hypothesis_path,
        &hypothesis(&failed_group(run_dir), demo_candidates()),
    );
    let output = run(&[
        "counterfactual",
        "--run",
        s(run_dir),
        "--hypothesis",
        s(&hypothesis_path),
        "--json",
    ]);
    assert_eq!(code(&output), 0, "{what}: {}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn the_demo_promotes_one_candidate_rejects_one_and_only_observes_one() {
    let protocols = inspect_info(sandloop_tests::LEDGER_IMPORT)["protocols"].clone();
    assert!(
        protocols
            .as_array()
            .unwrap()
            .contains(&json!("counterfactual-v0")),
        "{protocols}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let binary = sandloop().get_program().to_owned();
    let bin_dir = Path::new(&binary).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = sandloop()
        .get_envs()
        .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned())))
        .collect();
    let output = std::process::Command::new("sh")
        .arg(workspace_file("examples/counterfactual/demo.sh"))
        .arg(&out)
        .env("PATH", path)
        .env("LEDGER_IMPORT_WASM", sandloop_tests::LEDGER_IMPORT)
        .envs(envs)
        .output()
        .expect("run demo.sh");
    let printed = stdout(&output);
    assert_eq!(code(&output), 0, "{printed}\n{}", stderr(&output));
    for (id, decision) in expected_decisions() {
        assert!(
            printed
                .lines()
                .any(|line| line.contains(&id) && line.contains(&decision)),
            "{id} {decision} in:\n{printed}"
        );
    }
    let run_dir = out.join("run");
    let records_before = std::fs::read(run_dir.join("records.jsonl")).unwrap();
    let lines = jsonl(&run_dir.join("counterfactuals.jsonl"));
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["schema_version"], "sandloop_counterfactual_v0");
    assert_eq!(decisions(line), expected_decisions());
    assert_eq!(line["promoted"], json!(["read-thousands-separators"]));
    assert_eq!(line["restored_from"], "state");
    assert_eq!(line["group"]["parallel_requested"], true);
    assert_eq!(line["group"]["evaluated_count"], 3);
    for candidate in line["group"]["candidates"].as_array().unwrap() {
        let execution = &candidate["execution_result"];
        assert_eq!(execution["isolated"], true, "{candidate}");
        assert_eq!(
            execution["intent_assessment"]["policy_id"], "change-scope",
            "every candidate was screened: {candidate}"
        );
        let replay = &candidate["replay_result"];
        // The point sits after the prefix's two events; the failure was
        // the fifth event of the item's trace.
        assert_eq!(replay["addressed_prefix_event_count"], 1, "{replay}");
        assert_eq!(replay["replay_distance_events"], 4, "{replay}");
    }
    let rejected = &line["group"]["candidates"][1]["replay_result"];
    assert_eq!(rejected["regressed_guards"], json!(["rows-kept"]));
    let observed = &line["group"]["candidates"][2]["replay_result"];
    assert_eq!(observed["restore"]["achieved_fidelity"], "best_effort");
    assert_eq!(observed["restore"]["prefix_reused"], false);
    assert_eq!(observed["verified_reused_prefix_event_count"], 0);
    // The run's own records are untouched.
    assert_eq!(
        std::fs::read(run_dir.join("records.jsonl")).unwrap(),
        records_before
    );
    // The run's report shows the decisions.
    let page = dir.path().join("report.html");
    let output = run(&["report", s(&run_dir), "--out", s(&page)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Counterfactual fixes"));
    assert!(!html.contains("no counterfactual replays in this run"));
    for text in [
        "read-thousands-separators",
        "drop-unreadable-rows",
        "reparse-with-separators",
        "promoted",
        "observed only",
        "rows-kept",
    ] {
        assert!(html.contains(text), "{text} in the report");
    }
}

#[test]
fn candidates_of_a_snapshot_point_run_in_instances_of_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../../examples/counterfactual/data/2024-q2.csv");
    // A seed with a variant: a group of two, whose point is snapshotted.
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            json!({"item_id": "2024-q2", "family": "ledger", "text": text}),
            json!({"item_id": "2024-q2~again", "family": "ledger", "text": text,
                   "seed_item_id": "2024-q2", "is_variant": true}),
        ],
    );
    let run_dir = dir.path().join("run");
    let output = run(&[
        "run",
        "--adapter",
        sandloop_tests::LEDGER_IMPORT,
        "--items",
        s(&items),
        "--epochs",
        "1",
        "--fork",
        "snapshot",
        "--out",
        s(&run_dir),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let line = demo_counterfactual(dir.path(), &run_dir, "ledger-import");
    assert_eq!(line["restored_from"], "snapshot");
    assert!(line["snapshot_compile"]["compile_ms"].is_number(), "{line}");
    assert_eq!(decisions(&line), expected_decisions());
    // The printed line is the one appended.
    assert_eq!(jsonl(&run_dir.join("counterfactuals.jsonl")), vec![line]);
}

/// A ledger-import run of the three quarters in `dir/run`.
fn ledger_run(dir: &Path) -> std::path::PathBuf {
    ledger_run_of(sandloop_tests::LEDGER_IMPORT, dir)
}

/// A run of the ledger-import component `adapter` (the Rust example or a
/// port) over the three quarters in `dir/run`.
fn ledger_run_of(adapter: &str, dir: &Path) -> std::path::PathBuf {
    let run_dir = dir.join("run");
    let output = run(&[
        "run",
        "--adapter",
        adapter,
        "--epochs",
        "1",
        "--out",
        s(&run_dir),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    run_dir
}

#[test]
fn the_python_and_javascript_ports_decide_the_demo_as_the_rust_example_does() {
    let Some(ports) = guest_langs(
        "ledger ports",
        sandloop_tests::python_ledger(),
        sandloop_tests::js_ledger(),
    ) else {
        return;
    };
    for (language, adapter) in ports {
        let protocols = inspect_info(adapter)["protocols"].clone();
        assert!(
            protocols
                .as_array()
                .unwrap()
                .contains(&json!("counterfactual-v0")),
            "{language}: {protocols}"
        );
        let dir = tempfile::tempdir().unwrap();
        let run_dir = ledger_run_of(adapter, dir.path());
        let line = demo_counterfactual(dir.path(), &run_dir, language);
        assert_eq!(decisions(&line), expected_decisions(), "{language}: {line}");
        assert_eq!(line["promoted"], json!(["read-thousands-separators"]));
        for candidate in line["group"]["candidates"].as_array().unwrap() {
            let execution = &candidate["execution_result"];
            assert_eq!(execution["isolated"], true, "{language}: {candidate}");
            assert_eq!(
                execution["intent_assessment"]["policy_id"], "change-scope",
                "{language}: every candidate was screened: {candidate}"
            );
        }
        let rejected = &line["group"]["candidates"][1]["replay_result"];
        assert_eq!(
            rejected["regressed_guards"],
            json!(["rows-kept"]),
            "{language}"
        );
        let observed = &line["group"]["candidates"][2]["replay_result"];
        assert_eq!(
            observed["restore"]["achieved_fidelity"], "best_effort",
            "{language}: {observed}"
        );
        assert_eq!(observed["restore"]["prefix_reused"], false, "{language}");
        assert_eq!(jsonl(&run_dir.join("counterfactuals.jsonl")), vec![line]);
    }
}

#[test]
fn no_promotion_is_exit_1_and_a_denied_candidate_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = ledger_run(dir.path());
    let hypothesis_path = dir.path().join("h.json");
    write_json(
        &hypothesis_path,
        &hypothesis(
            &failed_group(&run_dir),
            json!([
                {"candidate_id": "drop-unreadable-rows",
                 "public_change_set": {"on_bad_amount": "drop-row"}},
                // Three settings: over the adapter's change-scope budget.
                {"candidate_id": "too-wide",
                 "public_change_set": {"amount_format": "thousands-separator",
                                       "on_bad_amount": "drop-row", "x": "y"}}
            ]),
        ),
    );
    let output = run(&[
        "counterfactual",
        "--run",
        s(&run_dir),
        "--hypothesis",
        s(&hypothesis_path),
        "--child-workers",
        "1",
    ]);
    assert_exit(
        &output,
        1,
        &["no candidate of hypothesis \"q2\" was promoted"],
    );
    let printed = stdout(&output);
    assert!(
        printed.contains("replay_risk_denied at intent"),
        "{printed}"
    );
    let lines = jsonl(&run_dir.join("counterfactuals.jsonl"));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["promoted"], json!([]));
    assert_eq!(lines[0]["group"]["parallel_requested"], false);
    let denied = &lines[0]["group"]["candidates"][1];
    assert_eq!(denied["status"], "execution_failed");
    assert_eq!(
        denied["execution_failure"]["risk_assessment"]["disposition"],
        "deny"
    );
}

#[test]
fn bad_hypotheses_are_exit_2_naming_the_field_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = ledger_run(dir.path());
    let group = failed_group(&run_dir);
    let path = dir.path().join("h.json");
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["first_affected_sequence"] = json!(4);
                h
            },
            "first_affected_sequence: first affected event sequence does not match the addressable trace",
        ),
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["first_affected_event_id"] = json!(format!("{group}/2024-q2/9"));
                h
            },
            "first_affected_event_id: ",
        ),
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["guard_set"][0]["baseline_passed"] = json!(false);
                h
            },
            "guard_set[0].baseline_passed: guard_set targets must pass in the baseline",
        ),
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["candidates"][0]["public_change_set"] = json!({"file": "/etc/passwd"});
                h
            },
            "candidates[0].public_change_set: not public-safe",
        ),
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["item_id"] = json!("2024-q9");
                h
            },
            "item_id: ",
        ),
        (
            {
                let mut h = hypothesis(&group, demo_candidates());
                h["item_id"] = json!("2024-q1");
                h
            },
            "item_id: item \"2024-q1\" did not fail",
        ),
        (
            {
                // Before the point: no point lies at or before sequence 0.
                let mut h = hypothesis(&group, demo_candidates());
                h["first_affected_event_id"] = json!(format!("{group}/main/0"));
                h["first_affected_sequence"] = json!(0);
                h
            },
            "no durable replay point",
        ),
    ];
    for (value, says) in cases {
        write_json(&path, &value);
        let output = run(&[
            "counterfactual",
            "--run",
            s(&run_dir),
            "--hypothesis",
            s(&path),
        ]);
        assert_exit(&output, 2, &[s(&path), says]);
    }
    assert!(!run_dir.join("counterfactuals.jsonl").exists());

    // Results are written inside the run directory only.
    let elsewhere = dir.path().join("elsewhere.jsonl");
    std::fs::write(&elsewhere, "").unwrap();
    std::os::unix::fs::symlink(&elsewhere, run_dir.join("counterfactuals.jsonl")).unwrap();
    write_json(&path, &hypothesis(&group, demo_candidates()));
    let output = run(&[
        "counterfactual",
        "--run",
        s(&run_dir),
        "--hypothesis",
        s(&path),
    ]);
    assert_exit(&output, 2, &["is a symbolic link"]);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "");

    // A component without the interface is refused by name.
    let markdown = dir.path().join("markdown");
    let output = run_markdown_explorer(&markdown, &["--epochs", "1"], &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let record = records(&markdown)
        .into_iter()
        .find(|r| r["record_kind"] == "episode_suffix" && r["adapter_error"].is_null())
        .expect("a suffix record");
    let item = record["item_id"].as_str().unwrap();
    let group = record["execution_group_id"].as_str().unwrap();
    let mut h = hypothesis(group, demo_candidates());
    h["item_id"] = json!(item);
    h["first_affected_event_id"] = json!(format!("{group}/{item}/2"));
    h["first_affected_sequence"] = json!(2);
    write_json(&path, &h);
    let counterfactual = || {
        run(&[
            "counterfactual",
            "--run",
            s(&markdown),
            "--hypothesis",
            s(&path),
        ])
    };
    // The item succeeded: there is no failure to fix.
    assert_exit(&counterfactual(), 2, &["item_id: ", "did not fail"]);
    // Say the adapter refused it, as a failed item's record would.
    let records_path = markdown.join("records.jsonl");
    let text = std::fs::read_to_string(&records_path).unwrap();
    let refused: String = text
        .lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).unwrap();
            if value["item_id"] == item && value["record_kind"] == "episode_suffix" {
                value["accepted"] = json!(false);
            }
            format!("{value}\n")
        })
        .collect();
    std::fs::write(&records_path, refused).unwrap();
    let output = counterfactual();
    assert_exit(
        &output,
        2,
        &["does not export `sandloop:adapter/counterfactual@0.2.0`"],
    );
    assert!(!markdown.join("counterfactuals.jsonl").exists());
}
