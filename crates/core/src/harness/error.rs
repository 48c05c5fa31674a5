//! Why an arm stopped with an error.

use std::io;
use std::path::PathBuf;

use crate::episode::adapter::AdapterError;
use crate::episode::policy::FatalError;

use super::checkpoint::CheckpointError;

/// Everything that can end [`super::arm::run_arm`] early.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    /// An [`super::config::ArmConfig`] field is out of range.
    #[error("invalid arm configuration: {0}")]
    Config(String),
    /// An item, unit, variant compilation or lane failed under the `fatal`
    /// policy, or a lane could not be set up (adapter instantiation, a
    /// panic); the display shows the primary failure and any chained
    /// cleanup failure.
    #[error("arm stopped by a fatal failure: {0}")]
    Fatal(FatalError),
    /// `list_seed_items` failed (fatal under every policy, as in the
    /// reference).
    #[error("list_seed_items failed: {0}")]
    Seeds(AdapterError),
    /// The checkpoint cannot be loaded or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A fresh run was pointed at a directory that already holds one.
    #[error(
        "{} already holds a run ({}); resume it or choose another directory",
        path.display(),
        found.join(", ")
    )]
    RunExists {
        /// The run directory.
        path: PathBuf,
        /// The run files found in it.
        found: Vec<String>,
    },
    /// The run directory does not match its checkpoint.
    #[error("run directory is damaged: {0}")]
    Damaged(String),
    /// Reading or writing the run's output failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Units sent elsewhere to run could not be run there (a distributed
    /// run's transport failed, or no worker could take a unit).
    #[error("{0}")]
    Remote(String),
}

impl From<FatalError> for ArmError {
    fn from(error: FatalError) -> Self {
        ArmError::Fatal(error)
    }
}

impl From<super::work::UnitError> for ArmError {
    fn from(error: super::work::UnitError) -> Self {
        match error {
            super::work::UnitError::Fatal(error) => ArmError::Fatal(error),
            super::work::UnitError::Read { context, source } => ArmError::Io { context, source },
            super::work::UnitError::Remote(message) => ArmError::Remote(message),
        }
    }
}

impl ArmError {
    /// An [`ArmError::Io`] with `context`.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        ArmError::Io {
            context: context.into(),
            source,
        }
    }
}
