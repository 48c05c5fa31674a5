//! Cost of isolated replay children, per child: fork into a fresh sandbox
//! instance, adopt the exported state (64 KiB by default), validate, run a
//! no-op suffix, release — serial and parallel — and whether the memory
//! of dropped children is reclaimed.
//!
//! First the host's own cost, with `bench-adapter` (every export a
//! constant, 16 bytes of state; see `children/noop.rs`): serial, parallel
//! and snapshot batches of no-op children, then the lines
//! `host overhead per isolated child (no-op adapter): N µs` (p50, serial)
//! `parallel speed-up: N.NNx` (serial batch / parallel batch, p50) and
//! `warm no-op call: N µs` (one `execute-episode` on a prepared group of a
//! warm instance, p50),
//! the snapshot / state-fork ratio, what two workers can get out of this
//! machine at all, measured now (`children/ceiling.rs`: arithmetic on two
//! threads; two processes, and two lanes of one process — sharing an
//! engine, and with an engine each —, each running serial no-op children,
//! at once), and the
//! reference child runtime's per-child cost measured in the same run
//! (`reference/children.py`, with
//! `SANDLOOP_REFERENCE_DIR` or `../shared/reference/loopx_explore` beside
//! the repository; python3 only). The targets are checked on these. Then
//! the same serial and parallel batches with children that do some work
//! of their own (bench-adapter's `"work":N` rounds of arithmetic in each
//! run, `SANDLOOP_BENCH_CHILDREN_WORK=N,M`, default 10000,30000,100000), a line
//! each: how the speed-up grows as the contract's fixed cost per child
//! becomes a smaller share of it.
//!
//! Then one `replay-probe` group: a seed with `"pad_bytes"` (so its exported
//! state carries that much padding) and its variants, 32 items in all
//! (`MAX_CHILDREN_PER_FORK`). `prepare-episode-group` captures a replay
//! point and exports its state once; every `execute_episode_batch` then
//! forks each item as a child from it: a fresh instance (a new store from
//! the pooling allocator), `fork-replay-child(state)`, validate,
//! `assess-replay-child-intent` (the probe exports `child-risk`),
//! `run-replay-child`, `assess-replay-child-outcome`,
//! `release-replay-child`, drop.
//!
//! - per child: batch wall time / children, serial (`child_workers` 1) and
//!   parallel (`child_workers` 2), batches of the two interleaved; broken
//!   down with each record's `replay` block (`restore_minutes`: instance +
//!   fork call; `equivalence_minutes`: validate; `suffix_minutes`: intent +
//!   run + outcome); the rest is release, drop and the host's bookkeeping;
//! - the same serial batch without padding, to price the 64 KiB;
//! - the same serial batch forked from a snapshot of the parent
//!   (`--fork snapshot`: the parent runs the wizer-instrumented component,
//!   is snapshotted once after the capture, and each child is an instance
//!   of the snapshot that resumes the binding, restores, validates and runs
//!   `run-replay-suffix`; since the probe exports `child-risk`, each also
//!   adopts the exported state as a replay child for the policy), and its
//!   ratio to the state-transfer fork;
//! - parts of a child timed on their own: a fresh instance plus one cheap
//!   call (`list-seed-items`), the same call warm, dropping the instance,
//!   and `execute-episode` on a group (a warm item call like
//!   `run-replay-child`), to estimate instantiation and the two risk calls;
//! - the speed-up of parallel over serial, and what re-protecting a page
//!   of memory costs alone and while a sibling thread runs
//!   (`children/reprotect.rs`: the TLB flush a reused pool slot brings
//!   once per child whose instance grew its memory, as these children's
//!   do);
//! - RSS (`VmRSS`) before and after 10,000 forks, and the growth.
//!
//! Run: `cargo bench -p sandloop-tests --bench children`
//! (`SANDLOOP_BENCH_CHILDREN_BATCHES=N` timed batches per mode, default
//! 100; `SANDLOOP_BENCH_CHILDREN_PER_BATCH=N` children per batch, default
//! 32; `SANDLOOP_BENCH_CHILDREN_PAD_KB=N` state padding, default 64;
//! `SANDLOOP_BENCH_CHILDREN_FORKS=N` forks of the memory check, default
//! 10000; `SANDLOOP_BENCH_CHILDREN_PARTS=N` repetitions of the parts,
//! default 500; `SANDLOOP_BENCH_CHILDREN_COMPONENT=PATH` another build of
//! replay-probe; `SANDLOOP_BENCH_CHILDREN_NOOP_ONLY=1` stops after the
//! no-op section, e.g. to profile it alone;
//! `SANDLOOP_BENCH_CHILDREN_PROFILE=serial|parallel|snapshot|warm|lanes|engines`
//! runs only that no-op mode's batches and exits; `warm` is 200,000 warm
//! `execute-episode` calls, `lanes` two serial lanes at once, `engines` the
//! same with an engine per lane). Figures
//! only, no timing
//! asserts; the component cache goes to a temporary directory.

