//! `sandloop run`: load the adapter, check every input, then run the arm
//! into the run directory with a progress bar and a closing summary.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use super::args::{ForkArg, RunArgs, SandboxArgs};
use super::compile_notice::while_compiling;
use super::run_distributed::{self, Lane};
use super::{CliError, open_sandbox, say};
use crate::distributed::Dispatcher;
use crate::episode::adapter::SeedSource;
use crate::episode::stored::StoredItems;
use crate::harness::arm::{ArmEvent, ArmOptions, run_arm};
use crate::harness::error_tally::{ErrorCounts, ErrorTally};
use crate::harness::items_file::{FileSeeds, load_items_file};
use crate::harness::manifest::{HostInfo, Invocation, ManifestAdapter};
use crate::harness::queue::branch_id;
use crate::harness::run_dir::SideWriteCheck;
use crate::harness::run_files::RECORDS_FILE;
use crate::harness::run_output::{
    NatsOptions, RunAdapter, RunFailed, RunFinished, RunOptions, sorted_pretty_json,
};
use crate::harness::run_session::{
    RunSession, SessionError, check_not_in_use, check_out_dir, check_resume,
    unfinished_record_count,
};
use crate::harness::summary::{SummaryAdapter, SummaryHost};
use crate::harness::{ArmConfig, ArmError, ArmSummary, RunDir, VariantCatalog, runtime_signature};
use crate::replay::Fidelity;
use crate::replay::ReplayMetricLedger;
use crate::replay::durable::ReplayStore;
use crate::replay::metrics::{ReplayCount, ReplayMinutes};
use crate::replay::snapshot_totals::SnapshotTotals;
use crate::sandbox::snapshot::{ForkKind, Instrumented};
use crate::sandbox::{
    CallLog, CallObserver, DirGrant, LoadedAdapter, ReplayOptions, SandboxConfig, WasmAdapter, load,
};
use sandloop_core::limits::{LimitError, SandboxLimits};

/// Build the sandbox configuration from the flags (exit 2 on bad values).
pub(crate) fn sandbox_config(args: &SandboxArgs, slots: u32) -> Result<SandboxConfig, CliError> {
    let limits = limits_from_flags(args)?;
    let env = checked_env_names(&args.env, |name| {
        tracing::warn!(
            "--env {name}: not set here, so the instances this process runs will not see it"
        );
    })?;
    let dirs = DirGrant::parse_all(&args.dirs).map_err(CliError::Input)?;
    let mut config = SandboxConfig {
        limits,
        dirs,
        env,
        pool_instances: slots,
        ..SandboxConfig::default()
    };
    if args.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &args.cache_dir {
        super::check_cache_flag(Some(dir))?;
        config.cache_dir = Some(dir.clone());
    }
    Ok(config)
}

/// The limits `--max-memory`, `--call-timeout`, `--fuel`, `--max-output`
/// and `--max-open-files` give, checked by [`SandboxLimits::validate`];
/// an error names the flag and its bound.
fn limits_from_flags(args: &SandboxArgs) -> Result<SandboxLimits, CliError> {
    let flag = |error: LimitError| {
        let flag = match error.key {
            "max_memory_mib" => "--max-memory",
            "call_timeout_secs" => "--call-timeout",
            "fuel" => "--fuel",
            "max_output_bytes" => "--max-output",
            "max_open_files" => "--max-open-files",
            other => other,
        };
        CliError::Input(format!("{flag} {}", error.problem))
    };
    let limits = SandboxLimits {
        max_memory_mib: args.max_memory,
        call_timeout: SandboxLimits::call_timeout_from_secs(args.call_timeout).map_err(flag)?,
        fuel: args.fuel,
        max_output_bytes: args.max_output,
        max_open_files: args.max_open_files,
        ..SandboxLimits::default()
    };
    limits.validate().map_err(flag)?;
    Ok(limits)
}

fn arm_error(error: ArmError) -> CliError {
    match error {
        ArmError::Config(_)
        | ArmError::RunExists { .. }
        | ArmError::Checkpoint(_)
        | ArmError::Damaged(_) => CliError::Input(error.to_string()),
        ArmError::Io { .. } => CliError::Failed(error_chain(&error)),
        other => CliError::Failed(other.to_string()),
    }
}

/// Run the `run` command.
pub fn run(args: RunArgs) -> Result<(), CliError> {
    run_with(args, Closing::Print)
}

/// What a run prints when it ends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// The closing summary (or, with `--json`, the summary as JSON), and
    /// progress on stderr while it runs.
    Print,
    /// Nothing at all: `sandloop try` shows the records itself.
    Silent,
}

