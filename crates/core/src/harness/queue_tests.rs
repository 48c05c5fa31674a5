use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::episode::adapter::Record;
use crate::episode::clock::SystemClock;
use crate::episode::testing::obj;

#[derive(Debug)]
struct TestUnit {
    id: String,
    keys: Vec<String>,
}

impl QueueUnit for TestUnit {
    fn concurrency_keys(&self) -> &[String] {
        &self.keys
    }
}

fn unit(id: &str, keys: &[&str]) -> TestUnit {
    TestUnit {
        id: id.to_owned(),
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
    }
}

/// The reference's pull: linear scan for the first unit with all keys
/// free.
struct NaiveQueue {
    keys: Vec<Vec<u32>>,
    taken: Vec<bool>,
    busy: HashSet<u32>,
}

impl NaiveQueue {
    fn pull(&mut self) -> Option<usize> {
        let index = (0..self.keys.len())
            .find(|&i| !self.taken[i] && self.keys[i].iter().all(|k| !self.busy.contains(k)))?;
        self.taken[index] = true;
        self.busy.extend(self.keys[index].iter().copied());
        Some(index)
    }
    fn release(&mut self, index: usize) {
        for k in &self.keys[index] {
            self.busy.remove(k);
        }
    }
}

#[test]
fn scheduler_pulls_the_first_unit_whose_keys_are_all_free() {
    let units = vec![
        unit("a", &["x", "y"]),
        unit("b", &["y"]),
        unit("c", &["z"]),
        unit("d", &[]),
        unit("e", &["x"]),
    ];
    let mut s = Scheduler::new(&units);
    assert_eq!(s.pull(), Some(0)); // a holds x, y
    assert_eq!(s.pull(), Some(2)); // b waits for y; c runs
    assert_eq!(s.pull(), Some(3)); // d has no keys
    assert_eq!(s.pull(), None); // b (y) and e (x) wait for a
    assert_eq!(s.pending(), 2);
    s.release(0);
    assert_eq!(s.pull(), Some(1), "b comes before e once a is done");
    assert_eq!(s.pull(), Some(4));
    assert_eq!(s.pending(), 0);
    assert_eq!(s.pull(), None);
}

#[test]
fn scheduler_passes_a_wake_along_when_the_woken_unit_is_still_blocked() {
    // b and c both wait for x; b also needs y (held by d).
    let units = vec![
        unit("a", &["x"]),
        unit("d", &["y"]),
        unit("b", &["x", "y"]),
        unit("c", &["x"]),
    ];
    let mut s = Scheduler::new(&units);
    assert_eq!(s.pull(), Some(0));
    assert_eq!(s.pull(), Some(1));
    assert_eq!(s.pull(), None);
    s.release(0); // x free: b is woken but still blocked on y -> c
    assert_eq!(s.pull(), Some(3));
    s.release(3);
    assert_eq!(s.pull(), None, "b still waits for y");
    s.release(1);
    assert_eq!(s.pull(), Some(2));
}

#[test]
fn scheduler_matches_the_reference_linear_scan_on_random_workloads() {
    // xorshift64*: deterministic pseudo-random workloads.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    };
    for round in 0..300 {
        let unit_count = 1 + next(60) as usize;
        let key_space = 1 + next(8);
        let units: Vec<TestUnit> = (0..unit_count)
            .map(|i| {
                let key_count = next(4);
                let keys: Vec<String> = (0..key_count)
                    .map(|_| format!("k{}", next(key_space)))
                    .collect();
                TestUnit {
                    id: i.to_string(),
                    keys,
                }
            })
            .collect();
        let mut fast = Scheduler::new(&units);
        let mut naive = NaiveQueue {
            keys: fast.unit_keys.iter().map(|k| k.to_vec()).collect(),
            taken: vec![false; unit_count],
            busy: HashSet::new(),
        };
        let mut running: Vec<usize> = Vec::new();
        let mut pulled = 0;
        while pulled < unit_count {
            // Pull up to a random number of lanes' worth, then release
            // a random running unit.
            let want = 1 + next(4) as usize;
            while running.len() < want {
                let expected = naive.pull();
                let got = fast.pull();
                assert_eq!(got, expected, "round {round}: pull diverged");
                match got {
                    Some(index) => {
                        running.push(index);
                        pulled += 1;
                    }
                    None => break,
                }
            }
            assert!(
                !running.is_empty(),
                "round {round}: deadlock with nothing running"
            );
            let victim = running.swap_remove(next(running.len() as u64) as usize);
            fast.release(victim);
            naive.release(victim);
        }
        assert_eq!(fast.pending(), 0);
    }
}

