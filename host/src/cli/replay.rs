//! `sandloop replay`: run one item of a finished run again, in a fresh
//! sandbox, from the nearest trustworthy durable replay point before the
//! item's first affected trace event — instead of running its whole prefix
//! again — and report whether the restore was verified equivalent.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::args::{ReplayArgs, SandboxArgs};
use super::run::sandbox_config;
use super::{CliError, open_sandbox, say};
use crate::episode::adapter::{CallContext, Item, Record};
use crate::harness::run_files::MANIFEST_FILE;
use crate::replay::RiskAssessmentRules;
use crate::replay::durable::{DurableKind, PointLine, load_points, read_durable_state};
use crate::replay::offline::{
    REPLAYS_FILE, ReplayPlan, ReplaysFile, RunSource, append_line, as_run_saw_it, find_record,
    plan_replay, run_source,
};
use crate::replay::registry::judge_replay_intent;
use crate::replay::{
    MemoryAgentStateStore, ReplayError, ReplayMetricLedger, ReplayPoint, ReplayPointRegistry,
    ReplayRestoreResult, RiskAssessment,
};
use crate::sandbox::adapter::{
    BindingHandle, SnapshotCompileCost, adopt_durable_point, adopt_snapshot_point,
    screen_adopted_intent, snapshot_replay_adapter,
};
use crate::sandbox::{LoadedAdapter, WasmAdapter, load};
use crate::trace::TraceLog;

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

use crate::sandbox::guarded_open::DEFAULT_MAX_OPEN_FILES;

/// The sandbox the run used, from its recorded options; relative grant
/// paths are resolved against the run's working directory.
fn sandbox_args(
    options: &Map<String, Value>,
    cwd: Option<&Path>,
    cache_dir: Option<PathBuf>,
    no_cache: bool,
) -> SandboxArgs {
    // `Map` indexing panics on a missing key; an option a manifest lacks
    // reads as `null`, so its default applies.
    let option = |key: &str| options.get(key).unwrap_or(&Value::Null);
    let strings = |key: &str| -> Vec<String> {
        option(key)
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    SandboxArgs {
        max_memory: option("max_memory_mib").as_u64().unwrap_or(512),
        call_timeout: option("call_timeout_secs").as_f64().unwrap_or(60.0),
        fuel: option("fuel").as_u64(),
        dirs: strings("dirs")
            .into_iter()
            .map(|spec| match spec.split_once("::") {
                Some((host, guest)) => {
                    format!("{}::{guest}", as_run_saw_it(host, cwd).display())
                }
                None => spec,
            })
            .collect(),
        env: strings("env"),
        max_output: option("max_output_bytes").as_u64().unwrap_or(8 << 20) as usize,
        max_open_files: option("max_open_files")
            .as_u64()
            .map_or(DEFAULT_MAX_OPEN_FILES, |n| n as usize),
        cache_dir,
        no_cache,
    }
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
    let _lock = lock_for_replay(run)?;

    let source = run_source(run).map_err(CliError::Input)?;
    let all_points = load_points(run).map_err(|error| input(error.to_string()))?;
    let mut position = find_record(run, &args.item, args.epoch).map_err(CliError::Input)?;
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
    let (state, items) =
        read_durable_state(run, state_file).map_err(|error| input(error.to_string()))?;
    let item: Item = items
        .into_iter()
        .find(|item| item.get("item_id").and_then(Value::as_str) == Some(args.item.as_str()))
        .ok_or_else(|| {
            input(format!(
                "item {:?} is not among the items of replay point {}",
                args.item, line.point.replay_point_id
            ))
        })?;

    // The adapter, in the sandbox the run used.
    let loaded = load_run_adapter(&args, &source, state_file.kind)?;

    // Everything is checked; the result must have somewhere to go.
    let replays_path = run.join(REPLAYS_FILE);
    let mut replays = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&replays_path)
        .map_err(|error| input(format!("cannot write {}: {error}", replays_path.display())))?;
    let started = Instant::now();
    let earlier = ReplaysFile::read(&replays_path);
    let replay_number = earlier.lines + 1;
    let target_branch = format!("replay-{replay_number}:{}", args.item);
    let metrics = Arc::new(ReplayMetricLedger::new());
    let mut registry = ReplayPointRegistry::new(MemoryAgentStateStore::new(), Arc::clone(&metrics));
    let import_started = Instant::now();
    let (mut adapter, snapshot, adopted) = adopt_point(&loaded, line, &state, &mut registry)?;
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
            |adapter, binding, _| adapter.run_replay_suffix(binding, &item, &ctx, &mut trace),
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
    append_line(&mut replays, &replays_path, earlier.partial, &report).map_err(CliError::Failed)?;
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

/// Adopt `line`'s durable point into a fresh adapter of `loaded`
/// registered in `registry`: by importing its exported `state`, or, for a
/// snapshot point, by resuming its binding in an instance of the snapshot
/// (`state` is then the snapshot component). Returns the adapter, what
/// loading the snapshot cost, and the adopted point (or why adoption
/// failed: the replay's result, not the command's error).
#[allow(clippy::type_complexity)]
fn adopt_point(
    loaded: &Arc<LoadedAdapter>,
    line: &PointLine,
    state: &[u8],
    registry: &mut ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
) -> Result<
    (
        WasmAdapter,
        Option<SnapshotCompileCost>,
        Result<ReplayPoint, ReplayError>,
    ),
    CliError,
> {
    let state_file = line
        .durable_state
        .as_ref()
        .expect("a planned point is durable");
    if let (DurableKind::Snapshot, Some(token)) = (state_file.kind, state_file.binding_token) {
        let (mut adapter, compile) = snapshot_replay_adapter(loaded, state, &state_file.sha256)
            .map_err(|error| {
                CliError::Failed(format!("cannot load the replay point's snapshot: {error}"))
            })?;
        let adopted = adopt_snapshot_point(&mut adapter, registry, &line.point, token);
        return Ok((adapter, Some(compile), adopted));
    }
    let mut adapter = WasmAdapter::new(Arc::clone(loaded), "replay", None);
    let adopted = adopt_durable_point(
        &mut adapter,
        registry,
        &line.point,
        &line.execution_group_id,
        state,
    );
    Ok((adapter, None, adopted))
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

/// An error's `stage`, `type` and `message`, as a replay's report holds it.
fn error_fields(error: &ReplayError) -> Value {
    json!({
        "stage": error.stage.as_str(),
        "type": error.cause.error_type(),
        "message": error.to_string(),
    })
}

/// The run's component (its recorded path, or `--adapter`), loaded into the
/// sandbox the run used — its limits and grants, the grants still the
/// directories the run was given — and checked to be the run's (same
/// sha256) and to export `replay`. A durable point of `kind` snapshot is
/// compiled beside the instrumented component, as in the run.
fn load_run_adapter(
    args: &ReplayArgs,
    source: &RunSource,
    kind: DurableKind,
) -> Result<Arc<LoadedAdapter>, CliError> {
    let adapter_path = match &args.adapter {
        Some(path) => path.clone(),
        None => as_run_saw_it(
            source
                .options
                .get("adapter")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    input("manifest.json does not name the run's adapter; give --adapter")
                })?,
            source.cwd.as_deref(),
        ),
    };
    let sandbox = sandbox_args(
        &source.options,
        source.cwd.as_deref(),
        args.cache_dir.clone(),
        args.no_cache,
    );
    let mut config = sandbox_config(&sandbox, 2)?;
    // As in the run that wrote it: a snapshot is compiled beside the
    // instrumented component, whose functions it reuses.
    config.incremental_compilation = kind == DurableKind::Snapshot;
    // The directories the run was granted, not what their paths name now.
    sandloop_core::harness::grant_check::check_unchanged(
        &args.run.join(MANIFEST_FILE),
        &config.dirs,
    )
    .map_err(CliError::Input)?;
    let (engine, config) = open_sandbox(config)?;
    let loaded = Arc::new(load(&adapter_path, engine, config).map_err(|error| match error {
        crate::sandbox::LoadError::Read { .. } if args.adapter.is_none() => input(format!(
            "{error}; the run's component moved? give it with --adapter (its sha256 must match the run's)"
        )),
        other => other.into(),
    })?);
    if loaded.info.sha256 != source.sha256 {
        return Err(input(format!(
            "{} is not the component this run used (sha256 {}…, the run's is {}…)",
            adapter_path.display(),
            &loaded.info.sha256[..12],
            &source.sha256[..12.min(source.sha256.len())]
        )));
    }
    if !loaded.protocols.replay {
        return Err(input(format!(
            "{} does not export `replay`",
            adapter_path.display()
        )));
    }
    Ok(loaded)
}