/// [`run`], printing as `closing` says.
pub(crate) fn run_with(args: RunArgs, closing: Closing) -> Result<(), CliError> {
    let started = Instant::now();
    let replay_minimum = check_run_args(&args)?;
    let (loaded, items, mut catalog) = load_inputs(&args)?;
    let protocols = loaded.protocols;
    run_distributed::check_unsupported(&args, protocols)?;

    let snapshots = snapshot_forks(&args, &loaded)?;
    let lanes_run = snapshots.as_ref().map_or_else(
        || Arc::clone(&loaded),
        |instrumented| Arc::clone(instrumented.loaded()),
    );

    let mut arm = arm_config(&args, &loaded.info.sha256);
    let resumed_at = if args.resume {
        // Refuse an incompatible resume before anything is written.
        let signature = runtime_signature(&arm, protocols, catalog.is_some());
        let resumed_at =
            check_resume(&args.out, &signature, &loaded.config().dirs).map_err(session_error)?;
        if resumed_at.is_none() {
            let discarded = unfinished_record_count(&args.out);
            super::complain(
                "warning: ",
                &format!(
                    "{} never finished an epoch (no checkpoint.json): --resume starts it over \
                     from epoch 0, discarding the {discarded} record(s) of its unfinished first epoch",
                    args.out.display()
                ),
            );
        }
        resumed_at
    } else {
        None
    };
    let call_log = Arc::new(CallLog::new(&args.out));
    // A distributed run finds its workers before anything is written.
    let dispatcher = run_distributed::open_dispatcher(&args, &loaded, &call_log)?;
    let session = RunSession::open(&args.out, args.resume, resumed_at).map_err(session_error)?;
    arm.resume = session.resumes();
    record_invocation(&session, &args, &loaded.info, &loaded.config().dirs)?;
    interrupt_message(&args.out, dispatcher.as_ref());

    let observer: Arc<dyn CallObserver> = call_log.clone();
    let replay = (protocols.replay && !args.no_replay).then(|| ReplayOptions {
        metrics: Arc::new(ReplayMetricLedger::new()),
        store: Some(Arc::new(ReplayStore::new(&args.out).with_snapshot_budget(
            args.max_durable_snapshots.saturating_mul(1 << 20),
        ))),
        minimum_fidelity: replay_minimum,
        child_workers: args.child_workers,
        snapshots: snapshots.clone(),
    });
    let remote_replay = replay.as_ref().and_then(run_distributed::remote_replay);
    let factory = |lane: usize| {
        if let Some(dispatcher) = &dispatcher {
            return Ok(Lane::Remote(dispatcher.lane(remote_replay.clone())));
        }
        let adapter = WasmAdapter::new(
            Arc::clone(&lanes_run),
            branch_id(lane),
            Some(Arc::clone(&observer)),
        );
        Ok(Lane::Local(match &replay {
            Some(options) => adapter.with_replay(options.clone()),
            None => adapter.without_replay(),
        }))
    };
    let mut control = WasmAdapter::new(Arc::clone(&loaded), "control", Some(Arc::clone(&observer)));
    let mut file_seeds;
    let seeds: &mut dyn SeedSource = match items {
        Some(items) => {
            let compiler: Option<&mut dyn SeedSource> = protocols.variants.then_some(&mut control);
            file_seeds = FileSeeds::new(items, args.epochs, compiler);
            &mut file_seeds
        }
        None => &mut control,
    };

    let quiet = args.json || closing == Closing::Silent;
    let mut progress = Progress::new(args.epochs, quiet, &args.out);
    progress.distributed = dispatcher.clone();
    let side_writes = {
        let call_log = Arc::clone(&call_log);
        let points = replay.as_ref().and_then(|options| options.store.clone());
        move || lost_writes(&call_log, points.as_deref())
    };
    let snapshot_totals = Arc::new(OnceLock::new());
    let mut run_dir = RunDir::new(&args.out)
        .with_summary_host(&SummaryHost {
            adapter: SummaryAdapter {
                path: loaded.info.path.clone(),
                sha256: loaded.info.sha256.clone(),
                size_bytes: loaded.info.size_bytes,
                protocols: protocol_names(&loaded.info),
            },
            host_version: env!("CARGO_PKG_VERSION").to_owned(),
        })
        .with_side_write_check(SideWriteCheck(Box::new(side_writes.clone())))
        .with_summary_late(late_summary(
            replay_summary(
                replay.as_ref(),
                snapshots.is_some(),
                &args.out,
                Arc::clone(&snapshot_totals),
            ),
            dispatcher.clone(),
            Arc::clone(&progress.errors),
        ));
    let observe = |event: &ArmEvent<'_>| progress.on_event(event);
    let result = run_arm(
        &arm,
        protocols,
        seeds,
        &factory,
        &mut run_dir,
        ArmOptions {
            catalog: catalog.as_mut(),
            observer: &observe,
            ..ArmOptions::default()
        },
    );
    progress.finish();
    // A write that failed after the last check (there is none in a run
    // that finished) still fails the run.
    let result = result.and_then(|summary| {
        side_writes()
            .map(|()| summary)
            .map_err(|lost| ArmError::io("writing the run directory", std::io::Error::other(lost)))
    });
    let summary = match result {
        Ok(summary) => {
            // Its files are written: what it left on the server can go.
            if let Some(dispatcher) = &dispatcher {
                dispatcher.finish();
            }
            summary
        }
        Err(error) => {
            let error = arm_error(error);
            if matches!(error, CliError::Input(_)) {
                return Err(error);
            }
            let failure = session.record_failure(&error.to_string());
            if args.json {
                say(&sorted_pretty_json(&RunFailed {
                    failure: &failure,
                    out: &args.out,
                    errors: &progress.errors.counts(),
                }));
            }
            return Err(CliError::Failed(format!(
                "{error}\nwhat the finished epochs wrote is kept: once the cause is fixed, \
                 continue with the same command and --resume"
            )));
        }
    };
    if closing == Closing::Silent {
        return Ok(());
    }
    if args.json {
        say(&sorted_pretty_json(&RunFinished {
            summary: &summary,
            errors: &progress.errors.counts(),
            adapter: RunAdapter {
                path: &loaded.info.path,
                sha256: &loaded.info.sha256,
                protocols: &loaded.info.protocols,
            },
        }));
    } else {
        print_summary(
            &summary,
            &loaded.info,
            &progress.errors.counts(),
            progress.errors.charged_minutes(),
            started.elapsed().as_secs_f64(),
        );
        if let Some(options) = &replay {
            print_replay_summary(&options.metrics, args.resume);
        }
        if let Some(totals) = snapshot_totals.get() {
            print_snapshot_summary(totals);
        }
        if let Some(dispatcher) = &dispatcher {
            say(&run_distributed::summary_line(dispatcher));
        }
        say(&report_line(&args.out));
    }
    Ok(())
}

