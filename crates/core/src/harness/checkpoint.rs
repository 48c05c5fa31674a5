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

use crate::episode::policy::FailurePolicy;

use super::atomic::write_json_atomic;
use super::summary::{AnytimeCheckpoint, EpochSummary};

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// `completed_epochs + 1`.
    pub next_epoch: u32,
    /// Arm minutes elapsed at the end of the last epoch (6 places).
    pub elapsed_minutes: f64,
    /// Compact epoch summaries, epochs 1..=completed.
    pub epochs: Vec<EpochSummary>,
    /// Anytime curve, one point per completed epoch.
    pub checkpoints: Vec<AnytimeCheckpoint>,
    /// The novelty ledger's keys, sorted.
    pub novelty_seen: Vec<String>,
    /// Consumed variant spec ids, sorted.
    pub catalog_consumed: Vec<String>,
    /// Family -> minutes first seen.
    pub coverage_first_seen: Map<String, Value>,
    /// Total raw value (6 places).
    pub raw_value_total: f64,
    /// Total novel value (6 places).
    pub novel_value_total: f64,
    /// Variant records so far.
    pub variant_records_total: u64,
    /// Records in `records.jsonl` so far.
    #[serde(default)]
    pub record_count: u64,
    /// Length of `records.jsonl` in bytes at the end of the last epoch.
    #[serde(default)]
    pub records_jsonl_bytes: u64,
    /// Length of `epochs.jsonl` in bytes at the end of the last epoch.
    #[serde(default)]
    pub epochs_jsonl_bytes: u64,
}

/// A whole checkpoint file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmCheckpoint {
    /// [`HARNESS_CHECKPOINT_SCHEMA_VERSION`].
    pub schema_version: String,
    /// Arm name.
    pub arm_key: String,
    /// Epochs completed (= `state.epochs.len()`).
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
/// [`validate_checkpoint`] for the checks.
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

/// `value` as a `T`, or the message `resume checkpoint {at}.FIELD is
/// malformed: ...` naming the field at fault within `at`.
fn deserialize_at<T: serde::de::DeserializeOwned>(
    value: Value,
    at: &str,
) -> Result<T, CheckpointError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let field = error.path().to_string();
        let field = if field == "." {
            at.to_owned()
        } else {
            format!("{at}.{field}")
        };
        invalid(format!(
            "resume checkpoint {field} is malformed: {}",
            error.into_inner()
        ))
    })
}

fn invalid(message: impl Into<String>) -> CheckpointError {
    CheckpointError::Invalid(message.into())
}

/// A JSON integer >= 0, or `null`/absent read as 0 (the reference's
/// `int(x or 0)`).
fn count_field(value: Option<&Value>) -> Option<u64> {
    match value {
        None | Some(Value::Null) => Some(0),
        Some(Value::Number(n)) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                .map(|f| f as u64)
        }),
        _ => None,
    }
}

