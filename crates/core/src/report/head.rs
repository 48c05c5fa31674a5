//! The run's headline figures, from `summary.json` when the run finished,
//! or from what a partial run left — `manifest.json`, `checkpoint.json`,
//! `epochs.jsonl`, `records.jsonl` — when it stopped, failed or is still
//! running.
//!
//! A partial run's figures are what is on disk: totals summed over every
//! record written (those of the unfinished epoch included), the anytime
//! curve and execution metrics as of the last checkpoint, and the state
//! read from the directory: a process holding the run's lock is running,
//! `failure.json` says why a run failed, anything else stopped.

use std::path::Path;

use serde_json::{Map, Value};

use crate::dir_lock::holder_of;
use crate::episode::metrics::ExecutionMetrics;
use crate::harness::checkpoint::ArmCheckpoint;
use crate::harness::run_files::{CHECKPOINT_FILE, FAILURE_FILE, RunFailure, read_run_file};
use crate::harness::summary::{AnytimeCheckpoint, RunSummary, StopReason};
use crate::harness::{EpochSummary, RunManifest};

use super::error::ReportError;
use super::record_facts::RecordFacts;

/// How far the run got.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// `summary.json` is written: the run ended for `stop_reason`.
    Finished(StopReason),
    /// A process holds the run's lock: it is still going.
    Running,
    /// It stopped with `failure.json`, whose `error` is kept.
    Failed(String),
    /// It stopped without a summary or a failure (killed, or interrupted).
    Stopped,
}

impl RunState {
    /// `stop: max_epochs`, `partial: still running`, `partial: failed
    /// (…)`, `partial: stopped`.
    pub fn label(&self) -> String {
        match self {
            RunState::Finished(reason) => format!("stop: {}", reason.as_str()),
            RunState::Running => "partial: still running".into(),
            RunState::Failed(why) => format!("partial: failed ({why})"),
            RunState::Stopped => "partial: stopped before its summary".into(),
        }
    }

    /// Whether `summary.json` was missing.
    pub fn is_partial(&self) -> bool {
        !matches!(self, RunState::Finished(_))
    }
}

/// The figures the report's header, arm table and economics use.
#[derive(Clone, Debug, PartialEq)]
pub struct RunHead {
    /// How far the run got.
    pub state: RunState,
    /// `arm_key` (a partial run: the last invocation's `--arm`, else
    /// `main`).
    pub arm_key: String,
    /// `budget_minutes`; `None` when unlimited.
    pub budget_minutes: Option<f64>,
    /// Queue worker lanes.
    pub worker_count: usize,
    /// Arm minutes elapsed (a partial run: as of its last checkpoint).
    pub elapsed_minutes: f64,
    /// Finished epochs.
    pub epoch_count: usize,
    /// Records written.
    pub record_count: u64,
    /// Raw value of every record.
    pub raw_value_total: f64,
    /// Novel value of every record.
    pub novel_value_total: f64,
    /// Records with a truthy `is_variant`.
    pub variant_records_total: u64,
    /// Cumulative execution metrics (a partial run: as of its last
    /// checkpoint).
    pub execution_metrics: ExecutionMetrics,
    /// Families seen.
    pub coverage_count: usize,
    /// The anytime curve, one point per finished epoch.
    pub checkpoints: Vec<AnytimeCheckpoint>,
    /// The summary's `distributed` block, when a distributed run wrote one.
    pub distributed: Option<Map<String, Value>>,
}

impl RunHead {
    /// The head of a finished run.
    pub fn of_summary(summary: &RunSummary) -> Self {
        let arm = &summary.arm;
        RunHead {
            state: RunState::Finished(arm.stop_reason),
            arm_key: arm.arm_key.clone(),
            budget_minutes: arm.budget_minutes,
            worker_count: arm.worker_count,
            elapsed_minutes: arm.elapsed_minutes,
            epoch_count: arm.epoch_count,
            record_count: arm.record_count,
            raw_value_total: arm.raw_value_total,
            novel_value_total: arm.novel_value_total,
            variant_records_total: arm.variant_records_total,
            execution_metrics: arm.execution_metrics.clone(),
            coverage_count: arm.coverage_count,
            checkpoints: arm.checkpoints.clone(),
            distributed: summary.distributed.clone(),
        }
    }

    /// The head of a run in `dir` without `summary.json`.
    ///
    /// Errors: a damaged `checkpoint.json` or `failure.json`, naming it.
    pub fn of_partial(
        dir: &Path,
        manifest: &RunManifest,
        epochs: &[EpochSummary],
        records: &[RecordFacts],
    ) -> Result<Self, ReportError> {
        let checkpoint_path = dir.join(CHECKPOINT_FILE);
        let checkpoint: Option<ArmCheckpoint> = if checkpoint_path.exists() {
            Some(
                read_run_file(&checkpoint_path)
                    .map_err(|error| ReportError::run_file(&checkpoint_path, error))?,
            )
        } else {
            None
        };
        let failure_path = dir.join(FAILURE_FILE);
        let state = if holder_of(dir).is_some() {
            RunState::Running
        } else if failure_path.exists() {
            let failure: RunFailure = read_run_file(&failure_path)
                .map_err(|error| ReportError::run_file(&failure_path, error))?;
            RunState::Failed(failure.error)
        } else {
            RunState::Stopped
        };
        let options = manifest
            .invocations
            .last()
            .map(|invocation| &invocation.options);
        let option = |key: &str| options.and_then(|options| options.get(key));
        let state_of = checkpoint.as_ref().map(|checkpoint| &checkpoint.state);
        let checkpoints = state_of.map(|s| s.checkpoints.clone()).unwrap_or_default();
        Ok(RunHead {
            state,
            arm_key: option("arm")
                .and_then(Value::as_str)
                .unwrap_or("main")
                .to_string(),
            budget_minutes: option("budget_minutes").and_then(Value::as_f64),
            worker_count: option("workers")
                .and_then(Value::as_u64)
                .map_or(1, |workers| workers.max(1) as usize),
            elapsed_minutes: state_of.map_or(0.0, |s| s.elapsed_minutes),
            epoch_count: epochs.len(),
            record_count: records.len() as u64,
            raw_value_total: records.iter().map(|r| r.raw_value).sum(),
            novel_value_total: records.iter().map(|r| r.novel_value).sum(),
            variant_records_total: records.iter().filter(|r| r.is_variant).count() as u64,
            execution_metrics: checkpoints
                .last()
                .map(|point| point.execution_metrics_cum.clone())
                .unwrap_or_default(),
            coverage_count: state_of.map_or(0, |s| s.coverage_first_seen.len()),
            checkpoints,
            distributed: None,
        })
    }
}
