//! The endpoints without a network: leases, take-backs, stale reports and
//! the checks on what a request carries.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Endpoints;
use crate::events::read_events;
use crate::models::{TaskResponse, WorkerIdentity};
use crate::service::Coordinator;

/// A loop of two workflows, run up to 50 turns.
fn repo(dir: &Path) {
    let write = |relative: &str, text: &str| {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("goal.txt", "Serve well.\n");
    write(
        "sandloop-loop.toml",
        "goal_file = \"goal.txt\"\nworkflow_set = \"main\"\nmax_turns = 50\n",
    );
    write("plugin.wasm", "\0asm\x0d\0\x01\0");
    // `work` and `review` take turns.
    for id in ["work", "review"] {
        let workflow = format!(".sandloop/workflow_sets/main/workflows/{id}");
        write(
            &format!("{workflow}/workflow.toml"),
            "plugin = \"plugin.wasm\"\n",
        );
        write(&format!("{workflow}/prompt.txt"), "Work.\n");
    }
}

fn endpoints(dir: &Path, lease: Duration) -> Endpoints {
    repo(dir);
    let coordinator = Coordinator::open(dir, false, None, None).unwrap();
    Endpoints::new(Arc::new(coordinator), lease)
}

fn call(reply: super::Reply) -> (u16, Value) {
    (reply.status, serde_json::from_slice(&reply.body).unwrap())
}

fn body(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

fn hello(worker: &WorkerIdentity) -> Vec<u8> {
    body(&json!({ "worker": worker }))
}

fn report_of(task: &Value, worker: Option<&WorkerIdentity>) -> Value {
    json!({"workflow_id": task["workflow_id"], "session_id": task["session_id"],
        "iteration": task["iteration"], "success": true, "text": "done", "error": null,
        "attempt_id": task["attempt_id"], "worker": worker})
}

#[test]
fn a_stale_report_hands_nothing_out_and_never_moves_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = endpoints(dir.path(), Duration::from_millis(400));
    // Worker A (a loopy-loop 0.2.0 worker: an empty body) takes iteration
    // 1; while it is leased, another register waits.
    let (code, a) = call(endpoints.register(b""));
    assert_eq!((code, a["iteration"].clone()), (200, json!(1)), "{a}");
    let (code, busy) = call(endpoints.register(b"{}"));
    assert_eq!(code, 409, "{busy}");
    assert!(
        busy["error"]
            .as_str()
            .unwrap()
            .contains("iteration 1 (work) is being run by another worker"),
        "{busy}"
    );
    // A's lease runs out; worker B takes the loop on (1 is abandoned).
    std::thread::sleep(Duration::from_millis(500));
    let (code, b) = call(endpoints.register(b"{}"));
    assert_eq!((code, b["iteration"].clone()), (200, json!(2)), "{b}");
    let session = b["session_id"].as_str().unwrap().to_string();
    let state_file = crate::sessions::state_path(dir.path(), &session);
    let before = std::fs::read(&state_file).unwrap();

    // A's late report changes nothing and hands A nothing.
    let late = report_of(&a, None);
    let (code, answer) = call(endpoints.finished(&body(&late)));
    assert_eq!(code, 200);
    assert_eq!(
        answer,
        serde_json::to_value(TaskResponse::stale_report()).unwrap()
    );
    assert_eq!(std::fs::read(&state_file).unwrap(), before);
    let late_reports: Vec<Value> = read_events(dir.path(), &session)
        .into_iter()
        .filter(|event| event["event"] == "late_report")
        .collect();
    assert_eq!(late_reports.len(), 1, "{late_reports:#?}");
    assert_eq!(late_reports[0]["active_task"]["iteration"], 2);
    // The lease is still B's, and B's report is taken.
    assert_eq!(endpoints.register(b"{}").status, 409);
    let (code, next) = call(endpoints.finished(&body(&report_of(&b, None))));
    assert_eq!((code, next["iteration"].clone()), (200, json!(3)), "{next}");
    let state: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let results: Vec<(u64, bool, Value)> = state["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["iteration"].as_u64().unwrap(),
                e["success"].as_bool().unwrap(),
                e["error"].clone(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [(1, false, json!("abandoned")), (2, true, Value::Null)],
        "the late report is not a result"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_task_whose_worker_process_has_ended_is_taken_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = endpoints(dir.path(), Duration::from_secs(600));
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let gone = WorkerIdentity {
        hostname: crate::identity::hostname(),
        pid: child.id(),
        starttime: crate::identity::process_starttime(child.id()),
    };
    let alive = crate::identity::current();
    let (code, first) = call(endpoints.register(&hello(&gone)));
    assert_eq!((code, first["iteration"].clone()), (200, json!(1)));
    // While its process runs, the task is its worker's.
    assert_eq!(endpoints.register(&hello(&alive)).status, 409);
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, second) = call(endpoints.register(&hello(&alive)));
    assert_eq!(
        (code, second["iteration"].clone()),
        (200, json!(2)),
        "{second}"
    );
    // The live worker's task is not taken back by another caller.
    let (code, busy) = call(endpoints.register(&hello(&gone)));
    assert_eq!(code, 409);
    assert!(
        busy["error"]
            .as_str()
            .unwrap()
            .contains(&format!("being run by worker pid {} on", alive.pid)),
        "{busy}"
    );
}

#[test]
fn a_worker_that_asks_again_has_given_its_task_up() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = endpoints(dir.path(), Duration::from_secs(600));
    let me = WorkerIdentity {
        hostname: "elsewhere.example".into(),
        pid: 42,
        starttime: Some("linux:b:1".into()),
    };
    let other = WorkerIdentity {
        pid: 43,
        ..me.clone()
    };
    assert_eq!(call(endpoints.register(&hello(&me))).1["iteration"], 1);
    assert_eq!(endpoints.register(&hello(&other)).status, 409);
    assert_eq!(call(endpoints.register(&hello(&me))).1["iteration"], 2);
}

#[test]
fn bad_bodies_and_path_like_ids_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = endpoints(dir.path(), Duration::from_secs(600));
    let (code, answer) = call(endpoints.register(b"{\"worker\": 5}"));
    assert_eq!(code, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("not a register request"),
        "{answer}"
    );
    let (_, task) = call(endpoints.register(b""));
    for (field, value) in [
        ("session_id", "../../escape"),
        ("session_id", ".."),
        ("workflow_id", "a/b"),
        ("workflow_id", ""),
    ] {
        let mut report = report_of(&task, None);
        report[field] = json!(value);
        let (code, answer) = call(endpoints.finished(&body(&report)));
        assert_eq!(code, 400, "{field}={value:?}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field} {value:?} is not a plain name")),
            "{message}"
        );
    }
    let (code, answer) = call(endpoints.finished(b"{\"iteration\": \"x\"}"));
    assert_eq!(code, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("not a finished request"),
        "{answer}"
    );
    let (code, answer) = call(endpoints.status());
    assert_eq!(code, 200);
    assert_eq!(answer["state"]["current_task"]["iteration"], 1);
}
