//! The replay-point registry: binds a frozen trace cursor to agent state and
//! adapter state atomically, selects the point to replay from, restores it
//! under the equivalence contract, runs one suffix, and releases. Mirrors
//! `ReplayPointRegistry` in the reference's `replay_runtime.py`.
//!
//! A registry belongs to one adapter instance (a binding lives in that
//! instance's store) and every operation takes `&mut self`: the reference's
//! per-point replay lock is the borrow checker here, and a cursor cannot
//! move while a point is captured because capture holds `&mut TraceLog`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::agent_state::AgentStateStore;
pub use super::error::{ReplayCause, ReplayError, ReplayStage};
use super::fidelity::Fidelity;
use super::metrics::{ReplayCount, ReplayMetricLedger, ReplayMinutes};
use super::point::{
    AgentCursor, CaptureRequest, EquivalenceReport, Lifecycle, ReplayPoint, ReplayRestoreResult,
    RestoreReceipt, RestoreRequest, StateLease, TraceCursor, validate_equivalence_contract,
};
use crate::episode::adapter::AdapterError;
use crate::trace::{TraceEvent, TraceEventKind, TraceLog};

/// What the registry needs from an adapter (reference `ReplayAdapterV2`
/// plus `finalize_replay_suffix`). Implemented by the sandboxed component
/// and by native test doubles.
pub trait ReplayAdapter {
    /// The adapter's runtime handle of one captured state.
    type Binding;
    /// Capture the state of `request.execution_group_id` at the cursor.
    fn capture_replay_state(
        &mut self,
        request: &CaptureRequest,
    ) -> Result<StateLease<Self::Binding>, AdapterError>;
    /// Restore `binding`'s state for one suffix.
    fn restore_replay_state(
        &mut self,
        binding: &Self::Binding,
        request: &RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError>;
    /// Compare the restored state with the captured one.
    fn validate_replay_equivalence(
        &mut self,
        binding: &Self::Binding,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError>;
    /// Close a suffix, successful or not.
    fn finalize_replay_suffix(
        &mut self,
        binding: &Self::Binding,
        request: &RestoreRequest,
        suffix_succeeded: bool,
    ) -> Result<(), AdapterError>;
    /// Release what `binding` holds; may be retried after an error.
    fn release_replay_state(&mut self, binding: &Self::Binding) -> Result<(), AdapterError>;
    /// Drop the handle after a successful release (a no-op by default).
    ///
    /// Errors: the adapter's own cleanup of the handle failed (for a
    /// component, the guest's destructor trapped). The handle is gone
    /// either way; the registry records the failure as that release's.
    fn discard_binding(&mut self, binding: Self::Binding) -> Result<(), AdapterError> {
        let _ = binding;
        Ok(())
    }
}

/// Quarantine `point` (`lifecycle = failed`), counted once in
/// `replay_point_quarantine_count`.
fn quarantine(point: &mut ReplayPoint, metrics: &ReplayMetricLedger) {
    if point.lifecycle != Lifecycle::Failed {
        point.lifecycle = Lifecycle::Failed;
        metrics.increment(ReplayCount::ReplayPointQuarantine);
    }
}

/// A lookup error unless `point` is ready (`before` names what needs it).
fn require_ready(point: &ReplayPoint, before: &str) -> Result<(), ReplayError> {
    if point.lifecycle == Lifecycle::Ready {
        return Ok(());
    }
    Err(ReplayError::unavailable(format!(
        "the replay point must be ready before {before}, but it is {}",
        point.lifecycle.as_str()
    )))
}

/// Which rule chose a point (see [`select_before`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// No point met the requested fidelity; the nearest weaker one was
    /// taken (an observed-only replay).
    pub fidelity_fallback: bool,
    /// A nearer point was skipped because its fidelity was too weak.
    pub fidelity_filtered: bool,
}

impl Selection {
    /// Count one selection in `metrics` (reference `select_before`): a
    /// `replay_point_selection_count`, and its fidelity fallback or
    /// filtering.
    pub fn count(&self, metrics: &ReplayMetricLedger) {
        metrics.increment(ReplayCount::ReplayPointSelection);
        if self.fidelity_fallback {
            metrics.increment(ReplayCount::ReplayPointFidelityFallback);
        } else if self.fidelity_filtered {
            metrics.increment(ReplayCount::ReplayPointFidelityFilteredSelection);
        }
    }
}

/// The nearest ready, replayable point of `trace_id`/`branch_id` at or
/// before `first_affected_sequence`, preferring points that meet `minimum`
/// (reference `select_before`). Non-replayable markers are never chosen.
/// `None` when no point qualifies.
pub fn select_before<'a>(
    points: impl IntoIterator<Item = &'a ReplayPoint>,
    trace_id: &str,
    branch_id: &str,
    first_affected_sequence: u64,
    minimum: Fidelity,
) -> Option<(&'a ReplayPoint, Selection)> {
    let candidates: Vec<&ReplayPoint> = points
        .into_iter()
        .filter(|point| {
            point.lifecycle == Lifecycle::Ready
                && point.cursor.trace_id == trace_id
                && point.cursor.branch_id == branch_id
                && point.cursor.next_sequence <= first_affected_sequence
                && point.fidelity != Fidelity::NonReplayable
        })
        .collect();
    let nearest = |pool: &[&'a ReplayPoint]| {
        pool.iter()
            .copied()
            .max_by_key(|point| point.cursor.next_sequence)
    };
    let trusted: Vec<&ReplayPoint> = candidates
        .iter()
        .copied()
        .filter(|point| point.fidelity.meets(minimum))
        .collect();
    if trusted.is_empty() {
        let selected = nearest(&candidates)?;
        return Some((
            selected,
            Selection {
                fidelity_fallback: true,
                fidelity_filtered: false,
            },
        ));
    }
    let selected = nearest(&trusted)?;
    let filtered = candidates.iter().any(|point| {
        point.cursor.next_sequence > selected.cursor.next_sequence && !point.fidelity.meets(minimum)
    });
    Some((
        selected,
        Selection {
            fidelity_fallback: false,
            fidelity_filtered: filtered,
        },
    ))
}

