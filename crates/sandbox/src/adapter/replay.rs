//! The `replay` export of a [`WasmAdapter`]: the registry's
//! [`ReplayAdapter`] calls and the group rules' [`GroupInstance`] calls
//! across the WebAssembly boundary, and the steps that hand a group's
//! replay point to those rules ([`GroupLane`] in `sandloop-core`: capture
//! after the prefix, each suffix from the point, release with the group).
//!
//! A binding is a resource of the instance that captured it, tied to that
//! instance's generation: when the instance is dropped (a trap, a limit),
//! [`GroupInstance::binding_alive`] says so, and its finalisation and
//! release have nothing left to do.

use std::sync::Arc;

use wasmtime::component::ResourceAny;

use super::{Live, WasmAdapter, declared, parse_object};
use crate::LoadedAdapter;
use crate::bindings::exports::sandloop::adapter::replay as wit;
use crate::snapshot::{CompiledSnapshot, Instrumented, SnapshotPoint};
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::durable::ReplayStore;
use sandloop_core::replay::{
    CaptureRequest, ChildChunk, ChildItemResult, EquivalenceCheck, EquivalenceReport, Fidelity,
    GroupInstance, GroupLane, GroupSettings, LaneRegistry, MemoryAgentStateStore, ReplayAdapter,
    ReplayError, ReplayMetricLedger, ReplayPoint, ReplayPointRegistry, ReplayStage, Replaying,
    RestoreReceipt, RestoreRequest, StateLease,
};
use sandloop_core::trace::TraceLog;

/// The host's handle of a `replay-binding` resource, tied to the instance
/// generation that created it.
#[derive(Clone, Copy)]
pub struct BindingHandle {
    resource: ResourceAny,
    generation: u64,
}

impl BindingHandle {
    /// The resource in the instance that captured it.
    pub(super) fn resource(&self) -> ResourceAny {
        self.resource
    }
}

/// Replay settings shared by every lane of a run.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Counters and minutes of every lane.
    pub metrics: Arc<ReplayMetricLedger>,
    /// Where point records and durable states go; `None` keeps nothing.
    pub store: Option<Arc<ReplayStore>>,
    /// Fidelity a restored suffix needs to be promotion eligible.
    pub minimum_fidelity: Fidelity,
    /// Threads a group's isolated children run on (`--child-workers`);
    /// 0 keeps the serial `run_from` per suffix even when the adapter
    /// exports `replay-children`.
    pub child_workers: usize,
    /// Fork children from snapshots of the live instance (`--fork
    /// snapshot`): the lanes' instances are of this instrumented
    /// component, and each point is snapshotted right after its capture.
    /// `None` forks by state transfer (`replay-children`), if at all.
    pub snapshots: Option<Arc<Instrumented>>,
}

/// What a group keeps about its replay point (snapshots are this
/// adapter's [`SnapshotPoint`]s).
pub(super) type GroupPoint = sandloop_core::replay::GroupPoint<SnapshotPoint>;

impl WasmAdapter {
    /// This adapter with a replay point captured after every prepared
    /// prefix and each suffix run from it ([`Replaying`]), when the
    /// component exports `replay` (otherwise every call passes through).
    pub fn with_replay(mut self, options: ReplayOptions) -> Replaying<WasmAdapter> {
        let ReplayOptions {
            metrics,
            store,
            minimum_fidelity,
            child_workers,
            snapshots,
        } = options;
        let settings = GroupSettings {
            metrics,
            store,
            minimum_fidelity,
            child_workers,
            fork_by_snapshot: snapshots.is_some(),
        };
        self.snapshots = snapshots;
        Replaying::new(self, Some(settings))
    }

    /// This adapter without replay points, as the lane type of a run that
    /// may have them ([`Replaying`] passing every call through).
    pub fn without_replay(self) -> Replaying<WasmAdapter> {
        Replaying::new(self, None)
    }
}

pub(super) fn to_wit_fidelity(fidelity: Fidelity) -> wit::Fidelity {
    match fidelity {
        Fidelity::Exact => wit::Fidelity::Exact,
        Fidelity::SemanticEquivalent => wit::Fidelity::SemanticEquivalent,
        Fidelity::BestEffort => wit::Fidelity::BestEffort,
        Fidelity::NonReplayable => wit::Fidelity::NonReplayable,
    }
}

pub(super) fn from_wit_fidelity(fidelity: wit::Fidelity) -> Fidelity {
    match fidelity {
        wit::Fidelity::Exact => Fidelity::Exact,
        wit::Fidelity::SemanticEquivalent => Fidelity::SemanticEquivalent,
        wit::Fidelity::BestEffort => Fidelity::BestEffort,
        wit::Fidelity::NonReplayable => Fidelity::NonReplayable,
    }
}

