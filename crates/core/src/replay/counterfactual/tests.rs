//! The reference's counterfactual rules (`counterfactual_runtime.py` and
//! its upstream tests), against native test children.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::*;
use crate::episode::adapter::{AdapterError, Item, Record};
use crate::replay::agent_state::{MemoryAgentStateStore, agent_cursor};
use crate::replay::fidelity::Fidelity;
use crate::replay::metrics::ReplayMetricLedger;
use crate::replay::point::{
    CaptureRequest, EquivalenceCheck, EquivalenceReport, ReplayPoint, ReplayRestoreResult,
    RestoreReceipt, RestoreRequest, StateLease,
};
use crate::replay::registry::{
    ChildConcurrency, ChildForker, ChildLease, ChildOutcome, ChildSession, ForkRequest,
    ReplayAdapter, ReplayPointRegistry, RiskAssessment, select_before,
};
use crate::trace::{TraceEventKind, TraceLog};
use sandloop_contract::{CounterfactualRequest, Disposition, ValidationOutcome};

fn hypothesis_json() -> Value {
    json!({
        "hypothesis_id": "h1",
        "item_id": "doc",
        "first_affected_event_id": "g/doc/2",
        "first_affected_sequence": 2,
        "fix_set": [{"validation_id": "parses", "baseline_passed": false}],
        "guard_set": [{"validation_id": "links", "baseline_passed": true}],
        "candidates": [
            {"candidate_id": "good", "public_change_set": {"escape": "html"}},
            {"candidate_id": "breaks-links", "public_change_set": {"strip": "links"}},
        ],
    })
}

fn parse(value: &Value) -> Result<CounterfactualHypothesis, HypothesisError> {
    CounterfactualHypothesis::parse(&value.to_string(), Path::new("H.json"))
}

fn hypothesis() -> CounterfactualHypothesis {
    parse(&hypothesis_json()).unwrap()
}

fn trace() -> AddressableTrace {
    AddressableTrace {
        trace_id: "g".into(),
        branches: vec!["doc".into(), "main".into()],
        events: vec![
            ("g/main/0".into(), 0),
            ("g/main/1".into(), 1),
            ("g/doc/2".into(), 2),
        ],
    }
}

fn point(next_sequence: u64, fidelity: Fidelity) -> ReplayPoint {
    ReplayPoint {
        replay_point_id: format!("rp-{next_sequence}"),
        cursor: crate::replay::point::TraceCursor {
            trace_id: "g".into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence,
            agent_cursor: agent_cursor(&[], "ctx"),
        },
        fidelity,
        captured_projection_digest: Some("d".into()),
        lifecycle: crate::replay::point::Lifecycle::Ready,
        created_event_id: "g/main/1".into(),
        replaces_replay_point_id: None,
    }
}

fn restore(point: &ReplayPoint, fidelity: Fidelity, eligible: bool) -> ReplayRestoreResult {
    ReplayRestoreResult {
        replay_point_id: point.replay_point_id.clone(),
        target_branch_id: "counterfactual-good".into(),
        achieved_fidelity: fidelity,
        equivalent: eligible,
        promotion_eligible: eligible,
        prefix_reused: Some(true),
        report: EquivalenceReport {
            achieved_fidelity: fidelity,
            equivalent: eligible,
            expected_digest: Some("d".into()),
            observed_digest: Some("d".into()),
            checks: vec![],
            sanitized_reason: None,
        },
        restore_minutes: 0.0,
        equivalence_minutes: 0.0,
        suffix_minutes: 0.0,
        replay_wall_minutes: 0.0,
    }
}

fn outcome(id: &str, passed: bool) -> ValidationOutcome {
    ValidationOutcome {
        validation_id: id.into(),
        passed,
        public_summary: None,
    }
}

fn decide(
    outcomes: &[ValidationOutcome],
    eligible: bool,
) -> Result<CounterfactualReplayResult, String> {
    let point = point(1, Fidelity::Exact);
    let restore = restore(&point, Fidelity::Exact, eligible);
    evaluate_candidate(&trace(), &hypothesis(), "good", &point, &restore, outcomes)
}

