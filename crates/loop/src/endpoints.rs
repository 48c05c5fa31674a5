//! The coordinator's three endpoints, free of any transport (reference
//! `create_coordinator_app`): `POST /register`, `POST /finished` and
//! `GET /status`, each taking the request body's bytes and answering a
//! status code and a JSON body. [`super::http_server`] serves them over
//! HTTP; tests call them directly.
//!
//! The coordinator hands out one task at a time, as the reference does.
//! While a task this server handed out is leased (not yet finished, and
//! younger than its lease), another `register` is answered 409 (the worker
//! waits and asks again) — unless the task's worker is known to be gone
//! (it ran on this host and its process has ended; see
//! `identity::is_gone`) or is the one asking again, having given
//! the task up. Then, or once the lease runs out, `register` takes the task
//! back as the reference's crash recovery does (its result is recovered
//! from the pending request or result file of the same attempt, or it is
//! recorded as abandoned). A restarted server has no leases: the first
//! `register` recovers.
//!
//! The 409 is a deliberate difference from loopy-loop 0.2.0, whose second
//! `register` records the task abandoned and hands out the next one at
//! once: keeping the lease means a slow worker's step is never run twice.
//! A `finished` for another task or attempt than the active one is
//! answered [`TaskResponse::stale_report`] and never moves the lease.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::identity;
use super::models::{FinishedRequest, RegisterRequest, TaskResponse, WorkerIdentity};
use super::service::Coordinator;
use super::sessions::check_path_component;

/// An answer: HTTP status code and JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// 200, or 400 (bad request), 409 (a task is leased), 500
    /// (the coordinator failed).
    pub status: u16,
    /// The JSON body: a `TaskResponse`, `{"state": …}`, or `{"error": …}`.
    pub body: Vec<u8>,
}

impl Reply {
    /// `body` as JSON with `status`.
    pub(crate) fn json<T: Serialize>(status: u16, body: &T) -> Self {
        Self {
            status,
            body: serde_json::to_vec(body).unwrap_or_default(),
        }
    }

    /// `{"error": message}` with `status`.
    pub(crate) fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, &json!({ "error": message.into() }))
    }
}

/// The task this server handed out, to whom and when.
struct Lease {
    iteration: u32,
    workflow_id: String,
    worker: Option<WorkerIdentity>,
    since: Instant,
}

fn lease_of(task: &TaskResponse, worker: Option<&WorkerIdentity>) -> Option<Lease> {
    task.task().map(|task| Lease {
        iteration: task.iteration,
        workflow_id: task.workflow_id.clone(),
        worker: worker.cloned(),
        since: Instant::now(),
    })
}

fn describe(worker: &WorkerIdentity) -> String {
    format!("worker pid {} on {}", worker.pid, worker.hostname)
}

/// The endpoints of one coordinator, shared by every connection.
pub struct Endpoints {
    coordinator: Arc<Coordinator>,
    lease: Duration,
    /// The leased task; held across each `register` and `finished` so two
    /// workers never both take the same task back.
    out: Mutex<Option<Lease>>,
    /// The active session's state file, as of the last `register` or
    /// `finished` (the only calls that switch sessions), for `/status`.
    state_file: RwLock<Option<PathBuf>>,
}

impl Endpoints {
    /// The endpoints of `coordinator`; a handed-out task is leased for
    /// `lease`.
    pub fn new(coordinator: Arc<Coordinator>, lease: Duration) -> Self {
        let state_file = RwLock::new(coordinator.state_path());
        Self {
            coordinator,
            lease,
            out: Mutex::new(None),
            state_file,
        }
    }

    /// Note the state file the coordinator uses now.
    fn follow_state_file(&self) {
        let path = self.coordinator.state_path();
        *self
            .state_file
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = path;
    }

