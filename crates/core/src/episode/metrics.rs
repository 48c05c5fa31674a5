//! Actual component cost and avoided prefix recomputation.
//!
//! Mirrors `summarize_execution_records` and `combine_execution_metrics` in
//! `episode_runtime.py`; minute fields are rounded to 6 places as there.

use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

use super::adapter::Record;
use super::records::{RECORD_KIND_EPISODE_SUFFIX, RECORD_KIND_SHARED_PREFIX};
use super::unit_record::RecordFields;
use super::value::{float_or_zero, round_to, str_or_empty};

/// Execution cost of a set of records (all minutes, rounded to 6 places).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionMetrics {
    /// Minutes spent preparing shared prefixes (`shared_prefix` records).
    pub shared_prefix_compute_minutes: f64,
    /// Minutes spent in suffixes (`episode_suffix` records).
    pub episode_suffix_compute_minutes: f64,
    /// Minutes of every other record (`standalone` or no `record_kind`).
    pub standalone_compute_minutes: f64,
    /// Sum of the three above.
    pub effective_compute_minutes: f64,
    /// Prefix minutes not recomputed: per group, prefix minutes times
    /// (attempted suffixes - 1), floored at 0.
    pub avoided_recompute_minutes: f64,
    /// As `avoided_recompute_minutes`, counting only suffixes whose
    /// `execution_status` is not `adapter_error`.
    pub successful_avoided_recompute_minutes: f64,
    /// Distinct non-empty `execution_group_id`s.
    pub episode_group_count: u64,
    /// `episode_suffix` records.
    pub episode_count: u64,
    /// `episode_suffix` records with `execution_status = "adapter_error"`.
    pub episode_error_count: u64,
}

/// `max(0, float(record.duration_minutes or 0))`, `0` when not numeric
/// (reference `_duration`).
pub fn record_duration_minutes(record: &(impl RecordFields + ?Sized)) -> f64 {
    float_or_zero(record.field("duration_minutes"))
        .unwrap_or(0.0)
        .max(0.0)
}

#[derive(Clone, Debug, Default)]
struct GroupTally {
    id: String,
    prefix: f64,
    attempted: f64,
    successful: f64,
}

/// Incremental [`summarize_execution_records`]: add records one by one (in
/// any grouping), read the metrics with [`MetricsAccumulator::finish`].
#[derive(Clone, Debug)]
pub struct MetricsAccumulator {
    shared_prefix: f64,
    suffix: f64,
    standalone: f64,
    group_index: HashMap<String, usize>,
    /// Index of the last record's group: a group's records usually arrive
    /// together, so most look-ups are skipped.
    last_group: Option<usize>,
    groups: Vec<GroupTally>,
    episode_count: u64,
    episode_error_count: u64,
    force_standalone: bool,
}

impl Default for MetricsAccumulator {
    fn default() -> Self {
        Self {
            shared_prefix: 0.0,
            suffix: 0.0,
            standalone: 0.0,
            group_index: HashMap::new(),
            last_group: None,
            groups: Vec::new(),
            episode_count: 0,
            episode_error_count: 0,
            force_standalone: false,
        }
    }
}

impl MetricsAccumulator {
    /// An empty accumulator that reads each record's `record_kind` and
    /// `execution_group_id`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An accumulator for an arm without episode groups: every record counts
    /// as `standalone` with no group, whatever the adapter wrote (the
    /// reference rewrites those fields before summarising such arms).
    pub fn standalone_only() -> Self {
        Self {
            force_standalone: true,
            ..Self::default()
        }
    }