#[test]
fn a_candidate_is_promoted_only_when_every_fix_passes_and_no_guard_regresses() {
    let result = decide(&[outcome("parses", true), outcome("links", true)], true).unwrap();
    assert_eq!(result.decision, CounterfactualDecision::Promoted);
    assert!(result.promoted());
    assert_eq!(
        result.reason,
        "all fix targets passed and no guard target regressed"
    );
    assert!(result.failed_fixes.is_empty() && result.regressed_guards.is_empty());
}

#[test]
fn a_functional_fix_with_a_cleanup_regression_is_rejected() {
    let result = decide(&[outcome("parses", true), outcome("links", false)], true).unwrap();
    assert_eq!(result.decision, CounterfactualDecision::Rejected);
    assert_eq!(result.regressed_guards, vec!["links"]);
    assert_eq!(result.reason, "one or more guard targets regressed");
}

#[test]
fn failed_or_missing_fix_evidence_is_rejected() {
    let failed = decide(&[outcome("parses", false), outcome("links", true)], true).unwrap();
    assert_eq!(failed.decision, CounterfactualDecision::Rejected);
    assert_eq!(failed.failed_fixes, vec!["parses"]);
    assert_eq!(failed.reason, "one or more fix targets remain failing");

    let missing = decide(&[outcome("links", true)], true).unwrap();
    assert_eq!(missing.decision, CounterfactualDecision::Rejected);
    assert_eq!(missing.missing_validations, vec!["parses"]);
    assert_eq!(missing.reason, "required validation outcomes are missing");
    // Missing outranks a failing fix, as in the reference's order.
    let both = decide(&[outcome("parses", false)], true).unwrap();
    assert_eq!(both.reason, "required validation outcomes are missing");
    assert_eq!(both.failed_fixes, vec!["parses"]);
}

#[test]
fn a_best_effort_replay_is_observed_but_never_promoted() {
    let point = point(1, Fidelity::BestEffort);
    let restore = restore(&point, Fidelity::BestEffort, false);
    let result = evaluate_candidate(
        &trace(),
        &hypothesis(),
        "good",
        &point,
        &restore,
        &[outcome("parses", true), outcome("links", true)],
    )
    .unwrap();
    assert_eq!(result.decision, CounterfactualDecision::ObservedOnly);
    assert_eq!(
        result.reason,
        "restore fidelity or equivalence is insufficient for promotion"
    );
    // Observed-only outranks even missing outcomes.
    assert_eq!(
        decide(&[], false).unwrap().decision,
        CounterfactualDecision::ObservedOnly
    );
}

#[test]
fn an_unaddressable_first_effect_is_rejected() {
    let mut unknown = hypothesis();
    unknown.first_affected_event_id = "g/doc/9".into();
    let point = point(1, Fidelity::Exact);
    let restore = restore(&point, Fidelity::Exact, true);
    let error = evaluate_candidate(&trace(), &unknown, "good", &point, &restore, &[]).unwrap_err();
    assert!(error.starts_with("first_affected_event_id: "), "{error}");

    let mut moved = hypothesis();
    moved.first_affected_sequence = 1;
    let error = evaluate_candidate(&trace(), &moved, "good", &point, &restore, &[]).unwrap_err();
    assert!(
        error.contains("first affected event sequence does not match the addressable trace"),
        "{error}"
    );
}

#[test]
fn the_point_must_be_on_the_trace_before_the_first_affected_event() {
    let hypothesis = hypothesis();
    let late = point(3, Fidelity::Exact);
    let error = evaluate_candidate(
        &trace(),
        &hypothesis,
        "good",
        &late,
        &restore(&late, Fidelity::Exact, true),
        &[],
    )
    .unwrap_err();
    assert_eq!(error, "ReplayPoint must precede the first affected event");

    let mut elsewhere = point(1, Fidelity::Exact);
    elsewhere.cursor.branch_id = "other".into();
    let error = evaluate_candidate(
        &trace(),
        &hypothesis,
        "good",
        &elsewhere,
        &restore(&elsewhere, Fidelity::Exact, true),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        error,
        "ReplayPoint branch does not match the hypothesis trace"
    );

    let mut other_trace = point(1, Fidelity::Exact);
    other_trace.cursor.trace_id = "h".into();
    let error = evaluate_candidate(
        &trace(),
        &hypothesis,
        "good",
        &other_trace,
        &restore(&other_trace, Fidelity::Exact, true),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        error,
        "ReplayPoint trace does not match the hypothesis trace"
    );

    let point = point(1, Fidelity::Exact);
    let mut foreign = restore(&point, Fidelity::Exact, true);
    foreign.replay_point_id = "rp-other".into();
    let error =
        evaluate_candidate(&trace(), &hypothesis, "good", &point, &foreign, &[]).unwrap_err();
    assert_eq!(error, "restore result does not belong to the ReplayPoint");
}

