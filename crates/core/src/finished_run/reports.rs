//! The lines `sandloop replay` appends to `replays.jsonl`
//! ([`ReplayReport`], schema `sandloop_replay_v0`) and `sandloop
//! counterfactual` to `counterfactuals.jsonl` ([`CounterfactualReport`],
//! schema `sandloop_counterfactual_v0`), as types. Every struct here
//! declares its fields in key order, so a line is written with its keys
//! sorted at every level, as the logs have always held them (the tests
//! check it); the blocks the reference shapes (`replay_point`, `restore`,
//! `intent_assessment`, `group`) are written by their `to_record`.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::compile_cost::SnapshotCompileCost;
use crate::episode::adapter::Record;
use crate::replay::counterfactual::{CounterfactualGroupResult, CounterfactualHypothesis};
use crate::replay::durable::{DurableKind, PointLine};
use crate::replay::registry::Selection;
use crate::replay::{
    Fidelity, ReplayError, ReplayRestoreResult, RiskAssessment, RiskAssessmentRules,
};
use crate::trace::TraceEvent;

/// `schema_version` of a `replays.jsonl` line.
pub const REPLAY_SCHEMA: &str = "sandloop_replay_v0";
/// `schema_version` of a `counterfactuals.jsonl` line.
pub const COUNTERFACTUAL_SCHEMA: &str = "sandloop_counterfactual_v0";

/// A failure as the logs hold it: its `message`, `stage` and `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorFields {
    /// The error's whole message.
    pub message: String,
    /// Where it failed (`capture`, `restore`, `suffix`, …).
    pub stage: &'static str,
    /// Its type (`trap`, `timeout`, `risk_denied`, …).
    #[serde(rename = "type")]
    pub error_type: String,
}

impl From<&ReplayError> for ErrorFields {
    fn from(error: &ReplayError) -> Self {
        Self {
            message: error.to_string(),
            stage: error.stage.as_str(),
            error_type: error.cause.error_type().to_string(),
        }
    }
}

/// How the point was chosen: [`Selection`]'s two flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SelectionFields {
    /// No point met the minimum; the nearest weaker one was taken.
    pub fidelity_fallback: bool,
    /// A nearer point was skipped for its weaker fidelity.
    pub fidelity_filtered: bool,
}

impl From<&Selection> for SelectionFields {
    fn from(selection: &Selection) -> Self {
        Self {
            fidelity_fallback: selection.fidelity_fallback,
            fidelity_filtered: selection.fidelity_filtered,
        }
    }
}

/// What the item's record in the run said: each field as the record held
/// it, `null` when absent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OriginalOutcome {
    /// The record's `accepted`.
    pub accepted: Option<Value>,
    /// The record's `adapter_error`.
    pub adapter_error: Option<Value>,
    /// The record's `execution_status`.
    pub execution_status: Option<Value>,
}

impl OriginalOutcome {
    /// The three fields of `record`.
    pub fn of(record: &Record) -> Self {
        let field = |key: &str| record.get(key).cloned();
        Self {
            accepted: field("accepted"),
            adapter_error: field("adapter_error"),
            execution_status: field("execution_status"),
        }
    }

    /// The failure's type in the run (`adapter_error.type`), or `None`
    /// when the item succeeded there.
    pub fn failure_type(&self) -> Option<&str> {
        self.adapter_error.as_ref()?.get("type")?.as_str()
    }
}

/// A replay's `outcome`: `{"record": …}` or `{"error": …}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ReplayOutcome {
    /// The suffix ran; its record.
    Record {
        /// The record, as the run would have written it.
        record: Record,
    },
    /// The restore or the suffix failed.
    Error {
        /// Why.
        error: ErrorFields,
    },
}

/// One `replays.jsonl` line: an item of a finished run run again from a
/// durable replay point (`sandloop replay`).
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The group the item ran in.
    pub execution_group_id: String,
    /// The sequence the point had to lie at or before; `None` for the
    /// item's end.
    pub first_affected_sequence: Option<u64>,
    /// Minutes to adopt the point into a fresh instance.
    pub import_minutes: f64,
    /// The adapter's verdict on the item's intent, when it screens one.
    #[serde(serialize_with = "assessment_record")]
    pub intent_assessment: Option<RiskAssessment>,
    /// The replayed item.
    pub item_id: String,
    /// The replay's counters (the run's metric names).
    pub metrics: Map<String, Value>,
    /// The weakest fidelity asked for.
    pub minimum_fidelity: Fidelity,
    /// What the item's record in the run said.
    pub original: OriginalOutcome,
    /// The new record, or the failure.
    pub outcome: ReplayOutcome,
    /// The adapter's failure to release the point, when it failed.
    pub release_error: Option<ErrorFields>,
    /// The point restored (its `replay-points.jsonl` line).
    #[serde(serialize_with = "point_record")]
    pub replay_point: PointLine,
    /// Minutes from the log's opening to the report.
    pub replay_wall_minutes: f64,
    /// The restore's fidelity, equivalence and timings, when it ran.
    #[serde(serialize_with = "restore_record")]
    pub restore: Option<ReplayRestoreResult>,
    /// Whether the point was a state or a snapshot.
    pub restored_from: DurableKind,
    /// [`REPLAY_SCHEMA`].
    pub schema_version: &'static str,
    /// How the point was chosen.
    pub selection: SelectionFields,
    /// What loading a snapshot point cost.
    pub snapshot_compile: Option<SnapshotCompileCost>,
    /// Whether the suffix ran to a record.
    pub succeeded: bool,
    /// The events the suffix traced, on branch `replay-N:ITEM`.
    pub trace_events: Vec<TraceEvent>,
}

