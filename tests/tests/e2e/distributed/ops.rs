//! Operating the NATS side of distributed runs: what a finished run leaves
//! on the server, `sandloop nats status` and `sandloop nats purge`, a
//! server restarting mid-run, and workers of one name.

use std::process::Stdio;
use std::time::Duration;

use futures_util::StreamExt;
use sandloop::distributed::transport::{
    Connection, NatsTarget, RESULTS_MAX_BYTES, RESULTS_PREFIX, RESULTS_STREAM, Runtime,
    STATES_BUCKET, UNITS_PREFIX, UNITS_STREAM, connect,
};

use super::{
    NatsServer, comparable, diagnostics, docs_grant, hostile_run, output_within, spawn_piped,
    spin_items, wait_for_log, worker,
};
use crate::support::{
    assert_exit, code, json_file, records, run_markdown_explorer, sandloop, stderr,
};

/// A client of `nats`, with its runtime.
fn observer(nats: &NatsServer) -> (std::sync::Arc<Runtime>, Connection) {
    let runtime = Runtime::start().unwrap();
    let target = NatsTarget {
        url: nats.url.clone(),
        creds: None,
    };
    let connection = runtime.block_on(connect(&target, "observer")).unwrap();
    (runtime, connection)
}

/// Messages and bytes of stream `name` (zeros when it does not exist).
fn stream_state(runtime: &Runtime, connection: &Connection, name: &str) -> (u64, u64) {
    runtime.block_on(async {
        let Ok(mut stream) = connection.jetstream.get_stream(name).await else {
            return (0, 0);
        };
        let state = &stream.info().await.unwrap().state;
        (state.messages, state.bytes)
    })
}

/// The names of the objects in the replay states bucket.
fn state_objects(runtime: &Runtime, connection: &Connection) -> Vec<String> {
    runtime.block_on(async {
        let Ok(store) = connection.jetstream.get_object_store(STATES_BUCKET).await else {
            return Vec::new();
        };
        let Ok(mut list) = store.list().await else {
            return Vec::new();
        };
        let mut names = Vec::new();
        while let Some(info) = list.next().await {
            names.push(info.unwrap().name);
        }
        names
    })
}

#[test]
fn a_finished_run_leaves_neither_results_nor_replay_states_on_the_server() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w1.log");
    let grant = docs_grant();
    let _worker = worker(&nats, "w1", &["--dir", &grant], &log);
    let out = dir.path().join("run");
    let flags = ["--epochs", "2", "--workers", "2", "--nats", &nats.url];
    let output = run_markdown_explorer(&out, &flags, &[]);
    assert_eq!(code(&output), 0, "{}", diagnostics(&output, &[log]));
    assert!(!records(&out).is_empty());
    assert!(
        out.join("replay-points")
            .read_dir()
            .unwrap()
            .next()
            .is_some(),
        "the run kept replay states: their objects were copied before they went"
    );
    let run_id = json_file(&out.join("summary.json"))["distributed"]["run_id"]
        .as_str()
        .expect("summary.json names the run id")
        .to_owned();
    let (runtime, connection) = observer(&nats);
    assert_eq!(
        stream_state(&runtime, &connection, RESULTS_STREAM),
        (0, 0),
        "no result or start notice of run {run_id} is kept"
    );
    assert_eq!(
        state_objects(&runtime, &connection),
        Vec::<String>::new(),
        "no replay state of run {run_id} is kept"
    );
    assert!(
        stderr(&output).contains(&format!("run {run_id} finished: removed")),
        "{}",
        stderr(&output)
    );
}

