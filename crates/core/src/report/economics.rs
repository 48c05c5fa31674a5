//! Execution economics per epoch: effective, shared-prefix, suffix and
//! standalone compute minutes, and the prefix recomputation the groups
//! avoided (each epoch's `execution_metrics` in `epochs.jsonl`, the
//! reference's `summarize_execution_records`).

use crate::episode::metrics::ExecutionMetrics;
use crate::harness::EpochSummary;

/// One epoch's economics.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochEconomics {
    /// The epoch.
    pub epoch: u32,
    /// Minutes from queue start to the last lane's end.
    pub wall_minutes: f64,
    /// The epoch's execution metrics.
    pub metrics: ExecutionMetrics,
}

/// Every epoch's economics, in order.
pub fn per_epoch(epochs: &[EpochSummary]) -> Vec<EpochEconomics> {
    epochs
        .iter()
        .map(|epoch| EpochEconomics {
            epoch: epoch.epoch,
            wall_minutes: epoch.epoch_wall_minutes,
            metrics: epoch.execution_metrics.clone(),
        })
        .collect()
}
