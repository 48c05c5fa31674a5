//! The no-op section of `--bench children`: the host's own cost per
//! isolated child, with `bench-adapter` (every export returns a constant:
//! 16 bytes of exported state, one fixed digest, `exact` fidelity, allow
//! verdicts), so the adapter's work is not counted — serial, parallel
//! (`child_workers` 2 over the same batches) and forked from a snapshot —
//! next to the reference child runtime's per-child cost measured in the
//! same run, and what two workers can get out of this machine at all
//! (`ceiling.rs`).

use std::sync::Arc;

use serde_json::json;

use super::{Lane, Samples, ceiling, ctx, header, reference};
use sandloop::episode::adapter::{EpisodeAdapter, Item};
use sandloop::replay::ReplayMetricLedger;
use sandloop::sandbox::snapshot::Instrumented;
use sandloop::sandbox::{LoadedAdapter, WasmAdapter};

/// What the no-op section measured, for the targets.
pub struct Figures {
    /// p50 per child, serial, µs.
    pub per_child_us: f64,
    /// Serial batch wall / parallel batch wall, p50.
    pub speed_up: f64,
    /// Snapshot per child / state-transfer per child, p50.
    pub snapshot_ratio: f64,
    /// Two threads of arithmetic at once over one alone (median).
    pub arithmetic_ceiling: f64,
    /// Two serial lanes at once over one alone (median).
    pub lanes_ceiling: f64,
    /// The same with an engine each (the second lane's adapter loaded into
    /// an engine of its own, as a crew helper's twin is).
    pub engines_ceiling: f64,
    /// Two processes, each a serial lane, at once over one alone (median);
    /// `None` when they could not be run.
    pub processes_ceiling: Option<f64>,
}

/// Batches per round of the two-lane and two-process ceilings.
const BATCHES_PER_ROUND: usize = 10;

/// Batches per round of the two-process ceiling: longer rounds, so that
/// starting the two processes' batches one write apart does not count.
const PROCESS_BATCHES_PER_ROUND: usize = 5 * BATCHES_PER_ROUND;

/// Set (to a batch count) in a process this bench starts for the
/// two-process ceiling: the process runs [`lane_process`] only.
pub const LANE_PROCESS: &str = "SANDLOOP_BENCH_CHILDREN_LANE_PROCESS";

/// Set to `serial`, `parallel` or `snapshot`: run only that mode's no-op
/// batches, untimed per batch, print the time per child and exit (`warm`:
/// only warm `execute-episode` calls, the time per call) — a
/// process to profile one mode with (`perf record`, `perf stat`); `lanes`
/// does the same for two serial lanes at once, each on its own thread, and
/// `engines` for two such lanes that share no engine (each loads the
/// component into an engine and instance pool of its own).
pub const PROFILE: &str = "SANDLOOP_BENCH_CHILDREN_PROFILE";

/// One serial lane of no-op children in a process of its own: warms up,
/// prints `ready`, waits for a line on stdin, runs `batches` batches and
/// prints their wall time in µs.
pub fn lane_process(loaded: &Arc<LoadedAdapter>, children: usize, batches: usize) {
    let ledger = Arc::new(ReplayMetricLedger::new());
    let mut lane = Lane::new(loaded, &ledger, "noop-process", 1, items(children), None).noop();
    for _ in 0..3 {
        lane.run_batch(false);
    }
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let started = std::time::Instant::now();
    for _ in 0..batches {
        lane.run_batch(false);
    }
    println!("{}", started.elapsed().as_micros());
    lane.release();
}

