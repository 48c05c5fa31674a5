//! The arm checkpoint: what `--resume` trusts. Mirrors
//! `harness_checkpoint.py` (`build_arm_checkpoint`, `load_arm_checkpoint`,
//! `write_arm_checkpoint`).
//!
//! Deliberate deviation: the reference stores every epoch's full lanes,
//! records included, in the checkpoint, which would make it as large as
//! the run (100k records) and rewrite it all after every epoch. Here the
//! checkpoint keeps the compact epoch summaries (no records, no per-record
//! lane lists; those are in `records.jsonl` and `epochs.jsonl`), the anytime
//! `checkpoints`, and the byte lengths of `records.jsonl` and `epochs.jsonl`
//! at the end of the epoch, so a resume can cut both files back to exactly
//! what the checkpoint covers.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod fields;

use crate::episode::policy::FailurePolicy;

use super::summary::{AnytimeCheckpoint, EpochSummary};
use crate::atomic::write_json_atomic;

/// `schema_version` of an arm checkpoint.
pub const HARNESS_CHECKPOINT_SCHEMA_VERSION: &str = "loopx_explore_harness_checkpoint_v0";

/// What must not change between a run and its resume (reference
/// `_arm_runtime_signature` without router, goal and agent fields).
/// Compared field by field on resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeSignature {
    /// Arm name.
    pub arm_key: String,
    /// Adapter identity (e.g. `component:sha256:<hex>`).
    pub adapter_type: String,
    /// Queue worker lanes (at least 1).
    pub worker_count: usize,
    /// Variant specs per epoch (0 = unlimited).
    pub frontier_max_lanes: usize,
    /// A variant catalog is in use.
    pub variant_catalog_enabled: bool,
    /// `record` or `fatal`.
    pub item_failure_policy: FailurePolicy,
    /// `recoverable-v0`, or `null` for standalone execution.
    pub episode_mode: Option<String>,
}

impl RuntimeSignature {
    fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }
}

/// The restorable state after the last completed epoch.
///
/// Read leniently where the reference is (`int(x or 0)`): a total, count or
/// byte length that is `null` or absent reads as 0, and an integral float
/// (`3.0`) as its integer. Each field's rule is named in its doc.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// `completed_epochs + 1` (must be an integer).
    #[serde(default, deserialize_with = "fields::integer")]
    pub next_epoch: u32,
    /// Arm minutes elapsed at the end of the last epoch (6 places; must be
    /// numeric).
    #[serde(default, deserialize_with = "fields::numeric")]
    pub elapsed_minutes: f64,
    /// Compact epoch summaries, epochs 1..=completed (must be a list of
    /// objects with integer `epoch` ids).
    #[serde(deserialize_with = "fields::epoch_history")]
    pub epochs: Vec<EpochSummary>,
    /// Anytime curve, one point per completed epoch (as `epochs`).
    #[serde(deserialize_with = "fields::epoch_history")]
    pub checkpoints: Vec<AnytimeCheckpoint>,
    /// The novelty ledger's keys, sorted (must be a list of strings).
    #[serde(deserialize_with = "fields::strings")]
    pub novelty_seen: Vec<String>,
    /// Consumed variant spec ids, sorted (must be a list of strings).
    #[serde(deserialize_with = "fields::strings")]
    pub catalog_consumed: Vec<String>,
    /// Family -> minutes first seen (must be an object of numbers; kept as
    /// written).
    #[serde(deserialize_with = "fields::coverage")]
    pub coverage_first_seen: Map<String, Value>,
    /// Total raw value (6 places; must be numeric).
    #[serde(default, deserialize_with = "fields::numeric")]
    pub raw_value_total: f64,
    /// Total novel value (6 places; must be numeric).
    #[serde(default, deserialize_with = "fields::numeric")]
    pub novel_value_total: f64,
    /// Variant records so far (must be numeric, and a whole number).
    #[serde(default, deserialize_with = "fields::whole_total")]
    pub variant_records_total: u64,
    /// Records in `records.jsonl` so far (must be a non-negative integer).
    #[serde(default, deserialize_with = "fields::non_negative_integer")]
    pub record_count: u64,
    /// Length of `records.jsonl` in bytes at the end of the last epoch
    /// (must be a non-negative integer).
    #[serde(default, deserialize_with = "fields::non_negative_integer")]
    pub records_jsonl_bytes: u64,
    /// Length of `epochs.jsonl` in bytes at the end of the last epoch
    /// (must be a non-negative integer).
    #[serde(default, deserialize_with = "fields::non_negative_integer")]
    pub epochs_jsonl_bytes: u64,
}

