//! Isolated replay children of a [`WasmAdapter`]: every variant of a group
//! forked from the group's replay point into a fresh instance of the
//! component — its own store and linear memory — that adopts the exported
//! state, is validated against the point, screened by the adapter's
//! `child-risk` policy, runs its item, is released and dropped. A child
//! that traps, loops or exhausts its memory takes only its own instance
//! down; the parent's instance is never touched.

use std::sync::Arc;

use wasmtime::component::ResourceAny;

use super::child_instance::{ChildInstance, ChildKind, ChildOrigin, ForkedChild};
use super::replay::{receipt_from_wit, receipt_to_wit, report_from_wit, to_wit_fidelity};
use super::snapshot_children::SnapshotForker;
use super::{GroupHandle, Live, WasmAdapter, declared};
use crate::bindings::exports::sandloop::adapter::replay_children;
use sandloop_core::episode::adapter::{AdapterError, CallContext, Item, Record};
use sandloop_core::replay::{
    ChildConcurrency, ChildForker, ChildLease, ConcurrentForker, EquivalenceReport, ForkRequest,
    ForkSource, RestoreReceipt,
};

/// A child forked from a point's exported state: the `replay-children`
/// child its instance adopted ([`ChildKind`]).
pub struct AdoptedState {
    child: ResourceAny,
    released: bool,
}

/// One child forked from exported state, in its own instance.
pub type WasmChild = ForkedChild<AdoptedState>;

/// Forks children of one point from its exported state: each a fresh
/// instance made from `origin` that adopts `state`. Forks share nothing
/// else, so a parallel group's workers fork at once.
pub struct WasmChildForker {
    pub(super) origin: ChildOrigin,
    pub(super) state: Arc<Vec<u8>>,
}

fn wit_concurrency(concurrency: replay_children::ChildConcurrency) -> ChildConcurrency {
    match concurrency {
        replay_children::ChildConcurrency::SerialOnly => ChildConcurrency::SerialOnly,
        replay_children::ChildConcurrency::ThreadSafe => ChildConcurrency::ThreadSafe,
        replay_children::ChildConcurrency::ProcessIsolated => ChildConcurrency::ProcessIsolated,
    }
}

impl ChildForker for WasmChildForker {
    type Session = WasmChild;

    fn has_risk_policy(&self) -> bool {
        self.origin.loaded().indices.child_risk.is_some()
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<WasmChild>, AdapterError> {
        ConcurrentForker::fork(self, request)
    }

    fn concurrent(&self) -> Option<&dyn ConcurrentForker<WasmChild>> {
        Some(self)
    }
}

impl ConcurrentForker<WasmChild> for WasmChildForker {
    fn fork(&self, request: &ForkRequest) -> Result<ChildLease<WasmChild>, AdapterError> {
        let mut instance = self.origin.instance(request);
        let lease = instance.adapter.fork_replay_child(&self.state, request)?;
        Ok(ChildLease {
            receipt: receipt_from_wit(lease.receipt),
            concurrency: wit_concurrency(lease.concurrency),
            worker_identity: Some(instance.identity),
            child_key: instance.identity,
            session: ForkedChild {
                instance,
                kind: AdoptedState {
                    child: lease.child,
                    released: false,
                },
            },
        })
    }
}

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
        let (result, _) = self.call_export(
            "fork-replay-child",
            Some(&request.child_id),
            None,
            Live::replay_children,
            |guest, store| guest.call_fork_replay_child(store, state, &wit_request),
        );
        result?.map_err(declared)
    }
}

impl ChildKind for AdoptedState {
    fn validate(
        &mut self,
        instance: &mut ChildInstance,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let receipt = receipt_to_wit(receipt);
        let child = self.child;
        let report = instance.call(
            "validate-replay-child-equivalence",
            false,
            Live::replay_children,
            |guest, store| guest.call_validate_replay_child_equivalence(store, child, &receipt),
        )?;
        Ok(report_from_wit(report))
    }

    fn run(&mut self, instance: &mut ChildInstance, task: &Item) -> Result<Record, AdapterError> {
        let child = self.child;
        instance.run(
            "run-replay-child",
            task,
            Live::replay_children,
            |guest, store, json, ctx| guest.call_run_replay_child(store, child, json, ctx),
        )
    }

    fn release(&mut self, instance: &mut ChildInstance) -> Result<(), AdapterError> {
        if self.released || instance.adapter.live.is_none() {
            // A dropped instance took the child with it.
            self.released = true;
            return Ok(());
        }
        let child = self.child;
        instance.call(
            "release-replay-child",
            false,
            Live::replay_children,
            |guest, store| guest.call_release_replay_child(store, child),
        )?;
        self.released = true;
        // The instance, and with it the child's memory, goes now, on the
        // worker that ran the child (its store back to the pool).
        instance.adapter.live = None;
        Ok(())
    }
}

impl WasmAdapter {
    /// Run every item of `handle`'s group as an isolated child of its
    /// replay point ([`GroupLane::run_children`](sandloop_core::replay::GroupLane::run_children)),
    /// when the point was snapshotted, or the component exports
    /// `replay-children` and the point's state was exported. `None`
    /// otherwise: the items then run one by one from the point
    /// (`execute-episode`), and when the point is usable but its children
    /// cannot be forked, the group is counted as a serial fallback.
    pub(super) fn run_children(
        &mut self,
        handle: &GroupHandle,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Vec<(Result<Record, AdapterError>, f64)>> {
        self.take_group_snapshot(handle);
        let mut slot = handle.point.borrow_mut();
        let point = slot.as_mut()?;
        let mut lane = self.replay.take()?;
        let parent = &*self;
        let results = lane
            .group
            .run_children(parent, point, items, |registry, chunk| {
                let (point_id, tasks, workers) = (chunk.point_id, chunk.tasks, chunk.workers);
                let finish = chunk.finish;
                match chunk.source {
                    ForkSource::State(state) => {
                        let mut forker = WasmChildForker {
                            origin: ChildOrigin::new(parent, &parent.loaded, ctx, chunk.fork_at),
                            state: Arc::clone(state),
                        };
                        registry.run_child_group_finishing(
                            &mut forker,
                            point_id,
                            tasks,
                            workers,
                            true,
                            finish,
                        )
                    }
                    ForkSource::Snapshot(snapshot) => {
                        let loaded = snapshot.compiled.loaded();
                        let mut forker = SnapshotForker {
                            origin: ChildOrigin::new(parent, loaded, ctx, chunk.fork_at),
                            point: Arc::clone(snapshot),
                        };
                        registry.run_child_group_finishing(
                            &mut forker,
                            point_id,
                            tasks,
                            workers,
                            true,
                            finish,
                        )
                    }
                }
            });
        self.replay = Some(lane);
        results
    }
}
