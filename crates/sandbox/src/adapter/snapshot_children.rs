//! Snapshot forks of a [`WasmAdapter`]'s replay points: right after a
//! point is captured, the parent instance — an instance of the
//! [instrumented](crate::snapshot::Instrumented) component — is
//! snapshotted into a new component, compiled once, and every child of the
//! group is a fresh instance of that snapshot. The child starts with the
//! parent's whole linear memory, so the adapter writes no serialisation
//! code: it only names the binding with `binding-token` in the parent, and
//! hands a new handle back with `resume-binding` in the child (resource
//! handles live in the host and do not survive a snapshot).
//!
//! A child then runs the `replay` calls on its own copy:
//! `restore-replay-state` (the fork's receipt), `validate-replay-equivalence`
//! (the adapter's projection digest against the captured one: exact
//! fidelity where the adapter reports a digest) and `run-replay-suffix`.
//! When the component exports `child-risk` (which needs `replay-children`),
//! its policy screens every snapshot child as it screens state-forked ones:
//! the point's state is exported once in the parent, and each child's
//! instance adopts it as its replay child (`fork-replay-child` under the
//! child's id), so `assess-replay-child-intent` and `-outcome` find the
//! child they judge; the task itself runs on the resumed binding. (`--fork
//! auto` forks such an adapter by state transfer anyway; this is for
//! `--fork snapshot`.)
//! Its instance is then dropped whole; `finalize-replay-suffix` is not
//! called, since the working copy goes with the instance. The group runtime
//! (`run_child_group_from`) is the same as for state-transfer forks.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceAny;

use super::child_instance::{ChildInstance, ChildKind, ChildOrigin, ForkedChild};
use super::replay::{
    BindingHandle, GroupPoint, receipt_from_wit, receipt_to_wit, report_from_wit, to_wit_fidelity,
};
use super::{Live, WasmAdapter, declared};
use crate::bindings::exports::sandloop::adapter::replay as wit_replay;
use crate::snapshot::{Instrumented, SnapshotError, SnapshotPoint};
use sandloop_core::episode::adapter::{AdapterError, Item, Record};
use sandloop_core::replay::{
    ChildConcurrency, ChildForker, ChildLease, ConcurrentForker, EquivalenceReport, ForkRequest,
    GroupLane, RestoreReceipt,
};