/// A rendezvous for `n` threads that gives up after a generous timeout
/// (a failure signal only; tests never assert on timing).
struct Rendezvous {
    state: Mutex<usize>,
    cv: Condvar,
    n: usize,
}

impl Rendezvous {
    fn new(n: usize) -> Self {
        Self {
            state: Mutex::new(0),
            cv: Condvar::new(),
            n,
        }
    }
    fn arrive(&self) -> bool {
        let mut count = self.state.lock().unwrap();
        *count += 1;
        self.cv.notify_all();
        let (count, timeout) = self
            .cv
            .wait_timeout_while(count, Duration::from_secs(20), |c| *c < self.n)
            .unwrap();
        drop(count);
        !timeout.timed_out()
    }
}

fn config(workers: usize) -> QueueConfig<'static> {
    QueueConfig {
        arm: "main",
        epoch: 1,
        worker_count: workers,
        stagger: Duration::ZERO,
    }
}

fn record_of(id: &str) -> Record {
    obj(json!({"item_id": id, "family": format!("fam-{id}")}))
}

/// A lane adapter that is deliberately not `Send`.
struct LocalAdapter {
    lane: usize,
    _not_send: Rc<()>,
}

#[test]
fn disjoint_units_overlap_while_every_key_of_a_running_unit_stays_locked() {
    // a holds x and y; b needs y; c needs z. With two lanes, a and c
    // must run at the same time (they rendezvous), and b must wait for
    // a even though b only shares one of a's keys.
    let units = vec![unit("a", &["x", "y"]), unit("b", &["y"]), unit("c", &["z"])];
    let rendezvous = Rendezvous::new(2);
    let active: Mutex<Vec<(String, Vec<String>)>> = Mutex::new(Vec::new());
    let events: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let overlap_proven = AtomicUsize::new(0);
    let factory = |lane: usize| {
        Ok(LocalAdapter {
            lane,
            _not_send: Rc::new(()),
        })
    };
    let execute = |adapter: &mut LocalAdapter, unit: TestUnit, ctx: &CallContext| {
        assert_eq!(ctx.branch_id, branch_id(adapter.lane));
        {
            let mut active = active.lock().unwrap();
            for (other, keys) in active.iter() {
                assert!(
                    keys.iter().all(|k| !unit.keys.contains(k)),
                    "{} started while {other} holds a shared key",
                    unit.id
                );
            }
            active.push((unit.id.clone(), unit.keys.clone()));
            events.lock().unwrap().push(format!("start:{}", unit.id));
        }
        if unit.id != "b" && rendezvous.arrive() {
            overlap_proven.fetch_add(1, Ordering::SeqCst);
        }
        {
            let mut active = active.lock().unwrap();
            active.retain(|(id, _)| id != &unit.id);
            events.lock().unwrap().push(format!("end:{}", unit.id));
        }
        Ok::<_, FatalError>(vec![record_of(&unit.id)])
    };
    let sink = |_: &UnitDone<'_>, _: Vec<Record>| Ok::<_, FatalError>(());
    let lanes = run_queue_epoch(
        units,
        &config(2),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap();
    assert_eq!(
        overlap_proven.load(Ordering::SeqCst),
        2,
        "a and c ran concurrently"
    );
    let events = events.into_inner().unwrap();
    let pos = |e: &str| events.iter().position(|x| x == e).unwrap();
    assert!(pos("end:a") < pos("start:b"), "{events:?}");
    assert_eq!(lanes.len(), 2);
    assert_eq!(lanes[0].branch_id, "queue_worker_01");
    assert_eq!(lanes[1].branch_id, "queue_worker_02");
    assert_eq!(lanes.iter().map(|l| l.unit_count).sum::<usize>(), 3);
}

#[test]
fn records_reach_the_sink_as_soon_as_their_unit_completes() {
    // b refuses to finish until the sink has seen a's record: only a
    // streaming queue can complete this epoch.
    let units = vec![unit("a", &["p"]), unit("b", &["q"])];
    let seen = Mutex::new(Vec::<String>::new());
    let seen_cv = Condvar::new();
    let factory = |_lane: usize| Ok(());
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        if unit.id == "b" {
            let guard = seen.lock().unwrap();
            let (guard, timeout) = seen_cv
                .wait_timeout_while(guard, Duration::from_secs(20), |s| {
                    !s.contains(&"a".to_owned())
                })
                .unwrap();
            drop(guard);
            if timeout.timed_out() {
                return Err(FatalError::new(AdapterError::new(
                    ErrorType::Deadline,
                    "a's record never reached the sink while b ran",
                )));
            }
        }
        Ok(vec![record_of(&unit.id)])
    };
    let sink = |done: &UnitDone<'_>, records: Vec<Record>| {
        assert!(done.branch_id.starts_with("queue_worker_0"));
        let mut seen = seen.lock().unwrap();
        for record in records {
            seen.push(record["item_id"].as_str().unwrap().to_owned());
        }
        seen_cv.notify_all();
        Ok::<_, FatalError>(())
    };
    let lanes = run_queue_epoch(
        units,
        &config(2),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap();
    assert_eq!(seen.into_inner().unwrap(), vec!["a", "b"]);
    let mut ids: Vec<Value> = lanes.iter().flat_map(|l| l.item_ids.values()).collect();
    ids.sort_by_key(|v| v.to_string());
    assert_eq!(ids, vec![json!("a"), json!("b")]);
    let families: Vec<Value> = lanes.iter().flat_map(|l| l.families.values()).collect();
    assert_eq!(families.len(), 2);
}

