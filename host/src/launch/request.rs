//! [`RunRequest`]: what a run is asked to do, and the rules it must meet
//! before anything is loaded.

use std::path::PathBuf;

use super::LaunchError;
use crate::episode::adapter::Protocols;
use crate::harness::ArmConfig;
use crate::harness::run_output::RunOptions;
use crate::harness::run_session::{check_not_in_use, check_out_dir};
use crate::replay::Fidelity;
use crate::sandbox::SandboxConfig;
use crate::sandbox::snapshot::{ForkKind, choose_fork};

/// A run to make: its options as `manifest.json` records them, and the
/// typed values the run reads besides. The two describe one run: `options`
/// is what is recorded, the typed fields are what runs (the sandbox, the
/// fidelity, the fork, the server), so a caller builds both from the same
/// settings, as `cli/run.rs` does from the flags.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Every option of the invocation by its flag's long name: the
    /// adapter, `out`, items, variants, epochs, workers, the replay and
    /// sandbox settings. Recorded as given in `manifest.json`.
    pub options: RunOptions,
    /// The sandbox: limits, `--dir` grants, `--env` names and the compile
    /// cache, already checked. [`run`](super::run) sizes its instance pool
    /// for the run's lanes and children.
    pub sandbox: SandboxConfig,
    /// The least fidelity a replay point's restore may show
    /// (`--replay-min-fidelity`, parsed).
    pub replay_minimum: Fidelity,
    /// How children are forked (`--fork`); `None` chooses by the
    /// component's exports ([`choose_fork`]).
    pub fork: Option<ForkKind>,
    /// The bytes of snapshot points kept durable (`--max-durable-snapshots`
    /// in bytes).
    pub max_durable_snapshot_bytes: u64,
    /// Continue the run in `options.out` from its checkpoint (`--resume`).
    pub resume: bool,
    /// Spread the run over `sandloop worker` processes (`--nats`).
    pub nats: Option<NatsRequest>,
}

/// The server of a distributed run.
#[derive(Clone, Debug)]
pub struct NatsRequest {
    /// The server's URL, as given (credentials in it are used, never
    /// recorded).
    pub url: String,
    /// A credentials file (`--nats-creds`).
    pub creds: Option<PathBuf>,
    /// How long to wait for a worker, seconds (`--nats-wait`, at least 1).
    pub wait_secs: u64,
}

impl RunRequest {
    /// Whether replay is asked for (`--no-replay` not given); it is on
    /// when the component also exports `replay`.
    pub fn replay_requested(&self) -> bool {
        !self.options.no_replay
    }

    /// Whether children are forked from replay points: replay asked for
    /// and at least one child worker.
    pub fn children_requested(&self) -> bool {
        self.replay_requested() && self.options.child_workers > 0
    }

    /// How this run forks children, given the component's `protocols`
    /// ([`choose_fork`]); `None`: none are forked.
    ///
    /// # Errors
    /// [`LaunchError::Refused`] when `fork` asks for what the component
    /// cannot give.
    pub fn fork_kind(&self, protocols: &Protocols) -> Result<Option<ForkKind>, LaunchError> {
        choose_fork(
            self.fork,
            protocols,
            self.children_requested(),
            &self.options.adapter,
        )
        .map_err(LaunchError::Refused)
    }

    /// The request's own rules, before anything is loaded: counts at least
    /// 1, a positive budget, an `out` fit for a fresh run or a resume, and
    /// a fork named only where children are forked.
    ///
    /// # Errors
    /// [`LaunchError::Refused`] naming the flag, or
    /// [`LaunchError::Failed`] when `out` cannot be read.
    pub fn check(&self) -> Result<(), LaunchError> {
        let options = &self.options;
        if options.workers == 0 {
            return Err(LaunchError::Refused("--workers must be at least 1".into()));
        }
        if options.epochs == 0 {
            return Err(LaunchError::Refused("--epochs must be at least 1".into()));
        }
        if let Some(budget) = options.budget_minutes
            && !(budget.is_finite() && budget > 0.0)
        {
            return Err(LaunchError::Refused(
                "--budget-minutes must be a positive number".into(),
            ));
        }
        check_not_in_use(&options.out)?;
        check_out_dir(&options.out, self.resume)?;
        if self.fork.is_some() && !self.children_requested() {
            return Err(LaunchError::Refused(format!(
                "--fork {} forks children of replay points: it needs replay (no --no-replay) and --child-workers 1 or more",
                options.fork
            )));
        }
        Ok(())
    }

    /// The arm configuration of this run, for a component of digest
    /// `sha256`.
    pub fn arm_config(&self, sha256: &str) -> ArmConfig {
        let options = &self.options;
        ArmConfig {
            arm_key: options.arm.clone(),
            adapter_type: format!("component:sha256:{sha256}"),
            worker_count: options.workers,
            max_epochs: options.epochs,
            budget_minutes: options.budget_minutes.unwrap_or(f64::INFINITY),
            frontier_max_lanes: options.variant_lanes,
            checkpoint: true,
            resume: self.resume,
            item_failure_policy: options.failure_policy,
            ..ArmConfig::default()
        }
    }
}
