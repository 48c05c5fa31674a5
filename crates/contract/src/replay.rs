//! The shapes of one replay point's life: what the host asks the adapter to
//! capture and restore, what the adapter answers, and the equivalence
//! report the host checks. Mirrors `CaptureReplayStateRequest`,
//! `AdapterStateLease`, `RestoreReplayStateRequest`, `RestoreReceipt`,
//! `EquivalenceCheck`, `EquivalenceReport` and
//! `_validate_equivalence_contract` of the reference's `replay_runtime.py`.

use serde::{Deserialize, Serialize};

use crate::Fidelity;

/// Where a replay point sits and which prepared group it captures (WIT
/// `replay.capture-request`, reference `CaptureReplayStateRequest` with its
/// `TraceCursor`). Also handed to a guest's `Replay::import_state`, where
/// no group is prepared and `execution_group_id` only names the original
/// one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    /// Host-assigned id of the point.
    pub replay_point_id: String,
    /// The trace the point belongs to (the episode group id).
    pub trace_id: String,
    /// The branch within the trace.
    pub branch_id: String,
    /// The branch head the point sits after; `None` at the origin.
    pub after_event_id: Option<String>,
    /// Sequence the next event on the branch will get.
    pub next_sequence: u64,
    /// The prepared episode group whose prefix state is captured: the
    /// `ctx.execution_group_id` its `prepare` saw.
    pub execution_group_id: String,
}

/// What a capture (or import) produced (WIT `replay.state-lease`, reference
/// `AdapterStateLease`): the adapter-owned binding, its fidelity, and a
/// public-safe digest of the captured state's projection. `binding` is
/// runtime-only and never serialised.
///
/// The contract (checked by the host with [`StateLease::check`], as the
/// reference's `__post_init__` does): `binding` is `Some` exactly when
/// `fidelity` is not [`Fidelity::NonReplayable`]. The fields are public so a
/// test adapter can break it on purpose; the constructors keep it.
#[derive(Debug)]
pub struct StateLease<B> {
    /// Adapter-owned state of the point; the host only holds a handle to it
    /// (WIT resource `replay-binding`). `None` for a non-replayable point.
    pub binding: Option<B>,
    /// The captured fidelity; every later restore may achieve at most this.
    pub fidelity: Fidelity,
    /// Digest of the captured state's projection; every report's
    /// `expected_digest` must repeat it. Required in practice for
    /// [`Fidelity::Exact`].
    pub projection_digest: Option<String>,
}

impl<B> StateLease<B> {
    /// A replayable lease of `fidelity` (which should not be
    /// `NonReplayable`) without a digest.
    pub fn new(binding: B, fidelity: Fidelity) -> Self {
        StateLease {
            binding: Some(binding),
            fidelity,
            projection_digest: None,
        }
    }
    /// An exact lease: `binding` with its state's `digest`.
    pub fn exact(binding: B, digest: impl Into<String>) -> Self {
        StateLease::new(binding, Fidelity::Exact).with_digest(digest)
    }
    /// A non-replayable marker point: no binding.
    pub fn non_replayable() -> Self {
        StateLease {
            binding: None,
            fidelity: Fidelity::NonReplayable,
            projection_digest: None,
        }
    }
    /// Builder: set the projection digest.
    pub fn with_digest(mut self, digest: impl Into<String>) -> Self {
        self.projection_digest = Some(digest.into());
        self
    }
    /// The same lease around another binding (the guest glue wraps
    /// bindings into resources with it).
    pub fn map_binding<C>(self, f: impl FnOnce(B) -> C) -> StateLease<C> {
        StateLease {
            binding: self.binding.map(f),
            fidelity: self.fidelity,
            projection_digest: self.projection_digest,
        }
    }
    /// The reference's lease rules: `non_replayable` leases must not carry
    /// a binding, replayable ones must, and a digest must be non-blank.
    /// Errors name the broken rule.
    pub fn check(&self) -> Result<(), String> {
        match (self.fidelity, self.binding.is_some()) {
            (Fidelity::NonReplayable, true) => {
                return Err("non_replayable leases must not expose a binding".into());
            }
            (Fidelity::NonReplayable, false) | (_, true) => {}
            (_, false) => return Err("replayable leases require a binding".into()),
        }
        check_digest(self.projection_digest.as_deref(), "projection_digest")
    }
}

