//! The replay metric ledger: counters and minute totals shared by every
//! registry of a run. Mirrors `ReplayMetricLedger` in the reference's
//! `replay_metrics.py`, with the same field names.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};

/// Declares a metric name enum (variant -> JSON key, in the reference's
/// order) with `ALL` and `as_str`, and the list of its keys.
macro_rules! metric_names {
    (
        $(#[$enum_doc:meta])* enum $name:ident;
        $(#[$list_doc:meta])* list $list:ident;
        { $($variant:ident = $key:literal,)* }
    ) => {
        $(#[$enum_doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $(
                #[doc = concat!("`", $key, "`.")]
                $variant,
            )*
        }

        impl $name {
            /// Every metric, in the reference's order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The metric's key in the ledger's snapshot (and `summary.json`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $key,)*
                }
            }
        }

        $(#[$list_doc])*
        pub const $list: &[&str] = &[$($key,)*];
    };
}

metric_names! {
    /// A counter of the [`ReplayMetricLedger`] (reference `_COUNT_FIELDS`);
    /// [`ReplayCount::as_str`] is its snapshot key.
    enum ReplayCount;
    /// Every counter's key, in the reference's order (`_COUNT_FIELDS`).
    list COUNT_FIELDS;
    {
        CaptureAttempt = "capture_attempt_count",
        CaptureSuccess = "capture_success_count",
        CaptureFailure = "capture_failure_count",
        CaptureCompensation = "capture_compensation_count",
        CaptureCompensationFailure = "capture_compensation_failure_count",
        OrphanedAdapterBinding = "orphaned_adapter_binding_count",
        OrphanedAgentState = "orphaned_agent_state_count",
        ReplacementCaptureAttempt = "replacement_capture_attempt_count",
        ReplacementCaptureSuccess = "replacement_capture_success_count",
        ReplacementCaptureFailure = "replacement_capture_failure_count",
        ReplacementProjectionMismatch = "replacement_projection_mismatch_count",
        ReplayPointSelection = "replay_point_selection_count",
        ReplayPointFidelityFallback = "replay_point_fidelity_fallback_count",
        ReplayPointFidelityFilteredSelection = "replay_point_fidelity_filtered_selection_count",
        ChildGroupAttempt = "child_group_attempt_count",
        ChildGroupSuccess = "child_group_success_count",
        ChildGroupFailure = "child_group_failure_count",
        ChildGroupSettled = "child_group_settled_count",
        ChildCandidateSuccess = "child_candidate_success_count",
        ChildCandidateFailure = "child_candidate_failure_count",
        ChildParallelGroup = "child_parallel_group_count",
        ChildProcessIsolatedParallelGroup = "child_process_isolated_parallel_group_count",
        ChildParallelDowngradeGroup = "child_parallel_downgrade_group_count",
        ChildSerialFallbackGroup = "child_serial_fallback_group_count",
        ChildSessionForkAttempt = "child_session_fork_attempt_count",
        ChildSessionForkSuccess = "child_session_fork_success_count",
        ChildSessionForkFailure = "child_session_fork_failure_count",
        ChildSessionReleaseAttempt = "child_session_release_attempt_count",
        ChildSessionReleaseSuccess = "child_session_release_success_count",
        ChildSessionReleaseFailure = "child_session_release_failure_count",
        ChildIntentAssessment = "child_intent_assessment_count",
        ChildIntentAllowed = "child_intent_allowed_count",
        ChildIntentDenied = "child_intent_denied_count",
        ChildOutcomeAssessment = "child_outcome_assessment_count",
        ChildOutcomeAllowed = "child_outcome_allowed_count",
        ChildOutcomeDenied = "child_outcome_denied_count",
        ReplayAttempt = "replay_attempt_count",
        ReplaySuccess = "replay_success_count",
        ReplayFailure = "replay_failure_count",
        RestoreAttempt = "restore_attempt_count",
        RestoreSuccess = "restore_success_count",
        RestoreFailure = "restore_failure_count",
        PrefixReuseVerified = "prefix_reuse_verified_count",
        PrefixReconstruction = "prefix_reconstruction_count",
        PrefixReuseUnknown = "prefix_reuse_unknown_count",
        EquivalenceAttempt = "equivalence_attempt_count",
        EquivalenceVerified = "equivalence_verified_count",
        EquivalenceUnverified = "equivalence_unverified_count",
        EquivalenceFailure = "equivalence_failure_count",
        SuffixAttempt = "suffix_attempt_count",
        SuffixSuccess = "suffix_success_count",
        SuffixFailure = "suffix_failure_count",
        SuffixFinalizationAttempt = "suffix_finalization_attempt_count",
        SuffixFinalizationSuccess = "suffix_finalization_success_count",
        SuffixFinalizationFailure = "suffix_finalization_failure_count",
        ReplayPointQuarantine = "replay_point_quarantine_count",
        ReleaseAttempt = "release_attempt_count",
        ReleaseSuccess = "release_success_count",
        ReleaseFailure = "release_failure_count",
    }
}

