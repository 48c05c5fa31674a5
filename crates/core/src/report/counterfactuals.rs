//! Counterfactual fixes: what each `sandloop counterfactual` of the run
//! did (`counterfactuals.jsonl`, one line per invocation): the hypothesis
//! and its item, the replay point its candidates ran from, and how each
//! candidate was decided, or the error that stopped the whole group.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::replay::Fidelity;
use crate::replay::durable::read_jsonl;
use crate::replay::point::field_error;

use super::error::ReportError;

/// How an evaluated candidate was decided (`replay_result.decision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Every fix target passed, no guard regressed, the restore was good
    /// enough to promote.
    Promoted,
    /// A fix target failed, a guard regressed or a validation is missing.
    Rejected,
    /// The validations passed but the restore's fidelity or equivalence
    /// does not allow promotion.
    ObservedOnly,
}

impl Decision {
    /// The label the report shows.
    pub fn label(self) -> &'static str {
        match self {
            Decision::Promoted => "promoted",
            Decision::Rejected => "rejected",
            Decision::ObservedOnly => "observed only",
        }
    }
}

/// The restore a candidate ran on (`replay_result.restore` and the
/// prefix counts beside it).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RestoreFacts {
    /// `achieved_fidelity`.
    pub achieved_fidelity: Fidelity,
    /// `equivalent`: the restored state matched the captured one.
    pub equivalent: bool,
}

/// `replay_result` of an evaluated candidate.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ReplayResultFacts {
    /// `decision`.
    pub decision: Decision,
    /// `reason`, the decision's one-line explanation.
    pub reason: String,
    /// `failed_fixes`: fix targets that still fail.
    #[serde(default)]
    pub failed_fixes: Vec<String>,
    /// `regressed_guards`: guard targets that passed before and fail now.
    #[serde(default)]
    pub regressed_guards: Vec<String>,
    /// `missing_validations`: targets the candidate's run did not report.
    #[serde(default)]
    pub missing_validations: Vec<String>,
    /// `restore`.
    pub restore: RestoreFacts,
    /// `addressed_prefix_event_count`: prefix events up to the point.
    pub addressed_prefix_event_count: u64,
    /// `verified_reused_prefix_event_count`: of those, how many the
    /// restore verified rather than reran.
    pub verified_reused_prefix_event_count: u64,
}

/// `execution_failure` of a candidate whose child did not run through.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct FailureFacts {
    /// `stage` (`intent`, `restore`, `suffix`, `outcome`, ...).
    pub stage: String,
    /// `error_type`.
    pub error_type: String,
    /// `message`.
    pub message: String,
}

/// How one candidate ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CandidateEnd {
    /// `status: evaluated`, with its `replay_result`.
    Evaluated(ReplayResultFacts),
    /// `status: execution_failed`, with its `execution_failure`.
    Failed(FailureFacts),
}

/// One candidate of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateRow {
    /// `candidate_id`.
    pub candidate_id: String,
    /// How it ended.
    pub end: CandidateEnd,
}

impl CandidateRow {
    /// Its decision, `None` when its execution failed.
    pub fn decision(&self) -> Option<Decision> {
        match &self.end {
            CandidateEnd::Evaluated(result) => Some(result.decision),
            CandidateEnd::Failed(_) => None,
        }
    }
}

/// `error` of a line whose group failed as a whole.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct GroupError {
    /// `stage`.
    pub stage: String,
    /// `type`.
    #[serde(rename = "type")]
    pub error_type: String,
    /// `message`.
    pub message: String,
}

/// One line of `counterfactuals.jsonl`.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterfactualLine {
    /// `hypothesis.hypothesis_id`.
    pub hypothesis_id: String,
    /// `hypothesis.item_id`: the failed item the hypothesis explains.
    pub item_id: String,
    /// `hypothesis.candidates[].candidate_id`, as proposed.
    pub proposed: Vec<String>,
    /// `replay_point.replay_point_id`.
    pub replay_point_id: String,
    /// `replay_point.fidelity`.
    pub fidelity: Fidelity,
    /// `restored_from`: how the point was forked (`state` or `snapshot`).
    pub restored_from: String,
    /// `group.candidates`, empty when the group failed.
    pub candidates: Vec<CandidateRow>,
    /// `error`, when the group failed as a whole.
    pub error: Option<GroupError>,
}

