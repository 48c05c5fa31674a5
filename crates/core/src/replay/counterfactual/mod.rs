//! Counterfactual fixes (reference `counterfactual_runtime.py`): a
//! hypothesis names a failed item, the first trace event its failure
//! affected, the validation targets that must start passing (`fix_set`)
//! and those that must keep passing (`guard_set`), and candidate changes.
//! Each candidate runs as an isolated child of the nearest trusted replay
//! point before that event, with its change applied, and is promoted only
//! when every fix passes and no guard regresses on a restore eligible for
//! promotion.
//!
//! - `hypothesis`: the hypothesis file and the reference's
//!   `__post_init__` rules;
//! - `outcomes`: the checks on what a candidate reports;
//! - `evaluate`: the promotion rules (`evaluate_counterfactual_candidate`)
//!   and the result records (`to_record` shapes);
//! - `run_files`: the run directory's side: the item's addressable trace
//!   from `traces/`, and `counterfactuals.jsonl`.
//!
//! Nothing here runs a component; `sandloop counterfactual` forks and runs
//! the children through [`ReplayPointRegistry::run_child_group_from`](super::ReplayPointRegistry::run_child_group_from).

pub(crate) mod evaluate;
pub(crate) mod hypothesis;
pub(crate) mod outcomes;
pub(crate) mod run_files;

pub use evaluate::{
    AddressableTrace, CandidateResult, CounterfactualDecision, CounterfactualGroupResult,
    CounterfactualReplayResult, candidate_tasks, evaluate_candidate, settle_group,
};
pub use hypothesis::{
    CounterfactualCandidate, CounterfactualHypothesis, HypothesisError, ValidationTarget,
};
pub use outcomes::{check_validation_outcomes, validation_outcomes_record};
pub use run_files::{COUNTERFACTUALS_FILE, read_addressable_trace};

#[cfg(test)]
mod tests;
