//! `sandloop run` with well-behaved adapters: records, metrics, outputs.

use serde_json::{Value, json};
use sha2_check::sha256_of;

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, MARKDOWN_EXPLORER};

mod sha2_check {
    /// sha256 of a file through `sandloop inspect`, which is what the
    /// manifest must agree with.
    pub fn sha256_of(path: &str) -> String {
        super::inspect_info(path)["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

#[test]
fn hello_adapter_runs_every_item_once_as_standalone_records() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<Value> = (0..25)
        .map(|i| json!({"item_id": format!("item-{i:02}"), "family": format!("f{}", i % 3), "text": "a few words of text here"}))
        .collect();
    let items = write_items(dir.path(), "items.jsonl", &lines);
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
        "--workers",
        "3",
        "--json",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let summary: Value = serde_json::from_str(&stdout(&output)).unwrap();

    let records = records(&out);
    assert_eq!(records.len(), 25);
    let mut ids: Vec<&str> = records
        .iter()
        .map(|r| r["item_id"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 25, "every item exactly once");
    for record in &records {
        // Plain `execute` records carry no episode annotations (reference
        // `run_queue_epoch`); the metrics count them as standalone.
        assert!(record.get("record_kind").is_none());
        assert_eq!(record["accepted"], true);
        assert!(record["duration_minutes"].as_f64().unwrap() >= 0.0);
        assert!(record.get("raw_value").is_some() && record.get("novel_value").is_some());
    }
    let raw: f64 = records
        .iter()
        .map(|r| r["raw_value"].as_f64().unwrap())
        .sum();
    let novel: f64 = records
        .iter()
        .map(|r| r["novel_value"].as_f64().unwrap())
        .sum();

    let on_disk = json_file(&out.join("summary.json"));
    for summary in [&summary, &on_disk] {
        assert_eq!(summary["record_count"], 25);
        assert_eq!(summary["epoch_count"], 1);
        assert!((summary["raw_value_total"].as_f64().unwrap() - raw).abs() < 1e-6);
        assert!((summary["novel_value_total"].as_f64().unwrap() - novel).abs() < 1e-6);
        assert!(
            novel > 0.0 && novel < raw,
            "repeated keys are not novel twice"
        );
        assert_eq!(summary["adapter"]["protocols"], json!(["legacy"]));
        assert_eq!(summary["execution_metrics"]["episode_group_count"], 0);
    }
    let manifest = json_file(&out.join("manifest.json"));
    assert_eq!(manifest["adapter"]["sha256"], sha256_of(HELLO_ADAPTER));
    assert_eq!(on_disk["adapter"]["sha256"], sha256_of(HELLO_ADAPTER));
    assert_eq!(manifest["host"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["invocations"][0]["options"]["workers"], 3);
    assert_eq!(jsonl(&out.join("epochs.jsonl")).len(), 1);
}

#[test]
fn markdown_explorer_shares_each_prefix_across_its_variants() {
    let dir = tempfile::tempdir().unwrap();
    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let out = dir.path().join("out");
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
        "3",
        "--workers",
        "2",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("avoided"), "{}", stdout(&output));

    let records = records(&out);
    let prefixes: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "shared_prefix")
        .collect();
    let suffixes: Vec<&Value> = records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
        .collect();
    assert!(!prefixes.is_empty());
    for prefix in &prefixes {
        let group = &prefix["execution_group_id"];
        let siblings = suffixes
            .iter()
            .filter(|r| &r["execution_group_id"] == group)
            .count();
        assert!(siblings >= 1, "every prefix has its suffixes");
        assert_eq!(prefix["prefix_reused"], siblings > 1);
    }
    let variants: Vec<&&Value> = suffixes
        .iter()
        .filter(|r| r["is_variant"] == true)
        .collect();
    assert!(variants.len() >= 4, "the catalog's variants ran");
    for variant in &variants {
        assert!(variant["variant_spec_id"].is_string());
        let seed = variant["seed_item_id"].as_str().unwrap();
        assert!(
            records
                .iter()
                .any(|r| r["item_id"] == seed && r["record_kind"] == "episode_suffix")
        );
    }
    assert!(
        records.iter().all(|r| r.get("adapter_error").is_none()),
        "no errors"
    );
    assert!(
        !records.iter().any(has_absolute_path),
        "no host paths leak into records"
    );

    let summary = json_file(&out.join("summary.json"));
    let metrics = &summary["execution_metrics"];
    assert!(metrics["avoided_recompute_minutes"].as_f64().unwrap() > 0.0);
    assert_eq!(
        metrics["episode_group_count"].as_u64().unwrap() as usize,
        prefixes.len()
    );
    assert_eq!(
        metrics["episode_count"].as_u64().unwrap() as usize,
        suffixes.len()
    );
    assert_eq!(summary["stop_reason"], "seed_queue_empty");
    assert_eq!(
        summary["variant_records_total"].as_u64().unwrap() as usize,
        variants.len()
    );

    let traces = jsonl(&out.join("traces").join("epoch-0001.jsonl"));
    assert!(!traces.is_empty(), "prepare emits trace events");
    for event in &traces {
        assert!(!has_absolute_path(event));
        assert!(
            event["trace_id"]
                .as_str()
                .unwrap()
                .starts_with("main:epoch-1:"),
            "{event}"
        );
    }
    // Each trace branch is contiguous with parents chained; a branch that
    // starts past 0 is a child forked after an event of the same trace.
    let mut by_branch: std::collections::BTreeMap<(&str, &str), Vec<&Value>> = Default::default();
    for event in &traces {
        by_branch
            .entry((
                event["trace_id"].as_str().unwrap(),
                event["branch_id"].as_str().unwrap(),
            ))
            .or_default()
            .push(event);
    }
    for ((trace, _), events) in &by_branch {
        let start = events[0]["sequence"].as_u64().unwrap();
        for (index, event) in events.iter().enumerate() {
            assert_eq!(event["sequence"].as_u64().unwrap(), start + index as u64);
            if index > 0 {
                assert_eq!(event["parent_event_id"], events[index - 1]["event_id"]);
            }
        }
        let parent = &events[0]["parent_event_id"];
        if start == 0 {
            assert_eq!(*parent, Value::Null);
        } else {
            assert!(
                traces.iter().any(|e| e["trace_id"] == *trace
                    && e["event_id"] == *parent
                    && e["sequence"].as_u64() == Some(start - 1)),
                "a fork starts right after an event of its trace: {parent}"
            );
        }
    }
}

fn malformed_items(dir: &std::path::Path) -> std::path::PathBuf {
    write_items(
        dir,
        "malformed.jsonl",
        &[
            json!({"item_id": "seed-a", "family": "f", "text": "alpha", "attack": "none"}),
            json!({"item_id": "seed-a", "family": "f", "text": "duplicate", "attack": "none"}),
            json!({"item_id": "", "family": "f", "text": "no id", "attack": "none"}),
            json!({"item_id": "orphan", "family": "f", "is_variant": true, "seed_item_id": "nobody", "attack": "none"}),
            json!({"item_id": "seed-b", "family": "g", "text": "fine", "attack": "none"}),
        ],
    )
}

/// Without a terminal, a run says what it compiles and how long that took,
/// then one line per epoch; `summary.json` and `run --json` count its
/// failures by type, and a resume counts the failures it kept.
#[test]
fn a_run_reports_its_compile_each_epoch_and_its_failures_by_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![json!({"item_id": "boom", "family": "h", "attack": "trap_execute"})];
    lines.extend(jsonl(&malformed_items(dir.path())));
    let items = write_items(dir.path(), "items.jsonl", &lines);
    let out = dir.path().join("out");
    let cache = dir.path().join("cache");
    let output = sandloop()
        .env("SANDLOOP_COMPILE_NOTICE_MS", "0")
        .args(run_args(
            sandloop_tests::HOSTILE_ADAPTER,
            &items,
            &out,
            &["--cache-dir", s(&cache)],
        ))
        .output()
        .unwrap();
    let said = stderr(&output);
    assert_eq!(code(&output), 0, "{said}");
    assert!(
        said.contains("compiling hostile_adapter.wasm (first run; cached afterwards)…\n")
            && said.contains("compiled hostile_adapter.wasm in "),
        "{said}"
    );
    let epoch_line = said
        .lines()
        .find(|line| line.starts_with("epoch 1/1: "))
        .unwrap_or_else(|| panic!("no line for epoch 1: {said}"));
    assert!(
        epoch_line.ends_with(", 5 errors in the run"),
        "{epoch_line}"
    );
    let counts = json!({"error_count": 5, "errors_by_type": {"invalid_item": 4, "trap": 1}});
    let summary = json_file(&out.join("summary.json"));
    for key in ["error_count", "errors_by_type"] {
        assert_eq!(summary[key], counts[key], "summary.json {key}");
    }
    assert!(
        stdout(&output).contains("errors     5 failures: invalid_item 4, trap 1"),
        "{}",
        stdout(&output)
    );

    // A resume of the finished run keeps its records and counts them.
    let resumed = run(&run_args(
        sandloop_tests::HOSTILE_ADAPTER,
        &items,
        &out,
        &["--resume", "--json"],
    ));
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(
        !stderr(&resumed).contains("epoch "),
        "--json keeps stderr for warnings and errors: {}",
        stderr(&resumed)
    );
    let printed: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    let summary = json_file(&out.join("summary.json"));
    for key in ["error_count", "errors_by_type"] {
        assert_eq!(printed[key], counts[key], "run --json {key}");
        assert_eq!(
            summary[key], counts[key],
            "summary.json after the resume: {key}"
        );
    }
}

/// `sandloop try` runs items as `run` does and prints each record with
/// its guest output, writing nothing; `--watch` runs them again when the
/// component changes and says which records changed.
#[test]
fn try_prints_each_record_with_its_guest_output_and_watches_the_component() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("adapter.wasm");
    std::fs::copy(sandloop_tests::HOSTILE_ADAPTER, &adapter).unwrap();
    let tried = sandloop()
        .current_dir(dir.path())
        .args(["try", s(&adapter), "--item"])
        .arg(r#"{"item_id": "fine", "family": "f", "attack": "none"}"#)
        .arg("--item")
        .arg(r#"{"item_id": "boom", "family": "f", "attack": "trap_execute"}"#)
        .output()
        .unwrap();
    let said = stdout(&tried);
    assert_eq!(code(&tried), 0, "{}", stderr(&tried));
    assert!(
        said.contains("── boom · episode_suffix · error: trap\n"),
        "{said}"
    );
    assert!(said.contains("── fine · episode_suffix · ok\n"), "{said}");
    assert!(
        said.contains("   │ thread '<unnamed>' (1) panicked at"),
        "{said}"
    );
    assert!(
        said.contains("sandloop try: 4 record(s), 1 failed; nothing written"),
        "{said}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the adapter: {left:?}");

    let json = run(&[
        "try",
        s(&adapter),
        "--item",
        r#"{"item_id": "a", "attack": "none"}"#,
        "--json",
    ]);
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    for line in stdout(&json).lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        assert!(
            record["item_id"].as_str().unwrap().starts_with('a'),
            "{record}"
        );
    }
    let bad = run(&["try", s(&adapter), "--item", "{}", "--item", "[1]"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("--item 2: not a JSON object"),
        "{}",
        stderr(&bad)
    );

    // --watch: a new component file runs the items again.
    let mut watching = sandloop()
        .args(["try", s(&adapter), "--watch", "--item"])
        .arg(r#"{"item_id": "w", "family": "f", "text": "one two", "attack": "none"}"#)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    let stdout = watching.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let wait_for = |what: &str| loop {
        let line = said
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no line starting {what:?}"));
        if line.starts_with(what) {
            return line;
        }
    };
    wait_for("watching ");
    std::fs::remove_file(&adapter).unwrap();
    std::fs::copy(HELLO_ADAPTER, &adapter).unwrap();
    // hello-adapter runs items standalone where hostile-adapter grouped them.
    assert_eq!(
        wait_for("changed w"),
        "changed w · standalone · ok: new record"
    );
    assert_eq!(wait_for("gone w"), "gone w:shared-prefix · shared_prefix");
    assert_eq!(wait_for("gone w"), "gone w · episode_suffix");
    assert!(wait_for("sandloop try: ").ends_with("changed"));
    let _ = watching.kill();
    let _ = watching.wait();
}

/// `--items -` reads the items from standard input, and names it in an
/// error.
#[test]
fn items_can_come_from_standard_input() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let piped = |text: &str, out: &std::path::Path| {
        let mut child = sandloop()
            .args([
                "run",
                "--adapter",
                HELLO_ADAPTER,
                "--items",
                "-",
                "--out",
                s(out),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = dir.path().join("out");
    let output = piped(
        "{\"item_id\": \"a\", \"text\": \"one two\"}\n{\"item_id\": \"b\", \"text\": \"three\"}\n",
        &out,
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let ids: Vec<Value> = records(&out).iter().map(|r| r["item_id"].clone()).collect();
    assert_eq!(ids, [json!("a"), json!("b")]);

    let output = piped("{\"item_id\": \"a\"}\n{oops\n", &dir.path().join("bad"));
    assert_eq!(code(&output), 2);
    assert!(stderr(&output).contains("<stdin>:2"), "{}", stderr(&output));
}

#[test]
fn malformed_items_become_error_records_under_the_record_policy() {
    let dir = tempfile::tempdir().unwrap();
    let items = malformed_items(dir.path());
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        sandloop_tests::HOSTILE_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&out);
    let invalid: Vec<&Value> = records
        .iter()
        .filter(|r| r["episode_stage"] == "group_validation")
        .collect();
    assert_eq!(
        invalid.len(),
        4,
        "both duplicates, the empty id and the orphan"
    );
    for record in &invalid {
        assert_eq!(record["adapter_error"]["type"], "invalid_item");
        assert_eq!(record["execution_status"], "adapter_error");
        assert_eq!(record["record_kind"], "standalone");
    }
    let orphan = invalid.iter().find(|r| r["item_id"] == "orphan").unwrap();
    assert!(
        orphan["adapter_error"]["message"]
            .as_str()
            .unwrap()
            .contains("seed_item_id matching an epoch seed")
    );
    let fine = find(&records, "seed-b", "episode_suffix");
    assert_eq!(fine["accepted"], true);
}

#[test]
fn malformed_items_stop_a_fatal_run_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let items = malformed_items(dir.path());
    let out = dir.path().join("out");
    let output = run(&run_args(
        sandloop_tests::HOSTILE_ADAPTER,
        &items,
        &out,
        &["--failure-policy", "fatal"],
    ));
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("duplicated: 'seed-a'"),
        "{}",
        stderr(&output)
    );
    assert!(records(&out).is_empty(), "fatal preflight runs nothing");
    assert!(!out.join("summary.json").exists());
}

#[test]
fn a_failed_run_with_json_prints_its_failure_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "boom", "family": "h", "attack": "trap_execute"})],
    );
    let out = dir.path().join("out");
    let output = run(&run_args(
        sandloop_tests::HOSTILE_ADAPTER,
        &items,
        &out,
        &["--failure-policy", "fatal", "--json"],
    ));
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let printed: Value = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|error| panic!("--json prints JSON ({error}): {output:?}"));
    let failure = json_file(&out.join("failure.json"));
    assert_eq!(printed["failure"], failure, "the failure.json it wrote");
    assert!(
        failure["error"].as_str().unwrap().contains("trap"),
        "{failure}"
    );
    assert_eq!(printed["out"], json!(s(&out)));
    assert_eq!(
        printed["error_count"],
        json!(0),
        "no error record under fatal"
    );
    assert!(
        stderr(&output).contains("--resume"),
        "stderr still explains: {}",
        stderr(&output)
    );
}

#[test]
fn ctrl_c_while_the_component_compiles_says_so_and_writes_nothing() {
    // A JavaScript component takes seconds to compile: time to interrupt.
    let Some([_, (_, js)]) = guest_langs(
        "adapters",
        sandloop_tests::python_adapter(),
        sandloop_tests::js_adapter(),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "text": "x"})],
    );
    let out = dir.path().join("out");
    let cache = dir.path().join("cache");
    let mut child = KillOnDrop(
        sandloop()
            .env("SANDLOOP_COMPILE_NOTICE_MS", "0")
            .args(run_args(js, &items, &out, &["--cache-dir", s(&cache)]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr_pipe = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr_pipe, &mut first).unwrap();
    assert!(first.starts_with("compiling "), "{first}");
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let exit = child.wait_within(std::time::Duration::from_secs(60), "the interrupted run");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr_pipe, &mut rest).unwrap();
    assert_eq!(exit, 130, "{rest}");
    assert!(
        rest.contains("interrupted while compiling ") && rest.contains("; nothing was written"),
        "{rest}"
    );
    assert!(!out.exists(), "nothing was written to {}", out.display());
}
