//! The files of a run directory the host defines, by name, and how the CLI
//! reads and writes its JSON ones.
//!
//! The arm writes `records.jsonl`, `epochs.jsonl`, `checkpoint.json` and
//! `summary.json` ([`super::run_dir::RunDir`]); `sandloop run` adds
//! `manifest.json` ([`super::manifest::RunManifest`]), `failure.json`
//! ([`RunFailure`]) and the `replay`/`snapshots` blocks of `summary.json`
//! ([`super::summary::RunSummary`]).

use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::atomic::write_json_atomic;

/// `records.jsonl`: one record per line, as units complete.
pub const RECORDS_FILE: &str = "records.jsonl";
/// `epochs.jsonl`: one [`super::summary::EpochSummary`] per line.
pub const EPOCHS_FILE: &str = "epochs.jsonl";
/// `checkpoint.json`: the [`super::checkpoint::ArmCheckpoint`] a resume
/// continues from.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";
/// `summary.json`: the [`super::summary::ArmSummary`] of a finished arm (a
/// [`super::summary::RunSummary`] when `sandloop run` wrote it).
pub const SUMMARY_FILE: &str = "summary.json";
/// `manifest.json`: host, adapter and every invocation of the run
/// ([`super::manifest::RunManifest`]).
pub const MANIFEST_FILE: &str = "manifest.json";
/// `adapter-output/`: what the adapter's calls printed, one
/// `epoch-NNNN.jsonl` per epoch (a line per call that printed).
pub const ADAPTER_OUTPUT_DIR: &str = "adapter-output";
/// `traces/`: the calls' public trace events, one `epoch-NNNN.jsonl` per
/// epoch.
pub const TRACES_DIR: &str = "traces";
/// `failure.json`: why a run stopped ([`RunFailure`]); removed when the
/// run is continued.
pub const FAILURE_FILE: &str = "failure.json";

/// `schema_version` of `failure.json`.
pub const RUN_FAILURE_SCHEMA_VERSION: &str = "sandloop_run_failure_v0";

/// `failure.json`: written when `sandloop run` fails after the run began,
/// so the run directory says why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// [`RUN_FAILURE_SCHEMA_VERSION`].
    pub schema_version: String,
    /// The error, as printed.
    pub error: String,
    /// The process's exit code (1).
    pub exit_code: i32,
    /// What to do next.
    pub resume: String,
}

impl RunFailure {
    /// The failure of a run that stopped with `error` (exit code 1; continue
    /// with `--resume`).
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            schema_version: RUN_FAILURE_SCHEMA_VERSION.to_owned(),
            error: error.into(),
            exit_code: 1,
            resume: "continue with the same command and --resume".to_owned(),
        }
    }
}

/// Why a run file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RunFileError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is not JSON, or not of its shape.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field at fault (when there is one), then what is wrong,
        /// with serde's line and column for JSON syntax errors.
        message: String,
    },
    /// The file cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// Reads the JSON file at `path` as a `T`; an error names the file and the
/// field at fault (`adapter.sha256: invalid type: ...`).
pub fn read_run_file<T: DeserializeOwned>(path: &Path) -> Result<T, RunFileError> {
    let bytes = std::fs::read(path).map_err(|source| RunFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |message: String| RunFileError::Invalid {
        path: path.to_owned(),
        message,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let field = error.path().to_string();
        invalid(if field == "." {
            error.into_inner().to_string()
        } else {
            format!("{field}: {}", error.into_inner())
        })
    })?;
    deserializer
        .end()
        .map_err(|error| invalid(error.to_string()))?;
    Ok(value)
}

/// Writes `value` to `path` atomically as pretty JSON with every object's
/// keys sorted — the layout these files have always had, since the CLI
/// built them as `serde_json::Value`s (whose maps are sorted).
pub fn write_run_file<T: Serialize>(path: &Path, value: &T) -> Result<(), RunFileError> {
    let write = |source| RunFileError::Write {
        path: path.to_owned(),
        source,
    };
    let sorted = serde_json::to_value(value).map_err(|error| write(io::Error::other(error)))?;
    write_json_atomic(path, &sorted).map_err(write)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `golden/NAME` (written by `sandloop run` before these files were
    /// typed) read as a `T` and written back: the same bytes.
    pub(crate) fn assert_golden_round_trip<T: Serialize + DeserializeOwned>(golden: &[u8]) -> T {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("golden.json");
        std::fs::write(&path, golden).unwrap();
        let value: T = read_run_file(&path).unwrap();
        let again = dir.path().join("again.json");
        write_run_file(&again, &value).unwrap();
        assert_eq!(
            String::from_utf8(std::fs::read(&again).unwrap()).unwrap(),
            String::from_utf8(golden.to_vec()).unwrap()
        );
        value
    }

    #[test]
    fn a_failure_written_by_the_host_reads_back_and_writes_the_same_bytes() {
        let failure: RunFailure = assert_golden_round_trip(include_bytes!("golden/failure.json"));
        assert_eq!(failure.schema_version, RUN_FAILURE_SCHEMA_VERSION);
        assert!(failure.error.contains("trap"), "{}", failure.error);
        assert_eq!(
            RunFailure::new(failure.error.clone()),
            failure,
            "RunFailure::new builds what the host wrote"
        );
    }

    #[test]
    fn read_errors_name_the_file_the_field_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failure.json");
        let error = read_run_file::<RunFailure>(&path).unwrap_err();
        assert!(matches!(error, RunFileError::Read { .. }), "{error}");
        std::fs::write(&path, "{\n  \"error\": 1,").unwrap();
        let text = read_run_file::<RunFailure>(&path).unwrap_err().to_string();
        assert!(text.starts_with(&path.display().to_string()), "{text}");
        assert!(text.contains("error: invalid type: integer"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        std::fs::write(&path, "{} {}").unwrap();
        let text = read_run_file::<RunFailure>(&path).unwrap_err().to_string();
        assert!(text.contains("missing field"), "{text}");
        let mut failure = serde_json::to_string(&RunFailure::new("x")).unwrap();
        failure.push_str(" [1]");
        std::fs::write(&path, failure).unwrap();
        let text = read_run_file::<RunFailure>(&path).unwrap_err().to_string();
        assert!(text.contains("trailing characters"), "{text}");
    }
}
