//! Distributed runs on NATS JetStream: a local `nats-server` (started on a
//! free loopback port with its own store directory, stopped on drop),
//! `sandloop worker` processes, and `sandloop run --nats` as the
//! coordinator. A missing `nats-server` fails these tests with the command
//! that installs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    KillOnDrop, assert_exit, code, durable_bytes, json_file, jsonl, records, run_markdown_explorer,
    s, sandloop, stderr, workspace_file,
};

mod ops;

#[path = "../../shared/nats_server.rs"]
mod nats_server;
use nats_server::NatsServer;

/// A `sandloop worker` named `name` on `nats`, plus `extra` flags, once
/// it answers roll calls (a run started earlier would not see it); its
/// stderr goes to `log`, with a `running (delivery N)` line per unit it
/// starts.
fn worker(nats: &NatsServer, name: &str, extra: &[&str], log: &Path) -> KillOnDrop {
    worker_on(&nats.url, name, extra, log)
}

/// [`worker`] on the server at `url`.
fn worker_on(url: &str, name: &str, extra: &[&str], log: &Path) -> KillOnDrop {
    worker_with_env(url, name, extra, &[], log)
}

/// [`worker_on`], with `env` set in the worker's environment.
fn worker_with_env(
    url: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
    log: &Path,
) -> KillOnDrop {
    let child = sandloop()
        .args(["worker", "--nats", url, "--name", name])
        .args(extra)
        .envs(env.iter().copied())
        .env("RUST_LOG", "info,sandloop_distributed=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("worker log"))
        .spawn()
        .expect("spawn sandloop worker");
    let worker = KillOnDrop(child);
    wait_for_log(log, "ready on", Duration::from_secs(60));
    worker
}

/// `--dir` granting the markdown explorer's sample documents at `/docs`.
fn docs_grant() -> String {
    format!(
        "{}::/docs:ro",
        s(&workspace_file("examples/markdown-explorer/sample-docs"))
    )
}

/// The run's stderr and every worker log, for a failure message.
fn diagnostics(output: &Output, logs: &[PathBuf]) -> String {
    let mut text = format!("run stderr:\n{}", stderr(output));
    for log in logs {
        let body = std::fs::read_to_string(log).unwrap_or_default();
        text.push_str(&format!("\n{}:\n{body}", log.display()));
    }
    text
}

/// `value` without its durations (`*_minutes`, at any depth).
fn without_durations(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, _| !key.ends_with("_minutes"));
            map.values_mut().for_each(without_durations);
        }
        Value::Array(values) => values.iter_mut().for_each(without_durations),
        _ => {}
    }
}

/// A run's records without what may differ between two runs of the same
/// inputs (durations, lanes, and which of two same-key records of an epoch
/// got the novelty credit), sorted.
fn comparable(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = records(dir)
        .into_iter()
        .map(|mut record| {
            without_durations(&mut record);
            let map = record.as_object_mut().expect("records are objects");
            for field in ["branch_id", "novel_value"] {
                map.remove(field);
            }
            record.to_string()
        })
        .collect();
    lines.sort();
    lines
}

/// Lines of each JSONL file under `dir/folder`, by file name.
fn line_counts(dir: &Path, folder: &str) -> BTreeMap<String, usize> {
    let Ok(entries) = std::fs::read_dir(dir.join(folder)) else {
        return BTreeMap::new();
    };
    entries
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, jsonl(&path).len())
        })
        .collect()
}

/// A run's replay-point lines without durations and without where in the
/// run's pack each state landed (the order points arrive in), sorted.
fn comparable_points(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = jsonl(&dir.join("replay-points.jsonl"))
        .into_iter()
        .map(|mut line| {
            without_durations(&mut line);
            if let Some(durable) = line["durable_state"].as_object_mut() {
                durable.remove("offset");
                durable.remove("items_offset");
            }
            line.to_string()
        })
        .collect();
    lines.sort();
    lines
}

/// Each durable replay point's state and items, by point id, as read from
/// the files and ranges its line names.
fn durable_states(dir: &Path) -> BTreeMap<String, (Vec<u8>, Vec<u8>)> {
    jsonl(&dir.join("replay-points.jsonl"))
        .iter()
        .filter(|line| line["durable_state"].is_object())
        .map(|line| {
            let id = line["replay_point_id"].as_str().expect("a point id");
            (id.to_string(), durable_bytes(dir, &line["durable_state"]))
        })
        .collect()
}