/// The reference's digest rule: a digest, when given, is not blank.
/// Errors say `{field} must be non-empty`.
pub fn check_digest(value: Option<&str>, field: &str) -> Result<(), String> {
    match value {
        Some(text) if text.trim().is_empty() => Err(format!("{field} must be non-empty")),
        _ => Ok(()),
    }
}

/// One restore of a replay point for one suffix (WIT
/// `replay.restore-request`, reference `RestoreReplayStateRequest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The point being restored.
    pub replay_point_id: String,
    /// The branch the restored suffix will run on (sandloop passes the
    /// suffix item's `item_id`).
    pub target_branch_id: String,
    /// The weakest fidelity the host will promote.
    pub minimum_fidelity: Fidelity,
}

/// What a restore achieved (WIT `types.restore-receipt`, reference
/// `RestoreReceipt`).
///
/// The host refuses a receipt whose `achieved_fidelity` is
/// `NonReplayable` or stronger than the point's captured fidelity (see
/// [`RestoreReceipt::check_against`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReceipt {
    /// Fidelity the restore achieved; at most the captured fidelity.
    pub achieved_fidelity: Fidelity,
    /// Digest of the restored working copy; when present it must equal the
    /// report's `observed_digest`.
    pub restored_projection_digest: Option<String>,
    /// `Some(true)` when the prefix state was reused, `Some(false)` when it
    /// was rebuilt, `None` when unknown (the host counts each case).
    pub prefix_reused: Option<bool>,
}

impl RestoreReceipt {
    /// A receipt of `fidelity` without digest or reuse information.
    pub fn new(fidelity: Fidelity) -> Self {
        RestoreReceipt {
            achieved_fidelity: fidelity,
            restored_projection_digest: None,
            prefix_reused: None,
        }
    }
    /// Builder: set the restored projection digest.
    pub fn with_digest(mut self, digest: impl Into<String>) -> Self {
        self.restored_projection_digest = Some(digest.into());
        self
    }
    /// Builder: set `prefix_reused`.
    pub fn with_prefix_reused(mut self, reused: bool) -> Self {
        self.prefix_reused = Some(reused);
        self
    }
    /// The host's receipt rules (reference `ReplayPointRegistry.restore`):
    /// not `NonReplayable`, and not stronger than `captured`.
    pub fn check_against(&self, captured: Fidelity) -> Result<(), &'static str> {
        if self.achieved_fidelity == Fidelity::NonReplayable {
            return Err("adapter reported non_replayable while restoring a replay point");
        }
        if !captured.meets(self.achieved_fidelity) {
            return Err("restore achieved a fidelity stronger than the captured replay point");
        }
        Ok(())
    }
}

/// One explicit equivalence check (WIT `types.equivalence-check`,
/// reference `EquivalenceCheck`). Serialises as `{"check_id", "passed",
/// "public_summary"}` (the `checks` of a `replay` record block).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EquivalenceCheck {
    /// Non-empty id of the check, e.g. `state-digest`.
    pub check_id: String,
    /// Whether the check passed.
    pub passed: bool,
    /// Public-safe text (no absolute paths; the host validates it).
    pub public_summary: Option<String>,
}

impl EquivalenceCheck {
    /// A check without a summary.
    pub fn new(check_id: impl Into<String>, passed: bool) -> Self {
        EquivalenceCheck {
            check_id: check_id.into(),
            passed,
            public_summary: None,
        }
    }
    /// Builder: set the public summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.public_summary = Some(summary.into());
        self
    }
}

