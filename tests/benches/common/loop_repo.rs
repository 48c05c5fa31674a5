//! The loop the coordinator benches drive: one workflow set of two
//! workflows that take turns, a placeholder plugin file (the steps are not
//! run: each report says success at once), and `max_turns` turns.

use std::path::Path;

use sandloop::coordinator::models::{FinishedRequest, TaskResponse};

/// Write the loop into `dir`.
pub fn loop_repo(dir: &Path, max_turns: u32) {
    std::fs::write(dir.join("goal.txt"), "Benchmark the coordinator.\n").unwrap();
    std::fs::write(
        dir.join("sandloop-loop.toml"),
        format!("goal_file = \"goal.txt\"\nworkflow_set = \"main\"\nmax_turns = {max_turns}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("plugin.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
    for id in ["work", "review"] {
        let workflow = dir.join(".sandloop/workflow_sets/main/workflows").join(id);
        std::fs::create_dir_all(&workflow).unwrap();
        std::fs::write(workflow.join("workflow.toml"), "plugin = \"plugin.wasm\"\n").unwrap();
        std::fs::write(workflow.join("prompt.txt"), "Work.\n").unwrap();
    }
}

/// A successful report of `task`, echoing its attempt.
pub fn finished_for(task: &TaskResponse) -> FinishedRequest {
    let task = task.task().expect("a run task");
    FinishedRequest {
        workflow_id: task.workflow_id.clone(),
        session_id: task.session_id.clone(),
        iteration: task.iteration,
        success: true,
        text: Some("done".into()),
        error: None,
        attempt_id: task.attempt_id.clone(),
        worker: None,
    }
}