#[test]
fn a_run_on_three_workers_writes_the_records_of_a_local_run() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Replay points with isolated children forked on the workers.
    let flags = ["--epochs", "3", "--workers", "3", "--child-workers", "2"];
    let local = dir.path().join("local");
    let output = run_markdown_explorer(&local, &flags, &[]);
    assert_eq!(code(&output), 0, "local run: {}", stderr(&output));

    let grant = docs_grant();
    let logs: Vec<PathBuf> = (1..=3)
        .map(|n| dir.path().join(format!("w{n}.log")))
        .collect();
    let _workers: Vec<KillOnDrop> = logs
        .iter()
        .enumerate()
        .map(|(n, log)| worker(&nats, &format!("w{}", n + 1), &["--dir", &grant], log))
        .collect();
    let remote = dir.path().join("remote");
    let mut remote_flags = flags.to_vec();
    remote_flags.extend(["--nats", &nats.url]);
    let output = run_markdown_explorer(&remote, &remote_flags, &[]);
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));

    assert!(!records(&local).is_empty());
    assert_eq!(
        comparable(&remote),
        comparable(&local),
        "the same records as the local run"
    );
    let (local_summary, summary) = (
        json_file(&local.join("summary.json")),
        json_file(&remote.join("summary.json")),
    );
    for total in [
        "record_count",
        "raw_value_total",
        "novel_value_total",
        "epoch_count",
    ] {
        assert_eq!(summary[total], local_summary[total], "{total}");
    }
    for folder in ["traces", "adapter-output"] {
        assert_eq!(
            line_counts(&remote, folder),
            line_counts(&local, folder),
            "the workers' {folder} lines reach the run directory"
        );
    }
    // The workers' replay points, their states and the replay metrics reach
    // the run directory as a local run writes them.
    let points = comparable_points(&remote);
    assert!(!points.is_empty(), "the run captured replay points");
    assert_eq!(points, comparable_points(&local), "the same replay points");
    let states = durable_states(&remote);
    assert!(
        states.values().any(|(state, _)| !state.is_empty()),
        "durable states: {:?}",
        states.keys()
    );
    assert_eq!(states, durable_states(&local), "the same durable states");
    let counts = |summary: &Value| -> BTreeMap<String, Value> {
        summary["replay"]
            .as_object()
            .expect("a replay block")
            .iter()
            .filter(|(key, _)| !key.ends_with("_minutes"))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    };
    assert!(
        summary["replay"]["child_session_fork_success_count"]
            .as_u64()
            .unwrap()
            > 0,
        "children forked on the workers: {}",
        summary["replay"]
    );
    assert_eq!(
        counts(&summary),
        counts(&local_summary),
        "the same replay metrics"
    );
    // A point a worker captured restores in this process.
    let item = records(&remote)
        .into_iter()
        .find(|record| record["replay"]["replay_point_id"].is_string())
        .expect("a record run from a replay point");
    let replayed = sandloop()
        .args(["replay", "--run", s(&remote), "--item"])
        .arg(item["item_id"].as_str().unwrap())
        .output()
        .unwrap();
    assert_eq!(code(&replayed), 0, "{}", stderr(&replayed));
    let units: u64 = jsonl(&remote.join("epochs.jsonl"))
        .iter()
        .map(|epoch| epoch["execution_unit_count"].as_u64().unwrap())
        .sum();
    let distributed = &summary["distributed"];
    let per_worker = distributed["units_per_worker"].as_object().unwrap();
    assert_eq!(
        per_worker
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>(),
        units,
        "every unit recorded once: {distributed}"
    );
    assert!(
        per_worker
            .keys()
            .all(|name| ["w1", "w2", "w3"].contains(&name.as_str())),
        "{distributed}"
    );
    let seen = distributed["workers_seen"].as_array().unwrap();
    assert!(
        !seen.is_empty()
            && seen
                .iter()
                .all(|name| ["w1", "w2", "w3"].contains(&name.as_str().unwrap())),
        "{distributed}"
    );
    assert_eq!(distributed["redeliveries"], 0, "{distributed}");
    let state_bytes: usize = states
        .values()
        .map(|(state, items)| state.len() + items.len())
        .sum();
    assert!(
        distributed["bytes_received"].as_u64().unwrap() > state_bytes as u64,
        "results and the states fetched are counted: {distributed}"
    );
    assert!(
        distributed["bytes_sent"].as_u64().unwrap() > 0,
        "{distributed}"
    );
    assert!(
        local_summary.get("distributed").is_none(),
        "a local run has no block"
    );
    let manifest = json_file(&remote.join("manifest.json"));
    assert_eq!(
        manifest["invocations"][0]["options"]["nats"],
        nats.url.as_str()
    );
}

