//! A session's event log, `events.jsonl` (one JSON object per line, see
//! [`super::sessions::events_path`]): what the coordinator noticed that is
//! not an iteration's result and so has no place in the state's `history`.
//! The reference creates the file empty and never writes it; sandloop
//! appends these events:
//!
//! - `late_report`: a `/finished` for a task that is no longer the active
//!   one (its lease ran out and another worker took the loop on, or it was
//!   already recorded). Nothing else changed and nothing was handed out.
//! - `child_request_refused`: a child-session request that cannot be
//!   started (its workflow set does not exist or does not load); the request
//!   file is renamed `<name>.refused` so it is refused once.
//!
//! Every event carries `event` (its kind) and `at` (RFC 3339 UTC).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::models::{CurrentTask, FinishedRequest, utc_now};
use super::sessions::events_path;

/// One line of `events.jsonl`, tagged by `event`.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SessionEvent {
    /// A report for a task that is not the active one; it was not recorded
    /// as a result.
    LateReport {
        /// When it arrived.
        at: String,
        /// The report as the worker sent it.
        report: FinishedRequest,
        /// The task that was active when it arrived.
        active_task: Option<CurrentTask>,
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
            report: report.clone(),
            active_task: active_task.cloned(),
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
