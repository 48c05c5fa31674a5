//! The `replay` export of a [`WasmAdapter`]: the registry's
//! [`ReplayAdapter`] calls across the WebAssembly boundary, and the replay
//! steps of a group run (capture after the prefix, each suffix from the
//! point, release with the group).
//!
//! A binding is a resource of the instance that captured it. When that
//! instance is dropped (a trap, a limit), the binding dies with it: its
//! finalisation and release then have nothing left to do, and the point is
//! released without being quarantined (its durable state, if written, stays
//! valid for `sandloop replay`).

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use wasmtime::component::ResourceAny;

use super::snapshot_children::SnapshotPoint;
use super::{GroupHandle, WasmAdapter, declared, item_id, parse_record, to_json};
use crate::bindings::exports::sandloop::adapter::replay as wit;
use crate::snapshot::Instrumented;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::replay::durable::{PointLine, ReplayStore};
use sandloop_core::replay::{
    CaptureRequest, EquivalenceCheck, EquivalenceReport, Fidelity, MemoryAgentStateStore,
    ReplayAdapter, ReplayCause, ReplayError, ReplayMetricLedger, ReplayPoint, ReplayPointRegistry,
    ReplayRestoreResult, RestoreReceipt, RestoreRequest, StateLease, agent_cursor,
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

/// The replay state of one lane: its registry and settings.
pub(super) struct ReplayLane {
    pub(super) registry: ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    pub(super) options: ReplayOptions,
}

impl ReplayLane {
    pub(super) fn new(options: ReplayOptions) -> Self {
        Self {
            registry: ReplayPointRegistry::new(
                MemoryAgentStateStore::new(),
                Arc::clone(&options.metrics),
            ),
            options,
        }
    }
}

/// What a group keeps about its replay point.
pub(super) struct GroupPoint {
    pub(super) id: String,
    pub(super) line: PointLine,
    /// The exported state, kept when children are forked from it.
    pub(super) state: Option<Arc<Vec<u8>>>,
    /// The point frozen as a compiled snapshot, when children are forked
    /// from snapshots.
    pub(super) snapshot: Option<Arc<SnapshotPoint>>,
    /// The group's items while its snapshot is still to be taken (at the
    /// first fork of its children).
    pub(super) pending: Option<Vec<Item>>,
}

/// A deterministic, file-name-safe point id for a group of an arm and
/// epoch: `rp-` and 20 hex digits of a sha256 (a resumed run recaptures
/// the same group under the same id).
pub fn point_id_for(arm: &str, epoch: u32, execution_group_id: &str) -> String {
    let digest = Sha256::digest(format!("{arm}\0{epoch}\0{execution_group_id}").as_bytes());
    format!("rp-{}", hex::encode(&digest[..10]))
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
        let (result, _) = self.call("import-replay-state", None, None, |live| {
            let guest = live.replay.as_ref().expect("checked above");
            guest.call_import_replay_state(&mut live.store, state, &request)
        });
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
        let (result, _) = self.call("export-replay-state", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_export_replay_state(&mut live.store, resource)
        });
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
        let json = to_json(item);
        let wit_ctx = self.context(ctx);
        let resource = binding.resource;
        let (result, returned) =
            self.call("run-replay-suffix", item_id(item), trace.take(), |live| {
                let guest = live.replay.as_ref().expect("a binding implies the export");
                guest.call_run_replay_suffix(&mut live.store, resource, &json, &wit_ctx)
            });
        *trace = returned;
        let text = result?.map_err(declared)?;
        parse_record(&text, self.max_output(), "the observation record")
    }

    /// After a successful prepare: capture the group's replay point at the
    /// head of its trace and, when the adapter exports its state, make the
    /// point durable. Returns the fields for the prefix record
    /// (`replay_point_id`, `replay_fidelity`, or `replay_capture_error`).
    pub(super) fn capture_group_point(
        &mut self,
        handle: &GroupHandle,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Map<String, Value>> {
        let mut lane = self.replay.take()?;
        let fields = self.capture_with(&mut lane, handle, seed, items, ctx);
        self.replay = Some(lane);
        fields
    }

    fn capture_with(
        &mut self,
        lane: &mut ReplayLane,
        handle: &GroupHandle,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Map<String, Value>> {
        let group_id = ctx.execution_group_id.clone()?;
        let mut trace = self
            .trace_for(ctx, &Item::new())
            .or_else(|| TraceLog::new(&group_id, "main").ok())?;
        let before = trace.next_sequence();
        let cursor = agent_cursor(trace.events(), &format!("{}\n{}", ctx.arm, group_id));
        let point_id = point_id_for(&ctx.arm, ctx.epoch, &group_id);
        let started = Instant::now();
        let captured = lane
            .registry
            .capture_at_head(self, &mut trace, cursor, &point_id, &group_id, None);
        let capture_minutes = started.elapsed().as_secs_f64() / 60.0;
        self.report_events(&trace, before, "capture-replay-state", item_id(seed));
        self.keep_group_trace(ctx, Some(trace));
        let mut fields = Map::new();
        let point = match captured {
            Ok(point) => point,
            Err(error) => {
                fields.insert("replay_capture_error".into(), error_block(&error));
                return Some(fields);
            }
        };
        let mut line = PointLine {
            point: point.clone(),
            arm: ctx.arm.clone(),
            epoch: ctx.epoch,
            execution_group_id: group_id,
            seed_item_id: item_id(seed).unwrap_or_default().to_string(),
            capture_minutes,
            durable_state: None,
            durable_error: None,
            quarantined: false,
            snapshot: None,
            snapshot_error: None,
            release_error: None,
        };
        // A group of one item has no child to fork: its snapshot would be
        // compiled for nothing. A snapshot is taken when the group's
        // children are first forked (`take_group_snapshot`), not here, so
        // its cost is not timed as prefix work; the snapshot is then the
        // point's durable form, and the export waits for its outcome.
        let snapshot_pending = lane.options.snapshots.is_some()
            && lane.options.child_workers > 0
            && items.len() > 1
            && lane.registry.binding(&point_id).is_some();
        let state = if snapshot_pending {
            None
        } else {
            self.export_point(lane, &point_id, items, &mut line)
        };
        fields.insert(
            "replay_point_id".into(),
            Value::from(point.replay_point_id.clone()),
        );
        fields.insert(
            "replay_fidelity".into(),
            Value::from(point.fidelity.as_str()),
        );
        *handle.point.borrow_mut() = Some(GroupPoint {
            id: point_id,
            line,
            state,
            snapshot: None,
            pending: snapshot_pending.then(|| items.to_vec()),
        });
        Some(fields)
    }

    /// Export point `point_id`'s state: written durable when the run keeps
    /// points, and returned when the group's children fork from it (by
    /// state transfer). Failures go to `line.durable_error`.
    pub(super) fn export_point(
        &mut self,
        lane: &ReplayLane,
        point_id: &str,
        items: &[Item],
        line: &mut PointLine,
    ) -> Option<Arc<Vec<u8>>> {
        let forks_children =
            lane.options.child_workers > 0 && self.loaded.indices.replay_children.is_some();
        let binding = *lane.registry.binding(point_id)?;
        if lane.options.store.is_none() && !forks_children {
            return None;
        }
        let max = self.max_output();
        match self.export_replay_state(&binding) {
            Ok(Some(bytes)) if bytes.len() > max => {
                line.durable_error = Some(format!(
                    "the exported state is {} bytes, over the limit of {max} (--max-output)",
                    bytes.len()
                ));
                None
            }
            Ok(Some(bytes)) => {
                if let Some(store) = &lane.options.store {
                    match store.write_state(point_id, &bytes, items) {
                        Ok(durable) => line.durable_state = Some(durable),
                        Err(error) => line.durable_error = Some(error.to_string()),
                    }
                }
                forks_children.then(|| Arc::new(bytes))
            }
            Ok(None) => None,
            Err(error) => {
                line.durable_error = Some(error.to_string());
                None
            }
        }
    }

    /// Run `item` as a suffix from its group's replay point. `None` when
    /// the group has no usable point (the caller runs it on the group).
    pub(super) fn run_from_group_point(
        &mut self,
        handle: &GroupHandle,
        item: &Item,
        ctx: &CallContext,
    ) -> Option<Result<Record, AdapterError>> {
        let point_id = handle
            .point
            .borrow()
            .as_ref()
            .map(|point| point.id.clone())?;
        let mut lane = self.replay.take()?;
        let usable = lane
            .registry
            .get(&point_id)
            .is_some_and(|point| point.lifecycle == sandloop_core::replay::Lifecycle::Ready)
            && lane
                .registry
                .binding(&point_id)
                .is_some_and(|binding| self.binding_alive(binding));
        if !usable {
            self.replay = Some(lane);
            return None;
        }
        // The suffix runs on its own branch, forked right after the point's
        // capture event: the group's main branch keeps only the prefix.
        let target = item_id(item).unwrap_or("suffix").to_string();
        let Some(point) = lane.registry.get(&point_id).cloned() else {
            self.replay = Some(lane);
            return None;
        };
        let mut trace = TraceLog::fork(
            &point.cursor.trace_id,
            &target,
            Some(&point.created_event_id),
            point.cursor.next_sequence + 1,
        )
        .ok();
        let first = point.cursor.next_sequence + 1;
        let minimum = lane.options.minimum_fidelity;
        let fidelity = Some(point.fidelity);
        let outcome =
            lane.registry
                .run_from(self, &point_id, &target, minimum, |adapter, binding, _| {
                    adapter.run_replay_suffix(binding, item, ctx, &mut trace)
                });
        let end = trace.as_ref().map_or(first, TraceLog::next_sequence);
        let (trace_id, branch_id) = trace
            .as_ref()
            .map(|log| (log.trace_id().to_string(), log.branch_id().to_string()))
            .unwrap_or_default();
        self.replay = Some(lane);
        let block = |restore: Option<&ReplayRestoreResult>, error: Option<&ReplayError>| {
            let mut block = restore
                .map(ReplayRestoreResult::to_record)
                .unwrap_or_default();
            block.insert("replay_point_id".into(), Value::from(point_id.clone()));
            block.insert(
                "fidelity".into(),
                fidelity.map_or(Value::Null, |f| Value::from(f.as_str())),
            );
            block.insert("trace_id".into(), Value::from(trace_id.clone()));
            block.insert("branch_id".into(), Value::from(branch_id.clone()));
            block.insert("first_sequence".into(), Value::from(first));
            block.insert("end_sequence".into(), Value::from(end));
            if let Some(error) = error {
                block.insert("error".into(), error_block(error));
            }
            Value::Object(block)
        };
        Some(match outcome {
            Ok((restore, mut record)) => {
                record.insert("replay".into(), block(Some(&restore), None));
                Ok(record)
            }
            Err(error) => {
                let mut failure = adapter_error_of(&error);
                let mut fields = Record::new();
                fields.insert(
                    "replay".into(),
                    block(error.restore.as_deref(), Some(&error)),
                );
                failure.record_fields = Some(Box::new(fields));
                Err(failure)
            }
        })
    }

    /// Release the group's replay point (retried once) and write its final
    /// record, with the release's failure (`release_error`) if it failed.
    /// Returns that failure when it also took the instance down (a trap in
    /// `release-replay-state` or in the binding's destructor): it is then
    /// the group release's own failure, since the group died with it.
    pub(super) fn release_group_point(&mut self, handle: &GroupHandle) -> Option<AdapterError> {
        let mut point = handle.point.borrow_mut().take()?;
        let mut lane = self.replay.take()?;
        let generation = self.generation;
        let was_live = self.live.is_some();
        let failed = |lane: &ReplayLane| {
            lane.registry
                .get(&point.id)
                .is_some_and(|p| p.lifecycle == sandloop_core::replay::Lifecycle::Failed)
        };
        point.line.quarantined = failed(&lane);
        let released = match lane.registry.release(self, &point.id) {
            Err(_) => lane.registry.release(self, &point.id),
            done => done,
        };
        let error = released.err();
        point.line.release_error = error.as_ref().map(error_block);
        point.line.quarantined |= failed(&lane);
        if let Some(current) = lane.registry.get(&point.id) {
            point.line.point = current.clone();
        }
        if let Some(store) = &lane.options.store {
            store.append_point(&point.line);
        }
        self.replay = Some(lane);
        let lost = was_live && (self.live.is_none() || self.generation != generation);
        error.filter(|_| lost).map(|error| adapter_error_of(&error))
    }
}

/// The `{stage, type, message}` block describing a replay failure.
pub(super) fn error_block(error: &ReplayError) -> Value {
    let message = match &error.cause {
        ReplayCause::Adapter(adapter) => &adapter.message,
        ReplayCause::Contract(message)
        | ReplayCause::Unavailable(message)
        | ReplayCause::AgentState(message)
        | ReplayCause::RiskDenied(message) => message,
    };
    json!({
        "stage": error.stage.as_str(),
        "type": error.cause.error_type(),
        "message": sandloop_core::episode::records::fold_error_message(message),
        "quarantined": error.quarantined,
        "also": error.also.as_ref().map(|also| also.to_string()),
    })
}

/// The error record's `adapter_error` for a failed replayed suffix: the
/// adapter's own error when the adapter failed, else `replay_contract`.
pub(super) fn adapter_error_of(error: &ReplayError) -> AdapterError {
    match &error.cause {
        ReplayCause::Adapter(adapter)
            if error.stage == sandloop_core::replay::ReplayStage::Suffix =>
        {
            let mut adapter = adapter.clone();
            if let Some(also) = &error.also {
                adapter.message = format!("{} (and {also})", adapter.message);
            }
            adapter
        }
        ReplayCause::Adapter(adapter) => AdapterError {
            message: format!(
                "replay {} failed: {}",
                error.stage.as_str(),
                adapter.message
            ),
            ..adapter.clone()
        },
        ReplayCause::RiskDenied(_) => AdapterError::new(ErrorType::RiskDenied, error.to_string()),
        _ => AdapterError::new(ErrorType::ReplayContract, error.to_string()),
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
        let (result, _) = self.call("capture-replay-state", None, None, |live| {
            let guest = live.replay.as_ref().expect("checked above");
            guest.call_capture_replay_state(&mut live.store, &request)
        });
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
        let (result, _) = self.call("restore-replay-state", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_restore_replay_state(&mut live.store, resource, &request)
        });
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
        let (result, _) = self.call("validate-replay-equivalence", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_validate_replay_equivalence(&mut live.store, resource, &receipt)
        });
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
        let (result, _) = self.call("finalize-replay-suffix", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_finalize_replay_suffix(&mut live.store, resource, &request, suffix_succeeded)
        });
        result?.map_err(declared)
    }

    fn release_replay_state(&mut self, binding: &BindingHandle) -> Result<(), AdapterError> {
        if !self.binding_alive(binding) {
            // The binding died with its instance: nothing is left to release.
            return Ok(());
        }
        let resource = binding.resource;
        let (result, _) = self.call("release-replay-state", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_release_replay_state(&mut live.store, resource)
        });
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
        .map_err(|error| ReplayError::adapter(sandloop_core::replay::ReplayStage::Import, error))?;
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
        .map_err(|error| ReplayError::adapter(sandloop_core::replay::ReplayStage::Import, error))?;
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