/// A whole checkpoint file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmCheckpoint {
    /// `HARNESS_CHECKPOINT_SCHEMA_VERSION`.
    pub schema_version: String,
    /// Arm name.
    pub arm_key: String,
    /// Epochs completed (= `state.epochs.len()`; must be an integer,
    /// absent or `null` reads as 0).
    #[serde(default, deserialize_with = "fields::integer")]
    pub completed_epochs: u32,
    /// The [`RuntimeSignature`] as JSON.
    pub runtime_signature: Map<String, Value>,
    /// The restorable state.
    pub state: CheckpointState,
}

impl ArmCheckpoint {
    /// A checkpoint of `state` (reference `build_arm_checkpoint`).
    pub fn new(signature: &RuntimeSignature, state: CheckpointState) -> Self {
        Self {
            schema_version: HARNESS_CHECKPOINT_SCHEMA_VERSION.to_owned(),
            arm_key: signature.arm_key.clone(),
            completed_epochs: u32::try_from(state.epochs.len()).unwrap_or(u32::MAX),
            runtime_signature: signature.to_map(),
            state,
        }
    }
}

/// One field whose value differs between the checkpoint and this run.
#[derive(Clone, Debug, PartialEq)]
pub struct SignatureMismatch {
    /// The signature field.
    pub field: String,
    /// The value in the checkpoint (`null` when absent).
    pub found: Value,
    /// The value of this run.
    pub expected: Value,
}

/// Why a checkpoint cannot be loaded or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// No checkpoint file.
    #[error("resume checkpoint does not exist: {}", path.display())]
    Missing {
        /// The checkpoint path.
        path: PathBuf,
    },
    /// The file cannot be read or is not JSON.
    #[error("resume checkpoint is unreadable or invalid JSON: {}: {message}", path.display())]
    Unreadable {
        /// The checkpoint path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The runtime signature differs.
    #[error("resume checkpoint runtime is incompatible: {}", format_mismatches(.0))]
    Incompatible(Vec<SignatureMismatch>),
    /// The checkpoint's contents are inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// Writing the checkpoint failed.
    #[error("cannot write checkpoint {}", path.display())]
    Write {
        /// The checkpoint path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

fn format_mismatches(mismatches: &[SignatureMismatch]) -> String {
    struct Each<'a>(&'a [SignatureMismatch]);
    impl fmt::Display for Each<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for (i, m) in self.0.iter().enumerate() {
                if i > 0 {
                    f.write_str("; ")?;
                }
                write!(
                    f,
                    "{} is {} in the checkpoint but {} in this run",
                    m.field, m.found, m.expected
                )?;
            }
            Ok(())
        }
    }
    Each(mismatches).to_string()
}

/// Writes a checkpoint atomically (temp file, fsync, rename, fsync dir;
/// reference `write_arm_checkpoint`).
pub fn write_arm_checkpoint(
    path: &Path,
    checkpoint: &ArmCheckpoint,
) -> Result<(), CheckpointError> {
    write_json_atomic(path, checkpoint).map_err(|source| CheckpointError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Reads and validates a checkpoint (reference `load_arm_checkpoint`); see
/// `validate_checkpoint` for the checks.
pub fn load_arm_checkpoint(
    path: &Path,
    expected: &RuntimeSignature,
) -> Result<CheckpointState, CheckpointError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::Missing {
                path: path.to_owned(),
            });
        }
        Err(error) => {
            return Err(CheckpointError::Unreadable {
                path: path.to_owned(),
                message: error.to_string(),
            });
        }
    };
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    let payload: Value =
        serde_json::from_slice(bytes).map_err(|error| CheckpointError::Unreadable {
            path: path.to_owned(),
            message: error.to_string(),
        })?;
    validate_checkpoint(payload, expected).map_err(|error| match error {
        CheckpointError::Invalid(message) => {
            CheckpointError::Invalid(format!("{}: {message}", path.display()))
        }
        other => other,
    })
}

fn invalid(message: impl Into<String>) -> CheckpointError {
    CheckpointError::Invalid(message.into())
}

