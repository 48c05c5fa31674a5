//! `sandloop counterfactual`: would this change have fixed the failure?
//! Every candidate of a hypothesis runs as an isolated child of the
//! nearest trusted durable replay point before the failure's first
//! affected event — its own instance, forked by state or from the point's
//! snapshot, screened by the adapter's risk policy — with its change
//! applied; each is promoted only when every fix target passes and no guard
//! regresses on a restore eligible for promotion (reference
//! `run_counterfactual_child_group`). The result is appended to the run's
//! `counterfactuals.jsonl`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::args::CounterfactualArgs;
use super::finished_run::{
    AdoptedPoint, ComponentSource, adopt_point, error_fields, load_run_adapter, lock_run,
    open_run_log, point_state_and_item,
};
use super::{CliError, say};
use crate::episode::adapter::CallContext;
use crate::episode::units::GroupId;
use crate::finished_run::OfflineError;
use crate::finished_run::offline::{
    ItemPosition, ReplayPlan, append_line, find_record, plan_replay, run_source,
};
use crate::replay::counterfactual::{
    AddressableTrace, COUNTERFACTUALS_FILE, CandidateResult, CounterfactualGroupResult,
    CounterfactualHypothesis, candidate_tasks, read_addressable_trace, settle_group,
};
use crate::replay::durable::{DurableKind, PointLine, load_points};
use crate::replay::{
    MemoryAgentStateStore, ReplayCause, ReplayError, ReplayMetricLedger, ReplayPoint,
    ReplayPointRegistry, ReplayStage,
};
use crate::sandbox::WasmAdapter;
use crate::sandbox::adapter::{AdoptedFork, BindingHandle, run_adopted_children};

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// Run `sandloop counterfactual` (exit 0: a candidate was promoted; 1:
/// none was, or the group failed — the result is still written; 2: bad
/// input, nothing run).
pub fn counterfactual(args: CounterfactualArgs) -> Result<(), CliError> {
    let hypothesis = CounterfactualHypothesis::read(&args.hypothesis)
        .map_err(|error| input(error.to_string()))?;
    let named = |field: &str, message: String| {
        input(format!("{}: {field}: {message}", args.hypothesis.display()))
    };
    let run = &args.run;
    if !run.is_dir() {
        return Err(input(format!("{} is not a directory", run.display())));
    }
    // Held throughout: no run writes the directory meanwhile, and two
    // commands never interleave their lines.
    let _lock = lock_run(run, "counterfactual")?;
    let source = run_source(run)?;
    let all_points = load_points(run).map_err(|error| input(error.to_string()))?;
    let mut position =
        find_record(run, &hypothesis.item_id, hypothesis.epoch).map_err(|error| match error {
            OfflineError::Input(message) => named("item_id", message),
            io => CliError::from(io),
        })?;
    if !failed(&position.record) {
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
    let trace = addressable_trace(run, &position, &all_points)?;
    trace
        .check_addressed(&hypothesis)
        .map_err(|message| input(format!("{}: {message}", args.hypothesis.display())))?;
    let ReplayPlan {
        line, selection, ..
    } = plan_replay(
        &all_points,
        &mut position,
        Some(hypothesis.first_affected_sequence),
        hypothesis.minimum_fidelity,
    )
    .map_err(|message| named("first_affected_sequence", message))?;
    let state_file = line
        .durable_state
        .as_ref()
        .expect("a planned point is durable");
    let (state, item) = point_state_and_item(run, &line, &hypothesis.item_id)
        .map_err(|error| error.unwrap_or_else(|message| named("item_id", message)))?;

    let from = ComponentSource {
        run,
        component: &args.component,
        // The point's instance, and every candidate's child (all forked
        // before any runs), with one to spare for a re-instantiation.
        instances: hypothesis.candidates.len() as u32 + 2,
    };
    let loaded = load_run_adapter(&from, &source, state_file.kind)?;
    if !loaded.protocols.counterfactual {
        return Err(input(format!(
            "the run's component ({}…) does not export `sandloop:adapter/counterfactual@0.2.0`, \
             which runs a candidate with its change applied (world `counterfactual-fixes`)",
            &loaded.info.sha256[..12]
        )));
    }

    // Everything is checked; the result must have somewhere to go.
    let path = run.join(COUNTERFACTUALS_FILE);
    let (mut file, earlier) = open_run_log(&path)?;
    let started = Instant::now();
    let metrics = Arc::new(ReplayMetricLedger::new());
    selection.count(&metrics);
    let mut registry = ReplayPointRegistry::new(MemoryAgentStateStore::new(), Arc::clone(&metrics));
    let AdoptedPoint {
        mut adapter,
        snapshot,
        point,
    } = adopt_point(&loaded, &line, &state, &mut registry)?;
    let snapshot_cost = snapshot.as_ref().map(|(cost, _)| cost.clone());
    let ctx = CallContext {
        arm: line.arm.clone(),
        epoch: line.epoch,
        branch_id: "counterfactual".into(),
        execution_group_id: Some(line.execution_group_id.clone()),
    };
    let workers = args.child_workers as usize;
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
        let tasks = candidate_tasks(&hypothesis, &point, &item);
        let settled =
            run_adopted_children(&adapter, &mut registry, &point, fork, tasks, workers, &ctx)?;
        settle_group(&trace, &hypothesis, &point, settled, workers > 1).map_err(|message| {
            ReplayError::new(ReplayStage::Suffix, ReplayCause::Contract(message))
        })
    });
    let release_error = registry
        .release(&mut adapter, &line.point.replay_point_id)
        .err()
        .map(|error| error_fields(&error));

    let promoted: Vec<String> = group
        .as_ref()
        .map(|group| group.promoted().into_iter().map(str::to_string).collect())
        .unwrap_or_default();
    let report = json!({
        "schema_version": "sandloop_counterfactual_v0",
        "hypothesis": hypothesis_record(&hypothesis),
        "execution_group_id": line.execution_group_id,
        "replay_point": line.to_record(),
        "selection": {
            "fidelity_fallback": selection.fidelity_fallback,
            "fidelity_filtered": selection.fidelity_filtered,
        },
        "restored_from": state_file.kind,
        "snapshot_compile": snapshot_cost,
        "child_workers": workers,
        "group": group.as_ref().ok().map(CounterfactualGroupResult::to_record),
        "error": group.as_ref().err().map(error_fields),
        "promoted": promoted,
        "wall_minutes": started.elapsed().as_secs_f64() / 60.0,
        "metrics": metrics.snapshot(),
        "release_error": release_error,
    });
    append_line(&mut file, &path, earlier.partial, &report)?;
    if args.json {
        say(&serde_json::to_string_pretty(&report).expect("a JSON value serialises"));
    } else {
        print_table(&hypothesis, &line, state_file.kind, &group, &path);
    }
    match group {
        Err(error) => Err(CliError::Failed(format!(
            "the candidates of hypothesis {:?} could not be run: {error}",
            hypothesis.hypothesis_id
        ))),
        Ok(_) if promoted.is_empty() => Err(CliError::Failed(format!(
            "no candidate of hypothesis {:?} was promoted",
            hypothesis.hypothesis_id
        ))),
        Ok(_) => Ok(()),
    }
}