/// A receipt the guest returned, in the host's terms.
pub(super) fn receipt_from_wit(receipt: wit::RestoreReceipt) -> RestoreReceipt {
    RestoreReceipt {
        achieved_fidelity: from_wit_fidelity(receipt.achieved_fidelity),
        restored_projection_digest: receipt.restored_projection_digest,
        prefix_reused: receipt.prefix_reused,
    }
}

/// A receipt handed back to the guest.
pub(super) fn receipt_to_wit(receipt: &RestoreReceipt) -> wit::RestoreReceipt {
    wit::RestoreReceipt {
        achieved_fidelity: to_wit_fidelity(receipt.achieved_fidelity),
        restored_projection_digest: receipt.restored_projection_digest.clone(),
        prefix_reused: receipt.prefix_reused,
    }
}

/// An equivalence report the guest returned, in the host's terms.
pub(super) fn report_from_wit(report: wit::EquivalenceReport) -> EquivalenceReport {
    EquivalenceReport {
        achieved_fidelity: from_wit_fidelity(report.achieved_fidelity),
        equivalent: report.equivalent,
        expected_digest: report.expected_digest,
        observed_digest: report.observed_digest,
        checks: report
            .checks
            .into_iter()
            .map(|check| EquivalenceCheck {
                check_id: check.check_id,
                passed: check.passed,
                public_summary: check.public_summary,
            })
            .collect(),
        sanitized_reason: report.sanitized_reason,
    }
}

fn to_wit_request(request: &RestoreRequest) -> wit::RestoreRequest {
    wit::RestoreRequest {
        replay_point_id: request.replay_point_id.clone(),
        target_branch_id: request.target_branch_id.clone(),
        minimum_fidelity: to_wit_fidelity(request.minimum_fidelity),
    }
}

fn to_wit_capture(request: &CaptureRequest) -> wit::CaptureRequest {
    wit::CaptureRequest {
        replay_point_id: request.replay_point_id.clone(),
        trace_id: request.trace_id.clone(),
        branch_id: request.branch_id.clone(),
        after_event_id: request.after_event_id.clone(),
        next_sequence: request.next_sequence,
        execution_group_id: request.execution_group_id.clone(),
    }
}

fn instance_lost(what: &str) -> AdapterError {
    AdapterError::new(
        ErrorType::InstanceLost,
        format!(
            "the replay binding's instance was dropped after an earlier failure; cannot {what}"
        ),
    )
}

impl WasmAdapter {
    pub(super) fn binding_alive(&self, binding: &BindingHandle) -> bool {
        binding.generation == self.generation && self.live.is_some()
    }

    fn lease_from_wit(&self, lease: wit::StateLease) -> StateLease<BindingHandle> {
        StateLease {
            binding: lease.binding.map(|resource| BindingHandle {
                resource,
                generation: self.generation,
            }),
            fidelity: from_wit_fidelity(lease.fidelity),
            projection_digest: lease.projection_digest,
        }
    }

    /// `import-replay-state`: rebuild a binding in this instance from bytes
    /// a (possibly other) process exported.
    pub fn import_replay_state(
        &mut self,
        state: &[u8],
        request: &CaptureRequest,
    ) -> Result<StateLease<BindingHandle>, AdapterError> {
        if self.loaded.indices.replay.is_none() {
            return Err(Self::missing("replay.import-replay-state"));
        }
        let request = to_wit_capture(request);
        let (result, _) = self.call_export(
            "import-replay-state",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_import_replay_state(store, state, &request),
        );
        let lease = result?.map_err(declared)?;
        Ok(self.lease_from_wit(lease))
    }

    /// `export-replay-state`: the binding's state as bytes, or `None` when
    /// the adapter cannot export it.
    pub fn export_replay_state(
        &mut self,
        binding: &BindingHandle,
    ) -> Result<Option<Vec<u8>>, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(instance_lost("export its state"));
        }
        let resource = binding.resource;
        let (result, _) = self.call_export(
            "export-replay-state",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_export_replay_state(store, resource),
        );
        result?.map_err(declared)
    }

    /// `run-replay-suffix`: run `item` on the binding's restored working
    /// copy, appending its trace events to `trace`.
    pub fn run_replay_suffix(
        &mut self,
        binding: &BindingHandle,
        item: &Item,
        ctx: &CallContext,
        trace: &mut Option<TraceLog>,
    ) -> Result<Record, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(instance_lost("run a suffix"));
        }
        let json = item.json_text();
        let wit_ctx = self.context(ctx);
        let resource = binding.resource;
        let (result, returned) = self.call_export(
            "run-replay-suffix",
            item.item_id_str(),
            trace.take(),
            Live::replay,
            |guest, store| guest.call_run_replay_suffix(store, resource, &json, &wit_ctx),
        );
        *trace = returned;
        let text = result?.map_err(declared)?;
        parse_object(&text, self.max_output(), "the observation record")
    }
}

