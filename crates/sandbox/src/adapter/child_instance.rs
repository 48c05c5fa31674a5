//! The instance a forked replay child runs in, shared by the two ways of
//! forking ([`WasmChild`](super::WasmChild): a fresh instance of the
//! component that adopts the exported state; `SnapshotChild`: an instance
//! of the point's snapshot): its own [`WasmAdapter`], the child's id, the
//! group's call context and the child's trace branch. It owns what both do
//! alike — calling into the instance (which is never replaced after a
//! failure), the `child-risk` screens, parsing the observation record —
//! while each child type makes its own WIT calls.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::bind::Export;
use super::{CallObserver, Live, WasmAdapter, declared, parse_record};
use crate::LoadedAdapter;
use crate::bindings::exports::sandloop::adapter::{child_risk, counterfactual};
use crate::bindings::sandloop::adapter::types as wit_types;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::{
    ChildTask, CounterfactualRequest, Disposition, ForkAt, ForkRequest, RiskAssessment,
    ValidationOutcome, spawn_ahead,
};
use sandloop_core::trace::TraceLog;

/// Unique identity of every child instance of the process (its worker
/// identity and child key).
static NEXT_CHILD: AtomicU64 = AtomicU64::new(1);

/// One child's instance, its id, context and trace branch.
pub(super) struct ChildInstance {
    /// The child's own adapter instance (created by its first call).
    pub(super) adapter: WasmAdapter,
    /// The fork request's child id.
    pub(super) child_id: String,
    /// Unique in the process: the lease's worker identity and child key.
    pub(super) identity: u64,
    ctx: CallContext,
    trace: Option<TraceLog>,
}

impl ChildInstance {
    /// An instance of `loaded` for the child `request` asks for, on
    /// `parent`'s lane and at the group's `ctx`. Its trace branch is
    /// `request.target_branch_id`, forked at the point's `fork_at`.
    pub(super) fn new(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        request: &ForkRequest,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        let origin = Origin {
            lane_branch_id: &parent.branch_id,
            observer: &parent.observer,
            loaded,
            ctx,
            fork_at,
        };
        origin.instance(&request.child_id, &request.target_branch_id)
    }

    /// Call `name` in the child's instance (threading the child's trace
    /// through it when `traced`), or say the instance is gone: a child's
    /// instance is not replaced after a failure.
    pub(super) fn call<R>(
        &mut self,
        name: &'static str,
        traced: bool,
        body: impl FnOnce(&mut Live) -> wasmtime::Result<Result<R, wit_types::AdapterError>>,
    ) -> Result<R, AdapterError> {
        if self.adapter.live.is_none() {
            return Err(AdapterError::new(
                ErrorType::InstanceLost,
                format!(
                    "the child's instance was dropped after an earlier failure; cannot call {name}"
                ),
            ));
        }
        let taken = if traced { self.trace.take() } else { None };
        let (result, returned) = self.adapter.call(name, Some(&self.child_id), taken, body);
        if traced {
            self.trace = returned;
        }
        result?.map_err(declared)
    }

    /// Run the child's task through `body`, given the task's JSON and the
    /// WIT context, with the child's trace; parse what it returns as the
    /// child's observation record.
    pub(super) fn run(
        &mut self,
        name: &'static str,
        task: &Item,
        body: impl FnOnce(
            &mut Live,
            &String,
            &wit_types::Context,
        ) -> wasmtime::Result<Result<String, wit_types::AdapterError>>,
    ) -> Result<Record, AdapterError> {
        let json = task.json_text();
        let wit_ctx = self.adapter.context(&self.ctx);
        let text = self.call(name, true, |live| body(live, &json, &wit_ctx))?;
        parse_record(
            &text,
            self.adapter.max_output(),
            "the child's observation record",
        )
    }