struct Entry<B, K> {
    point: ReplayPoint,
    agent_state_key: K,
    binding: Option<B>,
    agent_released: bool,
    adapter_released: bool,
    /// Dropping the binding after its release failed: the point stays
    /// `failed` and every later release repeats this error.
    drop_error: Option<ReplayError>,
}

/// Replay points of one adapter instance, with their runtime bindings.
pub struct ReplayPointRegistry<B, S: AgentStateStore> {
    entries: Vec<Entry<B, S::Key>>,
    index: HashMap<String, usize>,
    store: S,
    metrics: Arc<ReplayMetricLedger>,
}

fn minutes_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() / 60.0
}

/// Restore `binding` for `request` and check the receipt against the point
/// (not `non_replayable`, no better than captured, a digest that is not
/// blank), counting the attempt and its minutes. Returns the receipt and the
/// restore's minutes.
fn restore_checked<A: ReplayAdapter>(
    adapter: &mut A,
    binding: &A::Binding,
    point: &ReplayPoint,
    request: &RestoreRequest,
    metrics: &ReplayMetricLedger,
) -> Result<(RestoreReceipt, f64), ReplayError> {
    let restore_started = Instant::now();
    metrics.increment(ReplayCount::RestoreAttempt);
    let receipt = adapter
        .restore_replay_state(binding, request)
        .map_err(|error| ReplayError::adapter(ReplayStage::Restore, error))
        .and_then(|receipt| {
            if receipt.achieved_fidelity == Fidelity::NonReplayable {
                Err(ReplayError::contract(
                    ReplayStage::Restore,
                    "the adapter reported non_replayable while restoring a replay point",
                ))
            } else if !point.fidelity.meets(receipt.achieved_fidelity) {
                Err(ReplayError::contract(
                    ReplayStage::Restore,
                    format!(
                        "the restore claims {} but the point was captured at {}",
                        receipt.achieved_fidelity, point.fidelity
                    ),
                ))
            } else if receipt
                .restored_projection_digest
                .as_deref()
                .is_some_and(|digest| digest.trim().is_empty())
            {
                Err(ReplayError::contract(
                    ReplayStage::Restore,
                    "restored_projection_digest must be non-empty",
                ))
            } else {
                Ok(receipt)
            }
        });
    let restore_minutes = minutes_since(restore_started);
    metrics.add_duration(ReplayMinutes::Restore, restore_started.elapsed());
    match receipt {
        Ok(receipt) => {
            metrics.increment(ReplayCount::RestoreSuccess);
            metrics.increment(match receipt.prefix_reused {
                Some(true) => ReplayCount::PrefixReuseVerified,
                Some(false) => ReplayCount::PrefixReconstruction,
                None => ReplayCount::PrefixReuseUnknown,
            });
            Ok((receipt, restore_minutes))
        }
        Err(error) => {
            metrics.increment(ReplayCount::RestoreFailure);
            Err(error)
        }
    }
}

