//! The replay rules of a group, ported from the `replay-probe` fault cases
//! of the end-to-end tests (`tests/tests/e2e/replay.rs`,
//! `children.rs`) to a native double that breaks one rule on command, as
//! the probe component does: each item names its faults.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::episode::adapter::ErrorType;
use crate::episode::testing::obj;
use crate::replay::child_chunk::{ChildChunk, ChildItemResult, ForkSource, LaneRegistry};
use crate::replay::durable::load_points;
use crate::replay::group_children::MAX_CHILDREN_PER_FORK;
use crate::replay::point::{
    CaptureRequest, EquivalenceCheck, EquivalenceReport, RestoreReceipt, RestoreRequest, StateLease,
};
use crate::replay::registry::{
    ChildConcurrency, ChildForker, ChildLease, ChildOutcome, ChildSession, ForkRequest,
    RiskAssessment,
};
use crate::trace::TraceEventKind;

/// A binding of the double: its number and the instance it lives in.
pub(in crate::replay) type Binding = (u32, u64);

/// A native group adapter whose instance can be lost (a trap), with the
/// `replay-probe` faults: the seed's apply to the point (capture, export,
/// release), the target item's to its restore and suffix.
pub(in crate::replay) struct Probe {
    /// Current instance; `None` after a trap until the next call.
    pub(in crate::replay) instance: Option<u64>,
    pub(in crate::replay) generation: u64,
    next: u32,
    faults: HashSet<&'static str>,
    release_failures: u32,
    pub(in crate::replay) forks_children: bool,
    max_output: usize,
    pub(in crate::replay) calls: Vec<String>,
}

pub(in crate::replay) fn injected(fault: &str, call: &str) -> AdapterError {
    AdapterError::declared(
        "injected-fault",
        format!("injected fault `{fault}` in {call}"),
        false,
    )
}

impl Probe {
    pub(in crate::replay) fn new(faults: &[&'static str]) -> Self {
        Self {
            instance: Some(1),
            generation: 1,
            next: 0,
            faults: faults.iter().copied().collect(),
            release_failures: 0,
            forks_children: false,
            max_output: 1 << 20,
            calls: Vec::new(),
        }
    }

    pub(in crate::replay) fn has(&self, fault: &str) -> bool {
        self.faults.contains(fault)
    }

    /// A call into the instance: a new one when the last was lost.
    pub(in crate::replay) fn enter(&mut self, call: &str) {
        self.calls.push(call.to_string());
        if self.instance.is_none() {
            self.generation += 1;
            self.instance = Some(self.generation);
        }
    }

    /// The instance traps in `call`: it is dropped with its bindings.
    pub(in crate::replay) fn trap(&mut self, fault: &str, call: &str) -> AdapterError {
        self.instance = None;
        AdapterError::new(
            ErrorType::Trap,
            format!("wasm trap: injected fault `{fault}` in {call}"),
        )
    }

    fn fidelity(&self) -> Fidelity {
        if self.has("capture_non_replayable") {
            Fidelity::NonReplayable
        } else if self.has("capture_best_effort") {
            Fidelity::BestEffort
        } else {
            Fidelity::Exact
        }
    }

    fn lost(what: &str) -> AdapterError {
        AdapterError::new(
            ErrorType::InstanceLost,
            format!("the replay binding's instance was dropped; cannot {what}"),
        )
    }
}

impl ReplayAdapter for Probe {
    type Binding = Binding;

    fn capture_replay_state(
        &mut self,
        _: &CaptureRequest,
    ) -> Result<StateLease<Binding>, AdapterError> {
        self.enter("capture");
        if self.has("capture_fails") {
            return Err(injected("capture_fails", "capture-replay-state"));
        }
        let fidelity = self.fidelity();
        if fidelity == Fidelity::NonReplayable {
            return Ok(StateLease {
                binding: None,
                fidelity,
                projection_digest: None,
            });
        }
        self.next += 1;
        Ok(StateLease {
            binding: Some((self.next, self.generation)),
            fidelity,
            projection_digest: Some("digest".into()),
        })
    }