#[test]
fn the_nearest_trusted_point_is_chosen_and_a_nearer_ineligible_one_skipped() {
    let trusted = point(1, Fidelity::Exact);
    let weak = point(2, Fidelity::BestEffort);
    let after = point(3, Fidelity::Exact);
    let points = [trusted.clone(), weak.clone(), after];
    let (chosen, selection) =
        select_before(&points, "g", "main", 2, Fidelity::SemanticEquivalent).unwrap();
    assert_eq!(chosen.replay_point_id, trusted.replay_point_id);
    assert!(selection.fidelity_filtered && !selection.fidelity_fallback);
    // With no trusted point, the nearest weaker one supports an
    // observed-only replay.
    let (chosen, selection) =
        select_before([&weak], "g", "main", 2, Fidelity::SemanticEquivalent).unwrap();
    assert_eq!(chosen.replay_point_id, weak.replay_point_id);
    assert!(selection.fidelity_fallback);
}

#[test]
fn metrics_are_public_and_recomputable_from_the_record() {
    let result = decide(&[outcome("parses", true), outcome("links", true)], true).unwrap();
    let record = result.to_record();
    assert_eq!(record["addressed_prefix_event_count"], 1);
    assert_eq!(record["avoided_prefix_event_count"], 1);
    assert_eq!(record["verified_reused_prefix_event_count"], 1);
    assert_eq!(record["replay_distance_events"], 1);
    // Recomputed from the record's own point and the hypothesis.
    let next = record["restore"]["replay_point_id"].as_str().unwrap();
    assert_eq!(next, "rp-1");
    assert_eq!(
        record["replay_distance_events"].as_u64().unwrap(),
        hypothesis().first_affected_sequence
            - record["addressed_prefix_event_count"].as_u64().unwrap()
    );
    crate::trace::validate_public_payload(&record).unwrap();

    // A restore that did not reuse the prefix verifies no reuse.
    let point = point(1, Fidelity::Exact);
    let mut rebuilt = restore(&point, Fidelity::Exact, true);
    rebuilt.prefix_reused = Some(false);
    let result =
        evaluate_candidate(&trace(), &hypothesis(), "good", &point, &rebuilt, &[]).unwrap();
    assert_eq!(result.verified_reused_prefix_event_count, 0);
    assert_eq!(result.addressed_prefix_event_count, 1);
}

#[test]
fn adapter_owned_paths_are_rejected_in_public_summaries_and_change_sets() {
    let error = check_validation_outcomes(vec![ValidationOutcome {
        validation_id: "parses".into(),
        passed: true,
        public_summary: Some("/home/me/secret.txt".into()),
    }])
    .unwrap_err();
    assert!(
        error.contains("public_summary is not public-safe"),
        "{error}"
    );

    let mut value = hypothesis_json();
    value["candidates"][0]["public_change_set"] = json!({"patch": "/etc/passwd"});
    let error = parse(&value).unwrap_err();
    assert_eq!(error.field, "candidates[0].public_change_set");
    assert!(
        error
            .message
            .contains("candidates[0].public_change_set.patch"),
        "the place is named from the field: {error}"
    );
    let mut value = hypothesis_json();
    value["candidates"][1]["intent"] = json!({"token": "x"});
    assert_eq!(parse(&value).unwrap_err().field, "candidates[1].intent");
    let mut value = hypothesis_json();
    value["candidates"][1]["target_branch_id"] = json!("/etc/passwd");
    assert_eq!(
        parse(&value).unwrap_err().field,
        "candidates[1].target_branch_id"
    );
}