/// Whether a record is a failure: an error record, or one the adapter
/// refused (`accepted: false`).
fn failed(record: &crate::episode::adapter::Record) -> bool {
    record
        .get("adapter_error")
        .is_some_and(|error| !error.is_null())
        || record.get("accepted") == Some(&Value::Bool(false))
}

/// The events of the item's trace on its lineage: its own branch and, when
/// it ran as a child, the branch of the point it was forked from.
fn addressable_trace(
    run: &Path,
    position: &ItemPosition,
    points: &[PointLine],
) -> Result<AddressableTrace, CliError> {
    let epoch = position
        .execution_group_id
        .parse::<GroupId>()
        .map(|id| id.epoch)
        .map_err(|_| {
            input(format!(
                "the item's execution_group_id {:?} names no epoch",
                position.execution_group_id
            ))
        })?;
    let mut branches = vec![position.branch_id.clone()];
    let parent = position
        .record
        .get("replay")
        .and_then(|replay| replay.get("replay_point_id"))
        .and_then(Value::as_str)
        .and_then(|id| points.iter().find(|line| line.point.replay_point_id == id));
    if let Some(parent) = parent
        && !branches.contains(&parent.point.cursor.branch_id)
    {
        branches.push(parent.point.cursor.branch_id.clone());
    }
    read_addressable_trace(run, epoch, &position.trace_id, branches).map_err(CliError::Input)
}

