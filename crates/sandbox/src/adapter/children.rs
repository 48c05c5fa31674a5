//! Isolated replay children of a [`WasmAdapter`]: every variant of a group
//! forked from the group's replay point into a fresh instance of the
//! component — its own store and linear memory — that adopts the exported
//! state, is validated against the point, screened by the adapter's
//! `child-risk` policy, runs its item, is released and dropped. A child
//! that traps, loops or exhausts its memory takes only its own instance
//! down; the parent's instance is never touched.

use std::sync::Arc;

use serde_json::{Map, Value};
use wasmtime::component::ResourceAny;

use super::child_instance::ChildInstance;
use super::replay::{
    GroupPoint, adapter_error_of, error_block, receipt_from_wit, receipt_to_wit, report_from_wit,
    to_wit_fidelity,
};
use super::snapshot_children::{SnapshotForker, SnapshotPoint};
use super::{GroupHandle, WasmAdapter, declared, item_id};
use crate::bindings::exports::sandloop::adapter::replay_children;
use crate::bindings::sandloop::adapter::types as wit_types;
use sandloop_core::episode::adapter::{AdapterError, CallContext, Item, Record};
use sandloop_core::replay::RiskAssessmentRules;
use sandloop_core::replay::{
    ChildConcurrency, ChildForker, ChildLease, ChildOutcome, ChildSession, ChildTask,
    EquivalenceReport, ForkRequest, Lifecycle, RestoreReceipt, RiskAssessment, SerialChildGroup,
};

/// Most children forked at once per lane; a larger group runs as several
/// child groups of this size from the same point (the instance pool is
/// sized for it).
pub const MAX_CHILDREN_PER_FORK: usize = 32;

/// One forked child in its own instance.
pub struct WasmChild {
    instance: ChildInstance,
    child: ResourceAny,
    released: bool,
}

/// Where a group's children come from: the point's exported state
/// (`replay-children`), or its compiled snapshot.
enum ForkSource {
    State(Arc<Vec<u8>>),
    Snapshot(Arc<SnapshotPoint>),
}

impl ForkSource {
    /// The `fork` value of a child's `replay` block.
    fn name(&self) -> &'static str {
        match self {
            ForkSource::State(_) => "state",
            ForkSource::Snapshot(_) => "snapshot",
        }
    }
}

/// Forks children of one point from its exported state.
pub struct WasmChildForker<'a> {
    parent: &'a WasmAdapter,
    state: Arc<Vec<u8>>,
    ctx: CallContext,
    /// The trace position the point sits at: `(trace_id, created_event_id,
    /// next sequence after the capture event)`.
    fork_at: (String, String, u64),
}

fn wit_concurrency(concurrency: replay_children::ChildConcurrency) -> ChildConcurrency {
    match concurrency {
        replay_children::ChildConcurrency::SerialOnly => ChildConcurrency::SerialOnly,
        replay_children::ChildConcurrency::ThreadSafe => ChildConcurrency::ThreadSafe,
        replay_children::ChildConcurrency::ProcessIsolated => ChildConcurrency::ProcessIsolated,
    }
}

impl ChildForker for WasmChildForker<'_> {
    type Session = WasmChild;

    fn has_risk_policy(&self) -> bool {
        self.parent.loaded.indices.child_risk.is_some()
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<WasmChild>, AdapterError> {
        let mut instance = ChildInstance::new(
            self.parent,
            &self.parent.loaded,
            &self.ctx,
            request,
            &self.fork_at,
        );
        let lease = instance.adapter.fork_replay_child(&self.state, request)?;
        Ok(ChildLease {
            receipt: receipt_from_wit(lease.receipt),
            concurrency: wit_concurrency(lease.concurrency),
            worker_identity: Some(instance.identity),
            child_key: instance.identity,
            session: WasmChild {
                instance,
                child: lease.child,
                released: false,
            },
        })
    }
}

type Guests<'a> = (
    &'a replay_children::Guest,
    &'a mut wasmtime::Store<crate::host_state::HostState>,
);

impl WasmAdapter {
    /// `fork-replay-child`: adopt `state` (from `export-replay-state`) as
    /// this instance's child for `request`. The instance must be fresh or
    /// a snapshot child's (the call instantiates it when needed).
    pub(super) fn fork_replay_child(
        &mut self,
        state: &[u8],
        request: &ForkRequest,
    ) -> Result<replay_children::ChildLease, AdapterError> {
        if self.loaded.indices.replay_children.is_none() {
            return Err(Self::missing("replay-children.fork-replay-child"));
        }
        let wit_request = replay_children::ForkRequest {
            replay_point_id: request.replay_point_id.clone(),
            child_id: request.child_id.clone(),
            target_branch_id: request.target_branch_id.clone(),
            minimum_fidelity: to_wit_fidelity(request.minimum_fidelity),
        };
        let (result, _) = self.call("fork-replay-child", Some(&request.child_id), None, |live| {
            let guest = live.replay_children.as_ref().expect("checked above");
            guest.call_fork_replay_child(&mut live.store, state, &wit_request)
        });
        result?.map_err(declared)
    }
}