#[test]
fn reported_outcomes_need_unique_non_blank_ids() {
    let error =
        check_validation_outcomes(vec![outcome("a", true), outcome(" a ", false)]).unwrap_err();
    assert!(error.contains("\"a\" is reported twice"), "{error}");
    let error = check_validation_outcomes(vec![outcome("  ", true)]).unwrap_err();
    assert!(error.contains("validation_id must be non-empty"), "{error}");
    let record = validation_outcomes_record(&[outcome("a", true)]);
    assert_eq!(
        Value::Object(record),
        json!({"outcomes": [{"validation_id": "a", "passed": true, "public_summary": null}]})
    );
}

#[test]
fn invalid_fix_and_guard_sets_are_rejected_naming_the_field() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!([]),
            "fix_set",
            "fix_set must contain at least one failed baseline target",
        ),
        (
            json!([{"validation_id": "parses", "baseline_passed": true}]),
            "fix_set[0].baseline_passed",
            "fix_set targets must fail in the baseline",
        ),
        (
            json!([{"validation_id": " ", "baseline_passed": false}]),
            "fix_set[0].validation_id",
            "validation_id must be non-empty",
        ),
        (
            json!([{"validation_id": "links", "baseline_passed": false}]),
            "guard_set[0].validation_id",
            "validation ids must be unique",
        ),
    ];
    for (fix_set, field, message) in cases {
        let mut value = hypothesis_json();
        value["fix_set"] = fix_set;
        let error = parse(&value).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert!(error.message.contains(message), "{error}");
    }
    let mut value = hypothesis_json();
    value["guard_set"] = json!([{"validation_id": "links", "baseline_passed": false}]);
    let error = parse(&value).unwrap_err();
    assert_eq!(error.field, "guard_set[0].baseline_passed");
    assert_eq!(error.message, "guard_set targets must pass in the baseline");
    value["guard_set"] = json!([]);
    assert_eq!(
        parse(&value).unwrap_err().message,
        "guard_set must contain at least one passing baseline target"
    );
}

#[test]
fn the_hypothesis_rules_of_the_reference_hold() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "hypothesis_id",
            json!(" "),
            "hypothesis_id must be non-empty",
        ),
        (
            "first_affected_event_id",
            json!(""),
            "first_affected_event_id must be non-empty",
        ),
        (
            "first_affected_sequence",
            json!(-1),
            "first_affected_sequence must be non-negative",
        ),
        (
            "minimum_fidelity",
            json!("non_replayable"),
            "counterfactual replay requires a replayable fidelity",
        ),
        ("minimum_fidelity", json!("perfect"), "perfect"),
        ("candidates", json!([]), "at least one candidate"),
        (
            "candidates",
            Value::Array(
                (0..=hypothesis::MAX_CANDIDATES)
                    .map(|n| json!({"candidate_id": format!("c{n}"), "public_change_set": {}}))
                    .collect(),
            ),
            "at most 32 run as one group",
        ),
        ("first_affected_sequence", json!("2"), "invalid type"),
    ];
    for (field, bad, message) in cases {
        let mut value = hypothesis_json();
        value[field] = bad;
        let error = parse(&value).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert!(error.message.contains(message), "{error}");
        assert!(
            error.to_string().starts_with(&format!("H.json: {field}: ")),
            "{error}"
        );
    }
    let mut value = hypothesis_json();
    value["candidates"][1]["candidate_id"] = json!("good");
    assert_eq!(
        parse(&value).unwrap_err().field,
        "candidates[1].candidate_id"
    );
    let mut value = hypothesis_json();
    value["candidates"][0]["target_branch_id"] = json!("counterfactual-breaks-links");
    assert_eq!(
        parse(&value).unwrap_err().field,
        "candidates[1].target_branch_id"
    );
    let mut value = hypothesis_json();
    value["fix_sets"] = json!([]);
    assert!(
        parse(&value)
            .unwrap_err()
            .message
            .contains("unknown field `fix_sets`")
    );

    for (field, bad, message) in [
        (
            "hypothesis_id",
            json!("x".repeat(hypothesis::MAX_ID_BYTES + 1)),
            "an id is at most",
        ),
        ("item_id", json!("a\nb"), "control characters"),
    ] {
        let mut value = hypothesis_json();
        value[field] = bad;
        let error = parse(&value).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert!(error.message.contains(message), "{error}");
    }
    for text in ["[1]", "\"h\"", " 3"] {
        let error = CounterfactualHypothesis::parse(text, Path::new("H.json")).unwrap_err();
        assert!(error.message.contains("one JSON object"), "{error}");
    }
    let with_bom = format!("\u{feff}{}", hypothesis_json());
    assert!(CounterfactualHypothesis::parse(&with_bom, Path::new("H.json")).is_ok());

    let parsed = hypothesis();
    assert_eq!(parsed.minimum_fidelity, Fidelity::SemanticEquivalent);
    let good = &parsed.candidates[0];
    assert_eq!(good.target_branch_id, "counterfactual-good");
    assert_eq!(
        Value::Object(good.intent.clone()),
        json!({"hypothesis_id": "h1", "candidate_id": "good", "public_change_set": {"escape": "html"}})
    );
    // A given intent cannot hide the change from the policy.
    let mut value = hypothesis_json();
    value["candidates"][0]["intent"] =
        json!({"summary": "small", "public_change_set": {"nothing": "here"}});
    let parsed = parse(&value).unwrap();
    assert_eq!(
        Value::Object(parsed.candidates[0].intent.clone()),
        json!({"summary": "small", "hypothesis_id": "h1", "candidate_id": "good",
               "public_change_set": {"escape": "html"}})
    );
}