/// How the restored working copy compares with the captured state (WIT
/// `types.equivalence-report`, reference `EquivalenceReport`).
///
/// The host enforces the reference's `_validate_equivalence_contract`; see
/// [`EquivalenceReport::check_contract`] for the same rules, usable in an
/// adapter's unit tests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EquivalenceReport {
    /// Must equal the receipt's `achieved_fidelity`.
    pub achieved_fidelity: Fidelity,
    /// Whether equivalence was verified; must be true for `Exact` and
    /// `SemanticEquivalent`, and false while any check fails.
    pub equivalent: bool,
    /// Must equal the point's captured projection digest (when it has one).
    pub expected_digest: Option<String>,
    /// Digest of the working copy; for `Exact`, present and equal to
    /// `expected_digest`.
    pub observed_digest: Option<String>,
    /// Explicit checks; at least one for `SemanticEquivalent`.
    pub checks: Vec<EquivalenceCheck>,
    /// Public-safe reason, e.g. why equivalence could not be verified.
    pub sanitized_reason: Option<String>,
}

impl EquivalenceReport {
    /// A report of `fidelity` and `equivalent` without digests or checks.
    pub fn new(fidelity: Fidelity, equivalent: bool) -> Self {
        EquivalenceReport {
            achieved_fidelity: fidelity,
            equivalent,
            expected_digest: None,
            observed_digest: None,
            checks: Vec::new(),
            sanitized_reason: None,
        }
    }
    /// An exact report comparing two digests: `equivalent` is their
    /// equality, with one `state-digest` check saying so.
    pub fn exact_digests(expected: impl Into<String>, observed: impl Into<String>) -> Self {
        let (expected, observed) = (expected.into(), observed.into());
        let equal = expected == observed;
        let summary = if equal {
            "restored state digest equals the captured digest"
        } else {
            "restored state digest differs from the captured digest"
        };
        EquivalenceReport::new(Fidelity::Exact, equal)
            .with_digests(expected, observed)
            .with_check(EquivalenceCheck::new("state-digest", equal).with_summary(summary))
    }
    /// Builder: set the expected and observed digests.
    pub fn with_digests(
        mut self,
        expected: impl Into<String>,
        observed: impl Into<String>,
    ) -> Self {
        self.expected_digest = Some(expected.into());
        self.observed_digest = Some(observed.into());
        self
    }
    /// Builder: append a check.
    pub fn with_check(mut self, check: EquivalenceCheck) -> Self {
        self.checks.push(check);
        self
    }
    /// Builder: set the sanitized reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.sanitized_reason = Some(reason.into());
        self
    }
    /// The reference's `_validate_equivalence_contract`, the one copy of the
    /// rule: the host holds every report to it, and adapter unit tests can
    /// too. `Err(rule)` names the first broken rule (the text the host puts
    /// in the record), `Ok(eligible)` says
    /// whether the host would promote the suffix (equivalent, trusted
    /// fidelity, and at least `minimum`). `captured_digest` is the point's
    /// projection digest.
    pub fn check_contract(
        &self,
        receipt: &RestoreReceipt,
        captured_digest: Option<&str>,
        minimum: Fidelity,
    ) -> Result<bool, &'static str> {
        if self.achieved_fidelity != receipt.achieved_fidelity {
            return Err("the restore receipt and the equivalence report disagree on fidelity");
        }
        if let (Some(restored), Some(observed)) = (
            receipt.restored_projection_digest.as_deref(),
            self.observed_digest.as_deref(),
        ) && restored != observed
        {
            return Err(
                "the restore receipt and the equivalence report disagree on the observed digest",
            );
        }
        if let Some(captured) = captured_digest
            && self.expected_digest.as_deref() != Some(captured)
        {
            return Err(
                "the equivalence report's expected digest is not the replay point's captured digest",
            );
        }
        if self.equivalent && self.checks.iter().any(|check| !check.passed) {
            return Err("an equivalence report cannot pass while one of its checks fails");
        }
        if self.achieved_fidelity == Fidelity::Exact {
            match (&self.expected_digest, &self.observed_digest) {
                (Some(expected), Some(observed))
                    if !expected.is_empty() && expected == observed => {}
                _ => return Err("an exact replay needs equal, non-empty state digests"),
            }
        }
        if self.achieved_fidelity == Fidelity::SemanticEquivalent && self.checks.is_empty() {
            return Err("a semantic replay needs at least one explicit equivalence check");
        }
        let trusted = self.achieved_fidelity.is_trusted();
        if trusted && !self.equivalent {
            return Err("an exact or semantic replay needs verified state equivalence");
        }
        Ok(self.equivalent && trusted && self.achieved_fidelity.meets(minimum))
    }
}
