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
use super::replay::{
    BindingHandle, receipt_from_wit, receipt_to_wit, report_from_wit, to_wit_fidelity,
};
use super::snapshot_children::SnapshotForker;
use super::{Live, WasmAdapter, declared};
use crate::bindings::exports::sandloop::adapter::replay_children;
use crate::snapshot::SnapshotPoint;
use sandloop_core::episode::adapter::{AdapterError, CallContext, Item, Record};
use sandloop_core::replay::{
    ChildChunk, ChildConcurrency, ChildForker, ChildItemResult, ChildLease, ConcurrentForker,
    EquivalenceReport, ForkRequest, ForkSource, LaneRegistry, ReplayError, RestoreReceipt,
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
    /// Fork one chunk of a group's children from its point's snapshot or
    /// exported state, each into a fresh instance, and run them on
    /// `registry`
    /// ([`GroupInstance::run_child_chunk`](sandloop_core::replay::GroupInstance::run_child_chunk)
    /// of a [`WasmAdapter`]).
    pub(super) fn fork_child_chunk(
        &self,
        registry: &mut LaneRegistry<BindingHandle>,
        chunk: ChildChunk<'_, SnapshotPoint>,
        ctx: &CallContext,
    ) -> Result<Vec<ChildItemResult>, ReplayError> {
        let source = chunk.source;
        let fork_at = chunk.fork_at.clone();
        match source {
            ForkSource::State(state) => chunk.run_on(
                registry,
                &mut WasmChildForker {
                    origin: ChildOrigin::new(self, &self.loaded, ctx, fork_at),
                    state: Arc::clone(state),
                },
            ),
            ForkSource::Snapshot(snapshot) => chunk.run_on(
                registry,
                &mut SnapshotForker {
                    origin: ChildOrigin::new(self, snapshot.compiled.loaded(), ctx, fork_at),
                    point: Arc::clone(snapshot),
                },
            ),
        }
    }
}
