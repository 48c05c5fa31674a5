//! The instance a forked replay child runs in, shared by the two ways of
//! forking ([`WasmChild`](super::children::WasmChild): a fresh instance of the
//! component that adopts the exported state; `SnapshotChild`: an instance
//! of the point's snapshot): its own [`WasmAdapter`], the child's id, the
//! group's call context and the child's trace branch. It owns what both do
//! alike — calling into the instance (which is never replaced after a
//! failure), the `child-risk` screens, counterfactual candidates, parsing
//! the observation record — and [`ForkedChild`] is the one `ChildSession`
//! of both, generic over the [`ChildKind`] that makes the three WIT calls
//! that differ (validate, run, release).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::{CallObserver, Export, Live, WasmAdapter, declared, parse_object};
use crate::LoadedAdapter;
use crate::bindings::exports::sandloop::adapter::{child_risk, counterfactual};
use crate::bindings::sandloop::adapter::types as wit_types;
use crate::host_state::HostState;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::{
    ChildSession, CounterfactualRequest, Disposition, EquivalenceReport, ForkAt, ForkRequest,
    RestoreReceipt, RiskAssessment, ValidationOutcome,
};
use sandloop_core::trace::TraceLog;
use wasmtime::Store;

/// Unique identity of every child instance of the process (its worker
/// identity and child key).
static NEXT_CHILD: AtomicU64 = AtomicU64::new(1);

/// What sets a kind of forked child apart — the resource its calls name
/// and the three calls that differ (the state fork's `replay-children`
/// child, the snapshot fork's resumed `replay` binding); everything else a
/// child does is [`ChildInstance`]'s, alike for both.
pub trait ChildKind: Send {
    /// Compare the child's restored state with the captured point.
    fn validate(
        &mut self,
        instance: &mut ChildInstance,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError>;
    /// Run the child's task; returns its observation record.
    fn run(&mut self, instance: &mut ChildInstance, task: &Item) -> Result<Record, AdapterError>;
    /// Release the child, then drop its instance.
    fn release(&mut self, instance: &mut ChildInstance) -> Result<(), AdapterError>;
}

/// One forked child in its own instance:
/// [`WasmChild`](super::children::WasmChild) or
/// [`SnapshotChild`](super::snapshot_children::SnapshotChild).
pub struct ForkedChild<K> {
    pub(super) instance: ChildInstance,
    pub(super) kind: K,
}

impl<K: ChildKind> ChildSession for ForkedChild<K> {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        self.kind.validate(&mut self.instance, receipt)
    }

    fn assess_intent(
        &mut self,
        intent: &Map<String, Value>,
    ) -> Result<RiskAssessment, AdapterError> {
        self.instance.assess(intent, None)
    }

    fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
        self.kind.run(&mut self.instance, task)
    }

    fn run_counterfactual(
        &mut self,
        task: &Item,
        request: &CounterfactualRequest,
    ) -> Result<Vec<ValidationOutcome>, AdapterError> {
        self.instance.run_counterfactual(task, request)
    }

    fn assess_outcome(
        &mut self,
        intent: &Map<String, Value>,
        outcome: &Record,
    ) -> Result<RiskAssessment, AdapterError> {
        self.instance.assess(intent, Some(outcome))
    }

    fn trace_end(&self) -> Option<u64> {
        self.instance.trace_end()
    }

    fn release(&mut self) -> Result<(), AdapterError> {
        self.kind.release(&mut self.instance)
    }
}

/// One child's instance, its id, context and trace branch.
pub struct ChildInstance {
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
    /// `parent`'s lane and at the group's `ctx` (see
    /// [`ChildOrigin::instance`]).
    pub(super) fn new(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        request: &ForkRequest,
        fork_at: &ForkAt,
    ) -> ChildInstance {
        ChildOrigin::new(parent, loaded, ctx, fork_at.clone()).instance(request)
    }