metric_names! {
    /// A duration total of the [`ReplayMetricLedger`], in minutes in the
    /// snapshot (reference `_MINUTE_FIELDS`).
    enum ReplayMinutes;
    /// Every duration total's key, in minutes (`_MINUTE_FIELDS`).
    list MINUTE_FIELDS;
    {
        Capture = "capture_minutes",
        Restore = "restore_minutes",
        Equivalence = "equivalence_minutes",
        Suffix = "suffix_minutes",
        ReplayWall = "replay_wall_minutes",
        Release = "release_minutes",
    }
}

/// A counter of the ledger: a [`ReplayCount`], so a misspelt name does not
/// compile.
pub trait CountField {
    /// The counter's position in [`COUNT_FIELDS`].
    fn count_index(self) -> usize;
}

impl CountField for ReplayCount {
    fn count_index(self) -> usize {
        self as usize
    }
}

/// Tests name counters by their keys, as the reference's tests do.
#[cfg(any(test, feature = "test-support"))]
impl CountField for &str {
    fn count_index(self) -> usize {
        index_of(COUNT_FIELDS, self, "count")
    }
}

/// A duration total of the ledger: a [`ReplayMinutes`].
pub trait MinuteField {
    /// The total's position in [`MINUTE_FIELDS`].
    fn minute_index(self) -> usize;
}

impl MinuteField for ReplayMinutes {
    fn minute_index(self) -> usize {
        self as usize
    }
}

/// Tests name duration totals by their keys.
#[cfg(any(test, feature = "test-support"))]
impl MinuteField for &str {
    fn minute_index(self) -> usize {
        index_of(MINUTE_FIELDS, self, "duration")
    }
}

/// What the ledger adds up under its lock: the durations and the restores
/// by fidelity (the counters are atomics beside it).
#[derive(Default)]
struct Totals {
    seconds: Vec<f64>,
    fidelity: BTreeMap<String, u64>,
}

/// A thread-safe accumulator of replay counters and durations.
///
/// Fields are named by [`ReplayCount`] and [`ReplayMinutes`], so a typo does
/// not compile; a field named by its key as text is checked when used: an
/// unknown name is a programming error and panics (the reference raises
/// `ValueError`), so a typo cannot silently drop a metric.
///
/// The counters are atomics, so the children of a parallel group, which
/// count several each, never wait for one another to count; the durations
/// and fidelity counts share one lock.
pub struct ReplayMetricLedger {
    /// One per [`COUNT_FIELDS`] key.
    counts: Box<[AtomicU64]>,
    totals: Mutex<Totals>,
}