    /// Adds one record.
    pub fn add(&mut self, record: &(impl RecordFields + ?Sized)) {
        let duration = record_duration_minutes(record);
        if self.force_standalone {
            self.standalone += duration;
            return;
        }
        let kind = str_or_empty(record.field("record_kind"));
        let failed = str_or_empty(record.field("execution_status")) == "adapter_error";
        let kind = if kind == RECORD_KIND_SHARED_PREFIX {
            Kind::Prefix
        } else if kind == RECORD_KIND_EPISODE_SUFFIX {
            Kind::Suffix
        } else {
            Kind::Standalone
        };
        match kind {
            Kind::Prefix => self.shared_prefix += duration,
            Kind::Suffix => {
                self.suffix += duration;
                self.episode_count += 1;
                if failed {
                    self.episode_error_count += 1;
                }
            }
            Kind::Standalone => self.standalone += duration,
        }
        let group_id = str_or_empty(record.field("execution_group_id"));
        let group_id = group_id.trim();
        if group_id.is_empty() {
            return;
        }
        let cached = self
            .last_group
            .filter(|&index| self.groups[index].id == group_id);
        let index = match cached.or_else(|| self.group_index.get(group_id).copied()) {
            Some(index) => index,
            None => {
                self.groups.push(GroupTally {
                    id: group_id.to_owned(),
                    ..GroupTally::default()
                });
                self.group_index
                    .insert(group_id.to_owned(), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        self.last_group = Some(index);
        let tally = &mut self.groups[index];
        match kind {
            Kind::Prefix => tally.prefix += duration,
            Kind::Suffix => {
                tally.attempted += 1.0;
                if !failed {
                    tally.successful += 1.0;
                }
            }
            Kind::Standalone => {}
        }
    }

    /// The metrics of every record added so far.
    pub fn finish(&self) -> ExecutionMetrics {
        let avoided: f64 = self
            .groups
            .iter()
            .map(|g| g.prefix * (g.attempted - 1.0).max(0.0))
            .sum();
        let successful_avoided: f64 = self
            .groups
            .iter()
            .map(|g| g.prefix * (g.successful - 1.0).max(0.0))
            .sum();
        let effective = self.shared_prefix + self.suffix + self.standalone;
        ExecutionMetrics {
            shared_prefix_compute_minutes: round_to(self.shared_prefix, 6),
            episode_suffix_compute_minutes: round_to(self.suffix, 6),
            standalone_compute_minutes: round_to(self.standalone, 6),
            effective_compute_minutes: round_to(effective, 6),
            avoided_recompute_minutes: round_to(avoided, 6),
            successful_avoided_recompute_minutes: round_to(successful_avoided, 6),
            episode_group_count: self.groups.len() as u64,
            episode_count: self.episode_count,
            episode_error_count: self.episode_error_count,
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Prefix,
    Suffix,
    Standalone,
}

/// Actual component cost and avoided prefix recomputation of `records`
/// (reference `summarize_execution_records`).
///
/// `avoided_recompute_minutes` counts the prefix work avoided by every
/// attempted suffix; `successful_avoided_recompute_minutes` only suffixes
/// that produced a non-error observation. A record's kind is its
/// `record_kind` (missing reads as `standalone`).
pub fn summarize_execution_records<'a>(
    records: impl IntoIterator<Item = &'a Record>,
) -> ExecutionMetrics {
    let mut accumulator = MetricsAccumulator::new();
    for record in records {
        accumulator.add(record);
    }
    accumulator.finish()
}

/// Sums metrics (reference `combine_execution_metrics`): minute fields
/// summed then rounded to 6 places, counts summed.
pub fn combine_execution_metrics<'a>(
    parts: impl IntoIterator<Item = &'a ExecutionMetrics>,
) -> ExecutionMetrics {
    let mut sum = ExecutionMetrics::default();
    for part in parts {
        sum.shared_prefix_compute_minutes += part.shared_prefix_compute_minutes;
        sum.episode_suffix_compute_minutes += part.episode_suffix_compute_minutes;
        sum.standalone_compute_minutes += part.standalone_compute_minutes;
        sum.effective_compute_minutes += part.effective_compute_minutes;
        sum.avoided_recompute_minutes += part.avoided_recompute_minutes;
        sum.successful_avoided_recompute_minutes += part.successful_avoided_recompute_minutes;
        sum.episode_group_count += part.episode_group_count;
        sum.episode_count += part.episode_count;
        sum.episode_error_count += part.episode_error_count;
    }
    sum.shared_prefix_compute_minutes = round_to(sum.shared_prefix_compute_minutes, 6);
    sum.episode_suffix_compute_minutes = round_to(sum.episode_suffix_compute_minutes, 6);
    sum.standalone_compute_minutes = round_to(sum.standalone_compute_minutes, 6);
    sum.effective_compute_minutes = round_to(sum.effective_compute_minutes, 6);
    sum.avoided_recompute_minutes = round_to(sum.avoided_recompute_minutes, 6);
    sum.successful_avoided_recompute_minutes =
        round_to(sum.successful_avoided_recompute_minutes, 6);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn record(value: Value) -> Record {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn prefix(group: &str, minutes: f64) -> Record {
        record(
            json!({"record_kind": "shared_prefix", "execution_group_id": group,
                      "duration_minutes": minutes}),
        )
    }

    fn suffix(group: &str, minutes: f64, failed: bool) -> Record {
        let mut r = record(
            json!({"record_kind": "episode_suffix", "execution_group_id": group,
                                  "duration_minutes": minutes}),
        );
        if failed {
            r.insert("execution_status".into(), json!("adapter_error"));
        }
        r
    }

    #[test]
    fn avoided_recompute_is_prefix_times_suffixes_minus_one() {
        // Group A: prefix 2.0 with 4 suffixes -> 2.0 * 3 avoided.
        // Group B: prefix 1.5 with 1 suffix -> nothing avoided.
        let records = vec![
            prefix("A", 2.0),
            suffix("A", 0.5, false),
            suffix("A", 0.5, false),
            suffix("A", 0.5, false),
            suffix("A", 0.5, false),
            prefix("B", 1.5),
            suffix("B", 0.25, false),
            record(json!({"duration_minutes": 0.1})),
        ];
        let metrics = summarize_execution_records(&records);
        assert_eq!(
            metrics,
            ExecutionMetrics {
                shared_prefix_compute_minutes: 3.5,
                episode_suffix_compute_minutes: 2.25,
                standalone_compute_minutes: 0.1,
                effective_compute_minutes: 5.85,
                avoided_recompute_minutes: 6.0,
                successful_avoided_recompute_minutes: 6.0,
                episode_group_count: 2,
                episode_count: 5,
                episode_error_count: 0,
            }
        );
    }

    #[test]
    fn successful_avoided_excludes_failed_suffixes() {
        let records = vec![
            prefix("A", 3.0),
            suffix("A", 0.1, false),
            suffix("A", 0.1, true),
            suffix("A", 0.1, true),
        ];
        let metrics = summarize_execution_records(&records);
        assert_eq!(metrics.avoided_recompute_minutes, 6.0);
        assert_eq!(metrics.successful_avoided_recompute_minutes, 0.0);
        assert_eq!(metrics.episode_error_count, 2);
        assert_eq!(metrics.episode_count, 3);
    }

    #[test]
    fn durations_are_read_leniently_and_floored_at_zero() {
        let records = vec![
            record(json!({"duration_minutes": "0.5"})),
            record(json!({"duration_minutes": -3.0})),
            record(json!({"duration_minutes": "n/a"})),
            record(json!({"duration_minutes": null})),
            record(json!({"duration_minutes": true})),
            record(json!({"record_kind": "weird", "duration_minutes": 0.25})),
        ];
        let metrics = summarize_execution_records(&records);
        assert_eq!(metrics.standalone_compute_minutes, 1.75);
        assert_eq!(metrics.episode_group_count, 0);
    }

    #[test]
    fn standalone_only_ignores_adapter_written_group_fields() {
        let mut accumulator = MetricsAccumulator::standalone_only();
        accumulator.add(&prefix("A", 2.0));
        accumulator.add(&suffix("A", 1.0, false));
        accumulator.add(&suffix("A", 1.0, false));
        let metrics = accumulator.finish();
        assert_eq!(metrics.standalone_compute_minutes, 4.0);
        assert_eq!(metrics.avoided_recompute_minutes, 0.0);
        assert_eq!(metrics.episode_group_count, 0);
        assert_eq!(metrics.episode_count, 0);
    }

    #[test]
    fn group_ids_are_trimmed_and_rounding_is_to_six_places() {
        let records = vec![
            prefix(" G ", 0.1234564),
            suffix("G", 0.0000004, false),
            suffix("G", 0.0, false),
        ];
        let metrics = summarize_execution_records(&records);
        assert_eq!(metrics.episode_group_count, 1);
        assert_eq!(metrics.shared_prefix_compute_minutes, 0.123456);
        assert_eq!(metrics.episode_suffix_compute_minutes, 0.0);
        assert_eq!(metrics.avoided_recompute_minutes, 0.123456);
    }

    #[test]
    fn combine_sums_and_rounds() {
        let a = ExecutionMetrics {
            shared_prefix_compute_minutes: 0.1,
            avoided_recompute_minutes: 0.2,
            episode_group_count: 2,
            episode_count: 3,
            ..Default::default()
        };
        let b = ExecutionMetrics {
            shared_prefix_compute_minutes: 0.2,
            avoided_recompute_minutes: 0.1,
            episode_group_count: 1,
            episode_error_count: 4,
            ..Default::default()
        };
        let combined = combine_execution_metrics([&a, &b]);
        // 0.1 + 0.2 is 0.30000000000000004 before rounding.
        assert_eq!(combined.shared_prefix_compute_minutes, 0.3);
        assert_eq!(combined.avoided_recompute_minutes, 0.3);
        assert_eq!(combined.episode_group_count, 3);
        assert_eq!(combined.episode_count, 3);
        assert_eq!(combined.episode_error_count, 4);
        assert_eq!(combine_execution_metrics([]), ExecutionMetrics::default());
        let json = serde_json::to_value(&combined).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 9);
        assert!(json.get("successful_avoided_recompute_minutes").is_some());
    }
}