// ---- The whole group: candidates as isolated children of a point. ----

/// How one candidate's child restores and what it reports.
#[derive(Clone, Default)]
struct Script {
    fidelity: Option<Fidelity>,
    lie_digest: bool,
    outcomes: Vec<ValidationOutcome>,
    deny_intent: bool,
}

#[derive(Default)]
struct Forker {
    scripts: BTreeMap<String, Script>,
    ran: Arc<std::sync::Mutex<Vec<(String, CounterfactualRequest)>>>,
}

struct Child {
    script: Script,
    ran: Arc<std::sync::Mutex<Vec<(String, CounterfactualRequest)>>>,
    id: String,
}

impl ChildSession for Child {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let best_effort = receipt.achieved_fidelity == Fidelity::BestEffort;
        Ok(EquivalenceReport {
            achieved_fidelity: receipt.achieved_fidelity,
            equivalent: !best_effort,
            expected_digest: Some("digest".into()),
            observed_digest: Some(
                if self.script.lie_digest {
                    "other"
                } else {
                    "digest"
                }
                .into(),
            ),
            checks: vec![EquivalenceCheck {
                check_id: "digest".into(),
                passed: !best_effort,
                public_summary: None,
            }],
            sanitized_reason: None,
        })
    }
    fn assess_intent(
        &mut self,
        intent: &Map<String, Value>,
    ) -> Result<RiskAssessment, AdapterError> {
        assert_eq!(intent["candidate_id"], Value::from(self.id.as_str()));
        Ok(RiskAssessment {
            disposition: if self.script.deny_intent {
                Disposition::Deny
            } else {
                Disposition::Allow
            },
            policy_id: "change-budget".into(),
            sanitized_reason: None,
        })
    }
    fn run(&mut self, _: &Item) -> Result<Record, AdapterError> {
        panic!("a counterfactual child runs run_counterfactual, not run")
    }
    fn run_counterfactual(
        &mut self,
        _: &Item,
        request: &CounterfactualRequest,
    ) -> Result<Vec<ValidationOutcome>, AdapterError> {
        self.ran
            .lock()
            .unwrap()
            .push((self.id.clone(), request.clone()));
        Ok(self.script.outcomes.clone())
    }
    fn assess_outcome(
        &mut self,
        _: &Map<String, Value>,
        outcome: &Record,
    ) -> Result<RiskAssessment, AdapterError> {
        assert!(outcome.contains_key("outcomes"));
        Ok(RiskAssessment {
            disposition: Disposition::Allow,
            policy_id: "change-budget".into(),
            sanitized_reason: None,
        })
    }
    fn release(&mut self) -> Result<(), AdapterError> {
        Ok(())
    }
}

