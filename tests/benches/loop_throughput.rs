//! Coordinator throughput: `register`/`finished` round trips per second,
//! in-process and over loopback HTTP, side by side in one run. The steps
//! themselves are not run (each `finished` reports success at once), so
//! this is the coordinator's own cost: the state file read, changed and
//! written atomically (with fsync) under its lock on every call.
//!
//! `cargo bench -p sandloop-tests --bench loop_throughput`
//! (`SANDLOOP_BENCH_LOOP_ROUNDS`, default 300).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use sandloop::coordinator::models::{FinishedRequest, TaskAction, TaskResponse};
use sandloop::coordinator::service::Coordinator;

fn repo(dir: &Path, rounds: u32) {
    std::fs::write(dir.join("goal.txt"), "Benchmark the coordinator.\n").unwrap();
    std::fs::write(
        dir.join("sandloop-loop.toml"),
        format!(
            "goal_file = \"goal.txt\"\nworkflow_set = \"main\"\nmax_turns = {}\n",
            rounds + 1
        ),
    )
    .unwrap();
    let work = dir.join(".sandloop/workflow_sets/main/workflows/work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(dir.join("plugin.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
    std::fs::write(work.join("workflow.toml"), "plugin = \"plugin.wasm\"\n").unwrap();
    std::fs::write(work.join("prompt.txt"), "Work.\n").unwrap();
}

fn finished_for(task: &TaskResponse) -> FinishedRequest {
    let task = task.task().expect("a run task");
    FinishedRequest {
        workflow_id: task.workflow_id.clone(),
        session_id: task.session_id.clone(),
        iteration: task.iteration,
        success: true,
        text: Some("done".into()),
        error: None,
    }
}

fn in_process(rounds: u32) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    repo(dir.path(), rounds);
    let coordinator = Coordinator::open(dir.path(), false, None, None).unwrap();
    let started = Instant::now();
    let mut task = coordinator.register().unwrap();
    let mut done = 0;
    while task.action() == TaskAction::Run && done < rounds {
        task = coordinator.finished(&finished_for(&task)).unwrap();
        done += 1;
    }
    f64::from(done) / started.elapsed().as_secs_f64()
}

fn over_http(rounds: u32) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    repo(dir.path(), rounds);
    let coordinator = Arc::new(Coordinator::open(dir.path(), false, None, None).unwrap());
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.server_addr().to_ip().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            sandloop::coordinator::transport::serve(
                coordinator,
                server,
                stop,
                std::time::Duration::from_secs(600),
            )
        })
    };
    let agent = ureq::Agent::new();
    let started = Instant::now();
    let mut task: TaskResponse = agent
        .post(&format!("{url}/register"))
        .send_json(serde_json::json!({}))
        .unwrap()
        .into_json()
        .unwrap();
    let mut done = 0;
    while task.action() == TaskAction::Run && done < rounds {
        task = agent
            .post(&format!("{url}/finished"))
            .send_json(serde_json::to_value(finished_for(&task)).unwrap())
            .unwrap()
            .into_json()
            .unwrap();
        done += 1;
    }
    let rate = f64::from(done) / started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    serving.join().unwrap();
    rate
}

fn main() {
    let rounds: u32 = std::env::var("SANDLOOP_BENCH_LOOP_ROUNDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(300);
    let local = in_process(rounds);
    let http = over_http(rounds);
    println!(
        "coordinator round trips (finished -> next task), {rounds} iterations, state written with fsync each time"
    );
    println!(
        "  in-process       {local:>8.0} /s   ({:.2} ms each)",
        1000.0 / local
    );
    println!(
        "  loopback HTTP    {http:>8.0} /s   ({:.2} ms each)",
        1000.0 / http
    );
    println!("  HTTP / in-process  {:.2}x the time", local / http);
}
