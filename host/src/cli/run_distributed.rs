//! `sandloop run --nats`: what a distributed run does not support yet
//! (refused before anything is written, exit 2), its dispatcher, and the
//! lanes that send units through it.

use std::sync::Arc;
use std::time::Duration;

use super::CliError;
use super::args::RunArgs;
use crate::distributed::{
    Dispatcher, DistributedSummary, GuestNeed, NatsTarget, RemoteLane, RemoteReplay,
    ReplaySettings, RunSpec,
};
use crate::episode::adapter::{CallContext, Protocols};
use crate::episode::clock::Clock;
use crate::episode::policy::FailurePolicy;
use crate::episode::unit_record::UnitRecord;
use crate::harness::work::{UnitError, UnitRunner, WorkUnit};
use crate::replay::Replaying;
use crate::sandbox::snapshot::ForkKind;
use crate::sandbox::{CallLog, LoadedAdapter, ReplayOptions, SandboxConfig, WasmAdapter};

/// Refuses (exit 2) what `--nats` does not support yet, so that a
/// distributed run never silently differs from a local one: children
/// forked by snapshot (workers fork by state transfer, which needs
/// `replay-children`).
///
/// `--resume` works as locally: the interrupted epoch runs again from the
/// checkpoint (what it wrote is cut back), under a new run id, so results
/// the interrupted coordinator left in the stream are never read.
pub(super) fn check_unsupported(args: &RunArgs, protocols: Protocols) -> Result<(), CliError> {
    if args.nats.is_none() {
        return Ok(());
    }
    let refuse = |what: &str| {
        Err(CliError::Input(format!(
            "--nats does not yet support {what}"
        )))
    };
    if args.fork_kind(&protocols).map_err(CliError::Input)? == Some(ForkKind::Snapshot) {
        let instead = if protocols.replay_children {
            "use --fork state"
        } else {
            "the adapter does not export `replay-children`: use --child-workers 0 to run each \
             suffix in its group's instance, or --no-replay"
        };
        return refuse(&format!(
            "children forked by snapshot (workers fork children by state transfer); {instead}"
        ));
    }
    crate::distributed::transport::check_url(args.nats.as_deref().unwrap_or_default())
        .map_err(CliError::Input)?;
    if args.nats_wait == 0 {
        return Err(CliError::Input(
            "--nats-wait must be at least 1 second".into(),
        ));
    }
    Ok(())
}

/// The dispatcher of a `--nats` run (`None` without it): the component
/// stored by digest, and a worker offering the run's guest paths found.
///
/// # Errors
/// Exit 1 when the server cannot be used or no worker can take the units.
pub(super) fn open_dispatcher(
    args: &RunArgs,
    loaded: &LoadedAdapter,
    call_log: &Arc<CallLog>,
) -> Result<Option<Arc<Dispatcher>>, CliError> {
    let Some(url) = &args.nats else {
        return Ok(None);
    };
    let component = sandloop_core::input_file::read_regular(&args.adapter).map_err(|error| {
        CliError::Failed(format!("reading {}: {error}", args.adapter.display()))
    })?;
    let sha256 = crate::distributed::transport::sha256_hex(&component);
    if sha256 != loaded.info.sha256 {
        return Err(CliError::Failed(format!(
            "{} changed while the run was starting (sha256 {sha256}, loaded {})",
            args.adapter.display(),
            loaded.info.sha256
        )));
    }
    let spec = RunSpec {
        target: NatsTarget {
            url: url.clone(),
            creds: args.nats_creds.clone(),
        },
        component,
        limits: loaded.config().limits.clone(),
        needs: needs(loaded.config()),
        env: loaded.config().env.clone(),
        worker_wait: Duration::from_secs(args.nats_wait),
        protocols: loaded.protocols,
    };
    let dispatcher = Dispatcher::open(spec, Some(Arc::clone(call_log)))
        .map_err(|error| CliError::Failed(format!("{error}; nothing was run")))?;
    let summary = dispatcher.summary();
    tracing::info!(
        "distributed run on {}: {} worker(s) answered ({})",
        summary.nats,
        summary.workers_seen.len(),
        summary.workers_seen.join(", ")
    );
    Ok(Some(dispatcher))
}