impl ChildForker for Forker {
    type Session = Child;
    fn has_risk_policy(&self) -> bool {
        true
    }
    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<Child>, AdapterError> {
        let script = self
            .scripts
            .get(&request.child_id)
            .cloned()
            .unwrap_or_default();
        let key = self
            .scripts
            .keys()
            .position(|id| *id == request.child_id)
            .unwrap_or(99) as u64;
        Ok(ChildLease {
            receipt: RestoreReceipt {
                achieved_fidelity: script.fidelity.unwrap_or(Fidelity::Exact),
                restored_projection_digest: None,
                prefix_reused: Some(true),
            },
            concurrency: ChildConcurrency::ThreadSafe,
            worker_identity: None,
            child_key: key,
            session: Child {
                script,
                ran: Arc::clone(&self.ran),
                id: request.child_id.clone(),
            },
        })
    }
}

struct Parent;

impl ReplayAdapter for Parent {
    type Binding = u8;
    fn capture_replay_state(&mut self, _: &CaptureRequest) -> Result<StateLease<u8>, AdapterError> {
        Ok(StateLease {
            binding: Some(1),
            fidelity: Fidelity::Exact,
            projection_digest: Some("digest".into()),
        })
    }
    fn restore_replay_state(
        &mut self,
        _: &u8,
        _: &RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError> {
        unreachable!("children never restore the parent")
    }
    fn validate_replay_equivalence(
        &mut self,
        _: &u8,
        _: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        unreachable!()
    }
    fn finalize_replay_suffix(
        &mut self,
        _: &u8,
        _: &RestoreRequest,
        _: bool,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
    fn release_replay_state(&mut self, _: &u8) -> Result<(), AdapterError> {
        Ok(())
    }
}

/// A registry holding one exact point `rp` on trace `g`, branch `main`,
/// after one event (next sequence 1), and its addressable trace with the
/// failed item's event `g/doc/2` at sequence 2.
fn group_setup() -> (
    ReplayPointRegistry<u8, MemoryAgentStateStore>,
    ReplayPoint,
    AddressableTrace,
) {
    let mut registry = ReplayPointRegistry::new(
        MemoryAgentStateStore::new(),
        Arc::new(ReplayMetricLedger::new()),
    );
    let mut log = TraceLog::new("g", "main").unwrap();
    log.emit(TraceEventKind::Lifecycle, json!({}), None, None)
        .unwrap();
    let cursor = agent_cursor(log.events(), "ctx");
    let point = registry
        .capture_at_head(&mut Parent, &mut log, cursor, "rp", "group", None)
        .unwrap();
    let mut trace = trace();
    trace.events = log
        .events()
        .iter()
        .map(|e| (e.event_id.clone(), e.sequence))
        .collect();
    trace.events.push(("g/doc/2".into(), 2));
    (registry, point, trace)
}

fn run_group(forker: &mut Forker, workers: usize) -> Result<CounterfactualGroupResult, String> {
    let (mut registry, point, trace) = group_setup();
    let hypothesis = hypothesis();
    let mut item = Item::new();
    item.insert("item_id".into(), json!("doc"));
    let tasks = candidate_tasks(&hypothesis, &point, &item);
    let settled: Vec<ChildOutcome> = registry
        .run_child_group_from(forker, &point.replay_point_id, tasks, workers, true)
        .map_err(|error| error.to_string())?;
    settle_group(&trace, &hypothesis, &point, settled, workers > 1)
}

#[test]
fn every_candidate_runs_in_its_own_child_and_is_decided_on_its_own() {
    let mut forker = Forker::default();
    forker.scripts.insert(
        "good".into(),
        Script {
            outcomes: vec![outcome("parses", true), outcome("links", true)],
            ..Script::default()
        },
    );
    forker.scripts.insert(
        "breaks-links".into(),
        Script {
            outcomes: vec![outcome("parses", true), outcome("links", false)],
            ..Script::default()
        },
    );
    let group = run_group(&mut forker, 2).unwrap();
    assert_eq!(group.promoted(), vec!["good"]);
    let decisions: Vec<_> = group
        .candidates
        .iter()
        .map(|c| (c.candidate_id().to_string(), c.decision()))
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("good".to_string(), Some(CounterfactualDecision::Promoted)),
            (
                "breaks-links".to_string(),
                Some(CounterfactualDecision::Rejected)
            ),
        ]
    );
    // Each child got its own request, with its change set and the point.
    let mut ran = forker.ran.lock().unwrap().clone();
    ran.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(ran[1].0, "good");
    assert_eq!(ran[1].1.public_change_set, r#"{"escape":"html"}"#);
    assert_eq!(ran[1].1.replay_point_id, "rp");
    assert_eq!(ran[1].1.first_affected_event_id, "g/doc/2");
    let record = group.to_record();
    assert_eq!(record["candidate_count"], 2);
    assert_eq!(record["evaluated_count"], 2);
    assert_eq!(record["parallel_requested"], true);
    assert_eq!(record["candidates"][0]["status"], "evaluated");
    assert_eq!(
        record["candidates"][0]["replay_result"]["decision"],
        "promoted"
    );
    assert_eq!(
        record["candidates"][0]["execution_result"]["isolated"],
        true
    );
}

#[test]
fn a_denied_candidate_fails_alone_and_a_best_effort_one_is_only_observed() {
    let mut forker = Forker::default();
    forker.scripts.insert(
        "good".into(),
        Script {
            fidelity: Some(Fidelity::BestEffort),
            outcomes: vec![outcome("parses", true), outcome("links", true)],
            ..Script::default()
        },
    );
    forker.scripts.insert(
        "breaks-links".into(),
        Script {
            deny_intent: true,
            ..Script::default()
        },
    );
    let group = run_group(&mut forker, 1).unwrap();
    assert!(group.promoted().is_empty());
    assert_eq!(
        group.candidates[0].decision(),
        Some(CounterfactualDecision::ObservedOnly)
    );
    let record = group.to_record();
    assert_eq!(record["execution_failure_count"], 1);
    let failure = &record["candidates"][1];
    assert_eq!(failure["status"], "execution_failed");
    assert_eq!(failure["execution_failure"]["stage"], "intent");
    assert_eq!(
        failure["execution_failure"]["error_type"],
        "replay_risk_denied"
    );
    // Only the allowed candidate ran.
    assert_eq!(forker.ran.lock().unwrap().len(), 1);
}

#[test]
fn an_exact_restore_with_a_mismatched_digest_is_rejected_before_any_suffix() {
    let mut forker = Forker::default();
    forker.scripts.insert(
        "good".into(),
        Script {
            lie_digest: true,
            ..Script::default()
        },
    );
    let error = run_group(&mut forker, 1).unwrap_err();
    assert!(error.contains("digest"), "{error}");
    assert!(forker.ran.lock().unwrap().is_empty(), "no suffix ran");
}

#[test]
fn a_semantic_restore_needs_verified_equivalence() {
    // A child claiming semantic equivalence without verifying it breaks
    // the contract: the group fails before any suffix.
    struct Unverified(Forker);
    impl ChildForker for Unverified {
        type Session = UnverifiedChild;
        fn has_risk_policy(&self) -> bool {
            false
        }
        fn fork(
            &mut self,
            request: &ForkRequest,
        ) -> Result<ChildLease<UnverifiedChild>, AdapterError> {
            let lease = self.0.fork(request)?;
            Ok(ChildLease {
                receipt: RestoreReceipt {
                    achieved_fidelity: Fidelity::SemanticEquivalent,
                    ..lease.receipt
                },
                concurrency: lease.concurrency,
                worker_identity: lease.worker_identity,
                child_key: lease.child_key,
                session: UnverifiedChild(lease.session),
            })
        }
    }
    struct UnverifiedChild(Child);
    impl ChildSession for UnverifiedChild {
        fn validate_equivalence(
            &mut self,
            receipt: &RestoreReceipt,
        ) -> Result<EquivalenceReport, AdapterError> {
            let mut report = self.0.validate_equivalence(receipt)?;
            report.equivalent = false;
            report.checks[0].passed = false;
            Ok(report)
        }
        fn assess_intent(
            &mut self,
            intent: &Map<String, Value>,
        ) -> Result<RiskAssessment, AdapterError> {
            self.0.assess_intent(intent)
        }
        fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
            self.0.run(task)
        }
        fn run_counterfactual(
            &mut self,
            task: &Item,
            request: &CounterfactualRequest,
        ) -> Result<Vec<ValidationOutcome>, AdapterError> {
            self.0.run_counterfactual(task, request)
        }
        fn assess_outcome(
            &mut self,
            intent: &Map<String, Value>,
            outcome: &Record,
        ) -> Result<RiskAssessment, AdapterError> {
            self.0.assess_outcome(intent, outcome)
        }
        fn release(&mut self) -> Result<(), AdapterError> {
            Ok(())
        }
    }
    let (mut registry, point, _) = group_setup();
    let mut item = Item::new();
    item.insert("item_id".into(), json!("doc"));
    let tasks = candidate_tasks(&hypothesis(), &point, &item);
    let mut forker = Unverified(Forker::default());
    let error = registry
        .run_child_group_from(&mut forker, &point.replay_point_id, tasks, 1, true)
        .unwrap_err();
    assert!(error.to_string().contains("equivalence"), "{error}");
    assert!(forker.0.ran.lock().unwrap().is_empty());
}

