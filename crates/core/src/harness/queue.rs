//! One epoch's shared pull queue, drained by worker lanes that each own an
//! adapter instance. Mirrors `run_queue_epoch` in `harness_runtime.py`.
//!
//! Differences from the reference, by design:
//! - a lane waits on a condition variable for in-flight work to finish
//!   instead of sleeping 0.5 s and polling;
//! - the queue is scheduled through per-key wait lists (see `Scheduler`),
//!   so pulling stays cheap for 100k items while keeping the reference's
//!   order: every pull returns the first queued unit whose keys are all free;
//! - records are handed to a sink as each unit completes instead of being
//!   returned inside the lanes; lanes keep only item ids and families;
//! - each lane creates its own adapter in its own thread (the adapter need
//!   not be `Send`), and the failure policy is applied by the executor:
//!   the queue treats every executor error as fatal for the epoch.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

use super::json_list::JsonList;
use crate::episode::adapter::{AdapterError, CallContext, ErrorType};
use crate::episode::clock::Clock;
use crate::episode::policy::FatalError;
use crate::episode::unit_record::RecordFields;
use crate::episode::units::ExecutionUnit;
use crate::episode::value::round_to;

/// Something the queue can schedule: it names the concurrency keys it
/// holds while running.
pub trait QueueUnit: Send {
    /// Keys locked while the unit runs; a unit whose keys overlap a running
    /// unit's waits. No keys: never waits.
    fn concurrency_keys(&self) -> &[String];
}

impl QueueUnit for ExecutionUnit {
    fn concurrency_keys(&self) -> &[String] {
        ExecutionUnit::concurrency_keys(self)
    }
}

/// The branch id of lane `lane_index` (0-based): `queue_worker_01`, ...
pub fn branch_id(lane_index: usize) -> String {
    format!("queue_worker_{:02}", lane_index + 1)
}

/// What one lane did during an epoch (the reference's lane object without
/// its `results`, which went to the sink).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneSummary {
    /// `queue_worker_NN`.
    pub branch_id: String,
    /// 0-based lane index.
    pub launch_index: usize,
    /// Minutes from the lane's start to its end, rounded to 3 places.
    pub wall_minutes: f64,
    /// Units this lane completed.
    #[serde(default)]
    pub unit_count: usize,
    /// Records this lane handed to the sink.
    #[serde(default)]
    pub record_count: usize,
    /// `item_id` of each record, in production order. Omitted when empty
    /// and from checkpoints (they are in `epochs.jsonl`).
    #[serde(default, skip_serializing_if = "JsonList::is_empty")]
    pub item_ids: JsonList,
    /// `family` of each record, in production order. Omitted when empty
    /// and from checkpoints.
    #[serde(default, skip_serializing_if = "JsonList::is_empty")]
    pub families: JsonList,
}

impl LaneSummary {
    /// The summary without the per-record lists (nothing large is copied).
    pub fn compact(&self) -> LaneSummary {
        LaneSummary {
            branch_id: self.branch_id.clone(),
            launch_index: self.launch_index,
            wall_minutes: self.wall_minutes,
            unit_count: self.unit_count,
            record_count: self.record_count,
            item_ids: JsonList::new(),
            families: JsonList::new(),
        }
    }
}

/// Where and how long a completed unit ran; passed to the sink.
#[derive(Clone, Copy, Debug)]
pub struct UnitDone<'a> {
    /// 0-based lane index.
    pub lane_index: usize,
    /// The lane's branch id.
    pub branch_id: &'a str,
    /// Minutes the executor spent on the unit.
    pub unit_minutes: f64,
}

/// Parameters of one epoch's queue.
#[derive(Clone, Copy, Debug)]
pub struct QueueConfig<'a> {
    /// Arm name, passed in every call context.
    pub arm: &'a str,
    /// 1-based epoch number.
    pub epoch: u32,
    /// Maximum lanes; at most one per unit and at least one.
    pub worker_count: usize,
    /// Lane `i` starts `min(30 s, i * stagger)` late (reference
    /// `stagger_seconds`).
    pub stagger: Duration,
}

/// A periodic call made while lanes run, from the thread that called
/// [`run_queue_epoch`] (which is otherwise idle). The arm uses it to flush
/// buffered output with bounded latency.
pub struct Ticker<'a, E> {
    /// Interval between calls.
    pub every: Duration,
    /// The call; an `Err` stops the epoch like a unit error.
    pub tick: &'a (dyn Fn() -> Result<(), E> + Sync),
}

