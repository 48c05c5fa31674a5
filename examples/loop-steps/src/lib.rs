//! An example loop workflow plugin (world `workflow`): one component that
//! serves three workflows, told apart by the task's `workflow-id`.
//!
//! Every step runs in a fresh sandbox, so progress lives in the directory
//! the workflow is granted at `/work` (read-write):
//!
//! - `plan` writes `/work/plan.txt` with the goal and the target count
//!   (the first number in the goal, default 3);
//! - `work` appends one line, `step ITERATION in SESSION-ID`, to
//!   `/work/progress.txt` (a parent and its child session share the file,
//!   and the line says which one wrote it); an item whose goal mentions
//!   `fail` makes it fail instead, and `child:` in the goal makes the
//!   session's first work step ask for a child session with the rest of the
//!   goal; `slow` makes each work step take 300 ms (crash tests kill it
//!   mid-step);
//! - `goal_check` reports the goal met once `progress.txt` has as many
//!   lines of its own session as the target.
//!
//! Two more try the sandbox's grants (a workflow set of the e2e tests):
//!
//! - `plant` replaces the granted `/work/sub` with a symlink to
//!   `../../outside`, a directory beside the repository;
//! - `probe` reads `/sub/secret.txt` from its own grant of `work/sub`, and
//!   succeeds with what it read only if that grant let it out.
//!
//! Any other workflow id fails with an error naming it.

wit_bindgen::generate!({
    path: "../../wit",
    world: "workflow",
});

use exports::sandloop::adapter::step::{Guest, Outcome, Task};
use sandloop::adapter::log::{Level, log};
use sandloop::adapter::signals;

struct Steps;

const PLAN: &str = "/work/plan.txt";
const PROGRESS: &str = "/work/progress.txt";

fn target(goal: &str) -> usize {
    goal.split(|c: char| !c.is_ascii_digit())
        .find(|part| !part.is_empty())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(3)
}

/// The line a work step of `iteration` in session `session` writes.
fn progress_line(iteration: u32, session: &str) -> String {
    format!("step {iteration} in {session}")
}

/// How many lines of `progress.txt` session `session` wrote.
fn progress(session: &str) -> usize {
    let suffix = format!(" in {session}");
    std::fs::read_to_string(PROGRESS)
        .map(|text| text.lines().filter(|line| line.ends_with(&suffix)).count())
        .unwrap_or(0)
}

fn ok(text: String) -> Outcome {
    Outcome {
        success: true,
        text: Some(text),
        error: None,
    }
}

fn failed(error: String) -> Outcome {
    Outcome {
        success: false,
        text: None,
        error: Some(error),
    }
}

impl Guest for Steps {
    fn run_step(task: Task) -> Outcome {
        log(
            Level::Info,
            &format!("{} step, iteration {}", task.workflow_id, task.iteration),
        );
        match task.workflow_id.as_str() {
            "plan" => {
                let plan = format!("goal: {}\ntarget: {}\n", task.goal, target(&task.goal));
                match std::fs::write(PLAN, plan) {
                    Ok(()) => ok(format!("planned {} steps", target(&task.goal))),
                    Err(error) => failed(format!("cannot write {PLAN}: {error}")),
                }
            }
            "work" => {
                if task.goal.contains("slow") {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                }
                if task.goal.contains("fail") {
                    return failed("the goal asks this step to fail".into());
                }
                if let Some((_, child_goal)) = task.goal.split_once("child:")
                    && progress(&task.session_id) == 0
                    && let Err(error) =
                        signals::request_child_session(&task.workflow_set, child_goal.trim())
                {
                    return failed(format!("child session refused: {error}"));
                }
                use std::io::Write;
                let line = progress_line(task.iteration, &task.session_id) + "\n";
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(PROGRESS)
                    .and_then(|mut file| file.write_all(line.as_bytes()));
                match written {
                    Ok(()) => ok(format!("progress {}", progress(&task.session_id))),
                    Err(error) => failed(format!("cannot write {PROGRESS}: {error}")),
                }
            }
            "goal_check" => {
                let (done, wanted) = (progress(&task.session_id), target(&task.goal));
                let met = done >= wanted;
                match signals::report_goal_check(met, &format!("{done} of {wanted} steps done")) {
                    Ok(()) if met => match signals::request_stop(
                        signals::StopReason::GoalMet,
                        "the target was reached",
                    ) {
                        Ok(()) => ok(format!("goal met: {done} of {wanted}")),
                        Err(error) => failed(error),
                    },
                    Ok(()) => ok(format!("not yet: {done} of {wanted}")),
                    Err(error) => failed(error),
                }
            }
            "plant" => {
                let planted = std::fs::remove_dir_all("/work/sub").and_then(|()| {
                    #[allow(deprecated)] // the one portable spelling on WASI
                    std::fs::soft_link("../../outside", "/work/sub")
                });
                match planted {
                    Ok(()) => ok("planted /work/sub -> ../../outside".into()),
                    Err(error) => failed(format!("cannot plant the link: {error}")),
                }
            }
            "probe" => match std::fs::read_to_string("/sub/secret.txt") {
                Ok(text) => ok(format!("read /sub/secret.txt: {}", text.trim())),
                Err(error) => failed(format!("cannot read /sub/secret.txt: {error}")),
            },
            other => failed(format!("loop-steps has no workflow {other:?}")),
        }
    }
}

export!(Steps);