/// The closing line naming the command that draws the run's report.
fn report_line(out: &std::path::Path) -> String {
    let shown = out.display().to_string();
    let quoted = if shown
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@,=".contains(c))
    {
        shown
    } else {
        format!("'{}'", shown.replace('\'', r"'\''"))
    };
    format!("  report     sandloop report {quoted}")
}

/// The flags' own rules, before anything is loaded: counts at least 1, a
/// positive budget, a known fidelity, an `--out` fit for a fresh run or a
/// resume, and `--fork` only where children are forked. Returns the
/// replay's minimum fidelity.
fn check_run_args(args: &RunArgs) -> Result<Fidelity, CliError> {
    if args.workers == 0 {
        return Err(CliError::Input("--workers must be at least 1".into()));
    }
    if args.epochs == 0 {
        return Err(CliError::Input("--epochs must be at least 1".into()));
    }
    if let Some(budget) = args.budget_minutes
        && !(budget.is_finite() && budget > 0.0)
    {
        return Err(CliError::Input(
            "--budget-minutes must be a positive number".into(),
        ));
    }
    let replay_minimum = crate::replay::fidelity::parse_minimum(&args.replay_min_fidelity)
        .map_err(|error| CliError::Input(format!("--replay-min-fidelity: {error}")))?;
    check_not_in_use(&args.out).map_err(session_error)?;
    check_out_dir(&args.out, args.resume).map_err(session_error)?;
    if args.fork != ForkArg::Auto && (args.no_replay || args.child_workers == 0) {
        let fork = args.fork.as_str();
        return Err(CliError::Input(format!(
            "--fork {fork} forks children of replay points: it needs replay (no --no-replay) and --child-workers 1 or more"
        )));
    }
    Ok(replay_minimum)
}

/// The component, loaded into a sandbox sized for the run's lanes and
/// children and shown to start under its limits, with the seed items of
/// `--items` and the variant catalog of `--variants`; each refused (exit 2)
/// when the component cannot use it.
///
/// A regular items file is read on its own thread while the component
/// loads and starts (the two are independent, and each keeps a core busy
/// for milliseconds). The errors keep their order: the component's first,
/// then the items file's. A pipe is read after the component, as before,
/// so a component that cannot load is reported without waiting on a
/// writer.
#[allow(clippy::type_complexity)]
fn load_inputs(
    args: &RunArgs,
) -> Result<
    (
        Arc<LoadedAdapter>,
        Option<StoredItems>,
        Option<VariantCatalog>,
    ),
    CliError,
