//! Host cost per item through `sandloop run`, with the no-op
//! `bench-adapter` component, over 100,001 items (9,091 seeds with 10
//! variants each), side by side with the same harness driving a native
//! no-op adapter in-process (no sandbox, no JSON boundary).
//!
//! Run: `cargo bench -p sandloop-tests --bench per_item`
//! (`SANDLOOP_BENCH_SEEDS=N` changes the seed count, `SANDLOOP_BENCH_RUNS=N`
//! the repetitions, `SANDLOOP_BENCH_WORKERS=1,2` the worker counts;
//! figures are medians).
//!
//! Per-item cost = (wall time of the run − wall time of a 1-item run) /
//! items, so process start-up and component loading are not counted.
//!
//! Then, side by side in the same run: the reference runtime
//! (`loopx_explore/episode_runtime.py`, python3, no packages) over the same
//! items with a no-op adapter, timed by itself in-process with no I/O
//! (`reference/per_item.py`), against the whole `sandloop run` process;
//! the default path — replay on, as `sandloop run` does for an adapter that
//! exports `replay` and `replay-children` (bench-adapter does): a replay
//! point per seed, each variant an isolated child forked from it — as a
//! whole process against the reference's own runtimes doing the same
//! (`reference/default_path.py`: episode groups, a replay point per seed
//! captured by `ReplayPointRegistry`, the variants as one settled child
//! group from it, timed in-process), printed as
//! `default path (…): sandloop N µs/item, reference M µs/item, R.RRx`; and
//! a run ten times larger (`SANDLOOP_BENCH_LARGE_SEEDS`, default 90,910
//! seeds: 1,000,010 items) with its peak RSS. The reference is looked for
//! in `SANDLOOP_REFERENCE_DIR`, else `../shared/reference/loopx_explore`
//! beside the repository; without it (or python3) that line says so.

use std::path::Path;
use std::time::Instant;

use sandloop::episode::adapter::{
    AdapterError, CallContext, EpisodeAdapter, Item, Prepared, Protocols, Record,
};
use sandloop::harness::items_file::{FileSeeds, load_items_file};
use sandloop::harness::{ArmConfig, ArmOptions, RunDir, run_arm};
use serde_json::json;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/reference.rs"]
mod reference;
#[path = "common/runs.rs"]
mod runs;
use runs::{
    Replay, VARIANTS_PER_SEED, env_usize, median, sandloop_run_default, sandloop_run_measured,
    write_items,
};

/// Wall seconds of one `sandloop run` of the no-op component over `items`.
fn sandloop_run(items: &Path, workers: usize, cache: &Path) -> f64 {
    runs::sandloop_run(sandloop_tests::BENCH_ADAPTER, items, workers, cache)
}

/// The same work with a native no-op adapter, in-process.
struct Native;

impl EpisodeAdapter for Native {
    type Handle = ();
    fn protocols(&self) -> Protocols {
        Protocols {
            execute: true,
            seeds: false,
            variants: false,
            episode_groups: true,
            replay: false,
            replay_children: false,
            child_risk: false,
            counterfactual: false,
        }
    }
    fn execute(&mut self, _item: &Item, _ctx: &CallContext) -> Result<Record, AdapterError> {
        Ok(noop_record())
    }
    fn prepare_episode_group(
        &mut self,
        _seed: &Item,
        _items: &[Item],
        _ctx: &CallContext,
    ) -> Result<Option<Prepared<()>>, AdapterError> {
        Ok(Some(Prepared {
            handle: (),
            prefix_record: Ok(noop_record()),
            checkpoint_ref: None,
        }))
    }
    fn execute_episode(
        &mut self,
        _h: &(),
        _item: &Item,
        _ctx: &CallContext,
    ) -> Result<Record, AdapterError> {
        Ok(noop_record())
    }
    fn release_episode_group(&mut self, _h: (), _ctx: &CallContext) -> Result<(), AdapterError> {
        Ok(())
    }
}

fn noop_record() -> Record {
    let mut record = Record::new();
    record.insert("observation_keys".into(), json!(["k"]));
    record.insert("accepted".into(), json!(true));
    record
}

/// Wall seconds of the harness over `items` with the native adapter,
/// including reading the items file, as `sandloop run` does.
fn native_run(items: &Path, workers: usize) -> f64 {
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let seeds = load_items_file(items).unwrap();
    let config = ArmConfig {
        worker_count: workers,
        max_epochs: 1,
        checkpoint: true,
        ..ArmConfig::default()
    };
    let mut source = FileSeeds::new(seeds, 1, None);
    let mut run_dir = RunDir::new(out.path().join("run"));
    let factory = |_lane: usize| Ok(Native);
    run_arm(
        &config,
        Native.protocols(),
        &mut source,
        &factory,
        &mut run_dir,
        ArmOptions::default(),
    )
    .unwrap();
    started.elapsed().as_secs_f64()
}

