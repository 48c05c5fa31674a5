//! Golden shapes (the exact JSON text each type serialises to, as records,
//! `replay-points.jsonl`, `replays.jsonl` and `summary.json` carry it) and
//! the rules the types check.

use super::*;

/// Serialise `value` and compare with `golden` text, then parse it back.
fn golden<T>(value: &T, golden: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    assert_eq!(serde_json::to_string(value).unwrap(), golden);
    assert_eq!(&serde_json::from_str::<T>(golden).unwrap(), value);
}

#[test]
fn golden_replay_shapes() {
    golden(
        &CaptureRequest {
            replay_point_id: "rp-1".into(),
            trace_id: "g:epoch-1".into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence: 3,
            execution_group_id: "g".into(),
        },
        r#"{"replay_point_id":"rp-1","trace_id":"g:epoch-1","branch_id":"main","after_event_id":null,"next_sequence":3,"execution_group_id":"g"}"#,
    );
    golden(
        &RestoreRequest {
            replay_point_id: "rp-1".into(),
            target_branch_id: "item-2".into(),
            minimum_fidelity: Fidelity::SemanticEquivalent,
        },
        r#"{"replay_point_id":"rp-1","target_branch_id":"item-2","minimum_fidelity":"semantic_equivalent"}"#,
    );
    golden(
        &RestoreReceipt::new(Fidelity::BestEffort)
            .with_digest("d")
            .with_prefix_reused(false),
        r#"{"achieved_fidelity":"best_effort","restored_projection_digest":"d","prefix_reused":false}"#,
    );
    golden(
        &EquivalenceReport::exact_digests("a", "a").with_reason("same"),
        r#"{"achieved_fidelity":"exact","equivalent":true,"expected_digest":"a","observed_digest":"a","checks":[{"check_id":"state-digest","passed":true,"public_summary":"restored state digest equals the captured digest"}],"sanitized_reason":"same"}"#,
    );
    golden(
        &EquivalenceCheck::new("rows", false),
        r#"{"check_id":"rows","passed":false,"public_summary":null}"#,
    );
}

#[test]
fn golden_child_shapes() {
    golden(
        &ForkRequest {
            replay_point_id: "rp".into(),
            child_id: "a~b".into(),
            target_branch_id: "a~b".into(),
            minimum_fidelity: Fidelity::Exact,
        },
        r#"{"replay_point_id":"rp","child_id":"a~b","target_branch_id":"a~b","minimum_fidelity":"exact"}"#,
    );
    golden(
        &RiskAssessment::deny("document-growth", "grew 9x"),
        r#"{"disposition":"deny","policy_id":"document-growth","sanitized_reason":"grew 9x"}"#,
    );
    golden(
        &RiskAssessment::allow("budget"),
        r#"{"disposition":"allow","policy_id":"budget","sanitized_reason":null}"#,
    );
    for (concurrency, name) in [
        (ChildConcurrency::SerialOnly, "serial_only"),
        (ChildConcurrency::ThreadSafe, "thread_safe"),
        (ChildConcurrency::ProcessIsolated, "process_isolated"),
    ] {
        assert_eq!(concurrency.to_string(), name);
        golden(&concurrency, &format!("\"{name}\""));
    }
    golden(&Disposition::Allow, "\"allow\"");
}

#[test]
fn names_are_the_ones_the_host_and_guests_already_speak() {
    assert_eq!(
        [
            REPLAYABLE_EPISODE_MODE,
            ISOLATED_CHILD_MODE,
            CHILD_RISK_MODE
        ],
        ["replayable-v2", "isolated-child-v0", "child-risk-v0"]
    );
    assert_eq!(
        format!("{WIT_PACKAGE}@{WIT_VERSION}"),
        "sandloop:adapter@0.2.0"
    );
    assert_eq!(
        HOST_OWNED_FIELDS,
        ["adapter_error", "execution_status", "episode_release_error"]
    );
}

#[test]
fn leases_follow_the_binding_rules() {
    let lease = StateLease::exact(7u8, "d").map_binding(u32::from);
    assert_eq!(lease.binding, Some(7u32));
    assert_eq!(lease.projection_digest.as_deref(), Some("d"));
    assert_eq!(lease.check(), Ok(()));
    let marker = StateLease::<u8>::non_replayable();
    assert!(marker.binding.is_none());
    assert_eq!(marker.fidelity, Fidelity::NonReplayable);
    assert_eq!(marker.check(), Ok(()));

    let forged = StateLease {
        binding: Some(1u8),
        fidelity: Fidelity::NonReplayable,
        projection_digest: None,
    };
    assert_eq!(
        forged.check().unwrap_err(),
        "non_replayable leases must not expose a binding"
    );
    let unbound = StateLease::<u8> {
        binding: None,
        fidelity: Fidelity::BestEffort,
        projection_digest: None,
    };
    assert_eq!(
        unbound.check().unwrap_err(),
        "replayable leases require a binding"
    );
    let blank = StateLease::new(1u8, Fidelity::Exact).with_digest(" ");
    assert_eq!(
        blank.check().unwrap_err(),
        "projection_digest must be non-empty"
    );
}

