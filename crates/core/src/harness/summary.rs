//! The JSON shapes an arm writes: epoch summaries (`epochs.jsonl`), anytime
//! checkpoints, and the arm summary (`summary.json`). Field names follow
//! `run_budget_arm` in `harness_runtime.py`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::episode::metrics::ExecutionMetrics;
use crate::harness::error_tally::ErrorCounts;
use crate::replay::snapshot_totals::SnapshotTotals;

use super::catalog::FrontierAudit;
use super::queue::LaneSummary;

/// `schema_version` of epoch and arm summaries (reference
/// `HARNESS_ARM_SCHEMA_VERSION`).
pub const HARNESS_ARM_SCHEMA_VERSION: &str = "loopx_explore_harness_arm_v0";
/// `runtime_policy.schema_version`.
pub const HARNESS_RUNTIME_POLICY_SCHEMA_VERSION: &str = "loopx_explore_harness_runtime_policy_v0";
/// `resume.schema_version`.
pub const HARNESS_RESUME_SCHEMA_VERSION: &str = "loopx_explore_harness_resume_v0";

/// Why the epoch loop ended (`stop_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every epoch up to `max_epochs` ran.
    MaxEpochs,
    /// The budget was spent before the next epoch.
    BudgetExhausted,
    /// The remaining budget was below the recent epochs' wall time times
    /// the guard factor.
    DurationGuard,
    /// `list_seed_items` returned nothing.
    SeedQueueEmpty,
}

impl StopReason {
    /// The snake_case name written to `stop_reason`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::MaxEpochs => "max_epochs",
            StopReason::BudgetExhausted => "budget_exhausted",
            StopReason::DurationGuard => "duration_guard",
            StopReason::SeedQueueEmpty => "seed_queue_empty",
        }
    }
}

/// One completed epoch (one line of `epochs.jsonl`; kept compact, without
/// lane item lists, in the checkpoint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochSummary {
    /// [`HARNESS_ARM_SCHEMA_VERSION`].
    pub schema_version: String,
    /// 1-based epoch number.
    pub epoch: u32,
    /// Minutes from queue start to the last lane's end, rounded to 3.
    pub epoch_wall_minutes: f64,
    /// Items queued: seeds plus compiled variants.
    pub queue_size: usize,
    /// Units the queue ran (groups and invalid units, or plain items).
    pub execution_unit_count: usize,
    /// Records produced, including compile-error records.
    #[serde(default)]
    pub record_count: u64,
    /// Sum of the records' `raw_value`, rounded to 3.
    #[serde(default)]
    pub raw_value: f64,
    /// Sum of the records' `novel_value`, rounded to 3.
    #[serde(default)]
    pub novel_value: f64,
    /// [`crate::episode::metrics::summarize_execution_records`] of the
    /// epoch's records.
    pub execution_metrics: ExecutionMetrics,
    /// The frontier audit; `null` without a variant catalog.
    pub frontier: Option<FrontierAudit>,
    /// Per-lane summaries in lane order.
    pub lanes: Vec<LaneSummary>,
}

impl EpochSummary {
    /// The summary without the lanes' per-record lists (checkpoint form;
    /// nothing large is copied).
    pub fn compact(&self) -> EpochSummary {
        EpochSummary {
            schema_version: self.schema_version.clone(),
            epoch: self.epoch,
            epoch_wall_minutes: self.epoch_wall_minutes,
            queue_size: self.queue_size,
            execution_unit_count: self.execution_unit_count,
            record_count: self.record_count,
            raw_value: self.raw_value,
            novel_value: self.novel_value,
            execution_metrics: self.execution_metrics.clone(),
            frontier: self.frontier.clone(),
            lanes: self.lanes.iter().map(LaneSummary::compact).collect(),
        }
    }
}

/// One point of the anytime curve, after each epoch (reference
/// `checkpoints` entries).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnytimeCheckpoint {
    /// The epoch just completed.
    pub epoch: u32,
    /// Arm minutes elapsed (including time before a resume), rounded to 3.
    pub elapsed_minutes: f64,
    /// Cumulative raw value, rounded to 3.
    pub raw_value_cum: f64,
    /// Cumulative novel value, rounded to 3.
    pub novel_value_cum: f64,
    /// Families seen so far.
    pub coverage_count_cum: usize,
    /// Variant records so far.
    pub variant_records_cum: u64,
    /// `elapsed_minutes * worker_count`, rounded to 3.
    pub requested_worker_minutes_cum: f64,
    /// Cumulative execution metrics.
    pub execution_metrics_cum: ExecutionMetrics,
}

/// `resume` block of the arm summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResumeInfo {
    /// [`HARNESS_RESUME_SCHEMA_VERSION`].
    pub schema_version: String,
    /// Checkpoints were written.
    pub enabled: bool,
    /// This run continued a checkpoint.
    pub resumed: bool,
    /// The checkpoint schema.
    pub checkpoint_schema_version: String,
    /// Where the checkpoint lives (when enabled).
    pub checkpoint_path: Option<String>,
    /// Epochs restored from the checkpoint.
    pub restored_epoch_count: u32,
}

/// `runtime_policy.episode_execution`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeExecution {
    /// `recoverable-v0` or `standalone`.
    pub mode: String,
    /// Restore mechanics belong to the adapter (episode mode).
    pub adapter_owned_restore: bool,
}