> {
    // Every input is checked before anything is written.
    // Each lane may hold a chunk of forked children besides its own
    // instance.
    let child_slots = if args.child_workers > 0 {
        crate::sandbox::adapter::MAX_CHILDREN_PER_FORK as u32
    } else {
        0
    };
    let slots = (args.workers as u32 + 2) * 2 + args.workers as u32 * child_slots;
    let mut config = sandbox_config(&args.sandbox, slots)?;
    // Snapshot forks compile a component per replay point whose functions
    // are the instrumented component's: keep them for reuse.
    config.incremental_compilation =
        args.fork != ForkArg::State && !args.no_replay && args.child_workers > 0;
    let start_component = || -> Result<Arc<LoadedAdapter>, CliError> {
        let (engine, config) = open_sandbox(config)?;
        let cached = config.cache_dir.is_some();
        let loaded = Arc::new(while_compiling(
            &args.adapter,
            "NAME",
            cached,
            args.json,
            || load(&args.adapter, engine, config),
        )?);
        // A component that cannot start under these limits would fail every
        // item the same way: say so once, before anything is written.
        WasmAdapter::check_starts(Arc::clone(&loaded)).map_err(|error| {
            CliError::Failed(format!(
                "{} cannot be instantiated under these limits ({}): {}; nothing was run",
                args.adapter.display(),
                error.error_type.as_str(),
                error.message
            ))
        })?;
        Ok(loaded)
    };
    let read_items = || {
        args.items
            .as_deref()
            .map(load_items_file)
            .transpose()
            .map_err(|error| CliError::Input(error.to_string()))
    };
    let items_are_a_file = args
        .items
        .as_deref()
        .is_some_and(|path| std::fs::metadata(path).is_ok_and(|meta| meta.is_file()));
    let (loaded, items) = std::thread::scope(|scope| {
        let reader = items_are_a_file
            .then(|| {
                std::thread::Builder::new()
                    .name("sandloop-items".into())
                    .spawn_scoped(scope, read_items)
                    .ok()
            })
            .flatten();
        let loaded = start_component();
        let items = match reader {
            Some(reader) => reader
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // A pipe (or no thread to be had): read after the component,
            // and not at all when it failed.
            None if loaded.is_ok() => read_items(),
            None => Ok(None),
        };
        Ok::<_, CliError>((loaded?, items?))
    })?;
    let protocols = loaded.protocols;
    if items.is_none() && !protocols.seeds {
        return Err(CliError::Input(format!(
            "{} does not export `seeds`; give the seed items with --items FILE.jsonl",
            args.adapter.display()
        )));
    }
    let catalog = match &args.variants {
        None => None,
        Some(path) => {
            if !protocols.variants {
                return Err(CliError::Input(format!(
                    "--variants given, but {} does not export `variants` to compile them",
                    args.adapter.display()
                )));
            }
            Some(VariantCatalog::open(path).map_err(|error| CliError::Input(error_chain(&error)))?)
        }
    };
    Ok((loaded, items, catalog))
}

/// What `summary.json` gains when it is written, after the last epoch: the
/// replay metric ledger as `replay` (reference
/// `ReplayPointRegistry.metrics`) and, when children were snapshot-forked,
/// the run's snapshot totals as `snapshots`, read once from
/// `replay-points.jsonl` into `totals` (which the closing lines print).
fn replay_summary(
    replay: Option<&ReplayOptions>,
    snapshotting: bool,
    out: &Path,
    totals: Arc<OnceLock<SnapshotTotals>>,
) -> impl Fn() -> serde_json::Map<String, Value> + Send + 'static {
    let metrics = replay.map(|options| Arc::clone(&options.metrics));
    let out = out.to_path_buf();
    move || {
        let mut late = serde_json::Map::new();
        if let Some(metrics) = &metrics {
            late.insert("replay".into(), Value::Object(metrics.snapshot()));
            if snapshotting {
                let totals = totals.get_or_init(|| SnapshotTotals::of_run(&out));
                late.insert(
                    "snapshots".into(),
                    serde_json::to_value(totals).expect("totals serialise"),
                );
            }
        }
        late
    }
}

/// The fields `summary.json` gains after the last epoch: `replay`'s, the
/// run's `error_count` and `errors_by_type`, and the `distributed` block
/// of a `--nats` run.
fn late_summary(
    replay: impl Fn() -> serde_json::Map<String, Value> + Send + 'static,
    dispatcher: Option<Arc<Dispatcher>>,
    errors: Arc<ErrorTally>,
) -> impl Fn() -> serde_json::Map<String, Value> + Send + 'static {
    move || {
        let mut late = replay();
        if let Value::Object(counts) =
            serde_json::to_value(errors.counts()).expect("the counts serialise")
        {
            late.extend(counts);
        }
        if let Some(dispatcher) = &dispatcher {
            late.insert(
                "distributed".into(),
                serde_json::to_value(dispatcher.summary()).expect("the block serialises"),
            );
        }
        late
    }
}