impl WasmAdapter {
    /// Snapshot this (instrumented) instance right after `binding` was
    /// captured, and compile the snapshot. Returns the point and the
    /// snapshot component's bytes (the point's durable form). Errors say
    /// which step failed; the point is then forked by state transfer or
    /// run from in place.
    pub(super) fn snapshot_point(
        &mut self,
        instrumented: &Instrumented,
        binding: &BindingHandle,
    ) -> Result<(SnapshotPoint, Arc<[u8]>), String> {
        if !self.binding_alive(binding) {
            return Err("the binding's instance is gone".into());
        }
        let resource = binding.resource();
        let (result, _) =
            self.call_export("binding-token", None, None, Live::replay, |guest, store| {
                guest.call_binding_token(store, resource)
            });
        let token = result
            .map_err(|error| error.message)?
            .map_err(|error| declared(error).message)?
            .ok_or(
                "binding-token gave none: the adapter cannot resume this binding in a snapshot",
            )?;
        if self.snapshot_growth_estimate == 0 {
            self.snapshot_growth_estimate = instrumented.parent_growth_per_snapshot();
        }
        self.snapshot_headroom()?;
        let live = self.live.as_mut().ok_or("the instance was dropped")?;
        let started = Instant::now();
        let snapshot = match instrumented.snapshot(&mut live.store, &live.instance) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                if matches!(error, SnapshotError::AccessorCall { .. }) {
                    // A trap inside an accessor leaves the instance unable
                    // to enter again: it goes, with the group's state.
                    self.live = None;
                }
                return Err(error.to_string());
            }
        };
        live.snapshot_growth += snapshot.parent_growth_bytes;
        self.snapshot_growth_estimate = snapshot.parent_growth_bytes;
        let snapshot_ms = started.elapsed().as_secs_f64() * 1000.0;
        let started = Instant::now();
        let compiled = instrumented
            .compile_snapshot(&snapshot)
            .map_err(|error| error.to_string())?;
        let point = SnapshotPoint {
            compiled,
            token,
            bytes: snapshot.bytes.len(),
            snapshot_ms,
            compile_ms: started.elapsed().as_secs_f64() * 1000.0,
            risk_state: None,
        };
        Ok((point, snapshot.bytes))
    }

    /// `resume-binding`: the first call in an instance of a snapshot, a
    /// new handle on the binding `token` named in the parent. `child_id`
    /// labels the call in the adapter's logs.
    pub(super) fn resume_binding(
        &mut self,
        token: u64,
        child_id: Option<&str>,
    ) -> Result<ResourceAny, AdapterError> {
        if self.loaded.indices.replay.is_none() {
            return Err(Self::missing("replay.resume-binding"));
        }
        let (result, _) = self.call_export(
            "resume-binding",
            child_id,
            None,
            Live::replay,
            |guest, store| guest.call_resume_binding(store, token),
        );
        result?.map_err(declared)
    }

    /// Take the snapshot of a group's point that its capture deferred,
    /// right before its children are first forked (nothing has run on the
    /// parent since the capture): so the snapshot's cost is not timed as
    /// prefix work, and is reported on the point (`snapshot_ms`,
    /// `compile_ms`). On success the snapshot is the point's durable form
    /// (within `--max-durable-snapshots`). When the component's
    /// `child-risk` policy screens children, the state is exported first
    /// (each child adopts it for the policy); an adapter that cannot
    /// export forks no snapshot children then, as with `--fork state`.
    /// A failure is written to the point's `snapshot_error`, and the point
    /// is exported and forked by state transfer as it would have been
    /// without snapshots (or its items run from it in the parent).
    /// [`GroupInstance::settle_deferred_point`](sandloop_core::replay::GroupInstance::settle_deferred_point)
    /// of a [`WasmAdapter`].
    pub(super) fn snapshot_deferred_point(
        &mut self,
        lane: &GroupLane<BindingHandle>,
        point: &mut GroupPoint,
        items: Vec<Item>,
    ) {
        match self.snapshot_group_point(lane, &point.id) {
            Ok((snapshot, component)) => {
                point.line.snapshot = Some(snapshot.to_record());
                if let Some(store) = &lane.settings.store {
                    match store.write_snapshot(&point.id, &component, snapshot.token, &items) {
                        Ok(durable) => point.line.durable_state = Some(durable),
                        Err(error) => {
                            // Past --max-durable-snapshots (or unwritable):
                            // the adapter's exported state, when it has
                            // one, keeps the point durable.
                            point.line.durable_error = Some(error.to_string());
                            lane.export_point(self, &point.id, &items, &mut point.line);
                            if point.line.durable_state.is_some() {
                                point.line.durable_error = None;
                            }
                        }
                    }
                }
                point.snapshot = Some(Arc::new(snapshot));
            }
            Err(error) => {
                point.line.snapshot_error = Some(error);
                if self.live.is_some() {
                    point.state = lane.export_point(self, &point.id, &items, &mut point.line);
                } else {
                    point.line.durable_error = Some(
                        "the instance was lost when its snapshot failed (see snapshot_error): \
                         the point has no durable form"
                            .into(),
                    );
                }
            }
        }
    }

    /// The snapshot of point `point_id` and its component's bytes, with
    /// the exported state attached when `child-risk` screens children.
    fn snapshot_group_point(
        &mut self,
        lane: &GroupLane<BindingHandle>,
        point_id: &str,
    ) -> Result<(SnapshotPoint, Arc<[u8]>), String> {
        let instrumented = self
            .snapshots
            .clone()
            .ok_or("the run does not fork by snapshot")?;
        let binding = *lane
            .registry
            .binding(point_id)
            .ok_or("the point has no binding")?;
        let indices = &self.loaded.indices;
        let risk_state = if indices.child_risk.is_some() && indices.replay_children.is_some() {
            let max = self.max_output();
            match self.export_replay_state(&binding) {
                Ok(Some(bytes)) if bytes.len() <= max => Some(Arc::new(bytes)),
                Ok(Some(bytes)) => {
                    return Err(format!(
                        "child-risk screens children on the exported state, which is {} bytes, \
                         over --max-output {max}: no snapshot children",
                        bytes.len()
                    ));
                }
                Ok(None) => {
                    return Err("child-risk screens children on the exported state, and \
                                export-replay-state gave none: no snapshot children (as with \
                                --fork state)"
                        .into());
                }
                Err(error) => return Err(format!("export-replay-state: {error}")),
            }
        } else {
            None
        };
        let (mut snapshot, component) = self.snapshot_point(&instrumented, &binding)?;
        snapshot.risk_state = risk_state;
        Ok((snapshot, component))
    }
}

