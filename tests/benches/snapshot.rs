//! Snapshot forks (`sandloop::sandbox::snapshot`): what a wizer snapshot of a
//! prepared parent costs, and what a child instantiated from it costs beside
//! a fresh instance of the original component that re-runs the prefix.
//!
//! Two cases, each with its own cache directory (so the first compiles are
//! cold):
//!
//! - `markdown-explorer`: `prepare-episode-group` on a generated `README.md`
//!   of ~200 KB (read through WASI at `/docs` + one pulldown-cmark parse);
//!   the cheap call is `compile-variant` (pure JSON; a child cannot use the
//!   file system, see the snapshot module's documentation);
//! - `replay-probe`: `prepare-episode-group` on a seed with 64 KiB of
//!   `pad_bytes`; the cheap call is `list-seed-items` (returns no seeds).
//!
//! Figures per case:
//!
//! - instrument + compile: wizer's instrumentation of the component, and
//!   compiling the instrumented component cold (cache miss) and warm (hit);
//! - prepare in the parent (the prefix a child skips);
//! - snapshot: wall time split into re-deriving wizer's context
//!   (instrumenting again), the accessor calls and the rewrite; the
//!   snapshot's size against the original's;
//! - snapshot compile: cold (miss), warm (hit), and building its
//!   copy-on-write memory image;
//! - per child (≥1000, after 20 warm-ups): instantiate from the snapshot's
//!   `InstancePre` (pooling allocator on) + the cheap call + drop, and the
//!   parts of it; beside it a fresh instance of the original component +
//!   `prepare-episode-group` (the prefix re-run) + the cheap call + drop, a
//!   fresh original instance + the cheap call + drop (no prefix), and the
//!   ratio of the p50s; the number of children after which the snapshot
//!   (snapshot + cold compile) has paid for itself.
//!
//! Run: `cargo bench -p sandloop-tests --bench snapshot`
//! (`SANDLOOP_BENCH_SNAPSHOT_CHILDREN=N` children per path, default 1000;
//! `SANDLOOP_BENCH_SNAPSHOT_SNAPSHOTS=N` snapshots timed per case, default
//! 20; `SANDLOOP_BENCH_SNAPSHOT_DOC_KB=N` document size, default 200;
//! `SANDLOOP_BENCH_SNAPSHOT_PAD_KB=N` probe padding, default 64). Figures
//! only, no timing asserts.

#[path = "common/markdown.rs"]
mod markdown;
use markdown::markdown_document;
#[path = "common/samples.rs"]
mod samples;
use samples::{Samples, header};
use std::sync::Arc;
use std::time::Duration;

use sandloop::episode::adapter::SeedSource;
use sandloop::sandbox::bindings::exports::sandloop::adapter::{
    episode_groups, replay, seeds, variants,
};
use sandloop::sandbox::bindings::sandloop::adapter::types::Context;
use sandloop::sandbox::snapshot::{Instrumented, LiveInstance, Snapshot};
use sandloop::sandbox::{DirGrant, LoadedAdapter, SandboxConfig, SandboxEngine, WasmAdapter, load};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const GROUP: &str = "g-bench";
const WARM_UP: usize = 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn row(label: &str, samples: &Samples) {
    println!(
        "  {label:<56} {:>10.1} µs {:>10.1} µs {:>10.1} µs  (n={})",
        samples.mean_us(),
        samples.p50_us(),
        samples.quantile_us(0.9),
        samples.0.len()
    );
}

fn row_ms(label: &str, samples: &Samples) {
    println!(
        "  {label:<56} {:>10.2} ms {:>10.2} ms {:>10.2} ms  (n={})",
        samples.mean_us() / 1000.0,
        samples.p50_us() / 1000.0,
        samples.quantile_us(0.9) / 1000.0,
        samples.0.len()
    );
}

fn row_once(label: &str, value: f64, unit: &str) {
    println!("  {label:<56} {value:>10.2} {unit}");
}

fn ctx() -> Context {
    Context {
        arm: "main".into(),
        epoch: 1,
        branch_id: "queue_worker_01".into(),
        execution_group_id: Some(GROUP.into()),
    }
}

/// The cheap call each child (and each baseline instance) makes.
#[derive(Clone, Copy)]
enum Cheap {
    /// `compile-variant(spec, seed)`.
    CompileVariant,
    /// `list-seed-items("main", 1)`.
    ListSeeds,
}