/// What the run's side writers (adapter output, traces, replay points)
/// failed to write, if anything: the first few errors of each.
fn lost_writes(call_log: &CallLog, points: Option<&ReplayStore>) -> Result<(), String> {
    let mut lost = Vec::new();
    for error in call_log.errors() {
        lost.push(format!("adapter output or traces: {error}"));
    }
    for error in points.map(ReplayStore::errors).unwrap_or_default() {
        lost.push(format!("a replay point: {error}"));
    }
    if lost.is_empty() {
        return Ok(());
    }
    lost.truncate(4);
    Err(format!("could not write {}", lost.join("; ")))
}

fn print_snapshot_summary(totals: &SnapshotTotals) {
    let mut line = format!(
        "  snapshots  {} taken ({:.1} MB, {:.2} s to snapshot, {:.2} s to compile; {:.1} MB kept durable)",
        totals.taken,
        totals.bytes as f64 / 1e6,
        totals.snapshot_ms / 1000.0,
        totals.compile_ms / 1000.0,
        totals.durable_bytes as f64 / 1e6,
    );
    if totals.failed > 0 {
        line.push_str(&format!(
            ", {} failed (their groups forked by state, ran from the point in the parent, or \
             prepared their prefix again when the parent was lost; see snapshot_error in {}): {}",
            totals.failed,
            crate::replay::durable::POINTS_FILE,
            totals.first_error.as_deref().unwrap_or("")
        ));
    }
    say(&line);
}

