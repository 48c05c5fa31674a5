//! The public and runtime shapes of a replay point: cursors, the point
//! record, and the equivalence contract the host enforces on the adapter's
//! lease, receipt and equivalence report (those shapes are the
//! `sandloop-contract` crate's, re-exported here). Mirrors the dataclasses
//! of `replay_runtime.py` and `AgentCursor`/`TraceCursor` of
//! `trace_runtime.py`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::fidelity::Fidelity;
use crate::trace::validate_public_payload;
use sandloop_contract::check_digest;
pub use sandloop_contract::{
    CaptureRequest, EquivalenceCheck, EquivalenceReport, RestoreReceipt, RestoreRequest, StateLease,
};

/// The agent-history position bound to a replay point (reference
/// `AgentCursor`). In sandloop the "agent" is the host's view of the
/// episode: its trace history and its call context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCursor {
    /// Number of history entries before the point (the branch length).
    pub history_index: u64,
    /// Digest of that history (sha256 hex of the events' JSON lines).
    pub history_digest: String,
    /// Digest of the context the history was produced in.
    pub context_digest: String,
}

/// A frozen trace position (reference `TraceCursor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceCursor {
    /// The trace.
    pub trace_id: String,
    /// The branch within the trace.
    pub branch_id: String,
    /// The branch head the cursor sits after; `None` at the origin.
    pub after_event_id: Option<String>,
    /// Sequence the next event on the branch gets.
    pub next_sequence: u64,
    /// The agent-history position captured with it.
    pub agent_cursor: AgentCursor,
}

/// Where a point is in its life (reference `ReplayPointLifecycle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Captured and restorable.
    Ready,
    /// Being released.
    Releasing,
    /// Released; nothing of it remains in the adapter.
    Released,
    /// Quarantined: a finalisation, release or safety check failed.
    Failed,
}

impl Lifecycle {
    /// The reference's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Ready => "ready",
            Lifecycle::Releasing => "releasing",
            Lifecycle::Released => "released",
            Lifecycle::Failed => "failed",
        }
    }
}

/// A replay point's public-safe record (reference `ReplayPoint`). It holds
/// no binding and no state key: those live only in the registry.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayPoint {
    /// Host-assigned id.
    pub replay_point_id: String,
    /// Where it was captured.
    pub cursor: TraceCursor,
    /// Fidelity the adapter captured it with.
    pub fidelity: Fidelity,
    /// The adapter's public digest of the captured projection.
    pub captured_projection_digest: Option<String>,
    /// Where it is in its life.
    pub lifecycle: Lifecycle,
    /// The `replay_point_captured` lifecycle event appended for it.
    pub created_event_id: String,
    /// The released point this one replaces, if any.
    pub replaces_replay_point_id: Option<String>,
}

impl ReplayPoint {
    /// The reference's `to_record` shape: `replay_point_id`, `trace_id`,
    /// `branch_id`, `after_event_id`, `next_sequence`,
    /// `agent_history_index`, `agent_history_digest`,
    /// `agent_context_digest`, `fidelity`, `captured_projection_digest`,
    /// `lifecycle`, `created_event_id`, `replaces_replay_point_id`.
    pub fn to_record(&self) -> Map<String, Value> {
        let cursor = &self.cursor;
        let mut record = Map::new();
        let mut put = |key: &str, value: Value| {
            record.insert(key.to_string(), value);
        };
        put("replay_point_id", self.replay_point_id.clone().into());
        put("trace_id", cursor.trace_id.clone().into());
        put("branch_id", cursor.branch_id.clone().into());
        put("after_event_id", cursor.after_event_id.clone().into());
        put("next_sequence", cursor.next_sequence.into());
        put(
            "agent_history_index",
            cursor.agent_cursor.history_index.into(),
        );
        put(
            "agent_history_digest",
            cursor.agent_cursor.history_digest.clone().into(),
        );
        put(
            "agent_context_digest",
            cursor.agent_cursor.context_digest.clone().into(),
        );
        put("fidelity", self.fidelity.as_str().into());
        put(
            "captured_projection_digest",
            self.captured_projection_digest.clone().into(),
        );
        put("lifecycle", self.lifecycle.as_str().into());
        put("created_event_id", self.created_event_id.clone().into());
        put(
            "replaces_replay_point_id",
            self.replaces_replay_point_id.clone().into(),
        );
        record
    }