impl WasmChild {
    /// Call `name` in the child's instance with its `replay-children`
    /// export.
    fn child_call<R>(
        &mut self,
        name: &'static str,
        traced: bool,
        body: impl FnOnce(Guests<'_>) -> wasmtime::Result<Result<R, wit_types::AdapterError>>,
    ) -> Result<R, AdapterError> {
        self.instance.call(name, traced, |live| {
            let children = live
                .replay_children
                .as_ref()
                .expect("a child implies the replay-children export");
            body((children, &mut live.store))
        })
    }
}

impl ChildSession for WasmChild {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let receipt = receipt_to_wit(receipt);
        let child = self.child;
        let report = self.child_call(
            "validate-replay-child-equivalence",
            false,
            |(guest, store)| guest.call_validate_replay_child_equivalence(store, child, &receipt),
        )?;
        Ok(report_from_wit(report))
    }

    fn assess_intent(
        &mut self,
        intent: &Map<String, Value>,
    ) -> Result<RiskAssessment, AdapterError> {
        self.instance.assess(intent, None)
    }

    fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
        let child = self.child;
        self.instance
            .run("run-replay-child", task, |live, json, ctx| {
                let guest = live
                    .replay_children
                    .as_ref()
                    .expect("a child implies the replay-children export");
                guest.call_run_replay_child(&mut live.store, child, json, ctx)
            })
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
        if self.released || self.instance.adapter.live.is_none() {
            // A dropped instance took the child with it.
            self.released = true;
            return Ok(());
        }
        let child = self.child;
        self.child_call("release-replay-child", false, |(guest, store)| {
            guest.call_release_replay_child(store, child)
        })?;
        self.released = true;
        // The instance, and with it the child's memory, goes with the session.
        Ok(())
    }
}

/// The public intent of an item: its variant spec, or its id for a seed.
pub(super) fn intent_of(item: &Item) -> Map<String, Value> {
    match item.get("variant_spec") {
        Some(Value::Object(spec)) => spec.clone(),
        _ => {
            let mut intent = Map::new();
            intent.insert(
                "item_id".into(),
                item.get("item_id").cloned().unwrap_or(Value::Null),
            );
            intent
        }
    }
}

impl WasmAdapter {
    /// Run every item of `handle`'s group as an isolated child of its
    /// replay point, when the point was snapshotted, or the component
    /// exports `replay-children` and the point's state was exported. `None`
    /// otherwise: the items then run one by one from the point
    /// (`execute-episode`), and when the point is usable but its children
    /// cannot be forked, the group is counted as a serial fallback
    /// ([`SerialChildGroup`], finished when the group is released).
    pub(super) fn run_children(
        &mut self,
        handle: &GroupHandle,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Vec<(Result<Record, AdapterError>, f64)>> {
        self.take_group_snapshot(handle);
        let (point_id, source) = {
            let point = handle.point.borrow();
            let GroupPoint {
                id,
                state,
                snapshot,
                ..
            } = point.as_ref()?;
            let source = match (snapshot, state) {
                (Some(snapshot), _) => Some(ForkSource::Snapshot(Arc::clone(snapshot))),
                (None, Some(state)) => Some(ForkSource::State(Arc::clone(state))),
                (None, None) => None,
            };
            (id.clone(), source)
        };
        let lane = self.replay.as_ref()?;
        let workers = lane.options.child_workers;
        let minimum = lane.options.minimum_fidelity;
        let point = lane
            .registry
            .get(&point_id)
            .filter(|point| point.lifecycle == Lifecycle::Ready)
            .filter(|_| {
                lane.registry
                    .binding(&point_id)
                    .is_some_and(|binding| self.binding_alive(binding))
            })
            .cloned()?;
        let Some(source) = source.filter(|_| workers > 0) else {
            *handle.serial.borrow_mut() = Some(SerialChildGroup::start(&lane.options.metrics));
            return None;
        };
        let mut lane = self.replay.take()?;
        let mut results = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_CHILDREN_PER_FORK) {
            let tasks: Vec<ChildTask> = chunk
                .iter()
                .map(|item| {
                    let id = item_id(item).unwrap_or("child").to_string();
                    ChildTask {
                        child_id: id.clone(),
                        target_branch_id: id,
                        minimum_fidelity: minimum,
                        item: item.clone(),
                        intent: intent_of(item),
                    }
                })
                .collect();
            let fork_at = (
                point.cursor.trace_id.clone(),
                point.created_event_id.clone(),
                point.cursor.next_sequence + 1,
            );
            let outcome = match &source {
                ForkSource::State(state) => {
                    let mut forker = WasmChildForker {
                        parent: self,
                        state: Arc::clone(state),
                        ctx: ctx.clone(),
                        fork_at,
                    };
                    lane.registry
                        .run_child_group_from(&mut forker, &point_id, tasks, workers, true)
                }
                ForkSource::Snapshot(snapshot) => {
                    let mut forker = SnapshotForker {
                        parent: self,
                        point: Arc::clone(snapshot),
                        ctx: ctx.clone(),
                        fork_at,
                    };
                    lane.registry
                        .run_child_group_from(&mut forker, &point_id, tasks, workers, true)
                }
            };
            let next = point.cursor.next_sequence + 1;
            match outcome {
                Ok(outcomes) => {
                    results.extend(
                        outcomes
                            .into_iter()
                            .map(|outcome| child_result(outcome, &point, next, source.name())),
                    );
                }
                Err(error) => {
                    let failure = adapter_error_of(&error);
                    for item in chunk {
                        let mut block = Map::new();
                        block.insert("replay_point_id".into(), Value::from(point_id.clone()));
                        block.insert("fidelity".into(), Value::from(point.fidelity.as_str()));
                        block.insert("isolated".into(), Value::Bool(true));
                        block.insert("fork".into(), Value::from(source.name()));
                        block.insert(
                            "child_id".into(),
                            item.get("item_id").cloned().unwrap_or(Value::Null),
                        );
                        block.insert("error".into(), error_block(&error));
                        let mut fields = Record::new();
                        fields.insert("replay".into(), Value::Object(block));
                        let mut failure = failure.clone();
                        failure.record_fields = Some(Box::new(fields));
                        results.push((Err(failure), 0.0));
                    }
                }
            }
        }
        self.replay = Some(lane);
        Some(results)
    }
}

