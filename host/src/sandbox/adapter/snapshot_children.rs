//! Snapshot forks of a [`WasmAdapter`]'s replay points: right after a
//! point is captured, the parent instance — an instance of the
//! [instrumented](crate::sandbox::snapshot::Instrumented) component — is
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
//! `child-risk` policies are not applied: they assess the children
//! `replay-children` forks, which a snapshot child is not (`--fork auto`
//! therefore forks by state transfer whenever `replay-children` exists).
//! Its instance is then dropped whole; `finalize-replay-suffix` is not
//! called, since the working copy goes with the instance. The group runtime
//! (`run_child_group_from`) is the same as for state-transfer forks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Map, Value, json};
use wasmtime::component::ResourceAny;

use super::replay::{
    BindingHandle, receipt_from_wit, receipt_to_wit, report_from_wit, to_wit_fidelity,
};
use super::{WasmAdapter, declared, parse_record, to_json};
use crate::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use crate::replay::{
    ChildConcurrency, ChildForker, ChildLease, ChildSession, EquivalenceReport, ForkRequest,
    RestoreReceipt, RiskAssessment,
};
use crate::sandbox::bindings::exports::sandloop::adapter::replay as wit_replay;
use crate::sandbox::snapshot::{CompiledSnapshot, Instrumented};
use crate::trace::TraceLog;

/// Unique identity of every snapshot child of the process.
static NEXT_SNAPSHOT_CHILD: AtomicU64 = AtomicU64::new(1);

/// A replay point frozen as a compiled snapshot, with the token its
/// binding answers to in every child.
pub struct SnapshotPoint {
    /// The compiled snapshot children are instantiated from.
    pub compiled: CompiledSnapshot,
    /// What `binding-token` named the point's binding.
    pub token: u64,
    /// Size of the snapshot component, bytes.
    pub bytes: usize,
    /// Wall milliseconds to take the snapshot (accessor calls and rewrite).
    pub snapshot_ms: f64,
    /// Wall milliseconds to compile it (cache lookup included).
    pub compile_ms: f64,
}

impl SnapshotPoint {
    /// The public `snapshot` block of the point's line in
    /// `replay-points.jsonl`.
    pub fn to_record(&self) -> Value {
        json!({
            "sha256": self.compiled.sha256,
            "bytes": self.bytes,
            "snapshot_ms": self.snapshot_ms,
            "compile_ms": self.compile_ms,
        })
    }
}

impl WasmAdapter {
    /// Snapshot this (instrumented) instance right after `binding` was
    /// captured, and compile the snapshot. Errors say which step failed;
    /// the point is then forked by state transfer or run from in place.
    pub(super) fn snapshot_point(
        &mut self,
        instrumented: &Instrumented,
        binding: &BindingHandle,
    ) -> Result<SnapshotPoint, String> {
        if !self.binding_alive(binding) {
            return Err("the binding's instance is gone".into());
        }
        let resource = binding.resource();
        let (result, _) = self.call("binding-token", None, None, |live| {
            let guest = live.replay.as_ref().expect("a binding implies the export");
            guest.call_binding_token(&mut live.store, resource)
        });
        let token = result
            .map_err(|error| error.message)?
            .map_err(|error| declared(error).message)?
            .ok_or(
                "binding-token gave none: the adapter cannot resume this binding in a snapshot",
            )?;
        let live = self.live.as_mut().ok_or("the instance was dropped")?;
        let started = Instant::now();
        let snapshot = instrumented
            .snapshot(&mut live.store, &live.instance)
            .map_err(|error| error.to_string())?;
        let snapshot_ms = started.elapsed().as_secs_f64() * 1000.0;
        let started = Instant::now();
        let compiled = instrumented
            .compile_snapshot(&snapshot)
            .map_err(|error| error.to_string())?;
        Ok(SnapshotPoint {
            compiled,
            token,
            bytes: snapshot.bytes.len(),
            snapshot_ms,
            compile_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }
}

/// Forks children of one point from its compiled snapshot.
pub struct SnapshotForker<'a> {
    pub(super) parent: &'a WasmAdapter,
    pub(super) point: Arc<SnapshotPoint>,
    pub(super) ctx: CallContext,
    /// `(trace_id, created_event_id, next sequence after the capture)`.
    pub(super) fork_at: (String, String, u64),
}

/// One child: a fresh instance of the snapshot and its resumed binding.
pub struct SnapshotChild {
    adapter: WasmAdapter,
    binding: ResourceAny,
    child_id: String,
    ctx: CallContext,
    trace: Option<TraceLog>,
}

impl ChildForker for SnapshotForker<'_> {
    type Session = SnapshotChild;

