//! `sandloop loop worker`: pull tasks from a coordinator served over HTTP
//! (reference `run_worker_loop`), run each as a sandboxed step, report it.
//!
//! The worker says who it is on every call
//! ([`WorkerIdentity`](super::models::WorkerIdentity)) and echoes
//! each task's `attempt_id`; sends the coordinator's bearer token when it
//! has one; trusts a CA file for a coordinator with its own certificate;
//! refuses a task whose ids are not plain names before anything is written
//! ([`super::worker::StepRunner::run_task`]). A report is written to the
//! iteration's pending file before it is sent, so a crash between the step
//! and the report loses nothing; one too large for the coordinator's limit
//! ([`MAX_REPORT_BYTES`]) is sent with its text cut to fit, and a warning
//! names both sizes (the iteration's files keep the whole text). Transport
//! errors and 5xx answers are retried with back-off; a 4xx is not: the
//! coordinator's reason is shown and the worker stops.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::auth::Token;
use super::http_server::pem_certificates;
use super::identity;
use super::models::{FinishedRequest, MAX_REPORT_BYTES, RegisterRequest, TaskResponse};
use super::worker::{StepRunner, WorkerError};

/// Report attempts for one finished task, counting the first (reference
/// `_FINISHED_RETRY_ATTEMPTS` is 2; a worker on another machine deserves
/// a few more).
pub const FINISHED_RETRY_ATTEMPTS: u32 = 5;
/// Back-off between report attempts: this times the attempt.
pub const FINISHED_RETRY_BACKOFF: Duration = Duration::from_secs(1);
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

/// Why a worker stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The coordinator could not be reached, or kept failing (5xx).
    #[error("coordinator at {url}: {message}")]
    Coordinator {
        /// The endpoint's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The coordinator refused the request (a 4xx other than 409): asking
    /// again would not help.
    #[error("coordinator at {url} refused the request ({status}): {reason}")]
    Refused {
        /// The endpoint's URL.
        url: String,
        /// The HTTP status, e.g. 401 or 413.
        status: u16,
        /// The coordinator's reason (its `error`), or the status text.
        reason: String,
    },
    /// A task could not be run at all.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Another worker holds the task that is out (HTTP 409).
    #[error("coordinator at {url}: {message}")]
    Busy {
        /// The endpoint's URL.
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
        /// The endpoint's URL.
        url: String,
        /// How long the worker waited.
        waited: Duration,
        /// The coordinator's last explanation.
        message: String,
    },
    /// The CA file of `--ca-file` could not be used.
    #[error("--ca-file {path}: {message}")]
    CaFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// How a worker reaches its coordinator.
#[derive(Clone, Debug, Default)]
pub struct WorkerOptions {
    /// Sent as `Authorization: Bearer …` on every call.
    pub token: Option<Token>,
    /// PEM certificates to trust for an `https://` coordinator, instead of
    /// the public web's roots.
    pub ca_file: Option<std::path::PathBuf>,
}

/// An HTTP client of one coordinator.
struct Client {
    agent: ureq::Agent,
    base: String,
    authorization: Option<String>,
}

impl Client {
    fn new(url: &str, options: &WorkerOptions) -> Result<Self, TransportError> {
        let mut builder = ureq::AgentBuilder::new().timeout(Duration::from_secs(60));
        if let Some(path) = &options.ca_file {
            builder = builder.tls_config(client_tls(path)?);
        }
        Ok(Self {
            agent: builder.build(),
            base: url.trim_end_matches('/').to_string(),
            authorization: options.token.as_ref().map(Token::header_value),
        })
    }

    /// `POST base + path` with `body` as JSON, read as a [`TaskResponse`].
    fn post<T: Serialize>(&self, path: &str, body: &T) -> Result<TaskResponse, TransportError> {
        let url = format!("{}{path}", self.base);
        let text = serde_json::to_string(body).map_err(|error| TransportError::Coordinator {
            url: url.clone(),
            message: error.to_string(),
        })?;
        let mut request = self
            .agent
            .post(&url)
            .set("Content-Type", "application/json");
        if let Some(value) = &self.authorization {
            request = request.set("Authorization", value);
        }
        let response = match request.send_string(&text) {
            Ok(response) => response,
            Err(ureq::Error::Status(status, response)) => {
                let status_text = response.status_text().to_string();
                let reason = read_limited(response.into_reader(), MAX_ANSWER_BYTES)
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
                    .and_then(|body| {
                        body.get("error").or_else(|| body.get("detail")).map(
                            |reason| match reason {
                                serde_json::Value::String(text) => text.clone(),
                                other => other.to_string(),
                            },
                        )
                    })
                    .unwrap_or(status_text);
                let reason = shortened(reason);
                return Err(match status {
                    409 => TransportError::Busy {
                        url,
                        message: reason,
                    },
                    400..=499 => TransportError::Refused {
                        url,
                        status,
                        reason,
                    },
                    _ => TransportError::Coordinator {
                        url,
                        message: format!("{status}: {reason}"),
                    },
                });
            }
            Err(error) => {
                return Err(TransportError::Coordinator {
                    url,
                    message: error.to_string(),
                });
            }
        };
        read_answer(response.into_reader(), MAX_ANSWER_BYTES)
            .map_err(|message| TransportError::Coordinator { url, message })
    }
}

/// Largest answer a worker reads from a coordinator, bytes (a task is a few
/// KiB: its ids and the session's config snapshot).
pub const MAX_ANSWER_BYTES: u64 = 8 << 20;
/// Longest reason of a coordinator's refusal a worker shows, characters.
const MAX_REASON_CHARS: usize = 2000;

/// At most `limit` bytes of a coordinator's answer (a task or an error);
/// the error says what is wrong.
fn read_limited(answer: impl std::io::Read, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    answer
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("unreadable answer: {error}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "the answer is larger than {limit} bytes; a task is a few KiB, so this is not a \
             sandloop coordinator's answer"
        ));
    }
    Ok(bytes)
}