/// Drains `units` through `worker_count` lanes (reference
/// `run_queue_epoch`).
///
/// Each lane runs in its own scoped thread, creates its adapter there with
/// `factory(lane_index)`, then repeatedly pulls the first unit whose
/// concurrency keys are all free, runs `execute(&mut adapter, unit, ctx)`
/// (`ctx` has the lane's branch id and no group id), frees the keys and
/// hands the records to `sink` at once. A lane stops when nothing is left
/// to pull.
///
/// Errors: the first error (from the factory, the executor or the sink; a
/// panic in any of them becomes a [`ErrorType::Trap`] fatal error) stops the
/// epoch: lanes finish the unit they are running and pull nothing more, and
/// that first error is returned. Records already given to the sink stay
/// given.
///
/// With a `ticker`, the calling thread runs `ticker.tick` every
/// `ticker.every` until the last lane ends.
///
/// Returns the lanes' summaries in lane order (empty when `units` is).
#[allow(clippy::too_many_arguments)]
pub fn run_queue_epoch<U, A, F, X, K, E, R>(
    units: Vec<U>,
    config: &QueueConfig<'_>,
    clock: &dyn Clock,
    factory: &F,
    execute: &X,
    sink: &K,
    ticker: Option<Ticker<'_, E>>,
) -> Result<Vec<LaneSummary>, E>
where
    U: QueueUnit,
    F: Fn(usize) -> Result<A, AdapterError> + Sync,
    X: Fn(&mut A, U, &CallContext) -> Result<Vec<R>, E> + Sync,
    K: Fn(&UnitDone<'_>, Vec<R>) -> Result<(), E> + Sync,
    E: From<FatalError> + Send,
    R: RecordFields,
{
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let lane_count = config.worker_count.max(1).min(units.len());
    let shared = Shared {
        state: Mutex::new(State {
            scheduler: Scheduler::new(&units),
            slots: units.into_iter().map(Some).collect(),
            stopped: false,
            error: None,
            waiting: 0,
            lanes_running: lane_count,
        }),
        wake: Condvar::new(),
        lanes_done: Condvar::new(),
    };
    let lanes: Vec<LaneSummary> = thread::scope(|scope| {
        let handles: Vec<_> = (0..lane_count)
            .map(|lane_index| {
                let shared = &shared;
                scope.spawn(move || {
                    let _finished = LaneFinished(shared);
                    run_lane(lane_index, shared, config, clock, factory, execute, sink)
                })
            })
            .collect();
        if let Some(ticker) = &ticker {
            shared.tick_until_lanes_end(ticker);
        }
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(summary) => summary,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let state = shared
        .state
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match state.error {
        Some(error) => Err(error),
        None => Ok(lanes),
    }
}

fn panic_error(what: &str, payload: Box<dyn std::any::Any + Send>) -> FatalError {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_owned());
    FatalError::new(AdapterError::new(
        ErrorType::Trap,
        format!("{what} panicked: {detail}"),
    ))
}

fn run_lane<U, A, F, X, K, E, R>(
    lane_index: usize,
    shared: &Shared<U, E>,
    config: &QueueConfig<'_>,
    clock: &dyn Clock,
    factory: &F,
    execute: &X,
    sink: &K,
) -> LaneSummary
where
    U: QueueUnit,
    F: Fn(usize) -> Result<A, AdapterError> + Sync,
    X: Fn(&mut A, U, &CallContext) -> Result<Vec<R>, E> + Sync,
    K: Fn(&UnitDone<'_>, Vec<R>) -> Result<(), E> + Sync,
    E: From<FatalError> + Send,
    R: RecordFields,
{
    let started = clock.now();
    let branch = branch_id(lane_index);
    let mut summary = LaneSummary {
        branch_id: branch.clone(),
        launch_index: lane_index,
        wall_minutes: 0.0,
        unit_count: 0,
        record_count: 0,
        item_ids: JsonList::new(),
        families: JsonList::new(),
    };
    if lane_index > 0 && !config.stagger.is_zero() {
        let delay = config
            .stagger
            .saturating_mul(u32::try_from(lane_index).unwrap_or(u32::MAX))
            .min(Duration::from_secs(30));
        thread::sleep(delay);
    }
    let created = catch_unwind(AssertUnwindSafe(|| factory(lane_index)));
    let mut adapter = match created {
        Ok(Ok(adapter)) => Some(adapter),
        Ok(Err(error)) => {
            shared.fail(E::from(FatalError::new(error)));
            None
        }
        Err(panic) => {
            shared.fail(E::from(panic_error("adapter factory", panic)));
            None
        }
    };
    if let Some(adapter) = adapter.as_mut() {
        let ctx = CallContext {
            arm: config.arm.to_owned(),
            epoch: config.epoch,
            branch_id: branch.clone(),
            execution_group_id: None,
        };
        let mut next = shared.next_unit(None);
        while let Some((index, unit)) = next {
            let unit_started = clock.now();
            let outcome = catch_unwind(AssertUnwindSafe(|| execute(adapter, unit, &ctx)));
            let unit_minutes = clock.minutes_since(unit_started);
            let records = match outcome {
                Ok(Ok(records)) => records,
                Ok(Err(error)) => {
                    shared.release_and_fail(index, error);
                    break;
                }
                Err(panic) => {
                    shared.release_and_fail(index, E::from(panic_error("unit execution", panic)));
                    break;
                }
            };
            summary.unit_count += 1;
            summary.record_count += records.len();
            for record in &records {
                summary.item_ids.push(record.field("item_id"));
                summary.families.push(record.field("family"));
            }
            let done = UnitDone {
                lane_index,
                branch_id: &branch,
                unit_minutes,
            };
            match catch_unwind(AssertUnwindSafe(|| sink(&done, records))) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    shared.release_and_fail(index, error);
                    break;
                }
                Err(panic) => {
                    shared.release_and_fail(index, E::from(panic_error("record sink", panic)));
                    break;
                }
            }
            // Frees this unit's keys and pulls the next in one critical
            // section (the keys stay held while the sink runs).
            next = shared.next_unit(Some(index));
        }
    }
    drop(adapter);
    summary.wall_minutes = round_to(clock.minutes_since(started), 3);
    summary
}

/// Counts a lane as finished when its thread ends, even by a panic (which
/// also stops the epoch; the panic resumes when the lane is joined).
struct LaneFinished<'a, U, E>(&'a Shared<U, E>);