    /// The adapter's `child-risk` verdict, in this instance, on the child's
    /// intent (`outcome` none) or on the outcome it produced.
    pub(super) fn assess(
        &mut self,
        intent: &Map<String, Value>,
        outcome: Option<&Record>,
    ) -> Result<RiskAssessment, AdapterError> {
        let intent = object_json(intent);
        let outcome = outcome.map(object_json);
        let name = if outcome.is_some() {
            "assess-replay-child-outcome"
        } else {
            "assess-replay-child-intent"
        };
        let child_id = self.child_id.clone();
        let assessment = self.call(name, false, |live| {
            let risk = live
                .child_risk
                .as_ref()
                .expect("asked only of components exporting child-risk");
            match &outcome {
                None => risk.call_assess_replay_child_intent(&mut live.store, &child_id, &intent),
                Some(outcome) => risk.call_assess_replay_child_outcome(
                    &mut live.store,
                    &child_id,
                    &intent,
                    outcome,
                ),
            }
        })?;
        Ok(assessment_from_wit(assessment))
    }

    /// Run the child's task as counterfactual candidate `request`
    /// (`counterfactual.run-counterfactual`, in this instance, naming its
    /// child), with the child's trace. The outcomes' text counts against
    /// the adapter's output limit, as a record's does.
    pub(super) fn run_counterfactual(
        &mut self,
        task: &Item,
        request: &CounterfactualRequest,
    ) -> Result<Vec<ValidationOutcome>, AdapterError> {
        if self.adapter.loaded.indices.counterfactual.is_none() {
            return Err(WasmAdapter::missing("counterfactual.run-counterfactual"));
        }
        let json = task.json_text();
        let wit_ctx = self.adapter.context(&self.ctx);
        let wit_request = counterfactual::CounterfactualRequest {
            hypothesis_id: request.hypothesis_id.clone(),
            candidate_id: request.candidate_id.clone(),
            replay_point_id: request.replay_point_id.clone(),
            first_affected_event_id: request.first_affected_event_id.clone(),
            first_affected_sequence: request.first_affected_sequence,
            public_change_set: request.public_change_set.clone(),
        };
        let child_id = self.child_id.clone();
        let reported = self.call("run-counterfactual", true, |live| {
            let guest = live
                .counterfactual
                .as_ref()
                .expect("checked above: the component exports counterfactual");
            guest.call_run_counterfactual(&mut live.store, &child_id, &json, &wit_request, &wit_ctx)
        })?;
        let size: usize = reported
            .iter()
            .map(|o| o.validation_id.len() + o.public_summary.as_ref().map_or(0, String::len))
            .sum();
        let limit = self.adapter.max_output();
        if size > limit {
            return Err(AdapterError::new(
                ErrorType::OutputTooLarge,
                format!(
                    "the candidate's validation outcomes hold {size} bytes of text; the limit is {limit}"
                ),
            ));
        }
        Ok(reported
            .into_iter()
            .map(|outcome| ValidationOutcome {
                validation_id: outcome.validation_id,
                passed: outcome.passed,
                public_summary: outcome.public_summary,
            })
            .collect())
    }

    /// The sequence the child's trace branch would give its next event.
    pub(super) fn trace_end(&self) -> Option<u64> {
        self.trace.as_ref().map(TraceLog::next_sequence)
    }
}

/// What every child instance of one group is made from, besides the
/// child's own ids: the lane's branch id (a child's is
/// `{lane}:child:{child_id}`) and call observer, the component, the
/// group's call context and the trace position the children's branches
/// fork at.
struct Origin<'a> {
    lane_branch_id: &'a str,
    observer: &'a Option<Arc<dyn CallObserver>>,
    loaded: &'a Arc<LoadedAdapter>,
    ctx: &'a CallContext,
    fork_at: &'a ForkAt,
}

impl Origin<'_> {
    /// A new (not yet instantiated) instance for the child `child_id`
    /// whose trace branch is `target_branch_id`.
    fn instance(&self, child_id: &str, target_branch_id: &str) -> ChildInstance {
        let mut adapter = WasmAdapter::new(
            Arc::clone(self.loaded),
            format!("{}:child:{child_id}", self.lane_branch_id),
            self.observer.clone(),
        );
        adapter.epoch = self.ctx.epoch;
        ChildInstance {
            adapter,
            child_id: child_id.to_owned(),
            identity: NEXT_CHILD.fetch_add(1, Ordering::Relaxed),
            ctx: self.ctx.clone(),
            trace: TraceLog::fork(
                &self.fork_at.trace_id,
                target_branch_id,
                Some(&self.fork_at.created_event_id),
                self.fork_at.next_sequence,
            )
            .ok(),
        }
    }
}

