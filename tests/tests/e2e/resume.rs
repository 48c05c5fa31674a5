//! Stopping a run at any moment and resuming it: every record exactly once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{HOSTILE_ADAPTER, MARKDOWN_EXPLORER};

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// A finished one-epoch run of the hello adapter over two items in
/// `dir/out`: the items file and the run directory.
fn finished_hello_run(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let items = write_items(
        dir,
        "items.jsonl",
        &[
            json!({"item_id": "a", "text": "one two three"}),
            json!({"item_id": "b", "text": "four"}),
        ],
    );
    let out = dir.join("out");
    assert_eq!(code(&run_hello(&items, &out, &[])), 0);
    (items, out)
}

#[test]
fn a_run_killed_mid_epoch_resumes_with_every_record_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // Each epoch spends at least the deadline on the spinning item, so the
    // kill lands while an epoch is in flight.
    let mut lines_in: Vec<Value> = (0..30)
        .map(|i| json!({"item_id": format!("calm-{i:02}"), "family": format!("f{i}"), "attack": "none"}))
        .collect();
    lines_in.insert(
        15,
        json!({"item_id": "spin", "family": "spin", "attack": "infinite_loop"}),
    );
    let items = write_items(dir.path(), "items.jsonl", &lines_in);
    let out = dir.path().join("out");
    let args = [
        "run",
        "--adapter",
        HOSTILE_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
        "--epochs",
        "6",
        "--call-timeout",
        "0.3",
        "--workers",
        "2",
    ];
    let mut child = sandloop().args(args).spawn().unwrap();
    let started = Instant::now();
    while lines(&out.join("epochs.jsonl")) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run makes progress"
        );
        assert!(child.try_wait().unwrap().is_none(), "still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(120));
    child.kill().unwrap(); // SIGKILL: no cleanup runs
    child.wait().unwrap();
    assert!(!out.join("summary.json").exists(), "killed before the end");

    let mut resumed_args = args.to_vec();
    resumed_args.push("--resume");
    let output = run(&resumed_args);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    let records = records(&out);
    let mut per_item: BTreeMap<String, usize> = BTreeMap::new();
    for record in records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
    {
        *per_item
            .entry(record["item_id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(per_item.len(), 31);
    for (item, count) in &per_item {
        assert_eq!(*count, 6, "{item} ran once per epoch");
    }
    let epochs = jsonl(&out.join("epochs.jsonl"));
    let numbers: Vec<u64> = epochs
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6]);
    let summary = json_file(&out.join("summary.json"));
    assert_eq!(
        summary["record_count"].as_u64().unwrap() as usize,
        records.len()
    );
    assert_eq!(summary["resume"]["resumed"], true);
    let manifest = json_file(&out.join("manifest.json"));
    assert_eq!(manifest["invocations"].as_array().unwrap().len(), 2);
}

#[test]
fn resume_continues_where_the_last_epoch_ended_and_consumes_variants_once() {
    let dir = tempfile::tempdir().unwrap();
    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
    let run_epochs = |out: &std::path::Path, epochs: &str, resume: bool| {
        let mut args = vec![
            "run",
            "--adapter",
            MARKDOWN_EXPLORER,
            "--dir",
            &grant,
            "--variants",
            s(&catalog),
            "--env",
            "MARKDOWN_PAGE_SIZE",
            "--epochs",
            epochs,
            "--out",
            s(out),
        ];
        if resume {
            args.push("--resume");
        }
        let output = sandloop()
            .args(&args)
            .env("MARKDOWN_PAGE_SIZE", "1")
            .output()
            .unwrap();
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    };
    let stepped = dir.path().join("stepped");
    run_epochs(&stepped, "1", false);
    let after_one = records(&stepped).len();
    run_epochs(&stepped, "3", true);
    let straight = dir.path().join("straight");
    run_epochs(&straight, "3", false);

    let stepped_records = records(&stepped);
    assert!(stepped_records.len() > after_one);
    let key = |r: &Value| {
        format!(
            "{}|{}|{}",
            r["item_id"], r["record_kind"], r["execution_group_id"]
        )
    };
    let mut a: Vec<String> = stepped_records.iter().map(key).collect();
    let mut b: Vec<String> = records(&straight).iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(
        a, b,
        "a resumed run holds the same records as an uninterrupted one"
    );
    let specs: Vec<&Value> = stepped_records
        .iter()
        .filter(|r| r["is_variant"] == true && r["record_kind"] == "episode_suffix")
        .map(|r| &r["variant_spec_id"])
        .collect();
    let mut unique = specs.clone();
    unique.sort_by_key(|v| v.to_string());
    unique.dedup();
    assert_eq!(
        specs.len(),
        unique.len(),
        "each variant spec is consumed once across the resume"
    );
}

#[test]
fn two_processes_never_share_a_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "spin", "family": "a", "attack": "infinite_loop"})],
    );
    let out = dir.path().join("out");
    let args = [
        "run",
        "--adapter",
        HOSTILE_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
        "--call-timeout",
        "3",
    ];
    let mut first = sandloop().args(args).spawn().unwrap();
    let started = Instant::now();
    while !out.join("records.jsonl").exists() {
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(10));
    }
    for extra in [&[][..], &["--resume"][..]] {
        let mut second_args = args.to_vec();
        second_args.extend_from_slice(extra);
        let second = run(&second_args);
        assert_eq!(code(&second), 2, "{}", stderr(&second));
        let message = stderr(&second);
        assert!(
            message.contains("in use by another sandloop run")
                || message.contains("already holds a run")
                || message.contains("holds no run to continue"),
            "{message}"
        );
    }
    assert!(first.wait().unwrap().success());
    assert_eq!(
        records(&out).len(),
        2,
        "the first run's prefix and suffix records, once"
    );
}