/// One `counterfactuals.jsonl` line: a hypothesis's candidates run as
/// children of a durable point (`sandloop counterfactual`).
#[derive(Clone, Debug, Serialize)]
pub struct CounterfactualReport {
    /// Children run at once.
    pub child_workers: usize,
    /// Why the group could not run, when it could not.
    pub error: Option<ErrorFields>,
    /// The group of the point.
    pub execution_group_id: String,
    /// Each candidate's result, when the group ran.
    #[serde(serialize_with = "group_record")]
    pub group: Option<CounterfactualGroupResult>,
    /// The hypothesis, as the file gave it (without the candidates'
    /// intents, which the adapter's policy saw).
    #[serde(serialize_with = "hypothesis_record")]
    pub hypothesis: CounterfactualHypothesis,
    /// The group's counters.
    pub metrics: Map<String, Value>,
    /// The ids of the promoted candidates.
    pub promoted: Vec<String>,
    /// The adapter's failure to release the point, when it failed.
    pub release_error: Option<ErrorFields>,
    /// The point the candidates forked from.
    #[serde(serialize_with = "point_record")]
    pub replay_point: PointLine,
    /// Whether the point was a state or a snapshot.
    pub restored_from: DurableKind,
    /// [`COUNTERFACTUAL_SCHEMA`].
    pub schema_version: &'static str,
    /// How the point was chosen.
    pub selection: SelectionFields,
    /// What loading a snapshot point cost.
    pub snapshot_compile: Option<SnapshotCompileCost>,
    /// Minutes from the log's opening to the report.
    pub wall_minutes: f64,
}

fn point_record<S: Serializer>(line: &PointLine, out: S) -> Result<S::Ok, S::Error> {
    line.to_record().serialize(out)
}

fn restore_record<S: Serializer>(
    restore: &Option<ReplayRestoreResult>,
    out: S,
) -> Result<S::Ok, S::Error> {
    restore
        .as_ref()
        .map(ReplayRestoreResult::to_record)
        .serialize(out)
}

fn assessment_record<S: Serializer>(
    assessment: &Option<RiskAssessment>,
    out: S,
) -> Result<S::Ok, S::Error> {
    assessment
        .as_ref()
        .map(RiskAssessment::to_record)
        .serialize(out)
}

fn group_record<S: Serializer>(
    group: &Option<CounterfactualGroupResult>,
    out: S,
) -> Result<S::Ok, S::Error> {
    group
        .as_ref()
        .map(CounterfactualGroupResult::to_record)
        .serialize(out)
}

/// A validation target as the line records it.
#[derive(Serialize)]
struct TargetLine<'a> {
    baseline_passed: bool,
    validation_id: &'a str,
}

/// A candidate as the line records it.
#[derive(Serialize)]
struct CandidateLine<'a> {
    candidate_id: &'a str,
    public_change_set: &'a Map<String, Value>,
    target_branch_id: &'a str,
}

fn target_lines(set: &[crate::replay::counterfactual::ValidationTarget]) -> Vec<TargetLine<'_>> {
    set.iter()
        .map(|target| TargetLine {
            baseline_passed: target.baseline_passed,
            validation_id: &target.validation_id,
        })
        .collect()
}

/// The hypothesis as the line records it.
#[derive(Serialize)]
struct HypothesisLine<'a> {
    candidates: Vec<CandidateLine<'a>>,
    epoch: Option<u32>,
    first_affected_event_id: &'a str,
    first_affected_sequence: u64,
    fix_set: Vec<TargetLine<'a>>,
    guard_set: Vec<TargetLine<'a>>,
    hypothesis_id: &'a str,
    item_id: &'a str,
    minimum_fidelity: Fidelity,
}

