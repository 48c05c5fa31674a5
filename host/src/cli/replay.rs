//! `sandloop replay`: run one item of a finished run again, in a fresh
//! sandbox, from the nearest trustworthy durable replay point before the
//! item's first affected trace event — instead of running its whole prefix
//! again — and report whether the restore was verified equivalent.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::args::{ReplayArgs, SandboxArgs};
use super::run::sandbox_config;
use super::{CliError, open_sandbox, say};
use crate::episode::adapter::{CallContext, Item, Record};
use crate::episode::units::GroupId;
use crate::harness::RunManifest;
use crate::harness::run_files::{MANIFEST_FILE, RECORDS_FILE, RunFileError, read_run_file};
use crate::replay::RiskAssessmentRules;
use crate::replay::durable::{DurableKind, PointLine, load_points, read_durable_state};
use crate::replay::metrics::ReplayCount;
use crate::replay::{
    Disposition, Fidelity, ForkRequest, Lifecycle, MemoryAgentStateStore, ReplayCause, ReplayError,
    ReplayMetricLedger, ReplayPoint, ReplayPointRegistry, ReplayStage, RiskAssessment,
    select_before,
};
use crate::sandbox::adapter::{
    BindingHandle, adopt_durable_point, adopt_snapshot_point, screen_replay_intent,
    screens_replay_intent,
};
use crate::sandbox::snapshot::Instrumented;
use crate::sandbox::{LoadedAdapter, WasmAdapter, load};
use crate::trace::TraceLog;

/// `replays.jsonl`: one line per `sandloop replay` of the run.
pub const REPLAYS_FILE: &str = "replays.jsonl";

/// Where in its trace an item of the run ran.
struct ItemPosition {
    execution_group_id: String,
    trace_id: String,
    branch_id: String,
    first_sequence: Option<u64>,
    record: Record,
}

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// The epoch of a record, from its `execution_group_id` (a [`GroupId`],
/// `ARM:epoch-N:group-M`); `None` for a record outside a group.
fn record_epoch(record: &Record) -> Option<u32> {
    let group = record.get("execution_group_id")?.as_str()?;
    group.parse::<GroupId>().ok().map(|id| id.epoch)
}

/// The last record of `item_id` in the run's `records.jsonl`, or its last
/// one in `epoch` when given.
fn find_record(run: &Path, item_id: &str, epoch: Option<u32>) -> Result<ItemPosition, CliError> {
    let path = run.join(RECORDS_FILE);
    let file = std::fs::File::open(&path)
        .map_err(|error| input(format!("cannot read {}: {error}", path.display())))?;
    let mut found: Option<Record> = None;
    let mut epochs: Vec<u32> = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|error| match error.kind() {
            std::io::ErrorKind::InvalidData => {
                input(format!("{}:{}: not valid UTF-8", path.display(), index + 1))
            }
            _ => input(format!("cannot read {}: {error}", path.display())),
        })?;
        if !line.contains(item_id) {
            continue;
        }
        let record: Record = serde_json::from_str(&line).map_err(|error| {
            input(format!(
                "{}:{}: not a JSON record: {error}",
                path.display(),
                index + 1
            ))
        })?;
        if record.get("item_id").and_then(Value::as_str) == Some(item_id)
            && record.get("record_kind").and_then(Value::as_str) != Some("shared_prefix")
        {
            let ran_in = record_epoch(&record);
            if let Some(ran_in) = ran_in
                && !epochs.contains(&ran_in)
            {
                epochs.push(ran_in);
            }
            if epoch.is_none() || ran_in == epoch {
                found = Some(record);
            }
        }
    }
    if let Some(epoch) = epoch
        && found.is_none()
        && !epochs.is_empty()
    {
        let list: Vec<String> = epochs.iter().map(u32::to_string).collect();
        return Err(input(format!(
            "item {item_id:?} has no record in epoch {epoch}; it ran in epoch {}",
            list.join(", ")
        )));
    }
    if item_id.ends_with(":shared-prefix") {
        return Err(input(format!(
            "{item_id:?} is a shared-prefix record; a replay point starts after the prefix, so replay one of the group's items instead"
        )));
    }
    let record = found.ok_or_else(|| {
        input(format!(
            "{} has no record of item {item_id:?}; give the item_id of a seed or variant the run executed",
            path.display()
        ))
    })?;
    let execution_group_id = record
        .get("execution_group_id")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            input(format!(
                "item {item_id:?} ran outside an episode group (no execution_group_id), so no replay point covers it"
            ))
        })?
        .to_string();
    let replay = record.get("replay").and_then(Value::as_object);
    let text = |key: &str| replay.and_then(|r| r.get(key)).and_then(Value::as_str);
    Ok(ItemPosition {
        trace_id: text("trace_id")
            .filter(|id| !id.is_empty())
            .unwrap_or(&execution_group_id)
            .to_string(),
        branch_id: text("branch_id")
            .filter(|id| !id.is_empty())
            .unwrap_or("main")
            .to_string(),
        first_sequence: replay
            .and_then(|r| r.get("first_sequence"))
            .and_then(Value::as_u64),
        execution_group_id,
        record,
    })
}