/// Forks children of one point from its compiled snapshot: each a fresh
/// instance of the snapshot made from `origin`. Forks share nothing else,
/// so a parallel group's workers fork at once.
pub struct SnapshotForker {
    pub(super) origin: ChildOrigin,
    pub(super) point: Arc<SnapshotPoint>,
}

/// One child: a fresh instance of the snapshot and its resumed binding.
pub type SnapshotChild = ForkedChild<ResumedBinding>;

/// A child of a snapshot: the `replay` binding its instance resumed
/// ([`ChildKind`]).
pub struct ResumedBinding {
    binding: ResourceAny,
}

impl ChildForker for SnapshotForker {
    type Session = SnapshotChild;

    /// Whether the component's `child-risk` policy screens the children:
    /// the point then carries the exported state each child adopts.
    fn has_risk_policy(&self) -> bool {
        self.point.risk_state.is_some()
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<SnapshotChild>, AdapterError> {
        ConcurrentForker::fork(self, request)
    }

    fn concurrent(&self) -> Option<&dyn ConcurrentForker<SnapshotChild>> {
        Some(self)
    }
}

impl ConcurrentForker<SnapshotChild> for SnapshotForker {
    fn fork(&self, request: &ForkRequest) -> Result<ChildLease<SnapshotChild>, AdapterError> {
        let mut instance = self.origin.instance(request);
        let adapter = &mut instance.adapter;
        let binding = adapter.resume_binding(self.point.token, Some(&request.child_id))?;
        let restore = wit_replay::RestoreRequest {
            replay_point_id: request.replay_point_id.clone(),
            target_branch_id: request.target_branch_id.clone(),
            minimum_fidelity: to_wit_fidelity(request.minimum_fidelity),
        };
        let (result, _) = adapter.call_export(
            "restore-replay-state",
            Some(&request.child_id),
            None,
            Live::replay,
            |guest, store| guest.call_restore_replay_state(store, binding, &restore),
        );
        let receipt = receipt_from_wit(result?.map_err(declared)?);
        if let Some(state) = &self.point.risk_state {
            adapter.fork_replay_child(state, request)?;
        }
        Ok(ChildLease {
            receipt,
            // Every child is its own instance of the snapshot.
            concurrency: ChildConcurrency::ThreadSafe,
            worker_identity: Some(instance.identity),
            child_key: instance.identity,
            session: ForkedChild {
                instance,
                kind: ResumedBinding { binding },
            },
        })
    }
}

impl ChildKind for ResumedBinding {
    fn validate(
        &mut self,
        instance: &mut ChildInstance,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let receipt = receipt_to_wit(receipt);
        let binding = self.binding;
        let report = instance.call(
            "validate-replay-equivalence",
            false,
            Live::replay,
            |guest, store| guest.call_validate_replay_equivalence(store, binding, &receipt),
        )?;
        Ok(report_from_wit(report))
    }

    fn run(&mut self, instance: &mut ChildInstance, task: &Item) -> Result<Record, AdapterError> {
        let binding = self.binding;
        instance.run(
            "run-replay-suffix",
            task,
            Live::replay,
            |guest, store, json, ctx| guest.call_run_replay_suffix(store, binding, json, ctx),
        )
    }

    fn release(&mut self, instance: &mut ChildInstance) -> Result<(), AdapterError> {
        // The child's copy of the parent's memory goes with its instance,
        // which is dropped with the session: nothing is left to release.
        instance.adapter.live = None;
        Ok(())
    }
}
