//! `sandloop loop`: a loop of sandboxed workflow plugins driven to its
//! goal, watched and stopped from another process, and resumed after a
//! `kill -9` with no iteration lost or counted twice.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, LOOP_STEPS};

/// `sandloop loop init` of the loop-steps plugin in `repo`, with `goal` as
/// its goal file.
pub(crate) fn init(repo: &Path, goal: &str) {
    let output = run(&["loop", "init", "--repo", s(repo), "--plugin", LOOP_STEPS]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("sandloop-loop.toml"));
    std::fs::write(repo.join("sandloop-goal.txt"), goal).unwrap();
}

/// Asserts a session's `history` holds iterations 1..=n in order, each
/// once: none lost, none counted twice (`who` names the session).
pub(crate) fn assert_each_iteration_once(history: &[Value], who: &str) {
    let iterations: Vec<u64> = history
        .iter()
        .map(|entry| entry["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(
        iterations,
        (1..=iterations.len() as u64).collect::<Vec<u64>>(),
        "{who}: every iteration recorded exactly once: {history:?}"
    );
}

fn state(repo: &Path) -> Value {
    let output = run(&["loop", "status", "--repo", s(repo), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn a_loop_runs_its_plugins_to_the_goal() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 3 progress lines.\n");
    let output = run(&["loop", "run", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("stopped (goal_met) after 7 iterations"),
        "{}",
        stdout(&output)
    );
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    assert_eq!(
        progress.lines().count(),
        3,
        "the plugins wrote only where they were granted"
    );
    let state = state(dir.path());
    assert_eq!(state["status"], "goal_met");
    let history = state["history"].as_array().unwrap();
    let ids: Vec<&str> = history
        .iter()
        .map(|e| e["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "plan",
            "work",
            "goal_check",
            "work",
            "goal_check",
            "work",
            "goal_check"
        ]
    );
    let iterations: Vec<u64> = history
        .iter()
        .map(|e| e["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, (1..=7).collect::<Vec<u64>>());
    // Each iteration left its prompt and result beside the session.
    let session = state["active_session_id"].as_str().unwrap();
    let iteration_dir = dir
        .path()
        .join(".sandloop/sessions")
        .join(session)
        .join("iterations");
    assert_eq!(std::fs::read_dir(&iteration_dir).unwrap().count(), 7);

    // A second run archives the finished state and starts a new session.
    let output = run(&["loop", "run", "--repo", s(dir.path()), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let again: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_ne!(again["state"]["active_session_id"], session);
}

#[test]
fn a_failing_plugin_fails_its_iteration_not_the_loop_and_bad_config_is_named() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 lines, but fail.\n");
    let toml = dir.path().join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 20", "max_turns = 5");
    std::fs::write(&toml, text).unwrap();
    let output = run(&["loop", "run", "--repo", s(dir.path()), "--json"]);
    assert_eq!(
        code(&output),
        1,
        "out of turns without the goal: {}",
        stderr(&output)
    );
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["stop_reason"], "max_turns");
    let history = report["state"]["history"].as_array().unwrap();
    assert!(
        history.iter().skip(1).all(|e| e["success"] == false),
        "{history:?}"
    );
    assert!(history[1]["error"].as_str().unwrap().contains("fail"));

    let broken = tempfile::tempdir().unwrap();
    init(broken.path(), "Write 2 lines.\n");
    let work = broken
        .path()
        .join(".sandloop/workflow_sets/main/workflows/work/workflow.toml");
    std::fs::write(
        &work,
        "plugin = \"missing.wasm\"\nmust_follow = \"nowhere\"\n",
    )
    .unwrap();
    let output = run(&["loop", "run", "--repo", s(broken.path())]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("work/workflow.toml: must_follow"),
        "{message}"
    );
    assert!(message.contains("missing.wasm"), "{message}");
}

#[test]
fn a_killed_loop_resumes_without_losing_or_repeating_an_iteration() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 4 slow progress lines.\n");
    let mut child = sandloop()
        .args(["loop", "run", "--repo", s(dir.path())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it mid-way: once a few iterations are recorded.
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let output = run(&["loop", "status", "--repo", s(dir.path()), "--json"]);
        let done = serde_json::from_str::<Value>(&stdout(&output))
            .ok()
            .and_then(|state| state["iteration_count"].as_u64())
            .unwrap_or(0);
        if done >= 3 || started.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // Without --resume a running loop is refused, and nothing changes.
    let before = state(dir.path());
    let output = run(&["loop", "run", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 2);
    assert!(stderr(&output).contains("--resume"), "{}", stderr(&output));
    assert_eq!(state(dir.path()), before);

    let output = run(&["loop", "run", "--repo", s(dir.path()), "--resume", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["stop_reason"], "goal_met");
    let history = report["state"]["history"].as_array().unwrap();
    assert_each_iteration_once(history, "the loop");
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    let successes = history
        .iter()
        .filter(|e| e["workflow_id"] == "work" && e["success"] == true)
        .count();
    assert!(successes >= 4);
    assert!(
        progress.lines().count() >= successes,
        "a recovered step's work is kept"
    );
}

#[test]
fn stop_from_another_process_ends_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 50 slow progress lines.\n");
    let child = sandloop()
        .args(["loop", "run", "--repo", s(dir.path()), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while state_or_none(dir.path()).is_none() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = run(&["loop", "stop", "--repo", s(dir.path()), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let said: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(said, json!({"stop_requested": true, "stop_reason": null}));
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["stop_reason"], "stop_requested");
    assert_eq!(report["state"]["status"], "stopped");

    // A loop that has ended is left as it is, and says why it ended.
    let output = run(&["loop", "stop", "--repo", s(dir.path()), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let said: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        said,
        json!({"stop_requested": false, "stop_reason": "stop_requested"})
    );
    let output = run(&["loop", "stop", "--repo", s(dir.path())]);
    assert_eq!(
        stdout(&output).trim(),
        "the loop has already ended (stop_requested); nothing to stop"
    );
}

#[test]
fn init_refuses_a_component_that_is_not_a_workflow_plugin_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&[
        "loop",
        "init",
        "--repo",
        s(dir.path()),
        "--plugin",
        HELLO_ADAPTER,
    ]);
    assert_eq!(code(&output), 2, "{}", stdout(&output));
    let said = stderr(&output);
    assert!(
        said.contains("is not a workflow plugin") && said.contains("nothing was written"),
        "{said}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

fn state_or_none(repo: &Path) -> Option<Value> {
    let output = run(&["loop", "status", "--repo", s(repo), "--json"]);
    serde_json::from_str(&stdout(&output)).ok()
}

#[test]
fn a_loop_served_over_http_is_driven_by_a_worker_process() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let listen = free_listen();
    let mut server = serve_on(dir.path(), &listen, false, 600);
    let url = format!("http://{listen}");
    let output = worker_command(dir.path(), &url).output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("said stop (goal_met)"),
        "{}",
        stdout(&output)
    );
    // A worker that arrives later is told to stop at once.
    let output = worker_command(dir.path(), &url).output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("said stop (goal_met)"));
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(state(dir.path())["status"], "goal_met");
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    assert_eq!(progress.lines().count(), 2);

    // No coordinator: the worker says so and fails.
    let output = worker_command(dir.path(), &url).output().unwrap();
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains(&format!("coordinator at {url}/register")),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plugins_and_grants_are_checked_before_any_state_is_written() {
    // A plugin that is not a component.
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 lines.\n");
    std::fs::write(dir.path().join(".sandloop/plugins/loop_steps.wasm"), b"x").unwrap();
    let output = run(&["loop", "run", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("workflow.toml: plugin:"),
        "{}",
        stderr(&output)
    );
    assert!(
        !dir.path().join(".sandloop/sessions").exists(),
        "no session was started"
    );
    let output = run(&["loop", "status", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("no loop state found"),
        "{}",
        stderr(&output)
    );

    // A symlink inside the repository may not grant what lies outside it.
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 lines.\n");
    std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
    let plan = dir
        .path()
        .join(".sandloop/workflow_sets/main/workflows/plan/workflow.toml");
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("work::/work", "escape::/work");
    std::fs::write(&plan, text).unwrap();
    let output = run(&["loop", "run", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("escape is not a directory inside the repository")
            && stderr(&output).contains("led outside"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside"
    );
}

#[test]
fn two_workers_take_turns_and_never_run_a_step_twice() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 4 slow progress lines.\n");
    let listen = free_listen();
    // A port already taken: refused, and no loop is left behind.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = busy.local_addr().unwrap().to_string();
    let output = run(&["loop", "serve", "--repo", s(dir.path()), "--listen", &taken]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(!dir.path().join(".sandloop/sessions").exists());
    drop(busy);

    let mut server = serve_on(dir.path(), &listen, false, 600);
    let url = format!("http://{listen}");
    let workers: Vec<_> = (0..2)
        .map(|_| {
            worker_command(dir.path(), &url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let state = state(dir.path());
    assert_eq!(state["status"], "goal_met");
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    let mut lines: Vec<&str> = progress.lines().collect();
    let total = lines.len();
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), total, "no step ran twice: {progress}");
    assert_eq!(total, 4);
    let history = state["history"].as_array().unwrap();
    assert!(history.iter().all(|e| e["success"] == true), "{history:?}");
}

/// `sandloop loop serve` on `listen`, started and listening; tasks are
/// leased for `lease_secs`.
pub(crate) fn serve_on(
    repo: &Path,
    listen: &str,
    resume: bool,
    lease_secs: u32,
) -> std::process::Child {
    let lease = lease_secs.to_string();
    let mut args = vec![
        "loop",
        "serve",
        "--repo",
        s(repo),
        "--listen",
        listen,
        "--lease-secs",
        &lease,
    ];
    if resume {
        args.push("--resume");
    }
    let child = sandloop()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(listen).is_err()
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// `127.0.0.1:PORT` with a port that was free a moment ago.
pub(crate) fn free_listen() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn iterations_done(repo: &Path) -> u64 {
    state_or_none(repo)
        .and_then(|state| state["iteration_count"].as_u64())
        .unwrap_or(0)
}

#[test]
fn killed_workers_and_a_killed_coordinator_lose_no_iteration_over_http() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 5 slow progress lines.\n");
    let listen = free_listen();
    let url = format!("http://{listen}");
    let mut server = serve_on(dir.path(), &listen, false, 1);
    let worker = || {
        worker_command(dir.path(), &url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // Kill a worker mid-way; another takes over once the lease ends.
    let mut first = worker();
    let started = Instant::now();
    while iterations_done(dir.path()) < 2 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let second = worker();
    // Kill the coordinator while the second worker runs; restart it with
    // --resume before the worker's retries run out.
    let started = Instant::now();
    while iterations_done(dir.path()) < 4 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut server = serve_on(dir.path(), &listen, true, 1);
    let output = second.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    server.kill().unwrap();
    server.wait().unwrap();

    let state = state(dir.path());
    assert_eq!(state["status"], "goal_met", "{state}");
    assert_each_iteration_once(state["history"].as_array().unwrap(), "the loop");
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    let mut lines: Vec<&str> = progress.lines().collect();
    let total = lines.len();
    lines.sort();
    lines.dedup();
    assert_eq!(
        lines.len(),
        total,
        "no iteration's work written twice: {progress}"
    );
    assert!(total >= 5);
}

/// `sandloop loop worker` for `repo` against the coordinator at `url`.
fn worker_command(repo: &Path, url: &str) -> std::process::Command {
    let mut command = sandloop();
    command.args(["loop", "worker", "--repo", s(repo), "--coordinator", url]);
    command
}

#[test]
fn a_workflow_grant_swapped_for_a_symlink_out_of_the_repository_fails_the_step() {
    let top = tempfile::tempdir().unwrap();
    let repo = top.path().join("repo");
    init(&repo, "Probe the grants.\n");
    std::fs::create_dir_all(repo.join("work/sub")).unwrap();
    std::fs::create_dir_all(top.path().join("outside")).unwrap();
    std::fs::write(top.path().join("outside/secret.txt"), "the secret").unwrap();
    let workflows = repo.join(".sandloop/workflow_sets/main/workflows");
    for old in ["plan", "work", "goal_check"] {
        std::fs::remove_dir_all(workflows.join(old)).unwrap();
    }
    let workflow = |id: &str, toml: &str| {
        std::fs::create_dir_all(workflows.join(id)).unwrap();
        std::fs::write(workflows.join(id).join("prompt.txt"), format!("{id}\n")).unwrap();
        let plugin = "plugin = \".sandloop/plugins/loop_steps.wasm\"\n";
        std::fs::write(
            workflows.join(id).join("workflow.toml"),
            format!("{plugin}{toml}"),
        )
        .unwrap();
    };
    // Iteration 1 plants the link; iteration 2 probes through its grant.
    workflow("plant", "dirs = [\"work::/work\"]\npriority = 1\n");
    workflow(
        "probe",
        "dirs = [\"work/sub::/sub:ro\"]\nmust_follow = \"plant\"\npriority = 5\n",
    );
    let toml = repo.join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 20", "max_turns = 2");
    std::fs::write(&toml, text).unwrap();

    let output = run(&["loop", "run", "--repo", s(&repo), "--json"]);
    let report: Value =
        serde_json::from_str(&stdout(&output)).unwrap_or_else(|_| panic!("{}", stderr(&output)));
    let history = report["state"]["history"].as_array().unwrap();
    assert_eq!(history[0]["workflow_id"], "plant");
    assert_eq!(history[0]["success"], true, "{history:?}");
    assert!(repo.join("work/sub").is_symlink());
    assert_eq!(history[1]["workflow_id"], "probe");
    assert_eq!(
        history[1]["success"], false,
        "the probe read outside the repository: {history:?}"
    );
    let error = history[1]["error"].as_str().unwrap();
    assert!(
        error.contains("no longer resolves to a directory beneath"),
        "{error}"
    );
    assert!(!error.contains("the secret"), "{error}");
}

/// Every file under `dir` with its bytes, sorted by path.
fn snapshot_files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

#[test]
fn a_second_coordinator_on_one_repository_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let listen = free_listen();
    // An idle `loop serve` holds the repository; no worker changes its state.
    let mut server = serve_on(dir.path(), &listen, false, 600);
    let started = Instant::now();
    while state_or_none(dir.path()).is_none() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = snapshot_files(&dir.path().join(".sandloop"));
    let holder = format!("process {}", server.id());
    let other_listen = free_listen();
    for args in [
        vec!["loop", "run", "--repo", s(dir.path()), "--resume"],
        vec!["loop", "run", "--repo", s(dir.path())],
        vec![
            "loop",
            "serve",
            "--repo",
            s(dir.path()),
            "--resume",
            "--listen",
            &other_listen,
        ],
    ] {
        let output = run(&args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("another sandloop coordinator")
                && stderr(&output).contains(&holder),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(
            snapshot_files(&dir.path().join(".sandloop")),
            before,
            "{args:?} left the state byte-identical"
        );
    }
    assert!(
        !dir.path().join("work/progress.txt").exists(),
        "no step ran"
    );
    // Once the first is gone (even killed), the loop can be resumed.
    server.kill().unwrap();
    server.wait().unwrap();
    let output = run(&["loop", "run", "--repo", s(dir.path()), "--resume"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("stopped (goal_met)"));
}

/// The Python of the virtualenv `.ci/loopy-loop-venv.sh` installs pydantic,
/// httpx and PyYAML into (`$SANDLOOP_LOOPY_PYTHON` overrides it), or `None`
/// after printing SKIPPED when `SANDLOOP_SKIP_LOOPY_WIRE=1` asks to skip
/// knowingly. Panics, saying how to install them, when they are missing.
pub(crate) fn loopy_loop_python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("SANDLOOP_LOOPY_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/loopy-loop-venv/bin/python")
        });
    let has_packages = std::process::Command::new(&python)
        .args(["-c", "import pydantic, httpx, yaml"])
        .output()
        .is_ok_and(|output| output.status.success());
    if has_packages {
        return Some(python);
    }
    if std::env::var_os("SANDLOOP_SKIP_LOOPY_WIRE").is_some() {
        eprintln!(
            "SKIPPED: no pydantic, httpx and PyYAML at {} (SANDLOOP_SKIP_LOOPY_WIRE is set)",
            python.display()
        );
        return None;
    }
    panic!(
        "the loopy-loop wire tests need pydantic, httpx and PyYAML at {}: run \
         `bash .ci/loopy-loop-venv.sh` (or set SANDLOOP_SKIP_LOOPY_WIRE=1 to skip them knowingly)",
        python.display()
    );
}

#[test]
fn loop_serve_answers_validate_against_the_loopy_loop_models() {
    let Some(python) = loopy_loop_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let toml = dir.path().join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 20", "max_turns = 4");
    std::fs::write(&toml, text).unwrap();
    let listen = free_listen();
    let mut server = serve_on(dir.path(), &listen, false, 600);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/loopy_loop/check_wire.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(format!("http://{listen}"))
        .arg(dir.path())
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("wire ok:") && stdout.contains("loop stopped (max_turns)"),
        "{stdout}"
    );
}

#[test]
fn workflow_limits_out_of_bounds_are_named_and_never_panic() {
    for (line, says) in [
        (
            "call_timeout_secs = 1e20",
            "work/workflow.toml: call_timeout_secs: must be between 0.01 seconds (one epoch tick) and 31536000 seconds (one year), got 1e20",
        ),
        (
            "call_timeout_secs = 0.001",
            "work/workflow.toml: call_timeout_secs: must be between 0.01 seconds",
        ),
        (
            "max_memory_mib = 1000000",
            "work/workflow.toml: max_memory_mib: must be between 1 and 65536 MiB, got 1000000",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), "Write 2 lines.\n");
        let work = dir
            .path()
            .join(".sandloop/workflow_sets/main/workflows/work/workflow.toml");
        let text = std::fs::read_to_string(&work).unwrap();
        std::fs::write(&work, format!("{text}{line}\n")).unwrap();
        let output = run(&["loop", "run", "--repo", s(dir.path())]);
        assert_exit(&output, 2, &[says]);
        assert!(
            !dir.path().join(".sandloop/sessions").exists(),
            "{line}: nothing was started"
        );
    }
}