    /// Call `name` of the interface `export` picks in the child's instance
    /// (threading the child's trace through it when `traced`), or say the
    /// instance is gone: a child's instance is not replaced after a failure.
    pub(super) fn call<G, R>(
        &mut self,
        name: &'static str,
        traced: bool,
        export: Export<G>,
        body: impl FnOnce(
            &G,
            &mut Store<HostState>,
        ) -> wasmtime::Result<Result<R, wit_types::AdapterError>>,
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
        let (result, returned) =
            self.adapter
                .call_export(name, Some(&self.child_id), taken, export, body);
        if traced {
            self.trace = returned;
        }
        result?.map_err(declared)
    }

    /// Run the child's task through `body`, given the interface `export`
    /// picks, the store, the task's JSON and the WIT context, with the
    /// child's trace; parse what it returns as the child's observation
    /// record.
    pub(super) fn run<G>(
        &mut self,
        name: &'static str,
        task: &Item,
        export: Export<G>,
        body: impl FnOnce(
            &G,
            &mut Store<HostState>,
            &String,
            &wit_types::Context,
        ) -> wasmtime::Result<Result<String, wit_types::AdapterError>>,
    ) -> Result<Record, AdapterError> {
        let json = task.json_text();
        let wit_ctx = self.adapter.context(&self.ctx);
        let text = self.call(name, true, export, |guest, store| {
            body(guest, store, &json, &wit_ctx)
        })?;
        parse_object(
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
        let assessment = self.call(
            name,
            false,
            Live::child_risk,
            |risk, store| match &outcome {
                None => risk.call_assess_replay_child_intent(store, &child_id, &intent),
                Some(outcome) => {
                    risk.call_assess_replay_child_outcome(store, &child_id, &intent, outcome)
                }
            },
        )?;
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
        let reported = self.call(
            "run-counterfactual",
            true,
            Live::counterfactual,
            |guest, store| {
                guest.call_run_counterfactual(store, &child_id, &json, &wit_request, &wit_ctx)
            },
        )?;
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
/// fork at. Owned and shareable, so the group's workers can each make the
/// instances of the children they fork.
pub(super) struct ChildOrigin {
    lane_branch_id: String,
    observer: Option<Arc<dyn CallObserver>>,
    loaded: Arc<LoadedAdapter>,
    ctx: CallContext,
    fork_at: ForkAt,
}

impl ChildOrigin {
    /// The origin of children of `loaded` forked on `parent`'s lane, at
    /// the group's `ctx`, whose trace branches fork at `fork_at`.
    pub(super) fn new(
        parent: &WasmAdapter,
        loaded: &Arc<LoadedAdapter>,
        ctx: &CallContext,
        fork_at: ForkAt,
    ) -> ChildOrigin {
        ChildOrigin {
            lane_branch_id: parent.branch_id.clone(),
            observer: parent.observer.clone(),
            loaded: Arc::clone(loaded),
            ctx: ctx.clone(),
            fork_at,
        }
    }

    /// The component the children are instances of.
    pub(super) fn loaded(&self) -> &Arc<LoadedAdapter> {
        &self.loaded
    }

    /// A new (not yet instantiated) instance for the child `request` asks
    /// for; its trace branch is `request.target_branch_id`, forked at the
    /// origin's `fork_at`. Its first call instantiates it, on the thread
    /// that makes the call; forked on a crew helper, it is an instance of
    /// that helper's twin of the component
    /// ([`for_this_thread`](LoadedAdapter::for_this_thread)).
    pub(super) fn instance(&self, request: &ForkRequest) -> ChildInstance {
        let mut adapter = WasmAdapter::new(
            self.loaded.for_this_thread(),
            format!("{}:child:{}", self.lane_branch_id, request.child_id),
            self.observer.clone(),
        );
        adapter.epoch = self.ctx.epoch;
        ChildInstance {
            adapter,
            child_id: request.child_id.clone(),
            identity: NEXT_CHILD.fetch_add(1, Ordering::Relaxed),
            ctx: self.ctx.clone(),
            trace: TraceLog::fork(
                &self.fork_at.trace_id,
                &request.target_branch_id,
                Some(&self.fork_at.created_event_id),
                self.fork_at.next_sequence,
            )
            .ok(),
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
