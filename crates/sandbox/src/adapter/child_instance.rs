//! The instance a forked replay child runs in, shared by the two ways of
//! forking ([`WasmChild`](super::WasmChild): a fresh instance of the
//! component that adopts the exported state; `SnapshotChild`: an instance
//! of the point's snapshot): its own [`WasmAdapter`], the child's id, the
//! group's call context and the child's trace branch. It owns what both do
//! alike — calling into the instance (which is never replaced after a
//! failure), the `child-risk` screens, parsing the observation record —
//! while each child type makes its own WIT calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::{Live, WasmAdapter, declared, parse_record, to_json};
use crate::LoadedAdapter;
use crate::bindings::exports::sandloop::adapter::child_risk;
use crate::bindings::sandloop::adapter::types as wit_types;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::{Disposition, ForkAt, ForkRequest, RiskAssessment};
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
        let mut adapter = WasmAdapter::new(
            Arc::clone(loaded),
            format!("{}:child:{}", parent.branch_id, request.child_id),
            parent.observer.clone(),
        );
        adapter.epoch = ctx.epoch;
        ChildInstance {
            adapter,
            child_id: request.child_id.clone(),
            identity: NEXT_CHILD.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            trace: TraceLog::fork(
                &fork_at.trace_id,
                &request.target_branch_id,
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
        let json = to_json(task);
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

    /// The sequence the child's trace branch would give its next event.
    pub(super) fn trace_end(&self) -> Option<u64> {
        self.trace.as_ref().map(TraceLog::next_sequence)
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
