//! loopy-loop 0.2.0's own worker (`worker.py`, unchanged, in
//! tests/fixtures/loopy_loop/) drives `sandloop loop serve` through a whole
//! loop to its goal, with a fake harness in place of a coding-agent team.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::loops::{assert_each_iteration_once, free_listen, init, loopy_loop_python, serve_on};
use crate::support::*;

/// How long the worker may take to drive the loop to its end.
const PATIENCE: Duration = Duration::from_secs(120);

/// What a repository made by `loop init` needs before a loopy-loop worker
/// can work on it: `.loopy_loop` links to `.sandloop` (the worker derives
/// every session path — iteration files, pending reports, `goal_check.json`,
/// `control.json` — from `.loopy_loop/sessions`, and reads each workflow's
/// `prompt.txt` beside its `config.yaml`), and each workflow has the
/// `config.yaml` the worker reads (only `emits_goal_check` matters to it).
fn prepare_for_loopy_worker(repo: &Path) {
    std::os::unix::fs::symlink(".sandloop", repo.join(".loopy_loop")).unwrap();
    let workflows = repo.join(".sandloop/workflow_sets/main/workflows");
    for entry in std::fs::read_dir(&workflows).unwrap().flatten() {
        let config = if entry.file_name() == "goal_check" {
            "emits_goal_check: true\n"
        } else {
            ""
        };
        std::fs::write(entry.path().join("config.yaml"), config).unwrap();
    }
}

#[test]
fn the_loopy_loop_reference_worker_drives_loop_serve_to_its_goal() {
    let Some(python) = loopy_loop_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    prepare_for_loopy_worker(dir.path());
    let listen = free_listen();
    let server = KillOnDrop(serve_on(dir.path(), &listen, false, 600));
    let logs = tempfile::tempdir().unwrap();
    let (out, err) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/loopy_loop/run_reference_worker.py");
    let mut worker = KillOnDrop(
        std::process::Command::new(&python)
            .arg(&script)
            .arg(format!("http://{listen}"))
            .arg(dir.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let exit = worker.wait_within(PATIENCE, "the loopy-loop worker");
    drop(server);
    let (said, complained) = (
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(&err).unwrap(),
    );
    assert_eq!(exit, 0, "{said}\n{complained}");
    assert!(
        said.contains("the coordinator said stop"),
        "{said}\n{complained}"
    );
    assert!(!complained.contains("Traceback"), "{complained}");

    let output = run(&["loop", "status", "--repo", s(dir.path()), "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let state: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(state["status"], "goal_met", "{state}");
    assert_eq!(state["stop_reason"], "goal_met", "{state}");
    let history = state["history"].as_array().unwrap();
    assert_each_iteration_once(history, "the loop");
    let steps: Vec<(&str, bool)> = history
        .iter()
        .map(|entry| {
            (
                entry["workflow_id"].as_str().unwrap(),
                entry["success"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("plan", true),
            ("work", true),
            ("goal_check", true),
            ("work", true),
            ("goal_check", true)
        ]
    );

    // The harness's work, once per work step; its verdicts where the
    // coordinator read them; every pending report cleared once answered.
    let session = state["active_session_id"].as_str().unwrap();
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    assert_eq!(
        progress,
        format!("step 2 in {session}\nstep 4 in {session}\n")
    );
    let iterations = dir
        .path()
        .join(".sandloop/sessions")
        .join(session)
        .join("iterations");
    for (name, met) in [("0003_goal_check", false), ("0005_goal_check", true)] {
        let verdict = json_file(&iterations.join(name).join("goal_check.json"));
        assert_eq!(verdict["goal_met"], met, "{name}: {verdict}");
    }
    for entry in std::fs::read_dir(&iterations).unwrap().flatten() {
        assert!(
            !entry.path().join("pending_finished_request.json").exists(),
            "{} still holds a pending report",
            entry.path().display()
        );
        assert!(
            entry.path().join("result.json").exists(),
            "{}",
            entry.path().display()
        );
    }
}