/// Throughput of two processes each running a serial lane at once over
/// one such process alone: the median over rounds (at least 3) of
/// [`PROCESS_BATCHES_PER_ROUND`] batches. Two processes share the machine but no
/// address space, allocator or engine. `None` when a process cannot be
/// started or does not answer.
fn two_processes(children: usize, batches: usize) -> Option<f64> {
    use std::io::{BufRead, Write};
    let start = |count: usize| -> Option<Vec<std::process::Child>> {
        (0..count)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().ok()?)
                    .arg("--bench")
                    .env(LANE_PROCESS, PROCESS_BATCHES_PER_ROUND.to_string())
                    .env("SANDLOOP_BENCH_CHILDREN_PER_BATCH", children.to_string())
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .ok()
            })
            .collect()
    };
    // Wall time of the slowest process's batches, run at once once all
    // are ready.
    let run = |count: usize| -> Option<std::time::Duration> {
        let mut processes = start(count)?;
        let mut outputs: Vec<_> = processes
            .iter_mut()
            .map(|p| std::io::BufReader::new(p.stdout.take().expect("piped")).lines())
            .collect();
        for lines in &mut outputs {
            (lines.next()?.ok()? == "ready").then_some(())?;
        }
        for process in &mut processes {
            writeln!(process.stdin.as_mut()?).ok()?;
        }
        let mut slowest = 0;
        for lines in &mut outputs {
            slowest = slowest.max(lines.next()?.ok()?.trim().parse().ok()?);
        }
        for mut process in processes {
            process.wait().ok()?.success().then_some(())?;
        }
        Some(std::time::Duration::from_micros(slowest))
    };
    let rounds = (0..(batches / PROCESS_BATCHES_PER_ROUND).max(3))
        .map(|_| Some((run(1)?, run(2)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(ceiling::median_ratio(rounds))
}

/// Throughput of two serial lanes (`child_workers` 1, each its own group
/// of the same items) running batches at once, one per thread, over one of
/// them running alone: the median over rounds of [`BATCHES_PER_ROUND`]
/// batches alone, then as many on each lane at once (`batches` in all per
/// lane, at least 3 rounds).
fn two_lanes(
    loaded: &Arc<LoadedAdapter>,
    other: &Arc<LoadedAdapter>,
    ledger: &Arc<ReplayMetricLedger>,
    items: &[Item],
    batches: usize,
) -> f64 {
    let new_lane = |loaded, name| Lane::new(loaded, ledger, name, 1, items.to_vec(), None).noop();
    let (mut first, mut second) = (
        new_lane(loaded, "noop-lane-a"),
        new_lane(other, "noop-lane-b"),
    );
    for _ in 0..3 {
        first.run_batch(false);
        second.run_batch(false);
    }
    let run = |lane: &mut Lane| {
        for _ in 0..BATCHES_PER_ROUND {
            lane.run_batch(false);
        }
    };
    let ratio = ceiling::median_ratio((0..(batches / BATCHES_PER_ROUND).max(3)).map(|_| {
        let started = std::time::Instant::now();
        run(&mut first);
        let alone = started.elapsed();
        (alone, ceiling::pair_at_once(&mut first, &mut second, run))
    }));
    first.release();
    second.release();
    ratio
}

/// Two serial lanes, each made and run on its own thread (this one and
/// one more), the first of `loaded`, the second of `second` (the same
/// adapter, or the same component in another engine), `batches` batches
/// each at once; prints the time per child over both and exits — the
/// two-lane ceiling as a process to profile.
fn profile_two_lanes(
    loaded: &Arc<LoadedAdapter>,
    second: &Arc<LoadedAdapter>,
    ledger: &Arc<ReplayMetricLedger>,
    items: &[Item],
    batches: usize,
) -> ! {
    let gate = std::sync::Barrier::new(2);
    let run = |loaded: &Arc<LoadedAdapter>, name: &str| {
        let mut lane = Lane::new(loaded, ledger, name, 1, items.to_vec(), None).noop();
        for _ in 0..3 {
            lane.run_batch(false);
        }
        gate.wait();
        let started = std::time::Instant::now();
        for _ in 0..batches {
            lane.run_batch(false);
        }
        let elapsed = started.elapsed();
        lane.release();
        elapsed
    };
    let (first_wall, second_wall) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(second, "noop-lane-b"));
        (
            run(loaded, "noop-lane-a"),
            other.join().expect("the second lane ran"),
        )
    });
    let wall = first_wall.max(second_wall);
    let shared = if Arc::ptr_eq(loaded, second) {
        "lanes"
    } else {
        "engines"
    };
    println!(
        "two serial lanes at once ({PROFILE}={shared}): {batches} batches of {} each, \
         {:.1} µs per child over both",
        items.len(),
        wall.as_secs_f64() * 1e6 / (2 * batches * items.len()) as f64
    );
    std::process::exit(0);
}

/// `loaded`'s component in an engine of its own, as a crew helper's twin
/// is made.
fn own_engine(loaded: &Arc<LoadedAdapter>) -> Arc<LoadedAdapter> {
    Arc::new(
        loaded
            .in_engine_of_its_own()
            .expect("the component moves into a second engine"),
    )
}

/// A seed and `children - 1` more items of its family (bench-adapter has
/// no variants; each item's intent is its id).
fn items(children: usize) -> Vec<Item> {
    working_items(children, None)
}