/// Where a distributed run's replay points end (the run's store and
/// metrics), and how its workers run them; `None` when the run keeps no
/// store.
pub(super) fn remote_replay(options: &ReplayOptions) -> Option<RemoteReplay> {
    Some(RemoteReplay {
        settings: ReplaySettings {
            minimum_fidelity: options.minimum_fidelity,
            child_workers: options.child_workers,
        },
        store: options.store.clone()?,
        metrics: Arc::clone(&options.metrics),
    })
}

/// The guest paths (and access) of the run's `--dir` grants.
fn needs(config: &SandboxConfig) -> Vec<GuestNeed> {
    config
        .dirs
        .iter()
        .map(|grant| GuestNeed::new(grant.guest.clone(), grant.read_only))
        .collect()
}

/// The progress bar's message during a distributed run's epoch, with
/// `remaining` of its units not yet done: how many wait in the queue, how
/// many are in flight on how many workers, and how many were redelivered.
pub(super) fn progress_message(dispatcher: &Dispatcher, remaining: usize) -> String {
    progress_text(&dispatcher.summary(), dispatcher.in_flight(), remaining)
}

fn progress_text(summary: &DistributedSummary, in_flight: usize, remaining: usize) -> String {
    format!(
        "{} unit(s) queued, {in_flight} in flight on {} worker(s), {} redelivered",
        remaining.saturating_sub(in_flight),
        summary.workers_seen.len(),
        summary.redeliveries
    )
}

/// The closing line of a distributed run: workers and their units.
pub(super) fn summary_line(dispatcher: &Dispatcher) -> String {
    let summary = dispatcher.summary();
    let per_worker: Vec<String> = summary
        .units_per_worker
        .iter()
        .map(|(worker, units)| format!("{worker} {units}"))
        .collect();
    format!(
        "  workers    {} seen on {}; units: {}; {} redelivered, {} duplicate result(s) dropped",
        summary.workers_seen.len(),
        summary.nats,
        if per_worker.is_empty() {
            "none".to_owned()
        } else {
            per_worker.join(", ")
        },
        summary.redeliveries,
        summary.duplicate_results
    )
}

/// A queue lane of `sandloop run`: a sandboxed instance in this process, or
/// (with `--nats`) the workers behind the dispatcher.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per lane thread, held in place for an epoch: boxing the local \
              adapter would only add an indirection to every local call"
)]
pub(super) enum Lane {
    /// Runs units here (with replay points, when the run has them).
    Local(Replaying<WasmAdapter>),
    /// Sends units to the workers.
    Remote(RemoteLane),
}

impl UnitRunner for Lane {
    fn run_unit(
        &mut self,
        unit: &WorkUnit,
        ctx: &CallContext,
        policy: FailurePolicy,
        clock: &dyn Clock,
    ) -> Result<Vec<UnitRecord>, UnitError> {
        match self {
            Lane::Local(adapter) => adapter.run_unit(unit, ctx, policy, clock),
            Lane::Remote(lane) => lane.run_unit(unit, ctx, policy, clock),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_message_counts_queued_in_flight_workers_and_redeliveries() {
        let summary = DistributedSummary {
            workers_seen: vec!["w1".into(), "w2".into()],
            redeliveries: 1,
            ..DistributedSummary::default()
        };
        assert_eq!(
            progress_text(&summary, 2, 5),
            "3 unit(s) queued, 2 in flight on 2 worker(s), 1 redelivered"
        );
        assert_eq!(
            progress_text(&summary, 2, 1),
            "0 unit(s) queued, 2 in flight on 2 worker(s), 1 redelivered"
        );
    }
}
