//! The reference's replay-point scenarios, ported against a native test
//! adapter whose every answer can be bent.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::episode::adapter::ErrorType;
use crate::replay::agent_state::{MemoryAgentStateStore, agent_cursor};
use crate::replay::point::EquivalenceCheck;

/// A native replay adapter: bindings are numbers, state is a digest.
#[derive(Default)]
struct Fake {
    next: u32,
    live: HashSet<u32>,
    capture_fidelity: Option<Fidelity>,
    capture_fails: bool,
    lie_binding_on_marker: bool,
    projection: Option<String>,
    restore_fails: bool,
    restore_claims: Option<Fidelity>,
    report_override: Option<EquivalenceReport>,
    finalize_fails: bool,
    release_failures_left: u32,
    finalized_with: Vec<bool>,
    release_calls: u32,
    /// Dropping a released binding fails (a guest destructor that traps).
    drop_traps: bool,
    discarded: Vec<u32>,
}

fn adapter_error(message: &str) -> AdapterError {
    AdapterError::declared("fake", message, false)
}

impl Fake {
    fn fidelity(&self) -> Fidelity {
        self.capture_fidelity.unwrap_or(Fidelity::Exact)
    }
    fn digest(&self) -> Option<String> {
        self.projection.clone().or(Some("digest-a".into()))
    }
}

impl ReplayAdapter for Fake {
    type Binding = u32;

    fn capture_replay_state(
        &mut self,
        _: &CaptureRequest,
    ) -> Result<StateLease<u32>, AdapterError> {
        if self.capture_fails {
            return Err(adapter_error("capture refused"));
        }
        let fidelity = self.fidelity();
        let binding = if fidelity == Fidelity::NonReplayable && !self.lie_binding_on_marker {
            None
        } else {
            self.next += 1;
            self.live.insert(self.next);
            Some(self.next)
        };
        Ok(StateLease {
            binding,
            fidelity,
            projection_digest: self.digest(),
        })
    }

    fn restore_replay_state(
        &mut self,
        _: &u32,
        _: &RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError> {
        if self.restore_fails {
            return Err(adapter_error("restore refused"));
        }
        Ok(RestoreReceipt {
            achieved_fidelity: self.restore_claims.unwrap_or(self.fidelity()),
            restored_projection_digest: self.digest(),
            prefix_reused: Some(true),
        })
    }

    fn validate_replay_equivalence(
        &mut self,
        _: &u32,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        if let Some(report) = &self.report_override {
            return Ok(report.clone());
        }
        let trusted = receipt.achieved_fidelity.is_trusted();
        Ok(EquivalenceReport {
            achieved_fidelity: receipt.achieved_fidelity,
            equivalent: trusted,
            expected_digest: self.digest(),
            observed_digest: self.digest(),
            checks: vec![EquivalenceCheck {
                check_id: "digest".into(),
                passed: true,
                public_summary: None,
            }],
            sanitized_reason: None,
        })
    }

    fn finalize_replay_suffix(
        &mut self,
        _: &u32,
        _: &RestoreRequest,
        ok: bool,
    ) -> Result<(), AdapterError> {
        self.finalized_with.push(ok);
        if self.finalize_fails {
            return Err(adapter_error("finalize refused"));
        }
        Ok(())
    }

    fn release_replay_state(&mut self, binding: &u32) -> Result<(), AdapterError> {
        self.release_calls += 1;
        if self.release_failures_left > 0 {
            self.release_failures_left -= 1;
            return Err(adapter_error("release refused"));
        }
        assert!(
            self.live.remove(binding),
            "binding {binding} released twice"
        );
        Ok(())
    }
    fn discard_binding(&mut self, binding: u32) -> Result<(), AdapterError> {
        self.discarded.push(binding);
        if self.drop_traps {
            return Err(AdapterError::new(ErrorType::Trap, "destructor trapped"));
        }
        Ok(())
    }
}

type Registry = ReplayPointRegistry<u32, MemoryAgentStateStore>;

fn registry() -> Registry {
    ReplayPointRegistry::new(
        MemoryAgentStateStore::new(),
        Arc::new(ReplayMetricLedger::new()),
    )
}

fn trace_with(events: usize, branch: &str) -> TraceLog {
    let mut log = TraceLog::new("trace", branch).unwrap();
    for index in 0..events {
        log.emit(
            TraceEventKind::ActionOutcome,
            json!({"step": index}),
            None,
            None,
        )
        .unwrap();
    }
    log
}

fn capture(
    registry: &mut Registry,
    adapter: &mut Fake,
    trace: &mut TraceLog,
    id: &str,
) -> Result<ReplayPoint, ReplayError> {
    let cursor = agent_cursor(trace.events(), "ctx");
    registry.capture_at_head(adapter, trace, cursor, id, "group", None)
}

fn count(registry: &Registry, field: &str) -> u64 {
    registry.metrics().count(field)
}

fn run_ok(
    registry: &mut Registry,
    adapter: &mut Fake,
    id: &str,
) -> Result<(ReplayRestoreResult, &'static str), ReplayError> {
    registry.run_from(
        adapter,
        id,
        "variant-1",
        Fidelity::SemanticEquivalent,
        |_, _, _| Ok("done"),
    )
}

#[test]
fn capture_binds_the_cursor_agent_state_and_adapter_state_together() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(3, "main"));
    let point = capture(&mut registry, &mut adapter, &mut trace, "rp-1").unwrap();
    assert_eq!(point.cursor.next_sequence, 3);
    assert_eq!(point.cursor.after_event_id.as_deref(), Some("trace/main/2"));
    assert_eq!(point.cursor.agent_cursor.history_index, 3);
    assert_eq!(point.lifecycle, Lifecycle::Ready);
    let event = trace.events().last().unwrap();
    assert_eq!(event.sequence, 3);
    assert_eq!(event.replay_point_id.as_deref(), Some("rp-1"));
    assert_eq!(event.public_payload["operation"], "replay_point_captured");
    assert_eq!(event.public_payload["fidelity"], "exact");
    assert_eq!(point.created_event_id, event.event_id);
    assert_eq!(registry.store().live(), 1);
    assert_eq!(adapter.live.len(), 1);
    assert_eq!(registry.gauges(), (1, 1, 0));
    assert!(!point.to_record().contains_key("binding_key"));
}

