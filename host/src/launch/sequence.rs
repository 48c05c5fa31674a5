//! [`run`]: the run itself, from a checked request to its written
//! summary.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::inputs::{Inputs, load_inputs, snapshot_forks};
use super::remote::{self, Lane};
use super::{LaunchError, OpenedRun, RunObserver, RunOutcome, RunRequest, RunStopped, error_chain};
use crate::distributed::Dispatcher;
use crate::episode::adapter::{Protocols, SeedSource};
use crate::harness::arm::{ArmEvent, ArmObserver, ArmOptions, run_arm};
use crate::harness::error_tally::ErrorTally;
use crate::harness::items_file::FileSeeds;
use crate::harness::manifest::{HostInfo, Invocation, ManifestAdapter};
use crate::harness::queue::branch_id;
use crate::harness::run_dir::SideWriteCheck;
use crate::harness::run_files::RECORDS_FILE;
use crate::harness::run_session::{RunSession, check_resume, unfinished_record_count};
use crate::harness::summary::{SummaryAdapter, SummaryHost};
use crate::harness::{ArmConfig, ArmError, RunDir, runtime_signature};
use crate::replay::ReplayMetricLedger;
use crate::replay::durable::ReplayStore;
use crate::replay::snapshot_totals::SnapshotTotals;
use crate::sandbox::snapshot::Instrumented;
use crate::sandbox::{
    CallLog, CallObserver, ComponentInfo, DirGrant, LoadedAdapter, ReplayOptions, WasmAdapter,
};

/// Make the run `request` asks for, telling `observer` how it goes.
///
/// Every input is checked before the run directory is touched; a resume
/// is refused before anything is written when the run cannot continue.
/// On success `summary.json` is written and a distributed run's server
/// state is removed.
///
/// # Errors
/// [`LaunchError::Refused`] for bad input, [`LaunchError::Failed`] when the
/// run cannot start, [`LaunchError::Stopped`] when it started and failed
/// (the failure is recorded in the run directory first).
pub fn run(request: &RunRequest, observer: &dyn RunObserver) -> Result<RunOutcome, LaunchError> {
    request.check()?;
    let Inputs {
        loaded,
        items,
        mut catalog,
    } = load_inputs(request, observer)?;
    let protocols = loaded.protocols;
    let fork = request.fork_kind(&protocols)?;
    remote::check_unsupported(request, protocols, fork)?;
    let out = &request.options.out;
    let snapshots = snapshot_forks(request, &loaded, fork, observer)?;
    let mut arm = request.arm_config(&loaded.info.sha256);
    let resumed_at = resume_point(request, &arm, &loaded, catalog.is_some(), observer)?;

    let call_log = Arc::new(CallLog::new(out));
    // A distributed run finds its workers before anything is written.
    let dispatcher = remote::open_dispatcher(request, &loaded, &call_log)?;
    let session = RunSession::open(out, request.resume, resumed_at)?;
    arm.resume = session.resumes();
    record_invocation(&session, request, &loaded.info, &loaded.config().dirs)?;
    let errors = Arc::new(ErrorTally::default());
    observer.opened(&OpenedRun {
        out,
        dispatcher: dispatcher.as_ref(),
        errors: &errors,
    });

    // The lanes: an instance each here (of the instrumented component when
    // children are snapshot-forked), or the workers behind the dispatcher.
    let call_observer: Arc<dyn CallObserver> = call_log.clone();
    let replay = replay_options(request, protocols, snapshots.clone());
    let remote_replay = replay.as_ref().and_then(remote::remote_replay);
    let lanes_run = snapshots.as_ref().map_or_else(
        || Arc::clone(&loaded),
        |instrumented| Arc::clone(instrumented.loaded()),
    );
    let factory = |lane: usize| {
        if let Some(dispatcher) = &dispatcher {
            return Ok(Lane::Remote(dispatcher.lane(remote_replay.clone())));
        }
        let adapter = WasmAdapter::new(
            Arc::clone(&lanes_run),
            branch_id(lane),
            Some(Arc::clone(&call_observer)),
        );
        Ok(Lane::Local(match &replay {
            Some(options) => adapter.with_replay(options.clone()),
            None => adapter.without_replay(),
        }))
    };
    // The seeds: the items file's (variants compiled by the component when
    // it exports `variants`), or the component's own `seeds`.
    let mut control = WasmAdapter::new(
        Arc::clone(&loaded),
        "control",
        Some(Arc::clone(&call_observer)),
    );
    let mut file_seeds;
    let seeds: &mut dyn SeedSource = match items {
        Some(items) => {
            let compiler: Option<&mut dyn SeedSource> = protocols.variants.then_some(&mut control);
            file_seeds = FileSeeds::new(items, request.options.epochs, compiler);
            &mut file_seeds
        }
        None => &mut control,
    };

    let side_writes = {
        let call_log = Arc::clone(&call_log);
        let points = replay.as_ref().and_then(|options| options.store.clone());
        move || lost_writes(&call_log, points.as_deref())
    };
    let snapshot_totals = Arc::new(OnceLock::new());
    let mut run_dir = RunDir::new(out)
        .with_summary_host(&summary_host(&loaded.info))
        .with_side_write_check(SideWriteCheck(Box::new(side_writes.clone())))
        .with_summary_late(late_summary(
            replay_summary(
                replay.as_ref(),
                snapshots.is_some(),
                out,
                Arc::clone(&snapshot_totals),
            ),
            dispatcher.clone(),
            Arc::clone(&errors),
        ));
    let result = run_arm(
        &arm,
        protocols,
        seeds,
        &factory,
        &mut run_dir,
        ArmOptions {
            catalog: catalog.as_mut(),
            observer: &Tallying {
                observer,
                errors: &errors,
                records_file: out.join(RECORDS_FILE),
            },
            ..ArmOptions::default()
        },
    );
    // A write that failed after the last check (there is none in a run
    // that finished) still fails the run.
    let summary = result
        .and_then(|summary| {
            side_writes().map(|()| summary).map_err(|lost| {
                ArmError::io("writing the run directory", std::io::Error::other(lost))
            })
        })
        .map_err(|error| stopped(&session, error, &errors))?;
    // Its files are written: what it left on the server can go.
    if let Some(dispatcher) = &dispatcher {
        dispatcher.finish();
    }
    Ok(RunOutcome {
        summary,
        adapter: loaded.info.clone(),
        errors: errors.counts(),
        charged_minutes: errors.charged_minutes(),
        replay: replay.map(|options| options.metrics),
        snapshots: snapshot_totals.get().cloned(),
        distributed: dispatcher.map(|dispatcher| dispatcher.summary()),
    })
}