impl<U, E> Drop for LaneFinished<'_, U, E> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.lock().stopped = true;
            self.0.wake.notify_all();
        }
        self.0.lane_finished();
    }
}

struct Shared<U, E> {
    state: Mutex<State<U, E>>,
    /// Lanes waiting for runnable work.
    wake: Condvar,
    /// The ticking thread waiting for the lanes to end.
    lanes_done: Condvar,
}

struct State<U, E> {
    scheduler: Scheduler,
    slots: Vec<Option<U>>,
    stopped: bool,
    error: Option<E>,
    /// Lanes blocked in [`Shared::next_unit`]; wake-ups are skipped (no
    /// futex syscall) while nobody waits.
    waiting: usize,
    /// Lanes not yet finished.
    lanes_running: usize,
}

impl<U, E> Shared<U, E> {
    fn lock(&self) -> MutexGuard<'_, State<U, E>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Frees the keys of the unit `finished` (if any), then returns the next
    /// runnable unit; waits while everything pending is blocked by running
    /// units; `None` when stopped or nothing is pending.
    fn next_unit(&self, finished: Option<usize>) -> Option<(usize, U)> {
        let mut state = self.lock();
        if let Some(index) = finished {
            state.scheduler.release(index);
            if state.waiting > 0 {
                self.wake.notify_all();
            }
        }
        loop {
            if state.stopped {
                return None;
            }
            if let Some(index) = state.scheduler.pull() {
                let unit = state.slots[index].take().expect("a unit is pulled once");
                return Some((index, unit));
            }
            if state.scheduler.pending() == 0 {
                return None;
            }
            state.waiting += 1;
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state.waiting -= 1;
        }
    }

    fn release_and_fail(&self, index: usize, error: E) {
        self.lock().scheduler.release(index);
        self.fail(error);
    }

    fn lane_finished(&self) {
        let mut state = self.lock();
        state.lanes_running -= 1;
        drop(state);
        self.lanes_done.notify_all();
    }

