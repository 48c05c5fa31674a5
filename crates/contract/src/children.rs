//! The shapes of an isolated child group: the fork request, a child's
//! declared concurrency, and the risk policy's verdicts. Mirrors
//! `ForkReplayChildRequest`, `ReplayChildConcurrency`,
//! `ReplayRiskDisposition` and `ReplayRiskAssessment` of the reference's
//! `child_replay_runtime.py`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Fidelity;

/// The request to fork one isolated replay child (WIT
/// `replay-children.fork-request`, reference `ForkReplayChildRequest`).
///
/// The host forks every child into a fresh component instance; the child's
/// state arrives next to this request as the bytes the parent's
/// `export-state` produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRequest {
    /// The replay point the child is forked from.
    pub replay_point_id: String,
    /// Unique within the group; sandloop uses the task item's `item_id`.
    /// The `child-risk` calls name the child by it.
    pub child_id: String,
    /// The branch the child's task runs on.
    pub target_branch_id: String,
    /// The weakest fidelity the host will promote (never
    /// [`Fidelity::NonReplayable`]).
    pub minimum_fidelity: Fidelity,
}

/// What the adapter declares about running a child beside its siblings
/// (WIT `replay-children.child-concurrency`, reference
/// `ReplayChildConcurrency`).
///
/// Every child is its own sandbox, so [`ThreadSafe`](Self::ThreadSafe) and
/// [`ProcessIsolated`](Self::ProcessIsolated) both let the host run it in
/// parallel; one [`SerialOnly`](Self::SerialOnly) child makes the whole
/// group serial. The default is `SerialOnly`, as in the reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildConcurrency {
    /// The child must not run beside its siblings.
    #[default]
    SerialOnly,
    /// The child may run beside its siblings.
    ThreadSafe,
    /// The child runs in its own process (sandloop: its own instance); may
    /// run in parallel, and needs its own worker identity.
    ProcessIsolated,
}

impl ChildConcurrency {
    /// The reference's spelling (`"serial_only"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ChildConcurrency::SerialOnly => "serial_only",
            ChildConcurrency::ThreadSafe => "thread_safe",
            ChildConcurrency::ProcessIsolated => "process_isolated",
        }
    }

    /// True when the host may run the child in parallel with its siblings.
    pub fn allows_parallel(self) -> bool {
        !matches!(self, ChildConcurrency::SerialOnly)
    }
}

impl fmt::Display for ChildConcurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A risk policy's verdict (WIT `child-risk.disposition`, reference
/// `ReplayRiskDisposition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// The child may go on.
    Allow,
    /// A denied intent never runs; a denied outcome quarantines the point.
    Deny,
}

impl Disposition {
    /// `"allow"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Allow => "allow",
            Disposition::Deny => "deny",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One risk assessment of a child's intent or outcome (WIT
/// `child-risk.risk-assessment`, reference `ReplayRiskAssessment`).
/// Serialises as the reference's `to_record` shape: `{"disposition",
/// "policy_id", "sanitized_reason"}`.
///
/// `policy_id` must be non-empty and `sanitized_reason` public-safe (no
/// absolute paths); the host validates both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskAssessment {
    /// The verdict.
    pub disposition: Disposition,
    /// Which policy decided, e.g. `edit-size-budget`.
    pub policy_id: String,
    /// Public-safe reason.
    pub sanitized_reason: Option<String>,
}

impl RiskAssessment {
    /// `policy` allows, without a reason.
    pub fn allow(policy: impl Into<String>) -> Self {
        RiskAssessment {
            disposition: Disposition::Allow,
            policy_id: policy.into(),
            sanitized_reason: None,
        }
    }
    /// `policy` denies, saying why.
    pub fn deny(policy: impl Into<String>, reason: impl Into<String>) -> Self {
        RiskAssessment {
            disposition: Disposition::Deny,
            policy_id: policy.into(),
            sanitized_reason: Some(reason.into()),
        }
    }
    /// Builder: set the sanitized reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.sanitized_reason = Some(reason.into());
        self
    }
    /// True for [`Disposition::Allow`].
    pub fn is_allowed(&self) -> bool {
        self.disposition == Disposition::Allow
    }
    /// True for [`Disposition::Deny`].
    pub fn is_denied(&self) -> bool {
        self.disposition == Disposition::Deny
    }
}