    fn restore_replay_state(
        &mut self,
        binding: &Binding,
        _: &RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(Self::lost("restore it"));
        }
        self.enter("restore");
        if self.has("restore_fails") {
            return Err(injected("restore_fails", "restore-replay-state"));
        }
        if self.has("trap_in_restore") {
            return Err(self.trap("trap_in_restore", "restore-replay-state"));
        }
        // `digest_mismatch`: the restored copy really differs.
        let restored = if self.has("digest_mismatch") {
            "other"
        } else {
            "digest"
        };
        Ok(RestoreReceipt {
            achieved_fidelity: self.fidelity(),
            restored_projection_digest: Some(restored.into()),
            prefix_reused: Some(true),
        })
    }

    fn validate_replay_equivalence(
        &mut self,
        binding: &Binding,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(Self::lost("validate it"));
        }
        self.enter("validate");
        let observed = if self.has("digest_mismatch") {
            "other"
        } else {
            "digest"
        };
        Ok(EquivalenceReport {
            achieved_fidelity: receipt.achieved_fidelity,
            equivalent: receipt.achieved_fidelity.is_trusted(),
            expected_digest: Some("digest".into()),
            observed_digest: Some(observed.into()),
            checks: vec![EquivalenceCheck {
                check_id: "probe-state".into(),
                passed: true,
                public_summary: None,
            }],
            sanitized_reason: None,
        })
    }

    fn finalize_replay_suffix(
        &mut self,
        binding: &Binding,
        _: &RestoreRequest,
        _: bool,
    ) -> Result<(), AdapterError> {
        if !self.binding_alive(binding) {
            return Ok(());
        }
        self.enter("finalize");
        if self.has("finalize_fails") {
            return Err(injected("finalize_fails", "finalize-replay-suffix"));
        }
        Ok(())
    }

    fn release_replay_state(&mut self, binding: &Binding) -> Result<(), AdapterError> {
        if !self.binding_alive(binding) {
            return Ok(());
        }
        self.enter("release");
        let once = self.has("release_fails_once") && self.release_failures == 0;
        if once || self.has("release_fails") {
            self.release_failures += 1;
            return Err(injected("release_fails", "release-replay-state"));
        }
        Ok(())
    }

    fn discard_binding(&mut self, binding: Binding) -> Result<(), AdapterError> {
        if !self.binding_alive(&binding) {
            return Ok(());
        }
        self.enter("drop");
        if self.has("binding_drop_traps") {
            let trap = self.trap("binding_drop_traps", "drop replay-binding");
            return Err(AdapterError {
                message: format!("dropping the replay binding failed: {}", trap.message),
                ..trap
            });
        }
        Ok(())
    }
}

impl GroupInstance for Probe {
    type Snapshot = ();

    fn binding_alive(&self, binding: &Binding) -> bool {
        self.instance == Some(binding.1)
    }

    fn instance_id(&self) -> Option<u64> {
        self.instance
    }

    fn max_output_bytes(&self) -> usize {
        self.max_output
    }

    fn forks_children(&self) -> bool {
        self.forks_children
    }

    fn export_replay_state(&mut self, binding: &Binding) -> Result<Option<Vec<u8>>, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(Self::lost("export its state"));
        }
        self.enter("export");
        if self.has("export_none") {
            return Ok(None);
        }
        if self.has("export_fails") {
            return Err(injected("export_fails", "export-replay-state"));
        }
        let size = if self.has("export_huge") { 4096 } else { 5 };
        Ok(Some(vec![b's'; size]))
    }

    fn run_replay_suffix(
        &mut self,
        binding: &Binding,
        item: &Item,
        _: &CallContext,
        trace: &mut Option<TraceLog>,
    ) -> Result<Record, AdapterError> {
        if !self.binding_alive(binding) {
            return Err(Self::lost("run a suffix"));
        }
        self.enter("suffix");
        if let Some(log) = trace.as_mut() {
            log.emit(
                TraceEventKind::ActionOutcome,
                json!({"stage": "probe_item"}),
                None,
                None,
            )
            .unwrap();
        }
        if self.has("suffix_fails") {
            return Err(injected("suffix_fails", "run-replay-suffix"));
        }
        if self.has("suffix_traps") {
            return Err(self.trap("suffix_traps", "run-replay-suffix"));
        }
        Ok(obj(json!({
            "item_id": item["item_id"],
            "via": "replay",
            "counter_before": 0,
        })))
    }

    /// Children of a point forked from its state by a [`NativeForker`]
    /// (`fork_fails` on the seed's fault of that name).
    fn run_child_chunk(
        &self,
        registry: &mut LaneRegistry<Binding>,
        chunk: ChildChunk<'_, ()>,
        _: &CallContext,
    ) -> Result<Vec<ChildItemResult>, ReplayError> {
        let mut forker = NativeForker {
            fork_fails: self.has("fork_fails"),
            forked: 0,
        };
        chunk.run_on(registry, &mut forker)
    }
}