    /// Rebuild a point from its [`ReplayPoint::to_record`] shape (a line of
    /// `replay-points.jsonl`). Errors name the missing or malformed field.
    pub fn from_record(record: &Map<String, Value>) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Raw {
            replay_point_id: String,
            trace_id: String,
            branch_id: String,
            after_event_id: Option<String>,
            next_sequence: u64,
            agent_history_index: u64,
            agent_history_digest: String,
            agent_context_digest: String,
            fidelity: Fidelity,
            captured_projection_digest: Option<String>,
            lifecycle: Lifecycle,
            created_event_id: String,
            replaces_replay_point_id: Option<String>,
        }
        let raw: Raw =
            serde_path_to_error::deserialize(Value::Object(record.clone())).map_err(field_error)?;
        Ok(Self {
            replay_point_id: raw.replay_point_id,
            cursor: TraceCursor {
                trace_id: raw.trace_id,
                branch_id: raw.branch_id,
                after_event_id: raw.after_event_id,
                next_sequence: raw.next_sequence,
                agent_cursor: AgentCursor {
                    history_index: raw.agent_history_index,
                    history_digest: raw.agent_history_digest,
                    context_digest: raw.agent_context_digest,
                },
            },
            fidelity: raw.fidelity,
            captured_projection_digest: raw.captured_projection_digest,
            lifecycle: raw.lifecycle,
            created_event_id: raw.created_event_id,
            replaces_replay_point_id: raw.replaces_replay_point_id,
        })
    }
}

/// A deserialisation error as `field.path: what is wrong`, or just what is
/// wrong when it is about the whole object (a missing field names itself).
pub(crate) fn field_error(error: serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    if path == "." {
        error.into_inner().to_string()
    } else {
        format!("{path}: {}", error.into_inner())
    }
}

/// The host's field rules for an adapter's [`EquivalenceReport`] (the
/// type itself is the contract's): non-blank ids and digests, public-safe
/// summaries and reason (no absolute paths), as the reference's dataclass
/// checks them. Public-safety is the trace's payload rule, which only the
/// host knows, so this is a host-side extension.
pub trait EquivalenceReportFields {
    /// The first field rule the report breaks, naming the field.
    fn check_fields(&self) -> Result<(), String>;
}

impl EquivalenceReportFields for EquivalenceReport {
    fn check_fields(&self) -> Result<(), String> {
        check_digest(self.expected_digest.as_deref(), "expected_digest")?;
        check_digest(self.observed_digest.as_deref(), "observed_digest")?;
        check_public_text(self.sanitized_reason.as_deref(), "sanitized_reason")?;
        for check in &self.checks {
            if check.check_id.trim().is_empty() {
                return Err("check_id must be non-empty".into());
            }
            check_public_text(check.public_summary.as_deref(), "public_summary")?;
        }
        Ok(())
    }
}

fn check_public_text(value: Option<&str>, field: &str) -> Result<(), String> {
    let Some(text) = value else { return Ok(()) };
    let mut wrapped = Map::new();
    wrapped.insert(field.to_string(), Value::from(text));
    validate_public_payload(&Value::Object(wrapped)).map_err(|error| error.to_string())
}

/// The outcome of a restore that passed the contract (reference
/// `ReplayRestoreResult`). Minutes are wall-clock minutes measured by the
/// host.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayRestoreResult {
    /// The point restored.
    pub replay_point_id: String,
    /// The branch the suffix ran on.
    pub target_branch_id: String,
    /// Fidelity the restore achieved.
    pub achieved_fidelity: Fidelity,
    /// Whether the adapter verified equivalence.
    pub equivalent: bool,
    /// Equivalent, trusted (`semantic_equivalent` or stronger) and meeting
    /// the requested minimum: the result may be promoted.
    pub promotion_eligible: bool,
    /// From the receipt.
    pub prefix_reused: Option<bool>,
    /// The adapter's report.
    pub report: EquivalenceReport,
    /// Time in `restore-replay-state`.
    pub restore_minutes: f64,
    /// Time in `validate-replay-equivalence`.
    pub equivalence_minutes: f64,
    /// Time in the suffix and its finalisation (0 until it ran).
    pub suffix_minutes: f64,
    /// Time from the start of the replay to the end of the suffix.
    pub replay_wall_minutes: f64,
}

