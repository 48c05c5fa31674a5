//! The promotion rules of a counterfactual candidate (reference
//! `evaluate_counterfactual_candidate` and the second half of
//! `run_counterfactual_child_group`), the child tasks a hypothesis becomes,
//! and the result records in the reference's `to_record` shapes.

use serde_json::{Map, Value, json};

use super::super::point::{ReplayPoint, ReplayRestoreResult};
use super::super::registry::{
    ChildFailure, ChildOutcome, ChildResult, ChildTask, RiskAssessmentRules,
};
use super::hypothesis::CounterfactualHypothesis;
use super::outcomes::outcome_record;
use crate::episode::adapter::Item;
use sandloop_contract::{CounterfactualRequest, ValidationOutcome};

/// A candidate's decision (reference `CounterfactualDecision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterfactualDecision {
    /// Every fix passed and no guard regressed, on a promotion-eligible
    /// restore.
    Promoted,
    /// A validation is missing, a fix still fails or a guard regressed.
    Rejected,
    /// The restore is not eligible for promotion (too weak a fidelity, or
    /// not verified equivalent): the outcomes are only observations.
    ObservedOnly,
}

impl CounterfactualDecision {
    /// `promoted`, `rejected` or `observed_only`.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterfactualDecision::Promoted => "promoted",
            CounterfactualDecision::Rejected => "rejected",
            CounterfactualDecision::ObservedOnly => "observed_only",
        }
    }
}

/// The trace a hypothesis addresses (the reference's `TraceLog` as
/// `evaluate_counterfactual_candidate` reads it): its id, its lineage of
/// branches — the failed item's branch and, for an item that ran as a
/// child, the branch it forked from — and the `(event_id, sequence)` of
/// their events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressableTrace {
    /// The trace (the episode group's id).
    pub trace_id: String,
    /// The branches events and points may lie on.
    pub branches: Vec<String>,
    /// Events of those branches: id and sequence.
    pub events: Vec<(String, u64)>,
}

impl AddressableTrace {
    /// The sequence of event `event_id`, if the trace has it (reference
    /// `TraceLog.event`).
    pub fn sequence_of(&self, event_id: &str) -> Option<u64> {
        self.events
            .iter()
            .find(|(id, _)| id == event_id)
            .map(|(_, sequence)| *sequence)
    }

