//! Whole `sandloop run` invocations for the benches that measure per-item
//! cost: the items file they run over and the wall time of one run.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::json;

/// Variants per seed in [`write_items`].
pub const VARIANTS_PER_SEED: usize = 10;

/// Write `seeds` seeds with [`VARIANTS_PER_SEED`] variants each to `path`
/// (JSON lines with `item_id`, `family`, `text` / `variant_spec`); returns
/// the number of items.
pub fn write_items(path: &Path, seeds: usize) -> usize {
    let mut text = String::new();
    for s in 0..seeds {
        text.push_str(
            &json!({"item_id": format!("s{s}"), "family": format!("f{s}"), "text": "seed"})
                .to_string(),
        );
        text.push('\n');
        for v in 0..VARIANTS_PER_SEED {
            let item = json!({
                "item_id": format!("s{s}~v{v}"), "family": format!("f{s}"), "is_variant": true,
                "seed_item_id": format!("s{s}"), "variant_spec": {"spec_id": format!("v{v}")},
            });
            text.push_str(&item.to_string());
            text.push('\n');
        }
    }
    std::fs::write(path, text).unwrap();
    seeds * (1 + VARIANTS_PER_SEED)
}

/// `name` from the environment as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `values` (upper middle for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

/// Wall seconds of one `sandloop run --adapter ADAPTER --no-replay` over
/// `items` with `workers` lanes and the compiled-component cache at
/// `cache`. `--no-replay`: these benches measure the per-item episode path,
/// and `bench-adapter` exports `replay` (with it, every group would capture
/// a point and fork its variants as isolated children, which
/// [`sandloop_run_default`] and the `children` bench measure); for adapters
/// without `replay` the flag changes nothing.
pub fn sandloop_run(adapter: &str, items: &Path, workers: usize, cache: &Path) -> f64 {
    sandloop_run_measured(adapter, items, workers, cache, Replay::Off).0
}

/// Wall seconds of one `sandloop run` on its default path: with an adapter
/// that exports `replay` and `replay-children`, a replay point per seed and
/// each variant an isolated child forked from it.
#[allow(dead_code)] // not every bench that includes this file runs it
pub fn sandloop_run_default(adapter: &str, items: &Path, workers: usize, cache: &Path) -> f64 {
    sandloop_run_measured(adapter, items, workers, cache, Replay::Default).0
}

/// Whether a measured run passes `--no-replay`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// `--no-replay`: the per-item episode path.
    Off,
    /// No flag: what `sandloop run` does by default.
    #[allow(dead_code)]
    Default,
}

/// [`sandloop_run`], also returning the process's peak resident set size
/// in bytes.
///
/// The run is started by a small copy of this bench binary
/// ([`serve_peak_rss_request`]), which reports `ru_maxrss` of its own
/// child: Linux counts in a process's `ru_maxrss` the memory of whatever
/// it was spawned from, up to its `exec`, so a run spawned straight from
/// this bench (which holds a million items' file text and its own runs'
/// memory) would report the bench's size instead of its own.
pub fn sandloop_run_measured(
    adapter: &str,
    items: &Path,
    workers: usize,
    cache: &Path,
    replay: Replay,
) -> (f64, u64) {
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = Command::new(std::env::current_exe().unwrap())
        .arg(PEAK_RSS_FLAG)
        .arg(env!("CARGO_BIN_EXE_sandloop"))
        .args(["run", "--adapter", adapter, "--json"])
        .args((replay == Replay::Off).then_some("--no-replay"))
        .arg("--workers")
        .arg(workers.to_string())
        .arg("--items")
        .arg(items)
        .arg("--out")
        .arg(out.path().join("run"))
        .env("SANDLOOP_CACHE_DIR", cache)
        .output()
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let report = String::from_utf8_lossy(&output.stdout);
    let mut fields = report.split_whitespace().map(|field| field.parse::<u64>());
    let (Some(Ok(status)), Some(Ok(peak_rss))) = (fields.next(), fields.next()) else {
        panic!("the measuring process said {report:?}");
    };
    assert!(
        status == 0,
        "sandloop run --adapter {adapter} failed ({status})"
    );
    (seconds, peak_rss)
}

/// The argument on which a bench binary runs one command and prints its
/// wait status and peak RSS (see [`sandloop_run_measured`]).
const PEAK_RSS_FLAG: &str = "--run-and-print-peak-rss";

/// Call first in a bench's `main`: when the binary was started by
/// [`sandloop_run_measured`], run the command it was given (its output
/// discarded), print `STATUS PEAK_RSS_BYTES` and exit.
pub fn serve_peak_rss_request() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|flag| flag != PEAK_RSS_FLAG) {
        return;
    }
    let child = Command::new(&args[2])
        .args(&args[3..])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak_rss) = wait_with_peak_rss(child);
    println!("{status} {peak_rss}");
    std::process::exit(0);
}

/// Wait for `child`; its raw wait status and peak RSS in bytes.
fn wait_with_peak_rss(child: std::process::Child) -> (i32, u64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in; the pid is our
    // child, reaped here (the Child handle is dropped without waiting).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    // Linux reports ru_maxrss in KiB.
    (status, usage.ru_maxrss as u64 * 1024)
}
