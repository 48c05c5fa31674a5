//! `sandloop replay`: run one item of a finished run again, in a fresh
//! sandbox, from the nearest trustworthy durable replay point before the
//! item's first affected trace event — instead of running its whole prefix
//! again — and report whether the restore was verified equivalent.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::args::ReplayArgs;
use super::finished_run::{
    AdoptedPoint, ComponentSource, adopt_point, error_fields, load_run_adapter, lock_run,
    open_run_log, point_state_and_item,
};
use super::{CliError, say};
use crate::episode::adapter::{CallContext, Record};
use crate::finished_run::offline::{
    REPLAYS_FILE, ReplayPlan, append_line, find_record, plan_replay, run_source,
};
use crate::replay::RiskAssessmentRules;
use crate::replay::durable::{PointLine, load_points};
use crate::replay::group::replayed_suffix_record;
use crate::replay::registry::judge_replay_intent;
use crate::replay::{
    MemoryAgentStateStore, ReplayError, ReplayMetricLedger, ReplayPointRegistry,
    ReplayRestoreResult, RiskAssessment,
};
use crate::sandbox::adapter::screen_adopted_intent;
use crate::trace::TraceLog;

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// Run `sandloop replay` (exit 0: the suffix succeeded; 1: the restore or
/// the suffix failed, the result is still written; 2: bad input).
pub fn replay(args: ReplayArgs) -> Result<(), CliError> {
    let minimum = crate::replay::fidelity::parse_minimum(&args.min_fidelity)
        .map_err(|error| input(format!("--min-fidelity: {error}")))?;
    let run = &args.run;
    if !run.is_dir() {
        return Err(input(format!("{} is not a directory", run.display())));
    }
    // Held for the whole replay: no run writes the directory meanwhile, and
    // two replays of one run never interleave.
    let _lock = lock_run(run, "replay")?;

    let source = run_source(run)?;
    let all_points = load_points(run).map_err(|error| input(error.to_string()))?;
    let mut position = find_record(run, &args.item, args.epoch)?;
    let ReplayPlan {
        line,
        selection,
        first_affected,
    } = plan_replay(&all_points, &mut position, args.from_sequence, minimum)
        .map_err(CliError::Input)?;
    let line = &line;
    let state_file = line
        .durable_state
        .as_ref()
        .expect("filtered on durable states");
    let (state, item) =
        point_state_and_item(run, line, &args.item).map_err(|error| error.unwrap_or_else(input))?;

    // The adapter, in the sandbox the run used.
    let from = ComponentSource {
        run,
        component: &args.component,
        // The point's instance, and the child that screens its intent.
        instances: 2,
    };
    let loaded = load_run_adapter(&from, &source, state_file.kind)?;

    // Everything is checked; the result must have somewhere to go.
    let replays_path = run.join(REPLAYS_FILE);
    let (mut replays, earlier) = open_run_log(&replays_path)?;
    let started = Instant::now();
    let replay_number = earlier.lines + 1;
    let target_branch = format!("replay-{replay_number}:{}", args.item);
    let metrics = Arc::new(ReplayMetricLedger::new());
    selection.count(&metrics);
    let mut registry = ReplayPointRegistry::new(MemoryAgentStateStore::new(), Arc::clone(&metrics));
    let import_started = Instant::now();
    let AdoptedPoint {
        mut adapter,
        snapshot,
        point: adopted,
    } = adopt_point(&loaded, line, &state, &mut registry)?;
    let snapshot = snapshot.map(|(cost, _)| cost);
    let import_minutes = import_started.elapsed().as_secs_f64() / 60.0;
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
    // A denied intent never runs (reference `RiskAwareReplayChildAdapter`),
    // whichever kind of durable point it replays from.
    let mut intent_assessment = None;
    let screened = adopted.and_then(|point| {
        let screened = screen_adopted_intent(
            &loaded,
            &mut adapter,
            &registry,
            &point,
            &item,
            &ctx,
            minimum,
        )?;
        if let Some(assessment) = screened {
            intent_assessment = Some(assessment.clone());
            judge_replay_intent(&metrics, &assessment)?;
        }
        Ok(point)
    });
    let outcome = screened.and_then(|point| {
        registry.run_from(
            &mut adapter,
            &point.replay_point_id,
            // The restore's target is the item, as in the run; the replayed
            // events go to their own `replay-N:ITEM` branch.
            &args.item,
            minimum,
            |adapter, binding, _| replayed_suffix_record(adapter, binding, &item, &ctx, &mut trace),
        )
    });
    // The adapter's failure to release is reported, not hidden: the replay
    // ran, but the component misbehaved.
    let release_error = registry
        .release(&mut adapter, &line.point.replay_point_id)
        .err()
        .map(|error| {
            tracing::warn!(
                "the adapter did not release replay point {}: {error}",
                line.point.replay_point_id
            );
            error_fields(&error)
        });

    let original = json!({
        "execution_status": position.record.get("execution_status"),
        "adapter_error": position.record.get("adapter_error"),
        "accepted": position.record.get("accepted"),
    });
    let (succeeded, restore, result) = outcome_fields(&outcome);
    let report = json!({
        "schema_version": "sandloop_replay_v0",
        "item_id": args.item,
        "execution_group_id": position.execution_group_id,
        "first_affected_sequence": (first_affected != u64::MAX).then_some(first_affected),
        "minimum_fidelity": minimum.as_str(),
        "replay_point": line.to_record(),
        "selection": {
            "fidelity_fallback": selection.fidelity_fallback,
            "fidelity_filtered": selection.fidelity_filtered,
        },
        "import_minutes": import_minutes,
        "restored_from": state_file.kind,
        "intent_assessment": intent_assessment.as_ref().map(RiskAssessment::to_record),
        "snapshot_compile": snapshot,
        "restore": restore,
        "succeeded": succeeded,
        "outcome": result,
        "original": original,
        "trace_events": trace.as_ref().map(|log| log.events().to_vec()).unwrap_or_default(),
        "replay_wall_minutes": started.elapsed().as_secs_f64() / 60.0,
        "metrics": metrics.snapshot(),
        "release_error": release_error,
    });
    append_line(&mut replays, &replays_path, earlier.partial, &report)?;
    if args.json {
        say(&serde_json::to_string_pretty(&report).expect("a JSON value serialises"));
    } else {
        print_report(&args, line, &report, &outcome);
    }
    match outcome {
        Ok(_) => Ok(()),
        Err(error) => Err(CliError::Failed(format!(
            "the replay of {:?} failed: {error}",
            args.item
        ))),
    }
}

