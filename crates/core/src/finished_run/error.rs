//! Why a command on a finished run could not read or write what it needs,
//! or run what it planned,
//! by kind ([`OfflineError`]): the caller's exit code follows the kind,
//! not the call site.

use std::io;
use std::path::Path;

/// An error of the finished-run readers and logs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OfflineError {
    /// The run's files do not hold what the request needs, or hold it
    /// damaged: a missing file, an item with no record, a line that is not
    /// JSON. The request (or the directory it named) is at fault; the CLI
    /// exits 2.
    #[error("{0}")]
    Input(String),
    /// Reading or writing the run's files failed for another reason: a
    /// file that cannot be read (permissions, a directory where a file
    /// belongs, a device error) or a write that failed (a full disk). The
    /// command failed; the CLI exits 1.
    #[error("{0}")]
    Io(String),
    /// The command could not run what it planned, though its input was
    /// sound: the component or a point's snapshot could not be compiled.
    /// The CLI exits 1.
    #[error("{0}")]
    Failed(String),
}

impl OfflineError {
    /// `error` met reading `path`: a missing file is the request's fault
    /// ([`OfflineError::Input`], saying so as `missing`), anything else a
    /// failed read ([`OfflineError::Io`]).
    pub fn reading(path: &Path, error: &io::Error, missing: impl FnOnce() -> String) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => OfflineError::Input(missing()),
            _ => OfflineError::cannot_read(path, error),
        }
    }

    /// A failed read of `path`, which exists ([`OfflineError::Io`]).
    pub fn cannot_read(path: &Path, error: &io::Error) -> Self {
        OfflineError::Io(format!("cannot read {}: {error}", path.display()))
    }
}