#[test]
fn a_run_that_failed_before_its_first_checkpoint_says_why_and_starts_over_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            json!({"item_id": "calm-1", "family": "a", "attack": "none"}),
            json!({"item_id": "boom", "family": "b", "attack": "trap_execute"}),
            json!({"item_id": "calm-2", "family": "c", "attack": "none"}),
        ],
    );
    let out = dir.path().join("out");
    let base = [
        "run",
        "--adapter",
        HOSTILE_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
    ];
    let mut fatal = base.to_vec();
    fatal.extend(["--failure-policy", "fatal"]);
    let output = run(&fatal);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let failure = json_file(&out.join("failure.json"));
    assert!(
        failure["error"].as_str().unwrap().contains("trap"),
        "{failure}"
    );
    assert_eq!(failure["exit_code"], 1);
    assert!(!out.join("checkpoint.json").exists());

    let again = run(&base);
    assert_eq!(
        code(&again),
        2,
        "a fresh run is refused: {}",
        stderr(&again)
    );
    assert!(stderr(&again).contains("continue it with --resume"));

    let mut resume = base.to_vec();
    resume.push("--resume");
    let output = run(&resume);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("never finished an epoch (no checkpoint.json): --resume starts it over"),
        "starting over is said, not silent: {}",
        stderr(&output)
    );
    assert!(
        !out.join("failure.json").exists(),
        "the failure is cleared by a successful resume"
    );
    let records = records(&out);
    let suffixes: Vec<&str> = records
        .iter()
        .filter(|r| r["record_kind"] == "episode_suffix")
        .map(|r| r["item_id"].as_str().unwrap())
        .collect();
    assert_eq!(suffixes.len(), 3, "each item exactly once: {suffixes:?}");
    assert_eq!(
        find(&records, "boom", "episode_suffix")["adapter_error"]["type"],
        "trap"
    );
}

#[test]
fn a_damaged_run_directory_is_refused_and_left_exactly_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (items, out) = finished_hello_run(dir.path());
    let records_path = out.join("records.jsonl");
    let text = std::fs::read_to_string(&records_path).unwrap();
    std::fs::write(&records_path, &text[..text.len() / 2]).unwrap();
    let snapshot = |dir: &std::path::Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.is_file())
            .map(|path| {
                (
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&path).unwrap(),
                )
            })
            .collect()
    };
    let before = snapshot(&out);
    let output = run_hello(&items, &out, &["--resume", "--epochs", "2"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("is damaged: records.jsonl holds"),
        "{}",
        stderr(&output)
    );
    assert_eq!(snapshot(&out), before, "nothing written");
}

#[test]
fn a_resume_of_a_run_whose_checkpoint_is_gone_is_refused_and_keeps_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let (items, out) = finished_hello_run(dir.path());
    std::fs::remove_file(out.join("checkpoint.json")).unwrap();
    let kept = std::fs::read(out.join("records.jsonl")).unwrap();
    assert!(!kept.is_empty());
    let output = run_hello(&items, &out, &["--resume", "--epochs", "2"]);
    assert_exit(
        &output,
        2,
        &[
            "has no checkpoint.json but holds a summary.json",
            "nothing was changed",
        ],
    );
    assert_eq!(std::fs::read(out.join("records.jsonl")).unwrap(), kept);
    assert!(out.join("summary.json").exists());
}

#[test]
fn resume_refuses_a_damaged_replay_point_of_a_checkpointed_epoch_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = run_markdown_explorer(&out, &["--epochs", "1"], &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let points = out.join("replay-points.jsonl");
    let whole = std::fs::read_to_string(&points).unwrap();
    let first_lines: Vec<&str> = whole.lines().collect();
    assert!(first_lines.len() >= 2, "the run captured points: {whole}");
    // A point of epoch 1, which the checkpoint covers, cut in half.
    let damaged = whole.replacen(
        first_lines[0],
        &first_lines[0][..first_lines[0].len() / 2],
        1,
    );
    std::fs::write(&points, &damaged).unwrap();
    let states_before = std::fs::read_dir(out.join("replay-points"))
        .unwrap()
        .count();

    let output = run_markdown_explorer(&out, &["--epochs", "2", "--resume"], &[]);
    assert_exit(
        &output,
        2,
        &[
            "replay-points.jsonl:1: this line is damaged",
            "changes nothing",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(&points).unwrap(),
        damaged,
        "the points file is left as it was"
    );
    assert_eq!(
        std::fs::read_dir(out.join("replay-points"))
            .unwrap()
            .count(),
        states_before,
        "no state file removed"
    );

    // The line mended, but the pack cut short: the kept points' bytes are
    // not all there, so the resume stops too, before a new point could be
    // appended over their ranges.
    std::fs::write(&points, &whole).unwrap();
    let pack = out.join("replay-points/states.pack");
    let length = std::fs::metadata(&pack).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&pack).unwrap();
    file.set_len(length - 1).unwrap();
    let output = run_markdown_explorer(&out, &["--epochs", "2", "--resume"], &[]);
    assert_exit(
        &output,
        2,
        &[
            &format!("states.pack is {} bytes", length - 1),
            "--resume stops here and changes nothing",
        ],
    );
    assert_eq!(std::fs::read_to_string(&points).unwrap(), whole);
    assert_eq!(std::fs::metadata(&pack).unwrap().len(), length - 1);
}
