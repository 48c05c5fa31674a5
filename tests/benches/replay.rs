//! Replay-point costs of the `markdown-explorer` component, side by side
//! with a full re-run of the prefix, in one process.
//!
//! One seed (a generated `README.md` of ~200 KB, granted at `/docs`) and
//! its `readme` variants from `examples/markdown-explorer/catalog.json`:
//!
//! - prefix: `prepare-episode-group` (read + one pulldown-cmark parse) and
//!   `release-episode-group` on an adapter without replay;
//! - suffix: `execute-episode` directly on a prepared group (no replay);
//! - capture: `capture-replay-state` through a `ReplayPointRegistry`, and
//!   what it adds to a prepare with replay on;
//! - replay: `execute-episode` on a replay-enabled group (restore, validate
//!   equivalence, `run-replay-suffix`, finalize), broken down with the
//!   `ReplayMetricLedger`;
//! - durable state: `export-replay-state`, then import into a fresh
//!   `WasmAdapter` (cold, with instantiation) and into a warm one;
//! - ratios: full re-run (prefix + suffix + release) vs replay from the
//!   point, and restore vs prefix.
//!
//! Run: `cargo bench -p sandloop-tests --bench replay`
//! (`SANDLOOP_BENCH_REPLAY_RUNS=N` suffix runs per path, default 200;
//! `SANDLOOP_BENCH_REPLAY_PREFIXES=N` prefix / capture / export / import
//! repetitions, default 50; `SANDLOOP_BENCH_REPLAY_DOC_KB=N` document size,
//! default 200). Figures only, no timing asserts; the component cache goes
//! to a temporary directory.
//!
//! Ledger figures are the ledger's minute totals (rounded to 1e-6 min,
//! i.e. 60 µs, per total) divided by their counts, so they have no p50.

#[path = "common/markdown.rs"]
mod markdown;
use markdown::markdown_document;
#[path = "common/samples.rs"]
mod samples;
use samples::{Samples, header};
use std::sync::Arc;

use sandloop::episode::adapter::{CallContext, EpisodeAdapter, Item, Record, SeedSource};
use sandloop::replay::{
    CaptureRequest, Fidelity, MemoryAgentStateStore, ReplayAdapter, ReplayMetricLedger,
    ReplayPointRegistry, agent_cursor,
};
use sandloop::sandbox::adapter::adopt_durable_point;
use sandloop::sandbox::{
    DirGrant, LoadedAdapter, ReplayOptions, SandboxConfig, SandboxEngine, WasmAdapter, load,
};
use sandloop::trace::TraceLog;
use serde_json::{Map, Value};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEED_FILE: &str = "README.md";
const ARM: &str = "main";
const LANE: &str = "queue_worker_01";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Mean µs per count of a ledger minute total, between two snapshots.
fn ledger_mean_us(
    before: &Map<String, Value>,
    after: &Map<String, Value>,
    minutes: &str,
    count: &str,
) -> (f64, u64) {
    let f = |map: &Map<String, Value>, key: &str| map[key].as_f64().unwrap_or(0.0);
    let c = |map: &Map<String, Value>, key: &str| map[key].as_u64().unwrap_or(0);
    let n = c(after, count) - c(before, count);
    let total_us = (f(after, minutes) - f(before, minutes)) * 60e6;
    (
        if n == 0 {
            f64::NAN
        } else {
            total_us / n as f64
        },
        n,
    )
}

fn row(label: &str, samples: &Samples) {
    println!(
        "  {label:<62} {:>11.1} µs {:>11.1} µs  (n={})",
        samples.mean_us(),
        samples.p50_us(),
        samples.0.len()
    );
}

fn row_mean(label: &str, mean_us: f64, n: u64) {
    println!("  {label:<62} {mean_us:>11.1} µs {:>14}  (n={n})", "—");
}

fn ctx(group: &str) -> CallContext {
    CallContext {
        arm: ARM.into(),
        epoch: 1,
        branch_id: LANE.into(),
        execution_group_id: Some(group.into()),
    }
}

/// A record without the host's `replay` block, to compare a replayed
/// suffix with a direct one.
fn without_replay(record: &Record) -> Record {
    let mut record = record.clone();
    record.remove("replay");
    record
}