#[path = "children/ceiling.rs"]
mod ceiling;
#[path = "common/reference.rs"]
mod common_reference;
#[path = "children/noop.rs"]
mod noop;
#[path = "children/reference.rs"]
mod reference;
#[path = "children/reprotect.rs"]
mod reprotect;
#[path = "common/samples.rs"]
mod samples;
use samples::{Samples, header};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandloop::episode::adapter::{
    AdapterError, CallContext, EpisodeAdapter, Item, Prepared, Record, SeedSource,
};
use sandloop::replay::{Fidelity, ReplayGroup, ReplayMetricLedger, Replaying};
use sandloop::sandbox::adapter::{GroupHandle, MAX_CHILDREN_PER_FORK, SnapshotPoint};
use sandloop::sandbox::snapshot::Instrumented;
use sandloop::sandbox::{
    LoadedAdapter, ReplayOptions, SandboxConfig, SandboxEngine, WasmAdapter, load,
};
use serde_json::{Map, Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ARM: &str = "main";
const LANE: &str = "queue_worker_01";
/// Goal: host overhead per isolated no-op child, p50 serial, µs.
const TARGET_CHILD_US: f64 = 30.0;
/// Goal: parallel (2 child workers) over serial, no-op children.
const TARGET_SPEED_UP: f64 = 1.7;
/// Goal: snapshot fork per child / state fork per child, no-op children.
const TARGET_SNAPSHOT_RATIO: f64 = 1.0;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process, KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn row(label: &str, samples: &Samples) {
    println!(
        "  {label:<58} {:>10.1} µs {:>10.1} µs {:>10.1} µs  (n={})",
        samples.mean_us(),
        samples.p50_us(),
        samples.quantile_us(0.9),
        samples.0.len()
    );
}

fn row_value(label: &str, mean: f64, p50: f64) {
    println!("  {label:<58} {mean:>10.1} µs {p50:>10.1} µs");
}

fn ctx(group: &str) -> CallContext {
    CallContext {
        arm: ARM.into(),
        epoch: 1,
        branch_id: LANE.into(),
        execution_group_id: Some(group.into()),
    }
}

/// The seed (with `pad_bytes` padding) and `children - 1` variants made by
/// the probe's `compile_variant`, so each child's intent is its spec.
fn group_items(loaded: &Arc<LoadedAdapter>, children: usize, pad_bytes: usize) -> Vec<Item> {
    let mut seed = Item::new();
    seed.insert("item_id".into(), json!("seed"));
    seed.insert("family".into(), json!("probe"));
    seed.insert("text".into(), json!("a no-op child"));
    seed.insert("pad_bytes".into(), json!(pad_bytes));
    let mut control = WasmAdapter::new(Arc::clone(loaded), "control", None);
    let mut items = vec![seed.clone()];
    for k in 1..children {
        let spec = json!({"spec_id": format!("v{k:02}"), "seed_family": "probe", "ops": []});
        let spec = Item::from(spec.as_object().unwrap().clone());
        items.push(control.compile_variant(&spec, &seed).unwrap());
    }
    items
}

/// One lane with replay on and `workers` child workers, its group prepared
/// (replay point captured, state exported).
struct Lane {
    adapter: Replaying<WasmAdapter>,
    prepared: Prepared<ReplayGroup<GroupHandle, SnapshotPoint>>,
    ctx: CallContext,
    items: Vec<Item>,
    parallel: bool,
    /// Forked from a snapshot (else by state transfer).
    by_snapshot: bool,
    /// The component is replay-probe (its records are checked as such);
    /// else bench-adapter.
    probe: bool,
    /// Per batch: wall time / children.
    per_child: Samples,
    /// Per batch: wall time.
    batch: Samples,
    /// Per batch: CPU time of the whole process (every thread) / children.
    cpu: Samples,
    /// Per child, from the record's `replay` block.
    fork: Samples,
    validate: Samples,
    suffix: Samples,
}

impl Lane {
    /// A lane forking by state transfer, or from a snapshot of its parent
    /// when `snapshots` is given (the parent then runs the instrumented
    /// component).
    fn new(
        loaded: &Arc<LoadedAdapter>,
        ledger: &Arc<ReplayMetricLedger>,
        name: &str,
        workers: usize,
        items: Vec<Item>,
        snapshots: Option<Arc<Instrumented>>,
    ) -> Lane {
        let parent = snapshots
            .as_ref()
            .map_or_else(|| Arc::clone(loaded), |i| Arc::clone(i.loaded()));
        let by_snapshot = snapshots.is_some();
        let mut adapter = WasmAdapter::new(parent, LANE, None).with_replay(ReplayOptions {
            metrics: Arc::clone(ledger),
            store: None,
            minimum_fidelity: Fidelity::SemanticEquivalent,
            child_workers: workers,
            snapshots,
        });
        let ctx = ctx(&format!("g-{name}"));
        let prepared = adapter
            .prepare_episode_group(&items[0], &items, &ctx)
            .unwrap()
            .expect("the probe prepares a group");
        let record = prepared.prefix_record.as_ref().unwrap();
        assert!(
            record.get("replay_point_id").is_some(),
            "prepare captured a point: {:?}",
            record.get("replay_capture_error")
        );
        assert_eq!(
            record.get("replay_capture_error"),
            None,
            "the point was captured"
        );
        Lane {
            adapter,
            prepared,
            ctx,
            items,
            parallel: workers > 1,
            by_snapshot,
            probe: true,
            per_child: Samples::default(),
            batch: Samples::default(),
            cpu: Samples::default(),
            fork: Samples::default(),
            validate: Samples::default(),
            suffix: Samples::default(),
        }
    }

    /// The lane runs bench-adapter, not replay-probe: its records are
    /// checked as the no-op's.
    fn noop(mut self) -> Lane {
        self.probe = false;
        self
    }

    /// Fork every item as a child once; checks every record and returns
    /// the batch's wall time.
    fn run_batch(&mut self, keep: bool) -> Duration {
        let cpu_before = process_cpu();
        let started = Instant::now();
        let results = self
            .adapter
            .execute_episode_batch(&self.prepared.handle, &self.items, &self.ctx)
            .expect("the group runs as isolated children");
        let wall = started.elapsed();
        let cpu = process_cpu().saturating_sub(cpu_before);
        assert_eq!(results.len(), self.items.len());
        for (result, _) in &results {
            let record = check_child(result, self.parallel, self.by_snapshot, self.probe);
            if keep {
                let block = &record["replay"];
                let minutes = |key: &str| block[key].as_f64().expect("a replay duration");
                self.fork.push_minutes(minutes("restore_minutes"));
                self.validate.push_minutes(minutes("equivalence_minutes"));
                self.suffix.push_minutes(minutes("suffix_minutes"));
            }
        }
        drop(results);
        if keep {
            self.batch.0.push(wall);
            self.per_child.0.push(wall / self.items.len() as u32);
            self.cpu.0.push(cpu / self.items.len() as u32);
        }
        wall
    }

    fn release(mut self) {
        self.adapter
            .release_episode_group(self.prepared.handle, &self.ctx)
            .unwrap();
    }

    fn print(&self, title: &str) {
        header(&format!(
            "{title}: {} children per batch, {} batches",
            self.items.len(),
            self.batch.0.len()
        ));
        row("batch wall time", &self.batch);
        row("per child (batch wall / children)", &self.per_child);
        row("CPU per child (process, every thread)", &self.cpu);
        let (fork, validate, suffix) = if self.by_snapshot {
            (
                "  fork: snapshot instance + resume + restore (+ adoption)",
                "  validate-replay-equivalence",
                "  intent + run-replay-suffix + outcome",
            )
        } else {
            (
                "  fork: fresh instance + fork-replay-child",
                "  validate-replay-child-equivalence",
                "  intent + run-replay-child + outcome",
            )
        };
        row(fork, &self.fork);
        row(validate, &self.validate);
        row(suffix, &self.suffix);
        let parts =
            |at: fn(&Samples) -> f64| at(&self.fork) + at(&self.validate) + at(&self.suffix);
        if self.parallel {
            // the first child's fork and validation ran on the calling
            // thread alone, the others' on the workers at once
            row_value(
                "  fork + validate per child (on the workers)",
                self.fork.mean_us() + self.validate.mean_us(),
                self.fork.p50_us() + self.validate.p50_us(),
            );
        } else {
            row_value(
                "  release + drop + host bookkeeping (the rest)",
                self.per_child.mean_us() - parts(Samples::mean_us),
                self.per_child.p50_us() - parts(Samples::p50_us),
            );
        }
    }
}

/// The record of one child, checked: it ran isolated from the point, in
/// the expected mode; a replay-probe child restored (`counter_before` 0) by
/// the expected call, a bench-adapter child returned the fixed record.
fn check_child(
    result: &Result<Record, AdapterError>,
    parallel: bool,
    snapshot: bool,
    probe: bool,
) -> &Record {
    let record = match result {
        Ok(record) => record,
        Err(error) => panic!("a child failed: {error}"),
    };
    let block = &record["replay"];
    assert!(block.get("error").is_none(), "{block}");
    assert_eq!(block["isolated"], true, "{block}");
    assert_eq!(block["parallel"], parallel, "{block}");
    let (fork, via) = if snapshot {
        ("snapshot", "replay")
    } else {
        ("state", "child")
    };
    assert_eq!(block["fork"], fork, "{block}");
    if probe {
        assert_eq!(record["via"], via);
        assert_eq!(record["counter_before"], 0, "the child starts restored");
    } else {
        assert_eq!(record["accepted"], true, "{record:?}");
        assert_eq!(block["equivalent"], true, "{block}");
    }
    record
}

/// CPU time this process has used so far, all threads
/// (`CLOCK_PROCESS_CPUTIME_ID`).
fn process_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill in.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(
        status,
        0,
        "clock_gettime: {}",
        std::io::Error::last_os_error()
    );
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Counter `key` of `after` minus `before`.
fn count(before: &Map<String, Value>, after: &Map<String, Value>, key: &str) -> u64 {
    after[key].as_u64().unwrap_or(0) - before[key].as_u64().unwrap_or(0)
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo test --benches` probing
    }
    let batches = env_usize("SANDLOOP_BENCH_CHILDREN_BATCHES", 100).max(1);
    let children = env_usize("SANDLOOP_BENCH_CHILDREN_PER_BATCH", MAX_CHILDREN_PER_FORK).max(2);
    let pad_bytes = env_usize("SANDLOOP_BENCH_CHILDREN_PAD_KB", 64) * 1024;
    let forks = env_usize("SANDLOOP_BENCH_CHILDREN_FORKS", 10_000);
    let parts = env_usize("SANDLOOP_BENCH_CHILDREN_PARTS", 500).max(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let dir = tempfile::tempdir().unwrap();
    let config = SandboxConfig {
        cache_dir: Some(dir.path().join("cache")),
        // the lanes' parents + two fork batches of children at a time (the
        // no-op section's two-lane ceiling runs two groups at once)
        pool_instances: (2 * children.min(MAX_CHILDREN_PER_FORK) + 16).max(64) as u32,
        ..SandboxConfig::default()
    };
    let engine = Arc::new(SandboxEngine::new(&config).unwrap());
    let config = Arc::new(config);
    if let Some(batches) = std::env::var(noop::LANE_PROCESS)
        .ok()
        .and_then(|batches| batches.parse().ok())
    {
        // One lane of the two-process ceiling, started by the no-op section.
        let noop_loaded = load(
            std::path::Path::new(sandloop_tests::BENCH_ADAPTER),
            engine,
            config,
        )
        .unwrap();
        noop::lane_process(&Arc::new(noop_loaded), children, batches);
        return;
    }
    let component = std::env::var("SANDLOOP_BENCH_CHILDREN_COMPONENT")
        .unwrap_or_else(|_| sandloop_tests::REPLAY_PROBE.to_string());
    let loaded = Arc::new(
        load(
            std::path::Path::new(&component),
            Arc::clone(&engine),
            Arc::clone(&config),
        )
        .unwrap(),
    );
    assert!(loaded.protocols.replay, "replay-probe exports replay");
    let rss_start = rss_kib();

    let noop_loaded = Arc::new(
        load(
            std::path::Path::new(sandloop_tests::BENCH_ADAPTER),
            engine,
            config,
        )
        .unwrap(),
    );
    let noop = noop::section(&noop_loaded, children, batches);
    println!();
    if std::env::var_os("SANDLOOP_BENCH_CHILDREN_NOOP_ONLY").is_some() {
        return;
    }

    println!(
        "isolated replay children: replay-probe, state padded to {pad_bytes} bytes, \
         {children} children per batch, {batches} timed batches per mode, {cores} cores"
    );
    println!("  {:<58} {:>13} {:>13} {:>13}", "", "mean", "p50", "p90");

    let ledger = Arc::new(ReplayMetricLedger::new());
    let items = group_items(&loaded, children, pad_bytes);
    let instrumented = Arc::new(Instrumented::load(&loaded).unwrap());
    let mut serial = Lane::new(&loaded, &ledger, "serial", 1, items.clone(), None);
    let mut snapshot = Lane::new(
        &loaded,
        &ledger,
        "snapshot",
        1,
        items.clone(),
        Some(instrumented),
    );
    let mut parallel = Lane::new(&loaded, &ledger, "parallel", 2, items, None);
    let mut unpadded = Lane::new(
        &loaded,
        &ledger,
        "unpadded",
        1,
        group_items(&loaded, children, 0),
        None,
    );

    // Warm-up: every pool slot a batch uses gets touched once.
    for _ in 0..3 {
        serial.run_batch(false);
        snapshot.run_batch(false);
        parallel.run_batch(false);
        unpadded.run_batch(false);
    }
    let before = ledger.snapshot();
    // speed-up of each parallel batch over the serial batch just before it
    let mut pairwise: Vec<f64> = Vec::with_capacity(batches);
    for _ in 0..batches {
        let s = serial.run_batch(true);
        snapshot.run_batch(true);
        let p = parallel.run_batch(true);
        unpadded.run_batch(true);
        pairwise.push(s.as_secs_f64() / p.as_secs_f64());
    }
    pairwise.sort_by(f64::total_cmp);
    let after = ledger.snapshot();

    // Parts of a child on their own.
    let mut cold = Samples::default();
    let mut warm = Samples::default();
    let mut dropped = Samples::default();
    for i in 0..=parts {
        let mut adapter = WasmAdapter::new(Arc::clone(&loaded), "parts", None);
        let mut c = Samples::default();
        c.time(|| adapter.list_seed_items(ARM, 1)).unwrap();
        let mut w = Samples::default();
        w.time(|| adapter.list_seed_items(ARM, 1)).unwrap();
        let mut d = Samples::default();
        d.time(|| drop(adapter));
        if i > 0 {
            cold.0.extend(c.0);
            warm.0.extend(w.0);
            dropped.0.extend(d.0);
        }
    }
    let mut episode = Samples::default();
    {
        let items = group_items(&loaded, 2, 0);
        let mut plain = WasmAdapter::new(Arc::clone(&loaded), LANE, None);
        let ctx = ctx("g-episode");
        let prepared = plain
            .prepare_episode_group(&items[0], &items, &ctx)
            .unwrap()
            .unwrap();
        for i in 0..=parts {
            let mut e = Samples::default();
            e.time(|| plain.execute_episode(&prepared.handle, &items[1], &ctx))
                .unwrap();
            if i > 0 {
                episode.0.extend(e.0);
            }
        }
        plain.release_episode_group(prepared.handle, &ctx).unwrap();
    }

    // Figures.
    serial.print("serial children (child_workers 1)");
    parallel.print("parallel children (child_workers 2)");
    unpadded.print("serial children without padding (child_workers 1, 0 KiB state)");
    snapshot.print(
        "serial children forked from a snapshot of the parent (--fork snapshot; \
         child-risk makes each also adopt the exported state)",
    );
    println!(
        "  {:<58} {:>11.2}x {:>12.2}x",
        "snapshot per child / state-transfer per child (mean, p50)",
        snapshot.per_child.mean_us() / serial.per_child.mean_us(),
        snapshot.per_child.p50_us() / serial.per_child.p50_us(),
    );

    header("parts of a child, timed on their own");
    row("fresh instance + list-seed-items (cold call)", &cold);
    row("list-seed-items on the warm instance", &warm);
    row_value(
        "  instantiation (cold - warm)",
        cold.mean_us() - warm.mean_us(),
        cold.p50_us() - warm.p50_us(),
    );
    row("drop of a used instance (store back to the pool)", &dropped);
    row(
        "execute-episode on a prepared group (warm item call)",
        &episode,
    );
    row_value(
        "  fork-replay-child call (fork - instantiation)",
        serial.fork.mean_us() - (cold.mean_us() - warm.mean_us()),
        serial.fork.p50_us() - (cold.p50_us() - warm.p50_us()),
    );
    row_value(
        "  64 KiB adoption (fork padded - fork unpadded)",
        serial.fork.mean_us() - unpadded.fork.mean_us(),
        serial.fork.p50_us() - unpadded.fork.p50_us(),
    );
    row_value(
        "  two risk calls (intent+run+outcome - execute-episode)",
        serial.suffix.mean_us() - episode.mean_us(),
        serial.suffix.p50_us() - episode.p50_us(),
    );

    header("ledger over the timed batches");
    let total = (batches * children * 4) as u64;
    for key in [
        "child_session_fork_success_count",
        "child_intent_assessment_count",
        "child_outcome_assessment_count",
        "child_session_release_success_count",
        "child_parallel_group_count",
        "child_parallel_downgrade_group_count",
    ] {
        println!("  {key:<58} {:>10}", count(&before, &after, key));
    }
    assert_eq!(
        count(&before, &after, "child_session_fork_success_count"),
        total
    );

    header("speed-up of parallel over serial (same batches, interleaved)");
    let speed_up_mean = serial.batch.mean_us() / parallel.batch.mean_us();
    let speed_up_p50 = serial.batch.p50_us() / parallel.batch.p50_us();
    println!(
        "  {:<58} {speed_up_mean:>11.2}x {speed_up_p50:>12.2}x  (p50 of pairwise {:.2}x)",
        "serial batch wall / parallel batch wall (mean, p50)",
        pairwise[pairwise.len() / 2]
    );
    // The calling thread forks and validates a group's first child alone;
    // the others are forked, validated, run, released and dropped on the
    // workers, each on the one that forked it, and the records are built
    // on the workers too. So the serial part is one fork and validation
    // per batch, taken from the serial lane.
    let serial_part = (serial.fork.mean_us() + serial.validate.mean_us()) / children as f64;
    let per_child = serial.per_child.mean_us();
    let bound = per_child / (serial_part + (per_child - serial_part).max(0.0) / 2.0);
    println!(
        "  {:<58} {bound:>11.2}x",
        "  bound: all but the first child's fork + validate on 2 workers (Amdahl)"
    );
    match reprotect::measure(children, 2000) {
        Some(cost) => println!(
            "  {:<58} {:>8.1} µs alone, {:.1} µs while a sibling thread runs{}",
            "page re-protection (a reused slot, once per child)",
            cost.alone_us,
            cost.busy_sibling_us,
            if cost.shared_core {
                " (the sibling ended on this thread's core: no flush crossed cores)"
            } else {
                ""
            }
        ),
        None => println!("  page re-protection: skipped (the probe's mapping failed)"),
    }

    header("targets (no-op children)");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "  {:<58} {:.1} µs (p50, serial): {}",
        format!("host overhead per child <= {TARGET_CHILD_US} µs"),
        noop.per_child_us,
        verdict(noop.per_child_us <= TARGET_CHILD_US)
    );
    println!(
        "  {:<58} {:.2}x (p50): {} (ceilings now: two lanes {:.2}x, with an engine each \
         {:.2}x, two processes {}, arithmetic {:.2}x)",
        format!("parallel speed-up >= {TARGET_SPEED_UP}"),
        noop.speed_up,
        verdict(noop.speed_up >= TARGET_SPEED_UP),
        noop.lanes_ceiling,
        noop.engines_ceiling,
        noop.processes_ceiling
            .map_or("-".into(), |ratio| format!("{ratio:.2}x")),
        noop.arithmetic_ceiling
    );
    println!(
        "  {:<58} {:.2}x (p50): {}",
        format!("snapshot fork / state fork <= {TARGET_SNAPSHOT_RATIO}"),
        noop.snapshot_ratio,
        verdict(noop.snapshot_ratio <= TARGET_SNAPSHOT_RATIO)
    );

    // Memory of dropped children: RSS across `forks` more forks.
    header(&format!(
        "memory: RSS across {forks} forks (parallel lane, {children} per batch)"
    ));
    let rss_before = rss_kib();
    println!(
        "  {:<58} {:>10.1} MiB",
        "RSS after loading, before any child",
        mib(rss_start)
    );
    println!(
        "  {:<58} {:>10.1} MiB",
        "RSS before the forks (after the timed batches)",
        mib(rss_before)
    );
    let rounds = forks.div_ceil(children);
    let mut forked = 0usize;
    let mut next_report = forks / 5;
    for _ in 0..rounds {
        parallel.run_batch(false);
        forked += children;
        if next_report > 0 && forked >= next_report && forked < forks {
            println!(
                "  {:<58} {:>10.1} MiB",
                format!("  after {forked} forks"),
                mib(rss_kib())
            );
            next_report += forks / 5;
        }
    }
    let rss_after = rss_kib();
    println!(
        "  {:<58} {:>10.1} MiB",
        format!("RSS after {forked} forks"),
        mib(rss_after)
    );
    println!(
        "  {:<58} {:>+10.1} MiB ({:+.2} KiB per fork)",
        "growth",
        mib(rss_after) - mib(rss_before),
        (rss_after as f64 - rss_before as f64) / forked.max(1) as f64
    );

    serial.release();
    parallel.release();
    unpadded.release();
}