    fn fail(&self, error: E) {
        let mut state = self.lock();
        if state.error.is_none() {
            state.error = Some(error);
        }
        state.stopped = true;
        drop(state);
        self.wake.notify_all();
    }
}

impl<U, E: From<FatalError>> Shared<U, E> {
    fn tick_until_lanes_end(&self, ticker: &Ticker<'_, E>) {
        let mut state = self.lock();
        while state.lanes_running > 0 {
            state = self
                .lanes_done
                .wait_timeout(state, ticker.every)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
            if state.lanes_running == 0 {
                break;
            }
            drop(state);
            match catch_unwind(AssertUnwindSafe(|| (ticker.tick)())) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => self.fail(error),
                Err(panic) => self.fail(E::from(panic_error("output ticker", panic))),
            }
            state = self.lock();
        }
    }
}

const NO_KEY: u32 = u32::MAX;

/// Pull order for a keyed queue: every [`Scheduler::pull`] returns the
/// lowest-index pending unit whose keys are all free, like the reference's
/// linear scan, without rescanning blocked units.
///
/// Keys are interned to integers. A unit found blocked is parked on one
/// busy key. When a key is freed, its lowest parked unit is woken as a
/// candidate; a woken candidate that turns out blocked on another key is
/// parked there and passes the wake on to the next unit parked on the freed
/// key. Invariant: a non-empty park list belongs to a busy key or has a
/// woken candidate pending, so nothing runnable is ever left parked.
/// Candidates always have lower indices than the unscanned tail.
pub(crate) struct Scheduler {
    unit_keys: Vec<Box<[u32]>>,
    next: usize,
    candidates: BinaryHeap<Reverse<(usize, u32)>>,
    parked: Vec<BinaryHeap<Reverse<usize>>>,
    busy: Vec<bool>,
    pending: usize,
}

impl Scheduler {
    pub(crate) fn new<U: QueueUnit>(units: &[U]) -> Self {
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(units.len().min(1 << 16));
        let unit_keys: Vec<Box<[u32]>> = units
            .iter()
            .map(|unit| {
                let mut keys: Vec<u32> = Vec::with_capacity(unit.concurrency_keys().len());
                for key in unit.concurrency_keys() {
                    let next_id = u32::try_from(ids.len()).expect("fewer than 2^32 keys");
                    let id = *ids.entry(key.as_str()).or_insert(next_id);
                    if !keys.contains(&id) {
                        keys.push(id);
                    }
                }
                keys.into_boxed_slice()
            })
            .collect();
        let key_count = ids.len();
        Self {
            pending: unit_keys.len(),
            unit_keys,
            next: 0,
            candidates: BinaryHeap::new(),
            parked: (0..key_count).map(|_| BinaryHeap::new()).collect(),
            busy: vec![false; key_count],
        }
    }

    /// Units not yet pulled.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// The lowest-index pending unit whose keys are all free (its keys
    /// become busy), or `None`.
    pub(crate) fn pull(&mut self) -> Option<usize> {
        loop {
            let (index, woken_for) = if let Some(Reverse(candidate)) = self.candidates.pop() {
                candidate
            } else if self.next < self.unit_keys.len() {
                self.next += 1;
                (self.next - 1, NO_KEY)
            } else {
                return None;
            };
            let blocker = self.unit_keys[index]
                .iter()
                .copied()
                .find(|&key| self.busy[key as usize]);
            match blocker {
                None => {
                    for &key in self.unit_keys[index].iter() {
                        self.busy[key as usize] = true;
                    }
                    self.pending -= 1;
                    return Some(index);
                }
                Some(blocker) => {
                    self.parked[blocker as usize].push(Reverse(index));
                    if woken_for != NO_KEY && !self.busy[woken_for as usize] {
                        self.wake(woken_for);
                    }
                }
            }
        }
    }

    /// Frees the keys of a pulled unit.
    pub(crate) fn release(&mut self, index: usize) {
        for position in 0..self.unit_keys[index].len() {
            let key = self.unit_keys[index][position];
            self.busy[key as usize] = false;
            self.wake(key);
        }
    }

    fn wake(&mut self, key: u32) {
        if let Some(Reverse(index)) = self.parked[key as usize].pop() {
            self.candidates.push(Reverse((index, key)));
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
