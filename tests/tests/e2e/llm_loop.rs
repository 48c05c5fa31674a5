//! `sandloop loop init --template openai`: steps of the `llm-steps` plugin
//! ask an OpenAI-compatible endpoint over `wasi:http`, here a fake one on
//! loopback, and reach only the hosts their `http_hosts` grant names.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::LLM_STEPS;

/// A chat-completions server on 127.0.0.1: drafts are answered `draft N`
/// (or what [`FakeModel::start_with`] was given), the first goal check
/// `goal_met: false`, later ones `true`. Every request is kept
/// (authorization header and JSON body).
pub(crate) struct FakeModel {
    pub(crate) url: String,
    pub(crate) port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeModel {
    fn start() -> Self {
        Self::start_with(|n| format!("draft {n}"))
    }

    /// A model whose `n`-th draft (from 1) is `draft(n)`.
    pub(crate) fn start_with(draft: impl Fn(u32) -> String + Send + 'static) -> Self {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopping) = (Arc::clone(&requests), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let (mut drafts, mut checks) = (0, 0);
            while !stopping.load(Ordering::Relaxed) {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                request.as_reader().read_to_string(&mut body).unwrap();
                let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let authorization = request
                    .headers()
                    .iter()
                    .find(|header| header.field.equiv("authorization"))
                    .map(|header| header.value.to_string());
                let system = body["messages"][0]["content"].as_str().unwrap_or("");
                let content = if system.contains("goal_met") {
                    checks += 1;
                    format!(
                        "Verdict: {{\"goal_met\": {}, \"reason\": \"check {checks}\"}}",
                        checks > 1
                    )
                } else {
                    drafts += 1;
                    draft(drafts)
                };
                seen.lock().unwrap().push(json!({
                    "method": request.method().as_str(),
                    "path": request.url(),
                    "authorization": authorization,
                    "body": body,
                }));
                let reply =
                    json!({"choices": [{"message": {"role": "assistant", "content": content}}]});
                let header =
                    tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let _ = request.respond(
                    tiny_http::Response::from_string(reply.to_string()).with_header(header),
                );
            }
        });
        Self {
            url: format!("http://127.0.0.1:{port}/v1"),
            port,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub(crate) fn init_openai(repo: &Path, http_host: Option<&str>) {
    let output = run(&[
        "loop",
        "init",
        "--template",
        "openai",
        "--repo",
        s(repo),
        "--plugin",
        LLM_STEPS,
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("OPENAI_API_KEY"),
        "{}",
        stdout(&output)
    );
    // A second init, of either template, would merge two loops: refused.
    let again = run(&["loop", "init", "--repo", s(repo), "--plugin", LLM_STEPS]);
    assert_eq!(code(&again), 2, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already has a loop"),
        "{}",
        stderr(&again)
    );
    assert!(
        !repo
            .join(".sandloop/workflow_sets/main/workflows/plan")
            .exists(),
        "nothing of the count template was written"
    );
    let workflows = repo.join(".sandloop/workflow_sets/main/workflows");
    for workflow in ["draft", "goal_check"] {
        let path = workflows.join(workflow).join("workflow.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("http_hosts = [\"api.openai.com\"]"), "{text}");
        if let Some(host) = http_host {
            // A server on loopback is a private address: allowed here.
            let text = text
                .replace("\"api.openai.com\"", &format!("\"{host}\""))
                .replace(
                    "allow_private_addresses = false",
                    "allow_private_addresses = true",
                );
            std::fs::write(&path, text).unwrap();
        }
    }
}

fn run_loop(repo: &Path, model: &FakeModel) -> std::process::Output {
    sandloop()
        .args(["loop", "run", "--repo", s(repo), "--json"])
        .env("OPENAI_BASE_URL", &model.url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "tiny-test-model")
        .output()
        .unwrap()
}

#[test]
fn openai_template_loop_asks_the_granted_endpoint_until_the_goal_is_met() {
    let model = FakeModel::start();
    let repo = tempfile::tempdir().unwrap();
    init_openai(repo.path(), Some(&format!("127.0.0.1:{}", model.port)));
    let output = run_loop(repo.path(), &model);
    assert_eq!(code(&output), 0, "{}\n{}", stderr(&output), stdout(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["stop_reason"], "goal_met", "{report}");
    let history = report["state"]["history"].as_array().unwrap();
    let steps: Vec<(&str, bool)> = history
        .iter()
        .map(|e| (e["workflow_id"].as_str().unwrap(), e["success"] == true))
        .collect();
    assert_eq!(
        steps,
        [
            ("draft", true),
            ("goal_check", true),
            ("draft", true),
            ("goal_check", true)
        ]
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 4, "one request per step: {requests:?}");
    for request in &requests {
        assert_eq!(request["method"], "POST");
        assert_eq!(request["path"], "/v1/chat/completions");
        assert_eq!(request["authorization"], "Bearer sk-test");
        assert_eq!(request["body"]["model"], "tiny-test-model");
        let user = request["body"]["messages"][1]["content"].as_str().unwrap();
        assert!(
            user.contains("haiku"),
            "the rendered prompt carries the goal: {user}"
        );
    }
    // The second draft saw the first through the granted notes directory.
    let second_draft = requests[2]["body"]["messages"][1]["content"]
        .as_str()
        .unwrap();
    assert!(second_draft.contains("draft 1"), "{second_draft}");
    let notes = std::fs::read_to_string(repo.path().join("notes/log.md")).unwrap();
    assert!(
        notes.contains("draft 1") && notes.contains("draft 2"),
        "{notes}"
    );
    assert!(!notes.contains("goal_met"), "checks are not notes: {notes}");
}

#[test]
fn a_host_outside_the_grant_is_refused_and_named() {
    let model = FakeModel::start();
    let repo = tempfile::tempdir().unwrap();
    // The grant keeps api.openai.com while the endpoint is on loopback.
    init_openai(repo.path(), None);
    let toml = repo.path().join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 10", "max_turns = 2");
    std::fs::write(&toml, text).unwrap();
    let output = run_loop(repo.path(), &model);
    assert_eq!(code(&output), 1, "out of turns: {}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let history = report["state"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    for entry in history {
        assert_eq!(entry["success"], false);
        let error = entry["error"].as_str().unwrap();
        assert!(error.contains("HTTP request denied"), "{error}");
        assert!(
            error.contains(&format!("refused to 127.0.0.1:{}", model.port)),
            "{error}"
        );
    }
    assert!(model.requests().is_empty(), "nothing reached the server");
}

#[test]
fn a_server_that_never_answers_costs_one_call_deadline_not_a_hang() {
    // Over HTTPS the server never finishes the TLS handshake.
    for scheme in ["http", "https"] {
        silent_server_costs_one_deadline(scheme);
    }
}

fn silent_server_costs_one_deadline(scheme: &str) {
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().take(1) {
            open.push(stream);
            std::thread::sleep(Duration::from_secs(20));
        }
    });
    let repo = tempfile::tempdir().unwrap();
    init_openai(repo.path(), Some(&format!("127.0.0.1:{port}")));
    let draft = repo
        .path()
        .join(".sandloop/workflow_sets/main/workflows/draft/workflow.toml");
    let text = std::fs::read_to_string(&draft)
        .unwrap()
        .replace("call_timeout_secs = 120", "call_timeout_secs = 1");
    std::fs::write(&draft, text).unwrap();
    let toml = repo.path().join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 10", "max_turns = 1");
    std::fs::write(&toml, text).unwrap();
    let started = std::time::Instant::now();
    let output = sandloop()
        .args(["loop", "run", "--repo", s(repo.path()), "--json"])
        .env("OPENAI_BASE_URL", format!("{scheme}://127.0.0.1:{port}/v1"))
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(code(&output), 1, "{scheme}: {}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let error = report["state"]["history"][0]["error"].as_str().unwrap();
    // The request's capped timeout or the call's own deadline, whichever
    // the step reaches first: either way the wait is one deadline.
    assert!(
        error.contains("Timeout") || error.contains("deadline"),
        "{scheme}: {error}"
    );
    assert!(
        elapsed < Duration::from_secs(15),
        "{scheme}: the 1 s deadline bounds the wait, took {elapsed:?}"
    );
    drop(held);
}

#[test]
fn a_granted_host_at_a_private_address_is_refused_unless_the_workflow_allows_it() {
    let model = FakeModel::start();
    let repo = tempfile::tempdir().unwrap();
    init_openai(repo.path(), Some(&format!("localhost:{}", model.port)));
    let workflows = repo.path().join(".sandloop/workflow_sets/main/workflows");
    for workflow in ["draft", "goal_check"] {
        let path = workflows.join(workflow).join("workflow.toml");
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "allow_private_addresses = true",
            "allow_private_addresses = false",
        );
        std::fs::write(&path, text).unwrap();
    }
    let toml = repo.path().join("sandloop-loop.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("max_turns = 10", "max_turns = 1");
    std::fs::write(&toml, text).unwrap();
    let output = sandloop()
        .args(["loop", "run", "--repo", s(repo.path()), "--json"])
        .env(
            "OPENAI_BASE_URL",
            format!("http://localhost:{}/v1", model.port),
        )
        .env("OPENAI_API_KEY", "sk-test")
        .output()
        .unwrap();
    assert_eq!(code(&output), 1, "out of turns: {}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let error = report["state"]["history"][0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "refused to a private address: localhost:{} (resolves to ",
            model.port
        )) && error.contains("allow_private_addresses = true"),
        "{error}"
    );
    assert!(model.requests().is_empty(), "nothing reached the server");
}