/// One child's outcome as an item result with its `replay` block.
fn child_result(
    outcome: ChildOutcome,
    point: &sandloop_core::replay::ReplayPoint,
    first_sequence: u64,
    fork: &str,
) -> (Result<Record, AdapterError>, f64) {
    let (restore, child_id, mut extra) = match &outcome {
        ChildOutcome::Succeeded(result) => {
            let mut extra = Map::new();
            extra.insert("parallel".into(), Value::Bool(result.parallel));
            extra.insert(
                "intent_assessment".into(),
                result
                    .intent_assessment
                    .as_ref()
                    .map_or(Value::Null, RiskAssessment::to_record),
            );
            extra.insert(
                "outcome_assessment".into(),
                result
                    .outcome_assessment
                    .as_ref()
                    .map_or(Value::Null, RiskAssessment::to_record),
            );
            (&result.restore, &result.child_id, extra)
        }
        ChildOutcome::Failed(failure) => {
            let mut extra = Map::new();
            extra.insert("parallel".into(), Value::Bool(failure.parallel));
            extra.insert("stage".into(), Value::from(failure.stage.as_str()));
            extra.insert("error_type".into(), Value::from(failure.error_type.clone()));
            extra.insert(
                "risk_assessment".into(),
                failure
                    .risk_assessment
                    .as_ref()
                    .map_or(Value::Null, RiskAssessment::to_record),
            );
            (&failure.restore, &failure.child_id, extra)
        }
    };
    let mut block = restore.to_record();
    block.append(&mut extra);
    block.insert("fidelity".into(), Value::from(point.fidelity.as_str()));
    block.insert("isolated".into(), Value::Bool(true));
    block.insert("fork".into(), Value::from(fork));
    block.insert("child_id".into(), Value::from(child_id.clone()));
    block.insert(
        "trace_id".into(),
        Value::from(point.cursor.trace_id.clone()),
    );
    block.insert("branch_id".into(), Value::from(child_id.clone()));
    block.insert("first_sequence".into(), Value::from(first_sequence));
    let minutes = restore.replay_wall_minutes;
    match outcome {
        ChildOutcome::Succeeded(result) => {
            let mut record = result.outcome;
            let end = result.trace_end.unwrap_or(first_sequence);
            block.insert("end_sequence".into(), Value::from(end));
            record.insert("replay".into(), Value::Object(block));
            (Ok(record), minutes)
        }
        ChildOutcome::Failed(failure) => {
            let end = failure.trace_end.unwrap_or(first_sequence);
            block.insert("end_sequence".into(), Value::from(end));
            let mut error = failure.error;
            let mut fields = Record::new();
            fields.insert("replay".into(), Value::Object(block));
            error.record_fields = Some(Box::new(fields));
            (Err(error), minutes)
        }
    }
}