#[test]
fn a_failed_capture_leaves_no_point_no_event_and_no_state() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(2, "main"));
    adapter.capture_fails = true;
    let error = capture(&mut registry, &mut adapter, &mut trace, "rp-1").unwrap_err();
    assert_eq!(error.stage, ReplayStage::Capture);
    assert!(matches!(error.cause, ReplayCause::Adapter(_)));
    assert_eq!(trace.events().len(), 2, "no capture event");
    assert!(registry.get("rp-1").is_none());
    assert_eq!(registry.store().live(), 0, "agent state compensated");
    assert_eq!(count(&registry, "capture_failure_count"), 1);
    assert_eq!(count(&registry, "capture_compensation_count"), 1);
    assert_eq!(count(&registry, "capture_compensation_failure_count"), 0);
}

#[test]
fn a_lying_lease_is_compensated_and_a_failed_compensation_is_counted() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    adapter.capture_fidelity = Some(Fidelity::NonReplayable);
    adapter.lie_binding_on_marker = true;
    let error = capture(&mut registry, &mut adapter, &mut trace, "rp-1").unwrap_err();
    assert!(
        error.to_string().contains("must not expose a binding"),
        "{error}"
    );
    assert!(
        adapter.live.is_empty(),
        "the binding it handed out was released"
    );
    assert_eq!(trace.events().len(), 1);

    adapter.release_failures_left = 1;
    let error = capture(&mut registry, &mut adapter, &mut trace, "rp-2").unwrap_err();
    assert_eq!(error.also.as_ref().unwrap().stage, ReplayStage::Release);
    assert_eq!(count(&registry, "orphaned_adapter_binding_count"), 1);
    assert_eq!(count(&registry, "capture_compensation_failure_count"), 1);
    assert_eq!(registry.store().live(), 0);
}

#[test]
fn non_replayable_markers_have_no_binding_and_are_never_restored() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    adapter.capture_fidelity = Some(Fidelity::NonReplayable);
    let point = capture(&mut registry, &mut adapter, &mut trace, "marker").unwrap();
    assert_eq!(point.fidelity, Fidelity::NonReplayable);
    assert_eq!(
        trace.events().last().unwrap().public_payload["fidelity"],
        "non_replayable"
    );
    assert_eq!(registry.gauges(), (1, 0, 0), "no adapter binding is held");
    let error = run_ok(&mut registry, &mut adapter, "marker").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("non_replayable replay point cannot be restored")
    );
    assert!(
        registry
            .select_before("trace", "main", 10, Fidelity::BestEffort)
            .is_err()
    );
    let released = registry.release(&mut adapter, "marker").unwrap();
    assert_eq!(released.lifecycle, Lifecycle::Released);
    assert_eq!(adapter.release_calls, 0);
}

