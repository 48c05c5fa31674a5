//! Coordinator throughput: `register`/`finished` round trips per second,
//! in-process and over loopback HTTP, side by side in one run. The steps
//! themselves are not run (each `finished` reports success at once), so
//! this is the coordinator's own cost: the state file read, changed and
//! written atomically (with fsync) under its lock on every call.
//!
//! `cargo bench -p sandloop-tests --bench loop_throughput`
//! (`SANDLOOP_BENCH_LOOP_ROUNDS`, default 300).

use std::sync::Arc;
use std::time::Instant;

use sandloop::coordinator::endpoints::Endpoints;
use sandloop::coordinator::http_server::{self, ServeOptions, Shutdown};
use sandloop::coordinator::models::{TaskAction, TaskResponse};
use sandloop::coordinator::service::Coordinator;

#[path = "common/loop_repo.rs"]
mod loop_repo;
use loop_repo::{finished_for, loop_repo as repo};

fn in_process(rounds: u32) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    repo(dir.path(), rounds + 1);
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
    repo(dir.path(), rounds + 1);
    let coordinator = Arc::new(Coordinator::open(dir.path(), false, None, None).unwrap());
    let endpoints = Arc::new(Endpoints::new(
        coordinator,
        std::time::Duration::from_secs(600),
    ));
    let listener = http_server::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = Shutdown::new();
    let serving = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            http_server::serve(endpoints, listener, ServeOptions::default(), &shutdown)
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
    shutdown.trigger();
    serving.join().unwrap().unwrap();
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