pub(in crate::replay) fn ctx() -> CallContext {
    CallContext {
        arm: "main".into(),
        epoch: 1,
        branch_id: "queue_worker_01".into(),
        execution_group_id: Some("seed".into()),
    }
}

pub(in crate::replay) fn item(id: &str) -> Item {
    obj(json!({"item_id": id, "family": "probe"}))
}

pub(in crate::replay) fn settings(
    store: Option<&Path>,
    child_workers: usize,
    fork_by_snapshot: bool,
) -> GroupSettings {
    GroupSettings {
        metrics: Arc::new(ReplayMetricLedger::new()),
        store: store.map(|root| Arc::new(ReplayStore::new(root))),
        minimum_fidelity: Fidelity::SemanticEquivalent,
        child_workers,
        fork_by_snapshot,
    }
}

/// A lane's prepared group, as the adapter runs it: a trace with the
/// prefix's events, captured and settled.
struct Group {
    lane: GroupLane<Binding>,
    probe: Probe,
    fields: Map<String, Value>,
    point: Option<GroupPoint<()>>,
    trace: TraceLog,
}

fn prepare(faults: &[&'static str], settings: GroupSettings, items: &[Item]) -> Group {
    prepare_with(Probe::new(faults), settings, items)
}

fn prepare_with(mut probe: Probe, settings: GroupSettings, items: &[Item]) -> Group {
    let mut lane = GroupLane::new(settings);
    let mut trace = TraceLog::new("seed", "main").unwrap();
    trace
        .emit(
            TraceEventKind::ActionOutcome,
            json!({"stage": "prefix"}),
            None,
            None,
        )
        .unwrap();
    let capture = lane.capture(&mut probe, &mut trace, &ctx(), "seed");
    let (fields, point) = lane.settle_capture(&mut probe, capture, &ctx(), &items[0], items);
    Group {
        lane,
        probe,
        fields,
        point,
        trace,
    }
}

impl Group {
    fn run(&mut self, id: &str) -> Option<Result<Record, AdapterError>> {
        let point_id = self.point.as_ref()?.id.clone();
        let result = self
            .lane
            .run_suffix(&mut self.probe, &point_id, &item(id), &ctx());
        if let (Some(point), Some(result)) = (self.point.as_mut(), &result) {
            point.observe_suffix(result.is_ok());
        }
        result
    }

    fn release(&mut self) -> Option<AdapterError> {
        let point = self.point.take().expect("a point to release");
        self.lane.release(&mut self.probe, point)
    }

    fn count(&self, field: &str) -> u64 {
        self.lane.settings.metrics.count(field)
    }
}

fn seed_only() -> Vec<Item> {
    vec![item("seed")]
}

#[test]
fn a_point_is_captured_after_the_prefix_under_the_groups_id() {
    let group = prepare(&[], settings(None, 0, false), &seed_only());
    let id = point_id_for("main", 1, "seed");
    assert_eq!(group.fields["replay_point_id"], id.as_str());
    assert_eq!(group.fields["replay_fidelity"], "exact");
    let point = group.point.as_ref().unwrap();
    assert_eq!(point.id, id);
    // Captured at the head of the group's trace, after the prefix's event.
    assert_eq!(point.line.point.cursor.next_sequence, 1);
    let last = group.trace.events().last().unwrap();
    assert_eq!(last.event_id, point.line.point.created_event_id);
    assert_eq!(
        (point.line.arm.as_str(), point.line.epoch),
        ("main", 1),
        "the line names the group"
    );
    assert_eq!(point.line.execution_group_id, "seed");
    assert_eq!(point.line.seed_item_id, "seed");
    assert_eq!(
        group.probe.calls,
        ["capture"],
        "nothing exported: no store, no children"
    );
    assert_eq!(group.count("capture_success_count"), 1);
}

#[test]
fn a_failed_capture_leaves_no_point_and_its_error_on_the_prefix() {
    let mut group = prepare(&["capture_fails"], settings(None, 0, false), &seed_only());
    assert!(group.point.is_none());
    assert_eq!(
        group.fields["replay_capture_error"],
        json!({
            "stage": "capture", "type": "adapter_error",
            "message": "injected fault `capture_fails` in capture-replay-state",
            "quarantined": false, "also": null,
        })
    );
    assert!(group.fields.get("replay_point_id").is_none());
    assert!(group.run("seed").is_none(), "the suffix runs on the group");
    assert_eq!(group.count("capture_failure_count"), 1);
}

#[test]
fn a_marker_point_is_kept_but_no_suffix_runs_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = prepare(
        &["capture_non_replayable"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    assert_eq!(group.fields["replay_fidelity"], "non_replayable");
    assert!(group.run("seed").is_none());
    assert!(group.release().is_none());
    let lines = load_points(dir.path()).unwrap();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].durable_state.is_none(), "a marker has no state");
    assert!(!group.probe.calls.contains(&"export".to_string()));
}