#[test]
fn duplicate_point_ids_are_refused_before_anything_is_taken() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    let error = capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap_err();
    assert!(error.to_string().contains("duplicated"), "{error}");
    assert_eq!(adapter.live.len(), 1);
    assert_eq!(registry.store().live(), 1);
}

#[test]
fn replacement_points_follow_every_rule() {
    let (mut registry, mut adapter) = (registry(), Fake::default());
    let mut main = trace_with(2, "main");
    capture(&mut registry, &mut adapter, &mut main, "old").unwrap();
    let mut branch = trace_with(2, "retry");
    let replace = |registry: &mut Registry, adapter: &mut Fake, trace: &mut TraceLog, id: &str| {
        let cursor = agent_cursor(trace.events(), "ctx");
        registry.capture_at_head(adapter, trace, cursor, id, "group", Some("old"))
    };
    let error = replace(&mut registry, &mut adapter, &mut branch, "new").unwrap_err();
    assert!(error.to_string().contains("to be released"), "{error}");
    registry.release(&mut adapter, "old").unwrap();

    let mut same_branch = trace_with(2, "main");
    let error = replace(&mut registry, &mut adapter, &mut same_branch, "new").unwrap_err();
    assert!(error.to_string().contains("on a new branch"), "{error}");

    let mut other_trace = TraceLog::new("elsewhere", "retry").unwrap();
    let error = replace(&mut registry, &mut adapter, &mut other_trace, "new").unwrap_err();
    assert!(error.to_string().contains("same trace"), "{error}");

    adapter.projection = Some("digest-b".into());
    let error = replace(&mut registry, &mut adapter, &mut branch, "new").unwrap_err();
    assert!(
        error.to_string().contains("projection does not match"),
        "{error}"
    );
    assert_eq!(count(&registry, "replacement_projection_mismatch_count"), 1);
    assert!(
        adapter.live.is_empty(),
        "the mismatching lease was released"
    );

    adapter.projection = None;
    let point = replace(&mut registry, &mut adapter, &mut branch, "new").unwrap();
    assert_eq!(point.replaces_replay_point_id.as_deref(), Some("old"));
    assert_eq!(
        branch.events().last().unwrap().public_payload["replaces_replay_point_id"],
        "old"
    );
    assert_eq!(count(&registry, "replacement_capture_attempt_count"), 5);
    assert_eq!(count(&registry, "replacement_capture_success_count"), 1);
    assert_eq!(count(&registry, "replacement_capture_failure_count"), 4);
}

#[test]
fn selection_prefers_the_nearest_trusted_point_and_counts_fallbacks() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "exact-at-1").unwrap();
    trace
        .emit(TraceEventKind::ActionOutcome, json!({}), None, None)
        .unwrap();
    adapter.capture_fidelity = Some(Fidelity::BestEffort);
    capture(&mut registry, &mut adapter, &mut trace, "best-at-3").unwrap();
    trace
        .emit(TraceEventKind::ActionOutcome, json!({}), None, None)
        .unwrap();

    let chosen = registry
        .select_before("trace", "main", 10, Fidelity::SemanticEquivalent)
        .unwrap();
    assert_eq!(
        chosen.replay_point_id, "exact-at-1",
        "a nearer best-effort point is filtered"
    );
    assert_eq!(
        count(&registry, "replay_point_fidelity_filtered_selection_count"),
        1
    );

    let chosen = registry
        .select_before("trace", "main", 10, Fidelity::BestEffort)
        .unwrap();
    assert_eq!(
        chosen.replay_point_id, "best-at-3",
        "nearest wins when both qualify"
    );

    let chosen = registry
        .select_before("trace", "main", 2, Fidelity::Exact)
        .unwrap();
    assert_eq!(
        chosen.replay_point_id, "exact-at-1",
        "only points before the affected event"
    );

    registry.release(&mut adapter, "exact-at-1").unwrap();
    let chosen = registry
        .select_before("trace", "main", 10, Fidelity::Exact)
        .unwrap();
    assert_eq!(
        chosen.replay_point_id, "best-at-3",
        "falls back to best effort"
    );
    assert_eq!(count(&registry, "replay_point_fidelity_fallback_count"), 1);
    assert!(
        registry
            .select_before("trace", "main", 0, Fidelity::BestEffort)
            .is_err()
    );
    assert!(
        registry
            .select_before("trace", "other", 10, Fidelity::BestEffort)
            .is_err()
    );
    assert_eq!(count(&registry, "replay_point_selection_count"), 4);
}