/// A coordinator's answer read as a [`TaskResponse`], at most `limit`
/// bytes of it; the error says what is wrong.
fn read_answer(answer: impl std::io::Read, limit: u64) -> Result<TaskResponse, String> {
    let bytes = read_limited(answer, limit)?;
    serde_json::from_slice(&bytes).map_err(|error| format!("unreadable answer: {error}"))
}

/// `reason` cut to [`MAX_REASON_CHARS`] characters, saying how much more
/// there was.
fn shortened(reason: String) -> String {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        None => reason,
        Some((cut, _)) => format!(
            "{}… ({} more bytes not shown)",
            &reason[..cut],
            reason.len() - cut
        ),
    }
}

/// The client TLS configuration that trusts the certificates in `path`
/// (and nothing else).
fn client_tls(path: &Path) -> Result<Arc<rustls::ClientConfig>, TransportError> {
    let bad = |message: String| TransportError::CaFile {
        path: path.display().to_string(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in pem_certificates(path).map_err(bad)? {
        roots
            .add(certificate)
            .map_err(|error| bad(error.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| bad(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Marker put where a report's text was cut.
fn cut_marker(field: &str, original: usize, kept: usize) -> String {
    format!(
        "\n[sandloop loop worker: the step's {field} was cut from {original} to {kept} bytes \
         to fit the coordinator's {MAX_REPORT_BYTES}-byte report limit; the whole text is in \
         the iteration's files]"
    )
}

/// Cut `text` to at most `budget` bytes at a character boundary.
fn cut_to(text: &str, budget: usize) -> &str {
    let mut end = budget.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The `text` or `error` of `request`.
fn field_of<'a>(request: &'a mut FinishedRequest, field: &str) -> &'a mut Option<String> {
    if field == "text" {
        &mut request.text
    } else {
        &mut request.error
    }
}

/// `request` as it fits in `limit` bytes of JSON: unchanged when it
/// already does; otherwise with the longer of its `text` and `error` cut
/// (then the other, if that was not enough), each with a marker naming
/// both sizes. Returns the request to send and the original size when
/// something was cut.
pub fn fit_report(request: &FinishedRequest, limit: usize) -> (FinishedRequest, Option<usize>) {
    let size = |request: &FinishedRequest| serde_json::to_vec(request).map_or(0, |v| v.len());
    let original = size(request);
    if original <= limit {
        return (request.clone(), None);
    }
    let mut fitted = request.clone();
    let mut fields = [
        ("text", request.text.as_ref().map_or(0, String::len)),
        ("error", request.error.as_ref().map_or(0, String::len)),
    ];
    fields.sort_by_key(|(_, length)| std::cmp::Reverse(*length));
    for (field, _) in fields {
        let Some(whole) = field_of(&mut fitted, field).clone() else {
            continue;
        };
        if size(&fitted) <= limit {
            break;
        }
        // Shrink the kept part in proportion to the overflow until it fits
        // (JSON escapes make a byte of text cost up to six on the wire).
        let mut keep = whole.len();
        loop {
            let kept = cut_to(&whole, keep);
            *field_of(&mut fitted, field) = Some(format!(
                "{kept}{}",
                cut_marker(field, whole.len(), kept.len())
            ));
            let now = size(&fitted);
            if now <= limit || keep == 0 {
                break;
            }
            let scaled = (keep as u128 * limit as u128 / now as u128) as usize;
            keep = scaled.saturating_sub(64);
        }
    }
    (fitted, Some(original))
}

/// Check a coordinator's URL as `loop worker --coordinator` takes it:
/// `http://HOST:PORT` or `https://…`, with a host.
///
/// # Errors
/// What was expected, quoting `url`.
pub fn check_coordinator_url(url: &str) -> Result<(), String> {
    let host = url
        .split_once("://")
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
        .map(|(_, rest)| rest);
    if host.is_none_or(str::is_empty) {
        return Err(format!(
            "--coordinator {url:?}: expected the coordinator's URL, http://HOST:PORT (what `sandloop loop serve` printed)"
        ));
    }
    Ok(())
}

/// Pull tasks from the coordinator at `url` until it says stop (reference
/// `run_worker_loop`); returns the stop response. Each task runs in
/// `executor`; its finished request is written to its pending file before
/// it is reported, reported with up to [`FINISHED_RETRY_ATTEMPTS`]
/// attempts (transport errors and 5xx only), and removed once the
/// coordinator has it.
pub fn run_worker(
    repo_root: &Path,
    url: &str,
    options: &WorkerOptions,
    executor: Arc<dyn sandloop_core::step::StepExecutor>,
) -> Result<TaskResponse, TransportError> {
    let client = Client::new(url, options)?;
    let me = identity::current();
    let runner = StepRunner::new(repo_root, executor);
    let hello = RegisterRequest {
        worker: Some(me.clone()),
    };
    let mut task = register(&client, &hello)?;
    while let TaskResponse::Run(run) = &task {
        let finished = runner.run_task(run)?;
        let mut request = finished.request.clone();
        request.worker = Some(me.clone());
        let (request, cut_from) = fit_report(&request, MAX_REPORT_BYTES);
        if let Some(original) = cut_from {
            tracing::warn!(
                "sandloop loop worker: the report of iteration {} ({}) is {original} bytes, over the \
                 coordinator's limit of {MAX_REPORT_BYTES} bytes; its text was cut to fit (the whole \
                 text is in {})",
                request.iteration,
                request.workflow_id,
                finished.pending_path.with_file_name("").display()
            );
        }
        let mut attempt = 0;
        task = loop {
            attempt += 1;
            match client.post("/finished", &request) {
                Ok(next) => break next,
                Err(error @ TransportError::Coordinator { .. })
                    if attempt < FINISHED_RETRY_ATTEMPTS =>
                {
                    tracing::warn!(
                        "{error}; retrying in {}s (attempt {attempt} of {FINISHED_RETRY_ATTEMPTS})",
                        (FINISHED_RETRY_BACKOFF * attempt).as_secs()
                    );
                    std::thread::sleep(FINISHED_RETRY_BACKOFF * attempt);
                }
                Err(error) => return Err(error),
            }
        };
        let _ = std::fs::remove_file(&finished.pending_path);
        if task.is_stale_report() {
            // Our lease ran out and the task was taken back: the report was
            // logged as late, and we ask for new work.
            tracing::info!(
                "sandloop loop worker: the report for iteration {} ({}) came too late (the task \
                 was taken back); asking for a new task",
                request.iteration,
                request.workflow_id
            );
            task = register(&client, &hello)?;
        }
    }
    Ok(task)
}

/// `POST /register`, waiting for a turn while another worker holds the task
/// that is out (409): it says on stderr each time it will ask again, backs
/// off from [`BUSY_RETRY_FIRST`] to [`BUSY_RETRY_MAX`], and gives up after
/// [`BUSY_WAIT_LIMIT`] with [`TransportError::BusyTooLong`].
fn register(client: &Client, hello: &RegisterRequest) -> Result<TaskResponse, TransportError> {
    let started = std::time::Instant::now();
    let mut pause = BUSY_RETRY_FIRST;
    loop {
        match client.post("/register", hello) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_url_needs_an_http_scheme_and_a_host() {
        for good in ["http://127.0.0.1:8080", "https://loop.example:443"] {
            assert_eq!(check_coordinator_url(good), Ok(()), "{good}");
        }
        for bad in ["127.0.0.1:8080", "http://", "ftp://host:1", ""] {
            let error = check_coordinator_url(bad).unwrap_err();
            assert!(
                error.starts_with(&format!("--coordinator {bad:?}: expected")),
                "{error}"
            );
        }
    }

    fn request(text: &str, error: Option<&str>) -> FinishedRequest {
        FinishedRequest {
            workflow_id: "draft".into(),
            session_id: "s1".into(),
            iteration: 3,
            success: error.is_none(),
            text: Some(text.into()),
            error: error.map(str::to_owned),
            attempt_id: Some("0123456789ab".into()),
            worker: None,
        }
    }

    #[test]
    fn an_answer_too_large_for_a_task_is_refused_and_a_long_reason_cut() {
        let huge = format!("{{\"action\": \"stop\", \"pad\": \"{}\"}}", "x".repeat(100));
        assert!(read_answer(huge.as_bytes(), 1 << 20).is_ok());
        let error = read_answer(huge.as_bytes(), 64).unwrap_err();
        assert!(error.contains("larger than 64 bytes"), "{error}");
        assert!(
            read_answer(&b"not json"[..], 64)
                .unwrap_err()
                .starts_with("unreadable answer")
        );
        let reason = shortened("é".repeat(3000));
        assert!(reason.ends_with("(2000 more bytes not shown)"), "{reason}");
        assert_eq!(shortened("short".into()), "short");
    }

    #[test]
    fn a_report_that_fits_is_sent_as_it_is() {
        let small = request("all good", None);
        assert_eq!(fit_report(&small, MAX_REPORT_BYTES), (small, None));
    }

    #[test]
    fn an_oversized_report_is_cut_to_the_limit_with_a_marker_naming_both_sizes() {
        for text in [
            "x".repeat(2_000_000),
            // Escapes cost six bytes on the wire for one of text.
            "\u{1}".repeat(400_000),
            // Multi-byte characters are never split.
            "é".repeat(700_000),
        ] {
            let big = request(&text, None);
            let (fitted, original) = fit_report(&big, MAX_REPORT_BYTES);
            let sent = serde_json::to_vec(&fitted).unwrap().len();
            assert_eq!(original, Some(serde_json::to_vec(&big).unwrap().len()));
            assert!(sent <= MAX_REPORT_BYTES, "{sent}");
            assert!(sent > MAX_REPORT_BYTES / 2, "kept too little: {sent}");
            let cut = fitted.text.unwrap();
            assert!(
                cut.contains(&format!("cut from {} to", text.len()))
                    && cut.contains("1048576-byte report limit"),
                "{}",
                &cut[cut.len() - 200..]
            );
            assert_eq!(
                (fitted.iteration, fitted.attempt_id.as_deref()),
                (3, Some("0123456789ab"))
            );
        }
    }

    #[test]
    fn a_huge_error_is_cut_too_when_the_text_alone_cannot_make_room() {
        let big = request("short", Some(&"e".repeat(3_000_000)));
        let (fitted, original) = fit_report(&big, MAX_REPORT_BYTES);
        assert!(original.is_some());
        assert!(serde_json::to_vec(&fitted).unwrap().len() <= MAX_REPORT_BYTES);
        assert!(fitted.error.unwrap().contains("step's error was cut"));
    }
}