/// Lock the run directory as `sandloop run` does; refuse (exit 2) while a
/// run or another replay holds it.
fn lock_for_replay(run: &Path) -> Result<sandloop_core::dir_lock::DirLock, CliError> {
    sandloop_core::dir_lock::lock_dir(run).map_err(|error| match error {
        sandloop_core::dir_lock::DirLockError::Held { holder, .. } => input(format!(
            "{} is in use by a sandloop run or another replay ({}); replay once it has finished",
            run.display(),
            sandloop_core::dir_lock::Holder(holder)
        )),
        other => CliError::Failed(other.to_string()),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sandloop_core::hostile_inputs::{config, json_value};

    #[test]
    fn a_manifest_without_some_options_falls_back_to_the_defaults() {
        let sandbox = sandbox_args(&Map::new(), None, None, false);
        assert_eq!(sandbox.max_memory, 512);
        assert_eq!(sandbox.call_timeout, 60.0);
        assert_eq!(sandbox.fuel, None);
        assert!(sandbox.dirs.is_empty() && sandbox.env.is_empty());
        assert_eq!(sandbox.max_output, 8 << 20);
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_replay_manifest_any_json_never_panics_and_errors_name_it(
            manifest in prop_oneof![
                json_value(),
                (json_value(), json_value(), json_value()).prop_map(|(options, cwd, sha)| {
                    json!({"invocations": [{"options": options, "cwd": cwd}],
                           "adapter": {"sha256": sha}})
                }),
                prop::collection::vec((
                    prop::sample::select(vec!["max_memory_mib", "call_timeout_secs", "fuel",
                                              "dirs", "env", "max_output_bytes", "adapter"]),
                    json_value(),
                ), 0..7).prop_map(|options| {
                    let options: Map<String, Value> =
                        options.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    json!({"invocations": [{"options": options}], "adapter": {"sha256": "ab"}})
                }),
            ],
        ) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
            match run_source(dir.path()) {
                Ok(found) => {
                    let _ = sandbox_args(&found.options, found.cwd.as_deref(), None, true);
                }
                Err(message) => {
                    prop_assert!(message.contains(&dir.path().display().to_string()), "{}", message);
                }
            }
        }
    }
}