#[test]
fn lanes_are_capped_by_units_and_each_builds_its_own_adapter_in_its_thread() {
    let built = Mutex::new(Vec::new());
    let factory = |lane: usize| {
        built.lock().unwrap().push((lane, thread::current().id()));
        Ok(LocalAdapter {
            lane,
            _not_send: Rc::new(()),
        })
    };
    let execute = |adapter: &mut LocalAdapter, unit: TestUnit, _: &CallContext| {
        Ok::<_, FatalError>(vec![obj(json!({"item_id": unit.id, "lane": adapter.lane}))])
    };
    let sink = |_: &UnitDone<'_>, _: Vec<Record>| Ok::<_, FatalError>(());
    let units = vec![unit("a", &[]), unit("b", &[])];
    let lanes = run_queue_epoch(
        units,
        &config(8),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap();
    assert_eq!(lanes.len(), 2, "no more lanes than units");
    let snapshot = built.lock().unwrap().clone();
    let mut lanes_built: Vec<usize> = snapshot.iter().map(|(lane, _)| *lane).collect();
    lanes_built.sort_unstable();
    assert_eq!(lanes_built, vec![0, 1]);
    assert_ne!(
        snapshot[0].1, snapshot[1].1,
        "each adapter is built on its own thread"
    );
    assert!(snapshot.iter().all(|(_, id)| *id != thread::current().id()));
    assert_eq!(lanes[1].launch_index, 1);

    let empty: Vec<TestUnit> = Vec::new();
    let lanes = run_queue_epoch(
        empty,
        &config(2),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap();
    assert!(lanes.is_empty());
    assert_eq!(
        built.lock().unwrap().len(),
        2,
        "an empty queue builds no adapter"
    );
}

#[test]
fn the_first_error_stops_the_epoch_and_nothing_more_is_pulled() {
    let executed = Mutex::new(Vec::new());
    let factory = |_lane: usize| Ok(());
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        executed.lock().unwrap().push(unit.id.clone());
        if unit.id == "b" {
            return Err(FatalError::new(AdapterError::declared(
                "boom", "b failed", false,
            )));
        }
        Ok(vec![record_of(&unit.id)])
    };
    let sunk = Mutex::new(Vec::new());
    let sink = |_: &UnitDone<'_>, records: Vec<Record>| {
        sunk.lock().unwrap().extend(records);
        Ok::<_, FatalError>(())
    };
    let units = vec![
        unit("a", &[]),
        unit("b", &[]),
        unit("c", &[]),
        unit("d", &[]),
    ];
    let error = run_queue_epoch(
        units,
        &config(1),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap_err();
    assert_eq!(error.error.message, "b failed");
    assert_eq!(executed.into_inner().unwrap(), vec!["a", "b"]);
    assert_eq!(
        sunk.into_inner().unwrap().len(),
        1,
        "a's record was already streamed"
    );
}

#[test]
fn a_lane_failing_mid_epoch_lets_the_other_lane_finish_its_unit() {
    let rendezvous = Rendezvous::new(2);
    let factory = |_lane: usize| Ok(());
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        if unit.id == "fail" || unit.id == "slow" {
            assert!(rendezvous.arrive(), "both units are in flight together");
        }
        if unit.id == "fail" {
            return Err(FatalError::new(AdapterError::declared(
                "boom", "failed", false,
            )));
        }
        Ok(vec![record_of(&unit.id)])
    };
    let sunk = Mutex::new(Vec::new());
    let sink = |_: &UnitDone<'_>, records: Vec<Record>| {
        sunk.lock().unwrap().extend(records);
        Ok::<_, FatalError>(())
    };
    let units = vec![unit("fail", &["f"]), unit("slow", &["s"])];
    let error = run_queue_epoch(
        units,
        &config(2),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap_err();
    assert_eq!(error.error.message, "failed");
    let sunk = sunk.into_inner().unwrap();
    assert_eq!(sunk.len(), 1, "the running unit completed and was streamed");
    assert_eq!(sunk[0]["item_id"], json!("slow"));
}