/// Publishes `count` messages on `subject` and waits for each to be stored.
fn publish(runtime: &Runtime, connection: &Connection, subject: &str, count: usize) {
    runtime.block_on(async {
        for n in 0..count {
            connection
                .jetstream
                .publish(subject.to_owned(), format!("message {n}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
}

/// `sandloop nats ARGS` on `nats`.
fn nats_command(nats: &NatsServer, args: &[&str]) -> std::process::Output {
    let (command, rest) = args.split_first().unwrap();
    sandloop()
        .args(["nats", command, "--nats", &nats.url])
        .args(rest)
        .output()
        .expect("spawn sandloop nats")
}

#[test]
fn nats_status_shows_figures_and_nats_purge_removes_one_run() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (runtime, connection) = observer(&nats);
    // A results stream made by an earlier version: no byte limit.
    runtime.block_on(async {
        connection
            .jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: RESULTS_STREAM.into(),
                subjects: vec![format!("{RESULTS_PREFIX}.>")],
                ..Default::default()
            })
            .await
            .unwrap();
    });
    // A worker gives it one, and creates the rest.
    let log = dir.path().join("w.log");
    let worker = worker(&nats, "w", &[], &log);
    drop(worker);
    let limit = runtime.block_on(async {
        let mut stream = connection
            .jetstream
            .get_stream(RESULTS_STREAM)
            .await
            .unwrap();
        stream.info().await.unwrap().config.max_bytes
    });
    assert_eq!(
        limit, RESULTS_MAX_BYTES,
        "an unbounded stream got its bound"
    );

    publish(&runtime, &connection, &format!("{RESULTS_PREFIX}.run-a"), 3);
    publish(&runtime, &connection, &format!("{RESULTS_PREFIX}.run-b"), 2);
    publish(&runtime, &connection, &format!("{UNITS_PREFIX}.run-a"), 1);
    runtime
        .block_on(connection.put_by_digest(STATES_BUCKET, "run-a.", b"a state"))
        .unwrap();

    let output = nats_command(&nats, &["status"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    for expected in [
        "stream SANDLOOP_UNITS: 1 message(s)",
        "stream SANDLOOP_RESULTS: 5 message(s)",
        "(at most 4.0 GiB; kept 1 d)",
        "run run-a: 3 message(s)",
        "run run-b: 2 message(s)",
        "object store sandloop-replay-states:",
        "run run-a: 1 object(s)",
        "object store sandloop-components:",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }

    let output = nats_command(&nats, &["purge", "--run", "run-a"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains(
            "removed 1 queued unit(s) from SANDLOOP_UNITS, 3 result message(s) from \
             SANDLOOP_RESULTS, 1 replay state object(s) from sandloop-replay-states"
        ) && said.contains("run(s) run-a"),
        "{said}"
    );
    assert_eq!(stream_state(&runtime, &connection, UNITS_STREAM).0, 0);
    assert_eq!(stream_state(&runtime, &connection, RESULTS_STREAM).0, 2);
    assert_eq!(
        state_objects(&runtime, &connection),
        Vec::<String>::new(),
        "run-a's state went"
    );
    // Recent runs are not older than an hour: nothing goes.
    let output = nats_command(&nats, &["purge", "--older-than", "1h"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stream_state(&runtime, &connection, RESULTS_STREAM).0, 2);

    // Neither or both of --run and --older-than, a bad id or duration: exit 2.
    assert_exit(
        &nats_command(&nats, &["purge"]),
        2,
        &["--run", "--older-than"],
    );
    assert_exit(
        &nats_command(&nats, &["purge", "--run", "run-b", "--older-than", "1h"]),
        2,
        &["cannot be used with"],
    );
    assert_exit(
        &nats_command(&nats, &["purge", "--run", "a.>"]),
        2,
        &["not a run id"],
    );
    assert_exit(
        &nats_command(&nats, &["purge", "--older-than", "soon"]),
        2,
        &["s, m, h or d"],
    );
    assert_eq!(stream_state(&runtime, &connection, RESULTS_STREAM).0, 2);
}

#[test]
fn a_run_outlives_its_server_restarting_and_writes_the_records_of_an_undisturbed_run() {
    let mut nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Six items that spin to their 2 s deadline, two at a time.
    let items = spin_items(dir.path(), 6);
    let flags = ["--workers", "2"];
    let local = dir.path().join("local");
    let output = hostile_run(&items, &local, "2", &flags).output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    let log = dir.path().join("w1.log");
    let _worker = worker(&nats, "w1", &["--lanes", "2"], &log);
    let remote = dir.path().join("remote");
    let mut remote_flags = flags.to_vec();
    remote_flags.extend(["--nats", &nats.url]);
    let mut run = spawn_piped(&mut hostile_run(&items, &remote, "2", &remote_flags));
    wait_for_log(&log, "running (delivery 1)", Duration::from_secs(60));
    // Down for 15 s while units run: their results and the next units
    // cannot be stored until it is back.
    nats.restart_after(Duration::from_secs(15));
    let output = output_within(&mut run, Duration::from_secs(180), "the run");
    assert_eq!(
        code(&output),
        0,
        "{}",
        diagnostics(&output, std::slice::from_ref(&log))
    );
    assert_eq!(
        comparable(&remote),
        comparable(&local),
        "nothing lost or doubled"
    );
    let worker_log = std::fs::read_to_string(&log).unwrap();
    let said = format!("{worker_log}{}", stderr(&output));
    assert!(
        said.contains("trying again in") && !said.contains("storing its result"),
        "results were tried again while the server was down, none given up: {}",
        diagnostics(&output, std::slice::from_ref(&log))
    );
}

#[test]
fn a_run_whose_server_stays_down_names_the_server_not_the_workers() {
    let mut nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let items = spin_items(dir.path(), 1);
    let log = dir.path().join("w1.log");
    let _worker = worker(&nats, "w1", &[], &log);
    let out = dir.path().join("run");
    let flags = ["--nats", &nats.url, "--nats-wait", "2"];
    let mut run = spawn_piped(&mut hostile_run(&items, &out, "5", &flags));
    wait_for_log(&log, "running (delivery 1)", Duration::from_secs(60));
    nats.kill();
    let output = output_within(&mut run, Duration::from_secs(240), "the run");
    assert_exit(
        &output,
        1,
        &[
            "lost the connection to the NATS server at",
            "is the server running?",
        ],
    );
    assert!(
        !stderr(&output).contains("no sandloop worker answered"),
        "the workers are not blamed: {}",
        stderr(&output)
    );
}

#[test]
fn a_second_worker_of_a_name_already_serving_is_refused() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _first = worker(&nats, "twin", &[], &dir.path().join("first.log"));
    let mut second = spawn_piped(
        sandloop()
            .args(["worker", "--nats", &nats.url, "--name", "twin"])
            .stdin(Stdio::null()),
    );
    let output = output_within(&mut second, Duration::from_secs(30), "the second worker");
    assert_exit(
        &output,
        1,
        &["a worker named twin already serves on", "--name"],
    );
    // Another name serves beside it.
    let _other = worker(&nats, "other", &[], &dir.path().join("other.log"));
}

#[test]
fn a_worker_without_the_runs_grants_hardly_slows_it() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = docs_grant();
    let logs = [dir.path().join("docs.log"), dir.path().join("bare.log")];
    let _docs = worker(&nats, "docs", &["--dir", &grant], &logs[0]);
    let flags = [
        "--epochs",
        "3",
        "--workers",
        "2",
        "--no-replay",
        "--nats",
        &nats.url,
    ];
    let timed = |name: &str| {
        let started = std::time::Instant::now();
        let output = run_markdown_explorer(&dir.path().join(name), &flags, &[]);
        assert_eq!(code(&output), 0, "{}", diagnostics(&output, &logs));
        started.elapsed()
    };
    // The first run also fetches and compiles the component.
    timed("warm-up");
    let alone = timed("alone");
    let _bare = worker(&nats, "bare", &["--lanes", "2"], &logs[1]);
    let beside = timed("beside");
    eprintln!("{alone:?} with the docs worker alone, {beside:?} beside a worker without /docs");
    // Each hand-back used to cost the unit a second: 3.5 times slower here.
    assert!(
        beside < alone + alone / 2 + Duration::from_secs(1),
        "{alone:?} with the docs worker alone, {beside:?} beside a worker without /docs"
    );
    let per_worker =
        &json_file(&dir.path().join("beside/summary.json"))["distributed"]["units_per_worker"];
    assert_eq!(per_worker.as_object().unwrap().len(), 1, "{per_worker}");
}