fn print_replay_summary(metrics: &ReplayMetricLedger, resumed: bool) {
    use ReplayCount::*;
    let snapshot = metrics.snapshot();
    let n = |field: ReplayCount| metrics.count(field);
    let minutes = |field: ReplayMinutes| {
        snapshot
            .get(field.as_str())
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    say(&format!(
        "  replay     {} captured ({} failed), {} replayed ({} verified equivalent, {} failed), \
         {} children ({} failed; {} groups failed as a whole), {} quarantined; capture {:.4} min, \
         restore {:.4} min{}",
        count(n(CaptureSuccess), "point", "points"),
        n(CaptureFailure),
        count(n(ReplayAttempt), "suffix", "suffixes"),
        n(EquivalenceVerified),
        n(ReplayFailure),
        n(ChildSessionForkAttempt),
        n(ChildCandidateFailure),
        n(ChildGroupFailure),
        n(ReplayPointQuarantine),
        minutes(ReplayMinutes::Capture),
        minutes(ReplayMinutes::Restore),
        if resumed { " (this invocation)" } else { "" },
    ));
}

/// The arm configuration the flags describe.
fn arm_config(args: &RunArgs, sha256: &str) -> ArmConfig {
    ArmConfig {
        arm_key: args.arm.clone(),
        adapter_type: format!("component:sha256:{sha256}"),
        worker_count: args.workers,
        max_epochs: args.epochs,
        budget_minutes: args.budget_minutes.unwrap_or(f64::INFINITY),
        frontier_max_lanes: args.variant_lanes,
        checkpoint: true,
        resume: args.resume,
        item_failure_policy: args.failure_policy.into(),
        ..ArmConfig::default()
    }
}

/// On Ctrl-C, say how to continue, withdraw the units a distributed run
/// left queued, then stop (exit 130). What the interrupted epoch wrote is
/// cut back when the run resumes.
fn interrupt_message(out: &Path, dispatcher: Option<&Arc<crate::distributed::Dispatcher>>) {
    let out = out.display().to_string();
    // Weak: the run's own stop drops the dispatcher, which withdraws then.
    let dispatcher = dispatcher.map(Arc::downgrade);
    super::interrupt::on_interrupt(move || {
        super::complain(
            "\ninterrupted: ",
            &format!(
                "{out} keeps every finished epoch; continue with the same command and --resume"
            ),
        );
        if let Some(dispatcher) = dispatcher.as_ref().and_then(std::sync::Weak::upgrade) {
            dispatcher.withdraw_queued();
        }
        std::process::exit(130);
    });
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The component's protocol names, as the run files record them.
fn protocol_names(info: &crate::sandbox::ComponentInfo) -> Vec<String> {
    info.protocols
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

/// Record this invocation in `manifest.json`: host version, adapter
/// identity, every option (a resume appends its entry to those the manifest
/// holds) and the grants' identities ([`RunSession::record_invocation`]).
fn record_invocation(
    session: &RunSession,
    args: &RunArgs,
    info: &crate::sandbox::ComponentInfo,
    dirs: &[DirGrant],
) -> Result<(), CliError> {
    let invocation = Invocation {
        resume: args.resume,
        cwd: std::env::current_dir().ok(),
        started_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        options: invocation_options(args).to_map(),
    };
    let host = HostInfo {
        name: "sandloop".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    let wit = format!(
        "{}@{}",
        crate::sandbox::component::WIT_PACKAGE,
        crate::sandbox::component::WIT_VERSION
    );
    let adapter = ManifestAdapter {
        path: info.path.clone(),
        sha256: info.sha256.clone(),
        size_bytes: info.size_bytes,
        protocols: protocol_names(info),
        exports: info.exports.clone(),
    };
    session
        .record_invocation(host, wit, adapter, invocation, dirs)
        .map_err(session_error)
}

/// A run directory that cannot be used: refused (exit 2) or unwritable
/// (exit 1).
fn session_error(error: SessionError) -> CliError {
    match error {
        SessionError::Refused(message) => CliError::Input(message),
        SessionError::Io(message) => CliError::Failed(message),
    }
}

/// Every flag of this invocation by its long name ([`Invocation::options`]).
fn invocation_options(args: &RunArgs) -> RunOptions {
    RunOptions {
        adapter: args.adapter.clone(),
        out: args.out.clone(),
        items: args.items.clone(),
        variants: args.variants.clone(),
        variant_lanes: args.variant_lanes,
        epochs: args.epochs,
        budget_minutes: args.budget_minutes,
        workers: args.workers,
        failure_policy: args.failure_policy.into(),
        arm: args.arm.clone(),
        max_memory_mib: args.sandbox.max_memory,
        call_timeout_secs: args.sandbox.call_timeout,
        fuel: args.sandbox.fuel,
        dirs: args.sandbox.dirs.clone(),
        env: args.sandbox.env.clone(),
        max_output_bytes: args.sandbox.max_output,
        max_open_files: args.sandbox.max_open_files,
        cache: !args.sandbox.no_cache,
        no_replay: args.no_replay,
        replay_min_fidelity: args.replay_min_fidelity.clone(),
        child_workers: args.child_workers,
        fork: args.fork.as_str(),
        // Recorded only when given, so a local run's options stay as they
        // always were.
        nats: args.nats.as_ref().map(|url| NatsOptions {
            nats: crate::distributed::transport::shown_url(url),
            nats_creds: args.nats_creds.clone(),
            nats_wait_secs: args.nats_wait,
        }),
    }
}

/// A rate for the spinner: `1234 records/s`, `3.5 records/s` below 10,
/// `0.12 records/s` below 1; never the raw float.
fn records_per_sec(rate: f64) -> String {
    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
    if rate >= 10.0 {
        format!("{rate:.0} records/s")
    } else if rate >= 1.0 {
        format!("{rate:.1} records/s")
    } else {
        format!("{rate:.2} records/s")
    }
}

/// `1 record`, `2 records`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn print_summary(
    summary: &ArmSummary,
    info: &crate::sandbox::ComponentInfo,
    errors: &ErrorCounts,
    charged_minutes: f64,
    seconds: f64,
) {
    let metrics = &summary.execution_metrics;
    let compile = info.compile_ms / 1000.0;
    let timing = if compile >= 0.1 {
        format!("{seconds:.2} s ({compile:.2} s loading the component)")
    } else {
        format!("{seconds:.2} s")
    };
    say(&format!(
        "sandloop run: {} in {}, stop: {}, {timing}",
        count(summary.record_count, "record", "records"),
        count(summary.epoch_count as u64, "epoch", "epochs"),
        summary.stop_reason.as_str(),
    ));
    say(&format!(
        "  adapter    {} (sha256 {}…), protocols: {}",
        info.path,
        &info.sha256[..12],
        info.protocols.join(", ")
    ));
    say(&format!(
        "  value      raw {:.1}, novel {:.1}, {}, {}",
        summary.raw_value_total,
        summary.novel_value_total,
        count(
            summary.variant_records_total,
            "variant record",
            "variant records"
        ),
        count(summary.coverage_count as u64, "family", "families"),
    ));
    let charge = if errors.error_count > 0 {
        format!(
            "; {charged_minutes:.4} of it the error charge of the failed calls (at least 0.05 min each)"
        )
    } else {
        String::new()
    };
    say(&format!(
        "  compute    {:.4} min effective ({:.4} shared prefix, {:.4} suffix, {:.4} standalone{charge})",
        metrics.effective_compute_minutes,
        metrics.shared_prefix_compute_minutes,
        metrics.episode_suffix_compute_minutes,
        metrics.standalone_compute_minutes
    ));
    say(&format!(
        "  avoided    {:.4} min of prefix recomputation ({:.4} by successful suffixes) over {}",
        metrics.avoided_recompute_minutes,
        metrics.successful_avoided_recompute_minutes,
        count(metrics.episode_group_count, "group", "groups"),
    ));
    if errors.error_count > 0 {
        let by_type: Vec<String> = errors
            .errors_by_type
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        say(&format!(
            "  errors     {}: {}",
            count(errors.error_count, "failure", "failures"),
            by_type.join(", ")
        ));
    } else {
        say("  errors     none");
    }
}

/// Progress on stderr: a spinner on a terminal (epoch, records, rate,
/// errors, time left for `--epochs`), one line per finished epoch
/// otherwise; nothing with `--json`. Counts the run's failures by type.
struct Progress {
    bar: Option<ProgressBar>,
    /// One line per epoch on a stderr that is not a terminal.
    epoch_lines: bool,
    max_epochs: u32,
    started: Instant,
    /// Epochs finished by this invocation, and its first epoch.
    epochs_done: Mutex<(u32, u32)>,
    /// When the current epoch started (`epochs.jsonl` keeps its wall time
    /// to 0.001 min, too coarse for a line per epoch).
    epoch_started: Mutex<Instant>,
    errors: Arc<ErrorTally>,
    /// `records.jsonl`, whose kept records a resumed run counts.
    records_file: std::path::PathBuf,
    warned: Mutex<std::collections::BTreeSet<String>>,
    /// A distributed run's dispatcher: the message then shows its units.
    distributed: Option<Arc<Dispatcher>>,
    /// The current epoch's units, and how many are done.
    units: Mutex<(usize, usize)>,
}

impl Progress {
    fn new(max_epochs: u32, quiet: bool, out: &Path) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} · {pos} records · {rate} · {elapsed} · {msg}",
                )
                .expect("static template")
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                        let _ = out.write_str(&records_per_sec(state.per_sec()));
                    },
                ),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Self {
            bar,
            epoch_lines: !quiet && !terminal,
            max_epochs,
            started: Instant::now(),
            epochs_done: Mutex::new((0, 0)),
            epoch_started: Mutex::new(Instant::now()),
            errors: Arc::new(ErrorTally::default()),
            records_file: out.join(RECORDS_FILE),
            warned: Mutex::new(Default::default()),
            distributed: None,
            units: Mutex::new((0, 0)),
        }
    }

    /// `N errors`, and the time left if the run goes on to `--epochs`
    /// at this invocation's pace so far.
    fn status(&self, epoch: u32) -> String {
        let errors = self.errors.counts().error_count;
        let mut status = count(errors, "error", "errors");
        let (done, _) = *self.epochs_done.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.max_epochs.saturating_sub(epoch.saturating_sub(1));
        if done > 0 && left > 0 {
            let per_epoch = self.started.elapsed().as_secs_f64() / f64::from(done);
            status.push_str(&format!(
                " · at most ~{} left",
                short_duration(per_epoch * f64::from(left))
            ));
        }
        status
    }

    fn on_event(&self, event: &ArmEvent<'_>) {
        match event {
            ArmEvent::Started {
                resumed: true,
                restored_record_count,
                ..
            } => {
                if let Err(error) = self
                    .errors
                    .add_records_file(&self.records_file, *restored_record_count)
                {
                    super::complain(
                        "warning: ",
                        &format!(
                            "could not count the failures among the kept records of {}: {error}",
                            self.records_file.display()
                        ),
                    );
                }
            }
            ArmEvent::UnitDone {
                records, branch_id, ..
            } => {
                self.errors.add_records(records);
                if let Some(bar) = &self.bar {
                    bar.inc(records.len() as u64);
                    if let Some(dispatcher) = &self.distributed
                        && *branch_id != crate::harness::arm::CONTROL_BRANCH_ID
                    {
                        let mut units = self.units.lock().unwrap_or_else(|p| p.into_inner());
                        units.1 += 1;
                        let remaining = units.0.saturating_sub(units.1);
                        bar.set_message(run_distributed::progress_message(dispatcher, remaining));
                    }
                }
            }
            ArmEvent::EpochStarted {
                epoch, unit_count, ..
            } => {
                {
                    let mut done = self.epochs_done.lock().unwrap_or_else(|p| p.into_inner());
                    if done.1 == 0 {
                        done.1 = *epoch;
                    }
                }
                *self.epoch_started.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                if let Some(bar) = &self.bar {
                    bar.set_prefix(format!("epoch {epoch}/{}", self.max_epochs));
                    *self.units.lock().unwrap_or_else(|p| p.into_inner()) = (*unit_count, 0);
                    bar.set_message(match &self.distributed {
                        Some(dispatcher) => {
                            run_distributed::progress_message(dispatcher, *unit_count)
                        }
                        None => format!("{unit_count} unit(s) queued · {}", self.status(*epoch)),
                    });
                }
            }
            ArmEvent::EpochDone { summary, anytime } => {
                self.epochs_done.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
                if self.epoch_lines {
                    let seconds = self
                        .epoch_started
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .elapsed()
                        .as_secs_f64();
                    let rate = if seconds > 0.0 {
                        format!("{:.0} records/s", summary.record_count as f64 / seconds)
                    } else {
                        "-".into()
                    };
                    eprintln!(
                        "epoch {}/{}: {} in {seconds:.2} s ({rate}), novel value {:.1} (run {:.1}), {} in the run",
                        summary.epoch,
                        self.max_epochs,
                        count(summary.record_count, "record", "records"),
                        summary.novel_value,
                        anytime.novel_value_cum,
                        count(self.errors.counts().error_count, "error", "errors"),
                    );
                }
            }
            ArmEvent::Warning { message } => {
                // Say each distinct warning once (a broken catalog would
                // otherwise repeat it every epoch).
                let mut seen = self.warned.lock().unwrap_or_else(|p| p.into_inner());
                if seen.insert(message.clone()) {
                    match &self.bar {
                        Some(bar) => bar.println(format!(
                            "warning: {}",
                            sandloop_core::terminal::for_terminal(message)
                        )),
                        None => super::complain("warning: ", message),
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `45 s`, `3 min`, `2.5 h`.
fn short_duration(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 5400.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// The instrumented component children are snapshot-forked from, when
/// `--fork` (or `auto`, for an adapter that exports `replay` but not
/// `replay-children`) asks for snapshot forks; `None` for state transfer or
/// no children at all. Errors (exit 2) when `--fork` asks for what the
/// adapter cannot do, or wizer refuses the component.
fn snapshot_forks(
    args: &RunArgs,
    loaded: &LoadedAdapter,
) -> Result<Option<Arc<Instrumented>>, CliError> {
    if args.fork_kind(&loaded.protocols).map_err(CliError::Input)? != Some(ForkKind::Snapshot) {
        return Ok(None);
    }
    let cached = loaded.config().cache_dir.is_some();
    while_compiling(
        &args.adapter,
        "NAME for snapshot forks",
        cached,
        args.json,
        || Instrumented::load(loaded),
    )
    .map(|instrumented| Some(Arc::new(instrumented)))
    .map_err(|error| CliError::Input(format!("--fork snapshot: {error}")))
}

/// The `--env` names, each checked (exit 2 for one that is not a
/// variable's name) and given once; `unset` warns of each not set here.
pub(super) fn checked_env_names(
    names: &[String],
    unset: impl FnMut(&str),
) -> Result<Vec<String>, CliError> {
    crate::sandbox::config::env_names(names, unset).map_err(|name| {
        CliError::Input(format!(
            "--env {name:?}: give the NAME of a host variable to pass through, not NAME=VALUE"
        ))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_spinner_rate_is_rounded_to_what_a_reader_can_use() {
        assert_eq!(records_per_sec(12345.678), "12346 records/s");
        assert_eq!(records_per_sec(3.456), "3.5 records/s");
        assert_eq!(records_per_sec(0.1234), "0.12 records/s");
        assert_eq!(records_per_sec(f64::NAN), "0.00 records/s");
    }

    #[test]
    fn the_closing_line_names_the_report_command_quoting_odd_paths() {
        assert_eq!(
            report_line(std::path::Path::new("runs/markdown-1")),
            "  report     sandloop report runs/markdown-1"
        );
        assert_eq!(
            report_line(std::path::Path::new("my runs/it's")),
            r"  report     sandloop report 'my runs/it'\''s'"
        );
    }
    use crate::cli::args::{Cli, Command};

    /// The first invocation of `harness/golden/manifest.json` in
    /// sandloop-core, written by `sandloop run` before the manifest was
    /// typed.
    const GOLDEN_MANIFEST: &str =
        include_str!("../../../crates/core/src/harness/golden/manifest.json");

    #[test]
    fn options_are_recorded_as_the_host_always_recorded_them() {
        let golden: crate::harness::RunManifest = serde_json::from_str(GOLDEN_MANIFEST).unwrap();
        let cli = Cli::try_parse_from([
            "sandloop",
            "run",
            "--adapter",
            "/work/wt-typed/target/wasm32-wasip2/release/markdown_explorer.wasm",
            "--dir",
            "/tmp/gold/docs::/docs:ro",
            "--variants",
            "/work/wt-typed/examples/markdown-explorer/catalog.json",
            "--epochs",
            "2",
            "--workers",
            "2",
            "--out",
            "run",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("a run command");
        };
        assert_eq!(
            invocation_options(&args).to_map(),
            golden.invocations[0].options,
            "every flag, by the same name and in the same JSON form"
        );
    }
}
