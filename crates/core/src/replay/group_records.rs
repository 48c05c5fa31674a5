//! The record shapes of a replay group: the point id a group's point is
//! captured under, the `{stage, type, message, quarantined, also}` block of
//! a replay failure, the `adapter_error` a failed replayed suffix or child
//! is recorded with, and the `replay` block each suffix and each isolated
//! child writes beside its record (`records.jsonl`).
//!
//! Pure functions of the registry's results: the group rules of
//! [`group`](super::group) and [`group_children`](super::group_children)
//! call them, and a component host writes exactly what they return.

use serde_json::{Map, Value, json};

use super::fidelity::Fidelity;
use super::point::{ReplayPoint, ReplayRestoreResult};
use super::registry::{ChildOutcome, RiskAssessment, RiskAssessmentRules};
use super::registry::{ReplayCause, ReplayError, ReplayStage};
use crate::digest::sha256_hex;
use crate::episode::adapter::{AdapterError, ErrorType, Item, Record};

/// A deterministic, file-name-safe point id for a group of an arm and
/// epoch: `rp-` and 20 hex digits of a sha256 of `arm`, `epoch` and
/// `execution_group_id` joined by NUL (a resumed run recaptures the same
/// group under the same id).
pub fn point_id_for(arm: &str, epoch: u32, execution_group_id: &str) -> String {
    let digest = sha256_hex(format!("{arm}\0{epoch}\0{execution_group_id}").as_bytes());
    format!("rp-{}", &digest[..20])
}

/// The `{stage, type, message, quarantined, also}` block describing a
/// replay failure (a prefix record's `replay_capture_error`, a point line's
/// `release_error`, a suffix's `replay.error`). `message` is the adapter's
/// own message for an adapter failure, else the cause's, folded like every
/// error record's message; `also` is the second failure on the way out, as
/// text, or null.
pub fn error_block(error: &ReplayError) -> Value {
    let message = match &error.cause {
        ReplayCause::Adapter(adapter) => &adapter.message,
        ReplayCause::Contract(message)
        | ReplayCause::Unavailable(message)
        | ReplayCause::AgentState(message)
        | ReplayCause::RiskDenied(message) => message,
    };
    json!({
        "stage": error.stage.as_str(),
        "type": error.cause.error_type(),
        "message": crate::episode::records::fold_error_message(message),
        "quarantined": error.quarantined,
        "also": error.also.as_ref().map(|also| also.to_string()),
    })
}

/// The error record's `adapter_error` for a failed replayed suffix or
/// child group: the adapter's own error when the suffix itself failed
/// (with a second failure appended as `(and …)`), the adapter's error
/// prefixed `replay STAGE failed:` when another stage's adapter call
/// failed, `replay_risk_denied` for a denial, else `replay_contract`.
pub fn adapter_error_of(error: &ReplayError) -> AdapterError {
    match &error.cause {
        ReplayCause::Adapter(adapter) if error.stage == ReplayStage::Suffix => {
            let mut adapter = adapter.clone();
            if let Some(also) = &error.also {
                adapter.message = format!("{} (and {also})", adapter.message);
            }
            adapter
        }
        ReplayCause::Adapter(adapter) => AdapterError {
            message: format!(
                "replay {} failed: {}",
                error.stage.as_str(),
                adapter.message
            ),
            ..adapter.clone()
        },
        ReplayCause::RiskDenied(_) => AdapterError::new(ErrorType::RiskDenied, error.to_string()),
        _ => AdapterError::new(ErrorType::ReplayContract, error.to_string()),
    }
}

/// Where a suffix run from a group's point ran: the point, its fidelity,
/// and the trace branch the suffix appended to (events
/// `first_sequence..end_sequence`).
#[derive(Clone, Debug, PartialEq)]
pub struct SuffixSpan {
    /// The point the suffix ran from.
    pub replay_point_id: String,
    /// The point's captured fidelity.
    pub fidelity: Option<Fidelity>,
    /// The suffix's trace (empty when no trace could be forked).
    pub trace_id: String,
    /// The suffix's branch (the item's id).
    pub branch_id: String,
    /// Sequence of the suffix's first event (after the capture event).
    pub first_sequence: u64,
    /// Sequence after its last event.
    pub end_sequence: u64,
}

impl SuffixSpan {
    /// The suffix's `replay` block: the restore's record (when the restore
    /// passed), the span, and the failure's [`error_block`] as `error`.
    pub fn block(
        &self,
        restore: Option<&ReplayRestoreResult>,
        error: Option<&ReplayError>,
    ) -> Value {
        let mut block = restore
            .map(ReplayRestoreResult::to_record)
            .unwrap_or_default();
        block.insert(
            "replay_point_id".into(),
            Value::from(self.replay_point_id.clone()),
        );
        block.insert(
            "fidelity".into(),
            self.fidelity
                .map_or(Value::Null, |f| Value::from(f.as_str())),
        );
        block.insert("trace_id".into(), Value::from(self.trace_id.clone()));
        block.insert("branch_id".into(), Value::from(self.branch_id.clone()));
        block.insert("first_sequence".into(), Value::from(self.first_sequence));
        block.insert("end_sequence".into(), Value::from(self.end_sequence));
        if let Some(error) = error {
            block.insert("error".into(), error_block(error));
        }
        Value::Object(block)
    }