/// A replay's `succeeded`, `restore` and `outcome` fields: the record, or
/// the error with its stage and type, and the restore it ran on.
fn outcome_fields(
    outcome: &Result<(ReplayRestoreResult, Record), ReplayError>,
) -> (bool, Option<Map<String, Value>>, Value) {
    match outcome {
        Ok((restore, record)) => (true, Some(restore.to_record()), json!({"record": record})),
        Err(error) => (
            false,
            error.restore.as_ref().map(|restore| restore.to_record()),
            json!({ "error": error_fields(error) }),
        ),
    }
}

fn print_report(
    args: &ReplayArgs,
    line: &PointLine,
    report: &Value,
    outcome: &Result<(crate::replay::ReplayRestoreResult, Record), crate::replay::ReplayError>,
) {
    let point = &line.point;
    say(&format!(
        "sandloop replay: {} from replay point {} ({}, trace {} at sequence {})",
        args.item,
        point.replay_point_id,
        point.fidelity,
        point.cursor.trace_id,
        point.cursor.next_sequence,
    ));
    if report["selection"]["fidelity_fallback"] == true {
        say(&format!(
            "  selection  no point met {}; fell back to the nearest weaker one",
            args.min_fidelity
        ));
    }
    let minutes = |key: &str| report["restore"][key].as_f64().unwrap_or(0.0) * 60_000.0;
    match outcome {
        Ok((restore, record)) => {
            say(&format!(
                "  restore    {}, {}, {}",
                restore.achieved_fidelity,
                if restore.equivalent {
                    "verified equivalent"
                } else {
                    "not verified equivalent"
                },
                if restore.promotion_eligible {
                    "promotion eligible"
                } else {
                    "not promotion eligible"
                },
            ));
            let keys = record
                .get("observation_keys")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            say(&format!(
                "  outcome    succeeded: {keys} observation {}, accepted {}",
                if keys == 1 { "key" } else { "keys" },
                record.get("accepted").unwrap_or(&Value::Null)
            ));
        }
        Err(error) => {
            if let Some(restore) = &error.restore {
                say(&format!(
                    "  restore    {}, {}",
                    restore.achieved_fidelity,
                    if restore.equivalent {
                        "verified equivalent"
                    } else {
                        "not verified equivalent"
                    }
                ));
            }
            say(&format!("  outcome    failed: {error}"));
        }
    }
    if let Some(assessment) = report["intent_assessment"].as_object() {
        let field = |key: &str| assessment.get(key).and_then(Value::as_str).unwrap_or("");
        say(&format!(
            "  intent     {} by {}",
            if field("disposition") == "deny" {
                "denied"
            } else {
                "allowed"
            },
            field("policy_id")
        ));
    }
    if let Some(compile) = report["snapshot_compile"].as_object() {
        let ms = |key: &str| compile.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        say(&format!(
            "  snapshot   restored from the point's snapshot component: instrumented in {:.0} ms ({}), compiled in {:.0} ms",
            ms("instrument_ms"),
            compile
                .get("instrumented_cache")
                .and_then(Value::as_str)
                .unwrap_or("?"),
            ms("compile_ms"),
        ));
    }
    say(&format!(
        "  time       import {:.2} ms, restore {:.2} ms, equivalence {:.2} ms, suffix {:.2} ms",
        report["import_minutes"].as_f64().unwrap_or(0.0) * 60_000.0,
        minutes("restore_minutes"),
        minutes("equivalence_minutes"),
        minutes("suffix_minutes"),
    ));
    let original = &report["original"];
    let was = match original["adapter_error"]["type"].as_str() {
        Some(kind) => format!("failed ({kind})"),
        None => "succeeded".to_string(),
    };
    say(&format!("  run        the item {was} in the run"));
    say(&format!(
        "  written    {}",
        args.run.join(REPLAYS_FILE).display()
    ));
}
