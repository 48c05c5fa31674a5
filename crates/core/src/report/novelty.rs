//! The novelty curve: cumulative novel value, raw value and coverage after
//! each epoch (the arm summary's anytime `checkpoints`), with the epochs
//! in which the variant catalog admitted variants; the same against
//! records written, so a run of one epoch still draws a curve; and the
//! reference's `step_auc` of such a curve.

use std::collections::BTreeSet;

use crate::harness::{AnytimeCheckpoint, EpochSummary};

use super::record_facts::RecordFacts;

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

/// One point of the curve against records: after the first `records`
/// lines of `records.jsonl`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordPoint {
    /// Records written so far.
    pub records: u64,
    /// Cumulative `novel_value` of those records.
    pub novel_value_cum: f64,
    /// Distinct non-empty families among them (the reference's coverage).
    pub coverage_cum: usize,
    /// Variant records among them.
    pub variant_records_cum: u64,
}

/// At most this many points of the curve against records (a longer run
/// is drawn through evenly spaced records, its last always among them).
pub const MAX_RECORD_POINTS: usize = 500;

/// The curve of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoveltyCurve {
    /// One point per epoch, in order.
    pub points: Vec<CurvePoint>,
    /// The curve against records, in file order: at most
    /// `MAX_RECORD_POINTS` points, starting at 0 records.
    pub by_record: Vec<RecordPoint>,
}

impl NoveltyCurve {
    /// The curve of a run: `checkpoints` from `summary.json` joined, by
    /// epoch, with the frontier audits of `epochs` (`admitted`).
    /// `records` (in file order) give the curve against records.
    pub fn of_run(
        checkpoints: &[AnytimeCheckpoint],
        epochs: &[EpochSummary],
        records: &[RecordFacts],
    ) -> Self {
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
            by_record: by_record(records),
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

/// The curve against `records`, thinned to [`MAX_RECORD_POINTS`].
fn by_record(records: &[RecordFacts]) -> Vec<RecordPoint> {
    let every = records.len().div_ceil(MAX_RECORD_POINTS - 1).max(1);
    let mut families = BTreeSet::new();
    let mut point = RecordPoint {
        records: 0,
        novel_value_cum: 0.0,
        coverage_cum: 0,
        variant_records_cum: 0,
    };
    let mut points = vec![point.clone()];
    for (i, record) in records.iter().enumerate() {
        point.records += 1;
        point.novel_value_cum += record.novel_value;
        if !record.family.is_empty() {
            families.insert(record.family.as_str());
        }
        point.coverage_cum = families.len();
        point.variant_records_cum += u64::from(record.is_variant);
        if (i + 1) % every == 0 || i + 1 == records.len() {
            points.push(point.clone());
        }
    }
    if points.len() == 1 {
        points.clear();
    }
    points
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