#[test]
fn receipt_rules() {
    let exact = RestoreReceipt::new(Fidelity::Exact);
    assert_eq!(exact.check_against(Fidelity::Exact), Ok(()));
    assert!(exact.check_against(Fidelity::BestEffort).is_err());
    assert!(
        RestoreReceipt::new(Fidelity::NonReplayable)
            .check_against(Fidelity::Exact)
            .is_err()
    );
    assert_eq!(
        RestoreReceipt::new(Fidelity::BestEffort).check_against(Fidelity::Exact),
        Ok(())
    );
}

#[test]
fn equivalence_contract_mirrors_the_reference() {
    use Fidelity::*;
    let receipt = RestoreReceipt::new(Exact).with_digest("a");
    let good = EquivalenceReport::exact_digests("a", "a");
    assert_eq!(good.check_contract(&receipt, Some("a"), Exact), Ok(true));
    assert_eq!(good.check_contract(&receipt, None, Exact), Ok(true));

    let broken = |report: EquivalenceReport, receipt: &RestoreReceipt| {
        report
            .check_contract(receipt, Some("a"), BestEffort)
            .unwrap_err()
    };
    // fidelity disagrees with the receipt
    let mut report = good.clone();
    report.achieved_fidelity = SemanticEquivalent;
    assert!(broken(report, &receipt).contains("disagree on fidelity"));
    // observed digest disagrees with the receipt's restored digest
    let other = RestoreReceipt::new(Exact).with_digest("b");
    assert!(broken(good.clone(), &other).contains("disagree on the observed digest"));
    // expected digest is not the captured one
    let report = EquivalenceReport::exact_digests("b", "b");
    let receipt_b = RestoreReceipt::new(Exact);
    assert!(broken(report, &receipt_b).contains("expected digest"));
    // exact with different digests
    let report = EquivalenceReport::new(Exact, true).with_digests("a", "c");
    assert!(broken(report, &RestoreReceipt::new(Exact)).contains("equal, non-empty"));
    // exact without digests
    let report = EquivalenceReport::new(Exact, true);
    assert!(
        report
            .check_contract(&RestoreReceipt::new(Exact), None, Exact)
            .unwrap_err()
            .contains("equal, non-empty")
    );
    // equivalent while a check fails
    let report = good.clone().with_check(EquivalenceCheck::new("x", false));
    assert!(broken(report, &receipt).contains("one of its checks fails"));
    // semantic without checks
    let semantic = RestoreReceipt::new(SemanticEquivalent);
    let report = EquivalenceReport::new(SemanticEquivalent, true);
    assert!(
        report
            .check_contract(&semantic, None, BestEffort)
            .unwrap_err()
            .contains("at least one")
    );
    // trusted fidelity but not equivalent
    let report = EquivalenceReport::new(SemanticEquivalent, false)
        .with_check(EquivalenceCheck::new("x", false));
    assert!(
        report
            .check_contract(&semantic, None, BestEffort)
            .unwrap_err()
            .contains("verified state equivalence")
    );
    // best effort passes the contract but is never promoted
    let best = RestoreReceipt::new(BestEffort);
    let report = EquivalenceReport::new(BestEffort, false);
    assert_eq!(report.check_contract(&best, None, BestEffort), Ok(false));
    // semantic below the minimum is valid but not promoted
    let report = EquivalenceReport::new(SemanticEquivalent, true)
        .with_check(EquivalenceCheck::new("x", true));
    assert_eq!(report.check_contract(&semantic, None, Exact), Ok(false));
    assert_eq!(
        report.check_contract(&semantic, None, SemanticEquivalent),
        Ok(true)
    );
}

#[test]
fn concurrency_and_risk_helpers() {
    assert_eq!(ChildConcurrency::default(), ChildConcurrency::SerialOnly);
    assert!(!ChildConcurrency::SerialOnly.allows_parallel());
    assert!(ChildConcurrency::ThreadSafe.allows_parallel());
    assert!(ChildConcurrency::ProcessIsolated.allows_parallel());
    let allow = RiskAssessment::allow("edit-size-budget");
    assert!(allow.is_allowed() && !allow.is_denied());
    assert_eq!(allow.sanitized_reason, None);
    let deny = RiskAssessment::deny("document-growth", "grew 9x");
    assert!(deny.is_denied());
    assert_eq!(deny.disposition.to_string(), "deny");
    assert_eq!(
        allow.with_reason("small").sanitized_reason.as_deref(),
        Some("small")
    );
}