/// The reference's own seconds over `items` (its in-process timer) with
/// `script` (`per_item.py`: the episode runtime alone; `default_path.py`:
/// episode groups with a replay point per seed and the variants as a child
/// group), or why it could not be measured.
fn reference_seconds(script: &str, items: &Path) -> Result<f64, String> {
    let line = reference::run_script(script, "episode_runtime.py", &[items.as_os_str()])?;
    line["seconds"]
        .as_f64()
        .ok_or_else(|| "no seconds in its output".to_string())
}

fn main() {
    runs::serve_peak_rss_request();
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo test --benches` probing
    }
    let seeds = env_usize("SANDLOOP_BENCH_SEEDS", 9_091);
    let runs = env_usize("SANDLOOP_BENCH_RUNS", 5).max(1);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let items_path = dir.path().join("items.jsonl");
    let one_path = dir.path().join("one.jsonl");
    let items = write_items(&items_path, seeds);
    write_items(&one_path, 1);
    let one = 1 + VARIANTS_PER_SEED;
    println!(
        "per-item host cost: {items} items ({seeds} seeds x (1 + {VARIANTS_PER_SEED} variants)), median of {runs} runs"
    );
    println!(
        "{:<34} {:>10} {:>12} {:>10}",
        "", "wall s", "µs / item", "vs native"
    );
    sandloop_run(&one_path, 1, &cache); // warm the compiled-component cache
    let workers_list: Vec<usize> = std::env::var("SANDLOOP_BENCH_WORKERS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let mut best_wall = f64::INFINITY;
    for workers in workers_list.iter().copied() {
        let native_base = median((0..runs).map(|_| native_run(&one_path, workers)).collect());
        let native_wall = median(
            (0..runs)
                .map(|_| native_run(&items_path, workers))
                .collect(),
        );
        let native_per = (native_wall - native_base) / (items - one) as f64 * 1e6;
        let base = median(
            (0..runs)
                .map(|_| sandloop_run(&one_path, workers, &cache))
                .collect(),
        );
        let wall = median(
            (0..runs)
                .map(|_| sandloop_run(&items_path, workers, &cache))
                .collect(),
        );
        let per = (wall - base) / (items - one) as f64 * 1e6;
        best_wall = best_wall.min(wall);
        println!(
            "{:<34} {:>10.3} {:>12.3} {:>10}",
            format!("native no-op, {workers} worker(s)"),
            native_wall,
            native_per,
            "1.00x"
        );
        println!(
            "{:<34} {:>10.3} {:>12.3} {:>9.2}x",
            format!("sandloop run + component, {workers} w"),
            wall,
            per,
            per / native_per
        );
    }

    // The reference, on the same items, in the same bench.
    let reference: Result<Vec<f64>, String> = (0..runs)
        .map(|_| reference_seconds("per_item.py", &items_path))
        .collect();
    match reference {
        Ok(seconds) => {
            let seconds = median(seconds);
            println!(
                "{:<34} {:>10.3} {:>12.3}",
                "reference runtime (in-process)",
                seconds,
                seconds / items as f64 * 1e6
            );
            println!(
                "sandloop run (whole process, best of the worker counts) vs the reference's own timer: {:.2}x",
                seconds / best_wall
            );
        }
        Err(why) => println!("reference runtime: skipped ({why})"),
    }

    // The default path: replay on, each variant an isolated child of its
    // seed's replay point; whole process against the reference's own timer.
    let workers = workers_list.iter().copied().max().unwrap_or(1);
    let adapter = sandloop_tests::BENCH_ADAPTER;
    let wall = median(
        (0..runs)
            .map(|_| sandloop_run_default(adapter, &items_path, workers, &cache))
            .collect(),
    );
    let per = wall / items as f64 * 1e6;
    let reference: Result<Vec<f64>, String> = (0..runs.min(3))
        .map(|_| reference_seconds("default_path.py", &items_path))
        .collect();
    match reference {
        Ok(seconds) => {
            let reference_per = median(seconds) / items as f64 * 1e6;
            println!(
                "default path (replay, isolated children, {workers} w, whole process): \
                 sandloop {per:.2} µs/item, reference {reference_per:.2} µs/item, {:.2}x",
                reference_per / per
            );
        }
        Err(why) => println!(
            "default path (replay, isolated children, {workers} w, whole process): \
             sandloop {per:.2} µs/item, reference skipped ({why})"
        ),
    }

    // A run ten times larger: time and peak memory.
    let large_seeds = env_usize("SANDLOOP_BENCH_LARGE_SEEDS", seeds * 10);
    if large_seeds > 0 {
        let large_path = dir.path().join("large.jsonl");
        let large = write_items(&large_path, large_seeds);
        let (wall, peak) =
            sandloop_run_measured(adapter, &large_path, workers, &cache, Replay::Off);
        println!(
            "{large} items, {workers} worker(s): {wall:.2} s, peak RSS {:.0} MB ({:.0} bytes per item)",
            peak as f64 / 1e6,
            peak as f64 / large as f64
        );
    }
}
