//! The shapes of a counterfactual candidate's run: the request the child
//! gets and the validation outcomes it reports. Mirror
//! `CounterfactualReplayRequest` and `ValidationOutcome` of the reference's
//! `counterfactual_runtime.py`.

use serde::{Deserialize, Serialize};

/// What a counterfactual child is asked to do (WIT
/// `counterfactual.counterfactual-request`, reference
/// `CounterfactualReplayRequest`): apply `public_change_set` and run the
/// failed item's suffix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterfactualRequest {
    /// The hypothesis the candidate belongs to.
    pub hypothesis_id: String,
    /// The candidate; the child's `child_id` too.
    pub candidate_id: String,
    /// The replay point the child was forked from.
    pub replay_point_id: String,
    /// The first trace event the failure affected.
    pub first_affected_event_id: String,
    /// That event's sequence on its trace.
    pub first_affected_sequence: u64,
    /// The change, as JSON text of one public-safe object.
    pub public_change_set: String,
}

/// One validation target's result (WIT `counterfactual.validation-outcome`,
/// reference `ValidationOutcome`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationOutcome {
    /// The target's id; non-blank, unique within one candidate's outcomes.
    pub validation_id: String,
    /// Whether the target passed with the change applied.
    pub passed: bool,
    /// Public-safe text (no absolute paths, no forbidden keys).
    pub public_summary: Option<String>,
}