#[test]
fn factory_sink_and_panics_become_epoch_errors() {
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        if unit.id == "panics" {
            panic!("adapter bug");
        }
        Ok::<_, FatalError>(vec![record_of(&unit.id)])
    };
    let sink = |_: &UnitDone<'_>, _: Vec<Record>| Ok::<_, FatalError>(());

    let failing_factory = |_lane: usize| -> Result<(), AdapterError> {
        Err(AdapterError::new(ErrorType::Instantiation, "bad component"))
    };
    let error = run_queue_epoch(
        vec![unit("a", &[])],
        &config(1),
        &SystemClock,
        &failing_factory,
        &execute,
        &sink,
        None,
    )
    .unwrap_err();
    assert_eq!(error.error.error_type, ErrorType::Instantiation);

    let factory = |_lane: usize| Ok(());
    let error = run_queue_epoch(
        vec![unit("panics", &[])],
        &config(1),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap_err();
    assert_eq!(error.error.error_type, ErrorType::Trap);
    assert!(
        error.error.message.contains("adapter bug"),
        "{}",
        error.error
    );

    let refusing_sink = |_: &UnitDone<'_>, _: Vec<Record>| {
        Err(FatalError::new(AdapterError::new(
            ErrorType::Trap,
            "disk full",
        )))
    };
    let error = run_queue_epoch(
        vec![unit("a", &[]), unit("b", &[])],
        &config(1),
        &SystemClock,
        &factory,
        &execute,
        &refusing_sink,
        None,
    )
    .unwrap_err();
    assert_eq!(error.error.message, "disk full");
}