#[test]
fn outcomes_that_break_the_contract_fail_only_their_candidate() {
    let mut forker = Forker::default();
    forker.scripts.insert(
        "good".into(),
        Script {
            outcomes: vec![outcome("parses", true), outcome("parses", false)],
            ..Script::default()
        },
    );
    forker.scripts.insert(
        "breaks-links".into(),
        Script {
            outcomes: vec![outcome("parses", true), outcome("links", true)],
            ..Script::default()
        },
    );
    let group = run_group(&mut forker, 1).unwrap();
    assert!(matches!(
        group.candidates[0],
        CandidateResult::ExecutionFailed(_)
    ));
    assert_eq!(group.promoted(), vec!["breaks-links"]);
}

#[test]
fn the_addressable_trace_is_read_from_the_run_and_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("traces")).unwrap();
    let line = |id: &str, branch: &str, seq: u64| {
        json!({"event_id": id, "trace_id": "g", "branch_id": branch, "sequence": seq}).to_string()
    };
    let text = [
        line("g/main/0", "main", 0),
        line("g/doc/1", "doc", 1),
        line("g/other/1", "other", 1),
        json!({"event_id": "x", "trace_id": "h", "branch_id": "main", "sequence": 0}).to_string(),
    ]
    .join("\n");
    std::fs::write(
        dir.path().join("traces/epoch-0002.jsonl"),
        format!("{text}\n"),
    )
    .unwrap();
    let trace =
        read_addressable_trace(dir.path(), 2, "g", vec!["doc".into(), "main".into()]).unwrap();
    assert_eq!(
        trace.events,
        vec![("g/main/0".to_string(), 0), ("g/doc/1".to_string(), 1)]
    );
    let missing = read_addressable_trace(dir.path(), 3, "g", vec!["doc".into()]).unwrap_err();
    assert!(
        missing.contains("epoch-0003.jsonl does not exist"),
        "{missing}"
    );
    std::fs::write(
        dir.path().join("traces/epoch-0002.jsonl"),
        format!(
            "{}\n{}\n",
            line("g/main/0", "main", 0),
            r#"{"event_id":"g/doc/1","trace_id":"g","branch_id":"doc","sequence":-1}"#
        ),
    )
    .unwrap();
    let damaged = read_addressable_trace(dir.path(), 2, "g", vec!["doc".into()]).unwrap_err();
    assert!(damaged.contains("epoch-0002.jsonl:2"), "{damaged}");
    assert!(damaged.contains("sequence"), "{damaged}");
}