/// Validates a parsed checkpoint against this run's signature and returns
/// its state. Checks, in the reference's order: a JSON object; the schema
/// version; `arm_key`; `runtime_signature` is an object and matches
/// `expected` field by field (every mismatch named with both values);
/// `state` is an object whose `epochs`, `checkpoints`, `novelty_seen`,
/// `catalog_consumed` are lists of objects/objects/strings/strings;
/// `coverage_first_seen` is an object of numbers; `completed_epochs` is an
/// integer equal to the number of epochs and anytime checkpoints; epoch ids
/// run 1..=completed in both lists; `next_epoch = completed + 1`; the value
/// totals are numeric; the file offsets and record count are non-negative
/// integers; and every epoch summary and anytime point has its full shape.
pub fn validate_checkpoint(
    payload: Value,
    expected: &RuntimeSignature,
) -> Result<CheckpointState, CheckpointError> {
    let Value::Object(mut payload) = payload else {
        return Err(invalid("resume checkpoint must be a JSON object"));
    };
    let schema = payload
        .get("schema_version")
        .cloned()
        .unwrap_or(Value::Null);
    if schema.as_str() != Some(HARNESS_CHECKPOINT_SCHEMA_VERSION) {
        return Err(invalid(format!(
            "resume checkpoint schema_version is incompatible: expected \
             \"{HARNESS_CHECKPOINT_SCHEMA_VERSION}\", got {schema}"
        )));
    }
    let arm_key = payload.get("arm_key").cloned().unwrap_or(Value::Null);
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
    let completed_raw = payload.get("completed_epochs").cloned();
    let Some(Value::Object(state)) = payload.remove("state") else {
        return Err(invalid("resume checkpoint is missing state"));
    };

    for field in ["epochs", "checkpoints", "novelty_seen", "catalog_consumed"] {
        if !matches!(state.get(field), Some(Value::Array(_))) {
            return Err(invalid(format!(
                "resume checkpoint state.{field} must be a list"
            )));
        }
    }
    let list = |field: &str| -> &Vec<Value> {
        match state.get(field) {
            Some(Value::Array(items)) => items,
            _ => unreachable!("checked above"),
        }
    };
    if !list("epochs").iter().all(Value::is_object) {
        return Err(invalid(
            "resume checkpoint state.epochs must contain objects",
        ));
    }
    if !list("checkpoints").iter().all(Value::is_object) {
        return Err(invalid(
            "resume checkpoint state.checkpoints must contain objects",
        ));
    }
    if !list("novelty_seen").iter().all(Value::is_string) {
        return Err(invalid(
            "resume checkpoint state.novelty_seen must contain strings",
        ));
    }
    if !list("catalog_consumed").iter().all(Value::is_string) {
        return Err(invalid(
            "resume checkpoint state.catalog_consumed must contain strings",
        ));
    }
    let Some(Value::Object(coverage)) = state.get("coverage_first_seen") else {
        return Err(invalid(
            "resume checkpoint state.coverage_first_seen must be an object",
        ));
    };
    if let Some((family, _)) = coverage.iter().find(|(_, minutes)| !minutes.is_number()) {
        return Err(invalid(format!(
            "resume checkpoint state.coverage_first_seen.{family} must be numeric"
        )));
    }

    let completed = count_field(completed_raw.as_ref())
        .ok_or_else(|| invalid("resume checkpoint completed_epochs must be an integer"))?;
    let epoch_count = list("epochs").len() as u64;
    if completed != epoch_count {
        return Err(invalid(
            "resume checkpoint completed_epochs does not match epoch history",
        ));
    }
    if list("checkpoints").len() as u64 != completed {
        return Err(invalid(
            "resume checkpoint anytime history does not match completed_epochs",
        ));
    }
    let epoch_ids = |field: &str| -> Option<Vec<u64>> {
        list(field)
            .iter()
            .map(|entry| count_field(entry.get("epoch")))
            .collect()
    };
    let (Some(epoch_numbers), Some(checkpoint_numbers)) =
        (epoch_ids("epochs"), epoch_ids("checkpoints"))
    else {
        return Err(invalid(
            "resume checkpoint epoch history must use integer epoch ids",
        ));
    };
    let contiguous: Vec<u64> = (1..=completed).collect();
    if epoch_numbers != contiguous || checkpoint_numbers != contiguous {
        return Err(invalid(
            "resume checkpoint epoch history is not contiguous from epoch 1",
        ));
    }
    let next_epoch = count_field(state.get("next_epoch"))
        .ok_or_else(|| invalid("resume checkpoint state.next_epoch must be an integer"))?;
    if next_epoch != completed + 1 {
        return Err(invalid(format!(
            "resume checkpoint next_epoch is inconsistent: expected {}, got {next_epoch}",
            completed + 1
        )));
    }
    for field in [
        "elapsed_minutes",
        "raw_value_total",
        "novel_value_total",
        "variant_records_total",
    ] {
        if !matches!(
            state.get(field),
            None | Some(Value::Null) | Some(Value::Number(_))
        ) {
            return Err(invalid(format!(
                "resume checkpoint state.{field} must be numeric"
            )));
        }
    }
    for field in ["record_count", "records_jsonl_bytes", "epochs_jsonl_bytes"] {
        if count_field(state.get(field)).is_none() {
            return Err(invalid(format!(
                "resume checkpoint state.{field} must be a non-negative integer"
            )));
        }
    }

    // Shape of every entry, with its position in the message.
    for (index, epoch) in list("epochs").iter().enumerate() {
        deserialize_at::<EpochSummary>(epoch.clone(), &format!("state.epochs[{index}]"))?;
    }
    for (index, point) in list("checkpoints").iter().enumerate() {
        deserialize_at::<AnytimeCheckpoint>(point.clone(), &format!("state.checkpoints[{index}]"))?;
    }
    let mut state = state;
    for field in [
        "elapsed_minutes",
        "raw_value_total",
        "novel_value_total",
        "variant_records_total",
        "record_count",
        "records_jsonl_bytes",
        "epochs_jsonl_bytes",
    ] {
        if matches!(state.get(field), None | Some(Value::Null)) {
            state.insert(field.to_owned(), Value::from(0));
        }
    }
    // A float total such as 3.0 (the reference writes ints, but JSON
    // producers may not) reads as its integer.
    if let Some(total) = state
        .get("variant_records_total")
        .and_then(Value::as_f64)
        .filter(|total| total.fract() == 0.0 && *total >= 0.0)
    {
        state.insert("variant_records_total".into(), Value::from(total as u64));
    }
    deserialize_at(Value::Object(state), "state")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::episode::metrics::ExecutionMetrics;

    fn signature() -> RuntimeSignature {
        RuntimeSignature {
            arm_key: "main".into(),
            adapter_type: "component:sha256:abc".into(),
            worker_count: 2,
            frontier_max_lanes: 0,
            variant_catalog_enabled: true,
            item_failure_policy: FailurePolicy::Record,
            episode_mode: Some("recoverable-v0".into()),
        }
    }

    fn epoch_summary(epoch: u32) -> EpochSummary {
        EpochSummary {
            schema_version: "loopx_explore_harness_arm_v0".into(),
            epoch,
            epoch_wall_minutes: 0.5,
            queue_size: 2,
            execution_unit_count: 1,
            record_count: 3,
            raw_value: 2.0,
            novel_value: 1.0,
            execution_metrics: ExecutionMetrics::default(),
            frontier: None,
            lanes: Vec::new(),
        }
    }

    fn anytime(epoch: u32) -> AnytimeCheckpoint {
        AnytimeCheckpoint {
            epoch,
            elapsed_minutes: f64::from(epoch),
            raw_value_cum: 1.0,
            novel_value_cum: 1.0,
            coverage_count_cum: 1,
            variant_records_cum: 0,
            requested_worker_minutes_cum: 2.0,
            execution_metrics_cum: ExecutionMetrics::default(),
        }
    }

    fn state(epochs: u32) -> CheckpointState {
        let mut coverage = Map::new();
        coverage.insert("fam".into(), json!(0.5));
        CheckpointState {
            next_epoch: epochs + 1,
            elapsed_minutes: 1.25,
            epochs: (1..=epochs).map(epoch_summary).collect(),
            checkpoints: (1..=epochs).map(anytime).collect(),
            novelty_seen: vec!["a".into(), "flag:fam:x".into()],
            catalog_consumed: vec!["spec-1".into()],
            coverage_first_seen: coverage,
            raw_value_total: 4.0,
            novel_value_total: 3.0,
            variant_records_total: 1,
            record_count: 6,
            records_jsonl_bytes: 600,
            epochs_jsonl_bytes: 400,
        }
    }

    fn payload(epochs: u32) -> Value {
        serde_json::to_value(ArmCheckpoint::new(&signature(), state(epochs))).unwrap()
    }

    fn message_for(mutate: impl FnOnce(&mut Value)) -> String {
        let mut value = payload(2);
        mutate(&mut value);
        validate_checkpoint(value, &signature())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_written_checkpoint_loads_back_identically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        let checkpoint = ArmCheckpoint::new(&signature(), state(2));
        assert_eq!(checkpoint.completed_epochs, 2);
        assert_eq!(checkpoint.schema_version, HARNESS_CHECKPOINT_SCHEMA_VERSION);
        write_arm_checkpoint(&path, &checkpoint).unwrap();
        assert_eq!(load_arm_checkpoint(&path, &signature()).unwrap(), state(2));
        let empty = ArmCheckpoint::new(&signature(), state(0));
        write_arm_checkpoint(&path, &empty).unwrap();
        assert_eq!(
            load_arm_checkpoint(&path, &signature()).unwrap().next_epoch,
            1
        );
    }

    #[test]
    fn missing_and_unreadable_files_are_reported_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        let error = load_arm_checkpoint(&path, &signature()).unwrap_err();
        assert!(matches!(error, CheckpointError::Missing { .. }));
        assert!(error.to_string().contains("checkpoint.json"), "{error}");
        fs::write(&path, "{not json").unwrap();
        let error = load_arm_checkpoint(&path, &signature()).unwrap_err();
        assert!(
            matches!(error, CheckpointError::Unreadable { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("invalid JSON"), "{error}");
    }

    #[test]
    fn signature_mismatch_names_every_field_with_both_values() {
        let mut other = signature();
        other.worker_count = 4;
        other.adapter_type = "component:sha256:def".into();
        other.episode_mode = None;
        let error = validate_checkpoint(payload(1), &other).unwrap_err();
        let CheckpointError::Incompatible(mismatches) = &error else {
            panic!("expected a signature mismatch, got {error}");
        };
        let fields: Vec<&str> = mismatches.iter().map(|m| m.field.as_str()).collect();
        // Fields are compared in the signature's (sorted) key order.
        assert_eq!(fields, vec!["adapter_type", "episode_mode", "worker_count"]);
        assert_eq!(mismatches[2].found, json!(2));
        assert_eq!(mismatches[2].expected, json!(4));
        let text = error.to_string();
        assert!(
            text.starts_with("resume checkpoint runtime is incompatible: "),
            "{text}"
        );
        assert!(
            text.contains(
                "adapter_type is \"component:sha256:abc\" in the checkpoint but \
                 \"component:sha256:def\" in this run"
            ),
            "{text}"
        );
        assert!(
            text.contains("worker_count is 2 in the checkpoint but 4 in this run"),
            "{text}"
        );
        assert!(
            text.contains(
                "episode_mode is \"recoverable-v0\" in the checkpoint but null in this run"
            ),
            "{text}"
        );
        // A field missing from an older checkpoint reads as null.
        let error = validate_checkpoint(
            {
                let mut value = payload(1);
                value["runtime_signature"]
                    .as_object_mut()
                    .unwrap()
                    .remove("frontier_max_lanes");
                value
            },
            &signature(),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("frontier_max_lanes is null in the checkpoint but 0 in this run"),
            "{error}"
        );
    }

    #[test]
    fn every_structural_check_has_its_own_message() {
        type Mutation = Box<dyn FnOnce(&mut Value)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|v| *v = json!([1])),
                "resume checkpoint must be a JSON object",
            ),
            (
                Box::new(|v| v["schema_version"] = json!("other_v9")),
                "resume checkpoint schema_version is incompatible: expected \
                 \"loopx_explore_harness_checkpoint_v0\", got \"other_v9\"",
            ),
            (
                Box::new(|v| v["arm_key"] = json!("other")),
                "resume checkpoint arm_key is incompatible: expected \"main\", got \"other\"",
            ),
            (
                Box::new(|v| v["runtime_signature"] = json!(null)),
                "resume checkpoint is missing runtime_signature",
            ),
            (
                Box::new(|v| v["state"] = json!([])),
                "resume checkpoint is missing state",
            ),
            (
                Box::new(|v| v["state"]["novelty_seen"] = json!("a")),
                "resume checkpoint state.novelty_seen must be a list",
            ),
            (
                Box::new(|v| v["state"]["epochs"][0] = json!(1)),
                "resume checkpoint state.epochs must contain objects",
            ),
            (
                Box::new(|v| v["state"]["checkpoints"][1] = json!("x")),
                "resume checkpoint state.checkpoints must contain objects",
            ),
            (
                Box::new(|v| v["state"]["novelty_seen"][0] = json!(1)),
                "resume checkpoint state.novelty_seen must contain strings",
            ),
            (
                Box::new(|v| v["state"]["catalog_consumed"] = json!([null])),
                "resume checkpoint state.catalog_consumed must contain strings",
            ),
            (
                Box::new(|v| v["state"]["coverage_first_seen"] = json!([])),
                "resume checkpoint state.coverage_first_seen must be an object",
            ),
            (
                Box::new(|v| v["state"]["coverage_first_seen"]["fam"] = json!("soon")),
                "resume checkpoint state.coverage_first_seen.fam must be numeric",
            ),
            (
                Box::new(|v| v["completed_epochs"] = json!("two")),
                "resume checkpoint completed_epochs must be an integer",
            ),
            (
                Box::new(|v| v["completed_epochs"] = json!(3)),
                "resume checkpoint completed_epochs does not match epoch history",
            ),
            (
                Box::new(|v| {
                    v["state"]["checkpoints"].as_array_mut().unwrap().pop();
                }),
                "resume checkpoint anytime history does not match completed_epochs",
            ),
            (
                Box::new(|v| v["state"]["epochs"][1]["epoch"] = json!("2")),
                "resume checkpoint epoch history must use integer epoch ids",
            ),
            (
                Box::new(|v| v["state"]["checkpoints"][0]["epoch"] = json!(2)),
                "resume checkpoint epoch history is not contiguous from epoch 1",
            ),
            (
                Box::new(|v| v["state"]["next_epoch"] = json!(-1)),
                "resume checkpoint state.next_epoch must be an integer",
            ),
            (
                Box::new(|v| v["state"]["next_epoch"] = json!(5)),
                "resume checkpoint next_epoch is inconsistent: expected 3, got 5",
            ),
            (
                Box::new(|v| v["state"]["raw_value_total"] = json!("lots")),
                "resume checkpoint state.raw_value_total must be numeric",
            ),
            (
                Box::new(|v| v["state"]["records_jsonl_bytes"] = json!(-5)),
                "resume checkpoint state.records_jsonl_bytes must be a non-negative integer",
            ),
        ];
        for (mutate, expected) in cases {
            assert_eq!(message_for(mutate), expected);
        }
        let text = message_for(|v| {
            v["state"]["epochs"][1]
                .as_object_mut()
                .unwrap()
                .remove("execution_metrics");
        });
        assert!(
            text.starts_with("resume checkpoint state.epochs[1] is malformed:"),
            "{text}"
        );
    }

    #[test]
    fn absent_totals_read_as_zero_like_the_reference() {
        let mut value = payload(1);
        let state = value["state"].as_object_mut().unwrap();
        state.remove("raw_value_total");
        state.insert("novel_value_total".into(), Value::Null);
        state.remove("records_jsonl_bytes");
        let restored = validate_checkpoint(value, &signature()).unwrap();
        assert_eq!(restored.raw_value_total, 0.0);
        assert_eq!(restored.novel_value_total, 0.0);
        assert_eq!(restored.records_jsonl_bytes, 0);
        assert_eq!(restored.epochs_jsonl_bytes, 400);
    }

    #[test]
    fn a_malformed_checkpoint_names_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.json");
        let mut value = payload(2);
        value["state"]["epochs"][1]["record_count"] = json!("three");
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        let text = load_arm_checkpoint(&path, &signature())
            .unwrap_err()
            .to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("state.epochs[1].record_count"), "{text}");

        let mut value = payload(2);
        value["state"]["catalog_consumed"] = json!({"a": 1});
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        let text = load_arm_checkpoint(&path, &signature())
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with(&format!(
                "{}: resume checkpoint state.catalog_consumed must be a list",
                path.display()
            )),
            "{text}"
        );
    }

    mod props {
        use super::*;
        use crate::hostile_inputs::{
            config, json_value, mutate_bytes, read_temp_file, with_a_leaf_of_another_type,
        };
        use proptest::prelude::*;

        fn load_bytes(
            bytes: &[u8],
        ) -> (
            tempfile::TempDir,
            PathBuf,
            Result<CheckpointState, CheckpointError>,
        ) {
            read_temp_file("checkpoint.json", bytes, |path| {
                load_arm_checkpoint(path, &signature())
            })
        }

        proptest! {
            #![proptest_config(config(128))]

            #[test]
            fn prop_checkpoint_damaged_bytes_never_panic_and_errors_name_the_file(
                bytes in (0u32..3).prop_flat_map(|n| {
                    mutate_bytes(serde_json::to_vec_pretty(&payload(n)).unwrap(), false)
                }),
            ) {
                let (_dir, path, result) = load_bytes(&bytes);
                if let Err(error) = result {
                    let text = error.to_string();
                    prop_assert!(
                        text.contains(&path.display().to_string())
                            || matches!(error, CheckpointError::Incompatible(_)),
                        "{}", text
                    );
                }
            }

            #[test]
            fn prop_checkpoint_a_value_of_another_type_names_file_and_field(
                (checkpoint, key) in with_a_leaf_of_another_type(payload(2), |_| true),
            ) {
                let (_dir, path, result) = load_bytes(&serde_json::to_vec(&checkpoint).unwrap());
                let error = result.unwrap_err();
                let text = error.to_string();
                prop_assert!(
                    text.contains(&path.display().to_string())
                        || matches!(error, CheckpointError::Incompatible(_)),
                    "{}", text
                );
                prop_assert!(text.contains(&key), "{} not named in {}", key, text);
            }

            #[test]
            fn prop_checkpoint_any_json_never_panics(
                value in json_value(),
                state in json_value(),
            ) {
                let _ = validate_checkpoint(value, &signature());
                let mut checkpoint = payload(1);
                checkpoint["state"] = state;
                let _ = validate_checkpoint(checkpoint, &signature());
            }
        }
    }
}