fn hypothesis_record<S: Serializer>(
    hypothesis: &CounterfactualHypothesis,
    out: S,
) -> Result<S::Ok, S::Error> {
    HypothesisLine {
        candidates: hypothesis
            .candidates
            .iter()
            .map(|candidate| CandidateLine {
                candidate_id: &candidate.candidate_id,
                public_change_set: &candidate.public_change_set,
                target_branch_id: &candidate.target_branch_id,
            })
            .collect(),
        epoch: hypothesis.epoch,
        first_affected_event_id: &hypothesis.first_affected_event_id,
        first_affected_sequence: hypothesis.first_affected_sequence,
        fix_set: target_lines(&hypothesis.fix_set),
        guard_set: target_lines(&hypothesis.guard_set),
        hypothesis_id: &hypothesis.hypothesis_id,
        item_id: &hypothesis.item_id,
        minimum_fidelity: hypothesis.minimum_fidelity,
    }
    .serialize(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::replay::point::Lifecycle;

    /// Written as a type, the line is the same bytes as its value with
    /// every object's keys sorted: the declared field order is key order
    /// at every level.
    fn keys_are_sorted(line: &impl Serialize) {
        let typed = serde_json::to_string(line).unwrap();
        let sorted = serde_json::to_string(&serde_json::to_value(line).unwrap()).unwrap();
        assert_eq!(typed, sorted);
    }

    fn error() -> ReplayError {
        ReplayError::new(
            crate::replay::ReplayStage::Suffix,
            crate::replay::ReplayCause::Contract("the suffix broke its contract".into()),
        )
    }

    #[test]
    fn a_replay_line_is_written_in_key_order_with_the_reference_blocks() {
        let record: Record = json!({"item_id": "doc", "accepted": false,
            "adapter_error": {"type": "trap"}})
        .as_object()
        .unwrap()
        .clone();
        let mut report = ReplayReport {
            execution_group_id: "main:epoch-1:group-0000".into(),
            first_affected_sequence: None,
            import_minutes: 0.5,
            intent_assessment: None,
            item_id: "doc".into(),
            metrics: Map::new(),
            minimum_fidelity: Fidelity::SemanticEquivalent,
            original: OriginalOutcome::of(&record),
            outcome: ReplayOutcome::Record {
                record: record.clone(),
            },
            release_error: Some(ErrorFields::from(&error())),
            replay_point: crate::replay::durable::tests::line("rp-1", Lifecycle::Ready),
            replay_wall_minutes: 1.0,
            restore: None,
            restored_from: DurableKind::State,
            schema_version: REPLAY_SCHEMA,
            selection: SelectionFields {
                fidelity_fallback: true,
                fidelity_filtered: false,
            },
            snapshot_compile: Some(SnapshotCompileCost {
                compile_ms: 2.0,
                instrument_ms: 1.0,
                instrumented_cache: crate::compile_cost::CacheOutcome::Hit,
            }),
            succeeded: true,
            trace_events: Vec::new(),
        };
        keys_are_sorted(&report);
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["outcome"], json!({"record": record}));
        assert_eq!(value["minimum_fidelity"], "semantic_equivalent");
        assert_eq!(value["first_affected_sequence"], Value::Null);
        assert_eq!(value["replay_point"]["replay_point_id"], "rp-1");
        assert_eq!(value["release_error"]["stage"], "suffix");
        assert_eq!(value["release_error"]["type"], "replay_contract");
        assert_eq!(report.original.failure_type(), Some("trap"));

        report.outcome = ReplayOutcome::Error {
            error: ErrorFields::from(&error()),
        };
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value["outcome"]["error"]["message"],
            error().to_string(),
            "{value}"
        );
    }

    #[test]
    fn a_counterfactual_line_records_the_hypothesis_without_its_intents() {
        let hypothesis = CounterfactualHypothesis::parse(
            &json!({
                "hypothesis_id": "h1", "item_id": "doc",
                "first_affected_event_id": "g/doc/2", "first_affected_sequence": 2,
                "fix_set": [{"validation_id": "parses", "baseline_passed": false}],
                "guard_set": [{"validation_id": "links", "baseline_passed": true}],
                "candidates": [{"candidate_id": "good", "public_change_set": {"escape": "html"},
                                "intent": {"why": "x"}}],
            })
            .to_string(),
            Path::new("H.json"),
        )
        .unwrap();
        let report = CounterfactualReport {
            child_workers: 2,
            error: Some(ErrorFields::from(&error())),
            execution_group_id: "g".into(),
            group: None,
            hypothesis,
            metrics: Map::new(),
            promoted: vec![],
            release_error: None,
            replay_point: crate::replay::durable::tests::line("rp-1", Lifecycle::Ready),
            restored_from: DurableKind::Snapshot,
            schema_version: COUNTERFACTUAL_SCHEMA,
            selection: SelectionFields {
                fidelity_fallback: false,
                fidelity_filtered: true,
            },
            snapshot_compile: None,
            wall_minutes: 0.1,
        };
        keys_are_sorted(&report);
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value["hypothesis"]["candidates"],
            json!([{"candidate_id": "good", "public_change_set": {"escape": "html"},
                    "target_branch_id": "counterfactual-good"}])
        );
        assert_eq!(value["hypothesis"]["epoch"], Value::Null);
        assert_eq!(value["restored_from"], "snapshot");
        assert_eq!(value["group"], Value::Null);
    }
}
