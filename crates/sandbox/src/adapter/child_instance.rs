//! The instance a forked replay child runs in, shared by the two ways of
//! forking ([`WasmChild`](super::WasmChild): a fresh instance of the
//! component that adopts the exported state; `SnapshotChild`: an instance
//! of the point's snapshot): its own [`WasmAdapter`], the child's id, the
//! group's call context and the child's trace branch. It owns what both do
//! alike — calling into the instance (which is never replaced after a
//! failure), the `child-risk` screens, parsing the observation record —
//! while each child type makes its own WIT calls.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::{Live, WasmAdapter, declared, parse_record};
use crate::LoadedAdapter;
use crate::bindings::exports::sandloop::adapter::{child_risk, counterfactual};
use crate::bindings::sandloop::adapter::types as wit_types;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::{
    ChildTask, CounterfactualRequest, Disposition, ForkAt, ForkRequest, RiskAssessment,
    ValidationOutcome, run_parallel,
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
        Self::for_child(
            parent,
            loaded,
            ctx,
            &request.child_id,
            &request.target_branch_id,
            fork_at,
        )
    }

    /// [`ChildInstance::new`] for the child `child_id` on the trace branch
    /// `target_branch_id`.
    fn for_child(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        child_id: &str,
        target_branch_id: &str,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        let mut adapter = WasmAdapter::new(
            Arc::clone(loaded),
            format!("{}:child:{child_id}", parent.branch_id),
            parent.observer.clone(),
        );
        adapter.epoch = ctx.epoch;
        ChildInstance {
            adapter,
            child_id: child_id.to_owned(),
            identity: NEXT_CHILD.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            trace: TraceLog::fork(
                &fork_at.trace_id,
                target_branch_id,
                Some(&fork_at.created_event_id),
                fork_at.next_sequence,
            )
            .ok(),
        }
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

/// Child instances started ahead of their forks: when a group's children
/// may run on more than one worker, every child's instance is created and
/// instantiated first, on the workers
/// ([`run_parallel`]), so the forks — one after another on the
/// calling thread, as the group runtime requires — no longer pay for
/// instantiation. Each is still a fresh instance (its own store from the
/// pool, the adapter's limits) that nothing ran in but its start function.
/// An instantiation that failed leaves its instance empty, and the fork's
/// first call instantiates again and reports the failure as it would
/// have.
#[derive(Default)]
pub(super) struct Prestarted {
    ready: VecDeque<ChildInstance>,
}

impl Prestarted {
    /// Instances of `loaded` for `tasks` (in order), instantiated on up to
    /// `workers` threads; none when `workers` is 1 or less (the forks then
    /// instantiate as they go: nothing would run beside them).
    pub(super) fn start(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        tasks: &[ChildTask],
        fork_at: &ForkAt,
        workers: usize,
    ) -> Prestarted {
        if workers <= 1 || tasks.len() <= 1 {
            return Prestarted::default();
        }
        let mut ready: Vec<ChildInstance> = tasks
            .iter()
            .map(|task| Self::instance(parent, loaded, ctx, task, fork_at))
            .collect();
        run_parallel(&mut ready, workers, &|child: &mut ChildInstance| {
            // A failure is reported by the fork's own instantiation.
            let _ = child.adapter.instantiate();
        });
        Prestarted {
            ready: ready.into(),
        }
    }

    fn instance(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        task: &ChildTask,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        ChildInstance::for_child(
            parent,
            loaded,
            ctx,
            &task.child_id,
            &task.target_branch_id,
            fork_at,
        )
    }

    /// The instance started for `request`'s child, or a new one (not yet
    /// instantiated) when none was: the forks come in the tasks' order,
    /// so the next ready instance is the one when its child id matches.
    pub(super) fn take(
        &mut self,
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        request: &ForkRequest,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        match self.ready.front() {
            Some(next) if next.child_id == request.child_id => {
                self.ready.pop_front().expect("checked above")
            }
            _ => ChildInstance::new(parent, loaded, ctx, request, fork_at),
        }
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