#[test]
fn each_suffix_runs_from_the_point_on_its_own_branch() {
    let items = vec![item("seed"), item("v1")];
    let mut group = prepare(&[], settings(None, 0, false), &items);
    let record = group.run("v1").unwrap().unwrap();
    assert_eq!(record["via"], "replay");
    let block = &record["replay"];
    let point = &group.point.as_ref().unwrap().line.point;
    assert_eq!(block["replay_point_id"], point.replay_point_id.as_str());
    assert_eq!(block["trace_id"], "seed");
    assert_eq!(block["branch_id"], "v1");
    assert_eq!(block["target_branch_id"], "v1");
    // The branch starts right after the capture event, and the suffix's
    // one event ends it.
    assert_eq!(block["first_sequence"], point.cursor.next_sequence + 1);
    assert_eq!(block["end_sequence"], point.cursor.next_sequence + 2);
    assert_eq!(block["achieved_fidelity"], "exact");
    assert_eq!(block["promotion_eligible"], true);
    assert_eq!(
        group.probe.calls,
        ["capture", "restore", "validate", "suffix", "finalize"]
    );
    // The group's own trace keeps only the prefix and the capture.
    assert_eq!(group.trace.events().len(), 2);
    assert!(group.release().is_none());
    assert_eq!(group.count("replay_success_count"), 1);
}

#[test]
fn a_best_effort_point_replays_but_is_never_promoted() {
    let mut group = prepare(
        &["capture_best_effort"],
        settings(None, 0, false),
        &seed_only(),
    );
    let record = group.run("seed").unwrap().unwrap();
    assert_eq!(record["replay"]["achieved_fidelity"], "best_effort");
    assert_eq!(record["replay"]["promotion_eligible"], false);
}

