//! The record shapes of a replay group, checked without an adapter.

use serde_json::json;

use super::*;
use crate::episode::testing::obj;
use crate::replay::point::{AgentCursor, EquivalenceReport, Lifecycle, TraceCursor};
use crate::replay::registry::{ChildFailure, ChildFailureStage, ChildResult, Disposition};

fn replay_error(stage: ReplayStage, cause: ReplayCause) -> ReplayError {
    ReplayError::new(stage, cause)
}

fn injected() -> AdapterError {
    AdapterError::declared("injected-fault", "injected fault `x` in  a\n call", false)
}

fn restore(fidelity: Fidelity) -> ReplayRestoreResult {
    ReplayRestoreResult {
        replay_point_id: "rp-1".into(),
        target_branch_id: "v1".into(),
        achieved_fidelity: fidelity,
        equivalent: true,
        promotion_eligible: true,
        prefix_reused: Some(true),
        report: EquivalenceReport {
            achieved_fidelity: fidelity,
            equivalent: true,
            expected_digest: Some("d".into()),
            observed_digest: Some("d".into()),
            checks: vec![],
            sanitized_reason: None,
        },
        restore_minutes: 0.0,
        equivalence_minutes: 0.0,
        suffix_minutes: 0.0,
        replay_wall_minutes: 0.25,
    }
}

fn point() -> ReplayPoint {
    ReplayPoint {
        replay_point_id: "rp-1".into(),
        cursor: TraceCursor {
            trace_id: "g1".into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence: 4,
            agent_cursor: AgentCursor {
                history_index: 0,
                history_digest: "h".into(),
                context_digest: "c".into(),
            },
        },
        fidelity: Fidelity::Exact,
        lifecycle: Lifecycle::Ready,
        captured_projection_digest: Some("d".into()),
        created_event_id: "ev-4".into(),
        replaces_replay_point_id: None,
    }
}