/// Ask the adapter for its equivalence report on `receipt` and hold it to
/// the contract for `minimum`, counting the attempt, its minutes and whether
/// it was verified. Returns the report, whether the restore is eligible for
/// promotion, and the check's minutes.
fn check_equivalence<A: ReplayAdapter>(
    adapter: &mut A,
    binding: &A::Binding,
    point: &ReplayPoint,
    receipt: &RestoreReceipt,
    minimum: Fidelity,
    metrics: &ReplayMetricLedger,
) -> Result<(EquivalenceReport, bool, f64), ReplayError> {
    let equivalence_started = Instant::now();
    metrics.increment(ReplayCount::EquivalenceAttempt);
    let checked = adapter
        .validate_replay_equivalence(binding, receipt)
        .map_err(|error| ReplayError::adapter(ReplayStage::Equivalence, error))
        .and_then(|report| {
            validate_equivalence_contract(point, receipt, &report, minimum)
                .map(|eligible| (report, eligible))
                .map_err(|message| ReplayError::contract(ReplayStage::Equivalence, message))
        });
    let equivalence_minutes = minutes_since(equivalence_started);
    metrics.add_duration(ReplayMinutes::Equivalence, equivalence_started.elapsed());
    let (report, promotion_eligible) = match checked {
        Ok(checked) => checked,
        Err(error) => {
            metrics.increment(ReplayCount::EquivalenceFailure);
            return Err(error);
        }
    };
    metrics.increment(
        if report.equivalent && report.achieved_fidelity.is_trusted() {
            ReplayCount::EquivalenceVerified
        } else {
            ReplayCount::EquivalenceUnverified
        },
    );
    Ok((report, promotion_eligible, equivalence_minutes))
}

impl<B, S: AgentStateStore> ReplayPointRegistry<B, S> {
    /// An empty registry keeping agent state in `store` and counting into
    /// `metrics` (shared by every registry of a run).
    pub fn new(store: S, metrics: Arc<ReplayMetricLedger>) -> Self {
        Self {
            entries: Vec::new(),
            index: HashMap::new(),
            store,
            metrics,
        }
    }

    /// The shared metric ledger.
    pub fn metrics(&self) -> &Arc<ReplayMetricLedger> {
        &self.metrics
    }

    /// The agent-state store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The point `replay_point_id`, if known.
    pub fn get(&self, replay_point_id: &str) -> Option<&ReplayPoint> {
        self.index
            .get(replay_point_id)
            .map(|&slot| &self.entries[slot].point)
    }

    /// Every point, in capture order.
    pub fn points(&self) -> impl Iterator<Item = &ReplayPoint> {
        self.entries.iter().map(|entry| &entry.point)
    }

    /// Points not yet released, bindings not yet released, and quarantined
    /// points (reference `metrics()` extras).
    pub fn gauges(&self) -> (usize, usize, usize) {
        let active = self
            .entries
            .iter()
            .filter(|entry| entry.point.lifecycle != Lifecycle::Released)
            .count();
        let bindings = self
            .entries
            .iter()
            .filter(|entry| !entry.adapter_released)
            .count();
        let failed = self
            .entries
            .iter()
            .filter(|entry| entry.point.lifecycle == Lifecycle::Failed)
            .count();
        (active, bindings, failed)
    }

