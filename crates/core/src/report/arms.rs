//! Arms compared: several runs' totals and economics side by side, the
//! reference's `aggregate_arms` (`harness_runtime.py`) over run
//! directories instead of in-memory arms.

use std::path::Path;

use crate::episode::metrics::ExecutionMetrics;

use super::novelty::step_auc;
use super::{RunReport, RunState};

/// One arm's row of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmRow {
    /// The arm's label: its `arm_key`, followed, when compared runs share
    /// an `arm_key`, by the shortest end of its run directory's path that
    /// tells it from theirs (`main (b/run-1)`).
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
            let sharing: Vec<&RunReport> = runs
                .iter()
                .filter(|other| other.head.arm_key == arm.arm_key)
                .collect();
            let label = if sharing.len() > 1 {
                let paths: Vec<&Path> = sharing.iter().map(|other| other.dir.as_path()).collect();
                let mine = sharing
                    .iter()
                    .position(|other| std::ptr::eq(*other, run))
                    .unwrap_or(0);
                format!("{} ({})", arm.arm_key, path_ends(&paths)[mine])
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

/// For each of `paths`, its shortest end (last components, `/`-joined)
/// that no other path of the list ends with; a path given twice keeps
/// its whole text and its place in the list (`runs/a #2`).
pub fn path_ends(paths: &[&Path]) -> Vec<String> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|path| {
            path.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .collect();
    // Path `j` ends with the last `n` components of path `i`.
    let ends_alike = |i: usize, j: usize, n: usize| {
        let (a, b) = (&parts[i], &parts[j]);
        b.len() >= n && a[a.len() - n..] == b[b.len() - n..]
    };
    (0..paths.len())
        .map(|i| {
            (1..=parts[i].len())
                .find(|&n| (0..paths.len()).all(|j| j == i || !ends_alike(i, j, n)))
                .map(|n| parts[i][parts[i].len() - n..].join("/"))
                .unwrap_or_else(|| format!("{} #{}", paths[i].display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_are_told_apart_by_the_shortest_distinct_path_end() {
        let ends = |paths: &[&str]| {
            let paths: Vec<&Path> = paths.iter().map(Path::new).collect();
            path_ends(&paths)
        };
        assert_eq!(ends(&["runs/a", "runs/b"]), ["a", "b"]);
        assert_eq!(ends(&["x/run", "y/run"]), ["x/run", "y/run"]);
        assert_eq!(
            ends(&["lab/x/run", "home/y/run", "z"]),
            ["x/run", "y/run", "z"]
        );
        assert_eq!(ends(&["run", "old/run"]), ["run #1", "old/run"]);
        assert_eq!(ends(&["runs/a", "runs/a"]), ["runs/a #1", "runs/a #2"]);
        assert_eq!(
            ends(&["prun", "run"]),
            ["prun", "run"],
            "ends are whole components"
        );
    }
}