/// The counterfactual section of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterfactualFigures {
    /// Every line, in file order.
    pub lines: Vec<CounterfactualLine>,
    /// Distinct hypothesis ids.
    pub hypotheses: usize,
    /// Candidates run, over every line.
    pub candidates: usize,
    /// Candidates promoted, over every line.
    pub promoted: usize,
    /// Lines whose group failed as a whole.
    pub failed_groups: usize,
}

impl CounterfactualFigures {
    /// The figures of `lines`.
    pub fn of_lines(lines: Vec<CounterfactualLine>) -> Self {
        let candidates = lines.iter().map(|line| line.candidates.len()).sum();
        let promoted = lines
            .iter()
            .flat_map(|line| &line.candidates)
            .filter(|candidate| candidate.decision() == Some(Decision::Promoted))
            .count();
        let hypotheses = lines
            .iter()
            .map(|line| line.hypothesis_id.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let failed_groups = lines.iter().filter(|line| line.error.is_some()).count();
        Self {
            lines,
            hypotheses,
            candidates,
            promoted,
            failed_groups,
        }
    }
}

#[derive(Deserialize)]
struct RawLine {
    hypothesis: RawHypothesis,
    replay_point: RawPoint,
    restored_from: String,
    group: Option<RawGroup>,
    error: Option<GroupError>,
}

#[derive(Deserialize)]
struct RawHypothesis {
    hypothesis_id: String,
    item_id: String,
    #[serde(default)]
    candidates: Vec<RawProposed>,
}

#[derive(Deserialize)]
struct RawProposed {
    candidate_id: String,
}

#[derive(Deserialize)]
struct RawPoint {
    replay_point_id: String,
    fidelity: Fidelity,
}

#[derive(Deserialize)]
struct RawGroup {
    candidates: Vec<RawCandidate>,
}

#[derive(Deserialize)]
struct RawCandidate {
    candidate_id: String,
    status: String,
    replay_result: Option<ReplayResultFacts>,
    execution_failure: Option<FailureFacts>,
}

/// One line as a [`CounterfactualLine`]; the error names the field.
fn counterfactual_line(line: serde_json::Map<String, Value>) -> Result<CounterfactualLine, String> {
    let raw: RawLine =
        serde_path_to_error::deserialize(Value::Object(line)).map_err(field_error)?;
    if raw.group.is_none() && raw.error.is_none() {
        return Err("group: null without an error".to_owned());
    }
    let mut candidates = Vec::new();
    for (i, candidate) in raw.group.into_iter().flat_map(|g| g.candidates).enumerate() {
        let at = format!("group.candidates[{i}]");
        let end = match (
            candidate.status.as_str(),
            candidate.replay_result,
            candidate.execution_failure,
        ) {
            ("evaluated", Some(result), _) => CandidateEnd::Evaluated(result),
            ("evaluated", None, _) => {
                return Err(format!(
                    "{at}.replay_result: null for an evaluated candidate"
                ));
            }
            ("execution_failed", _, Some(failure)) => CandidateEnd::Failed(failure),
            ("execution_failed", _, None) => {
                return Err(format!(
                    "{at}.execution_failure: null for a failed candidate"
                ));
            }
            (other, _, _) => {
                return Err(format!(
                    "{at}.status: expected evaluated or execution_failed, found {other:?}"
                ));
            }
        };
        candidates.push(CandidateRow {
            candidate_id: candidate.candidate_id,
            end,
        });
    }
    Ok(CounterfactualLine {
        hypothesis_id: raw.hypothesis.hypothesis_id,
        item_id: raw.hypothesis.item_id,
        proposed: raw
            .hypothesis
            .candidates
            .into_iter()
            .map(|c| c.candidate_id)
            .collect(),
        replay_point_id: raw.replay_point.replay_point_id,
        fidelity: raw.replay_point.fidelity,
        restored_from: raw.restored_from,
        candidates,
        error: raw.error,
    })
}

/// Every line of the `counterfactuals.jsonl` at `path`.
///
/// Errors: the file cannot be read, or a line is not JSON or lacks a
/// field the section shows; the message names the file, the 1-based line
/// and the field.
pub fn read_counterfactuals(path: &Path) -> Result<Vec<CounterfactualLine>, ReportError> {
    let mut lines = Vec::new();
    read_jsonl(path, |line| {
        lines.push(counterfactual_line(line)?);
        Ok(())
    })
    .map_err(|error| ReportError::jsonl(path, error))?;
    Ok(lines)
}