/// What `sandloop replay` needs from a run's `manifest.json`.
struct RunSource {
    /// The last invocation's options.
    options: Map<String, Value>,
    /// The directory the last invocation started in, when recorded.
    cwd: Option<PathBuf>,
    /// sha256 of the run's adapter.
    sha256: String,
}

/// The run's last invocation options from `manifest.json` (a
/// [`RunManifest`]); errors name the file and the field at fault.
fn manifest_options(run: &Path) -> Result<RunSource, CliError> {
    let path = run.join(MANIFEST_FILE);
    let manifest: RunManifest = read_run_file(&path).map_err(|error| match error {
        RunFileError::Read { source, .. } => input(format!(
            "{} is not a sandloop run directory (cannot read {MANIFEST_FILE}: {source})",
            run.display()
        )),
        other => input(other.to_string()),
    })?;
    let sha256 = manifest.adapter.sha256;
    let last = manifest
        .invocations
        .into_iter()
        .last()
        .ok_or_else(|| input(format!("{}: no invocation options", path.display())))?;
    Ok(RunSource {
        options: last.options,
        cwd: last.cwd,
        sha256,
    })
}

/// `path` as the run saw it: relative paths are taken from the directory
/// the run was started in (`cwd` of its invocation), when recorded.
fn as_run_saw_it(path: &str, cwd: Option<&Path>) -> PathBuf {
    match cwd {
        Some(cwd) if Path::new(path).is_relative() => cwd.join(path),
        _ => PathBuf::from(path),
    }
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

    let RunSource {
        options,
        cwd: run_cwd,
        sha256: run_sha256,
    } = manifest_options(run)?;
    let all_points = load_points(run).map_err(|error| input(error.to_string()))?;
    let mut position = find_record(run, &args.item, args.epoch)?;

    // Points a later process can restore: durable and not quarantined.
    let durable: Vec<PointLine> = all_points
        .iter()
        .filter(|line| {
            line.durable_state.is_some()
                && !line.quarantined
                && line.point.lifecycle != Lifecycle::Failed
        })
        .cloned()
        .map(|mut line| {
            line.point.lifecycle = Lifecycle::Ready;
            line
        })
        .collect();
    // A child ran on its own branch, forked from a point on its parent's:
    // its lineage goes through that branch.
    let on_own_branch = durable.iter().any(|line| {
        line.point.cursor.trace_id == position.trace_id
            && line.point.cursor.branch_id == position.branch_id
    });
    if !on_own_branch
        && let Some(parent) = position
            .record
            .get("replay")
            .and_then(|replay| replay.get("replay_point_id"))
            .and_then(Value::as_str)
            .and_then(|id| durable.iter().find(|line| line.point.replay_point_id == id))
    {
        position.branch_id = parent.point.cursor.branch_id.clone();
    }
    let first_affected = args
        .from_sequence
        .or(position.first_sequence)
        .unwrap_or(u64::MAX);
    let (chosen, selection) = select_before(
        durable.iter().map(|line| &line.point),
        &position.trace_id,
        &position.branch_id,
        first_affected,
        minimum,
    )
    .ok_or_else(|| input(no_point_reason(&all_points, &position, first_affected)))?;
    let line = durable
        .iter()
        .find(|line| line.point.replay_point_id == chosen.replay_point_id)
        .expect("chosen from these lines");
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
    let adapter_path = match &args.adapter {
        Some(path) => path.clone(),
        None => as_run_saw_it(
            options
                .get("adapter")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    input("manifest.json does not name the run's adapter; give --adapter")
                })?,
            run_cwd.as_deref(),
        ),
    };
    let sandbox = sandbox_args(
        &options,
        run_cwd.as_deref(),
        args.cache_dir.clone(),
        args.no_cache,
    );
    let mut config = sandbox_config(&sandbox, 2)?;
    // As in the run that wrote it: a snapshot is compiled beside the
    // instrumented component, whose functions it reuses.
    config.incremental_compilation = state_file.kind == DurableKind::Snapshot;
    // The directories the run was granted, not what their paths name now.
    sandloop_core::harness::grant_check::check_unchanged(&run.join(MANIFEST_FILE), &config.dirs)
        .map_err(CliError::Input)?;
    let (engine, config) = open_sandbox(config)?;
    let loaded = Arc::new(load(&adapter_path, engine, config).map_err(|error| match error {
        crate::sandbox::LoadError::Read { .. } if args.adapter.is_none() => input(format!(
            "{error}; the run's component moved? give it with --adapter (its sha256 must match the run's)"
        )),
        other => other.into(),
    })?);
    if loaded.info.sha256 != run_sha256 {
        return Err(input(format!(
            "{} is not the component this run used (sha256 {}…, the run's is {}…)",
            adapter_path.display(),
            &loaded.info.sha256[..12],
            &run_sha256[..12.min(run_sha256.len())]
        )));
    }
    if !loaded.protocols.replay {
        return Err(input(format!(
            "{} does not export `replay`",
            adapter_path.display()
        )));
    }

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
    let (mut adapter, snapshot) = match (state_file.kind, state_file.binding_token) {
        (DurableKind::Snapshot, Some(token)) => {
            let (adapter, compile) = snapshot_adapter(&loaded, &state, &state_file.sha256)?;
            (adapter, Some((token, compile)))
        }
        _ => (WasmAdapter::new(Arc::clone(&loaded), "replay", None), None),
    };
    let adopted = match snapshot {
        Some((token, _)) => adopt_snapshot_point(&mut adapter, &mut registry, &line.point, token),
        None => adopt_durable_point(
            &mut adapter,
            &mut registry,
            &line.point,
            &line.execution_group_id,
            &state,
        ),
    };
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
        let screened = screen_intent(
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
            judge_intent(&metrics, &assessment)?;
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
    let _ = registry.release(&mut adapter, &line.point.replay_point_id);

    let original = json!({
        "execution_status": position.record.get("execution_status"),
        "adapter_error": position.record.get("adapter_error"),
        "accepted": position.record.get("accepted"),
    });
    let (succeeded, restore, result) = match &outcome {
        Ok((restore, record)) => (true, Some(restore.to_record()), json!({"record": record})),
        Err(error) => (
            false,
            error.restore.as_ref().map(|restore| restore.to_record()),
            json!({"error": {
                "stage": error.stage.as_str(),
                "type": error.cause.error_type(),
                "message": error.to_string(),
            }}),
        ),
    };
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
        "snapshot_compile": snapshot.map(|(_, compile)| compile),
        "restore": restore,
        "succeeded": succeeded,
        "outcome": result,
        "original": original,
        "trace_events": trace.as_ref().map(|log| log.events().to_vec()).unwrap_or_default(),
        "replay_wall_minutes": started.elapsed().as_secs_f64() / 60.0,
        "metrics": metrics.snapshot(),
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

/// The adapter's `child-risk` verdict on replaying `item` from the adopted
/// `point` (at the replay's `minimum` fidelity), `None` when the component
/// does not export the policy. The point's state is exported from its
/// adopted binding in `adapter` (an imported state or a resumed snapshot
/// alike), and the policy judges in a fresh instance of `loaded` that
/// adopts it as the item's child. Errors (stage `intent`): the state
/// cannot be exported, or the screen failed; the replay is then refused,
/// never run unscreened.
fn screen_intent(
    loaded: &Arc<LoadedAdapter>,
    adapter: &mut WasmAdapter,
    registry: &ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    point: &ReplayPoint,
    item: &Item,
    ctx: &CallContext,
    minimum: Fidelity,
) -> Result<Option<RiskAssessment>, ReplayError> {
    if !screens_replay_intent(loaded) {
        return Ok(None);
    }
    let failed = |error| ReplayError::adapter(ReplayStage::Intent, error);
    let refused = |why: &str| {
        ReplayError::new(
            ReplayStage::Intent,
            ReplayCause::Unavailable(format!(
                "the adapter's child-risk policy cannot screen this replay: {why}"
            )),
        )
    };
    let binding = *registry
        .binding(&point.replay_point_id)
        .ok_or_else(|| refused("the point has no binding"))?;
    let state = adapter
        .export_replay_state(&binding)
        .map_err(failed)?
        .ok_or_else(|| refused("export-replay-state gave none"))?;
    let item_id = item
        .get("item_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let request = ForkRequest {
        replay_point_id: point.replay_point_id.clone(),
        child_id: item_id.clone(),
        target_branch_id: item_id,
        minimum_fidelity: minimum,
    };
    screen_replay_intent(loaded, point, &state, &request, ctx, item)
        .map(Some)
        .map_err(failed)
}

/// Count `assessment` in `metrics` as the child runtime does
/// (`child_intent_assessment_count`, then `child_intent_allowed_count` or
/// `child_intent_denied_count`); a denial is the replay's `intent` failure
/// (`replay_risk_denied`), naming the policy and its reason.
fn judge_intent(
    metrics: &ReplayMetricLedger,
    assessment: &RiskAssessment,
) -> Result<(), ReplayError> {
    let denied = assessment.disposition == Disposition::Deny;
    metrics.increment(ReplayCount::ChildIntentAssessment);
    metrics.increment(if denied {
        ReplayCount::ChildIntentDenied
    } else {
        ReplayCount::ChildIntentAllowed
    });
    if !denied {
        return Ok(());
    }
    let reason = assessment
        .sanitized_reason
        .as_deref()
        .map(|reason| format!(": {reason}"))
        .unwrap_or_default();
    Err(ReplayError::new(
        ReplayStage::Intent,
        ReplayCause::RiskDenied(format!(
            "replay intent denied by {}{reason}",
            assessment.policy_id
        )),
    ))
}

/// An adapter over the point's snapshot component `bytes` (sha256
/// `sha256`): `loaded` is instrumented (through the compile cache, as in
/// the run) and the snapshot compiled beside it. Returns the adapter, not
/// yet instantiated, and what the two steps cost (`instrument_ms`,
/// `compile_ms`, `cache` of the instrumented component).
fn snapshot_adapter(
    loaded: &LoadedAdapter,
    bytes: &[u8],
    sha256: &str,
) -> Result<(WasmAdapter, Value), CliError> {
    let failed = |error: crate::sandbox::snapshot::SnapshotError| {
        CliError::Failed(format!("cannot load the replay point's snapshot: {error}"))
    };
    let instrumented = Instrumented::load(loaded).map_err(failed)?;
    let compiled = instrumented
        .compile_snapshot_bytes(bytes, sha256)
        .map_err(failed)?;
    let cost = json!({
        "instrument_ms": instrumented.info.compile.as_secs_f64() * 1000.0
            + instrumented.info.instrument.as_secs_f64() * 1000.0,
        "instrumented_cache": instrumented.info.cache,
        "compile_ms": (compiled.compile + compiled.image).as_secs_f64() * 1000.0,
    });
    Ok((
        WasmAdapter::new(Arc::clone(compiled.loaded()), "replay", None),
        cost,
    ))
}

/// What `replays.jsonl` already holds, read once.
struct ReplaysFile {
    /// Non-blank lines: earlier replays.
    lines: usize,
    /// Whether it ends in a partial line (a crash mid-write).
    partial: bool,
}

impl ReplaysFile {
    fn read(path: &Path) -> Self {
        let bytes = std::fs::read(path).unwrap_or_default();
        Self {
            lines: bytes
                .split(|byte| *byte == b'\n')
                .filter(|line| !line.trim_ascii().is_empty())
                .count(),
            partial: bytes.last().is_some_and(|last| *last != b'\n'),
        }
    }
}

/// Append `value` as one line, starting a new line first if the file ends
/// in a partial one (a crash mid-write must not swallow this record).
fn append_line(
    file: &mut std::fs::File,
    path: &Path,
    partial: bool,
    value: &Value,
) -> Result<(), CliError> {
    let mut text = Vec::new();
    if partial {
        text.push(b'\n');
    }
    text.extend(serde_json::to_vec(value).expect("a JSON value serialises"));
    text.push(b'\n');
    file.write_all(&text)
        .map_err(|error| CliError::Failed(format!("cannot write {}: {error}", path.display())))
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

/// Why no durable point qualifies, naming what was found.
fn no_point_reason(points: &[PointLine], position: &ItemPosition, first: u64) -> String {
    let on_trace: Vec<&PointLine> = points
        .iter()
        .filter(|line| line.point.cursor.trace_id == position.trace_id)
        .collect();
    let at = if first == u64::MAX {
        "its end".to_string()
    } else {
        format!("sequence {first}")
    };
    if on_trace.is_empty() {
        return format!(
            "no replay point was captured on trace {:?}, where the run's last record of the item ran \
             (that part of the run had replay off — --no-replay — or its prefix capture failed: \
             see the prefix record's replay_capture_error); an item that ran in several epochs \
             is replayed from its last one unless --epoch names another",
            position.trace_id
        );
    }
    let reasons: Vec<String> = on_trace
        .iter()
        .map(|line| {
            let point = &line.point;
            let why = if line.durable_state.is_none() {
                match &line.durable_error {
                    Some(error) => format!("its state was not saved ({error})"),
                    None if point.fidelity == Fidelity::NonReplayable => {
                        "it is a non_replayable marker".to_string()
                    }
                    None => "the adapter did not export its state".to_string(),
                }
            } else if line.quarantined || point.lifecycle == Lifecycle::Failed {
                "it was quarantined during the run".to_string()
            } else if point.cursor.next_sequence > first {
                format!(
                    "it sits at sequence {}, after {at}",
                    point.cursor.next_sequence
                )
            } else {
                format!("it is on branch {:?}", point.cursor.branch_id)
            };
            format!("{} ({why})", point.replay_point_id)
        })
        .collect();
    format!(
        "no durable replay point of trace {:?} lies at or before {at}: {}",
        position.trace_id,
        reasons.join("; ")
    )
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
    use sandloop_core::hostile_inputs::{config, json_value, mutate_bytes};

    #[test]
    fn a_manifest_without_some_options_falls_back_to_the_defaults() {
        let sandbox = sandbox_args(&Map::new(), None, None, false);
        assert_eq!(sandbox.max_memory, 512);
        assert_eq!(sandbox.call_timeout, 60.0);
        assert_eq!(sandbox.fuel, None);
        assert!(sandbox.dirs.is_empty() && sandbox.env.is_empty());
        assert_eq!(sandbox.max_output, 8 << 20);
    }

    #[test]
    fn invalid_utf8_in_records_jsonl_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("records.jsonl"),
            b"{\"item_id\":\"a\"}\n{\"item_id\":\"a\",\"x\":\"\xff\"}\n",
        )
        .unwrap();
        let Err(CliError::Input(message)) = find_record(dir.path(), "a", None) else {
            panic!("expected an input error");
        };
        assert!(message.contains("records.jsonl:2: "), "{message}");
    }

    #[test]
    fn the_epoch_is_read_from_the_group_id_even_when_the_arm_name_looks_like_one() {
        let record = |group: &str| -> Record {
            json!({"execution_group_id": group})
                .as_object()
                .cloned()
                .unwrap()
        };
        assert_eq!(record_epoch(&record("main:epoch-3:group-0001")), Some(3));
        assert_eq!(
            record_epoch(&record("a:epoch-9:x:epoch-2:group-0001")),
            Some(2)
        );
        assert_eq!(record_epoch(&record("main:epoch-x:group-0001")), None);
        assert_eq!(record_epoch(&Record::new()), None);
    }

    fn record_line(n: usize) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"item_id": "it", "execution_group_id": format!("main:epoch-{n}:group-0"),
                                   "replay": {"trace_id": "t", "first_sequence": n}}),
        )
        .unwrap()
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
            match manifest_options(dir.path()) {
                Ok(found) => {
                    let _ = sandbox_args(&found.options, found.cwd.as_deref(), None, true);
                }
                Err(CliError::Input(message)) => {
                    prop_assert!(message.contains(&dir.path().display().to_string()), "{}", message);
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }

        #[test]
        fn prop_replay_records_a_damaged_line_is_named_by_number(
            before in 0usize..3,
            bad in (0usize..9).prop_flat_map(|n| mutate_bytes(record_line(n), true)),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut text = Vec::new();
            for n in 0..before {
                text.extend(record_line(n));
                text.push(b'\n');
            }
            text.extend(&bad);
            text.extend(b"\n");
            std::fs::write(dir.path().join("records.jsonl"), &text).unwrap();
            if let Err(CliError::Input(message)) = find_record(dir.path(), "it", None) {
                let path = dir.path().join("records.jsonl").display().to_string();
                if message.starts_with(&path) && !message.contains(" has no record of item ") {
                    prop_assert!(message.starts_with(&format!("{path}:{}: ", before + 1)), "{}", message);
                }
            }
        }
    }
}