impl Default for ReplayMetricLedger {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(any(test, feature = "test-support"))]
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
            counts: COUNT_FIELDS.iter().map(|_| AtomicU64::new(0)).collect(),
            totals: Mutex::new(Totals {
                seconds: vec![0.0; MINUTE_FIELDS.len()],
                fidelity: BTreeMap::new(),
            }),
        }
    }

    fn with<R>(&self, body: impl FnOnce(&mut Totals) -> R) -> R {
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        body(&mut totals)
    }

    /// Add one to counter `field`.
    pub fn increment(&self, field: impl CountField) {
        self.add(field, 1);
    }

    /// Add `amount` to counter `field`.
    pub fn add(&self, field: impl CountField, amount: u64) {
        let index = field.count_index();
        self.counts[index].fetch_add(amount, Ordering::Relaxed);
    }

    /// Add `elapsed` to duration `field`.
    pub fn add_duration(&self, field: impl MinuteField, elapsed: Duration) {
        let index = field.minute_index();
        self.with(|totals| totals.seconds[index] += elapsed.as_secs_f64());
    }

    /// Count one restore that achieved `fidelity` (reference
    /// `observe_fidelity`).
    pub fn observe_fidelity(&self, fidelity: &str) {
        self.with(|totals| match totals.fidelity.get_mut(fidelity) {
            Some(count) => *count += 1,
            None => {
                totals.fidelity.insert(fidelity.to_owned(), 1);
            }
        });
    }

    /// Current value of counter `field`.
    pub fn count(&self, field: impl CountField) -> u64 {
        let index = field.count_index();
        self.counts[index].load(Ordering::Relaxed)
    }

    /// The totals so far, leaving the ledger empty.
    pub fn take_totals(&self) -> ReplayTotals {
        let counts = COUNT_FIELDS
            .iter()
            .zip(&self.counts)
            .map(|(field, count)| (field, count.swap(0, Ordering::Relaxed)))
            .filter(|(_, count)| *count > 0)
            .map(|(field, count)| ((*field).to_owned(), count))
            .collect();
        self.with(|totals| {
            let seconds = MINUTE_FIELDS
                .iter()
                .zip(&totals.seconds)
                .filter(|(_, seconds)| **seconds > 0.0)
                .map(|(field, seconds)| ((*field).to_owned(), *seconds))
                .collect();
            let taken = ReplayTotals {
                counts,
                seconds,
                restored_fidelity_counts: std::mem::take(&mut totals.fidelity),
            };
            totals.seconds.iter_mut().for_each(|seconds| *seconds = 0.0);
            taken
        })
    }

    /// Adds `other` (another process's totals) to this ledger.
    ///
    /// # Errors
    /// A key that is not a counter or duration of the ledger, a negative or
    /// non-finite duration, or a fidelity name that is not one of the four:
    /// nothing is added then.
    pub fn absorb(&self, other: &ReplayTotals) -> Result<(), String> {
        let counts = other
            .counts
            .iter()
            .map(|(key, count)| {
                COUNT_FIELDS
                    .iter()
                    .position(|known| known == key)
                    .map(|index| (index, *count))
                    .ok_or_else(|| format!("unknown replay counter {key:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let seconds = other
            .seconds
            .iter()
            .map(|(key, seconds)| {
                let index = MINUTE_FIELDS
                    .iter()
                    .position(|known| known == key)
                    .ok_or_else(|| format!("unknown replay duration {key:?}"))?;
                if !seconds.is_finite() || *seconds < 0.0 {
                    return Err(format!("replay duration {key} is {seconds} seconds"));
                }
                Ok((index, *seconds))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(name) = other
            .restored_fidelity_counts
            .keys()
            .find(|name| name.parse::<super::Fidelity>().is_err())
        {
            return Err(format!("unknown restored fidelity {name:?}"));
        }
        for (index, count) in counts {
            // Saturating, as the lock-held sum was: never fails.
            let _ =
                self.counts[index].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                    Some(total.saturating_add(count))
                });
        }
        self.with(|totals| {
            for (index, seconds) in seconds {
                totals.seconds[index] += seconds;
            }
            for (name, count) in &other.restored_fidelity_counts {
                let total = totals.fidelity.entry(name.clone()).or_default();
                *total = total.saturating_add(*count);
            }
        });
        Ok(())
    }

    /// Every counter, every `*_minutes` total (rounded to 6 places) and
    /// `restored_fidelity_counts`, as one JSON object (reference
    /// `snapshot`).
    pub fn snapshot(&self) -> Map<String, Value> {
        self.with(|totals| {
            let mut map = Map::new();
            for (field, count) in COUNT_FIELDS.iter().zip(&self.counts) {
                map.insert((*field).into(), Value::from(count.load(Ordering::Relaxed)));
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

/// A ledger's raw totals, to move them between processes: a worker of a
/// distributed run takes the totals of each unit it ran
/// ([`ReplayMetricLedger::take_totals`]) and the coordinator adds them to
/// its own ledger ([`ReplayMetricLedger::absorb`]). Keys are the snapshot's
/// (`capture_attempt_count`, ...); durations are in seconds, unrounded.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReplayTotals {
    /// Counters by their [`COUNT_FIELDS`] key; zero counters are left out.
    pub counts: BTreeMap<String, u64>,
    /// Durations by their [`MINUTE_FIELDS`] key, in seconds; zero ones are
    /// left out.
    pub seconds: BTreeMap<String, f64>,
    /// Restores by achieved fidelity (`restored_fidelity_counts`).
    pub restored_fidelity_counts: BTreeMap<String, u64>,
}

impl ReplayTotals {
    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
            && self.seconds.is_empty()
            && self.restored_fidelity_counts.is_empty()
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
    fn totals_taken_from_one_ledger_add_up_in_another_and_leave_it_empty() {
        let worker = ReplayMetricLedger::new();
        worker.increment("capture_attempt_count");
        worker.add("child_session_fork_success_count", 3);
        worker.add_duration("suffix_minutes", Duration::from_secs(30));
        worker.observe_fidelity("exact");
        let coordinator = ReplayMetricLedger::new();
        coordinator.increment("capture_attempt_count");
        let taken = worker.take_totals();
        assert_eq!(taken.counts.len(), 2, "zero counters are left out");
        coordinator.absorb(&taken).unwrap();
        coordinator.absorb(&worker.take_totals()).unwrap();
        assert!(worker.take_totals().is_empty(), "taking empties the ledger");
        assert_eq!(worker.snapshot()["capture_attempt_count"], 0);
        let snapshot = coordinator.snapshot();
        assert_eq!(snapshot["capture_attempt_count"], 2);
        assert_eq!(snapshot["child_session_fork_success_count"], 3);
        assert_eq!(snapshot["suffix_minutes"], 0.5);
        assert_eq!(snapshot["restored_fidelity_counts"]["exact"], 1);
    }

    #[test]
    fn totals_naming_what_the_ledger_does_not_count_are_refused_whole() {
        let ledger = ReplayMetricLedger::new();
        let mut totals = ReplayTotals::default();
        totals.counts.insert("capture_attempt_count".into(), 1);
        totals.counts.insert("made_up_count".into(), 1);
        assert!(
            ledger
                .absorb(&totals)
                .unwrap_err()
                .contains("made_up_count")
        );
        assert_eq!(
            ledger.count(ReplayCount::CaptureAttempt),
            0,
            "nothing added"
        );
        let mut totals = ReplayTotals::default();
        totals.seconds.insert("suffix_minutes".into(), -1.0);
        assert!(
            ledger
                .absorb(&totals)
                .unwrap_err()
                .contains("suffix_minutes")
        );
        let mut totals = ReplayTotals::default();
        totals.restored_fidelity_counts.insert("perfect".into(), 1);
        assert!(ledger.absorb(&totals).unwrap_err().contains("perfect"));
        assert!(ledger.take_totals().is_empty());
    }

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
    fn named_metrics_are_the_reference_keys_in_order_and_share_the_counters() {
        let keys: Vec<&str> = ReplayCount::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(keys, COUNT_FIELDS);
        assert_eq!(COUNT_FIELDS.len(), 59);
        let keys: Vec<&str> = ReplayMinutes::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(keys, MINUTE_FIELDS);
        for (index, metric) in ReplayCount::ALL.iter().enumerate() {
            assert_eq!(metric.count_index(), index);
            assert_eq!(metric.as_str().count_index(), index);
        }
        let ledger = ReplayMetricLedger::new();
        ledger.increment(ReplayCount::ReleaseFailure);
        ledger.add("release_failure_count", 2);
        ledger.add_duration(ReplayMinutes::Capture, Duration::from_secs(30));
        assert_eq!(ledger.count(ReplayCount::ReleaseFailure), 3);
        assert_eq!(ledger.count("release_failure_count"), 3);
        assert_eq!(ledger.snapshot()["capture_minutes"], 0.5);
    }

    #[test]
    #[should_panic(expected = "unknown replay count metric: capture_typo")]
    fn unknown_fields_are_a_programming_error() {
        ReplayMetricLedger::new().increment("capture_typo");
    }
}