#[test]
fn a_run_whose_guest_paths_no_worker_offers_says_so_and_writes_nothing() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bare.log");
    let _worker = worker(&nats, "bare", &[], &log);
    let out = dir.path().join("run");
    let output = run_markdown_explorer(&out, &["--no-replay", "--nats", &nats.url], &[]);
    assert_exit(
        &output,
        1,
        &[
            "no connected worker offers the guest paths",
            "/docs:ro",
            "bare offers no directories",
            "nothing was run",
        ],
    );
    assert!(!out.exists(), "nothing written");
}

#[test]
fn what_nats_runs_do_not_support_yet_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Checked before connecting: no server is needed to be refused.
    let unreachable = "nats://127.0.0.1:9";
    let output = run_markdown_explorer(&out, &["--nats", unreachable, "--fork", "snapshot"], &[]);
    assert_exit(
        &output,
        2,
        &[
            "--nats does not yet support children forked by snapshot",
            "use --fork state",
        ],
    );
    assert!(!out.exists(), "nothing written");
}

#[test]
fn a_user_and_password_in_the_url_log_both_ends_in() {
    let nats = NatsServer::start_with(&["--user", "team-a", "--pass", "p@ss:word"]);
    let with = |password: &str| {
        nats.url
            .replace("nats://", &format!("nats://team-a:{password}@"))
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let _worker = worker_on(&with("p%40ss%3Aword"), "w", &[], &log);
    let item = serde_json::json!({"item_id": "a", "text": "x", "attack": "read_env"});
    let items = crate::support::write_items(dir.path(), "items.jsonl", &[item]);
    let out = dir.path().join("run");
    let output = hostile_run(&items, &out, "5", &["--nats", &with("p%40ss%3Aword")])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &[log]));
    assert!(!records(&out).is_empty());
    let wrong = dir.path().join("wrong");
    let output = hostile_run(&items, &wrong, "5", &["--nats", &with("guess")])
        .output()
        .unwrap();
    assert_exit(&output, 1, &["authorization violation", "team-a:***@"]);
    assert!(
        !stderr(&output).contains("guess"),
        "the password is never shown"
    );
}

#[test]
fn worker_flags_are_checked_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let worker = |extra: &[&str]| {
        sandloop()
            .args(["worker"])
            .args(extra)
            .args(["--cache-dir", s(&dir.path().join("cache"))])
            .output()
            .unwrap()
    };
    let unreachable = "nats://127.0.0.1:9";
    assert_exit(
        &worker(&["--nats", "http://127.0.0.1:4222"]),
        2,
        &[
            "--nats http://127.0.0.1:4222",
            "invalid scheme",
            "nats://HOST:4222",
        ],
    );
    assert_exit(&worker(&["--nats", "nats://"]), 2, &["no host"]);
    assert_exit(
        &worker(&["--nats", unreachable, "--lanes", "257"]),
        2,
        &["--lanes must be from 1 to 256"],
    );
    assert_exit(
        &worker(&["--nats", unreachable, "--env", "A=B"]),
        2,
        &["not NAME=VALUE"],
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let output = sandloop()
        .args(["worker", "--nats", unreachable, "--cache-dir", s(&file)])
        .output()
        .unwrap();
    assert_exit(&output, 1, &["cannot be written", "--cache-dir"]);
}