#[test]
fn point_ids_are_deterministic_per_arm_epoch_and_group() {
    let id = point_id_for("main", 1, "seed-a");
    assert_eq!(id.len(), 23, "{id}");
    assert!(id.starts_with("rp-"));
    assert!(
        id[3..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(
        id,
        point_id_for("main", 1, "seed-a"),
        "a resumed run recaptures it"
    );
    assert_ne!(id, point_id_for("main", 2, "seed-a"));
    assert_ne!(id, point_id_for("other", 1, "seed-a"));
    assert_ne!(id, point_id_for("main", 1, "seed-b"));
    // The fields are NUL-separated: moving a character across does not collide.
    assert_ne!(point_id_for("a1", 1, "x"), point_id_for("a", 11, "x"));
    // The first 20 hex digits of sha256("main\01\0seed-a"), as files name them.
    let full = crate::digest::sha256_hex(b"main\x001\x00seed-a");
    assert_eq!(id, format!("rp-{}", &full[..20]));
}

#[test]
fn an_error_block_names_stage_type_folded_message_quarantine_and_the_second_failure() {
    let mut error = replay_error(ReplayStage::Suffix, ReplayCause::Adapter(injected()));
    error.also = Some(Box::new(replay_error(
        ReplayStage::Finalize,
        ReplayCause::Contract("bad".into()),
    )));
    error.quarantined = true;
    assert_eq!(
        error_block(&error),
        json!({
            "stage": "suffix",
            "type": "adapter_error",
            "message": "injected fault `x` in a call",
            "quarantined": true,
            "also": "finalize failed: replay contract violated: bad",
        })
    );
    let plain = replay_error(ReplayStage::Lookup, ReplayCause::Unavailable("gone".into()));
    assert_eq!(
        error_block(&plain),
        json!({"stage": "lookup", "type": "replay_unavailable", "message": "gone",
               "quarantined": false, "also": null})
    );
    let agent = replay_error(ReplayStage::Restore, ReplayCause::AgentState("lost".into()));
    assert_eq!(error_block(&agent)["type"], "agent_state");
    let denied = replay_error(ReplayStage::Suffix, ReplayCause::RiskDenied("no".into()));
    assert_eq!(error_block(&denied)["type"], "replay_risk_denied");
}

#[test]
fn a_failed_suffix_is_recorded_as_the_adapters_error_other_stages_say_which() {
    let suffix = replay_error(ReplayStage::Suffix, ReplayCause::Adapter(injected()));
    assert_eq!(adapter_error_of(&suffix), injected());
    let mut with_also = suffix.clone();
    with_also.also = Some(Box::new(replay_error(
        ReplayStage::Finalize,
        ReplayCause::Adapter(AdapterError::new(ErrorType::Trap, "boom")),
    )));
    assert_eq!(
        adapter_error_of(&with_also).message,
        "injected fault `x` in  a\n call (and finalize failed: trap: boom)"
    );
    let trap = AdapterError::new(ErrorType::Trap, "unreachable");
    let restore = adapter_error_of(&replay_error(
        ReplayStage::Restore,
        ReplayCause::Adapter(trap),
    ));
    assert_eq!(restore.error_type, ErrorType::Trap);
    assert_eq!(restore.message, "replay restore failed: unreachable");
    let contract = adapter_error_of(&replay_error(
        ReplayStage::Equivalence,
        ReplayCause::Contract("digests differ".into()),
    ));
    assert_eq!(contract.error_type, ErrorType::ReplayContract);
    assert_eq!(
        contract.message,
        "equivalence failed: replay contract violated: digests differ"
    );
    let denied = adapter_error_of(&replay_error(
        ReplayStage::Suffix,
        ReplayCause::RiskDenied("replay child intent denied by p".into()),
    ));
    assert_eq!(denied.error_type, ErrorType::RiskDenied);
}

fn span() -> SuffixSpan {
    SuffixSpan {
        replay_point_id: "rp-1".into(),
        fidelity: Some(Fidelity::Exact),
        trace_id: "g1".into(),
        branch_id: "v1".into(),
        first_sequence: 5,
        end_sequence: 7,
    }
}

#[test]
fn a_suffix_record_carries_the_hosts_replay_block_over_the_adapters() {
    let record = obj(json!({"accepted": true, "replay": "forged by the adapter"}));
    let record = span()
        .result(Ok((restore(Fidelity::Exact), record)))
        .unwrap();
    let block = &record["replay"];
    assert_eq!(block["replay_point_id"], "rp-1");
    assert_eq!(block["fidelity"], "exact");
    assert_eq!(block["achieved_fidelity"], "exact");
    assert_eq!(block["target_branch_id"], "v1");
    assert_eq!(block["trace_id"], "g1");
    assert_eq!(block["branch_id"], "v1");
    assert_eq!(block["first_sequence"], 5);
    assert_eq!(block["end_sequence"], 7);
    assert!(block.get("error").is_none());
    assert_eq!(record["accepted"], true);
}

#[test]
fn a_failed_suffix_carries_its_block_as_record_fields_with_the_restore_it_ran_on() {
    let mut error = replay_error(ReplayStage::Suffix, ReplayCause::Adapter(injected()));
    error.restore = Some(Box::new(restore(Fidelity::Exact)));
    let failure = span().result(Err(error)).unwrap_err();
    assert_eq!(failure.kind, "injected-fault");
    let fields = failure.record_fields.unwrap();
    let block = &fields["replay"];
    assert_eq!(block["equivalent"], true, "the restore passed before");
    assert_eq!(block["error"]["stage"], "suffix");
    assert_eq!(block["end_sequence"], 7);
    // Before a restore passed, the block has no restore fields.
    let early = replay_error(ReplayStage::Restore, ReplayCause::Adapter(injected()));
    let fields = span()
        .result(Err(early))
        .unwrap_err()
        .record_fields
        .unwrap();
    assert!(fields["replay"].get("achieved_fidelity").is_none());
    assert_eq!(fields["replay"]["error"]["stage"], "restore");
    // No fidelity known: null, not missing.
    let unknown = SuffixSpan {
        fidelity: None,
        ..span()
    };
    assert_eq!(unknown.block(None, None)["fidelity"], Value::Null);
}

#[test]
fn an_intent_is_the_variant_spec_or_the_items_id() {
    let variant = obj(json!({"item_id": "v", "variant_spec": {"spec_id": "s", "ops": [1]}}));
    assert_eq!(
        intent_of(&variant),
        obj(json!({"spec_id": "s", "ops": [1]}))
    );
    let seed = obj(json!({"item_id": "seed"}));
    assert_eq!(intent_of(&seed), obj(json!({"item_id": "seed"})));
    let odd = obj(json!({"variant_spec": "not an object"}));
    assert_eq!(intent_of(&odd), obj(json!({"item_id": null})));
}

#[test]
fn a_childs_result_has_its_replay_block_and_minutes() {
    let allow = RiskAssessment {
        disposition: Disposition::Allow,
        policy_id: "p".into(),
        sanitized_reason: None,
    };
    let ok = ChildOutcome::Succeeded(ChildResult {
        child_id: "v1".into(),
        restore: restore(Fidelity::Exact),
        outcome: obj(json!({"accepted": true})),
        validations: None,
        isolated: true,
        parallel: true,
        intent_assessment: Some(allow.clone()),
        outcome_assessment: None,
        trace_end: Some(9),
    });
    let (record, minutes) = child_result(ok, &point(), 5, "snapshot");
    let record = record.unwrap();
    let block = &record["replay"];
    assert_eq!(minutes, 0.25);
    assert_eq!(block["fork"], "snapshot");
    assert_eq!(block["isolated"], true);
    assert_eq!(block["parallel"], true);
    assert_eq!(block["child_id"], "v1");
    assert_eq!(block["branch_id"], "v1");
    assert_eq!(block["trace_id"], "g1");
    assert_eq!(block["fidelity"], "exact");
    assert_eq!(block["first_sequence"], 5);
    assert_eq!(block["end_sequence"], 9);
    assert_eq!(block["intent_assessment"]["policy_id"], "p");
    assert_eq!(block["outcome_assessment"], Value::Null);

    let failed = ChildOutcome::Failed(ChildFailure {
        child_id: "v2".into(),
        restore: restore(Fidelity::Exact),
        stage: ChildFailureStage::Intent,
        error_type: "replay_risk_denied".into(),
        error: AdapterError::new(ErrorType::RiskDenied, "denied"),
        isolated: true,
        parallel: false,
        risk_assessment: Some(allow),
        trace_end: None,
    });
    let (result, _) = child_result(failed, &point(), 5, "state");
    let error = result.unwrap_err();
    assert_eq!(error.error_type, ErrorType::RiskDenied);
    let block = &error.record_fields.unwrap()["replay"];
    assert_eq!(block["stage"], "intent");
    assert_eq!(block["error_type"], "replay_risk_denied");
    assert_eq!(block["risk_assessment"]["policy_id"], "p");
    assert_eq!(block["end_sequence"], 5, "no trace: the branch is empty");
    assert_eq!(block["fork"], "state");
}

#[test]
fn every_item_of_a_failed_child_group_gets_the_groups_error() {
    let error = replay_error(
        ReplayStage::Restore,
        ReplayCause::Adapter(AdapterError::new(ErrorType::Trap, "fork trapped")),
    );
    let item = obj(json!({"item_id": "v3"}));
    let (result, minutes) = failed_child(&error, &point(), "state", &item);
    assert_eq!(minutes, 0.0);
    let failure = result.unwrap_err();
    assert_eq!(failure.error_type, ErrorType::Trap);
    assert_eq!(failure.message, "replay restore failed: fork trapped");
    assert_eq!(
        failure.record_fields.unwrap()["replay"],
        json!({
            "replay_point_id": "rp-1", "fidelity": "exact", "isolated": true,
            "fork": "state", "child_id": "v3",
            "error": {"stage": "restore", "type": "trap", "message": "fork trapped",
                      "quarantined": false, "also": null},
        })
    );
}