/// The epoch a `--resume` continues after (`None`: a fresh run, or a
/// resume of a run that never finished an epoch, which starts over and
/// says so). An incompatible resume is refused before anything is written.
fn resume_point(
    request: &RunRequest,
    arm: &ArmConfig,
    loaded: &LoadedAdapter,
    catalog: bool,
    observer: &dyn RunObserver,
) -> Result<Option<u32>, LaunchError> {
    if !request.resume {
        return Ok(None);
    }
    let out = &request.options.out;
    let signature = runtime_signature(arm, loaded.protocols, catalog);
    let resumed_at = check_resume(out, &signature, &loaded.config().dirs)?;
    if resumed_at.is_none() {
        let discarded = unfinished_record_count(out);
        observer.warning(&format!(
            "{} never finished an epoch (no checkpoint.json): --resume starts it over \
             from epoch 0, discarding the {discarded} record(s) of its unfinished first epoch",
            out.display()
        ));
    }
    Ok(resumed_at)
}

/// The replay of the run's lanes, when the component exports `replay` and
/// the request does not turn it off: a metric ledger, the run's durable
/// store (snapshot points kept within the request's budget), the minimum
/// fidelity, the child workers and the snapshot forks.
fn replay_options(
    request: &RunRequest,
    protocols: Protocols,
    snapshots: Option<Arc<Instrumented>>,
) -> Option<ReplayOptions> {
    (protocols.replay && request.replay_requested()).then(|| ReplayOptions {
        metrics: Arc::new(ReplayMetricLedger::new()),
        store: Some(Arc::new(
            ReplayStore::new(&request.options.out)
                .with_snapshot_budget(request.max_durable_snapshot_bytes),
        )),
        minimum_fidelity: request.replay_minimum,
        child_workers: request.options.child_workers,
        snapshots,
    })
}

/// The arm's observer: counts each unit's failures (and, on a resume, the
/// kept records') into the run's tally, then tells the caller.
struct Tallying<'a> {
    observer: &'a dyn RunObserver,
    errors: &'a ErrorTally,
    /// `records.jsonl`, whose kept records a resumed run counts.
    records_file: PathBuf,
}

impl ArmObserver for Tallying<'_> {
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
                    self.observer.warning(&format!(
                        "could not count the failures among the kept records of {}: {error}",
                        self.records_file.display()
                    ));
                }
            }
            ArmEvent::UnitDone { records, .. } => self.errors.add_records(records),
            _ => {}
        }
        self.observer.event(event);
    }
}

/// The error a run that started stopped on, recorded in its run directory
/// first; a run directory that cannot be continued is bad input, recorded
/// nowhere.
fn stopped(session: &RunSession, error: ArmError, errors: &ErrorTally) -> LaunchError {
    let message = match error {
        ArmError::Config(_)
        | ArmError::RunExists { .. }
        | ArmError::Checkpoint(_)
        | ArmError::Damaged(_) => return LaunchError::Refused(error.to_string()),
        ArmError::Io { .. } => error_chain(&error),
        other => other.to_string(),
    };
    LaunchError::Stopped(Box::new(RunStopped {
        failure: session.record_failure(&message),
        message,
        errors: errors.counts(),
    }))
}

/// What `summary.json` says of the host and the component that ran.
fn summary_host(info: &ComponentInfo) -> SummaryHost {
    SummaryHost {
        adapter: SummaryAdapter {
            path: info.path.clone(),
            sha256: info.sha256.clone(),
            size_bytes: info.size_bytes,
            protocols: protocol_names(info),
        },
        host_version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// What `summary.json` gains when it is written, after the last epoch: the
/// replay metric ledger as `replay` (reference
/// `ReplayPointRegistry.metrics`) and, when children were snapshot-forked,
/// the run's snapshot totals as `snapshots`, read once from
/// `replay-points.jsonl` into `totals` (which the outcome carries).
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

/// The component's protocol names, as the run files record them.
fn protocol_names(info: &ComponentInfo) -> Vec<String> {
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
    request: &RunRequest,
    info: &ComponentInfo,
    dirs: &[DirGrant],
) -> Result<(), LaunchError> {
    let invocation = Invocation {
        resume: request.resume,
        cwd: std::env::current_dir().ok(),
        started_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        options: request.options.to_map(),
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
    Ok(session.record_invocation(host, wit, adapter, invocation, dirs)?)
}