#[test]
fn a_broken_rule_fails_the_suffix_with_its_stage_and_type() {
    let cases: &[(&'static str, ErrorType, &str, &str)] = &[
        (
            "restore_fails",
            ErrorType::AdapterError,
            "restore",
            "replay restore failed: injected fault",
        ),
        (
            "trap_in_restore",
            ErrorType::Trap,
            "restore",
            "replay restore failed: wasm trap",
        ),
        (
            "digest_mismatch",
            ErrorType::ReplayContract,
            "equivalence",
            "equal, non-empty state digests",
        ),
        (
            "suffix_fails",
            ErrorType::AdapterError,
            "suffix",
            "injected fault `suffix_fails`",
        ),
        ("suffix_traps", ErrorType::Trap, "suffix", "wasm trap"),
        (
            "finalize_fails",
            ErrorType::AdapterError,
            "finalize",
            "replay finalize failed",
        ),
    ];
    for &(fault, error_type, stage, says) in cases {
        let mut group = prepare(&[fault], settings(None, 0, false), &seed_only());
        let error = group.run("seed").unwrap().unwrap_err();
        assert_eq!(error.error_type, error_type, "{fault}: {error}");
        assert!(error.message.contains(says), "{fault}: {}", error.message);
        let block = &error.record_fields.as_ref().unwrap()["replay"];
        assert_eq!(block["error"]["stage"], stage, "{fault}: {block}");
        assert_eq!(group.count("replay_failure_count"), 1, "{fault}");
    }
}

#[test]
fn a_failed_suffix_still_ran_on_a_verified_restore() {
    let mut group = prepare(&["suffix_fails"], settings(None, 0, false), &seed_only());
    let error = group.run("seed").unwrap().unwrap_err();
    let block = &error.record_fields.unwrap()["replay"];
    assert_eq!(block["equivalent"], true);
    assert!(block["end_sequence"].as_u64() > block["first_sequence"].as_u64());
    assert_eq!(block["error"]["quarantined"], false);
}

#[test]
fn a_binding_lost_with_its_instance_is_released_without_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let items = vec![item("seed"), item("v1")];
    let mut group = prepare(
        &["suffix_traps"],
        settings(Some(dir.path()), 0, false),
        &items,
    );
    assert!(group.run("seed").unwrap().is_err());
    // The binding died with the instance: no further suffix runs from it.
    assert!(group.run("v1").is_none(), "v1 runs on the prepared group");
    let calls = group.probe.calls.len();
    assert!(
        group.release().is_none(),
        "the release is not the group's failure"
    );
    assert_eq!(group.probe.calls.len(), calls, "nothing left to release");
    let line = &load_points(dir.path()).unwrap()[0];
    assert_eq!(line.point.lifecycle, Lifecycle::Released);
    assert!(!line.quarantined);
    assert!(line.release_error.is_none());
    assert_eq!(group.count("replay_point_quarantine_count"), 0);
    assert!(
        line.durable_state.is_some(),
        "its durable state stays valid for `sandloop replay`"
    );
}