    /// A suffix's result as the item's record: the suffix's record with its
    /// `replay` block, or the failure ([`adapter_error_of`]) carrying the
    /// block as a record field.
    pub fn result(
        &self,
        outcome: Result<(ReplayRestoreResult, Record), ReplayError>,
    ) -> Result<Record, AdapterError> {
        match outcome {
            Ok((restore, mut record)) => {
                record.insert("replay".into(), self.block(Some(&restore), None));
                Ok(record)
            }
            Err(error) => {
                let mut failure = adapter_error_of(&error);
                failure.record_fields = Some(Box::new(replay_fields(
                    self.block(error.restore.as_deref(), Some(&error)),
                )));
                Err(failure)
            }
        }
    }
}

/// `{"replay": block}`, the record fields a failure carries.
fn replay_fields(block: Value) -> Record {
    let mut fields = Record::new();
    fields.insert("replay".into(), block);
    fields
}

/// The public intent of an item shown to the child risk policy: its
/// `variant_spec` object, or `{item_id}` for a seed (or an item whose spec
/// is not an object).
pub fn intent_of(item: &Item) -> Map<String, Value> {
    match item.get("variant_spec") {
        Some(Value::Object(spec)) => spec.clone(),
        _ => {
            let mut intent = Map::new();
            intent.insert(
                "item_id".into(),
                item.get("item_id").cloned().unwrap_or(Value::Null),
            );
            intent
        }
    }
}

/// One settled child's outcome as an item result with its `replay` block
/// (the restore's record, `parallel`, the risk verdicts or the failure's
/// `stage`/`error_type`/`risk_assessment`, the point's `fidelity`,
/// `isolated: true`, `fork` — `state` or `snapshot` —, `child_id`, the
/// point's `trace_id`, `branch_id` = the child id, and the child's
/// `first_sequence..end_sequence`), and the minutes its replay took.
pub fn child_result(
    outcome: ChildOutcome,
    point: &ReplayPoint,
    first_sequence: u64,
    fork: &str,
) -> (Result<Record, AdapterError>, f64) {
    let verdict = |assessment: &Option<RiskAssessment>| {
        assessment
            .as_ref()
            .map_or(Value::Null, RiskAssessment::to_record)
    };
    let (restore, child_id, mut extra) = match &outcome {
        ChildOutcome::Succeeded(result) => {
            let mut extra = Map::new();
            extra.insert("parallel".into(), Value::Bool(result.parallel));
            extra.insert(
                "intent_assessment".into(),
                verdict(&result.intent_assessment),
            );
            extra.insert(
                "outcome_assessment".into(),
                verdict(&result.outcome_assessment),
            );
            (&result.restore, &result.child_id, extra)
        }
        ChildOutcome::Failed(failure) => {
            let mut extra = Map::new();
            extra.insert("parallel".into(), Value::Bool(failure.parallel));
            extra.insert("stage".into(), Value::from(failure.stage.as_str()));
            extra.insert("error_type".into(), Value::from(failure.error_type.clone()));
            extra.insert("risk_assessment".into(), verdict(&failure.risk_assessment));
            (&failure.restore, &failure.child_id, extra)
        }
    };
    let mut block = restore.to_record();
    block.append(&mut extra);
    block.insert("fidelity".into(), Value::from(point.fidelity.as_str()));
    block.insert("isolated".into(), Value::Bool(true));
    block.insert("fork".into(), Value::from(fork));
    block.insert("child_id".into(), Value::from(child_id.clone()));
    block.insert(
        "trace_id".into(),
        Value::from(point.cursor.trace_id.clone()),
    );
    block.insert("branch_id".into(), Value::from(child_id.clone()));
    block.insert("first_sequence".into(), Value::from(first_sequence));
    let minutes = restore.replay_wall_minutes;
    match outcome {
        ChildOutcome::Succeeded(result) => {
            let mut record = result.outcome;
            let end = result.trace_end.unwrap_or(first_sequence);
            block.insert("end_sequence".into(), Value::from(end));
            record.insert("replay".into(), Value::Object(block));
            (Ok(record), minutes)
        }
        ChildOutcome::Failed(failure) => {
            let end = failure.trace_end.unwrap_or(first_sequence);
            block.insert("end_sequence".into(), Value::from(end));
            let mut error = failure.error;
            error.record_fields = Some(Box::new(replay_fields(Value::Object(block))));
            (Err(error), minutes)
        }
    }
}

/// The result of `item` when its whole child group failed (a fork, receipt
/// or equivalence failure): [`adapter_error_of`] the group's error, with a
/// `replay` block naming the point, its fidelity, `isolated: true`, the
/// `fork` kind, the item's id as `child_id`, and the [`error_block`]; no
/// minutes.
pub fn failed_child(
    error: &ReplayError,
    point: &ReplayPoint,
    fork: &str,
    item: &Item,
) -> (Result<Record, AdapterError>, f64) {
    let mut block = Map::new();
    block.insert(
        "replay_point_id".into(),
        Value::from(point.replay_point_id.clone()),
    );
    block.insert("fidelity".into(), Value::from(point.fidelity.as_str()));
    block.insert("isolated".into(), Value::Bool(true));
    block.insert("fork".into(), Value::from(fork));
    block.insert(
        "child_id".into(),
        item.get("item_id").cloned().unwrap_or(Value::Null),
    );
    block.insert("error".into(), error_block(error));
    let mut failure = adapter_error_of(error);
    failure.record_fields = Some(Box::new(replay_fields(Value::Object(block))));
    (Err(failure), 0.0)
}

#[cfg(test)]
#[path = "group_records_tests.rs"]
mod tests;