/// The seed and its `readme` variants, compiled by the component.
fn seed_and_variants(loaded: &Arc<LoadedAdapter>) -> (Item, Vec<Item>) {
    let mut control = WasmAdapter::new(Arc::clone(loaded), "control", None);
    let seeds = control.list_seed_items(ARM, 1).unwrap();
    let seed = seeds
        .into_iter()
        .find(|seed| seed["item_id"] == SEED_FILE)
        .expect("the generated document is a seed");
    let family = seed["family"].as_str().unwrap_or("").to_string();
    let catalog: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/examples/markdown-explorer/catalog.json",
            sandloop_tests::WORKSPACE
        ))
        .unwrap(),
    )
    .unwrap();
    let mut items = vec![seed.clone()];
    for spec in catalog["specs"].as_array().unwrap() {
        if spec["seed_family"] == family.as_str() {
            let spec = Item::from(spec.as_object().unwrap().clone());
            items.push(control.compile_variant(&spec, &seed).unwrap());
        }
    }
    assert!(items.len() > 1, "the catalog has specs for {family:?}");
    (seed, items)
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo test --benches` probing
    }
    let runs = env_usize("SANDLOOP_BENCH_REPLAY_RUNS", 200).max(1);
    let prefixes = env_usize("SANDLOOP_BENCH_REPLAY_PREFIXES", 50).max(1);
    let doc_kb = env_usize("SANDLOOP_BENCH_REPLAY_DOC_KB", 200).max(1);

    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    let text = markdown_document(doc_kb * 1024);
    std::fs::write(docs.join(SEED_FILE), &text).unwrap();

    let config = SandboxConfig {
        dirs: DirGrant::parse_all(&[format!("{}::/docs:ro", docs.display())]).unwrap(),
        cache_dir: Some(dir.path().join("cache")),
        pool_instances: 8,
        ..SandboxConfig::default()
    };
    let engine = Arc::new(SandboxEngine::new(&config).unwrap());
    let loaded = Arc::new(
        load(
            std::path::Path::new(sandloop_tests::MARKDOWN_EXPLORER),
            engine,
            Arc::new(config),
        )
        .unwrap(),
    );
    assert!(loaded.protocols.replay, "markdown-explorer exports replay");
    let (seed, items) = seed_and_variants(&loaded);
    let n_items = items.len();
    let item_ids: Vec<String> = items
        .iter()
        .map(|item| item["item_id"].as_str().unwrap_or("?").to_string())
        .collect();

    println!(
        "replay costs: markdown-explorer, {SEED_FILE} of {} bytes, 1 seed + {} variants ({}), \
         {runs} suffix runs per path (items in turn), {prefixes} prefix/capture/export/import runs",
        text.len(),
        n_items - 1,
        item_ids[1..].join(", ")
    );
    println!("  {:<62} {:>14} {:>14}", "", "mean", "p50");

    let mut plain = WasmAdapter::new(Arc::clone(&loaded), LANE, None);
    let ledger = Arc::new(ReplayMetricLedger::new());
    let mut replayed =
        WasmAdapter::new(Arc::clone(&loaded), LANE, None).with_replay(ReplayOptions {
            metrics: Arc::clone(&ledger),
            store: None,
            minimum_fidelity: Fidelity::SemanticEquivalent,
            child_workers: 0,
            snapshots: None,
        });

    // 1. The prefix, without replay (prepare + release) and with replay
    //    (prepare + capture, release + release point), interleaved so that
    //    noise from the rest of the machine hits both alike.
    let mut prepare = Samples::default();
    let mut release = Samples::default();
    let mut prepare_replay = Samples::default();
    let mut release_replay = Samples::default();
    let mut capture_before = ledger.snapshot();
    for i in 0..=prefixes {
        let ctx = ctx(&format!("g-prefix-{i}"));
        let mut p = Samples::default();
        let prepared = p
            .time(|| plain.prepare_episode_group(&seed, &items, &ctx))
            .unwrap()
            .expect("the explorer prepares a group");
        prepared.prefix_record.as_ref().unwrap();
        let mut r = Samples::default();
        r.time(|| plain.release_episode_group(prepared.handle, &ctx))
            .unwrap();

        let ctx = self::ctx(&format!("g-replay-prefix-{i}"));
        let mut pr = Samples::default();
        let prepared = pr
            .time(|| replayed.prepare_episode_group(&seed, &items, &ctx))
            .unwrap()
            .unwrap();
        let record = prepared.prefix_record.as_ref().unwrap();
        assert!(
            record.get("replay_point_id").is_some(),
            "prepare captured a point: {:?}",
            record.get("replay_capture_error")
        );
        let mut rr = Samples::default();
        rr.time(|| replayed.release_episode_group(prepared.handle, &ctx))
            .unwrap();
        if i == 0 {
            // the first round instantiates and warms up
            capture_before = ledger.snapshot();
            continue;
        }
        prepare.extend(p);
        release.extend(r);
        prepare_replay.extend(pr);
        release_replay.extend(rr);
    }
    let (capture_ledger_us, capture_ledger_n) = ledger_mean_us(
        &capture_before,
        &ledger.snapshot(),
        "capture_minutes",
        "capture_success_count",
    );

    // 2. Suffixes directly on a prepared group and from the replay point of
    //    a replay-enabled group, interleaved. Each replayed record's
    //    `replay` block carries its restore, equivalence and suffix times.
    let mut direct = Samples::default();
    let mut direct_by_item: Vec<Samples> = (0..n_items).map(|_| Samples::default()).collect();
    let mut direct_records: Vec<Option<Record>> = vec![None; n_items];
    let mut replay_exec = Samples::default();
    let mut replay_by_item: Vec<Samples> = (0..n_items).map(|_| Samples::default()).collect();
    let mut restore = Samples::default();
    let mut equivalence = Samples::default();
    let mut suffix = Samples::default();
    let mut replay_parts = Samples::default();
    let before;
    let after;
    {
        let direct_ctx = ctx("g-direct");
        let direct_group = plain
            .prepare_episode_group(&seed, &items, &direct_ctx)
            .unwrap()
            .unwrap();
        let replay_ctx = ctx("g-replay");
        let replay_group = replayed
            .prepare_episode_group(&seed, &items, &replay_ctx)
            .unwrap()
            .unwrap();
        // one warm-up suffix per item on each path; the records must agree
        for (k, item) in items.iter().enumerate() {
            let record = plain
                .execute_episode(&direct_group.handle, item, &direct_ctx)
                .unwrap();
            let replayed_record = replayed
                .execute_episode(&replay_group.handle, item, &replay_ctx)
                .unwrap();
            assert!(
                replayed_record.get("replay").is_some(),
                "the suffix ran from the point"
            );
            assert_eq!(without_replay(&replayed_record), record, "replay == direct");
            direct_records[k] = Some(record);
        }
        before = ledger.snapshot();
        for i in 0..runs {
            let k = i % n_items;
            let mut d = Samples::default();
            d.time(|| plain.execute_episode(&direct_group.handle, &items[k], &direct_ctx))
                .unwrap();
            direct_by_item[k].0.extend(&d.0);
            direct.extend(d);

            let mut w = Samples::default();
            let record = w
                .time(|| replayed.execute_episode(&replay_group.handle, &items[k], &replay_ctx))
                .unwrap();
            replay_by_item[k].0.extend(&w.0);
            replay_exec.extend(w);
            let block = &record["replay"];
            assert!(block.get("error").is_none(), "{block}");
            let minutes = |key: &str| block[key].as_f64().expect("a replay duration");
            let (r, e, s) = (
                minutes("restore_minutes"),
                minutes("equivalence_minutes"),
                minutes("suffix_minutes"),
            );
            restore.push_minutes(r);
            equivalence.push_minutes(e);
            suffix.push_minutes(s);
            replay_parts.push_minutes(r + e + s);
        }
        after = ledger.snapshot();
        plain
            .release_episode_group(direct_group.handle, &direct_ctx)
            .unwrap();
        replayed
            .release_episode_group(replay_group.handle, &replay_ctx)
            .unwrap();
    }
    let (restore_us, restore_n) =
        ledger_mean_us(&before, &after, "restore_minutes", "restore_success_count");
    let (equiv_us, _) = ledger_mean_us(
        &before,
        &after,
        "equivalence_minutes",
        "equivalence_attempt_count",
    );
    let (suffix_us, _) = ledger_mean_us(&before, &after, "suffix_minutes", "suffix_success_count");
    let (wall_us, _) = ledger_mean_us(
        &before,
        &after,
        "replay_wall_minutes",
        "replay_success_count",
    );
    let verified = after["equivalence_verified_count"].as_u64().unwrap_or(0)
        - before["equivalence_verified_count"].as_u64().unwrap_or(0);
    let fidelity: Map<String, Value> = after["restored_fidelity_counts"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, count)| {
            let earlier = before["restored_fidelity_counts"][name]
                .as_u64()
                .unwrap_or(0);
            (
                name.clone(),
                Value::from(count.as_u64().unwrap_or(0) - earlier),
            )
        })
        .collect();

    // 3. Capture, export, import, release, through a registry on the plain
    //    adapter (what `sandloop run` and `sandloop replay` do underneath).
    let mut capture = Samples::default();
    let mut export = Samples::default();
    let mut import_cold = Samples::default();
    let mut import_warm = Samples::default();
    let mut replay_after_import = Samples::default();
    let mut point_release = Samples::default();
    let mut state_bytes = 0usize;
    {
        let group = "g-capture";
        let ctx = ctx(group);
        let prepared = plain
            .prepare_episode_group(&seed, &items, &ctx)
            .unwrap()
            .unwrap();
        let ledger = Arc::new(ReplayMetricLedger::new());
        let mut registry =
            ReplayPointRegistry::new(MemoryAgentStateStore::new(), Arc::clone(&ledger));
        for i in 0..=prefixes {
            let warm_up = i == 0;
            let id = format!("rp-bench-{i}");
            let mut trace = TraceLog::new(group, "main").unwrap();
            let cursor = agent_cursor(trace.events(), &format!("{ARM}\n{group}"));
            let mut c = Samples::default();
            let point = c
                .time(|| registry.capture_at_head(&mut plain, &mut trace, cursor, &id, group, None))
                .unwrap();
            let binding = registry.binding(&id).expect("a replayable point");
            let mut e = Samples::default();
            let state = e
                .time(|| plain.export_replay_state(binding))
                .unwrap()
                .expect("the explorer exports its state");
            state_bytes = state.len();

            // Import into a fresh adapter (instantiates on this call), then
            // replay one suffix from the imported point.
            let mut fresh = WasmAdapter::new(Arc::clone(&loaded), "replay", None);
            let mut fresh_registry = ReplayPointRegistry::new(
                MemoryAgentStateStore::new(),
                Arc::new(ReplayMetricLedger::new()),
            );
            let mut ic = Samples::default();
            ic.time(|| adopt_durable_point(&mut fresh, &mut fresh_registry, &point, group, &state))
                .unwrap();
            let item = &items[i % n_items];
            let mut fork = TraceLog::fork(
                &point.cursor.trace_id,
                "replay-bench",
                Some(&point.created_event_id),
                point.cursor.next_sequence + 1,
            )
            .ok();
            let mut ra = Samples::default();
            let (_, record) = ra
                .time(|| {
                    fresh_registry.run_from(
                        &mut fresh,
                        &id,
                        "replay-bench",
                        Fidelity::SemanticEquivalent,
                        |adapter, binding, _| {
                            adapter.run_replay_suffix(binding, item, &ctx, &mut fork)
                        },
                    )
                })
                .unwrap();
            if let Some(expected) = &direct_records[i % n_items] {
                assert_eq!(
                    &record, expected,
                    "an imported point replays like the group"
                );
            }
            // A second import into the now warm instance.
            let request = CaptureRequest {
                replay_point_id: format!("{id}-again"),
                trace_id: point.cursor.trace_id.clone(),
                branch_id: point.cursor.branch_id.clone(),
                after_event_id: point.cursor.after_event_id.clone(),
                next_sequence: point.cursor.next_sequence,
                execution_group_id: group.to_string(),
            };
            let mut iw = Samples::default();
            let lease = iw
                .time(|| fresh.import_replay_state(&state, &request))
                .unwrap();
            if let Some(binding) = lease.binding {
                fresh.release_replay_state(&binding).unwrap();
                fresh.discard_binding(binding).unwrap();
            }
            fresh_registry.release(&mut fresh, &id).unwrap();

            let mut rel = Samples::default();
            rel.time(|| registry.release(&mut plain, &id)).unwrap();
            if !warm_up {
                capture.0.extend(c.0);
                export.0.extend(e.0);
                import_cold.0.extend(ic.0);
                import_warm.0.extend(iw.0);
                replay_after_import.0.extend(ra.0);
                point_release.0.extend(rel.0);
            }
        }
        plain.release_episode_group(prepared.handle, &ctx).unwrap();
    }

    // Figures.
    header("prefix (adapter without replay)");
    row(
        "prepare-episode-group (read + parse: the full prefix)",
        &prepare,
    );
    row("release-episode-group", &release);
    header("suffix directly on the prepared group (no replay)");
    row("execute-episode, all items", &direct);
    for (k, id) in item_ids.iter().enumerate() {
        row(&format!("  {id}"), &direct_by_item[k]);
    }
    header("capture (replay point after the prefix)");
    row("capture_at_head (capture-replay-state + event)", &capture);
    row_mean(
        "  ledger: capture_minutes / capture_success_count",
        capture_ledger_us,
        capture_ledger_n,
    );
    row(
        "prepare-episode-group with replay (prefix + capture)",
        &prepare_replay,
    );
    println!(
        "  {:<62} {:>11.1} µs {:>11.1} µs",
        "  with replay - without (mean, p50)",
        prepare_replay.mean_us() - prepare.mean_us(),
        prepare_replay.p50_us() - prepare.p50_us()
    );
    row(
        "release-episode-group with replay (+ release point)",
        &release_replay,
    );
    row(
        "registry release of a point (release-replay-state)",
        &point_release,
    );
    header("replay from the point (execute-episode on a replay-enabled group)");
    row("restore-replay-state", &restore);
    row("validate-replay-equivalence", &equivalence);
    row("run-replay-suffix + finalize", &suffix);
    row("restore + equivalence + suffix, per call", &replay_parts);
    println!(
        "  {:<62} {restore_us:.1} + {equiv_us:.1} + {suffix_us:.1} µs, wall {wall_us:.1} µs",
        "  ledger means (cross-check)"
    );
    row("execute-episode with replay, wall, all items", &replay_exec);
    for (k, id) in item_ids.iter().enumerate() {
        row(&format!("  {id}"), &replay_by_item[k]);
    }
    println!(
        "  {:<62} {verified} of {restore_n} verified, fidelity {}",
        "equivalence",
        Value::Object(fidelity)
    );
    header("durable state");
    println!(
        "  {:<62} {:>11} bytes (document {} bytes)",
        "exported state size",
        state_bytes,
        text.len()
    );
    row("export-replay-state", &export);
    row(
        "import into a fresh WasmAdapter (incl. instantiation)",
        &import_cold,
    );
    row("import-replay-state into a warm instance", &import_warm);
    row(
        "first replay from the imported point (fresh instance)",
        &replay_after_import,
    );

    // Ratios, on means and on p50s (a sum of p50s is not the p50 of the
    // sum, but it is robust to the odd slow call).
    let full_rerun =
        |suffix: &Samples, at: fn(&Samples) -> f64| at(&prepare) + at(suffix) + at(&release);
    let mean = Samples::mean_us as fn(&Samples) -> f64;
    let p50 = Samples::p50_us as fn(&Samples) -> f64;
    header(
        "ratios                                                              mean            p50",
    );
    println!(
        "  {:<62} {:>11.1} µs {:>11.1} µs",
        "full re-run = prepare + direct suffix + release",
        full_rerun(&direct, mean),
        full_rerun(&direct, p50)
    );
    let ratio = |label: &str, a: f64, b: f64| println!("  {label:<62} {a:>12.2}x {b:>12.2}x");
    ratio(
        "speed-up: full re-run / (restore + equivalence + suffix)",
        full_rerun(&direct, mean) / replay_parts.mean_us(),
        full_rerun(&direct, p50) / replay_parts.p50_us(),
    );
    ratio(
        "speed-up: full re-run / execute-episode with replay (wall)",
        full_rerun(&direct, mean) / replay_exec.mean_us(),
        full_rerun(&direct, p50) / replay_exec.p50_us(),
    );
    for (k, id) in item_ids.iter().enumerate() {
        ratio(
            &format!("  {id}"),
            full_rerun(&direct_by_item[k], mean) / replay_by_item[k].mean_us(),
            full_rerun(&direct_by_item[k], p50) / replay_by_item[k].p50_us(),
        );
    }
    let fraction = |label: &str, a: f64, b: f64| println!("  {label:<62} {a:>13.3} {b:>14.3}");
    fraction(
        "restore / prefix",
        restore.mean_us() / prepare.mean_us(),
        restore.p50_us() / prepare.p50_us(),
    );
    fraction(
        "(restore + equivalence) / prefix",
        (restore.mean_us() + equivalence.mean_us()) / prepare.mean_us(),
        (restore.p50_us() + equivalence.p50_us()) / prepare.p50_us(),
    );
    fraction(
        "capture / prefix",
        capture.mean_us() / prepare.mean_us(),
        capture.p50_us() / prepare.p50_us(),
    );
    fraction(
        "import (warm) / prefix",
        import_warm.mean_us() / prepare.mean_us(),
        import_warm.p50_us() / prepare.p50_us(),
    );
    let payback = |at: fn(&Samples) -> f64| {
        let saved = full_rerun(&direct, at) - at(&replay_exec);
        if saved > 0.0 {
            at(&capture) / saved
        } else {
            f64::INFINITY
        }
    };
    fraction(
        "replays to pay back one capture (capture / saving per replay)",
        payback(mean),
        payback(p50),
    );
}