#[test]
fn a_failed_finalisation_quarantines_the_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = prepare(
        &["finalize_fails"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    let error = group.run("seed").unwrap().unwrap_err();
    assert_eq!(
        error.record_fields.unwrap()["replay"]["error"]["quarantined"],
        true
    );
    assert!(group.release().is_none());
    let line = &load_points(dir.path()).unwrap()[0];
    assert!(line.quarantined);
    assert_eq!(group.count("replay_point_quarantine_count"), 1);
}

#[test]
fn a_release_is_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut once = prepare(
        &["release_fails_once"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    assert!(once.release().is_none());
    assert_eq!(
        once.probe.calls.iter().filter(|c| *c == "release").count(),
        2
    );
    let line = &load_points(dir.path()).unwrap()[0];
    assert_eq!(line.point.lifecycle, Lifecycle::Released);
    assert!(line.release_error.is_none());

    let dir = tempfile::tempdir().unwrap();
    let mut never = prepare(
        &["release_fails"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    assert!(
        never.release().is_none(),
        "the instance lives on: not the group's failure"
    );
    assert_eq!(
        never.probe.calls.iter().filter(|c| *c == "release").count(),
        2
    );
    let line = &load_points(dir.path()).unwrap()[0];
    assert_eq!(line.point.lifecycle, Lifecycle::Failed);
    assert!(line.quarantined);
    let error = line.release_error.as_ref().unwrap();
    assert_eq!(error["stage"], "release");
    assert_eq!(error["type"], "adapter_error");
}

#[test]
fn a_trap_in_the_binding_destructor_is_the_group_releases_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = prepare(
        &["binding_drop_traps"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    assert!(
        group.run("seed").unwrap().is_ok(),
        "the suffix is not blamed"
    );
    let failure = group.release().expect("the release took the instance down");
    assert_eq!(failure.error_type, ErrorType::Trap);
    assert!(
        failure
            .message
            .starts_with("replay release failed: dropping the replay binding failed:")
            && failure.message.contains("binding_drop_traps"),
        "{}",
        failure.message
    );
    let line = &load_points(dir.path()).unwrap()[0];
    assert_eq!(line.point.lifecycle, Lifecycle::Failed);
    let error = line.release_error.as_ref().unwrap();
    assert_eq!(
        (error["stage"].as_str(), error["type"].as_str()),
        (Some("release"), Some("trap"))
    );
}

#[test]
fn a_point_is_exported_only_when_kept_or_forked_from() {
    // Kept: written durable with the group's items; not kept in memory.
    let dir = tempfile::tempdir().unwrap();
    let items = vec![item("seed"), item("v1")];
    let kept = prepare(&[], settings(Some(dir.path()), 0, false), &items);
    let point = kept.point.as_ref().unwrap();
    let durable = point.line.durable_state.as_ref().unwrap();
    assert_eq!(durable.size_bytes, 5);
    assert!(dir.path().join(&durable.file).is_file());
    assert!(point.state.is_none(), "no children fork from it");

    // Forked from: kept in memory, not written.
    let mut probe = Probe::new(&[]);
    probe.forks_children = true;
    let forked = prepare_with(probe, settings(None, 2, false), &items);
    let point = forked.point.as_ref().unwrap();
    assert_eq!(point.state.as_deref().map(Vec::len), Some(5));
    assert!(point.line.durable_state.is_none());

    // Children but no `replay-children`, or no workers: not exported.
    let neither = prepare(&[], settings(None, 2, false), &items);
    assert!(!neither.probe.calls.contains(&"export".to_string()));
    let mut probe = Probe::new(&[]);
    probe.forks_children = true;
    let serial = prepare_with(probe, settings(None, 0, false), &items);
    assert!(!serial.probe.calls.contains(&"export".to_string()));
}

#[test]
fn an_export_that_cannot_be_kept_says_why_on_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let none = prepare(
        &["export_none"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    let line = &none.point.as_ref().unwrap().line;
    assert!(line.durable_state.is_none() && line.durable_error.is_none());

    let mut probe = Probe::new(&["export_huge"]);
    probe.max_output = 100;
    let huge = prepare_with(probe, settings(Some(dir.path()), 0, false), &seed_only());
    assert_eq!(
        huge.point.as_ref().unwrap().line.durable_error.as_deref(),
        Some("the exported state is 4096 bytes, over the limit of 100 (--max-output)")
    );

    let fails = prepare(
        &["export_fails"],
        settings(Some(dir.path()), 0, false),
        &seed_only(),
    );
    let line = &fails.point.as_ref().unwrap().line;
    assert_eq!(
        line.durable_error.as_deref(),
        Some(
            "adapter_error (injected-fault): injected fault `export_fails` in export-replay-state"
        )
    );
    assert!(
        fails.fields.get("replay_capture_error").is_none(),
        "the point is still usable"
    );
}

#[test]
fn a_snapshot_is_deferred_to_the_first_fork_of_a_group_with_children() {
    let dir = tempfile::tempdir().unwrap();
    let items = vec![item("seed"), item("v1")];
    let deferred = prepare(&[], settings(Some(dir.path()), 2, true), &items);
    let point = deferred.point.as_ref().unwrap();
    assert_eq!(point.pending.as_deref(), Some(&items[..]));
    assert!(
        point.line.durable_state.is_none(),
        "the export waits for the snapshot"
    );
    assert!(!deferred.probe.calls.contains(&"export".to_string()));

    // A group of one item has no child to fork: exported at once.
    let single = prepare(&[], settings(Some(dir.path()), 2, true), &seed_only());
    assert!(single.point.as_ref().unwrap().pending.is_none());
    assert!(single.point.as_ref().unwrap().line.durable_state.is_some());
    // No workers: no children, no snapshot.
    let serial = prepare(&[], settings(Some(dir.path()), 0, true), &items);
    assert!(serial.point.as_ref().unwrap().pending.is_none());
}

/// A native child forked from an exported state.
struct NativeChild {
    id: String,
}

impl ChildSession for NativeChild {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        Ok(EquivalenceReport {
            achieved_fidelity: receipt.achieved_fidelity,
            equivalent: true,
            expected_digest: Some("digest".into()),
            observed_digest: Some("digest".into()),
            checks: vec![],
            sanitized_reason: None,
        })
    }
    fn assess_intent(&mut self, _: &Map<String, Value>) -> Result<RiskAssessment, AdapterError> {
        unreachable!("no risk policy")
    }
    fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
        if self.id == "v-fails" {
            return Err(injected("child_fails", "run-replay-child"));
        }
        Ok(obj(json!({"item_id": task["item_id"], "via": "child"})))
    }
    fn assess_outcome(
        &mut self,
        _: &Map<String, Value>,
        _: &Record,
    ) -> Result<RiskAssessment, AdapterError> {
        unreachable!("no risk policy")
    }
    fn release(&mut self) -> Result<(), AdapterError> {
        Ok(())
    }
}

struct NativeForker {
    fork_fails: bool,
    forked: u64,
}

impl ChildForker for NativeForker {
    type Session = NativeChild;
    fn has_risk_policy(&self) -> bool {
        false
    }
    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<NativeChild>, AdapterError> {
        if self.fork_fails {
            return Err(injected("fork_fails", "fork-replay-child"));
        }
        self.forked += 1;
        Ok(ChildLease {
            session: NativeChild {
                id: request.child_id.clone(),
            },
            receipt: RestoreReceipt {
                achieved_fidelity: Fidelity::Exact,
                restored_projection_digest: Some("digest".into()),
                prefix_reused: Some(true),
            },
            concurrency: ChildConcurrency::ThreadSafe,
            worker_identity: None,
            child_key: self.forked,
        })
    }
}

fn forked_group(items: &[Item]) -> Group {
    let mut probe = Probe::new(&[]);
    probe.forks_children = true;
    prepare_with(probe, settings(None, 2, false), items)
}

#[test]
fn a_groups_children_fork_from_its_exported_state_in_chunks() {
    let mut items = vec![item("seed")];
    items.extend((0..MAX_CHILDREN_PER_FORK + 1).map(|n| item(&format!("v{n:02}"))));
    let mut group = forked_group(&items);
    let mut point = group.point.take().unwrap();
    let mut chunks = Vec::new();
    let results = group
        .lane
        .run_children(&group.probe, &mut point, &items, |registry, chunk| {
            assert!(matches!(chunk.source, ForkSource::State(state) if state.len() == 5));
            chunks.push((chunk.tasks.len(), chunk.fork_at.clone(), chunk.workers));
            registry
                .run_child_group_from(
                    &mut NativeForker {
                        fork_fails: false,
                        forked: 0,
                    },
                    chunk.point_id,
                    chunk.tasks,
                    chunk.workers,
                    true,
                )
                .map(|outcomes| outcomes.into_iter().map(chunk.finish).collect())
        })
        .expect("children ran");
    assert_eq!(results.len(), items.len());
    let sizes: Vec<usize> = chunks.iter().map(|(size, ..)| *size).collect();
    assert_eq!(sizes, [MAX_CHILDREN_PER_FORK, 2]);
    let at = &chunks[0].1;
    assert_eq!(at.trace_id, "seed");
    assert_eq!(at.created_event_id, point.line.point.created_event_id);
    assert_eq!(at.next_sequence, point.line.point.cursor.next_sequence + 1);
    for ((result, _), item) in results.iter().zip(&items) {
        let record = result.as_ref().unwrap();
        assert_eq!(record["item_id"], item["item_id"], "in order");
        assert_eq!(record["replay"]["fork"], "state");
        assert_eq!(record["replay"]["child_id"], item["item_id"]);
    }
    assert!(point.serial.is_none());
    assert!(group.lane.release(&mut group.probe, point).is_none());
}

#[test]
fn a_failed_fork_fails_every_item_of_its_chunk() {
    let items = vec![item("seed"), item("v1")];
    let mut group = forked_group(&items);
    let mut point = group.point.take().unwrap();
    let results = group
        .lane
        .run_children(&group.probe, &mut point, &items, |registry, chunk| {
            registry
                .run_child_group_from(
                    &mut NativeForker {
                        fork_fails: true,
                        forked: 0,
                    },
                    chunk.point_id,
                    chunk.tasks,
                    chunk.workers,
                    true,
                )
                .map(|outcomes| outcomes.into_iter().map(chunk.finish).collect())
        })
        .unwrap();
    let blocks: HashMap<String, Value> = results
        .into_iter()
        .map(|(result, _)| {
            let error = result.unwrap_err();
            let block = error.record_fields.unwrap()["replay"].clone();
            (block["child_id"].as_str().unwrap().to_string(), block)
        })
        .collect();
    assert_eq!(blocks.len(), 2);
    for block in blocks.values() {
        assert_eq!(block["isolated"], true);
        assert_eq!(block["fork"], "state");
        assert_eq!(block["error"]["type"], "adapter_error");
    }
}

#[test]
fn children_that_cannot_be_forked_run_serially_and_are_counted_so() {
    let items = vec![item("seed"), item("v1")];
    // Usable point, no exported state (the adapter cannot fork children).
    let mut group = prepare(&[], settings(None, 2, false), &items);
    let mut point = group.point.take().unwrap();
    let ran = group
        .lane
        .run_children(&group.probe, &mut point, &items, |_, _| {
            panic!("no child is forked")
        });
    assert!(ran.is_none());
    assert!(point.serial.is_some());
    assert_eq!(group.count("child_serial_fallback_group_count"), 1);
    group.point = Some(point);
    assert!(group.run("seed").unwrap().is_ok());
    assert!(group.run("v1").unwrap().is_ok());
    assert!(group.release().is_none());
    assert_eq!(group.count("child_group_success_count"), 1);
    assert_eq!(group.count("child_group_failure_count"), 0);

    // A failed suffix fails the serial group.
    let mut failing = prepare(&["suffix_fails"], settings(None, 2, false), &items);
    let mut point = failing.point.take().unwrap();
    assert!(
        failing
            .lane
            .run_children(&failing.probe, &mut point, &items, |_, _| unreachable!())
            .is_none()
    );
    failing.point = Some(point);
    assert!(failing.run("v1").unwrap().is_err());
    failing.release();
    assert_eq!(failing.count("child_group_failure_count"), 1);

    // A point whose binding was lost runs no children and no serial group.
    let mut lost = prepare(&["suffix_traps"], settings(None, 2, false), &items);
    assert!(lost.run("seed").unwrap().is_err());
    let mut point = lost.point.take().unwrap();
    assert!(
        lost.lane
            .run_children(&lost.probe, &mut point, &items, |_, _| unreachable!())
            .is_none()
    );
    assert!(point.serial.is_none());
    assert_eq!(lost.count("child_serial_fallback_group_count"), 0);
}

#[test]
fn a_lane_counts_its_children_as_outcomes() {
    // The settled group's outcomes are child outcomes, one per item.
    let items = vec![item("seed"), item("v-fails")];
    let mut group = forked_group(&items);
    let mut point = group.point.take().unwrap();
    let mut outcomes = Vec::new();
    let results = group
        .lane
        .run_children(&group.probe, &mut point, &items, |registry, chunk| {
            let settled = registry.run_child_group_from(
                &mut NativeForker {
                    fork_fails: false,
                    forked: 0,
                },
                chunk.point_id,
                chunk.tasks,
                chunk.workers,
                true,
            )?;
            outcomes.extend(
                settled
                    .iter()
                    .map(|o| matches!(o, ChildOutcome::Succeeded(_))),
            );
            Ok(settled.into_iter().map(chunk.finish).collect())
        })
        .unwrap();
    assert_eq!(outcomes, [true, false]);
    let failure = results[1].0.as_ref().unwrap_err();
    assert_eq!(failure.kind, "injected-fault");
    assert_eq!(
        failure.record_fields.as_ref().unwrap()["replay"]["stage"],
        "suffix"
    );
}
