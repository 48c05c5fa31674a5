//! Why a run directory cannot be reported on.

use std::path::PathBuf;

use crate::harness::run_files::RunFileError;
use crate::replay::durable::DurableError;

/// A run file the report needs is missing or damaged. The message names
/// the file, and for JSONL files the 1-based line, then the field at fault.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ReportError {
    /// The file at fault.
    pub path: PathBuf,
    /// The whole message: `FILE[:LINE]: [FIELD: ]what is wrong`.
    pub message: String,
}

impl ReportError {
    /// An error about `path` at 1-based `line` (when there is one).
    pub fn at(path: impl Into<PathBuf>, line: Option<usize>, what: impl AsRef<str>) -> Self {
        let path = path.into();
        let message = match line {
            Some(line) => format!("{}:{line}: {}", path.display(), what.as_ref()),
            None => format!("{}: {}", path.display(), what.as_ref()),
        };
        Self { path, message }
    }

    /// A JSON run file that [`crate::harness::run_files::read_run_file`]
    /// could not read (its message already names the file and field).
    pub fn run_file(path: impl Into<PathBuf>, error: RunFileError) -> Self {
        Self {
            path: path.into(),
            message: error.to_string(),
        }
    }

    /// A JSONL file that [`crate::replay::durable::read_jsonl`] could not
    /// read (its message already names the file and line).
    pub fn jsonl(path: impl Into<PathBuf>, error: DurableError) -> Self {
        Self {
            path: path.into(),
            message: error.to_string(),
        }
    }
}
