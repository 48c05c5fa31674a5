//! The planner's evidence from a finished run directory: each trace that
//! saw failed suffixes, its boundaries, candidate positions costed with
//! what the host measured (mean capture minutes of the run's points, mean
//! restore minutes of its replayed suffixes), and one failure observation
//! per failed suffix. Feeds [`crate::replay::planner::plan_adaptive_replay_points`].

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::harness::run_files::RECORDS_FILE;
use crate::replay::durable::{DurableError, load_points, read_jsonl};
use crate::replay::fidelity::Fidelity;
use crate::replay::planner::{FailureReplayObservation, ReplayPositionCost, TraceBoundaries};

/// Planner inputs for one trace of a run.
pub struct TraceEvidence {
    /// The trace (an episode group id).
    pub trace_id: String,
    /// The branch the run's replay point sits on.
    pub branch_id: String,
    /// The branch's events as planner boundaries.
    pub boundaries: TraceBoundaries,
    /// Every boundary of the branch, costed.
    pub candidates: Vec<ReplayPositionCost>,
    /// One per failed suffix with trace events.
    pub observations: Vec<FailureReplayObservation>,
}

/// What the run measured, for the report.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RunCosts {
    /// Mean minutes of one capture (0 when none was measured).
    pub capture_minutes: f64,
    /// Mean minutes of one restore (0 when none was measured).
    pub restore_minutes: f64,
    /// Points the means were taken over.
    pub capture_samples: usize,
    /// Replayed suffixes the means were taken over.
    pub restore_samples: usize,
    /// Failed records of the run.
    pub failed_records: usize,
    /// Failed records that could not be placed on a trace (no trace events
    /// or no replay block), left out of the plan.
    pub unplaced_failures: usize,
}

fn mean(sum: f64, count: usize) -> f64 {
    if count == 0 { 0.0 } else { sum / count as f64 }
}

struct Failure {
    first: u64,
    end: u64,
    minutes: f64,
    group: String,
}

/// The best fidelity of the points on each (trace, branch), with the
/// position it was captured at.
type BestPoints = BTreeMap<(String, String), (Fidelity, u64)>;

/// Events `(event_id, sequence)` of each (trace, branch).
type BranchEvents = BTreeMap<(String, String), Vec<(String, u64)>>;

/// Gather the planner's evidence from the run at `root`; observations
/// require `minimum` fidelity. Errors name the file and line.
pub fn run_evidence(
    root: &Path,
    minimum: Fidelity,
) -> Result<(Vec<TraceEvidence>, RunCosts), DurableError> {
    let mut costs = RunCosts::default();
    let best = best_points(root, &mut costs)?;
    let (prefix_minutes, failures) = read_failures(root, &mut costs)?;
    let events = read_failed_trace_events(root, &failures)?;
    let mut evidence = Vec::new();
    for ((trace_id, branch_id), failed) in failures {
        let Some((fidelity, branch)) = lineage(&best, &events, &trace_id, &branch_id) else {
            costs.unplaced_failures += failed.len();
            continue;
        };
        let Ok(boundaries) = TraceBoundaries::from_sequences(branch.iter().cloned()) else {
            costs.unplaced_failures += failed.len();
            continue;
        };
        if fidelity == Fidelity::NonReplayable {
            costs.unplaced_failures += failed.len();
            continue;
        }
        let candidates = candidates(&branch, &boundaries, fidelity, &costs);
        let observations: Vec<FailureReplayObservation> = failed
            .iter()
            .filter(|failure| failure.end <= boundaries.head())
            .filter_map(|failure| {
                let full =
                    prefix_minutes.get(&failure.group).copied().unwrap_or(0.0) + failure.minutes;
                FailureReplayObservation::new(failure.first, failure.end, full, minimum, 1.0).ok()
            })
            .collect();
        costs.unplaced_failures += failed.len() - observations.len();
        if observations.is_empty() {
            continue;
        }
        evidence.push(TraceEvidence {
            trace_id,
            branch_id,
            boundaries,
            candidates,
            observations,
        });
    }
    Ok((evidence, costs))
}

/// The run's durable points: the best fidelity on each branch, and the mean
/// capture minutes over all of them (into `costs`).
fn best_points(root: &Path, costs: &mut RunCosts) -> Result<BestPoints, DurableError> {
    let mut best_by_branch = BestPoints::new();
    let mut capture_sum = 0.0;
    for line in &load_points(root)? {
        capture_sum += line.capture_minutes;
        costs.capture_samples += 1;
        let key = (
            line.point.cursor.trace_id.clone(),
            line.point.cursor.branch_id.clone(),
        );
        let best = best_by_branch
            .entry(key)
            .or_insert((line.point.fidelity, line.point.cursor.next_sequence));
        if line.point.fidelity.rank() > best.0.rank() {
            *best = (line.point.fidelity, line.point.cursor.next_sequence);
        }
    }
    costs.capture_minutes = mean(capture_sum, costs.capture_samples);
    Ok(best_by_branch)
}