#[test]
fn a_worker_started_before_its_server_waits_for_it_and_then_serves() {
    let dir = tempfile::tempdir().unwrap();
    let port = nats_server::free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let log = dir.path().join("w.log");
    let child = sandloop()
        .args(["worker", "--nats", &url, "--name", "early"])
        .args(["--connect-timeout", "120"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut early = KillOnDrop(child);
    wait_for_log(&log, "trying again in", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        early.0.try_wait().unwrap().is_none(),
        "the worker gave up: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("--connect-timeout"), "{said}");
    let _nats = NatsServer::start_on(port, &[]);
    wait_for_log(&log, "ready on", Duration::from_secs(60));
    let items = vec![
        serde_json::json!({"item_id": "a", "family": "a", "text": "x",
                                        "attack": "read_env"}),
    ];
    let items = crate::support::write_items(dir.path(), "items.jsonl", &items);
    let out = dir.path().join("run");
    let output = hostile_run(&items, &out, "10", &["--nats", &url])
        .output()
        .unwrap();
    assert_eq!(
        code(&output),
        0,
        "{}",
        diagnostics(&output, std::slice::from_ref(&log))
    );
    let records = records(&out);
    assert!(
        records.iter().any(|record| record["item_id"] == "a"),
        "{records:?}"
    );

    // With no patience, an unreachable server ends the worker at once.
    let gone = format!("nats://127.0.0.1:{}", nats_server::free_port());
    let started = std::time::Instant::now();
    let output = sandloop()
        .args(["worker", "--nats", &gone, "--connect-timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("trying again"),
        "{}",
        stderr(&output)
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn results_and_units_too_large_for_the_server_become_error_records() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let _worker = worker(&nats, "w", &["--lanes", "2"], &log);
    let items = vec![
        serde_json::json!({"item_id": "huge-result", "family": "a", "text": "x",
                           "attack": "huge_output", "bytes": 1_100_000}),
        serde_json::json!({"item_id": "huge-unit", "family": "b",
                           "text": "x".repeat(1_100_000), "attack": "read_env"}),
        serde_json::json!({"item_id": "plain", "family": "c", "text": "x", "attack": "read_env"}),
    ];
    let items = crate::support::write_items(dir.path(), "items.jsonl", &items);
    let out = dir.path().join("run");
    let flags = ["--nats", &nats.url, "--workers", "3"];
    let output = hostile_run(&items, &out, "10", &flags).output().unwrap();
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &[log]));
    let records = records(&out);
    // The record named by the item's id (a group whose preparation failed
    // has only that one).
    let of = |id: &str, field: &str| {
        records
            .iter()
            .find(|record| record["item_id"] == id)
            .unwrap_or_else(|| panic!("a record of {id}: {records:?}"))[field]
            .clone()
    };
    assert_eq!(
        of("huge-result", "adapter_error")["type"],
        "output_too_large"
    );
    assert_eq!(of("huge-unit", "adapter_error")["type"], "invalid_item");
    for id in ["huge-result", "huge-unit"] {
        let message = of(id, "adapter_error")["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("max_payload (1048576 bytes)"),
            "{id}: {message}"
        );
    }
    assert_eq!(
        of("plain", "adapter_error"),
        Value::Null,
        "the other unit ran"
    );
    assert_eq!(of("plain", "var_count"), 0);
}

#[test]
fn a_coordinator_stopped_by_ctrl_c_withdraws_its_queued_units() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("only.log");
    let _only = worker(&nats, "only", &[], &log);
    let items = spin_items(dir.path(), 4);
    let out = dir.path().join("run");
    let flags = ["--nats", &nats.url, "--workers", "4"];
    let mut run = spawn_piped(&mut hostile_run(&items, &out, "30", &flags));
    wait_for_log(&log, "running (delivery 1)", Duration::from_secs(60));
    let started = Instant::now();
    while queued_units(&nats) < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "4 units published"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) on the run's own process id.
    assert_eq!(unsafe { libc::kill(run.0.id() as i32, libc::SIGINT) }, 0);
    let output = output_within(&mut run, Duration::from_secs(30), "the interrupted run");
    assert_exit(&output, 130, &["interrupted", "--resume"]);
    assert!(
        queued_units(&nats) <= 1,
        "only the unit the worker runs is left, not the three queued"
    );
}

#[test]
fn environment_variables_come_only_from_workers_that_offer_them() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let logs = [dir.path().join("bare.log"), dir.path().join("offering.log")];
    let _bare = worker(&nats, "bare", &["--lanes", "2"], &logs[0]);
    let _offering = worker_with_env(
        &nats.url,
        "offering",
        &["--env", "SANDLOOP_E2E_TOKEN"],
        &[("SANDLOOP_E2E_TOKEN", "the worker's own value".as_ref())],
        &logs[1],
    );
    let items: Vec<Value> = (1..=4)
        .map(|n| {
            serde_json::json!({"item_id": format!("env-{n}"), "family": format!("f{n}"),
                               "text": "x", "attack": "read_env"})
        })
        .collect();
    let items = crate::support::write_items(dir.path(), "items.jsonl", &items);
    // The coordinator does not have the variable: the guest sees the
    // offering worker's.
    let out = dir.path().join("run");
    let flags = [
        "--nats",
        &nats.url,
        "--workers",
        "3",
        "--env",
        "SANDLOOP_E2E_TOKEN",
    ];
    let output = hostile_run(&items, &out, "5", &flags)
        .env_remove("SANDLOOP_E2E_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
    // Each item's record (its group's shared prefix aside).
    let records: Vec<Value> = records(&out)
        .into_iter()
        .filter(|record| record["record_kind"] != "shared_prefix")
        .collect();
    assert_eq!(records.len(), 4);
    for record in &records {
        assert_eq!(
            record["var_count"], 1,
            "one variable, the offered one: {record}"
        );
        assert_eq!(record["home_visible"], false, "{record}");
    }
    let distributed = &json_file(&out.join("summary.json"))["distributed"];
    assert_eq!(
        distributed["units_per_worker"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["offering"],
        "{distributed}"
    );
    // A variable no worker offers: said before anything runs.
    let out = dir.path().join("unmet");
    let flags = ["--nats", &nats.url, "--env", "HOME"];
    let output = hostile_run(&items, &out, "5", &flags).output().unwrap();
    assert_exit(
        &output,
        1,
        &[
            "no connected worker offers",
            "($HOME)",
            "offering offers $SANDLOOP_E2E_TOKEN",
            "nothing was run",
        ],
    );
    assert!(!out.exists(), "nothing written");
}

/// The output of `process` (spawned with piped stdout and stderr), once
/// it exits on its own within `limit`.
fn output_within(process: &mut KillOnDrop, limit: Duration, what: &str) -> Output {
    use std::io::Read;
    process.wait_within(limit, what);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut pipe) = process.0.stdout.take() {
        pipe.read_to_end(&mut stdout).expect("read stdout");
    }
    if let Some(mut pipe) = process.0.stderr.take() {
        pipe.read_to_end(&mut stderr).expect("read stderr");
    }
    let status = process.0.wait().expect("the exit status");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// `DIR/items.jsonl` with `count` items `spin-N` (families `fN`) of the
/// hostile adapter that spin until their call's deadline.
fn spin_items(dir: &Path, count: usize) -> PathBuf {
    let items: Vec<Value> = (1..=count)
        .map(|n| {
            serde_json::json!({"item_id": format!("spin-{n}"), "family": format!("f{n}"),
                               "text": "x", "attack": "infinite_loop"})
        })
        .collect();
    crate::support::write_items(dir, "items.jsonl", &items)
}

/// `sandloop run` of the hostile adapter over `items` into `out`, with
/// calls cut at `timeout` seconds, plus `extra` flags.
fn hostile_run(items: &Path, out: &Path, timeout: &str, extra: &[&str]) -> std::process::Command {
    let mut command = sandloop();
    command
        .args([
            "run",
            "--adapter",
            sandloop_tests::HOSTILE_ADAPTER,
            "--items",
            s(items),
        ])
        .args(["--out", s(out), "--call-timeout", timeout])
        .args(extra);
    command
}

/// `command` started with its stdout and stderr piped.
fn spawn_piped(command: &mut std::process::Command) -> KillOnDrop {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandloop run");
    KillOnDrop(child)
}

/// Waits until `log` holds `text`, at most `limit`.
fn wait_for_log(log: &Path, text: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(log).is_ok_and(|body| body.contains(text)) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{} did not say {text:?} within {limit:?}: {}",
            log.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_unit_whose_worker_is_killed_runs_again_elsewhere_and_is_recorded_once() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Each item spins until its 2 s deadline: long enough to kill a
    // worker in the middle of one.
    let items = spin_items(dir.path(), 3);
    let (first_log, second_log) = (dir.path().join("first.log"), dir.path().join("second.log"));
    let mut first = worker(&nats, "first", &[], &first_log);
    let out = dir.path().join("run");
    let mut run = spawn_piped(&mut hostile_run(&items, &out, "2", &["--nats", &nats.url]));
    wait_for_log(&first_log, "running (delivery 1)", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    first.0.kill().expect("kill -9 the first worker");
    let _ = first.0.wait();
    let _second = worker(&nats, "second", &[], &second_log);
    let output = output_within(&mut run, Duration::from_secs(120), "the run");
    let logs = [first_log, second_log];
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
    let records = records(&out);
    let mut ids: Vec<&str> = records
        .iter()
        .map(|record| record["item_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let expected: Vec<String> = (1..=3)
        .flat_map(|n| [format!("spin-{n}"), format!("spin-{n}:shared-prefix")])
        .collect();
    assert_eq!(ids, expected, "each item (and its group's prefix) once");
    for record in records
        .iter()
        .filter(|record| record["record_kind"] != "shared_prefix")
    {
        assert_eq!(record["adapter_error"]["type"], "deadline", "{record}");
    }
    let distributed = &json_file(&out.join("summary.json"))["distributed"];
    assert_eq!(
        distributed["units_per_worker"],
        serde_json::json!({"second": 3}),
        "{distributed}"
    );
    assert!(
        distributed["redeliveries"].as_u64().unwrap() >= 1,
        "{distributed}"
    );
}

#[test]
fn a_tampered_component_in_the_object_store_is_refused() {
    use sandloop::distributed::transport::{COMPONENTS_BUCKET, NatsTarget, Runtime, connect};

    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let item = serde_json::json!({"item_id": "a", "family": "f", "text": "some words"});
    let items = crate::support::write_items(dir.path(), "items.jsonl", &[item]);
    // No worker yet: the coordinator stores the component and waits.
    let run = sandloop()
        .args([
            "run",
            "--adapter",
            sandloop_tests::HELLO_ADAPTER,
            "--out",
            s(&out),
        ])
        .args([
            "--items",
            s(&items),
            "--nats",
            &nats.url,
            "--nats-wait",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandloop run");
    let mut run = KillOnDrop(run);
    let sha256 = sandloop::distributed::transport::sha256_hex(
        &std::fs::read(sandloop_tests::HELLO_ADAPTER).unwrap(),
    );
    let runtime = Runtime::start().unwrap();
    let target = NatsTarget {
        url: nats.url.clone(),
        creds: None,
    };
    let connection = runtime.block_on(connect(&target, "tamperer")).unwrap();
    let started = Instant::now();
    let store = loop {
        let stored = runtime.block_on(async {
            let store = connection
                .jetstream
                .get_object_store(COMPONENTS_BUCKET)
                .await
                .ok()?;
            store.info(&sha256).await.ok().map(|_| store)
        });
        if let Some(store) = stored {
            break store;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the component was not stored"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut forged: &[u8] = b"\0asm\x0d\0\x01\0 not the component";
    runtime
        .block_on(store.put(sha256.as_str(), &mut forged))
        .unwrap();
    let log = dir.path().join("worker.log");
    let cache = dir.path().join("cache");
    let _worker = worker(&nats, "honest", &["--cache-dir", s(&cache)], &log);
    let output = output_within(&mut run, Duration::from_secs(60), "the run");
    assert_exit(
        &output,
        1,
        &[
            "worker honest",
            "refusing to run a tampered component",
            &sha256,
        ],
    );
    assert!(
        !cache
            .join("components")
            .join(format!("{sha256}.wasm"))
            .exists(),
        "the forged bytes are not kept"
    );
}

#[test]
fn a_run_whose_workers_all_died_says_so_instead_of_waiting() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let items = spin_items(dir.path(), 1);
    let log = dir.path().join("only.log");
    let mut only = worker(&nats, "only", &[], &log);
    let out = dir.path().join("run");
    let flags = ["--nats", &nats.url, "--nats-wait", "2"];
    let mut run = spawn_piped(&mut hostile_run(&items, &out, "5", &flags));
    wait_for_log(&log, "running (delivery 1)", Duration::from_secs(60));
    only.0.kill().expect("kill -9 the only worker");
    let _ = only.0.wait();
    let output = output_within(&mut run, Duration::from_secs(60), "the run");
    assert_exit(
        &output,
        1,
        &[
            "is still waiting for a worker",
            "no sandloop worker answered",
            "within 2 s",
        ],
    );
    assert_eq!(
        queued_units(&nats),
        0,
        "the stopped run withdrew its unit: a worker started later does not run it for nobody"
    );
}

/// Messages in the units stream of `nats`.
fn queued_units(nats: &NatsServer) -> u64 {
    use sandloop::distributed::transport::{NatsTarget, Runtime, UNITS_STREAM, connect};

    let runtime = Runtime::start().unwrap();
    let target = NatsTarget {
        url: nats.url.clone(),
        creds: None,
    };
    runtime.block_on(async {
        let connection = connect(&target, "observer").await.unwrap();
        let mut stream = connection.jetstream.get_stream(UNITS_STREAM).await.unwrap();
        stream.info().await.unwrap().state.messages
    })
}

#[test]
fn a_plain_adapter_runs_on_a_worker_as_it_runs_locally_under_either_policy() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<Value> = ["some words here", "", "more words"]
        .iter()
        .enumerate()
        .map(|(n, text)| serde_json::json!({"item_id": format!("i{n}"), "family": "f", "text": text}))
        .collect();
    let items = crate::support::write_items(dir.path(), "items.jsonl", &items);
    let log = dir.path().join("plain.log");
    let _worker = worker(&nats, "plain", &["--lanes", "2"], &log);
    let run = |out: &Path, extra: &[&str]| {
        sandloop()
            .args([
                "run",
                "--adapter",
                sandloop_tests::HELLO_ADAPTER,
                "--items",
                s(&items),
            ])
            .args(["--out", s(out), "--epochs", "2"])
            .args(extra)
            .output()
            .expect("spawn sandloop run")
    };
    let local = dir.path().join("local");
    let output = run(&local, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let remote = dir.path().join("remote");
    let output = run(&remote, &["--nats", &nats.url]);
    assert_eq!(
        code(&output),
        0,
        "{}",
        diagnostics(&output, std::slice::from_ref(&log))
    );
    assert_eq!(comparable(&remote), comparable(&local));
    assert!(
        !line_counts(&local, "adapter-output").is_empty(),
        "hello logs"
    );
    assert_eq!(
        line_counts(&remote, "adapter-output"),
        line_counts(&local, "adapter-output"),
        "the guest's log lines reach the run directory"
    );
    // Under the fatal policy the empty item stops both runs the same way.
    let local_fatal = run(
        &dir.path().join("local-fatal"),
        &["--failure-policy", "fatal"],
    );
    let remote_fatal = run(
        &dir.path().join("remote-fatal"),
        &["--failure-policy", "fatal", "--nats", &nats.url],
    );
    assert_exit(&local_fatal, 1, &["item \"i1\": ", "item has no text"]);
    assert_exit(&remote_fatal, 1, &["item \"i1\": ", "item has no text"]);
}

#[test]
fn units_needing_a_guest_path_run_only_on_workers_that_offer_it() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = docs_grant();
    let logs = [dir.path().join("bare.log"), dir.path().join("docs.log")];
    let _bare = worker(&nats, "bare", &["--lanes", "2"], &logs[0]);
    let _docs = worker(&nats, "docs", &["--dir", &grant], &logs[1]);
    let out = dir.path().join("run");
    let flags = ["--workers", "2", "--no-replay", "--nats", &nats.url];
    let output = run_markdown_explorer(&out, &flags, &[]);
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
    let distributed = &json_file(&out.join("summary.json"))["distributed"];
    let per_worker = distributed["units_per_worker"].as_object().unwrap();
    assert_eq!(
        per_worker.keys().collect::<Vec<_>>(),
        ["docs"],
        "{distributed}"
    );
    assert!(!records(&out).is_empty());
}

#[test]
fn a_coordinator_killed_mid_run_resumes_to_the_records_of_an_uninterrupted_run() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Two items that spin to their 1 s deadline, over three epochs.
    let items = spin_items(dir.path(), 2);
    let run = |out: &Path, extra: &[&str]| {
        let mut command = hostile_run(&items, out, "1", &["--epochs", "3"]);
        command.args(extra);
        command
    };
    let local = dir.path().join("local");
    let output = run(&local, &[]).output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    let logs = [dir.path().join("w1.log")];
    let _worker = worker(&nats, "w1", &[], &logs[0]);
    let remote = dir.path().join("remote");
    let coordinator = run(&remote, &["--nats", &nats.url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut coordinator = KillOnDrop(coordinator);
    let started = Instant::now();
    while std::fs::read_to_string(remote.join("epochs.jsonl")).map_or(true, |text| text.is_empty())
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no epoch finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    coordinator.0.kill().expect("kill -9 the coordinator");
    let _ = coordinator.0.wait();
    assert!(
        jsonl(&remote.join("epochs.jsonl")).len() < 3,
        "killed before the last epoch"
    );
    let output = run(&remote, &["--nats", &nats.url, "--resume"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
    assert_eq!(
        comparable(&remote),
        comparable(&local),
        "nothing lost or doubled"
    );
    assert_eq!(jsonl(&remote.join("epochs.jsonl")).len(), 3);
}

#[test]
fn a_unit_that_kills_every_worker_it_starts_on_is_given_up_as_an_error_record() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let items = spin_items(dir.path(), 1);
    let start_worker = |n: usize| {
        let log = dir.path().join(format!("w{n}.log"));
        (worker(&nats, &format!("w{n}"), &[], &log), log)
    };
    let (mut first, first_log) = start_worker(1);
    let out = dir.path().join("run");
    let mut run = spawn_piped(&mut hostile_run(&items, &out, "60", &["--nats", &nats.url]));
    // Every worker the unit starts on dies: the fourth start gives it up.
    wait_for_log(&first_log, "running (delivery", Duration::from_secs(60));
    first.0.kill().unwrap();
    let mut logs = vec![first_log];
    for n in 2..=4 {
        let (mut worker, log) = start_worker(n);
        wait_for_log(&log, "running (delivery", Duration::from_secs(60));
        worker.0.kill().unwrap();
        logs.push(log);
    }
    let output = output_within(&mut run, Duration::from_secs(60), "the run");
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
    let records = records(&out);
    assert_eq!(records.len(), 1, "{records:?}");
    let error = &records[0]["adapter_error"];
    assert_eq!(error["type"], "instantiation", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("started 4 times on workers without a result"),
        "{error}"
    );
    assert_eq!(records[0]["retryable_infra_error"], true);
    let distributed = &json_file(&out.join("summary.json"))["distributed"];
    assert_eq!(
        distributed["units_per_worker"],
        serde_json::json!({}),
        "{distributed}"
    );
    let seen: Vec<&str> = distributed["workers_seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    for name in ["w1", "w2", "w3", "w4"] {
        assert!(
            seen.contains(&name),
            "every worker it killed was seen: {distributed}"
        );
    }
    assert_eq!(queued_units(&nats), 0, "the unit was withdrawn");
}

/// The `sandloop-worker-*` directories in `tmp`, sorted.
fn scratch_dirs(tmp: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(tmp)
        .expect("the workers' TMPDIR")
        .map(|entry| entry.expect("a TMPDIR entry").path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("sandloop-worker-"))
        })
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn a_stopped_or_killed_worker_leaves_no_replay_points_behind() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let grant = docs_grant();
    let start = |name: &str| -> (KillOnDrop, PathBuf) {
        let log = dir.path().join(format!("{name}.log"));
        let env = [("TMPDIR", tmp.as_os_str())];
        let worker = worker_with_env(&nats.url, name, &["--dir", &grant], &env, &log);
        (worker, log)
    };

    // A run with replay points: the lane keeps their states in the
    // worker's scratch directory until its adapter changes.
    let (mut first, first_log) = start("first");
    let out = dir.path().join("run");
    let flags = ["--epochs", "1", "--child-workers", "1", "--nats", &nats.url];
    let output = run_markdown_explorer(&out, &flags, &[]);
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &[first_log]));
    let held = scratch_dirs(&tmp);
    let name = |path: &Path| path.file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(held.len(), 1, "one scratch directory: {held:?}");
    assert!(
        name(&held[0]).starts_with(&format!("sandloop-worker-{}-", first.0.id())),
        "named after the worker's process: {held:?}"
    );
    let points: Vec<String> = std::fs::read_dir(&held[0])
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        points.iter().any(|point| point.starts_with("points-")),
        "the lane's points directory is inside it: {points:?}"
    );

    // Killed outright, the worker cannot clean up; the next worker started
    // on the machine removes what it left.
    first.0.kill().expect("kill -9 the first worker");
    let _ = first.0.wait();
    assert_eq!(scratch_dirs(&tmp), held, "left behind by kill -9");
    let (mut second, _) = start("second");
    let now = scratch_dirs(&tmp);
    assert_eq!(now.len(), 1, "only the second worker's: {now:?}");
    assert!(
        name(&now[0]).starts_with(&format!("sandloop-worker-{}-", second.0.id())),
        "{now:?}"
    );

    // Stopped by SIGTERM, it removes its own and exits 130.
    // SAFETY: kill(2) on the worker's own process id.
    assert_eq!(
        unsafe { libc::kill(second.0.id() as i32, libc::SIGTERM) },
        0
    );
    assert_eq!(
        second.wait_within(Duration::from_secs(30), "the stopped worker"),
        130
    );
    assert_eq!(scratch_dirs(&tmp), Vec::<PathBuf>::new(), "nothing left");
}
