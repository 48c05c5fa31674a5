//! The novelty curve: cumulative novel value, raw value and coverage after
//! each epoch (the arm summary's anytime `checkpoints`), with the epochs
//! in which the variant catalog admitted variants; and the reference's
//! `step_auc` of such a curve.

use crate::harness::{AnytimeCheckpoint, EpochSummary};

/// One point of the curve, after an epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct CurvePoint {
    /// The epoch just completed.
    pub epoch: u32,
    /// Arm minutes elapsed by then.
    pub elapsed_minutes: f64,
    /// Cumulative novel value.
    pub novel_value_cum: f64,
    /// Cumulative raw value.
    pub raw_value_cum: f64,
    /// Families seen so far.
    pub coverage_cum: usize,
    /// Variant records so far.
    pub variant_records_cum: u64,
    /// Variants the catalog admitted in this epoch (0 without a catalog).
    pub variants_admitted: usize,
}

/// The curve of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoveltyCurve {
    /// One point per epoch, in order.
    pub points: Vec<CurvePoint>,
}

impl NoveltyCurve {
    /// The curve of a run: `checkpoints` from `summary.json` joined, by
    /// epoch, with the frontier audits of `epochs` (`admitted`).
    pub fn of_run(checkpoints: &[AnytimeCheckpoint], epochs: &[EpochSummary]) -> Self {
        let admitted = |epoch: u32| {
            epochs
                .iter()
                .filter(|summary| summary.epoch == epoch)
                .filter_map(|summary| summary.frontier.as_ref())
                .map(|frontier| frontier.admitted)
                .sum()
        };
        Self {
            points: checkpoints
                .iter()
                .map(|checkpoint| CurvePoint {
                    epoch: checkpoint.epoch,
                    elapsed_minutes: checkpoint.elapsed_minutes,
                    novel_value_cum: checkpoint.novel_value_cum,
                    raw_value_cum: checkpoint.raw_value_cum,
                    coverage_cum: checkpoint.coverage_count_cum,
                    variant_records_cum: checkpoint.variant_records_cum,
                    variants_admitted: admitted(checkpoint.epoch),
                })
                .collect(),
        }
    }

    /// The epochs in which variants entered the queue.
    pub fn variant_epochs(&self) -> Vec<u32> {
        self.points
            .iter()
            .filter(|point| point.variants_admitted > 0)
            .map(|point| point.epoch)
            .collect()
    }
}

/// The area under the step curve of novel value over elapsed minutes, up
/// to `horizon_minutes`, rounded to 3 places (reference `step_auc` with
/// `value_key = "novel_value_cum"`): each value holds from its point's
/// time (capped at the horizon) until the next point's; the last holds to
/// the horizon.
pub fn step_auc(points: &[CurvePoint], horizon_minutes: f64) -> f64 {
    let mut auc = 0.0;
    let mut prev_t = 0.0;
    let mut prev_v = 0.0;
    for point in points {
        let t = point.elapsed_minutes.min(horizon_minutes);
        if t > prev_t {
            auc += prev_v * (t - prev_t);
            prev_t = t;
        }
        prev_v = point.novel_value_cum;
    }
    if horizon_minutes > prev_t {
        auc += prev_v * (horizon_minutes - prev_t);
    }
    crate::episode::value::round_to(auc, 3)
}
