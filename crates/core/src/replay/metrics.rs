//! The replay metric ledger: counters and minute totals shared by every
//! registry of a run. Mirrors `ReplayMetricLedger` in the reference's
//! `replay_metrics.py`, with the same field names.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};

/// Every counter, in the reference's order (`_COUNT_FIELDS`).
pub const COUNT_FIELDS: &[&str] = &[
    "capture_attempt_count",
    "capture_success_count",
    "capture_failure_count",
    "capture_compensation_count",
    "capture_compensation_failure_count",
    "orphaned_adapter_binding_count",
    "orphaned_agent_state_count",
    "replacement_capture_attempt_count",
    "replacement_capture_success_count",
    "replacement_capture_failure_count",
    "replacement_projection_mismatch_count",
    "replay_point_selection_count",
    "replay_point_fidelity_fallback_count",
    "replay_point_fidelity_filtered_selection_count",
    "child_group_attempt_count",
    "child_group_success_count",
    "child_group_failure_count",
    "child_group_settled_count",
    "child_candidate_success_count",
    "child_candidate_failure_count",
    "child_parallel_group_count",
    "child_process_isolated_parallel_group_count",
    "child_parallel_downgrade_group_count",
    "child_serial_fallback_group_count",
    "child_session_fork_attempt_count",
    "child_session_fork_success_count",
    "child_session_fork_failure_count",
    "child_session_release_attempt_count",
    "child_session_release_success_count",
    "child_session_release_failure_count",
    "child_intent_assessment_count",
    "child_intent_allowed_count",
    "child_intent_denied_count",
    "child_outcome_assessment_count",
    "child_outcome_allowed_count",
    "child_outcome_denied_count",
    "replay_attempt_count",
    "replay_success_count",
    "replay_failure_count",
    "restore_attempt_count",
    "restore_success_count",
    "restore_failure_count",
    "prefix_reuse_verified_count",
    "prefix_reconstruction_count",
    "prefix_reuse_unknown_count",
    "equivalence_attempt_count",
    "equivalence_verified_count",
    "equivalence_unverified_count",
    "equivalence_failure_count",
    "suffix_attempt_count",
    "suffix_success_count",
    "suffix_failure_count",
    "suffix_finalization_attempt_count",
    "suffix_finalization_success_count",
    "suffix_finalization_failure_count",
    "replay_point_quarantine_count",
    "release_attempt_count",
    "release_success_count",
    "release_failure_count",
];

/// Every duration total, in minutes (`_MINUTE_FIELDS`).
pub const MINUTE_FIELDS: &[&str] = &[
    "capture_minutes",
    "restore_minutes",
    "equivalence_minutes",
    "suffix_minutes",
    "replay_wall_minutes",
    "release_minutes",
];

#[derive(Default)]
struct Totals {
    counts: Vec<u64>,
    seconds: Vec<f64>,
    fidelity: BTreeMap<String, u64>,
}

/// A thread-safe accumulator of replay counters and durations.
///
/// Field names are checked: an unknown name is a programming error and
/// panics (the reference raises `ValueError`), so a typo cannot silently
/// drop a metric.
pub struct ReplayMetricLedger {
    totals: Mutex<Totals>,
}

impl Default for ReplayMetricLedger {
    fn default() -> Self {
        Self::new()
    }
}

fn index_of(fields: &[&str], field: &str, what: &str) -> usize {
    fields
        .iter()
        .position(|known| *known == field)
        .unwrap_or_else(|| panic!("unknown replay {what} metric: {field}"))
}

impl ReplayMetricLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self {
            totals: Mutex::new(Totals {
                counts: vec![0; COUNT_FIELDS.len()],
                seconds: vec![0.0; MINUTE_FIELDS.len()],
                fidelity: BTreeMap::new(),
            }),
        }
    }

    fn with<R>(&self, body: impl FnOnce(&mut Totals) -> R) -> R {
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        body(&mut totals)
    }

    /// Add one to counter `field` (one of [`COUNT_FIELDS`]).
    pub fn increment(&self, field: &str) {
        self.add(field, 1);
    }

    /// Add `amount` to counter `field` (one of [`COUNT_FIELDS`]).
    pub fn add(&self, field: &str, amount: u64) {
        let index = index_of(COUNT_FIELDS, field, "count");
        self.with(|totals| totals.counts[index] += amount);
    }

    /// Add `elapsed` to duration `field` (one of [`MINUTE_FIELDS`]).
    pub fn add_duration(&self, field: &str, elapsed: Duration) {
        let index = index_of(MINUTE_FIELDS, field, "duration");
        self.with(|totals| totals.seconds[index] += elapsed.as_secs_f64());
    }

    /// Count one restore that achieved `fidelity` (reference
    /// `observe_fidelity`).
    pub fn observe_fidelity(&self, fidelity: &str) {
        self.with(|totals| *totals.fidelity.entry(fidelity.to_string()).or_default() += 1);
    }

    /// Current value of counter `field`.
    pub fn count(&self, field: &str) -> u64 {
        let index = index_of(COUNT_FIELDS, field, "count");
        self.with(|totals| totals.counts[index])
    }

    /// Every counter, every `*_minutes` total (rounded to 6 places) and
    /// `restored_fidelity_counts`, as one JSON object (reference
    /// `snapshot`).
    pub fn snapshot(&self) -> Map<String, Value> {
        self.with(|totals| {
            let mut map = Map::new();
            for (field, count) in COUNT_FIELDS.iter().zip(&totals.counts) {
                map.insert((*field).into(), Value::from(*count));
            }
            for (field, seconds) in MINUTE_FIELDS.iter().zip(&totals.seconds) {
                map.insert((*field).into(), Value::from(round6(seconds / 60.0)));
            }
            let fidelity: Map<String, Value> = totals
                .fidelity
                .iter()
                .map(|(name, count)| (name.clone(), Value::from(*count)))
                .collect();
            map.insert("restored_fidelity_counts".into(), Value::Object(fidelity));
            map
        })
    }
}

/// `value` rounded to 6 decimal places (the reference's `round(x, 6)`).
pub fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_has_every_field_and_converts_to_minutes() {
        let ledger = ReplayMetricLedger::new();
        ledger.increment("capture_attempt_count");
        ledger.add("release_success_count", 2);
        ledger.add_duration("restore_minutes", Duration::from_secs(90));
        ledger.observe_fidelity("exact");
        ledger.observe_fidelity("exact");
        ledger.observe_fidelity("best_effort");
        let snapshot = ledger.snapshot();
        assert_eq!(snapshot.len(), COUNT_FIELDS.len() + MINUTE_FIELDS.len() + 1);
        assert_eq!(snapshot["capture_attempt_count"], 1);
        assert_eq!(snapshot["release_success_count"], 2);
        assert_eq!(snapshot["suffix_failure_count"], 0);
        assert_eq!(snapshot["restore_minutes"], 1.5);
        assert_eq!(snapshot["capture_minutes"], 0.0);
        assert_eq!(
            snapshot["restored_fidelity_counts"],
            serde_json::json!({"best_effort": 1, "exact": 2})
        );
    }

    #[test]
    #[should_panic(expected = "unknown replay count metric: capture_typo")]
    fn unknown_fields_are_a_programming_error() {
        ReplayMetricLedger::new().increment("capture_typo");
    }
}