impl GroupInstance for WasmAdapter {
    type Snapshot = SnapshotPoint;

    fn binding_alive(&self, binding: &BindingHandle) -> bool {
        WasmAdapter::binding_alive(self, binding)
    }

    fn instance_id(&self) -> Option<u64> {
        self.live.is_some().then_some(self.generation)
    }

    fn max_output_bytes(&self) -> usize {
        self.max_output()
    }

    fn forks_children(&self) -> bool {
        self.loaded.indices.replay_children.is_some()
    }

    fn export_replay_state(
        &mut self,
        binding: &BindingHandle,
    ) -> Result<Option<Vec<u8>>, AdapterError> {
        WasmAdapter::export_replay_state(self, binding)
    }

    fn run_replay_suffix(
        &mut self,
        binding: &BindingHandle,
        item: &Item,
        ctx: &CallContext,
        trace: &mut Option<TraceLog>,
    ) -> Result<Record, AdapterError> {
        WasmAdapter::run_replay_suffix(self, binding, item, ctx, trace)
    }

    /// The group's trace, kept across its calls since its prepare.
    fn take_group_trace(&mut self, ctx: &CallContext) -> Option<TraceLog> {
        self.trace_for(ctx, &Item::new())
    }

    /// The capture's events go to the observer like a call's, as
    /// `capture-replay-state` of the seed.
    fn keep_group_trace(
        &mut self,
        ctx: &CallContext,
        trace: TraceLog,
        host_events_from: u64,
        seed_item_id: Option<&str>,
    ) {
        self.report_events(
            &trace,
            host_events_from,
            "capture-replay-state",
            seed_item_id,
        );
        self.keep_group_trace(ctx, Some(trace));
    }

    fn settle_deferred_point(
        &mut self,
        lane: &GroupLane<BindingHandle>,
        point: &mut GroupPoint,
        items: Vec<Item>,
    ) {
        self.snapshot_deferred_point(lane, point, items);
    }

    fn run_child_chunk(
        &self,
        registry: &mut LaneRegistry<BindingHandle>,
        chunk: ChildChunk<'_, SnapshotPoint>,
        ctx: &CallContext,
    ) -> Result<Vec<ChildItemResult>, ReplayError> {
        self.fork_child_chunk(registry, chunk, ctx)
    }
}

impl ReplayAdapter for WasmAdapter {
    type Binding = BindingHandle;

    fn capture_replay_state(
        &mut self,
        request: &CaptureRequest,
    ) -> Result<StateLease<BindingHandle>, AdapterError> {
        if self.loaded.indices.replay.is_none() {
            return Err(Self::missing("replay.capture-replay-state"));
        }
        let request = to_wit_capture(request);
        // The trace is frozen while a point is captured: no trace is open.
        let (result, _) = self.call_export(
            "capture-replay-state",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_capture_replay_state(store, &request),
        );
        let lease = result?.map_err(declared)?;
        Ok(self.lease_from_wit(lease))
    }

    fn restore_replay_state(
        &mut self,
        binding: &BindingHandle,
        request: &RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(instance_lost("restore it"));
        }
        let request = to_wit_request(request);
        let resource = binding.resource;
        let (result, _) = self.call_export(
            "restore-replay-state",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_restore_replay_state(store, resource, &request),
        );
        Ok(receipt_from_wit(result?.map_err(declared)?))
    }

    fn validate_replay_equivalence(
        &mut self,
        binding: &BindingHandle,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(instance_lost("validate it"));
        }
        let receipt = receipt_to_wit(receipt);
        let resource = binding.resource;
        let (result, _) = self.call_export(
            "validate-replay-equivalence",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_validate_replay_equivalence(store, resource, &receipt),
        );
        Ok(report_from_wit(result?.map_err(declared)?))
    }

    fn finalize_replay_suffix(
        &mut self,
        binding: &BindingHandle,
        request: &RestoreRequest,
        suffix_succeeded: bool,
    ) -> Result<(), AdapterError> {
        if !self.binding_alive(binding) {
            // The working copy died with its instance: nothing is left open.
            return Ok(());
        }
        let request = to_wit_request(request);
        let resource = binding.resource;
        let (result, _) = self.call_export(
            "finalize-replay-suffix",
            None,
            None,
            Live::replay,
            |guest, store| {
                guest.call_finalize_replay_suffix(store, resource, &request, suffix_succeeded)
            },
        );
        result?.map_err(declared)
    }

    fn release_replay_state(&mut self, binding: &BindingHandle) -> Result<(), AdapterError> {
        if !self.binding_alive(binding) {
            // The binding died with its instance: nothing is left to release.
            return Ok(());
        }
        let resource = binding.resource;
        let (result, _) = self.call_export(
            "release-replay-state",
            None,
            None,
            Live::replay,
            |guest, store| guest.call_release_replay_state(store, resource),
        );
        result?.map_err(declared)
    }

    /// Drop the handle, which runs the guest's destructor, as a call of
    /// its own (deadline, fuel, captured output): a destructor that traps
    /// fails here, and the poisoned instance is dropped like after any
    /// failed call, so the next call starts on a fresh one.
    fn discard_binding(&mut self, binding: BindingHandle) -> Result<(), AdapterError> {
        if !self.binding_alive(&binding) {
            // The binding died with its instance: nothing is left to drop.
            return Ok(());
        }
        let resource = binding.resource;
        let (result, _) = self.call("drop replay-binding", None, None, |live| {
            resource.resource_drop(&mut live.store)
        });
        result.map_err(|error| AdapterError {
            message: format!("dropping the replay binding failed: {}", error.message),
            ..error
        })
    }
}