    fn out(&self) -> std::sync::MutexGuard<'_, Option<Lease>> {
        self.out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `POST /register` with `body`: empty, `{}` or
    /// `{"worker": {"hostname", "pid", "starttime"}}`.
    pub fn register(&self, body: &[u8]) -> Reply {
        let request = if body.iter().all(u8::is_ascii_whitespace) {
            RegisterRequest::default()
        } else {
            match serde_json::from_slice::<RegisterRequest>(body) {
                Ok(request) => request,
                Err(error) => {
                    return Reply::error(400, format!("not a register request: {error}"));
                }
            }
        };
        let caller = request.worker.as_ref();
        let mut out = self.out();
        if let Some(lease) = out
            .as_ref()
            .filter(|lease| lease.since.elapsed() < self.lease)
        {
            let holder = lease.worker.as_ref();
            let gave_up = holder.is_some() && holder == caller;
            let gone = holder.is_some_and(identity::is_gone);
            if !gave_up && !gone {
                let by = holder.map_or_else(|| "another worker".to_string(), describe);
                let message = format!(
                    "iteration {} ({}) is being run by {by}; one task is out at a time, ask again later",
                    lease.iteration, lease.workflow_id
                );
                return Reply::error(409, message);
            }
            tracing::info!(
                "sandloop loop: taking iteration {} ({}) back from {}, {}",
                lease.iteration,
                lease.workflow_id,
                holder.map_or_else(String::new, describe),
                if gone {
                    "whose process has ended"
                } else {
                    "which asked for a new task"
                }
            );
        }
        let reply = match self.coordinator.register_as(caller) {
            Ok(task) => {
                *out = lease_of(&task, caller);
                Reply::json(200, &task)
            }
            Err(error) => Reply::error(500, error.to_string()),
        };
        self.follow_state_file();
        reply
    }

    /// `POST /finished` with a [`FinishedRequest`] as `body`. Its
    /// `session_id` and `workflow_id` must be plain names
    /// ([`check_path_component`]), or it is answered 400 naming the field.
    pub fn finished(&self, body: &[u8]) -> Reply {
        let request = match serde_json::from_slice::<FinishedRequest>(body) {
            Ok(request) => request,
            Err(error) => return Reply::error(400, format!("not a finished request: {error}")),
        };
        if let Err(error) = check_path_component("session_id", &request.session_id)
            .and_then(|()| check_path_component("workflow_id", &request.workflow_id))
        {
            return Reply::error(400, error.to_string());
        }
        let mut out = self.out();
        let reply = match self.coordinator.finished(&request) {
            // A stale report hands nothing out: the lease stays with the
            // worker that holds the active task.
            Ok(task) if task.is_stale_report() => Reply::json(200, &task),
            Ok(task) => {
                *out = lease_of(&task, request.worker.as_ref());
                Reply::json(200, &task)
            }
            Err(error) => Reply::error(500, error.to_string()),
        };
        self.follow_state_file();
        reply
    }

    /// `GET /status`: `{"state": LoopState | null}`, the active session's
    /// `state.json` as on disk. It is read without the state lock (the
    /// file is always replaced whole), so a status never waits for a
    /// `register` or `finished` writing it.
    pub fn status(&self) -> Reply {
        let path = self
            .state_file
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let state = match path.map(std::fs::read) {
            None => None,
            Some(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => None,
            Some(Err(error)) => {
                return Reply::error(500, format!("cannot read the state: {error}"));
            }
            Some(Ok(bytes)) => Some(bytes),
        };
        // Checked for syntax only (no values built): a damaged file is a
        // 500 naming it, never a broken answer.
        if let Some(bytes) = &state
            && let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        {
            return Reply::error(500, format!("the loop's state.json is damaged: {error}"));
        }
        let mut body = b"{\"state\":".to_vec();
        match state {
            Some(bytes) => body.extend_from_slice(bytes.trim_ascii()),
            None => body.extend_from_slice(b"null"),
        }
        body.push(b'}');
        Reply { status: 200, body }
    }
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod tests;