/// Checks what must match this run before the checkpoint is read further,
/// in the reference's order: a JSON object; the schema version; `arm_key`;
/// `runtime_signature` is an object and matches `expected` field by field
/// (every mismatch named with both values; a field missing from an older
/// checkpoint reads as `null`); `state` is an object.
fn check_compatible(payload: &Value, expected: &RuntimeSignature) -> Result<(), CheckpointError> {
    let Value::Object(payload) = payload else {
        return Err(invalid("resume checkpoint must be a JSON object"));
    };
    let field = |name: &str| payload.get(name).cloned().unwrap_or(Value::Null);
    let schema = field("schema_version");
    if schema.as_str() != Some(HARNESS_CHECKPOINT_SCHEMA_VERSION) {
        return Err(invalid(format!(
            "resume checkpoint schema_version is incompatible: expected \
             \"{HARNESS_CHECKPOINT_SCHEMA_VERSION}\", got {schema}"
        )));
    }
    let arm_key = field("arm_key");
    if arm_key.as_str().unwrap_or("") != expected.arm_key {
        return Err(invalid(format!(
            "resume checkpoint arm_key is incompatible: expected {:?}, got {arm_key}",
            expected.arm_key
        )));
    }
    let Some(Value::Object(signature)) = payload.get("runtime_signature") else {
        return Err(invalid("resume checkpoint is missing runtime_signature"));
    };
    let mismatches: Vec<SignatureMismatch> = expected
        .to_map()
        .into_iter()
        .filter_map(|(field, expected_value)| {
            let found = signature.get(&field).cloned().unwrap_or(Value::Null);
            (found != expected_value).then_some(SignatureMismatch {
                field,
                found,
                expected: expected_value,
            })
        })
        .collect();
    if !mismatches.is_empty() {
        return Err(CheckpointError::Incompatible(mismatches));
    }
    if !matches!(payload.get("state"), Some(Value::Object(_))) {
        return Err(invalid("resume checkpoint is missing state"));
    }
    Ok(())
}

impl ArmCheckpoint {
    /// Reads a parsed checkpoint file. Each field's rule is checked as it
    /// is read (see the field docs); an error names the field at fault
    /// (`resume checkpoint state.epochs[1].record_count is malformed: ...`,
    /// `resume checkpoint state.novelty_seen must be a list`). Checks
    /// across fields are [`ArmCheckpoint::validate`]'s.
    pub fn from_json(payload: Value) -> Result<Self, CheckpointError> {
        serde_path_to_error::deserialize(payload).map_err(|error| {
            let path = error.path().to_string();
            invalid(fields::describe(&path, &error.into_inner().to_string()))
        })
    }

    /// The rules across fields, in the reference's order: `completed_epochs`
    /// equals the number of epoch summaries and of anytime points; both
    /// histories number their epochs 1..=completed; `next_epoch` is
    /// `completed + 1`.
    pub fn validate(&self) -> Result<(), CheckpointError> {
        let state = &self.state;
        let completed = self.completed_epochs;
        if state.epochs.len() != completed as usize {
            return Err(invalid(
                "resume checkpoint completed_epochs does not match epoch history",
            ));
        }
        if state.checkpoints.len() != completed as usize {
            return Err(invalid(
                "resume checkpoint anytime history does not match completed_epochs",
            ));
        }
        let contiguous = state
            .epochs
            .iter()
            .map(|epoch| epoch.epoch)
            .eq(1..=completed)
            && state
                .checkpoints
                .iter()
                .map(|point| point.epoch)
                .eq(1..=completed);
        if !contiguous {
            return Err(invalid(
                "resume checkpoint epoch history is not contiguous from epoch 1",
            ));
        }
        let expected_next = u64::from(completed) + 1;
        if u64::from(state.next_epoch) != expected_next {
            return Err(invalid(format!(
                "resume checkpoint next_epoch is inconsistent: expected {expected_next}, got {}",
                state.next_epoch
            )));
        }
        Ok(())
    }
}

/// Validates a parsed checkpoint against this run's signature and returns
/// its state: what must match this run first (a JSON object, the schema
/// version, `arm_key`, the runtime signature field by field, a `state`
/// object), then every field's type and shape as it is read
/// ([`ArmCheckpoint::from_json`]), then the rules across fields
/// ([`ArmCheckpoint::validate`]).
pub fn validate_checkpoint(
    payload: Value,
    expected: &RuntimeSignature,
) -> Result<CheckpointState, CheckpointError> {
    check_compatible(&payload, expected)?;
    let checkpoint = ArmCheckpoint::from_json(payload)?;
    checkpoint.validate()?;
    Ok(checkpoint.state)
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
