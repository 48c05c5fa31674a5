//! Execution economics per epoch: effective, shared-prefix, suffix and
//! standalone compute minutes, and the prefix recomputation the groups
//! avoided (each epoch's `execution_metrics` in `epochs.jsonl`, the
//! reference's `summarize_execution_records`), with the minutes charged
//! to failed records split out: a failed call is charged at least the
//! reference's 0.05 minutes, which for a fast adapter would otherwise be
//! most of every figure.

use crate::episode::metrics::ExecutionMetrics;
use crate::harness::EpochSummary;

use super::record_facts::{RecordFacts, RecordKind};

/// One epoch's economics.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochEconomics {
    /// The epoch.
    pub epoch: u32,
    /// Minutes from queue start to the last lane's end.
    pub wall_minutes: f64,
    /// The epoch's execution metrics (failed records' minutes included,
    /// as the reference counts them).
    pub metrics: ExecutionMetrics,
    /// Of those, the minutes charged to failed records, by the kind the
    /// metrics count them under.
    pub error_charge: ErrorCharge,
}

/// Minutes charged to failed records (`duration_minutes` of a record with
/// `adapter_error`), by the metrics' kinds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorCharge {
    /// Failed `shared_prefix` records.
    pub shared_prefix_minutes: f64,
    /// Failed `episode_suffix` records (isolated children included).
    pub episode_suffix_minutes: f64,
    /// Every other failed record.
    pub standalone_minutes: f64,
}

impl ErrorCharge {
    /// The three together.
    pub fn total_minutes(&self) -> f64 {
        self.shared_prefix_minutes + self.episode_suffix_minutes + self.standalone_minutes
    }
}

/// Every epoch's economics, in order, with the error charge of its
/// `records`.
pub fn per_epoch(epochs: &[EpochSummary], records: &[RecordFacts]) -> Vec<EpochEconomics> {
    epochs
        .iter()
        .map(|epoch| {
            let mut charge = ErrorCharge::default();
            for record in records
                .iter()
                .filter(|record| record.epoch == epoch.epoch && record.error.is_some())
            {
                let minutes = match record.kind {
                    RecordKind::Prefix => &mut charge.shared_prefix_minutes,
                    RecordKind::Suffix | RecordKind::Child => &mut charge.episode_suffix_minutes,
                    RecordKind::Standalone => &mut charge.standalone_minutes,
                };
                *minutes += record.duration_minutes;
            }
            EpochEconomics {
                epoch: epoch.epoch,
                wall_minutes: epoch.epoch_wall_minutes,
                metrics: epoch.execution_metrics.clone(),
                error_charge: charge,
            }
        })
        .collect()
}
