//! Arms compared: several runs' totals and economics side by side, the
//! reference's `aggregate_arms` (`harness_runtime.py`) over run
//! directories instead of in-memory arms.

use crate::episode::metrics::ExecutionMetrics;

use super::novelty::step_auc;
use super::{RunReport, RunState};

/// One arm's row of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmRow {
    /// The arm's label: its `arm_key`, or its run directory's name when
    /// two compared runs share an `arm_key`.
    pub label: String,
    /// `novel_value_total` (reference `novel_value_endpoint`).
    pub novel_value_endpoint: f64,
    /// [`step_auc`] of the novelty curve to the common horizon.
    pub novel_value_auc: f64,
    /// `raw_value_total`.
    pub raw_value_total: f64,
    /// `coverage_count`.
    pub coverage_count: usize,
    /// `variant_records_total`.
    pub variant_records_total: u64,
    /// `epoch_count`.
    pub epoch_count: usize,
    /// `elapsed_minutes`.
    pub elapsed_minutes: f64,
    /// `stop_reason`, or the partial run's state (`partial: still
    /// running`).
    pub stop_reason: String,
    /// `worker_count`.
    pub worker_count: usize,
    /// The arm's cumulative execution metrics.
    pub execution_metrics: ExecutionMetrics,
    /// Novel value per requested worker minute (horizon times the arm's
    /// workers, at least 0.001), rounded to 4 places.
    pub novel_value_per_requested_worker_minute: f64,
    /// Novel value per effective compute minute, rounded to 4 places;
    /// `None` when no compute was measured.
    pub novel_value_per_effective_compute_minute: Option<f64>,
}

/// The comparison of several arms.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmsComparison {
    /// The horizon every arm is measured to, minutes: the largest
    /// `budget_minutes` among the arms, or without any budget the longest
    /// `elapsed_minutes` (the reference takes one budget for all arms).
    pub horizon_minutes: f64,
    /// One row per run, in the order given.
    pub arms: Vec<ArmRow>,
}

/// Compares `runs` (reference `aggregate_arms`).
pub fn aggregate_arms(runs: &[RunReport]) -> ArmsComparison {
    let budget = runs
        .iter()
        .filter_map(|run| run.head.budget_minutes)
        .fold(None, |max: Option<f64>, b| {
            Some(max.map_or(b, |m| m.max(b)))
        });
    let horizon_minutes = budget.unwrap_or_else(|| {
        runs.iter()
            .map(|run| run.head.elapsed_minutes)
            .fold(0.0, f64::max)
    });
    let arms = runs
        .iter()
        .map(|run| {
            let arm = &run.head;
            let shared = runs
                .iter()
                .filter(|other| other.head.arm_key == arm.arm_key)
                .count()
                > 1;
            let label = if shared {
                run.dir_name()
            } else {
                arm.arm_key.clone()
            };
            let effective = arm.execution_metrics.effective_compute_minutes;
            let round4 = |x: f64| crate::episode::value::round_to(x, 4);
            ArmRow {
                label,
                novel_value_endpoint: arm.novel_value_total,
                novel_value_auc: step_auc(&run.novelty.points, horizon_minutes),
                raw_value_total: arm.raw_value_total,
                coverage_count: arm.coverage_count,
                variant_records_total: arm.variant_records_total,
                epoch_count: arm.epoch_count,
                elapsed_minutes: arm.elapsed_minutes,
                stop_reason: match &arm.state {
                    RunState::Finished(reason) => reason.as_str().to_owned(),
                    partial => partial.label(),
                },
                worker_count: arm.worker_count,
                execution_metrics: arm.execution_metrics.clone(),
                novel_value_per_requested_worker_minute: round4(
                    arm.novel_value_total / (horizon_minutes * arm.worker_count as f64).max(0.001),
                ),
                novel_value_per_effective_compute_minute: (effective > 0.0)
                    .then(|| round4(arm.novel_value_total / effective)),
            }
        })
        .collect();
    ArmsComparison {
        horizon_minutes,
        arms,
    }
}
