//! A distributed run (`--nats`): what it does not support yet (refused
//! before anything is written), its dispatcher, and the lanes that send
//! units through it.

use std::sync::Arc;
use std::time::Duration;

use super::{LaunchError, RunRequest};
use crate::distributed::{
    Dispatcher, GuestNeed, NatsTarget, RemoteLane, RemoteReplay, ReplaySettings, RunSpec,
};
use crate::episode::adapter::{CallContext, Protocols};
use crate::episode::clock::Clock;
use crate::episode::policy::FailurePolicy;
use crate::episode::unit_record::UnitRecord;
use crate::harness::work::{UnitError, UnitRunner, WorkUnit};
use crate::replay::Replaying;
use crate::sandbox::snapshot::ForkKind;
use crate::sandbox::{CallLog, LoadedAdapter, ReplayOptions, SandboxConfig, WasmAdapter};

/// Refuses what `--nats` does not support yet, so that a distributed run
/// never silently differs from a local one: children forked by snapshot
/// (workers fork by state transfer, which needs `replay-children`).
///
/// `--resume` works as locally: the interrupted epoch runs again from the
/// checkpoint (what it wrote is cut back), under a new run id, so results
/// the interrupted coordinator left in the stream are never read.
///
/// `fork` is how the run forks its children ([`RunRequest::fork_kind`]).
///
/// # Errors
/// [`LaunchError::Refused`] naming what is not supported, a bad URL or a
/// zero wait.
pub fn check_unsupported(
    request: &RunRequest,
    protocols: Protocols,
    fork: Option<ForkKind>,
) -> Result<(), LaunchError> {
    let Some(nats) = &request.nats else {
        return Ok(());
    };
    if fork == Some(ForkKind::Snapshot) {
        let instead = if protocols.replay_children {
            "use --fork state"
        } else {
            "the adapter does not export `replay-children`: use --child-workers 0 to run each \
             suffix in its group's instance, or --no-replay"
        };
        return Err(LaunchError::Refused(format!(
            "--nats does not yet support children forked by snapshot (workers fork children by \
             state transfer); {instead}"
        )));
    }
    crate::distributed::transport::check_url(&nats.url).map_err(LaunchError::Refused)?;
    if nats.wait_secs == 0 {
        return Err(LaunchError::Refused(
            "--nats-wait must be at least 1 second".into(),
        ));
    }
    Ok(())
}

/// The dispatcher of a `--nats` run (`None` without it): the component
/// stored by digest, and a worker offering the run's guest paths found.
///
/// # Errors
/// [`LaunchError::Failed`] when the server cannot be used, no worker can
/// take the units, or the component changed since it was loaded.
pub fn open_dispatcher(
    request: &RunRequest,
    loaded: &LoadedAdapter,
    call_log: &Arc<CallLog>,
) -> Result<Option<Arc<Dispatcher>>, LaunchError> {
    let Some(nats) = &request.nats else {
        return Ok(None);
    };
    let adapter = &request.options.adapter;
    let component = sandloop_core::input_file::read_regular(adapter)
        .map_err(|error| LaunchError::Failed(format!("reading {}: {error}", adapter.display())))?;
    let sha256 = crate::distributed::transport::sha256_hex(&component);
    if sha256 != loaded.info.sha256 {
        return Err(LaunchError::Failed(format!(
            "{} changed while the run was starting (sha256 {sha256}, loaded {})",
            adapter.display(),
            loaded.info.sha256
        )));
    }
    let spec = RunSpec {
        target: NatsTarget {
            url: nats.url.clone(),
            creds: nats.creds.clone(),
        },
        component,
        limits: loaded.config().limits.clone(),
        needs: needs(loaded.config()),
        env: loaded.config().env.clone(),
        worker_wait: Duration::from_secs(nats.wait_secs),
        protocols: loaded.protocols,
    };
    let dispatcher = Dispatcher::open(spec, Some(Arc::clone(call_log)))
        .map_err(|error| LaunchError::Failed(format!("{error}; nothing was run")))?;
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
pub fn remote_replay(options: &ReplayOptions) -> Option<RemoteReplay> {
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

/// A queue lane of a run: a sandboxed instance in this process, or (with
/// `--nats`) the workers behind the dispatcher.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per lane thread, held in place for an epoch: boxing the local \
              adapter would only add an indirection to every local call"
)]
pub enum Lane {
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