    /// Where `replay_point_id`'s entry is; unknown ids are a lookup error.
    fn slot(&self, replay_point_id: &str) -> Result<usize, ReplayError> {
        self.index.get(replay_point_id).copied().ok_or_else(|| {
            ReplayError::unavailable(format!("unknown replay point {replay_point_id:?}"))
        })
    }

    /// Capture a point at `trace`'s head: agent state and adapter state are
    /// bound together, a `replay_point_captured` lifecycle event is
    /// appended, and the point is `ready` (reference `capture_at_head`).
    ///
    /// `replaces` names a released point this one replaces: it must be in
    /// the same trace, on another branch, and the projections must match.
    /// On any failure nothing remains: what was taken is released
    /// (compensation), no event is appended and no point is registered.
    pub fn capture_at_head<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        trace: &mut TraceLog,
        agent_cursor: AgentCursor,
        replay_point_id: &str,
        execution_group_id: &str,
        replaces: Option<&str>,
    ) -> Result<ReplayPoint, ReplayError> {
        let started = Instant::now();
        let metrics = Arc::clone(&self.metrics);
        metrics.increment(ReplayCount::CaptureAttempt);
        if replaces.is_some() {
            metrics.increment(ReplayCount::ReplacementCaptureAttempt);
        }
        let result = self.capture_inner(
            adapter,
            trace,
            agent_cursor,
            replay_point_id,
            execution_group_id,
            replaces,
        );
        match &result {
            Ok(_) => {
                metrics.increment(ReplayCount::CaptureSuccess);
                if replaces.is_some() {
                    metrics.increment(ReplayCount::ReplacementCaptureSuccess);
                }
            }
            Err(_) => {
                metrics.increment(ReplayCount::CaptureFailure);
                if replaces.is_some() {
                    metrics.increment(ReplayCount::ReplacementCaptureFailure);
                }
            }
        }
        metrics.add_duration(ReplayMinutes::Capture, started.elapsed());
        result
    }

    fn capture_inner<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        trace: &mut TraceLog,
        agent_cursor: AgentCursor,
        replay_point_id: &str,
        execution_group_id: &str,
        replaces: Option<&str>,
    ) -> Result<ReplayPoint, ReplayError> {
        let capture = ReplayStage::Capture;
        let replay_point_id = replay_point_id.trim();
        if replay_point_id.is_empty() {
            return Err(ReplayError::contract(
                capture,
                "replay_point_id must be non-empty",
            ));
        }
        if self.index.contains_key(replay_point_id) {
            return Err(ReplayError::contract(
                capture,
                format!("replay_point_id is duplicated: {replay_point_id:?}"),
            ));
        }
        let cursor = TraceCursor {
            trace_id: trace.trace_id().to_string(),
            branch_id: trace.branch_id().to_string(),
            after_event_id: trace.head().map(str::to_string),
            next_sequence: trace.next_sequence(),
            agent_cursor,
        };
        let replaced = match replaces {
            None => None,
            Some(id) => {
                let point = self.get(id).ok_or_else(|| {
                    ReplayError::contract(capture, format!("unknown replaced replay point {id:?}"))
                })?;
                if point.lifecycle != Lifecycle::Released {
                    return Err(ReplayError::contract(
                        capture,
                        "a replacement replay point needs the replaced point to be released",
                    ));
                }
                if point.cursor.trace_id != cursor.trace_id {
                    return Err(ReplayError::contract(
                        capture,
                        "a replacement replay point must stay in the same trace",
                    ));
                }
                if point.cursor.branch_id == cursor.branch_id {
                    return Err(ReplayError::contract(
                        capture,
                        "a replacement replay point must be captured on a new branch",
                    ));
                }
                Some(point.captured_projection_digest.clone())
            }
        };

        let agent_state_key = self
            .store
            .capture_agent_state(&cursor)
            .map_err(|message| ReplayError::new(capture, ReplayCause::AgentState(message)))?;
        let request = CaptureRequest {
            replay_point_id: replay_point_id.to_string(),
            trace_id: cursor.trace_id.clone(),
            branch_id: cursor.branch_id.clone(),
            after_event_id: cursor.after_event_id.clone(),
            next_sequence: cursor.next_sequence,
            execution_group_id: execution_group_id.to_string(),
        };
        let lease = match adapter.capture_replay_state(&request) {
            Ok(lease) => lease,
            Err(error) => {
                let failure = ReplayError::adapter(capture, error);
                return Err(self.compensate(adapter, failure, None, &agent_state_key));
            }
        };
        let bound = self.bind(&cursor, replay_point_id, replaces, replaced, lease, trace);
        match bound {
            Ok((point, binding)) => {
                let adapter_released = binding.is_none();
                self.index
                    .insert(replay_point_id.to_string(), self.entries.len());
                self.entries.push(Entry {
                    point: point.clone(),
                    agent_state_key,
                    binding,
                    agent_released: false,
                    adapter_released,
                    drop_error: None,
                });
                Ok(point)
            }
            Err((failure, binding)) => {
                Err(self.compensate(adapter, failure, binding, &agent_state_key))
            }
        }
    }

    /// Check a lease against the replacement rules and append the point's
    /// lifecycle event; on failure hand the binding back for compensation.
    #[allow(clippy::type_complexity)]
    fn bind(
        &self,
        cursor: &TraceCursor,
        replay_point_id: &str,
        replaces: Option<&str>,
        replaced_digest: Option<Option<String>>,
        lease: StateLease<B>,
        trace: &mut TraceLog,
    ) -> Result<(ReplayPoint, Option<B>), (ReplayError, Option<B>)> {
        let capture = ReplayStage::Capture;
        if let Err(message) = lease.check() {
            return Err((ReplayError::contract(capture, message), lease.binding));
        }
        if let (Some(Some(released)), Some(captured)) = (&replaced_digest, &lease.projection_digest)
            && released != captured
        {
            self.metrics
                .increment(ReplayCount::ReplacementProjectionMismatch);
            return Err((
                ReplayError::contract(
                    capture,
                    "the replacement replay point's projection does not match the released point",
                ),
                lease.binding,
            ));
        }
        let event_id = format!(
            "{}/{}/{}",
            cursor.trace_id, cursor.branch_id, cursor.next_sequence
        );
        let event = TraceEvent {
            event_id: event_id.clone(),
            trace_id: cursor.trace_id.clone(),
            branch_id: cursor.branch_id.clone(),
            sequence: cursor.next_sequence,
            parent_event_id: cursor.after_event_id.clone(),
            kind: TraceEventKind::Lifecycle,
            action_id: None,
            causation_id: None,
            replay_point_id: Some(replay_point_id.to_string()),
            public_payload: json!({
                "operation": "replay_point_captured",
                "fidelity": lease.fidelity.as_str(),
                "cursor_sequence": cursor.next_sequence,
                "replaces_replay_point_id": replaces,
            }),
        };
        if let Err(error) = trace.append(event) {
            return Err((
                ReplayError::contract(capture, format!("cannot append the capture event: {error}")),
                lease.binding,
            ));
        }
        let point = ReplayPoint {
            replay_point_id: replay_point_id.to_string(),
            cursor: cursor.clone(),
            fidelity: lease.fidelity,
            captured_projection_digest: lease.projection_digest,
            lifecycle: Lifecycle::Ready,
            created_event_id: event_id,
            replaces_replay_point_id: replaces.map(str::to_string),
        };
        Ok((point, lease.binding))
    }

    /// Release what a failed capture took; a failed release is counted as
    /// an orphan and rides along with the original error.
    fn compensate<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        failure: ReplayError,
        binding: Option<B>,
        agent_state_key: &S::Key,
    ) -> ReplayError {
        self.metrics.increment(ReplayCount::CaptureCompensation);
        let mut cleanup: Option<ReplayError> = None;
        if let Some(binding) = binding {
            match adapter.release_replay_state(&binding) {
                Ok(()) => {
                    if let Err(error) = adapter.discard_binding(binding) {
                        cleanup = Some(ReplayError::adapter(ReplayStage::Release, error));
                    }
                }
                Err(error) => {
                    self.metrics.increment(ReplayCount::OrphanedAdapterBinding);
                    cleanup = Some(ReplayError::adapter(ReplayStage::Release, error));
                }
            }
        }
        if let Err(message) = self.store.release_agent_state(agent_state_key) {
            self.metrics.increment(ReplayCount::OrphanedAgentState);
            cleanup.get_or_insert(ReplayError::new(
                ReplayStage::Release,
                ReplayCause::AgentState(message),
            ));
        }
        if cleanup.is_some() {
            self.metrics
                .increment(ReplayCount::CaptureCompensationFailure);
        }
        failure.also(cleanup)
    }

    /// Register a point rebuilt from a durable state (another process
    /// captured it): `lease` came from the adapter's import and must repeat
    /// the recorded fidelity and projection digest; the point becomes
    /// `ready` in this registry. On a mismatch the lease is released and
    /// nothing is registered.
    pub fn adopt<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        recorded: &ReplayPoint,
        lease: StateLease<B>,
    ) -> Result<ReplayPoint, ReplayError> {
        let capture = ReplayStage::Import;
        let mismatch = if let Err(message) = lease.check() {
            Some(message)
        } else if lease.fidelity != recorded.fidelity {
            Some(format!(
                "the imported state has fidelity {} but the point was captured at {}",
                lease.fidelity, recorded.fidelity
            ))
        } else if lease.projection_digest != recorded.captured_projection_digest {
            Some("the imported state's projection digest differs from the captured one".into())
        } else if self.index.contains_key(&recorded.replay_point_id) {
            Some(format!(
                "replay_point_id is duplicated: {:?}",
                recorded.replay_point_id
            ))
        } else {
            None
        };
        let agent_state_key = self
            .store
            .capture_agent_state(&recorded.cursor)
            .map_err(|message| ReplayError::new(capture, ReplayCause::AgentState(message)))?;
        if let Some(message) = mismatch {
            let failure = ReplayError::contract(capture, message);
            return Err(self.compensate(adapter, failure, lease.binding, &agent_state_key));
        }
        let mut point = recorded.clone();
        point.lifecycle = Lifecycle::Ready;
        self.index
            .insert(point.replay_point_id.clone(), self.entries.len());
        self.entries.push(Entry {
            point: point.clone(),
            agent_state_key,
            binding: lease.binding,
            agent_released: false,
            adapter_released: false,
            drop_error: None,
        });
        Ok(point)
    }

    /// [`select_before`] over this registry's points, counting the
    /// selection and its fidelity fallback or filtering.
    pub fn select_before(
        &self,
        trace_id: &str,
        branch_id: &str,
        first_affected_sequence: u64,
        minimum: Fidelity,
    ) -> Result<&ReplayPoint, ReplayError> {
        let (point, selection) = select_before(
            self.points(),
            trace_id,
            branch_id,
            first_affected_sequence,
            minimum,
        )
        .ok_or_else(|| {
            ReplayError::unavailable("no replayable replay point exists before the affected event")
        })?;
        selection.count(&self.metrics);
        Ok(point)
    }

    /// Restore `replay_point_id` for branch `target_branch_id` and run one
    /// suffix with `execute` (reference `run_from`).
    ///
    /// Order: restore (the receipt may not be `non_replayable` nor claim
    /// more than the captured fidelity), validate equivalence under
    /// `validate_equivalence_contract`, restore the agent state, run the
    /// suffix, then always finalise it. A failed finalisation quarantines
    /// the point (`lifecycle = failed`). Every counter and minute total of
    /// the ledger is kept. The error of a failed suffix carries the restore
    /// result it ran on.
    pub fn run_from<A, T>(
        &mut self,
        adapter: &mut A,
        replay_point_id: &str,
        target_branch_id: &str,
        minimum: Fidelity,
        execute: impl FnOnce(&mut A, &B, &ReplayRestoreResult) -> Result<T, AdapterError>,
    ) -> Result<(ReplayRestoreResult, T), ReplayError>
    where
        A: ReplayAdapter<Binding = B>,
    {
        let started = Instant::now();
        let metrics = Arc::clone(&self.metrics);
        metrics.increment(ReplayCount::ReplayAttempt);
        let result = self.run_from_inner(
            adapter,
            replay_point_id,
            target_branch_id,
            minimum,
            started,
            execute,
        );
        metrics.increment(if result.is_ok() {
            ReplayCount::ReplaySuccess
        } else {
            ReplayCount::ReplayFailure
        });
        metrics.add_duration(ReplayMinutes::ReplayWall, started.elapsed());
        result
    }

    fn run_from_inner<A, T>(
        &mut self,
        adapter: &mut A,
        replay_point_id: &str,
        target_branch_id: &str,
        minimum: Fidelity,
        started: Instant,
        execute: impl FnOnce(&mut A, &B, &ReplayRestoreResult) -> Result<T, AdapterError>,
    ) -> Result<(ReplayRestoreResult, T), ReplayError>
    where
        A: ReplayAdapter<Binding = B>,
    {
        let target_branch_id = target_branch_id.trim();
        if target_branch_id.is_empty() {
            return Err(ReplayError::unavailable(
                "target_branch_id must be non-empty",
            ));
        }
        let metrics = Arc::clone(&self.metrics);
        let slot = self.slot(replay_point_id)?;
        let Self { entries, store, .. } = self;
        let entry = &mut entries[slot];
        require_ready(&entry.point, "a restore")?;
        if entry.point.fidelity == Fidelity::NonReplayable {
            return Err(ReplayError::unavailable(
                "a non_replayable replay point cannot be restored",
            ));
        }
        let Some(binding) = entry.binding.as_ref() else {
            return Err(ReplayError::unavailable(
                "the replayable replay point has no adapter binding",
            ));
        };
        let request = RestoreRequest {
            replay_point_id: replay_point_id.to_string(),
            target_branch_id: target_branch_id.to_string(),
            minimum_fidelity: minimum,
        };

        let (receipt, restore_minutes) =
            restore_checked(adapter, binding, &entry.point, &request, &metrics)?;
        let (report, promotion_eligible, equivalence_minutes) =
            check_equivalence(adapter, binding, &entry.point, &receipt, minimum, &metrics)?;
        metrics.observe_fidelity(report.achieved_fidelity.as_str());
        store
            .restore_agent_state(&entry.agent_state_key)
            .map_err(|message| {
                ReplayError::new(ReplayStage::Restore, ReplayCause::AgentState(message))
            })?;
        let mut restore = ReplayRestoreResult {
            replay_point_id: replay_point_id.to_string(),
            target_branch_id: target_branch_id.to_string(),
            achieved_fidelity: report.achieved_fidelity,
            equivalent: report.equivalent,
            promotion_eligible,
            prefix_reused: receipt.prefix_reused,
            report,
            restore_minutes,
            equivalence_minutes,
            suffix_minutes: 0.0,
            replay_wall_minutes: 0.0,
        };

        // Suffix, then finalisation whatever happened.
        let suffix_started = Instant::now();
        metrics.increment(ReplayCount::SuffixAttempt);
        let outcome = execute(adapter, binding, &restore);
        metrics.increment(ReplayCount::SuffixFinalizationAttempt);
        let finalized = adapter.finalize_replay_suffix(binding, &request, outcome.is_ok());
        match &finalized {
            Ok(()) => metrics.increment(ReplayCount::SuffixFinalizationSuccess),
            Err(_) => metrics.increment(ReplayCount::SuffixFinalizationFailure),
        }
        restore.suffix_minutes = minutes_since(suffix_started);
        metrics.add_duration(ReplayMinutes::Suffix, suffix_started.elapsed());
        restore.replay_wall_minutes = minutes_since(started);
        let finalize_error = finalized
            .err()
            .map(|error| ReplayError::adapter(ReplayStage::Finalize, error));
        let quarantined = finalize_error.is_some();
        if quarantined {
            quarantine(&mut entry.point, &metrics);
        }
        let failure = match (outcome, finalize_error) {
            (Ok(outcome), None) => {
                metrics.increment(ReplayCount::SuffixSuccess);
                return Ok((restore, outcome));
            }
            (Ok(_), Some(finalize)) => finalize,
            (Err(error), finalize) => {
                ReplayError::adapter(ReplayStage::Suffix, error).also(finalize)
            }
        };
        metrics.increment(ReplayCount::SuffixFailure);
        Err(ReplayError {
            quarantined,
            restore: Some(Box::new(restore)),
            ..failure
        })
    }

    /// Release `replay_point_id` (reference `release`): the adapter binding
    /// and the agent state are each released once, however often this is
    /// retried; the point ends `released`, or `failed` while either part
    /// could not be released. Releasing a released point succeeds. When
    /// dropping the binding fails after the adapter released it (a guest
    /// destructor that traps), the point stays `failed` and every release
    /// returns that error: there is nothing left to retry.
    pub fn release<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        replay_point_id: &str,
    ) -> Result<ReplayPoint, ReplayError> {
        let started = Instant::now();
        let metrics = Arc::clone(&self.metrics);
        metrics.increment(ReplayCount::ReleaseAttempt);
        let result = self.release_inner(adapter, replay_point_id);
        metrics.increment(if result.is_ok() {
            ReplayCount::ReleaseSuccess
        } else {
            ReplayCount::ReleaseFailure
        });
        metrics.add_duration(ReplayMinutes::Release, started.elapsed());
        result
    }

    fn release_inner<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        replay_point_id: &str,
    ) -> Result<ReplayPoint, ReplayError> {
        let release = ReplayStage::Release;
        let slot = self.slot(replay_point_id)?;
        let Self { entries, store, .. } = self;
        let entry = &mut entries[slot];
        if entry.point.lifecycle == Lifecycle::Released {
            return Ok(entry.point.clone());
        }
        entry.point.lifecycle = Lifecycle::Releasing;
        let mut adapter_error = entry.drop_error.clone();
        if !entry.adapter_released
            && let Some(binding) = entry.binding.as_ref()
        {
            match adapter.release_replay_state(binding) {
                Ok(()) => {
                    entry.adapter_released = true;
                    if let Some(binding) = entry.binding.take()
                        && let Err(error) = adapter.discard_binding(binding)
                    {
                        let error = ReplayError::adapter(release, error);
                        entry.drop_error = Some(error.clone());
                        adapter_error = Some(error);
                    }
                }
                Err(error) => adapter_error = Some(ReplayError::adapter(release, error)),
            }
        }
        let mut agent_error = None;
        if !entry.agent_released {
            match store.release_agent_state(&entry.agent_state_key) {
                Ok(()) => entry.agent_released = true,
                Err(message) => {
                    agent_error = Some(ReplayError::new(release, ReplayCause::AgentState(message)))
                }
            }
        }
        entry.point.lifecycle =
            if entry.adapter_released && entry.agent_released && entry.drop_error.is_none() {
                Lifecycle::Released
            } else {
                Lifecycle::Failed
            };
        match (adapter_error, agent_error) {
            (None, None) => Ok(entry.point.clone()),
            (Some(adapter), agent) => Err(adapter.also(agent)),
            (None, Some(agent)) => Err(agent),
        }
    }

    /// Borrow the binding of a ready point (e.g. to export its state).
    pub fn binding(&self, replay_point_id: &str) -> Option<&B> {
        let slot = *self.index.get(replay_point_id)?;
        self.entries[slot].binding.as_ref()
    }
}

#[path = "children.rs"]
mod children;
pub use children::{
    ChildConcurrency, ChildFailure, ChildFailureStage, ChildForker, ChildLease, ChildOutcome,
    ChildResult, ChildSession, ChildTask, ConcurrentForker, CounterfactualRequest, Disposition,
    ForkRequest, RISK_DENIED, RiskAssessment, RiskAssessmentRules, SerialChildGroup,
    ValidationOutcome, judge_replay_intent, run_parallel, run_parallel_at_home,
};

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