    /// The reference's check that the hypothesis addresses this trace: its
    /// first affected event is on it, at the sequence it says.
    ///
    /// Errors: which of the two fails.
    pub fn check_addressed(&self, hypothesis: &CounterfactualHypothesis) -> Result<(), String> {
        let Some(sequence) = self.sequence_of(&hypothesis.first_affected_event_id) else {
            return Err(format!(
                "first_affected_event_id: {:?} is not an event of trace {:?} on branch {}",
                hypothesis.first_affected_event_id,
                self.trace_id,
                self.branches
                    .iter()
                    .map(|branch| format!("{branch:?}"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        };
        if sequence != hypothesis.first_affected_sequence {
            return Err(format!(
                "first_affected_sequence: first affected event sequence does not match the addressable trace \
                 ({:?} has sequence {sequence}, the hypothesis says {})",
                hypothesis.first_affected_event_id, hypothesis.first_affected_sequence
            ));
        }
        Ok(())
    }
}

/// One evaluated candidate (reference `CounterfactualReplayResult`).
#[derive(Clone, Debug)]
pub struct CounterfactualReplayResult {
    /// The hypothesis.
    pub hypothesis_id: String,
    /// The candidate.
    pub candidate_id: String,
    /// The point its child was forked from.
    pub replay_point_id: String,
    /// The child's restore.
    pub restore: ReplayRestoreResult,
    /// The decision.
    pub decision: CounterfactualDecision,
    /// What the candidate reported, in its order.
    pub outcomes: Vec<ValidationOutcome>,
    /// Fix and guard ids it did not report.
    pub missing_validations: Vec<String>,
    /// Fix targets that still fail.
    pub failed_fixes: Vec<String>,
    /// Guard targets that now fail.
    pub regressed_guards: Vec<String>,
    /// Events before the point: addressed without running them again.
    pub addressed_prefix_event_count: u64,
    /// The same, when the adapter says it reused the prefix state; else 0.
    pub verified_reused_prefix_event_count: u64,
    /// Events between the point and the first affected event.
    pub replay_distance_events: u64,
    /// Why, in the reference's words.
    pub reason: &'static str,
}

impl CounterfactualReplayResult {
    /// True when promoted (reference `promoted`).
    pub fn promoted(&self) -> bool {
        self.decision == CounterfactualDecision::Promoted
    }

    /// The reference's `to_record` shape (with its compatibility field
    /// `avoided_prefix_event_count`, equal to the addressed count).
    pub fn to_record(&self) -> Value {
        json!({
            "hypothesis_id": self.hypothesis_id,
            "candidate_id": self.candidate_id,
            "replay_point_id": self.replay_point_id,
            "restore": self.restore.to_record(),
            "decision": self.decision.as_str(),
            "outcomes": self.outcomes.iter().map(outcome_record).collect::<Vec<_>>(),
            "missing_validations": self.missing_validations,
            "failed_fixes": self.failed_fixes,
            "regressed_guards": self.regressed_guards,
            "addressed_prefix_event_count": self.addressed_prefix_event_count,
            "avoided_prefix_event_count": self.addressed_prefix_event_count,
            "verified_reused_prefix_event_count": self.verified_reused_prefix_event_count,
            "replay_distance_events": self.replay_distance_events,
            "reason": self.reason,
        })
    }
}

/// Decide one candidate that ran on a child of `point` (reference
/// `evaluate_counterfactual_candidate`): the hypothesis must address
/// `trace`, the point must be on it — same trace, a branch of its lineage,
/// at or before the first affected event — and `restore` must be the
/// point's. Then: `observed_only` when the restore is not promotion
/// eligible; else `rejected` when an outcome is missing, a fix still fails
/// or a guard regressed (checked in that order); else `promoted`.
///
/// Errors: the broken precondition, in the reference's words.
pub fn evaluate_candidate(
    trace: &AddressableTrace,
    hypothesis: &CounterfactualHypothesis,
    candidate_id: &str,
    point: &ReplayPoint,
    restore: &ReplayRestoreResult,
    outcomes: &[ValidationOutcome],
) -> Result<CounterfactualReplayResult, String> {
    trace.check_addressed(hypothesis)?;
    if point.cursor.trace_id != trace.trace_id {
        return Err("ReplayPoint trace does not match the hypothesis trace".into());
    }
    if !trace.branches.contains(&point.cursor.branch_id) {
        return Err("ReplayPoint branch does not match the hypothesis trace".into());
    }
    if point.cursor.next_sequence > hypothesis.first_affected_sequence {
        return Err("ReplayPoint must precede the first affected event".into());
    }
    if restore.replay_point_id != point.replay_point_id {
        return Err("restore result does not belong to the ReplayPoint".into());
    }
    let passed = |id: &str| {
        outcomes
            .iter()
            .find(|outcome| outcome.validation_id == id)
            .map(|outcome| outcome.passed)
    };
    let missing: Vec<String> = hypothesis
        .required_validation_ids()
        .filter(|id| passed(id).is_none())
        .map(str::to_string)
        .collect();
    let still_failing = |set: &[super::ValidationTarget]| -> Vec<String> {
        set.iter()
            .filter(|target| passed(&target.validation_id) == Some(false))
            .map(|target| target.validation_id.clone())
            .collect()
    };
    let failed_fixes = still_failing(&hypothesis.fix_set);
    let regressed_guards = still_failing(&hypothesis.guard_set);
    let (decision, reason) = if !restore.promotion_eligible {
        (
            CounterfactualDecision::ObservedOnly,
            "restore fidelity or equivalence is insufficient for promotion",
        )
    } else if !missing.is_empty() {
        (
            CounterfactualDecision::Rejected,
            "required validation outcomes are missing",
        )
    } else if !failed_fixes.is_empty() {
        (
            CounterfactualDecision::Rejected,
            "one or more fix targets remain failing",
        )
    } else if !regressed_guards.is_empty() {
        (
            CounterfactualDecision::Rejected,
            "one or more guard targets regressed",
        )
    } else {
        (
            CounterfactualDecision::Promoted,
            "all fix targets passed and no guard target regressed",
        )
    };
    let addressed = point.cursor.next_sequence;
    Ok(CounterfactualReplayResult {
        hypothesis_id: hypothesis.hypothesis_id.clone(),
        candidate_id: candidate_id.to_string(),
        replay_point_id: point.replay_point_id.clone(),
        restore: restore.clone(),
        decision,
        outcomes: outcomes.to_vec(),
        missing_validations: missing,
        failed_fixes,
        regressed_guards,
        addressed_prefix_event_count: addressed,
        verified_reused_prefix_event_count: if restore.prefix_reused == Some(true) {
            addressed
        } else {
            0
        },
        replay_distance_events: hypothesis
            .first_affected_sequence
            .saturating_sub(point.cursor.next_sequence),
        reason,
    })
}

/// The child tasks of `hypothesis`'s candidates, forked from `point` and
/// each running `item` (the failed item) with its change (reference
/// `run_counterfactual_child_group`'s `task_for`).
pub fn candidate_tasks(
    hypothesis: &CounterfactualHypothesis,
    point: &ReplayPoint,
    item: &Item,
) -> Vec<ChildTask> {
    hypothesis
        .candidates
        .iter()
        .map(|candidate| ChildTask {
            child_id: candidate.candidate_id.clone(),
            target_branch_id: candidate.target_branch_id.clone(),
            minimum_fidelity: hypothesis.minimum_fidelity,
            item: item.clone(),
            intent: candidate.intent.clone(),
            counterfactual: Some(CounterfactualRequest {
                hypothesis_id: hypothesis.hypothesis_id.clone(),
                candidate_id: candidate.candidate_id.clone(),
                replay_point_id: point.replay_point_id.clone(),
                first_affected_event_id: hypothesis.first_affected_event_id.clone(),
                first_affected_sequence: hypothesis.first_affected_sequence,
                public_change_set: Value::Object(candidate.public_change_set.clone()).to_string(),
            }),
        })
        .collect()
}

/// One candidate of a settled group (reference
/// `CounterfactualChildCandidateResult`): evaluated, or failed before it
/// could be (its intent denied, its suffix failed, its outcomes broke the
/// contract).
#[derive(Clone, Debug)]
pub enum CandidateResult {
    /// It ran and was decided.
    Evaluated {
        /// The decision.
        replay: Box<CounterfactualReplayResult>,
        /// How its child ran.
        execution: Box<ChildResult>,
    },
    /// It failed safely; its siblings are unaffected.
    ExecutionFailed(Box<ChildFailure>),
}

impl CandidateResult {
    /// The candidate's id.
    pub fn candidate_id(&self) -> &str {
        match self {
            CandidateResult::Evaluated { replay, .. } => &replay.candidate_id,
            CandidateResult::ExecutionFailed(failure) => &failure.child_id,
        }
    }

    /// Its decision, when evaluated.
    pub fn decision(&self) -> Option<CounterfactualDecision> {
        match self {
            CandidateResult::Evaluated { replay, .. } => Some(replay.decision),
            CandidateResult::ExecutionFailed(_) => None,
        }
    }

    /// Its verdict for a reader: the decision (`execution_failed` for a
    /// candidate that failed before it could be decided) and why — the
    /// decision's reason with the validations missing, the fixes still
    /// failing and the guards regressed, and a restore not eligible for
    /// promotion; or the failure's type, stage, message and the risk
    /// policy's reason.
    pub fn verdict(&self) -> (&'static str, String) {
        match self {
            CandidateResult::Evaluated { replay, .. } => {
                let mut why = replay.reason.to_string();
                let listed = |label: &str, ids: &[String]| {
                    (!ids.is_empty()).then(|| format!("{label}: {}", ids.join(", ")))
                };
                let details: Vec<String> = [
                    listed("missing", &replay.missing_validations),
                    listed("still failing", &replay.failed_fixes),
                    listed("regressed", &replay.regressed_guards),
                ]
                .into_iter()
                .flatten()
                .collect();
                if !details.is_empty() {
                    why.push_str(&format!(" ({})", details.join("; ")));
                }
                if !replay.restore.promotion_eligible {
                    why.push_str(&format!(
                        " ({} restore, {})",
                        replay.restore.achieved_fidelity,
                        if replay.restore.equivalent {
                            "verified"
                        } else {
                            "not verified"
                        }
                    ));
                }
                (replay.decision.as_str(), why)
            }
            CandidateResult::ExecutionFailed(failure) => {
                let mut why = format!(
                    "{} at {}: {}",
                    failure.error_type,
                    failure.stage.as_str(),
                    failure.error.message
                );
                if let Some(reason) = failure
                    .risk_assessment
                    .as_ref()
                    .and_then(|assessment| assessment.sanitized_reason.as_deref())
                {
                    why.push_str(&format!(" ({reason})"));
                }
                ("execution_failed", why)
            }
        }
    }

    /// The reference's `to_record` shape: `candidate_id`, `status`
    /// (`evaluated` or `execution_failed`), `replay_result`,
    /// `execution_result`, `execution_failure`.
    pub fn to_record(&self) -> Value {
        match self {
            CandidateResult::Evaluated { replay, execution } => json!({
                "candidate_id": replay.candidate_id,
                "status": "evaluated",
                "replay_result": replay.to_record(),
                "execution_result": execution_record(execution),
                "execution_failure": null,
            }),
            CandidateResult::ExecutionFailed(failure) => json!({
                "candidate_id": failure.child_id,
                "status": "execution_failed",
                "replay_result": null,
                "execution_result": null,
                "execution_failure": failure_record(failure),
            }),
        }
    }
}

/// Reference `ReplayChildExecutionResult.to_record`.
fn execution_record(result: &ChildResult) -> Value {
    json!({
        "child_id": result.child_id,
        "restore": result.restore.to_record(),
        "isolated": result.isolated,
        "parallel": result.parallel,
        "intent_assessment": result.intent_assessment.as_ref().map(RiskAssessmentRules::to_record),
        "outcome_assessment": result.outcome_assessment.as_ref().map(RiskAssessmentRules::to_record),
    })
}

/// Reference `ReplayChildExecutionFailure.to_record`, with the error's
/// message (sandloop's addition: the reference keeps the exception
/// object).
fn failure_record(failure: &ChildFailure) -> Value {
    json!({
        "child_id": failure.child_id,
        "restore": failure.restore.to_record(),
        "stage": failure.stage.as_str(),
        "error_type": failure.error_type,
        "message": failure.error.message,
        "isolated": failure.isolated,
        "parallel": failure.parallel,
        "risk_assessment": failure.risk_assessment.as_ref().map(RiskAssessmentRules::to_record),
    })
}

/// A hypothesis's settled group (reference
/// `CounterfactualChildGroupResult`).
#[derive(Clone, Debug)]
pub struct CounterfactualGroupResult {
    /// The hypothesis.
    pub hypothesis_id: String,
    /// The point every candidate forked from.
    pub replay_point_id: String,
    /// One per candidate, in the hypothesis's order.
    pub candidates: Vec<CandidateResult>,
    /// Whether more than one child worker was asked for.
    pub parallel_requested: bool,
}

impl CounterfactualGroupResult {
    /// The ids of the promoted candidates.
    pub fn promoted(&self) -> Vec<&str> {
        self.candidates
            .iter()
            .filter(|c| matches!(c, CandidateResult::Evaluated { replay, .. } if replay.promoted()))
            .map(CandidateResult::candidate_id)
            .collect()
    }

    /// The reference's `to_record` shape.
    pub fn to_record(&self) -> Map<String, Value> {
        let evaluated = self
            .candidates
            .iter()
            .filter(|c| c.decision().is_some())
            .count();
        match json!({
            "hypothesis_id": self.hypothesis_id,
            "replay_point_id": self.replay_point_id,
            "parallel_requested": self.parallel_requested,
            "candidate_count": self.candidates.len(),
            "evaluated_count": evaluated,
            "execution_failure_count": self.candidates.len() - evaluated,
            "candidates": self.candidates.iter().map(CandidateResult::to_record).collect::<Vec<_>>(),
        }) {
            Value::Object(record) => record,
            _ => unreachable!("an object literal"),
        }
    }
}

/// Evaluate a settled group's children (reference
/// `run_counterfactual_child_group` after the group ran): every child that
/// ran is decided by [`evaluate_candidate`] from its validation outcomes;
/// a failed child is recorded as such.
///
/// Errors: a precondition of [`evaluate_candidate`], or a child that ran
/// without validation outcomes (it was not a counterfactual task).
pub fn settle_group(
    trace: &AddressableTrace,
    hypothesis: &CounterfactualHypothesis,
    point: &ReplayPoint,
    settled: Vec<ChildOutcome>,
    parallel_requested: bool,
) -> Result<CounterfactualGroupResult, String> {
    let mut candidates = Vec::with_capacity(settled.len());
    for outcome in settled {
        candidates.push(match outcome {
            ChildOutcome::Failed(failure) => CandidateResult::ExecutionFailed(Box::new(failure)),
            ChildOutcome::Succeeded(result) => {
                let outcomes = result.validations.as_deref().ok_or_else(|| {
                    format!(
                        "child {:?} ran without validation outcomes",
                        result.child_id
                    )
                })?;
                let replay = evaluate_candidate(
                    trace,
                    hypothesis,
                    &result.child_id,
                    point,
                    &result.restore,
                    outcomes,
                )?;
                CandidateResult::Evaluated {
                    replay: Box::new(replay),
                    execution: Box::new(result),
                }
            }
        });
    }
    Ok(CounterfactualGroupResult {
        hypothesis_id: hypothesis.hypothesis_id.clone(),
        replay_point_id: point.replay_point_id.clone(),
        candidates,
        parallel_requested,
    })
}