/// `runtime_policy` of the arm summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimePolicy {
    /// [`HARNESS_RUNTIME_POLICY_SCHEMA_VERSION`].
    pub schema_version: String,
    /// `record` or `fatal`.
    pub item_failure_policy: String,
    /// True under `record`: one item's failure does not stop the others.
    pub item_exception_isolation: bool,
    /// How units run.
    pub episode_execution: EpisodeExecution,
    /// Always `host`: `duration_minutes` is measured by the host, never
    /// taken from the adapter (a deviation from the reference).
    pub duration_source: String,
    /// Guidance the harness does not enforce (as in the reference).
    pub planner_guidance: Value,
}

/// The arm summary (`summary.json`; reference `run_budget_arm` return
/// value without `epochs`, which are in `epochs.jsonl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    /// [`HARNESS_ARM_SCHEMA_VERSION`].
    pub schema_version: String,
    /// The arm name.
    pub arm_key: String,
    /// Budget in minutes; `null` when unlimited.
    pub budget_minutes: Option<f64>,
    /// Queue worker lanes.
    pub worker_count: usize,
    /// Arm minutes elapsed (including before a resume), rounded to 3.
    pub elapsed_minutes: f64,
    /// Why the loop ended.
    pub stop_reason: StopReason,
    /// Completed epochs (including restored ones).
    pub epoch_count: usize,
    /// Records in `records.jsonl`.
    pub record_count: u64,
    /// Total raw value, rounded to 3.
    pub raw_value_total: f64,
    /// Total novel value, rounded to 3.
    pub novel_value_total: f64,
    /// Records with a truthy `is_variant`.
    pub variant_records_total: u64,
    /// Cumulative execution metrics.
    pub execution_metrics: ExecutionMetrics,
    /// Families seen.
    pub coverage_count: usize,
    /// Family -> elapsed minutes at the end of the epoch it was first seen.
    pub coverage_first_seen_minutes: Map<String, Value>,
    /// The anytime curve, one point per epoch.
    pub checkpoints: Vec<AnytimeCheckpoint>,
    /// Checkpoint/resume facts.
    pub resume: ResumeInfo,
    /// The failure policy and execution mode.
    pub runtime_policy: RuntimePolicy,
}

/// `adapter` of a run's `summary.json`: the component that ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryAdapter {
    /// The path it was loaded from, as given.
    pub path: String,
    /// sha256 of the component bytes, lowercase hex.
    pub sha256: String,
    /// Size of the component, bytes.
    pub size_bytes: u64,
    /// Protocols detected from its exports.
    pub protocols: Vec<String>,
}

/// What `sandloop run` adds to the arm summary in `summary.json`
/// ([`super::RunDir::with_summary_host`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryHost {
    /// The component that ran.
    pub adapter: SummaryAdapter,
    /// The host's version (`CARGO_PKG_VERSION`).
    pub host_version: String,
}

/// A run's `summary.json` as `sandloop run` leaves it: the arm summary's
/// fields, the [`SummaryHost`] fields beside them, and — added once the arm
/// finished, when the adapter replays — the replay metric ledger and the
/// snapshot totals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The arm summary (its fields at the top level).
    #[serde(flatten)]
    pub arm: ArmSummary,
    /// The adapter and host version (at the top level).
    #[serde(flatten)]
    pub host: SummaryHost,
    /// The replay metric ledger: counter name -> count, `*_minutes` ->
    /// minutes, `restored_fidelity_counts` (reference
    /// `ReplayPointRegistry.metrics`); absent without replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Map<String, Value>>,
    /// `error_count` and `errors_by_type` (at the top level): the run's
    /// failures, kept records of a resumed run included; absent in a
    /// summary written before sandloop counted them.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<ErrorCounts>,
    /// Snapshot totals; absent unless children were snapshot-forked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotTotals>,
    /// The `distributed` block of a `sandloop run --nats` run: `nats`,
    /// `workers_seen`, `units_per_worker`, `redeliveries`,
    /// `duplicate_results`, `bytes_sent`, `bytes_received` (written from
    /// sandloop-distributed's typed `DistributedSummary`); read and kept as
    /// written, so reports show whatever a run recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Map<String, Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_files::tests::assert_golden_round_trip;

    #[test]
    fn a_run_summary_written_by_the_host_reads_back_and_writes_the_same_bytes() {
        let summary: RunSummary = assert_golden_round_trip(include_bytes!("golden/summary.json"));
        assert_eq!(summary.arm.schema_version, HARNESS_ARM_SCHEMA_VERSION);
        assert_eq!(summary.arm.record_count, 6);
        assert_eq!(summary.arm.stop_reason, StopReason::SeedQueueEmpty);
        assert_eq!(summary.arm.checkpoints.len(), 1);
        assert!(summary.arm.resume.resumed);
        assert_eq!(summary.host.host_version, "0.1.0");
        assert_eq!(summary.host.adapter.sha256.len(), 64);
        let replay = summary.replay.expect("the adapter replays");
        assert_eq!(replay["capture_success_count"], Value::from(0));
        assert_eq!(summary.snapshots, None);
        assert_eq!(summary.distributed, None);
    }
}