/// The state each child of a snapshot point adopts as its replay child:
/// exported from the binding resumed in the parent.
fn exported_state(
    adapter: &mut WasmAdapter,
    registry: &ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
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

/// The hypothesis as the result line records it.
fn hypothesis_record(hypothesis: &CounterfactualHypothesis) -> Value {
    let targets = |set: &[crate::replay::counterfactual::ValidationTarget]| -> Vec<Value> {
        set.iter()
            .map(
                |t| json!({"validation_id": t.validation_id, "baseline_passed": t.baseline_passed}),
            )
            .collect()
    };
    json!({
        "hypothesis_id": hypothesis.hypothesis_id,
        "item_id": hypothesis.item_id,
        "epoch": hypothesis.epoch,
        "first_affected_event_id": hypothesis.first_affected_event_id,
        "first_affected_sequence": hypothesis.first_affected_sequence,
        "minimum_fidelity": hypothesis.minimum_fidelity.as_str(),
        "fix_set": targets(&hypothesis.fix_set),
        "guard_set": targets(&hypothesis.guard_set),
        "candidates": hypothesis.candidates.iter().map(|c| json!({
            "candidate_id": c.candidate_id,
            "target_branch_id": c.target_branch_id,
            "public_change_set": c.public_change_set,
        })).collect::<Vec<_>>(),
    })
}

fn print_table(
    hypothesis: &CounterfactualHypothesis,
    line: &PointLine,
    kind: DurableKind,
    group: &Result<CounterfactualGroupResult, ReplayError>,
    path: &Path,
) {
    let point = &line.point;
    say(&format!(
        "sandloop counterfactual: {} on {}, from replay point {} ({}, {} fork, sequence {} of trace {})",
        shown(&hypothesis.hypothesis_id, ID_COLUMN),
        shown(&hypothesis.item_id, WHY_COLUMN),
        point.replay_point_id,
        point.fidelity,
        match kind {
            DurableKind::Snapshot => "snapshot",
            DurableKind::State => "state",
        },
        point.cursor.next_sequence,
        point.cursor.trace_id,
    ));
    match group {
        Err(error) => say(&format!(
            "  failed     {}",
            shown(&error.to_string(), WHY_COLUMN)
        )),
        Ok(group) => {
            let width = group
                .candidates
                .iter()
                .map(|c| shown(c.candidate_id(), ID_COLUMN).chars().count())
                .max()
                .unwrap_or(0)
                .max("candidate".len());
            say(&format!("  {:width$}  {:16}  why", "candidate", "decision"));
            for candidate in &group.candidates {
                let (decision, why) = match candidate {
                    CandidateResult::Evaluated { replay, .. } => {
                        let mut why = replay.reason.to_string();
                        let listed = |label: &str, ids: &[String]| {
                            (!ids.is_empty()).then(|| format!("{label}: {}", ids.join(", ")))
                        };
                        let details: Vec<String> = [
                            listed("missing", &replay.missing_validations),
                            listed("still failing", &replay.failed_fixes),
                            listed("regressed", &replay.regressed_guards),
                        ]
                        .into_iter()
                        .flatten()
                        .collect();
                        if !details.is_empty() {
                            why.push_str(&format!(" ({})", details.join("; ")));
                        }
                        if !replay.restore.promotion_eligible {
                            why.push_str(&format!(
                                " ({} restore, {})",
                                replay.restore.achieved_fidelity,
                                if replay.restore.equivalent {
                                    "verified"
                                } else {
                                    "not verified"
                                }
                            ));
                        }
                        (replay.decision.as_str(), why)
                    }
                    CandidateResult::ExecutionFailed(failure) => {
                        let mut why = format!(
                            "{} at {}: {}",
                            failure.error_type,
                            failure.stage.as_str(),
                            failure.error.message
                        );
                        if let Some(reason) = failure
                            .risk_assessment
                            .as_ref()
                            .and_then(|assessment| assessment.sanitized_reason.as_deref())
                        {
                            why.push_str(&format!(" ({reason})"));
                        }
                        ("execution_failed", why)
                    }
                };
                say(&format!(
                    "  {:width$}  {decision:16}  {}",
                    shown(candidate.candidate_id(), ID_COLUMN),
                    shown(&why, WHY_COLUMN)
                ));
            }
        }
    }
    say(&format!("  written    {}", path.display()));
}

/// Widest candidate id the table shows, characters.
const ID_COLUMN: usize = 48;
/// Longest reason the table shows, characters (the line has them whole).
const WHY_COLUMN: usize = 240;

/// `text` for the terminal: control characters escaped, cut at `max`
/// characters with an ellipsis.
fn shown(text: &str, max: usize) -> String {
    sandloop_core::terminal::one_line(&sandloop_core::ellipsis::cut_chars(text, max)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_is_escaped_and_cut() {
        assert_eq!(shown("a\nb\u{1b}[31m", 10), "a\\u000ab\\u001b[31m");
        assert_eq!(shown("abcdef", 3), "abc…");
        assert_eq!(shown("", 3), "");
        let long = "c".repeat(70_000);
        assert_eq!(shown(&long, ID_COLUMN).chars().count(), ID_COLUMN + 1);
    }

    #[test]
    fn a_failure_is_an_error_record_or_a_refused_one() {
        let record = |value: Value| value.as_object().unwrap().clone();
        assert!(failed(&record(json!({"adapter_error": {"type": "trap"}}))));
        assert!(failed(&record(json!({"accepted": false}))));
        assert!(!failed(&record(
            json!({"accepted": true, "adapter_error": null})
        )));
        assert!(!failed(&record(json!({}))));
    }
}