/// Rebuild a replay point in `adapter`'s instance from its durable state and
/// register it in `registry` (the replay of a finished run's item).
pub fn adopt_durable_point(
    adapter: &mut WasmAdapter,
    registry: &mut ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    recorded: &ReplayPoint,
    execution_group_id: &str,
    state: &[u8],
) -> Result<ReplayPoint, ReplayError> {
    let request = CaptureRequest {
        replay_point_id: recorded.replay_point_id.clone(),
        trace_id: recorded.cursor.trace_id.clone(),
        branch_id: recorded.cursor.branch_id.clone(),
        after_event_id: recorded.cursor.after_event_id.clone(),
        next_sequence: recorded.cursor.next_sequence,
        execution_group_id: execution_group_id.to_string(),
    };
    let lease = adapter
        .import_replay_state(state, &request)
        .map_err(|error| ReplayError::adapter(ReplayStage::Import, error))?;
    registry.adopt(adapter, recorded, lease)
}

/// Rebuild a replay point from its durable snapshot (a point of a run that
/// forked its children by snapshot) and register it in `registry`.
/// `adapter` runs over the compiled snapshot component
/// ([`CompiledSnapshot::loaded`](crate::snapshot::CompiledSnapshot::loaded)),
/// so its first call instantiates the instance as it was at the capture;
/// `token` is the point's recorded `binding_token`. `resume-binding` hands
/// back the binding, which the registry then restores and validates like
/// any other: the adapter's projection digest must equal the captured one
/// for `exact`. The snapshot counterpart of [`adopt_durable_point`].
pub fn adopt_snapshot_point(
    adapter: &mut WasmAdapter,
    registry: &mut ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    recorded: &ReplayPoint,
    token: u64,
) -> Result<ReplayPoint, ReplayError> {
    let resource = adapter
        .resume_binding(token, None)
        .map_err(|error| ReplayError::adapter(ReplayStage::Import, error))?;
    let lease = StateLease {
        binding: Some(BindingHandle {
            resource,
            generation: adapter.generation,
        }),
        fidelity: recorded.fidelity,
        projection_digest: recorded.captured_projection_digest.clone(),
    };
    registry.adopt(adapter, recorded, lease)
}

pub use sandloop_core::compile_cost::SnapshotCompileCost;

/// An adapter over a replay point's snapshot component `bytes` (sha256
/// `sha256`): `loaded` is instrumented (through the compile cache, as in
/// the run that wrote the point) and the snapshot compiled beside it.
/// Returns the adapter, not yet instantiated, what the two steps cost, and
/// the compiled snapshot (children of the point are instances of it:
/// [`AdoptedFork::Snapshot`](super::AdoptedFork::Snapshot)). Adopt the
/// point in the adapter with [`adopt_snapshot_point`].
///
/// # Errors
/// The component cannot be instrumented, or the snapshot compiled.
pub fn snapshot_replay_adapter(
    loaded: &LoadedAdapter,
    bytes: &[u8],
    sha256: &str,
) -> Result<(WasmAdapter, SnapshotCompileCost, CompiledSnapshot), crate::snapshot::SnapshotError> {
    let instrumented = Instrumented::load(loaded)?;
    let compiled = instrumented.compile_snapshot_bytes(bytes, sha256)?;
    let cost = SnapshotCompileCost {
        instrument_ms: instrumented.info.compile.as_secs_f64() * 1000.0
            + instrumented.info.instrument.as_secs_f64() * 1000.0,
        instrumented_cache: instrumented.info.cache,
        compile_ms: (compiled.compile + compiled.image).as_secs_f64() * 1000.0,
    };
    Ok((
        WasmAdapter::new(Arc::clone(compiled.loaded()), "replay", None),
        cost,
        compiled,
    ))
}