/// `calls` timed `execute-episode` calls on one prepared group of
/// bench-adapter, on one warm instance (after as many untimed ones): the
/// host's whole cost of an item call — the item's JSON and the context
/// lowered, the call's deadline and fuel armed, the guest's constant record
/// lifted and parsed.
fn warm_calls(loaded: &Arc<LoadedAdapter>, calls: usize) -> Samples {
    let items = items(2);
    let mut adapter = WasmAdapter::new(Arc::clone(loaded), "noop-warm", None);
    let ctx = ctx("g-warm");
    let prepared = adapter
        .prepare_episode_group(&items[0], &items, &ctx)
        .unwrap()
        .unwrap();
    for _ in 0..calls {
        adapter
            .execute_episode(&prepared.handle, &items[1], &ctx)
            .unwrap();
    }
    let mut samples = Samples::default();
    for _ in 0..calls {
        samples
            .time(|| adapter.execute_episode(&prepared.handle, &items[1], &ctx))
            .unwrap();
    }
    adapter
        .release_episode_group(prepared.handle, &ctx)
        .unwrap();
    samples
}

/// [`items`], each ending with `"work":rounds` when given: bench-adapter
/// then spends that many rounds of arithmetic in each child's run.
fn working_items(children: usize, rounds: Option<u64>) -> Vec<Item> {
    (0..children)
        .map(|k| {
            let mut item = json!({"item_id": format!("c{k:02}"), "family": "noop", "text": "x"});
            if let Some(rounds) = rounds {
                item["work"] = json!(rounds);
            }
            Item::from(item.as_object().unwrap().clone())
        })
        .collect()
}

/// Rounds of each child's own work for the working-children lines
/// (`SANDLOOP_BENCH_CHILDREN_WORK`, comma-separated).
const WORK: &str = "SANDLOOP_BENCH_CHILDREN_WORK";

/// The parallel speed-up of children that do some work of their own:
/// for each count of rounds in [`WORK`] (default 10,000, 30,000 and 100,000),
/// `batches` serial and parallel batches interleaved, and a line with the
/// child's own work (its serial time per child over the no-op child's,
/// `noop_us`), the serial time per child and the speed-up (p50 batch
/// walls). The contract's fixed cost per child is what two workers split
/// worst; the more a child does itself, the closer a group comes to the
/// machine's ceiling.
fn working_children(
    loaded: &Arc<LoadedAdapter>,
    ledger: &Arc<ReplayMetricLedger>,
    children: usize,
    batches: usize,
    noop_us: f64,
) {
    let levels: Vec<u64> = match std::env::var(WORK) {
        Ok(text) => text
            .split(',')
            .map(|level| {
                level.trim().parse().unwrap_or_else(|_| {
                    panic!("{WORK}={text}: expected comma-separated counts of rounds")
                })
            })
            .collect(),
        Err(_) => vec![10_000, 30_000, 100_000],
    };
    for rounds in levels {
        let items = working_items(children, Some(rounds));
        let mut serial = Lane::new(loaded, ledger, "work-serial", 1, items.clone(), None).noop();
        let mut parallel = Lane::new(loaded, ledger, "work-parallel", 2, items, None).noop();
        for _ in 0..3 {
            serial.run_batch(false);
            parallel.run_batch(false);
        }
        for _ in 0..batches {
            serial.run_batch(true);
            parallel.run_batch(true);
        }
        let per_child = serial.per_child.p50_us();
        println!(
            "parallel speed-up, children with their own work (\"work\":{rounds}, ~{:.0} µs \
             each over the no-op child's {noop_us:.1} µs; {per_child:.1} µs serially): {:.2}x",
            (per_child - noop_us).max(0.0),
            serial.batch.p50_us() / parallel.batch.p50_us()
        );
        serial.release();
        parallel.release();
    }
}

