//! Distributed runs on NATS JetStream, side by side in one run, on a local
//! `nats-server -js` this bench starts (`apt-get install -y nats-server`):
//!
//! 1. **Throughput with 1, 2, 4 and 8 worker processes** (`sandloop worker
//!    --lanes 1` each) of an I/O-bound no-op: every item makes the
//!    `bench-adapter` component wait 20 ms (a blocking WASI poll, as a
//!    network call would), one item per unit. The coordinator keeps two
//!    units in flight per worker (`--workers 2N`). The goal: N workers
//!    reach at least 0.8 × N times one worker's items per second.
//! 2. **Dispatch overhead per unit**: the pure no-op (no wait) through one
//!    worker against the same items run locally (`--workers 1` both, so
//!    one unit at a time): the difference is what publishing a unit,
//!    a worker's pull, the result's trip back and its ack cost.
//! 3. **What one coordinator can feed**: the pure no-op through 4 workers
//!    of 2 lanes with 16 units in flight, units per second (each unit, a
//!    seed without variants, writes two records: its shared prefix and
//!    the item). On this
//!    machine the coordinator, the workers and the server share 2 cores,
//!    so this is a floor for a coordinator with a machine of its own.
//!
//! Every figure is `(items of the larger run − items of the smaller) /
//! (its wall time − the smaller's)`, so process start-up, the component's
//! loading and the workers' roll call are not counted; medians of
//! `SANDLOOP_BENCH_RUNS` (default 3) pairs.
//!
//! Run: `cargo bench -p sandloop-tests --bench distributed`
//! (`SANDLOOP_BENCH_WAIT_ITEMS=N` items per worker in the throughput runs,
//! default 100; `SANDLOOP_BENCH_NOOP_ITEMS=N` items of the no-op runs,
//! default 2,000; `SANDLOOP_BENCH_WORKER_COUNTS=1,2,4,8`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::json;

#[path = "../shared/nats_server.rs"]
mod nats_server;
#[path = "common/runs.rs"]
#[allow(
    dead_code,
    reason = "shared by the benches; this one uses its median and env_usize only"
)]
mod runs;
use nats_server::{NatsServer, nats_server_binary};
use runs::{env_usize, median};

/// Milliseconds each item of the throughput runs waits.
const WAIT_MS: u64 = 20;

/// `sandloop worker` processes, killed on drop.
struct Workers(Vec<Child>);