impl ReplayRestoreResult {
    /// The reference's `to_record` shape.
    pub fn to_record(&self) -> Map<String, Value> {
        let mut record = Map::new();
        let mut put = |key: &str, value: Value| {
            record.insert(key.to_string(), value);
        };
        put("replay_point_id", self.replay_point_id.clone().into());
        put("target_branch_id", self.target_branch_id.clone().into());
        put("achieved_fidelity", self.achieved_fidelity.as_str().into());
        put("equivalent", self.equivalent.into());
        put("promotion_eligible", self.promotion_eligible.into());
        put("prefix_reused", self.prefix_reused.into());
        put(
            "expected_digest",
            self.report.expected_digest.clone().into(),
        );
        put(
            "observed_digest",
            self.report.observed_digest.clone().into(),
        );
        put(
            "checks",
            serde_json::to_value(&self.report.checks).unwrap_or(Value::Null),
        );
        put(
            "sanitized_reason",
            self.report.sanitized_reason.clone().into(),
        );
        put("restore_minutes", self.restore_minutes.into());
        put("equivalence_minutes", self.equivalence_minutes.into());
        put("suffix_minutes", self.suffix_minutes.into());
        put("replay_wall_minutes", self.replay_wall_minutes.into());
        record
    }
}

/// The equivalence contract between a point, the receipt of its restore
/// and the adapter's report; returns whether the result is promotion
/// eligible. Mirrors `_validate_equivalence_contract` rule for rule:
///
/// - report and receipt fidelity agree;
/// - receipt and report observed digests agree when both are given;
/// - the report's expected digest is the captured one (when captured);
/// - a report cannot pass while one of its checks fails;
/// - `exact` needs equal, non-empty expected and observed digests;
/// - `semantic_equivalent` needs at least one explicit check;
/// - `exact` and `semantic_equivalent` need `equivalent = true`.
///
/// Errors: the first rule broken, in those words.
pub fn validate_equivalence_contract(
    point: &ReplayPoint,
    receipt: &RestoreReceipt,
    report: &EquivalenceReport,
    minimum: Fidelity,
) -> Result<bool, String> {
    report.check_fields()?;
    report
        .check_contract(
            receipt,
            point.captured_projection_digest.as_deref(),
            minimum,
        )
        .map_err(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn point(fidelity: Fidelity, digest: Option<&str>) -> ReplayPoint {
        ReplayPoint {
            replay_point_id: "rp".into(),
            cursor: TraceCursor {
                trace_id: "t".into(),
                branch_id: "main".into(),
                after_event_id: Some("t/main/0".into()),
                next_sequence: 1,
                agent_cursor: AgentCursor {
                    history_index: 1,
                    history_digest: "h".into(),
                    context_digest: "c".into(),
                },
            },
            fidelity,
            captured_projection_digest: digest.map(str::to_string),
            lifecycle: Lifecycle::Ready,
            created_event_id: "t/main/1".into(),
            replaces_replay_point_id: None,
        }
    }

    fn receipt(fidelity: Fidelity, digest: Option<&str>) -> RestoreReceipt {
        RestoreReceipt {
            achieved_fidelity: fidelity,
            restored_projection_digest: digest.map(str::to_string),
            prefix_reused: Some(true),
        }
    }

    fn report(
        fidelity: Fidelity,
        equivalent: bool,
        expected: &str,
        observed: &str,
    ) -> EquivalenceReport {
        EquivalenceReport {
            achieved_fidelity: fidelity,
            equivalent,
            expected_digest: Some(expected.into()),
            observed_digest: Some(observed.into()),
            checks: Vec::new(),
            sanitized_reason: None,
        }
    }

    fn check(id: &str, passed: bool) -> EquivalenceCheck {
        EquivalenceCheck {
            check_id: id.into(),
            passed,
            public_summary: None,
        }
    }

    #[test]
    fn an_exact_verified_restore_is_promotion_eligible() {
        let p = point(Fidelity::Exact, Some("d"));
        let r = receipt(Fidelity::Exact, Some("d"));
        let ok = report(Fidelity::Exact, true, "d", "d");
        assert_eq!(
            validate_equivalence_contract(&p, &r, &ok, Fidelity::Exact),
            Ok(true)
        );
        assert_eq!(
            validate_equivalence_contract(&p, &r, &ok, Fidelity::SemanticEquivalent),
            Ok(true)
        );
    }

    #[test]
    fn every_contract_rule_is_enforced() {
        let p = point(Fidelity::Exact, Some("d"));
        let exact = receipt(Fidelity::Exact, Some("d"));
        let cases: Vec<(RestoreReceipt, EquivalenceReport, &str)> = vec![
            (
                exact.clone(),
                report(Fidelity::BestEffort, false, "d", "d"),
                "disagree on fidelity",
            ),
            (
                exact.clone(),
                report(Fidelity::Exact, true, "d", "x"),
                "disagree on the observed digest",
            ),
            (
                receipt(Fidelity::Exact, None),
                report(Fidelity::Exact, true, "other", "other"),
                "expected digest is not the replay point's",
            ),
            (
                receipt(Fidelity::Exact, None),
                report(Fidelity::Exact, true, "d", "x"),
                "equal, non-empty state digests",
            ),
            (
                receipt(Fidelity::SemanticEquivalent, Some("d")),
                report(Fidelity::SemanticEquivalent, true, "d", "d"),
                "at least one explicit equivalence check",
            ),
            (
                exact.clone(),
                report(Fidelity::Exact, false, "d", "d"),
                "needs verified state equivalence",
            ),
        ];
        for (receipt, report, expected) in cases {
            let error = validate_equivalence_contract(&p, &receipt, &report, Fidelity::Exact)
                .expect_err(expected);
            assert!(error.contains(expected), "{error} should say {expected}");
        }
        let mut failing_check = report(Fidelity::Exact, true, "d", "d");
        failing_check.checks = vec![check("a", true), check("b", false)];
        let error =
            validate_equivalence_contract(&p, &exact, &failing_check, Fidelity::Exact).unwrap_err();
        assert!(error.contains("while one of its checks fails"), "{error}");
    }

    #[test]
    fn weaker_results_are_valid_but_not_eligible() {
        let p = point(Fidelity::Exact, None);
        let mut semantic = report(Fidelity::SemanticEquivalent, true, "a", "b");
        semantic.checks = vec![check("rows", true)];
        let r = receipt(Fidelity::SemanticEquivalent, None);
        assert_eq!(
            validate_equivalence_contract(&p, &r, &semantic, Fidelity::SemanticEquivalent),
            Ok(true)
        );
        assert_eq!(
            validate_equivalence_contract(&p, &r, &semantic, Fidelity::Exact),
            Ok(false),
            "below the requested minimum"
        );
        let best = report(Fidelity::BestEffort, false, "a", "b");
        let r = receipt(Fidelity::BestEffort, None);
        assert_eq!(
            validate_equivalence_contract(&p, &r, &best, Fidelity::BestEffort),
            Ok(false),
            "best effort is never promotion eligible"
        );
    }

    #[test]
    fn reasons_and_summaries_must_be_public_safe() {
        let p = point(Fidelity::BestEffort, None);
        let r = receipt(Fidelity::BestEffort, None);
        let mut leaky = report(Fidelity::BestEffort, false, "a", "b");
        leaky.sanitized_reason = Some("/home/me/secret.txt differs".into());
        let error =
            validate_equivalence_contract(&p, &r, &leaky, Fidelity::BestEffort).unwrap_err();
        assert!(error.contains("absolute path"), "{error}");
    }

    #[test]
    fn leases_follow_the_binding_rules() {
        let lease = |binding: Option<u8>, fidelity| StateLease {
            binding,
            fidelity,
            projection_digest: None,
        };
        assert!(lease(None, Fidelity::NonReplayable).check().is_ok());
        assert!(lease(Some(1), Fidelity::Exact).check().is_ok());
        assert!(lease(Some(1), Fidelity::NonReplayable).check().is_err());
        assert!(lease(None, Fidelity::BestEffort).check().is_err());
        let mut blank = lease(Some(1), Fidelity::Exact);
        blank.projection_digest = Some(" ".into());
        assert!(blank.check().unwrap_err().contains("projection_digest"));
    }

    #[test]
    fn point_records_round_trip() {
        let p = point(Fidelity::SemanticEquivalent, Some("d"));
        let record = p.to_record();
        assert_eq!(record["fidelity"], "semantic_equivalent");
        assert_eq!(record["lifecycle"], "ready");
        assert!(!record.contains_key("binding"));
        assert_eq!(ReplayPoint::from_record(&record), Ok(p));
        let mut broken = record.clone();
        broken.remove("next_sequence");
        assert!(
            ReplayPoint::from_record(&broken)
                .unwrap_err()
                .contains("next_sequence")
        );
    }
}