/// Time `batches` batches of `children` no-op children per mode (serial,
/// parallel and snapshot interleaved, after 3 warm-up batches each), print
/// them with the reference's figures, and return the headline figures.
pub fn section(loaded: &Arc<LoadedAdapter>, children: usize, batches: usize) -> Figures {
    assert!(
        loaded.protocols.replay,
        "bench-adapter exports replay, replay-children and child-risk"
    );
    if std::env::var(PROFILE).as_deref() == Ok("warm") {
        // Only the calls: no lane is built, no snapshot compiled.
        let calls = warm_calls(loaded, 200_000);
        println!(
            "warm no-op calls only ({PROFILE}): {} calls, {:.2} µs per call (mean)",
            calls.0.len(),
            calls.mean_us()
        );
        std::process::exit(0);
    }
    let ledger = Arc::new(ReplayMetricLedger::new());
    let items = items(children);
    let instrumented = Arc::new(Instrumented::load(loaded).unwrap());
    let new_lane = |name, workers, snapshots| {
        Lane::new(loaded, &ledger, name, workers, items.clone(), snapshots).noop()
    };
    let mut serial = new_lane("noop-serial", 1, None);
    let mut parallel = new_lane("noop-parallel", 2, None);
    let mut snapshot = new_lane("noop-snapshot", 1, Some(instrumented));
    for _ in 0..3 {
        serial.run_batch(false);
        parallel.run_batch(false);
        snapshot.run_batch(false);
    }
    match std::env::var(PROFILE).as_deref() {
        Ok("lanes") => profile_two_lanes(loaded, loaded, &ledger, &items, batches),
        Ok("engines") => profile_two_lanes(loaded, &own_engine(loaded), &ledger, &items, batches),
        _ => {}
    }
    if let Ok(mode) = std::env::var(PROFILE) {
        let lane = match mode.as_str() {
            "serial" => &mut serial,
            "parallel" => &mut parallel,
            "snapshot" => &mut snapshot,
            other => {
                panic!(
                    "{PROFILE}={other}: expected serial, parallel, snapshot, warm, lanes or engines"
                )
            }
        };
        let started = std::time::Instant::now();
        for _ in 0..batches {
            lane.run_batch(false);
        }
        let elapsed = started.elapsed();
        println!(
            "{mode} no-op children only ({PROFILE}): {batches} batches of {children}, \
             {:.1} µs per child",
            elapsed.as_secs_f64() * 1e6 / (batches * children) as f64
        );
        std::process::exit(0);
    }
    for _ in 0..batches {
        serial.run_batch(true);
        parallel.run_batch(true);
        snapshot.run_batch(true);
    }

    println!(
        "no-op children: bench-adapter (16-byte state, constant digest), \
         {children} children per batch, {batches} timed batches per mode"
    );
    println!("  {:<58} {:>13} {:>13} {:>13}", "", "mean", "p50", "p90");
    serial.print("serial no-op children (child_workers 1)");
    parallel.print("parallel no-op children (child_workers 2)");
    snapshot.print("serial no-op children forked from a snapshot (--fork snapshot)");
    let figures = Figures {
        per_child_us: serial.per_child.p50_us(),
        speed_up: serial.batch.p50_us() / parallel.batch.p50_us(),
        snapshot_ratio: snapshot.per_child.p50_us() / serial.per_child.p50_us(),
        arithmetic_ceiling: ceiling::arithmetic_two_over_one(9),
        lanes_ceiling: two_lanes(loaded, loaded, &ledger, &items, batches),
        engines_ceiling: two_lanes(loaded, &own_engine(loaded), &ledger, &items, batches),
        processes_ceiling: two_processes(children, batches),
    };

    let warm = warm_calls(loaded, 20 * batches * children);
    header("no-op children, side by side");
    println!(
        "warm no-op call: {:.2} µs (p50; mean {:.2}, p90 {:.2}: execute-episode on a \
         prepared group of bench-adapter, item in, record out)",
        warm.p50_us(),
        warm.mean_us(),
        warm.quantile_us(0.9)
    );
    println!(
        "host overhead per isolated child (no-op adapter): {:.1} µs",
        figures.per_child_us
    );
    println!("parallel speed-up: {:.2}x", figures.speed_up);
    println!(
        "ceilings of two workers on this machine, measured now: arithmetic {:.2}x one \
         thread; two serial no-op lanes at once {:.2}x one lane (parallel speed-up is \
         {:.0}% of it), {:.2}x with an engine each ({:.0}%); two processes, each a \
         serial lane, at once {}",
        figures.arithmetic_ceiling,
        figures.lanes_ceiling,
        100.0 * figures.speed_up / figures.lanes_ceiling,
        figures.engines_ceiling,
        100.0 * figures.speed_up / figures.engines_ceiling,
        figures
            .processes_ceiling
            .map_or("not measured (a process failed)".into(), |ratio| format!(
                "{ratio:.2}x one"
            ))
    );
    println!(
        "snapshot fork / state fork per child (no-op adapter): {:.2}x",
        figures.snapshot_ratio
    );
    working_children(loaded, &ledger, children, batches, figures.per_child_us);
    match reference::measure(children, batches.clamp(5, 50)) {
        Ok(reference) => println!(
            "reference child runtime per child (in-process objects, no isolation, no-op \
             adapter): {:.1} µs serial, {:.1} µs \"parallel\" (2 threads), speed-up {:.2}x",
            reference.serial_us,
            reference.parallel_us,
            reference.serial_us / reference.parallel_us
        ),
        Err(why) => println!("reference child runtime: skipped ({why})"),
    }
    serial.release();
    parallel.release();
    snapshot.release();
    figures
}
