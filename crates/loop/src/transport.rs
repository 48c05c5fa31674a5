//! The coordinator over HTTP (reference `create_coordinator_app` and
//! `run_worker_loop`): `POST /register`, `POST /finished` (a
//! [`FinishedRequest`] as JSON) and `GET /status`, each answered with JSON;
//! and a worker that pulls tasks from such a server, runs each as a
//! sandboxed step and reports it — writing the pending finished request
//! first, retrying the report with back-off — so a crash between the step
//! and the report loses nothing.
//!
//! The coordinator hands out one task at a time, as the reference does.
//! While a task this server handed out is not yet finished, another
//! `register` is answered 409 (the worker waits and asks again) until the
//! task's lease runs out; then `register` takes the task over as the
//! reference's crash recovery does (its result is recovered from the
//! pending request or result file, or it is recorded as abandoned). A
//! restarted server has no leases: the first `register` recovers.
//!
//! The 409 is a deliberate difference from the reference, whose second
//! `register` records the task out abandoned and hands out the next one at
//! once: keeping the lease means a slow worker's step is never run twice.
//! A `finished` for a task that is no longer the active one is answered
//! [`TaskResponse::stale_report`] and never moves the lease.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::models::{FinishedRequest, TaskResponse};
use super::service::Coordinator;
use super::worker::{StepRunner, WorkerError};

/// Report attempts for one finished task (reference
/// `_FINISHED_RETRY_ATTEMPTS` is 2; a worker on another machine deserves
/// a few more).
pub const FINISHED_RETRY_ATTEMPTS: u32 = 5;
/// Back-off between report attempts: this many seconds times the attempt.
pub const FINISHED_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// Largest request body the server reads, bytes.
const MAX_BODY_BYTES: u64 = 1 << 20;

fn respond<T: Serialize>(request: tiny_http::Request, status: u16, body: &T) {
    let text = serde_json::to_vec(body).unwrap_or_default();
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .expect("a static header is valid");
    let response = tiny_http::Response::from_data(text)
        .with_status_code(status)
        .with_header(header);
    let _ = request.respond(response);
}

/// Whether an id from a request is safe to join onto a session path.
fn safe_id(id: &str) -> bool {
    !id.is_empty() && !id.contains(['/', '\\']) && id != "." && id != ".."
}

/// The task this server handed out and when.
struct Lease {
    iteration: u32,
    workflow_id: String,
    since: std::time::Instant,
}

fn lease_of(task: &TaskResponse) -> Option<Lease> {
    task.task().map(|task| Lease {
        iteration: task.iteration,
        workflow_id: task.workflow_id.clone(),
        since: std::time::Instant::now(),
    })
}

/// Serve `coordinator` on `server` until `stop` is set (checked every
/// 100 ms). Bad requests get 400 with the reason, a `register` while a
/// task is leased 409, coordinator failures 500. A task's lease lasts
/// `lease` (then another worker may take it over).
pub fn serve(
    coordinator: Arc<Coordinator>,
    server: tiny_http::Server,
    stop: Arc<AtomicBool>,
    lease: Duration,
) {
    let mut leased: Option<Lease> = None;
    while !stop.load(Ordering::SeqCst) {
        let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let method = request.method().clone();
        let url = request.url().to_string();
        match (method, url.as_str()) {
            (tiny_http::Method::Post, "/register") => {
                if let Some(out) = leased.as_ref().filter(|out| out.since.elapsed() < lease) {
                    let message = format!(
                        "iteration {} ({}) is being run by another worker; one task is out at a time, ask again later",
                        out.iteration, out.workflow_id
                    );
                    respond(request, 409, &json!({"error": message}));
                    continue;
                }
                match coordinator.register() {
                    Ok(task) => {
                        leased = lease_of(&task);
                        respond(request, 200, &task)
                    }
                    Err(error) => respond(request, 500, &json!({"error": error.to_string()})),
                }
            }
            (tiny_http::Method::Post, "/finished") => {
                let mut body = String::new();
                let read = request
                    .as_reader()
                    .take(MAX_BODY_BYTES)
                    .read_to_string(&mut body);
                let parsed = read.map_err(|error| error.to_string()).and_then(|_| {
                    serde_json::from_str::<FinishedRequest>(&body).map_err(|e| e.to_string())
                });
                match parsed {
                    Err(error) => respond(
                        request,
                        400,
                        &json!({"error": format!("not a finished request: {error}")}),
                    ),
                    Ok(finished)
                        if !safe_id(&finished.session_id) || !safe_id(&finished.workflow_id) =>
                    {
                        respond(
                            request,
                            400,
                            &json!({"error": "session_id and workflow_id must be plain names"}),
                        )
                    }
                    Ok(finished) => match coordinator.finished(&finished) {
                        // A stale report hands nothing out: the lease stays
                        // with the worker that holds the active task.
                        Ok(task) if task.is_stale_report() => respond(request, 200, &task),
                        Ok(task) => {
                            leased = lease_of(&task);
                            respond(request, 200, &task)
                        }
                        Err(error) => respond(request, 500, &json!({"error": error.to_string()})),
                    },
                }
            }
            (tiny_http::Method::Get, "/status") => match coordinator.state() {
                Ok(state) => respond(request, 200, &json!({"state": state})),
                Err(error) => respond(request, 500, &json!({"error": error.to_string()})),
            },
            (_, path) => {
                let message = format!(
                    "no such endpoint {path}; use POST /register, POST /finished or GET /status"
                );
                respond(request, 404, &json!({"error": message}))
            }
        }
    }
}