/// The export indices of one linked component, looked up once.
struct Indices {
    groups: episode_groups::GuestIndices,
    replay: replay::GuestIndices,
    seeds: seeds::GuestIndices,
    variants: variants::GuestIndices,
}

impl Indices {
    fn of(live: &LiveInstance) -> Indices {
        let pre = live.instance_pre();
        Indices {
            groups: episode_groups::GuestIndices::new(&pre).unwrap(),
            replay: replay::GuestIndices::new(&pre).unwrap(),
            seeds: seeds::GuestIndices::new(&pre).unwrap(),
            variants: variants::GuestIndices::new(&pre).unwrap(),
        }
    }

    /// `prepare-episode-group` of the case's seed (alone in its group).
    fn prepare(&self, live: &mut LiveInstance, case: &Case) {
        let groups = self.groups.load(&mut live.store, &live.instance).unwrap();
        groups
            .call_prepare_episode_group(&mut live.store, &case.seed, &case.items, &ctx())
            .unwrap()
            .unwrap()
            .expect("a prepared group");
    }

    /// The case's cheap call.
    fn cheap(&self, live: &mut LiveInstance, case: &Case) {
        match case.cheap {
            Cheap::CompileVariant => {
                let variants = self.variants.load(&mut live.store, &live.instance).unwrap();
                variants
                    .call_compile_variant(&mut live.store, &case.spec, &case.seed)
                    .unwrap()
                    .unwrap();
            }
            Cheap::ListSeeds => {
                let seeds = self.seeds.load(&mut live.store, &live.instance).unwrap();
                seeds
                    .call_list_seed_items(&mut live.store, "main", 1)
                    .unwrap()
                    .unwrap();
            }
        }
    }

    /// The projection digest of the group prepared under [`GROUP`], found
    /// by `execution-group-id` (no handle needed).
    fn digest(&self, live: &mut LiveInstance) -> String {
        let replay = self.replay.load(&mut live.store, &live.instance).unwrap();
        let request = replay::CaptureRequest {
            replay_point_id: "rp-bench".into(),
            trace_id: GROUP.into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence: 1,
            execution_group_id: GROUP.into(),
        };
        let lease = replay
            .call_capture_replay_state(&mut live.store, &request)
            .unwrap()
            .unwrap();
        if let Some(binding) = lease.binding {
            live.drop_resource(binding).unwrap();
        }
        lease.projection_digest.unwrap()
    }
}

struct Case {
    name: &'static str,
    loaded: Arc<LoadedAdapter>,
    seed: String,
    /// `[seed]`.
    items: Vec<String>,
    spec: String,
    cheap: Cheap,
    cheap_name: &'static str,
}

