//! `sandloop counterfactual`'s work: every candidate of a hypothesis run
//! as an isolated child of the planned durable point — its own instance,
//! forked by state or from the point's snapshot, screened by the adapter's
//! risk policy — with its change applied, and the group settled by the
//! reference's promotion rule (`run_counterfactual_child_group`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sandloop_core::episode::adapter::{CallContext, Item};
use sandloop_core::finished_run::offline::ReplayPlan;
use sandloop_core::finished_run::{
    COUNTERFACTUAL_SCHEMA, CounterfactualReport, ErrorFields, FinishedRun, OfflineError,
    SelectionFields,
};
use sandloop_core::replay::counterfactual::{
    AddressableTrace, COUNTERFACTUALS_FILE, CounterfactualHypothesis, candidate_tasks, settle_group,
};
use sandloop_core::replay::durable::{DurableKind, PointLine};
use sandloop_core::replay::{ReplayCause, ReplayError, ReplayPoint, ReplayStage};

use super::adopt::{AdoptedPoint, OfflineRegistry, adopt_point};
use super::load::{RunComponent, load_run_component};
use crate::adapter::{AdoptedFork, WasmAdapter, run_adopted_children};
use crate::component::{LoadError, LoadedAdapter};

/// A counterfactual asked of a finished run (`sandloop counterfactual`).
pub struct CounterfactualAsk<'a> {
    /// The run directory.
    pub run: &'a Path,
    /// The hypothesis file (JSON, [`CounterfactualHypothesis`]).
    pub hypothesis: &'a Path,
    /// Which component to load; its `instances` are set here (the point's
    /// instance, a child per candidate and one to spare).
    pub component: RunComponent,
    /// Threads the candidates' children run on (1: one after another).
    pub workers: usize,
}

/// A counterfactual that ran: its line, written to the run's
/// `counterfactuals.jsonl`, and the point it ran from.
pub struct CounterfactualDone {
    /// The line appended.
    pub report: CounterfactualReport,
    /// The durable point the candidates were forked from.
    pub line: PointLine,
    /// How its state was kept: exported state or snapshot.
    pub kind: DurableKind,
    /// The file the line was appended to.
    pub written: PathBuf,
}

/// Would this change have fixed the failure? `ask`'s hypothesis is read
/// and checked against the run — its item failed, its events are on the
/// item's lineage, a trusted durable point lies before its first affected
/// event — the run's component is loaded (`compile` as in
/// [`load_run_component`]) and must export `counterfactual`; then every
/// candidate runs as a child of the point ([`run_counterfactual`]) and the
/// result is appended to `counterfactuals.jsonl`. The run directory is
/// locked throughout.
///
/// # Errors
/// [`OfflineError::Input`] naming the hypothesis file and field (or the
/// run's file) for what does not hold; [`OfflineError::Io`] when the log
/// cannot be written; [`OfflineError::Failed`] when the component or a
/// snapshot point cannot be compiled. A group that could not run is the
/// report's `error`, not an error here.
pub fn ask_counterfactual(
    ask: CounterfactualAsk<'_>,
    compile: impl FnOnce(
        &Path,
        bool,
        &mut dyn FnMut() -> Result<LoadedAdapter, LoadError>,
    ) -> Result<LoadedAdapter, LoadError>,
) -> Result<CounterfactualDone, OfflineError> {
    let input = OfflineError::Input;
    let hypothesis =
        CounterfactualHypothesis::read(ask.hypothesis).map_err(|error| input(error.to_string()))?;
    let named = |field: &str, message: String| {
        input(format!("{}: {field}: {message}", ask.hypothesis.display()))
    };
    // Held throughout: no run writes the directory meanwhile, and two
    // commands never interleave their lines.
    let run = FinishedRun::open(ask.run, "counterfactual")?;
    let mut position =
        run.find(&hypothesis.item_id, hypothesis.epoch)
            .map_err(|error| match error {
                OfflineError::Input(message) => named("item_id", message),
                other => other,
            })?;
    if !position.failed() {
        return Err(named(
            "item_id",
            format!(
                "item {:?} did not fail in {} (its record has no adapter_error and was not \
                 refused: accepted is not false); a counterfactual asks what would have fixed a failure",
                hypothesis.item_id, position.execution_group_id
            ),
        ));
    }
    // The trace the hypothesis addresses: the item's branch and, for an
    // item that ran as a child, the branch of the point it forked from.
    let trace = run.addressable_trace(&position)?;
    trace
        .check_addressed(&hypothesis)
        .map_err(|message| input(format!("{}: {message}", ask.hypothesis.display())))?;
    let plan = run
        .plan(
            &mut position,
            Some(hypothesis.first_affected_sequence),
            hypothesis.minimum_fidelity,
        )
        .map_err(|message| named("first_affected_sequence", message))?;
    let (state, item) = run
        .point_state(&plan, &hypothesis.item_id)?
        .map_err(|message| named("item_id", message))?;
    let kind = plan.state_file().kind;
    // The point's instance, and every candidate's child (all forked before
    // any runs), with one to spare for a re-instantiation.
    let component = RunComponent {
        instances: hypothesis.candidates.len() as u32 + 2,
        ..ask.component
    };
    let loaded = load_run_component(&run, &component, kind, compile)?;
    if !loaded.protocols.counterfactual {
        return Err(input(format!(
            "the run's component ({}…) does not export `sandloop:adapter/counterfactual@0.2.0`, \
             which runs a candidate with its change applied (world `counterfactual-fixes`)",
            &loaded.info.sha256[..12]
        )));
    }
    // Everything is checked; the result must have somewhere to go.
    let mut log = run.open_log(COUNTERFACTUALS_FILE)?;
    let request = CounterfactualRequest {
        hypothesis: &hypothesis,
        trace: &trace,
        workers: ask.workers,
    };
    let report = run_counterfactual(&loaded, &plan, &item, state, &request)?;
    log.append(&report)?;
    Ok(CounterfactualDone {
        report,
        line: plan.line.clone(),
        kind,
        written: log.path().to_path_buf(),
    })
}

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
