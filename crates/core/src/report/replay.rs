//! Replay figures: replay points by fidelity and final lifecycle
//! (`replay-points.jsonl`), quarantines and why, isolated children by how
//! they ended (`records.jsonl`), snapshot costs, and the outcomes of
//! `sandloop replay` (`replays.jsonl`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::replay::durable::PointLine;
use crate::replay::snapshot_totals::SnapshotTotals;

use super::load::ReplayLine;
use super::record_facts::{ChildEnd, RecordFacts};

/// A quarantined point and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Quarantine {
    /// `replay_point_id`.
    pub replay_point_id: String,
    /// The group's seed item.
    pub seed_item_id: String,
    /// Its final lifecycle.
    pub lifecycle: String,
    /// Why: the quarantining error a record of the point carries, else the
    /// point's `release_error`, `durable_error` or `snapshot_error`.
    pub why: String,
}

/// What a run's replay points were.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointFigures {
    /// Points.
    pub total: u64,
    /// (fidelity, final lifecycle) -> points.
    pub by_fidelity_lifecycle: BTreeMap<(String, String), u64>,
    /// Points with a durable state or snapshot file.
    pub durable: u64,
    /// Quarantined points, in file order.
    pub quarantines: Vec<Quarantine>,
    /// Snapshot costs ([`SnapshotTotals::of_points`]).
    pub snapshots: SnapshotTotals,
}

/// How the run's isolated children ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChildFigures {
    /// Children forked (one record each).
    pub forked: u64,
    /// Children that ran and were allowed.
    pub succeeded: u64,
    /// (stage, policy) -> children a risk assessment denied.
    pub denied: BTreeMap<(String, String), u64>,
    /// Stage -> children that failed there.
    pub failed: BTreeMap<String, u64>,
}

/// The replay section of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayFigures {
    /// `None` when the run has no `replay-points.jsonl`.
    pub points: Option<PointFigures>,
    /// Isolated children.
    pub children: ChildFigures,
    /// `replays.jsonl`, in order.
    pub replays: Vec<ReplayLine>,
}

/// The replay figures of a run.
pub fn replay_figures(
    points: Option<&[PointLine]>,
    records: &[RecordFacts],
    replays: &[ReplayLine],
) -> ReplayFigures {
    ReplayFigures {
        points: points.map(|points| point_figures(points, records)),
        children: child_figures(records),
        replays: replays.to_vec(),
    }
}

fn point_figures(points: &[PointLine], records: &[RecordFacts]) -> PointFigures {
    let mut figures = PointFigures {
        total: points.len() as u64,
        snapshots: SnapshotTotals::of_points(points),
        ..PointFigures::default()
    };
    for line in points {
        *figures
            .by_fidelity_lifecycle
            .entry((
                line.point.fidelity.as_str().to_owned(),
                line.point.lifecycle.as_str().to_owned(),
            ))
            .or_default() += 1;
        figures.durable += u64::from(line.durable_state.is_some());
        if line.quarantined {
            figures.quarantines.push(Quarantine {
                replay_point_id: line.point.replay_point_id.clone(),
                seed_item_id: line.seed_item_id.clone(),
                lifecycle: line.point.lifecycle.as_str().to_owned(),
                why: quarantine_reason(line, records),
            });
        }
    }
    figures
}

/// Why `line` was quarantined (see [`Quarantine::why`]).
fn quarantine_reason(line: &PointLine, records: &[RecordFacts]) -> String {
    let id = &line.point.replay_point_id;
    let from_record = records
        .iter()
        .filter(|record| record.replay_point_id.as_ref() == Some(id))
        .find_map(|record| record.quarantine_reason.clone());
    let release = line
        .release_error
        .as_ref()
        .and_then(|error| error.get("message"))
        .and_then(Value::as_str)
        .map(|message| format!("release failed: {message}"));
    from_record
        .or(release)
        .or_else(|| line.durable_error.clone())
        .or_else(|| line.snapshot_error.clone())
        .unwrap_or_else(|| "a finalisation or release failed (no message recorded)".to_owned())
}

fn child_figures(records: &[RecordFacts]) -> ChildFigures {
    let mut figures = ChildFigures::default();
    for child in records.iter().filter_map(|record| record.child.as_ref()) {
        figures.forked += 1;
        match child {
            ChildEnd::Succeeded => figures.succeeded += 1,
            ChildEnd::Denied { stage, policy } => {
                *figures
                    .denied
                    .entry((stage.clone(), policy.clone()))
                    .or_default() += 1;
            }
            ChildEnd::Failed { stage } => *figures.failed.entry(stage.clone()).or_default() += 1,
        }
    }
    figures
}