#[test]
fn run_from_restores_validates_runs_and_finalizes() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    let (restore, outcome) = registry
        .run_from(
            &mut adapter,
            "rp",
            "variant-1",
            Fidelity::Exact,
            |_, binding, restore| {
                assert_eq!(*binding, 1);
                assert!(restore.equivalent);
                Ok(42)
            },
        )
        .unwrap();
    assert_eq!(outcome, 42);
    assert_eq!(restore.achieved_fidelity, Fidelity::Exact);
    assert!(restore.promotion_eligible);
    assert_eq!(restore.target_branch_id, "variant-1");
    assert!(restore.replay_wall_minutes >= restore.suffix_minutes);
    assert_eq!(adapter.finalized_with, vec![true]);
    assert_eq!(registry.store().current().unwrap().history_index, 1);
    for field in [
        "replay_success_count",
        "restore_success_count",
        "prefix_reuse_verified_count",
        "equivalence_verified_count",
        "suffix_success_count",
        "suffix_finalization_success_count",
    ] {
        assert_eq!(count(&registry, field), 1, "{field}");
    }
    assert_eq!(
        registry.metrics().snapshot()["restored_fidelity_counts"],
        json!({"exact": 1})
    );
}

#[test]
fn a_restore_may_not_claim_more_than_was_captured() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    adapter.capture_fidelity = Some(Fidelity::BestEffort);
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    adapter.restore_claims = Some(Fidelity::Exact);
    let error = run_ok(&mut registry, &mut adapter, "rp").unwrap_err();
    assert_eq!(error.stage, ReplayStage::Restore);
    assert!(
        error
            .to_string()
            .contains("claims exact but the point was captured at best_effort"),
        "{error}"
    );
    adapter.restore_claims = Some(Fidelity::NonReplayable);
    let error = run_ok(&mut registry, &mut adapter, "rp").unwrap_err();
    assert!(
        error.to_string().contains("reported non_replayable"),
        "{error}"
    );
    assert_eq!(count(&registry, "restore_failure_count"), 2);
    assert_eq!(count(&registry, "replay_failure_count"), 2);
    assert!(adapter.finalized_with.is_empty(), "no suffix ran");
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Ready);
}

#[test]
fn a_best_effort_replay_runs_but_is_not_promotion_eligible() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    adapter.capture_fidelity = Some(Fidelity::BestEffort);
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    let (restore, _) = run_ok(&mut registry, &mut adapter, "rp").unwrap();
    assert!(!restore.promotion_eligible);
    assert!(!restore.equivalent);
    assert_eq!(count(&registry, "equivalence_unverified_count"), 1);
}

#[test]
fn contract_violations_stop_the_replay_before_the_suffix() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    adapter.report_override = Some(EquivalenceReport {
        achieved_fidelity: Fidelity::Exact,
        equivalent: true,
        expected_digest: Some("digest-a".into()),
        observed_digest: Some("digest-x".into()),
        checks: Vec::new(),
        sanitized_reason: None,
    });
    let error = registry
        .run_from(
            &mut adapter,
            "rp",
            "v",
            Fidelity::Exact,
            |_, _, _| -> Result<(), AdapterError> { panic!("the suffix must not run") },
        )
        .unwrap_err();
    assert_eq!(error.stage, ReplayStage::Equivalence);
    assert!(matches!(error.cause, ReplayCause::Contract(_)));
    assert_eq!(count(&registry, "equivalence_failure_count"), 1);
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Ready);
}

#[test]
fn a_failed_suffix_is_still_finalized_and_reports_its_restore() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    let error = registry
        .run_from(
            &mut adapter,
            "rp",
            "v",
            Fidelity::Exact,
            |_, _, _| -> Result<(), AdapterError> {
                Err(AdapterError::new(ErrorType::Trap, "boom"))
            },
        )
        .unwrap_err();
    assert_eq!(error.stage, ReplayStage::Suffix);
    assert!(!error.quarantined);
    assert!(error.restore.as_ref().unwrap().equivalent);
    assert_eq!(adapter.finalized_with, vec![false]);
    assert_eq!(count(&registry, "suffix_failure_count"), 1);
    assert_eq!(
        registry.get("rp").unwrap().lifecycle,
        Lifecycle::Ready,
        "still usable"
    );
}