fn run_case(case: &Case, children: usize, snapshots: usize) {
    let original_bytes = std::fs::read(&case.loaded.info.path).unwrap();
    header(&format!(
        "{}: {} bytes; prefix = prepare-episode-group, cheap call = {}",
        case.name,
        original_bytes.len(),
        case.cheap_name
    ));
    println!("  {:<56} {:>13} {:>13} {:>13}", "", "mean", "p50", "p90");

    // Instrument + compile, cold then warm.
    let instrumented = Instrumented::new(&case.loaded, original_bytes.clone()).unwrap();
    let warm = Instrumented::new(&case.loaded, original_bytes.clone()).unwrap();
    row_once(
        "instrument (wizer, once per component)",
        ms(instrumented.info.instrument),
        "ms",
    );
    row_once(
        &format!(
            "compile instrumented component ({:?})",
            instrumented.info.cache
        ),
        ms(instrumented.info.compile),
        "ms",
    );
    row_once(
        &format!("compile instrumented component ({:?})", warm.info.cache),
        ms(warm.info.compile),
        "ms",
    );
    row_once(
        "instrumented size / original size",
        instrumented.info.size_bytes as f64 / instrumented.info.original_bytes as f64,
        "x",
    );
    drop(warm);

    // The parent: one prepare.
    let mut parent = instrumented.instantiate().unwrap();
    let parent_indices = Indices::of(&parent);
    let mut prepare = Samples::default();
    prepare.time(|| parent_indices.prepare(&mut parent, case));
    let parent_digest = parent_indices.digest(&mut parent);
    row_ms("prepare in the parent (the prefix)", &prepare);

    // Snapshots of the parent.
    let mut total = Samples::default();
    let mut reinstrument = Samples::default();
    let mut accessors = Samples::default();
    let mut rewrite = Samples::default();
    let mut first: Option<Snapshot> = None;
    for _ in 0..snapshots.max(1) {
        let snapshot = instrumented
            .snapshot(&mut parent.store, &parent.instance)
            .unwrap();
        total.0.push(snapshot.timing.total);
        reinstrument.0.push(snapshot.timing.reinstrument);
        accessors.0.push(snapshot.timing.accessors);
        rewrite.0.push(snapshot.timing.rewrite);
        first.get_or_insert(snapshot);
    }
    let snapshot = first.unwrap();
    row_ms("snapshot (total)", &total);
    row_ms(
        "  re-derive wizer's context (instrument again)",
        &reinstrument,
    );
    row_ms("  accessor calls (memory + globals out)", &accessors);
    row_ms("  rewrite + sha256", &rewrite);
    row_once(
        &format!(
            "snapshot size ({} accessor calls, {:.1} MiB of memory read)",
            snapshot.accessor_calls,
            snapshot.memory_bytes_read as f64 / f64::from(1 << 20)
        ),
        snapshot.bytes.len() as f64 / 1024.0,
        "KiB",
    );
    row_once(
        "snapshot size / original size",
        snapshot.bytes.len() as f64 / instrumented.info.original_bytes as f64,
        "x",
    );

    // Compile the snapshot, cold then warm.
    let compiled = instrumented.compile_snapshot(&snapshot).unwrap();
    let compiled_warm = instrumented.compile_snapshot(&snapshot).unwrap();
    row_once(
        &format!("compile snapshot ({:?})", compiled.cache),
        ms(compiled.compile),
        "ms",
    );
    row_once(
        &format!("compile snapshot ({:?})", compiled_warm.cache),
        ms(compiled_warm.compile),
        "ms",
    );
    row_once(
        "  copy-on-write image of the snapshot",
        ms(compiled.image),
        "ms",
    );
    drop(compiled_warm);

    // The first child has the parent's prepared group.
    let mut check = compiled.instantiate().unwrap();
    let child_indices = Indices::of(&check);
    assert_eq!(
        child_indices.digest(&mut check),
        parent_digest,
        "the child sees the parent's group"
    );
    drop(check);

    // Per child: instantiate from the snapshot + cheap call + drop.
    let mut child = Samples::default();
    let mut child_new = Samples::default();
    let mut child_call = Samples::default();
    let mut child_drop = Samples::default();
    for i in 0..children + WARM_UP {
        let started = std::time::Instant::now();
        let mut live = compiled.instantiate().unwrap();
        let instantiated = started.elapsed();
        child_indices.cheap(&mut live, case);
        let called = started.elapsed();
        drop(live);
        let dropped = started.elapsed();
        if i >= WARM_UP {
            child.0.push(dropped);
            child_new.0.push(instantiated);
            child_call.0.push(called - instantiated);
            child_drop.0.push(dropped - called);
        }
    }

    // Baselines on the original component.
    let original = &case.loaded;
    let mut probe = LiveInstance::new(original).unwrap();
    let original_indices = Indices::of(&probe);
    original_indices.prepare(&mut probe, case);
    assert_eq!(original_indices.digest(&mut probe), parent_digest);
    drop(probe);
    let mut fresh = Samples::default();
    let mut fresh_prepare = Samples::default();
    let mut plain = Samples::default();
    for i in 0..children + WARM_UP {
        let started = std::time::Instant::now();
        let mut live = LiveInstance::new(original).unwrap();
        let instantiated = started.elapsed();
        original_indices.prepare(&mut live, case);
        let prepared = started.elapsed();
        original_indices.cheap(&mut live, case);
        drop(live);
        let dropped = started.elapsed();
        if i >= WARM_UP {
            fresh.0.push(dropped);
            fresh_prepare.0.push(prepared - instantiated);
        }
        let mut p = Samples::default();
        p.time(|| {
            let mut live = LiveInstance::new(original).unwrap();
            original_indices.cheap(&mut live, case);
        });
        if i >= WARM_UP {
            plain.extend(p);
        }
    }

    row("child: instantiate snapshot + cheap call + drop", &child);
    row("  instantiate from the snapshot's InstancePre", &child_new);
    row(&format!("  {}", case.cheap_name), &child_call);
    row("  drop", &child_drop);
    row("fresh original + prepare + cheap call + drop", &fresh);
    row("  prepare (the prefix re-run)", &fresh_prepare);
    row("fresh original + cheap call + drop (no prefix)", &plain);
    let ratio = fresh.p50_us() / child.p50_us();
    row_once("ratio: fresh + prepare / snapshot child (p50)", ratio, "x");
    row_once(
        "ratio: snapshot child / fresh original without prefix (p50)",
        child.p50_us() / plain.p50_us(),
        "x",
    );
    let saved_us = fresh.p50_us() - child.p50_us();
    let invest_us = (total.p50_us() + ms(compiled.compile) * 1000.0).max(0.0);
    if saved_us > 0.0 {
        row_once(
            "children to pay for snapshot + cold compile (p50s)",
            (invest_us / saved_us).ceil(),
            "",
        );
    }
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo test --benches` probing
    }
    let children = env_usize("SANDLOOP_BENCH_SNAPSHOT_CHILDREN", 1000).max(1);
    let snapshots = env_usize("SANDLOOP_BENCH_SNAPSHOT_SNAPSHOTS", 20).max(1);
    let doc_kb = env_usize("SANDLOOP_BENCH_SNAPSHOT_DOC_KB", 200).max(1);
    let pad_kb = env_usize("SANDLOOP_BENCH_SNAPSHOT_PAD_KB", 64);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    let text = markdown_document(doc_kb * 1024);
    std::fs::write(docs.join("README.md"), &text).unwrap();

    println!(
        "snapshot forks (wasmtime-wizer): {children} children per path after {WARM_UP} warm-ups, \
         {snapshots} snapshots per case, pooling allocator, {cores} cores"
    );

    let new_config = |cache: &str, dirs: Vec<DirGrant>| SandboxConfig {
        dirs,
        cache_dir: Some(dir.path().join(cache)),
        pool_instances: 16,
        incremental_compilation: true,
        ..SandboxConfig::default()
    };

    // markdown-explorer on the generated README.md.
    let config = new_config(
        "cache-markdown",
        DirGrant::parse_all(&[format!("{}::/docs:ro", docs.display())]).unwrap(),
    );
    let engine = Arc::new(SandboxEngine::new(&config).unwrap());
    let loaded = Arc::new(
        load(
            std::path::Path::new(sandloop_tests::MARKDOWN_EXPLORER),
            engine,
            Arc::new(config),
        )
        .unwrap(),
    );
    let seed = WasmAdapter::new(Arc::clone(&loaded), "control", None)
        .list_seed_items("main", 1)
        .unwrap()
        .into_iter()
        .find(|seed| seed["item_id"] == "README.md")
        .unwrap();
    let seed = Value::from(seed).to_string();
    run_case(
        &Case {
            name: "markdown-explorer",
            loaded,
            items: vec![seed.clone()],
            seed,
            spec: json!({"spec_id": "v1", "seed_family": "readme", "ops": []}).to_string(),
            cheap: Cheap::CompileVariant,
            cheap_name: "compile-variant",
        },
        children,
        snapshots,
    );
    println!("  (document: {} bytes)", text.len());

    // replay-probe with a padded seed.
    let config = new_config("cache-probe", Vec::new());
    let engine = Arc::new(SandboxEngine::new(&config).unwrap());
    let loaded = Arc::new(
        load(
            std::path::Path::new(sandloop_tests::REPLAY_PROBE),
            engine,
            Arc::new(config),
        )
        .unwrap(),
    );
    let seed = json!({
        "item_id": "seed",
        "family": "probe",
        "text": "a padded seed",
        "pad_bytes": pad_kb * 1024,
    })
    .to_string();
    run_case(
        &Case {
            name: "replay-probe",
            loaded,
            items: vec![seed.clone()],
            seed,
            spec: json!({"spec_id": "v1", "seed_family": "probe", "ops": []}).to_string(),
            cheap: Cheap::ListSeeds,
            cheap_name: "list-seed-items",
        },
        children,
        snapshots,
    );
    println!("  (seed padding: {pad_kb} KiB)");
}