impl Workers {
    /// `count` workers of `lanes` lanes each on `nats`.
    fn start(nats: &NatsServer, count: usize, lanes: usize, cache: &Path) -> Self {
        let children = (1..=count)
            .map(|n| {
                Command::new(env!("CARGO_BIN_EXE_sandloop"))
                    .args(["worker", "--nats", &nats.url, "--name"])
                    .arg(format!("w{n}"))
                    .args(["--lanes", &lanes.to_string(), "--cache-dir"])
                    .arg(cache)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn sandloop worker")
            })
            .collect();
        Self(children)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes `count` items (each its own unit: a seed without variants) to
/// `path`, each waiting `wait_ms` when given (its last field, where
/// bench-adapter looks).
fn write_items(path: &Path, count: usize, wait_ms: Option<u64>) -> PathBuf {
    let mut text = String::new();
    for n in 0..count {
        let mut item = json!({"item_id": format!("i{n}"), "family": format!("f{n}")});
        if let Some(wait_ms) = wait_ms {
            item["wait_ms"] = json!(wait_ms);
        }
        text.push_str(&item.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Wall seconds of one `sandloop run` of `bench-adapter` over `items` with
/// `lanes` queue lanes, through `nats` when given.
fn run(items: &Path, lanes: usize, nats: Option<&NatsServer>, cache: &Path) -> f64 {
    let out = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandloop"));
    command
        .args(["run", "--adapter", sandloop_tests::BENCH_ADAPTER])
        .args(["--json", "--no-replay", "--workers", &lanes.to_string()])
        .arg("--items")
        .arg(items)
        .arg("--out")
        .arg(out.path().join("run"))
        .env("SANDLOOP_CACHE_DIR", cache)
        .stdout(Stdio::null());
    if let Some(nats) = nats {
        command.args(["--nats", &nats.url]);
    }
    let started = Instant::now();
    let output = command.output().expect("spawn sandloop run");
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "sandloop run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    seconds
}

/// Units per second between a run over `small` items and one over
/// `large`, median of `runs` pairs.
fn units_per_second(
    small: (&Path, usize),
    large: (&Path, usize),
    lanes: usize,
    nats: Option<&NatsServer>,
    cache: &Path,
    runs: usize,
) -> f64 {
    let rates = (0..runs)
        .map(|_| {
            let small_seconds = run(small.0, lanes, nats, cache);
            let large_seconds = run(large.0, lanes, nats, cache);
            (large.1 - small.1) as f64 / (large_seconds - small_seconds).max(1e-9)
        })
        .collect();
    median(rates)
}

fn main() {
    if nats_server_binary().is_none() {
        println!("nats-server is not installed (apt-get install -y nats-server): nothing measured");
        return;
    }
    let runs = env_usize("SANDLOOP_BENCH_RUNS", 3).max(1);
    let per_worker = env_usize("SANDLOOP_BENCH_WAIT_ITEMS", 100).max(10);
    let noop_items = env_usize("SANDLOOP_BENCH_NOOP_ITEMS", 2_000).max(100);
    let counts: Vec<usize> = std::env::var("SANDLOOP_BENCH_WORKER_COUNTS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let nats = NatsServer::start();
    // Compiles the component into the cache the runs and workers share.
    let one = write_items(&dir.path().join("one.jsonl"), 1, None);
    run(&one, 1, None, &cache);

    println!(
        "throughput, I/O-bound no-op ({WAIT_MS} ms per item, one item per unit, 1 lane per \
         worker, 2 units in flight per worker; {per_worker} items per worker, median of {runs}):"
    );
    let mut single = None;
    for &count in &counts {
        let small_count = per_worker * count / 4;
        let large_count = per_worker * count + small_count;
        let small = write_items(
            &dir.path().join("wait-small.jsonl"),
            small_count,
            Some(WAIT_MS),
        );
        let large = write_items(
            &dir.path().join("wait-large.jsonl"),
            large_count,
            Some(WAIT_MS),
        );
        let _workers = Workers::start(&nats, count, 1, &cache);
        let rate = units_per_second(
            (&small, small_count),
            (&large, large_count),
            2 * count,
            Some(&nats),
            &cache,
            runs,
        );
        let base = *single.get_or_insert(rate);
        let speed_up = rate / base;
        println!(
            "  {count} worker(s): {rate:7.1} items/s  speed-up {speed_up:4.2}x of 1 ({:.2} of {count}; \
             ideal {:.0} items/s)",
            speed_up / count as f64,
            count as f64 * 1000.0 / WAIT_MS as f64
        );
    }

    let small_count = noop_items / 4;
    let small = write_items(&dir.path().join("noop-small.jsonl"), small_count, None);
    let large = write_items(
        &dir.path().join("noop-large.jsonl"),
        noop_items + small_count,
        None,
    );
    let pair = (
        (small.as_path(), small_count),
        (large.as_path(), noop_items + small_count),
    );
    let local = units_per_second(pair.0, pair.1, 1, None, &cache, runs);
    let remote = {
        let _workers = Workers::start(&nats, 1, 1, &cache);
        units_per_second(pair.0, pair.1, 1, Some(&nats), &cache, runs)
    };
    let (local_us, remote_us) = (1e6 / local, 1e6 / remote);
    println!(
        "dispatch overhead, pure no-op, one unit at a time ({noop_items} items, median of {runs}):"
    );
    println!("  local run:          {local_us:8.1} µs per unit ({local:.0} units/s)");
    println!("  through 1 worker:   {remote_us:8.1} µs per unit ({remote:.0} units/s)");
    println!(
        "  dispatch overhead per unit: {:.1} µs",
        remote_us - local_us
    );
    let fed = {
        let _workers = Workers::start(&nats, 4, 2, &cache);
        units_per_second(pair.0, pair.1, 16, Some(&nats), &cache, runs)
    };
    println!(
        "one coordinator, pure no-op, 4 workers x 2 lanes, 16 units in flight: {fed:.0} units/s, \
         {:.0} records/s ({:.0} µs per unit; coordinator, workers and server on the same cores)",
        2.0 * fed,
        1e6 / fed
    );
}