    /// `child-risk` assesses the children `replay-children` forks (the
    /// adapter finds them by child id); a snapshot child is not one, so its
    /// intent and outcome are not screened.
    fn has_risk_policy(&self) -> bool {
        false
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<SnapshotChild>, AdapterError> {
        let identity = NEXT_SNAPSHOT_CHILD.fetch_add(1, Ordering::Relaxed);
        let mut adapter = WasmAdapter::new(
            Arc::clone(self.point.compiled.loaded()),
            format!("{}:child:{}", self.parent.branch_id, request.child_id),
            self.parent.observer.clone(),
        );
        adapter.epoch = self.ctx.epoch;
        let token = self.point.token;
        let (result, _) = adapter.call("resume-binding", Some(&request.child_id), None, |live| {
            let guest = live
                .replay
                .as_ref()
                .expect("snapshots are taken of replay adapters");
            guest.call_resume_binding(&mut live.store, token)
        });
        let binding = result?.map_err(declared)?;
        let restore = wit_replay::RestoreRequest {
            replay_point_id: request.replay_point_id.clone(),
            target_branch_id: request.target_branch_id.clone(),
            minimum_fidelity: to_wit_fidelity(request.minimum_fidelity),
        };
        let (result, _) = adapter.call(
            "restore-replay-state",
            Some(&request.child_id),
            None,
            |live| {
                let guest = live.replay.as_ref().expect("checked above");
                guest.call_restore_replay_state(&mut live.store, binding, &restore)
            },
        );
        let receipt = receipt_from_wit(result?.map_err(declared)?);
        let (trace_id, after, next) = &self.fork_at;
        Ok(ChildLease {
            receipt,
            // Every child is its own instance of the snapshot.
            concurrency: ChildConcurrency::ThreadSafe,
            worker_identity: Some(identity),
            child_key: identity,
            session: SnapshotChild {
                adapter,
                binding,
                child_id: request.child_id.clone(),
                ctx: self.ctx.clone(),
                trace: TraceLog::fork(trace_id, &request.target_branch_id, Some(after), *next).ok(),
            },
        })
    }
}

type Guests<'a> = (
    &'a wit_replay::Guest,
    &'a mut wasmtime::Store<crate::sandbox::host_state::HostState>,
);

impl SnapshotChild {
    /// Call `name` in the child's instance with its `replay` export.
    fn child_call<R>(
        &mut self,
        name: &'static str,
        traced: bool,
        body: impl FnOnce(Guests<'_>) -> wasmtime::Result<Result<R, wit_replay::AdapterError>>,
    ) -> Result<R, AdapterError> {
        self.adapter
            .child_call(name, &self.child_id, &mut self.trace, traced, |live| {
                let replay = live
                    .replay
                    .as_ref()
                    .expect("snapshots are taken of replay adapters");
                body((replay, &mut live.store))
            })
    }
}

/// The answer to a risk screen of a snapshot child, which the group
/// runtime never asks for ([`SnapshotForker`] declares no risk policy).
fn not_screened() -> AdapterError {
    AdapterError::new(
        ErrorType::InstanceLost,
        "child-risk policies assess replay-children children; a snapshot child is not screened",
    )
}

impl ChildSession for SnapshotChild {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let receipt = receipt_to_wit(receipt);
        let binding = self.binding;
        let report = self.child_call("validate-replay-equivalence", false, |(guest, store)| {
            guest.call_validate_replay_equivalence(store, binding, &receipt)
        })?;
        Ok(report_from_wit(report))
    }

    fn assess_intent(
        &mut self,
        _intent: &Map<String, Value>,
    ) -> Result<RiskAssessment, AdapterError> {
        Err(not_screened())
    }

    fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
        let json = to_json(task);
        let wit_ctx = self.adapter.context(&self.ctx);
        let binding = self.binding;
        let text = self.child_call("run-replay-suffix", true, |(guest, store)| {
            guest.call_run_replay_suffix(store, binding, &json, &wit_ctx)
        })?;
        parse_record(
            &text,
            self.adapter.max_output(),
            "the child's observation record",
        )
    }

    fn assess_outcome(
        &mut self,
        _intent: &Map<String, Value>,
        _outcome: &Record,
    ) -> Result<RiskAssessment, AdapterError> {
        Err(not_screened())
    }

    fn trace_end(&self) -> Option<u64> {
        self.trace.as_ref().map(TraceLog::next_sequence)
    }

    fn release(&mut self) -> Result<(), AdapterError> {
        // The child's copy of the parent's memory goes with its instance,
        // which is dropped with the session: nothing is left to release.
        self.adapter.live = None;
        Ok(())
    }
}