#[test]
fn a_failed_finalization_quarantines_the_point() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    adapter.finalize_fails = true;
    let error = run_ok(&mut registry, &mut adapter, "rp").unwrap_err();
    assert_eq!(error.stage, ReplayStage::Finalize);
    assert!(error.quarantined);
    assert!(error.to_string().contains("quarantined"));
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(count(&registry, "replay_point_quarantine_count"), 1);
    assert_eq!(registry.gauges().2, 1);
    let error = run_ok(&mut registry, &mut adapter, "rp").unwrap_err();
    assert!(error.to_string().contains("must be ready"), "{error}");

    // a failed suffix whose finalisation also fails: suffix error first
    let mut trace = trace_with(1, "b");
    adapter.finalize_fails = false;
    capture(&mut registry, &mut adapter, &mut trace, "rp2").unwrap();
    adapter.finalize_fails = true;
    let error = registry
        .run_from(
            &mut adapter,
            "rp2",
            "v",
            Fidelity::Exact,
            |_, _, _| -> Result<(), AdapterError> { Err(adapter_error("suffix broke")) },
        )
        .unwrap_err();
    assert_eq!(error.stage, ReplayStage::Suffix);
    assert_eq!(error.also.as_ref().unwrap().stage, ReplayStage::Finalize);
    assert!(error.quarantined);
}

#[test]
fn release_is_idempotent_and_retries_without_releasing_agent_state_twice() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    adapter.release_failures_left = 1;
    let error = registry.release(&mut adapter, "rp").unwrap_err();
    assert_eq!(error.stage, ReplayStage::Release);
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(
        registry.store().live(),
        0,
        "agent state released on the first try"
    );
    // The memory store refuses a second release of the same key, so a
    // retry that released agent state again would fail here.
    let point = registry.release(&mut adapter, "rp").unwrap();
    assert_eq!(point.lifecycle, Lifecycle::Released);
    assert_eq!(adapter.release_calls, 2);
    assert!(adapter.live.is_empty());
    registry.release(&mut adapter, "rp").unwrap();
    assert_eq!(
        adapter.release_calls, 2,
        "a released point is not released again"
    );
    assert_eq!(count(&registry, "release_failure_count"), 1);
    assert_eq!(count(&registry, "release_success_count"), 2);
    assert_eq!(registry.gauges(), (0, 0, 0));
    assert!(registry.release(&mut adapter, "nope").is_err());
}

#[test]
fn a_trap_dropping_a_released_binding_fails_that_release() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(1, "main"));
    capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    adapter.drop_traps = true;
    let error = registry.release(&mut adapter, "rp").unwrap_err();
    assert_eq!(error.stage, ReplayStage::Release);
    assert!(
        matches!(&error.cause, ReplayCause::Adapter(e) if e.error_type == ErrorType::Trap),
        "{error}"
    );
    assert_eq!(adapter.discarded, [1], "dropped once, after the release");
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(registry.store().live(), 0, "agent state released");
    // A retry neither releases nor drops again, and keeps the failure.
    let again = registry.release(&mut adapter, "rp").unwrap_err();
    assert_eq!(again, error);
    assert_eq!((adapter.release_calls, adapter.discarded.len()), (1, 1));
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(count(&registry, "release_failure_count"), 2);
    assert_eq!(
        registry.gauges(),
        (1, 0, 1),
        "failed, with no binding left held"
    );
}

#[test]
fn adopting_a_durable_point_checks_fidelity_and_projection() {
    let (mut registry, mut adapter, mut trace) =
        (registry(), Fake::default(), trace_with(2, "main"));
    let recorded = capture(&mut registry, &mut adapter, &mut trace, "rp").unwrap();
    let mut other = self::registry();
    let lease = |binding, fidelity, digest: &str| StateLease {
        binding: Some(binding),
        fidelity,
        projection_digest: Some(digest.to_string()),
    };
    adapter.live.insert(100);
    let error = other
        .adopt(
            &mut adapter,
            &recorded,
            lease(100, Fidelity::Exact, "tampered"),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("projection digest differs"),
        "{error}"
    );
    assert!(
        !adapter.live.contains(&100),
        "the imported binding was released"
    );
    assert_eq!(other.store().live(), 0);
    adapter.live.insert(101);
    let error = other
        .adopt(
            &mut adapter,
            &recorded,
            lease(101, Fidelity::BestEffort, "digest-a"),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("fidelity best_effort"),
        "{error}"
    );
    adapter.live.insert(102);
    other
        .adopt(
            &mut adapter,
            &recorded,
            lease(102, Fidelity::Exact, "digest-a"),
        )
        .unwrap();
    let chosen = other
        .select_before("trace", "main", 5, Fidelity::Exact)
        .unwrap();
    assert_eq!(chosen.replay_point_id, "rp");
    let (restore, _) = other
        .run_from(
            &mut adapter,
            "rp",
            "replay-1",
            Fidelity::Exact,
            |_, binding, _| {
                assert_eq!(*binding, 102);
                Ok(())
            },
        )
        .unwrap();
    assert!(restore.promotion_eligible);
}