/// From `records.jsonl`: each group's prefix minutes, and the failed
/// suffixes placed on their (trace, branch); the mean restore minutes, the
/// failed and the unplaceable counts go into `costs`.
#[allow(clippy::type_complexity)]
fn read_failures(
    root: &Path,
    costs: &mut RunCosts,
) -> Result<
    (
        BTreeMap<String, f64>,
        BTreeMap<(String, String), Vec<Failure>>,
    ),
    DurableError,
> {
    let mut prefix_minutes: BTreeMap<String, f64> = BTreeMap::new();
    let mut restore_sum = 0.0;
    let mut failures: BTreeMap<(String, String), Vec<Failure>> = BTreeMap::new();
    read_jsonl(&root.join(RECORDS_FILE), |record| {
        let group = record
            .get("execution_group_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let minutes = record
            .get("duration_minutes")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        if record.get("record_kind").and_then(Value::as_str) == Some("shared_prefix") {
            prefix_minutes.insert(group, minutes);
            return Ok(());
        }
        let replay = record.get("replay").and_then(Value::as_object);
        if let Some(restore) = replay
            .and_then(|r| r.get("restore_minutes"))
            .and_then(Value::as_f64)
        {
            restore_sum += restore;
            costs.restore_samples += 1;
        }
        if record.get("adapter_error").is_none() {
            return Ok(());
        }
        costs.failed_records += 1;
        let field = |key: &str| replay.and_then(|r| r.get(key));
        match (
            field("trace_id").and_then(Value::as_str),
            field("first_sequence").and_then(Value::as_u64),
            field("end_sequence").and_then(Value::as_u64),
        ) {
            (Some(trace), Some(first), Some(end)) if end > first && !trace.is_empty() => {
                let branch = field("branch_id")
                    .and_then(Value::as_str)
                    .unwrap_or("main")
                    .to_string();
                failures
                    .entry((trace.to_string(), branch))
                    .or_default()
                    .push(Failure {
                        first,
                        end,
                        minutes,
                        group,
                    });
            }
            _ => costs.unplaced_failures += 1,
        }
        Ok(())
    })?;
    costs.restore_minutes = mean(restore_sum, costs.restore_samples);
    Ok((prefix_minutes, failures))
}

/// Events of the traces that saw failures, from `traces/epoch-*.jsonl`.
fn read_failed_trace_events(
    root: &Path,
    failures: &BTreeMap<(String, String), Vec<Failure>>,
) -> Result<BranchEvents, DurableError> {
    let mut events = BranchEvents::new();
    let Ok(entries) = std::fs::read_dir(root.join("traces")) else {
        return Ok(events);
    };
    let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    files.sort();
    for file in files {
        read_jsonl(&file, |event| {
            let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
            if !failures.keys().any(|(trace, _)| trace == text("trace_id")) {
                return Ok(());
            }
            if let Some(sequence) = event.get("sequence").and_then(Value::as_u64) {
                events
                    .entry((text("trace_id").to_string(), text("branch_id").to_string()))
                    .or_default()
                    .push((text("event_id").to_string(), sequence));
            }
            Ok(())
        })?;
    }
    Ok(events)
}

/// The fidelity and the events a failure on (`trace_id`, `branch_id`) is
/// planned over, sorted and without repeated positions. A failure on a
/// point's own branch plans over that branch; one on a child's branch over
/// its lineage: the point's branch up to and including the capture event,
/// then the child's events. `None` when no point is on the trace.
fn lineage(
    best: &BestPoints,
    events: &BranchEvents,
    trace_id: &str,
    branch_id: &str,
) -> Option<(Fidelity, Vec<(String, u64)>)> {
    let key = (trace_id.to_string(), branch_id.to_string());
    let own_events = || events.get(&key).cloned().unwrap_or_default();
    let (fidelity, mut branch) = match best.get(&key) {
        Some(&(fidelity, _)) => (fidelity, own_events()),
        None => {
            let ((_, parent_branch), &(fidelity, at)) =
                best.iter().find(|((trace, _), _)| trace == trace_id)?;
            let mut lineage: Vec<(String, u64)> = events
                .get(&(trace_id.to_string(), parent_branch.clone()))
                .map(|events| {
                    events
                        .iter()
                        .filter(|(_, seq)| *seq <= at)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            lineage.extend(own_events());
            (fidelity, lineage)
        }
    };
    branch.sort_by_key(|(_, sequence)| *sequence);
    branch.dedup_by_key(|(_, sequence)| *sequence);
    Some((fidelity, branch))
}

/// Every position of `branch` as a candidate point, costed with the run's
/// mean capture and restore minutes.
fn candidates(
    branch: &[(String, u64)],
    boundaries: &TraceBoundaries,
    fidelity: Fidelity,
    costs: &RunCosts,
) -> Vec<ReplayPositionCost> {
    (0..=boundaries.head())
        .filter_map(|next| {
            let after = next
                .checked_sub(1)
                .and_then(|previous| branch.get(previous as usize))
                .map(|(id, _)| id.as_str());
            ReplayPositionCost::new(
                after,
                next,
                fidelity,
                costs.capture_minutes,
                costs.restore_minutes,
            )
            .ok()
        })
        .collect()
}