/// Child instances started ahead of their forks: when a group's children
/// may run on more than one worker, each child's instance is made and
/// instantiated by whichever thread claims it first — one of `workers - 1`
/// helper threads ([`spawn_ahead`]: the lane's crew, which the group's
/// children then run on), going in the tasks' order, or the calling thread
/// — while the forks, one after another on the calling thread as the group
/// runtime requires, take them as they become ready. A fork whose instance
/// no job has begun makes and instantiates it itself; while a job is
/// instantiating it, the calling thread starts the last waiting one (see
/// [`Ahead::take`]). So making and instantiating the instances overlaps
/// the forks instead of coming before them all, and the calling thread
/// does not go to sleep and wait for the scheduler to wake it, unless a
/// start function runs long.
///
/// Each is still a fresh instance (its own store from the pool, the
/// adapter's limits) that nothing ran in but its start function. An
/// instantiation that failed leaves its instance empty, and the fork's
/// first call instantiates again and reports the failure as it would have.
/// Instances no fork took (the group stopped at a failed fork) are dropped
/// with the last reference, by the forker or by a job.
#[derive(Default)]
pub(super) struct Prestarted {
    ahead: Option<Arc<Ahead>>,
    /// The next task's index.
    next: usize,
}

/// The instances of one group's children and who has them.
struct Ahead {
    /// Each slot's child id.
    ids: Vec<String>,
    /// Each slot's trace branch.
    branches: Vec<String>,
    /// What each slot's [`Origin`] borrows, owned here for the helper
    /// threads.
    lane_branch_id: String,
    observer: Option<Arc<dyn CallObserver>>,
    loaded: Arc<LoadedAdapter>,
    ctx: CallContext,
    fork_at: ForkAt,
    /// One slot per child, in the tasks' order.
    slots: Mutex<Vec<Slot>>,
    /// The next slot a job claims.
    claim: AtomicUsize,
    /// Set when the forker is done: jobs stop claiming.
    done: AtomicBool,
    /// The interfaces each fork calls, bound as its instance starts.
    exports: &'static [Export],
}

/// Where one child's instance is.
enum Slot {
    /// Not yet made: whoever comes first makes and instantiates it (so the
    /// instances are made on the threads that start them, in parallel,
    /// not all on the forking thread before any starts).
    Waiting,
    /// A job is instantiating it.
    Starting,
    /// Instantiated (or failed to be), for its fork to take (boxed: the
    /// slots stay small for the scans under their lock).
    Ready(Box<ChildInstance>),
    /// Taken by its fork.
    Taken,
}

impl Ahead {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make slot `index`'s instance and instantiate it.
    fn make(&self, index: usize) -> ChildInstance {
        let origin = Origin {
            lane_branch_id: &self.lane_branch_id,
            observer: &self.observer,
            loaded: &self.loaded,
            ctx: &self.ctx,
            fork_at: &self.fork_at,
        };
        let mut child = origin.instance(&self.ids[index], &self.branches[index]);
        child.adapter.start_binding(self.exports);
        child
    }

    /// A job: instantiate the waiting slots in order until none is left
    /// or the forker is done.
    fn work(&self) {
        loop {
            let index = self.claim.fetch_add(1, Ordering::Relaxed);
            if index >= self.ids.len() || self.done.load(Ordering::Relaxed) {
                return;
            }
            // Not waiting: its fork came first.
            let claimed = claim(&mut self.slots(), index);
            if claimed {
                self.start(index);
            }
        }
    }

