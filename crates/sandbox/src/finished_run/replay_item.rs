//! `sandloop replay`'s work: one item of a finished run run again from its
//! planned durable point, in a fresh instance, its intent screened first.

use std::sync::Arc;
use std::time::Instant;

use sandloop_core::episode::adapter::{CallContext, Item, Record};
use sandloop_core::finished_run::offline::{ItemPosition, ReplayPlan};
use sandloop_core::finished_run::{
    ErrorFields, OfflineError, OriginalOutcome, REPLAY_SCHEMA, ReplayOutcome, ReplayReport,
    SelectionFields,
};
use sandloop_core::replay::group::replayed_suffix_record;
use sandloop_core::replay::registry::judge_replay_intent;
use sandloop_core::replay::{Fidelity, ReplayError, ReplayRestoreResult};
use sandloop_core::trace::TraceLog;

use super::adopt::{AdoptedPoint, adopt_point};
use crate::adapter::screen_adopted_intent;
use crate::component::LoadedAdapter;

/// What to replay: the item, the weakest fidelity the restore may reach,
/// and the replay's number in the run's log (its branch is
/// `replay-N:ITEM`).
pub struct ReplayRequest<'a> {
    /// The item's id.
    pub item_id: &'a str,
    /// `--min-fidelity`.
    pub minimum: Fidelity,
    /// This replay's line number in `replays.jsonl`, from 1.
    pub number: usize,
}

/// Replay `request`'s item (`item`, as saved with the point; where it ran
/// in `position`) from `plan`'s point, whose `state` is its exported bytes
/// or snapshot component, in a fresh instance of `loaded`. A denied intent
/// never runs (reference `RiskAwareReplayChildAdapter`), whichever kind of
/// point it replays from. The point is released afterwards; the adapter's
/// failure to release it is the report's `release_error`, not hidden.
///
/// Returns the `replays.jsonl` line: a failed restore or suffix is its
/// `outcome`, not an error; its `replay_wall_minutes` are this call's.
///
/// # Errors
/// [`OfflineError::Failed`]: a snapshot point cannot be compiled.
pub fn replay_item(
    loaded: &Arc<LoadedAdapter>,
    plan: &ReplayPlan,
    position: &ItemPosition,
    item: &Item,
    state: &[u8],
    request: &ReplayRequest<'_>,
) -> Result<ReplayReport, OfflineError> {
    let started = Instant::now();
    let line = &plan.line;
    let state_file = plan.state_file();
    let AdoptedPoint {
        mut adapter,
        snapshot,
        point: adopted,
        mut registry,
        metrics,
    } = adopt_point(loaded, plan, state)?;
    let import_minutes = started.elapsed().as_secs_f64() / 60.0;
    let target_branch = format!("replay-{}:{}", request.number, request.item_id);
    let mut trace = TraceLog::fork(
        &line.point.cursor.trace_id,
        &target_branch,
        Some(&line.point.created_event_id),
        line.point.cursor.next_sequence + 1,
    )
    .ok();
    let ctx = CallContext {
        arm: line.arm.clone(),
        epoch: line.epoch,
        branch_id: "replay".into(),
        execution_group_id: Some(line.execution_group_id.clone()),
    };
    let mut intent_assessment = None;
    let screened = adopted.and_then(|point| {
        let screened = screen_adopted_intent(
            loaded,
            &mut adapter,
            &registry,
            &point,
            item,
            &ctx,
            request.minimum,
        )?;
        if let Some(assessment) = screened {
            // Recorded whatever the verdict: a denial says who denied.
            let judged = judge_replay_intent(&metrics, &assessment);
            intent_assessment = Some(assessment);
            judged?;
        }
        Ok(point)
    });
    let outcome = screened.and_then(|point| {
        registry.run_from(
            &mut adapter,
            &point.replay_point_id,
            // The restore's target is the item, as in the run; the replayed
            // events go to their own `replay-N:ITEM` branch.
            request.item_id,
            request.minimum,
            |adapter, binding, _| replayed_suffix_record(adapter, binding, item, &ctx, &mut trace),
        )
    });
    let release_error = registry
        .release(&mut adapter, &line.point.replay_point_id)
        .err()
        .map(|error| {
            tracing::warn!(
                "the adapter did not release replay point {}: {error}",
                line.point.replay_point_id
            );
            ErrorFields::from(&error)
        });
    let (restore, outcome) = outcome_fields(outcome);
    Ok(ReplayReport {
        execution_group_id: position.execution_group_id.clone(),
        first_affected_sequence: (plan.first_affected != u64::MAX).then_some(plan.first_affected),
        import_minutes,
        intent_assessment,
        item_id: request.item_id.to_string(),
        metrics: metrics.snapshot(),
        minimum_fidelity: request.minimum,
        original: OriginalOutcome::of(&position.record),
        succeeded: matches!(outcome, ReplayOutcome::Record { .. }),
        outcome,
        release_error,
        replay_point: line.clone(),
        replay_wall_minutes: started.elapsed().as_secs_f64() / 60.0,
        restore,
        restored_from: state_file.kind,
        schema_version: REPLAY_SCHEMA,
        selection: SelectionFields::from(&plan.selection),
        snapshot_compile: snapshot.map(|(cost, _)| cost),
        trace_events: trace.map(|log| log.events().to_vec()).unwrap_or_default(),
    })
}

/// A replay's `restore` and `outcome`: the record, or the error, and the
/// restore either ran on.
fn outcome_fields(
    outcome: Result<(ReplayRestoreResult, Record), ReplayError>,
) -> (Option<ReplayRestoreResult>, ReplayOutcome) {
    match outcome {
        Ok((restore, record)) => (Some(restore), ReplayOutcome::Record { record }),
        Err(error) => (
            error.restore.as_deref().cloned(),
            ReplayOutcome::Error {
                error: ErrorFields::from(&error),
            },
        ),
    }
}
