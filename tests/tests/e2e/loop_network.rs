//! `sandloop loop serve` and `loop worker` where other people and other
//! machines touch them: a stalled client, a coordinator that sends
//! path-like ids, escape sequences in a model's reply, a step result over
//! the report limit, an exposed address, bearer tokens, TLS, attempt
//! fencing on the wire and a graceful stop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::llm_loop::{FakeModel, init_openai};
use crate::loops::{free_listen, init};
use crate::support::*;

/// `sandloop loop serve --repo REPO --listen LISTEN ARGS…`, started and
/// listening; its stdout and stderr go to files in `logs`.
fn serve(repo: &Path, listen: &str, args: &[&str], logs: &Path) -> KillOnDrop {
    let child = sandloop()
        .args(["loop", "serve", "--repo", s(repo), "--listen", listen])
        .args(args)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "tiny-test-model")
        .stdout(std::fs::File::create(logs.join("serve.out")).unwrap())
        .stderr(std::fs::File::create(logs.join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    // The socket is bound before the loop is checked and opened, so a
    // connection can succeed before the start line is printed: wait for both.
    let started = Instant::now();
    let printed = || {
        std::fs::read_to_string(logs.join("serve.out"))
            .is_ok_and(|out| out.contains("coordinator listening on"))
    };
    while TcpStream::connect(listen).is_err() || !printed() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "loop serve did not start listening: {}",
            std::fs::read_to_string(logs.join("serve.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    KillOnDrop(child)
}

/// A count loop in a new directory, served on a free loopback port.
struct Served {
    dir: tempfile::TempDir,
    logs: tempfile::TempDir,
    listen: String,
    server: KillOnDrop,
}

/// [`Served`] with `loop serve` given `args` too.
fn served(args: &[&str]) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let listen = free_listen();
    let server = serve(dir.path(), &listen, args, logs.path());
    Served {
        dir,
        logs,
        listen,
        server,
    }
}

/// `sandloop loop worker` for `repo` against `url`, with `args`.
fn worker(repo: &Path, url: &str, args: &[&str]) -> std::process::Command {
    let mut command = sandloop();
    command
        .args(["loop", "worker", "--repo", s(repo), "--coordinator", url])
        .args(args);
    command
}

/// Asserts that a `loop worker` drove the loop to its goal (exit 0).
fn assert_reached_goal(output: &std::process::Output) {
    assert_eq!(code(output), 0, "{}", stderr(output));
    assert!(
        stdout(output).contains("said stop (goal_met)"),
        "{}",
        stdout(output)
    );
}

/// One HTTP/1.1 request on a fresh connection; the status and the JSON
/// body (`Null` when it is not JSON).
fn http(listen: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, Value) {
    http_paused(listen, method, path, headers, body, Duration::ZERO)
}

/// [`http`], with `pause` between the request head and its body (the whole
/// body must then still be taken: a write error fails the test).
fn http_paused(
    listen: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
    pause: Duration,
) -> (u16, Value) {
    let mut stream = TcpStream::connect(listen).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    std::thread::sleep(pause);
    stream.write_all(body.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Every path below `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        found.push(path.clone());
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            found.extend(walk(&path));
        }
    }
    found
}

#[test]
fn a_client_that_stalls_its_body_never_delays_another_worker() {
    let Served { listen, .. } = &served(&[]);
    // Announces 100,000 bytes, sends 8 and waits.
    let mut stalled = TcpStream::connect(listen).unwrap();
    stalled
        .write_all(
            format!(
                "POST /finished HTTP/1.1\r\nHost: {listen}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"a\": 1,"
            )
            .as_bytes(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for (method, path) in [("POST", "/register"), ("GET", "/status")] {
        let started = Instant::now();
        let (status, body) = http(listen, method, path, &[], "");
        let took = started.elapsed();
        assert_eq!(status, 200, "{method} {path}: {body}");
        assert!(
            took < Duration::from_secs(1),
            "{method} {path} took {took:?} while another client stalled"
        );
    }
    drop(stalled);
}

/// The task a real coordinator hands out for a fresh loop in `repo`.
fn a_real_task(repo: &Path) -> Value {
    let logs = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let _server = serve(repo, &listen, &[], logs.path());
    let (status, task) = http(&listen, "POST", "/register", &[], "{}");
    assert_eq!(status, 200, "{task}");
    task
}

/// A coordinator on loopback that answers every `/register` with `task`
/// and counts the `/finished` reports it gets.
struct FakeCoordinator {
    url: String,
    finished: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeCoordinator {
    fn start(task: Value) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&finished);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                let _ = stream.read_exact(&mut body);
                if head.starts_with("post /finished") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                let reply = task.to_string();
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                        reply.len()
                    )
                    .as_bytes(),
                );
            }
        });
        Self { url, finished }
    }
}

#[test]
fn a_worker_refuses_a_coordinators_path_like_ids_and_writes_nothing() {
    let outer = tempfile::tempdir().unwrap();
    let repo = outer.path().join("a/b/repo");
    std::fs::create_dir_all(&repo).unwrap();
    init(&repo, "Write 2 progress lines.\n");
    let task = a_real_task(&repo);
    let before = walk(outer.path());
    for (field, value) in [
        ("session_id", "../../../escape/pwn"),
        ("workflow_set", "../../escape"),
        ("workflow_id", "../../../../escape/pwn"),
        ("session_id", ".."),
    ] {
        let mut evil = task.clone();
        evil[field] = json!(value);
        let coordinator = FakeCoordinator::start(evil);
        let output = worker(&repo, &coordinator.url, &[]).output().unwrap();
        let complaint = stderr(&output);
        assert_eq!(code(&output), 2, "{field}={value}: {complaint}");
        assert!(
            complaint.contains(&format!("{field} {value:?} is not a plain name"))
                && complaint.contains("nothing was written"),
            "{complaint}"
        );
        assert_eq!(
            coordinator
                .finished
                .load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the refused task is reported nowhere"
        );
        assert_eq!(
            walk(outer.path()),
            before,
            "{field}={value}: nothing written anywhere"
        );
    }
}

#[test]
fn escape_sequences_in_a_models_reply_never_reach_the_terminal() {
    const REPLY: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mFAKE: all tests passed\u{9b}0m";
    let model = FakeModel::start_with(|_| REPLY.to_string());
    let repo = tempfile::tempdir().unwrap();
    init_openai(repo.path(), Some(&format!("127.0.0.1:{}", model.port)));
    let output = sandloop()
        .args(["loop", "run", "--repo", s(repo.path())])
        .env("OPENAI_BASE_URL", &model.url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "tiny-test-model")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let raw_controls = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .chars()
            .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{9b}')
    };
    assert!(!raw_controls(&output.stdout), "{:?}", stdout(&output));
    assert!(!raw_controls(&output.stderr), "{:?}", stderr(&output));
    assert!(
        stdout(&output)
            .contains("\\u001b]0;owned\\u0007\\u001b[2J\\u001b[31mFAKE: all tests passed"),
        "shown escaped: {}",
        stdout(&output)
    );
    // `loop status` prints the history the same way, and the files keep
    // the exact text.
    let status = run(&["loop", "status", "--repo", s(repo.path())]);
    assert!(!raw_controls(&status.stdout), "{:?}", stdout(&status));
    let kept: Vec<String> = walk(&repo.path().join(".sandloop/sessions"))
        .into_iter()
        .filter(|path| path.ends_with("result_text.txt"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    assert!(kept.iter().any(|text| text == REPLY), "{kept:?}");
}

#[test]
fn a_step_result_over_the_report_limit_is_cut_to_fit_and_the_loop_goes_on() {
    const SIZE: usize = 2_000_000;
    let model =
        FakeModel::start_with(|n| format!("draft {n} ").repeat(SIZE / 8 + 1)[..SIZE].to_string());
    let repo = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    init_openai(repo.path(), Some(&format!("127.0.0.1:{}", model.port)));
    let listen = free_listen();
    let _server = serve(repo.path(), &listen, &[], logs.path());
    let output = worker(repo.path(), &format!("http://{listen}"), &[])
        .env("OPENAI_BASE_URL", &model.url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "tiny-test-model")
        .output()
        .unwrap();
    let complaint = stderr(&output);
    assert_reached_goal(&output);
    assert!(
        complaint.contains("over the coordinator's limit of 1048576 bytes")
            && complaint.contains("its text was cut to fit"),
        "{complaint}"
    );
    assert!(
        !complaint.contains("retrying"),
        "no blind retries: {complaint}"
    );
    // The whole text stays in the iteration's files.
    let whole = walk(&repo.path().join(".sandloop/sessions"))
        .into_iter()
        .filter(|path| path.ends_with("result_text.txt"))
        .filter(|path| std::fs::metadata(path).unwrap().len() == SIZE as u64)
        .count();
    assert_eq!(whole, 2, "both drafts kept whole");
}

#[test]
fn a_loopy_loop_worker_gets_413_naming_both_sizes() {
    let Served { listen, .. } = &served(&[]);
    let big = format!("{{\"text\": \"{}\"}}", "x".repeat(1_500_000));
    // The answer is ready before the body is sent; the body is still taken
    // (not reset), so a client that sends it whole reads the answer.
    let (status, body) = http_paused(
        listen,
        "POST",
        "/finished",
        &[],
        &big,
        Duration::from_millis(300),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["limit_bytes"], 1_048_576);
    assert_eq!(body["size_bytes"], big.len());
    let reason = body["error"].as_str().unwrap();
    assert!(
        reason.contains(&format!("{} bytes", big.len())) && reason.contains("at most 1048576"),
        "{reason}"
    );
}

#[test]
fn an_address_beyond_loopback_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let port = free_listen().rsplit_once(':').unwrap().1.to_string();
    let output = run(&[
        "loop",
        "serve",
        "--repo",
        s(dir.path()),
        "--listen",
        &format!("0.0.0.0:{port}"),
    ]);
    let complaint = stderr(&output);
    assert_eq!(code(&output), 2, "{complaint}");
    assert!(
        complaint.contains("refusing to serve on 0.0.0.0:")
            && complaint.contains("without a token")
            && complaint.contains("sandloop loop token"),
        "{complaint}"
    );
    assert!(
        !dir.path().join(".sandloop/sessions").exists(),
        "nothing was started"
    );
    // An address that is not HOST:PORT is named as such, not as a token matter.
    let output = run(&[
        "loop",
        "serve",
        "--repo",
        s(dir.path()),
        "--listen",
        "nonsense",
    ]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--listen \"nonsense\"")
            && stderr(&output).contains("expected HOST:PORT"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_token_guards_every_endpoint_and_a_worker_with_it_drives_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let output = run(&["loop", "token", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let token_file = dir.path().join(".sandloop/token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(token.len(), 64);
    // A second token never overwrites the first.
    let again = run(&["loop", "token", "--repo", s(dir.path())]);
    assert_eq!(code(&again), 2, "{}", stderr(&again));

    // Beyond loopback with the token: served.
    let port = free_listen().rsplit_once(':').unwrap().1.to_string();
    let listen = format!("0.0.0.0:{port}");
    let _server = serve(
        dir.path(),
        &listen,
        &["--token-file", s(&token_file)],
        logs.path(),
    );
    let local = format!("127.0.0.1:{port}");
    let wrong = format!("Authorization: Bearer {}x", &token[..63]);
    for headers in [
        vec![],
        vec![wrong.as_str()],
        vec!["Authorization: Basic abc"],
    ] {
        for (method, path) in [
            ("POST", "/register"),
            ("POST", "/finished"),
            ("GET", "/status"),
        ] {
            let (status, body) = http(&local, method, path, &headers, "{}");
            assert_eq!(status, 401, "{method} {path} with {headers:?}: {body}");
            assert!(
                body["error"].as_str().unwrap().contains("--token-file"),
                "{body}"
            );
        }
    }
    let url = format!("http://{local}");
    let output = worker(dir.path(), &url, &[]).output().unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("refused the request (401)"),
        "{}",
        stderr(&output)
    );
    let output = worker(dir.path(), &url, &["--token-file", s(&token_file)])
        .output()
        .unwrap();
    assert_reached_goal(&output);
    let bearer = format!("Authorization: Bearer {token}");
    let (status, body) = http(&local, "GET", "/status", &[&bearer], "");
    assert_eq!(status, 200);
    assert_eq!(body["state"]["status"], "goal_met");
}

#[test]
fn a_report_of_a_superseded_attempt_is_refused_and_recorded() {
    let Served { dir, listen, .. } = &served(&["--lease-secs", "1"]);
    let me = json!({"hostname": "elsewhere.example", "pid": 4242, "starttime": "linux:b:1"});
    let (_, first) = http(
        listen,
        "POST",
        "/register",
        &[],
        &json!({"worker": me}).to_string(),
    );
    let attempt = first["attempt_id"].as_str().unwrap().to_string();
    assert_eq!(attempt.len(), 12, "{first}");
    let report = |attempt: &str| {
        json!({"workflow_id": first["workflow_id"], "session_id": first["session_id"],
            "iteration": first["iteration"], "success": true, "text": "done", "error": null,
            "attempt_id": attempt, "worker": me})
        .to_string()
    };
    let session = first["session_id"].as_str().unwrap();
    let state_file = dir
        .path()
        .join(".sandloop/sessions")
        .join(session)
        .join("state.json");
    let before = std::fs::read(&state_file).unwrap();
    let (status, answer) = http(listen, "POST", "/finished", &[], &report("ffffffffffff"));
    assert_eq!(
        (status, answer["stop_reason"].clone()),
        (200, json!("stale_report"))
    );
    assert_eq!(
        std::fs::read(&state_file).unwrap(),
        before,
        "nothing recorded"
    );
    let events: Vec<Value> = std::fs::read_to_string(
        dir.path()
            .join(".sandloop/sessions")
            .join(session)
            .join("events.jsonl"),
    )
    .unwrap()
    .lines()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["task_dispatched", "late_report"], "{events:#?}");
    assert_eq!(events[0]["attempt_id"], attempt.as_str());
    assert_eq!(events[0]["worker"], me);
    assert_eq!(events[1]["report"]["attempt_id"], "ffffffffffff");
    // The attempt that was handed out is taken.
    let (status, next) = http(listen, "POST", "/finished", &[], &report(&attempt));
    assert_eq!(status, 200);
    assert_eq!(next["iteration"], 2, "{next}");
    assert_ne!(next["attempt_id"], attempt.as_str());
}

/// A self-signed certificate for 127.0.0.1 and its key, made by openssl.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let output = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=sandloop-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // A certificate that is its own trust anchor must not be a CA one.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .output()
        .expect("openssl makes the test's certificate (.ci/run installs it)");
    assert!(output.status.success(), "{}", stderr(&output));
    (cert, key)
}

#[test]
fn over_tls_a_worker_trusting_the_certificate_drives_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    init(dir.path(), "Write 2 progress lines.\n");
    let (cert, key) = self_signed(logs.path());
    let listen = free_listen();
    let _server = serve(
        dir.path(),
        &listen,
        &["--tls-cert", s(&cert), "--tls-key", s(&key)],
        logs.path(),
    );
    let said = std::fs::read_to_string(logs.path().join("serve.out")).unwrap();
    assert!(said.contains(&format!("https://{listen}")), "{said}");
    let url = format!("https://{listen}");
    // Without the certificate, the public roots do not vouch for it.
    let output = worker(dir.path(), &url, &[]).output().unwrap();
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).to_lowercase().contains("certificate"),
        "{}",
        stderr(&output)
    );
    let output = worker(dir.path(), &url, &["--ca-file", s(&cert)])
        .output()
        .unwrap();
    assert_reached_goal(&output);
    // Plain HTTP to the TLS port gets no answer it can read.
    let output = worker(dir.path(), &format!("http://{listen}"), &[])
        .output()
        .unwrap();
    assert_eq!(code(&output), 1);
    // A certificate without its key is refused before anything starts.
    let other = tempfile::tempdir().unwrap();
    init(other.path(), "Write 2 progress lines.\n");
    let output = run(&[
        "loop",
        "serve",
        "--repo",
        s(other.path()),
        "--listen",
        &free_listen(),
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&cert),
    ]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("--tls-key"), "{}", stderr(&output));
    assert!(
        !other.path().join(".sandloop/sessions").exists(),
        "nothing was started"
    );
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_coordinator_cleanly() {
    let Served {
        dir,
        logs,
        listen,
        mut server,
    } = served(&[]);
    let (status, _) = http(&listen, "POST", "/register", &[], "{}");
    assert_eq!(status, 200);
    let pid = server.0.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exit = server.wait_within(Duration::from_secs(10), "loop serve after SIGTERM");
    assert_eq!(exit, 0);
    let said = std::fs::read_to_string(logs.path().join("serve.out")).unwrap();
    assert!(said.contains("coordinator stopped"), "{said}");
    // The loop can go on from where it stopped.
    let _server = serve(dir.path(), &listen, &["--resume"], logs.path());
    let output = worker(dir.path(), &format!("http://{listen}"), &[])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn loop_init_can_write_the_token_and_a_token_needs_a_loop_or_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&["loop", "token", "--repo", s(dir.path())]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("has no loop"),
        "{}",
        stderr(&output)
    );
    let elsewhere = dir.path().join("my.token");
    let output = run(&["loop", "token", "--out", s(&elsewhere)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&elsewhere).unwrap().trim().len(),
        64
    );

    let output = run(&[
        "loop",
        "init",
        "--repo",
        s(dir.path()),
        "--plugin",
        sandloop_tests::LOOP_STEPS,
        "--token",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let token = dir.path().join(".sandloop/token");
    assert!(
        stdout(&output).contains(&format!("token written to {}", token.display())),
        "{}",
        stdout(&output)
    );
    assert_eq!(std::fs::read_to_string(&token).unwrap().trim().len(), 64);
    // A token file others can read is used, with a warning.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let logs = tempfile::tempdir().unwrap();
        let listen = free_listen();
        drop(serve(
            dir.path(),
            &listen,
            &["--token-file", s(&token)],
            logs.path(),
        ));
        let said = std::fs::read_to_string(logs.path().join("serve.err")).unwrap();
        assert!(
            said.contains("can be read by other users (mode 644)"),
            "{said}"
        );
    }
}