    /// Make and instantiate slot `index`'s instance (claimed with
    /// [`claim`]) and make it ready. A failure is reported by the fork's
    /// own instantiation; a panic loses the instance, and its fork makes a
    /// new one.
    fn start(&self, index: usize) {
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.make(index)));
        self.slots()[index] = match started {
            Ok(child) => Slot::Ready(Box::new(child)),
            Err(_) => Slot::Taken,
        };
    }

    /// Slot `index`'s instance for its fork: ready, or instantiated here
    /// when no job has begun it. While a job is instantiating it, this
    /// thread instantiates the last waiting slot meanwhile (the jobs go
    /// from the front, the forks need the front first), and only when none
    /// is left does it spin until the job is done: a thread woken from
    /// sleep waits for the scheduler longer than an instantiation takes.
    fn take(&self, index: usize) -> Option<ChildInstance> {
        let mut spins = 0u32;
        loop {
            let mut slots = self.slots();
            match std::mem::replace(&mut slots[index], Slot::Taken) {
                Slot::Ready(child) => return Some(*child),
                Slot::Waiting => {
                    drop(slots);
                    return Some(self.make(index));
                }
                Slot::Taken => return None,
                Slot::Starting => {
                    slots[index] = Slot::Starting;
                    let last = slots
                        .iter()
                        .rposition(|slot| matches!(slot, Slot::Waiting))
                        .filter(|&last| last > index);
                    let Some(last) = last else {
                        drop(slots);
                        pause(&mut spins);
                        continue;
                    };
                    slots[last] = Slot::Starting;
                    drop(slots);
                    self.start(last);
                }
            }
        }
    }
}

/// Whether slot `index` was waiting; if so it is now marked as starting,
/// for the caller to [`Ahead::start`] it (otherwise it is unchanged).
fn claim(slots: &mut [Slot], index: usize) -> bool {
    let waiting = matches!(slots[index], Slot::Waiting);
    if waiting {
        slots[index] = Slot::Starting;
    }
    waiting
}

/// Waits a little for a job to finish an instantiation: spins at first
/// (an instantiation takes microseconds), then yields the core, then
/// sleeps, so a start function that runs to its deadline does not keep
/// this thread busy.
fn pause(spins: &mut u32) {
    *spins += 1;
    match *spins {
        0..64 => std::hint::spin_loop(),
        64..512 => std::thread::yield_now(),
        _ => std::thread::sleep(std::time::Duration::from_micros(100)),
    }
}

impl Drop for Prestarted {
    fn drop(&mut self) {
        if let Some(ahead) = &self.ahead {
            ahead.done.store(true, Ordering::Relaxed);
        }
    }
}

impl Prestarted {
    /// Instances of `loaded` for `tasks` (in order), instantiated ahead by
    /// `workers - 1` helper threads, each with the interfaces its fork calls
    /// (`exports`) bound; none when `workers` is 1 or less (the forks then
    /// instantiate as they go: nothing would run beside them).
    pub(super) fn start(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        tasks: &[ChildTask],
        fork_at: &ForkAt,
        workers: usize,
        exports: &'static [Export],
    ) -> Prestarted {
        if workers <= 1 || tasks.len() <= 1 {
            return Prestarted::default();
        }
        let ahead = Arc::new(Ahead {
            ids: tasks.iter().map(|task| task.child_id.clone()).collect(),
            branches: tasks
                .iter()
                .map(|task| task.target_branch_id.clone())
                .collect(),
            lane_branch_id: parent.branch_id.clone(),
            observer: parent.observer.clone(),
            loaded: Arc::clone(loaded),
            ctx: ctx.clone(),
            fork_at: fork_at.clone(),
            slots: Mutex::new(tasks.iter().map(|_| Slot::Waiting).collect()),
            claim: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            exports,
        });
        let starter = Arc::clone(&ahead);
        spawn_ahead(workers.min(tasks.len()) - 1, move || starter.work());
        Prestarted {
            ahead: Some(ahead),
            next: 0,
        }
    }

    /// The instance started for `request`'s child, or a new one (not yet
    /// instantiated) when none was: the forks come in the tasks' order,
    /// so the next slot is the one when its child id matches.
    pub(super) fn take(
        &mut self,
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        request: &ForkRequest,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        if let Some(ahead) = &self.ahead
            && ahead.ids.get(self.next) == Some(&request.child_id)
        {
            let index = self.next;
            self.next += 1;
            if let Some(child) = ahead.take(index) {
                return child;
            }
        }
        ChildInstance::new(parent, loaded, ctx, request, fork_at)
    }
}

fn assessment_from_wit(assessment: child_risk::RiskAssessment) -> RiskAssessment {
    RiskAssessment {
        disposition: match assessment.disposition {
            child_risk::Disposition::Allow => Disposition::Allow,
            child_risk::Disposition::Deny => Disposition::Deny,
        },
        policy_id: assessment.policy_id,
        sanitized_reason: assessment.sanitized_reason,
    }
}

fn object_json(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).expect("a JSON map always serialises")
}