/// Why a worker stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The coordinator could not be reached or answered with an error.
    #[error("coordinator at {url}: {message}")]
    Coordinator {
        /// The coordinator's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A task could not be run at all.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Another worker holds the task that is out (HTTP 409).
    #[error("coordinator at {url}: {message}")]
    Busy {
        /// The coordinator's URL.
        url: String,
        /// The coordinator's explanation (which iteration is out).
        message: String,
    },
    /// The coordinator stayed busy (409) for longer than
    /// [`BUSY_WAIT_LIMIT`].
    #[error(
        "coordinator at {url}: gave up after waiting {}s for the task another worker holds: {message}",
        waited.as_secs()
    )]
    BusyTooLong {
        /// The coordinator's URL.
        url: String,
        /// How long the worker waited.
        waited: Duration,
        /// The coordinator's last explanation.
        message: String,
    },
}

/// Longest a worker waits for a turn while another worker holds the task
/// that is out (the coordinator answers `register` with 409). A worker may
/// hold a task for the whole lease (`loop serve --lease-secs`, default
/// 600 s), so the bound is longer than the default lease.
pub const BUSY_WAIT_LIMIT: Duration = Duration::from_secs(15 * 60);
/// First pause before asking again after a 409; doubled after each, up to
/// [`BUSY_RETRY_MAX`].
pub const BUSY_RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest pause between two asks after a 409.
pub const BUSY_RETRY_MAX: Duration = Duration::from_secs(10);

fn post<T: Serialize>(
    agent: &ureq::Agent,
    url: &str,
    body: &T,
) -> Result<TaskResponse, TransportError> {
    let error = |message: String| TransportError::Coordinator {
        url: url.to_string(),
        message,
    };
    let response = match agent
        .post(url)
        .send_json(serde_json::to_value(body).map_err(|e| error(e.to_string()))?)
    {
        Ok(response) => response,
        Err(ureq::Error::Status(409, response)) => {
            let message = response
                .into_json::<serde_json::Value>()
                .ok()
                .and_then(|body| body["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "another worker is running the current task".into());
            return Err(TransportError::Busy {
                url: url.to_string(),
                message,
            });
        }
        Err(e) => return Err(error(e.to_string())),
    };
    response
        .into_json::<TaskResponse>()
        .map_err(|e| error(format!("unreadable answer: {e}")))
}

/// Pull tasks from the coordinator at `url` until it says stop (reference
/// `run_worker_loop`); returns the stop response. Each task runs in
/// `executor`; its finished request is written to its pending file before
/// it is reported, reported with up to [`FINISHED_RETRY_ATTEMPTS`]
/// attempts, and removed once the coordinator has it.
pub fn run_worker(
    repo_root: &Path,
    url: &str,
    executor: std::sync::Arc<dyn sandloop_core::step::StepExecutor>,
) -> Result<TaskResponse, TransportError> {
    let base = url.trim_end_matches('/');
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let runner = StepRunner::new(repo_root, executor);
    let register_url = format!("{base}/register");
    let mut task = register(&agent, &register_url)?;
    while let TaskResponse::Run(run) = &task {
        let finished = runner.run_task(run)?;
        let mut attempt = 0;
        task = loop {
            attempt += 1;
            match post(&agent, &format!("{base}/finished"), &finished.request) {
                Ok(next) => break next,
                Err(error) if attempt < FINISHED_RETRY_ATTEMPTS => {
                    tracing::warn!("{error}; retrying");
                    std::thread::sleep(FINISHED_RETRY_BACKOFF * attempt);
                }
                Err(error) => return Err(error),
            }
        };
        let _ = std::fs::remove_file(&finished.pending_path);
        if task.is_stale_report() {
            // Our lease ran out and another worker took the loop on: the
            // report was logged as late, and we ask for new work.
            tracing::info!(
                "sandloop loop worker: the report for iteration {} ({}) came too late (another \
                 worker took the task over); asking for a new task",
                finished.request.iteration,
                finished.request.workflow_id
            );
            task = register(&agent, &register_url)?;
        }
    }
    Ok(task)
}

/// `POST /register`, waiting for a turn while another worker holds the task
/// that is out (409): it says on stderr each time it will ask again, backs
/// off from [`BUSY_RETRY_FIRST`] to [`BUSY_RETRY_MAX`], and gives up after
/// [`BUSY_WAIT_LIMIT`] with [`TransportError::BusyTooLong`].
fn register(agent: &ureq::Agent, url: &str) -> Result<TaskResponse, TransportError> {
    let started = std::time::Instant::now();
    let mut pause = BUSY_RETRY_FIRST;
    loop {
        match post(agent, url, &json!({})) {
            Err(TransportError::Busy { url, message }) => {
                let waited = started.elapsed();
                if waited + pause > BUSY_WAIT_LIMIT {
                    return Err(TransportError::BusyTooLong {
                        url,
                        waited,
                        message,
                    });
                }
                tracing::info!(
                    "sandloop loop worker: {message}; retrying in {:.1}s (waited {}s of at most {}s)",
                    pause.as_secs_f64(),
                    waited.as_secs(),
                    BUSY_WAIT_LIMIT.as_secs()
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(BUSY_RETRY_MAX);
            }
            other => return other,
        }
    }
}
