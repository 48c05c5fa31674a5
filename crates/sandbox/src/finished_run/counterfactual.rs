//! `sandloop counterfactual`'s work: every candidate of a hypothesis run
//! as an isolated child of the planned durable point — its own instance,
//! forked by state or from the point's snapshot, screened by the adapter's
//! risk policy — with its change applied, and the group settled by the
//! reference's promotion rule (`run_counterfactual_child_group`).

use std::sync::Arc;
use std::time::Instant;

use sandloop_core::episode::adapter::{CallContext, Item};
use sandloop_core::finished_run::offline::ReplayPlan;
use sandloop_core::finished_run::{
    COUNTERFACTUAL_SCHEMA, CounterfactualReport, ErrorFields, OfflineError, SelectionFields,
};
use sandloop_core::replay::counterfactual::{
    AddressableTrace, CounterfactualHypothesis, candidate_tasks, settle_group,
};
use sandloop_core::replay::{ReplayCause, ReplayError, ReplayPoint, ReplayStage};

use super::adopt::{AdoptedPoint, OfflineRegistry, adopt_point};
use crate::adapter::{AdoptedFork, WasmAdapter, run_adopted_children};
use crate::component::LoadedAdapter;

/// What to run: the hypothesis, the trace it addresses (the failed item's
/// lineage), and how many children run at once.
pub struct CounterfactualRequest<'a> {
    /// The hypothesis, checked against the trace.
    pub hypothesis: &'a CounterfactualHypothesis,
    /// The events of the item's branch and its parent point's.
    pub trace: &'a AddressableTrace,
    /// Threads the candidates' children run on (1: one after another).
    pub workers: usize,
}

/// Run `request`'s candidates as children of `plan`'s point, whose `state`
/// is its exported bytes or snapshot component, adopted into a fresh
/// instance of `loaded`; `item` is the failed item as saved with the
/// point. The point is released afterwards (a failure to, the report's
/// `release_error`).
///
/// Returns the `counterfactuals.jsonl` line: a group that could not run
/// is its `error`, not this function's; its `wall_minutes` are this
/// call's.
///
/// # Errors
/// [`OfflineError::Failed`]: a snapshot point cannot be compiled.
pub fn run_counterfactual(
    loaded: &Arc<LoadedAdapter>,
    plan: &ReplayPlan,
    item: &Item,
    state: Vec<u8>,
    request: &CounterfactualRequest<'_>,
) -> Result<CounterfactualReport, OfflineError> {
    let started = Instant::now();
    let line = &plan.line;
    let state_file = plan.state_file();
    let AdoptedPoint {
        mut adapter,
        snapshot,
        point,
        mut registry,
        metrics,
    } = adopt_point(loaded, plan, &state)?;
    let snapshot_compile = snapshot.as_ref().map(|(cost, _)| cost.clone());
    let ctx = CallContext {
        arm: line.arm.clone(),
        epoch: line.epoch,
        branch_id: "counterfactual".into(),
        execution_group_id: Some(line.execution_group_id.clone()),
    };
    let workers = request.workers;
    let hypothesis = request.hypothesis;
    let group = point.and_then(|point| {
        let fork = match snapshot {
            None => AdoptedFork::State(Arc::new(state)),
            Some((cost, compiled)) => AdoptedFork::Snapshot {
                compiled,
                token: state_file
                    .binding_token
                    .expect("a snapshot point has a token"),
                state: exported_state(&mut adapter, &registry, &point)?,
                compile_ms: cost.compile_ms,
            },
        };
        let tasks = candidate_tasks(hypothesis, &point, item);
        let settled =
            run_adopted_children(&adapter, &mut registry, &point, fork, tasks, workers, &ctx)?;
        settle_group(request.trace, hypothesis, &point, settled, workers > 1).map_err(|message| {
            ReplayError::new(ReplayStage::Suffix, ReplayCause::Contract(message))
        })
    });
    let release_error = registry
        .release(&mut adapter, &line.point.replay_point_id)
        .err()
        .map(|error| ErrorFields::from(&error));
    let promoted = group
        .as_ref()
        .map(|group| group.promoted().into_iter().map(str::to_string).collect())
        .unwrap_or_default();
    let (group, error) = match group {
        Ok(group) => (Some(group), None),
        Err(error) => (None, Some(ErrorFields::from(&error))),
    };
    Ok(CounterfactualReport {
        child_workers: workers,
        error,
        execution_group_id: line.execution_group_id.clone(),
        group,
        hypothesis: hypothesis.clone(),
        metrics: metrics.snapshot(),
        promoted,
        release_error,
        replay_point: line.clone(),
        restored_from: state_file.kind,
        schema_version: COUNTERFACTUAL_SCHEMA,
        selection: SelectionFields::from(&plan.selection),
        snapshot_compile,
        wall_minutes: started.elapsed().as_secs_f64() / 60.0,
    })
}

/// The state each child of a snapshot point adopts as its replay child:
/// exported from the binding resumed in the parent.
fn exported_state(
    adapter: &mut WasmAdapter,
    registry: &OfflineRegistry,
    point: &ReplayPoint,
) -> Result<Arc<Vec<u8>>, ReplayError> {
    let unavailable =
        |why: String| ReplayError::new(ReplayStage::Restore, ReplayCause::Unavailable(why));
    let binding = *registry
        .binding(&point.replay_point_id)
        .ok_or_else(|| unavailable("the adopted point has no binding".into()))?;
    match adapter.export_replay_state(&binding) {
        Ok(Some(state)) => Ok(Arc::new(state)),
        Ok(None) => Err(unavailable(
            "export-replay-state gave none: each candidate's child adopts the point's \
             exported state, so this snapshot point cannot run candidates"
                .into(),
        )),
        Err(error) => Err(ReplayError::adapter(ReplayStage::Restore, error)),
    }
}
