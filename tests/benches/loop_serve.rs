//! `sandloop loop serve` under load: 200 concurrent clients (190 polling
//! `GET /status`, 10 asking `POST /register`) while 10 slowloris
//! connections hold sockets open — 5 dripping a request head a byte at a
//! time, 5 announcing a body they never send. Prints the `/status`
//! latency quantiles and the registrations per second; the server is the
//! one `loop serve` runs (hyper, in this process), the clients are threads
//! with keep-alive connections. A `/status` client pauses
//! `SANDLOOP_BENCH_SERVE_PACE_MS` (default 50) after each answer, as a
//! polling worker or dashboard would (190 of them offer up to 3,800
//! requests/s); `/register` clients ask back to back.
//!
//! `cargo bench -p sandloop-tests --bench loop_serve`
//! (`SANDLOOP_BENCH_SERVE_SECS`, default 5: how long the clients run).

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandloop::coordinator::endpoints::Endpoints;
use sandloop::coordinator::http_server::{self, ServeOptions, Shutdown};
use sandloop::coordinator::service::Coordinator;

#[path = "common/loop_repo.rs"]
#[allow(dead_code)]
mod loop_repo;
#[path = "common/samples.rs"]
#[allow(dead_code)]
mod samples;
use samples::Samples;

const STATUS_CLIENTS: usize = 190;
const REGISTER_CLIENTS: usize = 10;
const SLOW_DRIPS: usize = 5;
const SLOW_BODIES: usize = 5;

/// A connection that sends a request head one byte per `pace`, forever.
fn drip(address: String, stop: Arc<AtomicBool>, pace: Duration) {
    let Ok(mut stream) = TcpStream::connect(&address) else {
        return;
    };
    let head = format!("GET /status HTTP/1.1\r\nHost: {address}\r\nX-Slow: ");
    for byte in head.bytes().chain(std::iter::repeat(b'a')) {
        if stop.load(Ordering::Relaxed) || stream.write_all(&[byte]).is_err() {
            return;
        }
        std::thread::sleep(pace);
    }
}

/// A connection that announces a large body and sends 8 bytes of it.
fn stall(address: String, stop: Arc<AtomicBool>) {
    let Ok(mut stream) = TcpStream::connect(&address) else {
        return;
    };
    let _ = stream.write_all(
        format!(
            "POST /finished HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"a\": 1,"
        )
        .as_bytes(),
    );
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn main() {
    let setting = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(default)
    };
    let seconds = setting("SANDLOOP_BENCH_SERVE_SECS", 5);
    let pace = Duration::from_millis(setting("SANDLOOP_BENCH_SERVE_PACE_MS", 50));
    let dir = tempfile::tempdir().unwrap();
    loop_repo::loop_repo(dir.path(), u32::MAX);
    let coordinator = Arc::new(Coordinator::open(dir.path(), false, None, None).unwrap());
    // A zero lease: every register takes the task back and hands out the
    // next, so each one is a full state change written with fsync.
    let endpoints = Arc::new(Endpoints::new(coordinator, Duration::ZERO));
    let listener = http_server::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let shutdown = Shutdown::new();
    let serving = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            http_server::serve(endpoints, listener, ServeOptions::default(), &shutdown)
        })
    };

    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = Vec::new();
    for _ in 0..SLOW_DRIPS {
        let (address, stop) = (address.clone(), Arc::clone(&stop));
        slow.push(std::thread::spawn(move || {
            drip(address, stop, Duration::from_millis(500))
        }));
    }
    for _ in 0..SLOW_BODIES {
        let (address, stop) = (address.clone(), Arc::clone(&stop));
        slow.push(std::thread::spawn(move || stall(address, stop)));
    }
    std::thread::sleep(Duration::from_millis(200));

    let status_samples = Arc::new(Mutex::new(Samples::default()));
    let registrations = Arc::new(Mutex::new(Samples::default()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut clients = Vec::new();
    for client in 0..STATUS_CLIENTS + REGISTER_CLIENTS {
        let url = format!("http://{address}");
        let registers = client < REGISTER_CLIENTS;
        let (out, failures) = if registers {
            (Arc::clone(&registrations), Arc::clone(&failures))
        } else {
            (Arc::clone(&status_samples), Arc::clone(&failures))
        };
        clients.push(std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(10))
                .build();
            let mut mine = Samples::default();
            while Instant::now() < until {
                let answer = mine.time(|| {
                    if registers {
                        agent.post(&format!("{url}/register")).send_string("{}")
                    } else {
                        agent.get(&format!("{url}/status")).call()
                    }
                    .map_err(Box::new)
                });
                match answer {
                    Ok(response) => {
                        let _ = response.into_string();
                    }
                    Err(error) => {
                        mine.0.pop();
                        failures.lock().unwrap().push(error.to_string());
                    }
                }
                if !registers {
                    std::thread::sleep(pace);
                }
            }
            out.lock().unwrap().extend(mine);
        }));
    }
    for client in clients {
        client.join().unwrap();
    }
    let elapsed = seconds as f64;
    stop.store(true, Ordering::Relaxed);
    shutdown.trigger();
    serving.join().unwrap().unwrap();
    for thread in slow {
        let _ = thread.join();
    }

    let status = status_samples.lock().unwrap();
    let registered = registrations.lock().unwrap();
    let failures = failures.lock().unwrap();
    println!(
        "loop serve: {} clients ({STATUS_CLIENTS} GET /status, each pausing {} ms after an answer; \
         {REGISTER_CLIENTS} POST /register back to back) for {seconds}s, {} slowloris connections \
         held open ({SLOW_DRIPS} dripping a head, {SLOW_BODIES} stalling a body)",
        STATUS_CLIENTS + REGISTER_CLIENTS,
        pace.as_millis(),
        SLOW_DRIPS + SLOW_BODIES
    );
    println!(
        "  /status          p50 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms   ({} answers, {:.0}/s)",
        status.p50_us() / 1e3,
        status.quantile_us(0.99) / 1e3,
        status.quantile_us(1.0) / 1e3,
        status.0.len(),
        status.0.len() as f64 / elapsed
    );
    println!(
        "  /register        p50 {:>7.2} ms   p99 {:>7.2} ms   registrations {:.0}/s (each a state change written with fsync)",
        registered.p50_us() / 1e3,
        registered.quantile_us(0.99) / 1e3,
        registered.0.len() as f64 / elapsed
    );
    println!("  failed requests  {}", failures.len());
    if let Some(first) = failures.first() {
        println!("    first: {first}");
    }
    let p99_ms = status.quantile_us(0.99) / 1e3;
    println!(
        "  goal: /status p99 < 50 ms: {}",
        if p99_ms < 50.0 { "met" } else { "NOT met" }
    );
}
