//! A run of `sandloop run`, from a typed [`RunRequest`] to a
//! [`RunOutcome`], with no flags and no printing.
//!
//! [`run`] loads the component and every input, checks them before
//! anything is written, opens the run directory (fresh or resumed), finds
//! a distributed run's workers, runs the arm, and writes `summary.json`
//! with the replay, snapshot, error and distributed blocks. What a caller
//! shows while it runs — compile notices, warnings, progress — it receives
//! through a [`RunObserver`]. The `sandloop` command line is one caller
//! (`cli/run.rs` turns flags into the request and prints the outcome);
//! `sandloop try` is another, showing compile notices and warnings but no
//! progress.
//!
//! - [`request`]: the request and the rules it must meet on its own;
//! - [`inputs`]: the component, the items and the variant catalog, loaded
//!   and checked;
//! - [`remote`]: what a `--nats` run needs before it starts, and its lanes;
//! - [`sequence`]: the run itself;
//! - [`trial`]: `sandloop try`'s scratch runs of a few items, and what
//!   changed between two rounds.

pub mod inputs;
pub mod remote;
pub mod request;
pub mod sequence;
pub mod trial;

use std::path::Path;
use std::sync::Arc;

use crate::distributed::{Dispatcher, DistributedSummary};
use crate::harness::ArmSummary;
use crate::harness::arm::ArmEvent;
use crate::harness::error_tally::{ErrorCounts, ErrorTally};
use crate::harness::run_files::RunFailure;
use crate::harness::run_session::SessionError;
use crate::replay::ReplayMetricLedger;
use crate::replay::snapshot_totals::SnapshotTotals;
use crate::sandbox::{ComponentInfo, LoadError};

pub use request::{NatsRequest, RunRequest};
pub use sequence::run;

/// What a caller of [`run`] is told while the run goes on. Every method
/// has a default that says nothing, so a silent caller implements none.
pub trait RunObserver: Sync {
    /// Runs `work`, the compile of `component` (`what` is `NAME` or
    /// `NAME for snapshot forks`; `cached` says whether the result is kept
    /// for later runs), exactly once. A caller may show a notice while it
    /// takes long.
    fn compiling(&self, component: &Path, what: &str, cached: bool, work: &mut dyn FnMut()) {
        let _ = (component, what, cached);
        work();
    }

    /// A warning worth a line (`--resume` of a run with no checkpoint, a
    /// failure count that could not be read back).
    fn warning(&self, message: &str) {
        let _ = message;
    }

    /// The run directory is open and about to be written: from here on an
    /// interrupted run keeps its finished epochs.
    fn opened(&self, run: &OpenedRun<'_>) {
        let _ = run;
    }

    /// An event of the arm ([`ArmEvent`]), in order per lane thread. The
    /// run's failure tally has already counted it.
    fn event(&self, event: &ArmEvent<'_>) {
        let _ = event;
    }
}

/// What [`RunObserver::opened`] is shown of a run that is starting.
pub struct OpenedRun<'a> {
    /// The run directory.
    pub out: &'a Path,
    /// A `--nats` run's dispatcher (its units in flight, its workers).
    pub dispatcher: Option<&'a Arc<Dispatcher>>,
    /// The run's failures by type, updated as units finish.
    pub errors: &'a Arc<ErrorTally>,
}

/// A run that finished: its summary and what the closing lines show.
pub struct RunOutcome {
    /// The arm's summary, as `summary.json` holds it.
    pub summary: ArmSummary,
    /// The component that ran.
    pub adapter: ComponentInfo,
    /// The run's failures by type (`error_count`, `errors_by_type`).
    pub errors: ErrorCounts,
    /// Minutes charged for failed calls (at least 0.05 min each).
    pub charged_minutes: f64,
    /// The replay metric ledger, when replay was on.
    pub replay: Option<Arc<ReplayMetricLedger>>,
    /// The run's snapshot totals, when children were snapshot-forked.
    pub snapshots: Option<SnapshotTotals>,
    /// A `--nats` run's workers and units.
    pub distributed: Option<DistributedSummary>,
}

/// Why a run did not finish, with the exit code it maps to on the command
/// line.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Bad usage or bad input (exit 2): refused before anything ran —
    /// before the run directory is touched, or, for a run directory that
    /// cannot be continued (a damaged checkpoint, a run already there),
    /// once its lock is taken, leaving its files as they were.
    #[error("{0}")]
    Refused(String),
    /// The run could not start: an engine, a server, a component that
    /// cannot be instantiated, a run directory that cannot be written
    /// (exit 1). Nothing was run.
    #[error("{0}")]
    Failed(String),
    /// The run started and stopped on an error (exit 1). What its finished
    /// epochs wrote is kept and `--resume` continues it.
    #[error("{}", .0.message)]
    Stopped(Box<RunStopped>),
}

/// A run that started and stopped on an error ([`LaunchError::Stopped`]).
#[derive(Debug)]
pub struct RunStopped {
    /// The error, with its causes.
    pub message: String,
    /// What the run directory now records of the failure.
    pub failure: RunFailure,
    /// The run's failures by type when it stopped.
    pub errors: ErrorCounts,
}

impl From<LoadError> for LaunchError {
    /// An engine that fails is the host's failure; anything else about the
    /// component is bad input.
    fn from(error: LoadError) -> Self {
        match error {
            LoadError::Engine(message) => LaunchError::Failed(message),
            other => LaunchError::Refused(other.to_string()),
        }
    }
}

impl From<SessionError> for LaunchError {
    /// A run directory that cannot be used: refused (exit 2) or
    /// unwritable (exit 1).
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Refused(message) => LaunchError::Refused(message),
            SessionError::Io(message) => LaunchError::Failed(message),
        }
    }
}

/// `error` with its causes, `: `-separated.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