#[test]
fn many_units_on_one_key_drain_in_order_without_overlap() {
    let running = Arc::new(AtomicUsize::new(0));
    let order = Mutex::new(Vec::new());
    let factory = |_lane: usize| Ok(());
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        assert_eq!(
            running.fetch_add(1, Ordering::SeqCst),
            0,
            "one key, one unit at a time"
        );
        order
            .lock()
            .unwrap()
            .push(unit.id.parse::<usize>().unwrap());
        running.fetch_sub(1, Ordering::SeqCst);
        Ok::<_, FatalError>(Vec::new())
    };
    let sink = |_: &UnitDone<'_>, _: Vec<Record>| Ok::<_, FatalError>(());
    let units: Vec<TestUnit> = (0..500).map(|i| unit(&i.to_string(), &["same"])).collect();
    run_queue_epoch(
        units,
        &config(4),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        None,
    )
    .unwrap();
    assert_eq!(order.into_inner().unwrap(), (0..500).collect::<Vec<_>>());
}

#[test]
fn the_ticker_runs_on_the_calling_thread_while_lanes_work() {
    // The only unit waits until it has seen two ticks: the epoch can only
    // finish if ticks happen while a lane is busy.
    let ticks = Mutex::new(Vec::new());
    let ticked = Condvar::new();
    let caller = thread::current().id();
    let tick = || {
        ticks.lock().unwrap().push(thread::current().id());
        ticked.notify_all();
        Ok::<_, FatalError>(())
    };
    let factory = |_lane: usize| Ok(());
    let execute = |_: &mut (), unit: TestUnit, _: &CallContext| {
        let guard = ticks.lock().unwrap();
        let (guard, timeout) = ticked
            .wait_timeout_while(guard, Duration::from_secs(20), |t| t.len() < 2)
            .unwrap();
        drop(guard);
        assert!(!timeout.timed_out(), "no tick while the lane was busy");
        Ok::<_, FatalError>(vec![record_of(&unit.id)])
    };
    let sink = |_: &UnitDone<'_>, _: Vec<Record>| Ok::<_, FatalError>(());
    let ticker = Ticker {
        every: Duration::from_millis(1),
        tick: &tick,
    };
    run_queue_epoch(
        vec![unit("a", &[])],
        &config(1),
        &SystemClock,
        &factory,
        &execute,
        &sink,
        Some(ticker),
    )
    .unwrap();
    let ticks = ticks.into_inner().unwrap();
    assert!(ticks.len() >= 2);
    assert!(
        ticks.iter().all(|id| *id == caller),
        "ticks run on the caller's thread"
    );

    // A failing tick stops the epoch: nothing after the running unit.
    // The unit waits for a second tick, which can only come after the
    // first tick's failure was registered.
    let executed = AtomicUsize::new(0);
    let failures = Mutex::new(0usize);
    let failed = Condvar::new();
    let failing = || {
        // Only fail once a unit runs (lanes may start late under load).
        if executed.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        *failures.lock().unwrap() += 1;
        failed.notify_all();
        Err(FatalError::new(AdapterError::new(
            ErrorType::Trap,
            "flush failed",
        )))
    };
    let slow = |_: &mut (), _unit: TestUnit, _: &CallContext| {
        executed.fetch_add(1, Ordering::SeqCst);
        let guard = failures.lock().unwrap();
        let (guard, timeout) = failed
            .wait_timeout_while(guard, Duration::from_secs(20), |n| *n < 2)
            .unwrap();
        drop(guard);
        assert!(!timeout.timed_out(), "the ticker kept ticking");
        Ok::<_, FatalError>(Vec::new())
    };
    let error = run_queue_epoch(
        vec![unit("a", &[]), unit("b", &[]), unit("c", &[])],
        &config(1),
        &SystemClock,
        &factory,
        &slow,
        &sink,
        Some(Ticker {
            every: Duration::from_millis(1),
            tick: &failing,
        }),
    )
    .unwrap_err();
    assert_eq!(error.error.message, "flush failed");
    assert_eq!(executed.load(Ordering::SeqCst), 1);
}
