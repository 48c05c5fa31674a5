//! A session's event log, `events.jsonl` (one JSON object per line, see
//! [`super::sessions::events_path`]): what happened to the session's tasks,
//! and what the coordinator noticed that has no place in the state's
//! `history`. The reference (loopy-loop 0.2.0) creates the file empty and
//! never writes it; loopy-loop 0.5 writes lifecycle events, and sandloop
//! uses its names where an event means the same:
//!
//! - `task_dispatched`: a task was handed out (`attempt_id`, and the
//!   `worker` it went to when it said who it is);
//! - `task_finished`: a task's result was recorded, from its report or
//!   (`recovered: true`) from the files its worker left;
//! - `iteration_abandoned`: a task whose worker is gone was taken back with
//!   no result to recover (`error: "abandoned"`);
//! - `session_stopped`: the session reached a terminal status.
//!
//! and two of its own, which loopy-loop 0.5 does not log:
//!
//! - `late_report`: a `/finished` that is not for the active task and
//!   attempt (its lease ran out and the task was taken back, it was already
//!   recorded, or it echoes another `attempt_id`). Nothing changed and
//!   nothing was handed out.
//! - `child_request_refused`: a child-session request that cannot be
//!   started (its workflow set does not exist or does not load); the request
//!   file is renamed `<name>.refused` so it is refused once.
//!
//! Every event carries `event` (its kind) and `at` (RFC 3339 UTC); the rest
//! of each line is the event's fields, flat (loopy-loop 0.5 nests them under
//! `payload` beside `type` and `ts`). Events are appended after the state
//! change they describe has been written.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::models::{CurrentTask, FinishedRequest, LoopStatus, WorkerIdentity, utc_now};
use super::sessions::events_path;

/// One line of `events.jsonl`, tagged by `event`.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SessionEvent {
    /// A task was handed out.
    TaskDispatched {
        /// When.
        at: String,
        /// The workflow to run.
        workflow_id: String,
        /// Its iteration.
        iteration: u32,
        /// The hand-out's attempt id.
        attempt_id: Option<String>,
        /// The worker it went to; `null` for one that did not say.
        worker: Option<WorkerIdentity>,
    },
    /// A task's result was recorded.
    TaskFinished {
        /// When.
        at: String,
        /// The workflow that ran.
        workflow_id: String,
        /// Its iteration.
        iteration: u32,
        /// The attempt that ran it.
        attempt_id: Option<String>,
        /// As recorded in the history (a missing goal-check verdict turns a
        /// success into a failure).
        success: bool,
        /// Why it failed.
        error: Option<String>,
        /// True when the result came from the files a gone worker left
        /// (`pending_finished_request.json` or `result.json`), not from its
        /// report.
        recovered: bool,
    },
    /// A task was taken back from a worker that is gone, with nothing to
    /// recover; its iteration is recorded as failed.
    IterationAbandoned {
        /// When.
        at: String,
        /// The workflow of the task.
        workflow_id: String,
        /// Its iteration.
        iteration: u32,
        /// The attempt taken back.
        attempt_id: Option<String>,
        /// What the history records: `"abandoned"`.
        error: String,
    },
    /// The session reached a terminal status.
    SessionStopped {
        /// When.
        at: String,
        /// The terminal status.
        status: LoopStatus,
        /// Why, e.g. `goal_met`.
        stop_reason: Option<String>,
    },
    /// A report for another task or attempt than the active one; it was not
    /// recorded as a result.
    LateReport {
        /// When it arrived.
        at: String,
        /// The report as the worker sent it (boxed: the event is large).
        report: Box<FinishedRequest>,
        /// The task that was active when it arrived.
        active_task: Option<Box<CurrentTask>>,
    },
    /// A child-session request that was refused and will not be retried.
    ChildRequestRefused {
        /// When it was refused.
        at: String,
        /// The request file, renamed to `request_file` + `.refused`.
        request_file: PathBuf,
        /// The workflow set it asked for.
        workflow_set: String,
        /// Why it was refused (the configuration error, naming file and
        /// field).
        reason: String,
    },
}

impl SessionEvent {
    /// A [`SessionEvent::LateReport`] stamped now.
    pub fn late_report(report: &FinishedRequest, active_task: Option<&CurrentTask>) -> Self {
        Self::LateReport {
            at: utc_now(),
            report: Box::new(report.clone()),
            active_task: active_task.cloned().map(Box::new),
        }
    }

    /// The same event, marked `recovered` when it is a
    /// [`SessionEvent::TaskFinished`].
    pub fn recovered(mut self) -> Self {
        if let Self::TaskFinished { recovered, .. } = &mut self {
            *recovered = true;
        }
        self
    }

    /// A [`SessionEvent::TaskDispatched`] for `task`, stamped now.
    pub fn task_dispatched(task: &CurrentTask) -> Self {
        Self::TaskDispatched {
            at: utc_now(),
            workflow_id: task.workflow_id.clone(),
            iteration: task.iteration,
            attempt_id: task.attempt_id.clone(),
            worker: task.worker.clone(),
        }
    }
}

/// Append `event` to the `events.jsonl` of `session_id` (created when
/// missing). Errors are returned as text naming the file; callers treat
/// them as warnings, since the event log is not the loop's state.
pub fn append_event(
    repo_root: &Path,
    session_id: &str,
    event: &SessionEvent,
) -> Result<(), String> {
    let path = events_path(repo_root, session_id);
    let mut line = serde_json::to_vec(event).map_err(|error| error.to_string())?;
    line.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(&line))
        .map_err(|error| format!("cannot append to {}: {error}", path.display()))
}

/// Every event in the `events.jsonl` of `session_id`, oldest first, as JSON
/// values (unparsable lines are skipped); empty when there is no log.
pub fn read_events(repo_root: &Path, session_id: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(events_path(repo_root, session_id))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
