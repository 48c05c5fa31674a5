use super::*;
use crate::trace::TraceEventKind;
use serde_json::json;

/// A branch of `len` events `e0..`, sequences from 0.
fn trace(len: u64) -> TraceBoundaries {
    TraceBoundaries::from_sequences((0..len).map(|i| (format!("e{i}"), i))).unwrap()
}

/// A candidate at `next`, naming `e{next-1}` (none at the origin).
fn at(next: u64, fidelity: Fidelity, capture: f64, restore: f64) -> ReplayPositionCost {
    let id = next.checked_sub(1).map(|sequence| format!("e{sequence}"));
    ReplayPositionCost::new(id.as_deref(), next, fidelity, capture, restore).unwrap()
}

fn observed(
    first: u64,
    terminal: u64,
    full: f64,
    fidelity: Fidelity,
    weight: f64,
) -> FailureReplayObservation {
    FailureReplayObservation::new(first, terminal, full, fidelity, weight).unwrap()
}

fn plan(
    trace: &TraceBoundaries,
    candidates: &[ReplayPositionCost],
    observations: &[FailureReplayObservation],
) -> Vec<AdaptiveReplayPointProposal> {
    plan_adaptive_replay_points(
        trace,
        candidates,
        observations,
        usize::MAX,
        DEFAULT_MINIMUM_SCORE_MINUTES,
    )
    .unwrap()
}

fn positions(proposals: &[AdaptiveReplayPointProposal]) -> Vec<u64> {
    proposals.iter().map(|p| p.next_sequence).collect()
}

/// Fixture shared with the reference: 12 events, five candidates, three
/// observations; the expected numbers were printed by the reference's
/// `plan_adaptive_replay_points(...).to_record()`.
fn golden_inputs() -> (
    TraceBoundaries,
    Vec<ReplayPositionCost>,
    Vec<FailureReplayObservation>,
) {
    let candidates = vec![
        at(0, Fidelity::Exact, 0.5, 0.0),
        at(3, Fidelity::SemanticEquivalent, 1.0, 2.0),
        at(6, Fidelity::BestEffort, 0.25, 1.0),
        at(8, Fidelity::Exact, 2.0, 0.5),
        at(10, Fidelity::Exact, 0.1, 0.1),
    ];
    let observations = vec![
        observed(8, 12, 30.0, Fidelity::BestEffort, 1.0),
        observed(6, 10, 20.0, Fidelity::SemanticEquivalent, 2.0),
        observed(10, 11, 45.5, Fidelity::Exact, 0.5),
    ];
    (trace(12), candidates, observations)
}

#[test]
fn golden_ranking_matches_the_reference_to_the_bit() {
    let (trace, candidates, observations) = golden_inputs();
    let proposals = plan_adaptive_replay_points(
        &trace,
        &candidates,
        &observations,
        10,
        DEFAULT_MINIMUM_SCORE_MINUTES,
    )
    .unwrap();
    let records = serde_json::to_value(&proposals).unwrap();
    assert_eq!(
        records,
        json!([
            {"after_event_id": "e7", "next_sequence": 8, "achievable_fidelity": "exact",
             "score_minutes": 33.79545454545455, "expected_saved_minutes": 35.79545454545455,
             "expected_suffix_events": 3.6666666666666665, "eligible_observation_weight": 1.5,
             "capture_minutes": 2.0, "restore_minutes": 0.5},
            {"after_event_id": "e9", "next_sequence": 10, "achievable_fidelity": "exact",
             "score_minutes": 20.531818181818178, "expected_saved_minutes": 20.63181818181818,
             "expected_suffix_events": 1.0, "eligible_observation_weight": 0.5,
             "capture_minutes": 0.1, "restore_minutes": 0.1},
            {"after_event_id": "e5", "next_sequence": 6, "achievable_fidelity": "best_effort",
             "score_minutes": 13.75, "expected_saved_minutes": 14.0,
             "expected_suffix_events": 6.0, "eligible_observation_weight": 1.0,
             "capture_minutes": 0.25, "restore_minutes": 1.0},
            {"after_event_id": "e2", "next_sequence": 3, "achievable_fidelity": "semantic_equivalent",
             "score_minutes": 12.5, "expected_saved_minutes": 13.5,
             "expected_suffix_events": 7.666666666666667, "eligible_observation_weight": 3.0,
             "capture_minutes": 1.0, "restore_minutes": 2.0},
        ])
    );

    // A threshold of -1 lets the origin in: it saves nothing (reused
    // fraction 0) but costs only its capture.
    let lenient =
        plan_adaptive_replay_points(&trace, &candidates, &observations, 10, -1.0).unwrap();
    assert_eq!(positions(&lenient), [8, 10, 6, 3, 0]);
    let origin = &lenient[4];
    assert_eq!(origin.after_event_id, None);
    assert_eq!(origin.score_minutes, -0.5);
    assert_eq!(origin.expected_saved_minutes, 0.0);
    assert_eq!(origin.expected_suffix_events, 10.714285714285714);
    assert_eq!(origin.eligible_observation_weight, 3.5);
}

#[test]
fn proposal_serialises_with_the_reference_keys_in_order() {
    let proposals = plan(
        &trace(4),
        &[at(0, Fidelity::SemanticEquivalent, 0.0, 0.0)],
        &[observed(1, 4, 8.0, Fidelity::BestEffort, 1.0)],
    );
    let text = serde_json::to_string(&proposals[0]).unwrap();
    assert_eq!(
        text,
        "{\"after_event_id\":null,\"next_sequence\":0,\
             \"achievable_fidelity\":\"semantic_equivalent\",\"score_minutes\":0.0,\
             \"expected_saved_minutes\":0.0,\"expected_suffix_events\":4.0,\
             \"eligible_observation_weight\":1.0,\"capture_minutes\":0.0,\
             \"restore_minutes\":0.0}"
    );
}

#[test]
fn ranks_by_score_highest_first() {
    // One observation: failure at 8, ends at 10, 10 minutes to replay.
    // Saved minutes grow with the reused prefix: 2, 4, 8.
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [
        at(2, Fidelity::Exact, 0.0, 0.0),
        at(8, Fidelity::Exact, 0.0, 0.0),
        at(4, Fidelity::Exact, 0.0, 0.0),
    ];
    let proposals = plan(&trace(10), &candidates, &observations);
    assert_eq!(positions(&proposals), [8, 4, 2]);
    let scores: Vec<f64> = proposals.iter().map(|p| p.score_minutes).collect();
    assert_eq!(scores, [8.0, 4.0, 2.0]);
}

#[test]
fn equal_scores_prefer_more_eligible_weight() {
    // Both candidates sit after e3; restore costs swamp any saving, so
    // both score 0. Only the exact one serves the exact observation.
    let observations = [
        observed(5, 10, 10.0, Fidelity::BestEffort, 1.0),
        observed(5, 10, 10.0, Fidelity::Exact, 2.0),
    ];
    let weak = at(4, Fidelity::BestEffort, 0.0, 100.0);
    let strong = at(4, Fidelity::Exact, 0.0, 100.0);
    let proposals = plan(&trace(10), &[weak, strong], &observations);
    let fidelities: Vec<Fidelity> = proposals.iter().map(|p| p.achievable_fidelity).collect();
    assert_eq!(fidelities, [Fidelity::Exact, Fidelity::BestEffort]);
    assert_eq!(proposals[0].score_minutes, proposals[1].score_minutes);
    assert_eq!(proposals[0].eligible_observation_weight, 3.0);
    assert_eq!(proposals[1].eligible_observation_weight, 1.0);
}

#[test]
fn equal_score_and_weight_prefer_the_later_boundary() {
    let observations = [observed(6, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [
        at(0, Fidelity::Exact, 0.0, 100.0),
        at(5, Fidelity::Exact, 0.0, 100.0),
        at(2, Fidelity::Exact, 0.0, 100.0),
    ];
    let proposals = plan(&trace(10), &candidates, &observations);
    assert_eq!(positions(&proposals), [5, 2, 0]);
    assert!(proposals.iter().all(|p| p.score_minutes == 0.0));
}

fn proposal(score: f64, weight: f64, next: u64, id: Option<&str>) -> AdaptiveReplayPointProposal {
    AdaptiveReplayPointProposal {
        after_event_id: id.map(str::to_string),
        next_sequence: next,
        achievable_fidelity: Fidelity::Exact,
        score_minutes: score,
        expected_saved_minutes: score,
        expected_suffix_events: 1.0,
        eligible_observation_weight: weight,
        capture_minutes: 0.0,
        restore_minutes: 0.0,
    }
}

#[test]
fn rank_order_is_the_reference_sort_key() {
    // A valid trace gives each boundary one id, so the id key only ever
    // decides between hand-built proposals; the comparator still
    // follows the reference: missing id sorts as "", then ascending.
    let mut proposals = [
        proposal(1.0, 1.0, 3, Some("b")),
        proposal(1.0, 1.0, 3, Some("a")),
        proposal(1.0, 1.0, 3, None),
        proposal(1.0, 2.0, 1, Some("z")),
        proposal(2.0, 0.5, 0, None),
        proposal(1.0, 1.0, 4, Some("c")),
        proposal(-1.0, 9.0, 9, Some("y")),
    ];
    proposals.sort_by(rank_order);
    let keys: Vec<(u64, Option<&str>)> = proposals
        .iter()
        .map(|p| (p.next_sequence, p.after_event_id.as_deref()))
        .collect();
    assert_eq!(
        keys,
        [
            (0, None),
            (1, Some("z")),
            (4, Some("c")),
            (3, None),
            (3, Some("a")),
            (3, Some("b")),
            (9, Some("y")),
        ]
    );
}

#[test]
fn full_ties_keep_input_order() {
    let observations = [observed(6, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let first = at(4, Fidelity::Exact, 0.0, 100.0);
    let second = at(4, Fidelity::SemanticEquivalent, 0.0, 100.0);
    let proposals = plan(&trace(10), &[first, second], &observations);
    assert_eq!(proposals[0].achievable_fidelity, Fidelity::Exact);
    assert_eq!(
        proposals[1].achievable_fidelity,
        Fidelity::SemanticEquivalent
    );
}

#[test]
fn only_boundaries_at_or_before_the_first_effect_are_eligible() {
    let observations = [observed(5, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [
        at(6, Fidelity::Exact, 0.0, 0.0),
        at(5, Fidelity::Exact, 0.0, 0.0),
        at(4, Fidelity::Exact, 0.0, 0.0),
    ];
    let proposals = plan(&trace(10), &candidates, &observations);
    assert_eq!(positions(&proposals), [5, 4]);
    assert_eq!(proposals[0].expected_saved_minutes, 5.0);
}

#[test]
fn eligibility_needs_the_observation_fidelity() {
    let observations = [
        observed(8, 10, 10.0, Fidelity::SemanticEquivalent, 1.0),
        observed(8, 10, 10.0, Fidelity::BestEffort, 3.0),
    ];
    let best_effort = plan(
        &trace(10),
        &[at(5, Fidelity::BestEffort, 0.0, 0.0)],
        &observations,
    );
    assert_eq!(best_effort[0].eligible_observation_weight, 3.0);
    assert_eq!(best_effort[0].expected_saved_minutes, 15.0);

    let semantic = plan(
        &trace(10),
        &[at(5, Fidelity::SemanticEquivalent, 0.0, 0.0)],
        &observations,
    );
    assert_eq!(semantic[0].eligible_observation_weight, 4.0);
    assert_eq!(semantic[0].expected_saved_minutes, 20.0);

    let exact_only = [observed(8, 10, 10.0, Fidelity::Exact, 1.0)];
    let refused = plan(
        &trace(10),
        &[at(5, Fidelity::SemanticEquivalent, 0.0, 0.0)],
        &exact_only,
    );
    assert!(refused.is_empty());
}

#[test]
fn candidates_without_eligible_observations_are_left_out_even_below_any_threshold() {
    let observations = [observed(2, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let proposals = plan_adaptive_replay_points(
        &trace(10),
        &[at(5, Fidelity::Exact, 0.0, 0.0)],
        &observations,
        3,
        f64::NEG_INFINITY,
    )
    .unwrap();
    assert!(proposals.is_empty());
}

#[test]
fn threshold_keeps_scores_equal_to_it_and_drops_lower_ones() {
    // Saved: 2 at next 2, 4 at next 4, 6 at next 6.
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [
        at(2, Fidelity::Exact, 0.0, 0.0),
        at(4, Fidelity::Exact, 0.0, 0.0),
        at(6, Fidelity::Exact, 0.0, 0.0),
    ];
    let run = |threshold| {
        positions(
            &plan_adaptive_replay_points(&trace(10), &candidates, &observations, 10, threshold)
                .unwrap(),
        )
    };
    assert_eq!(run(4.0), [6, 4]);
    assert_eq!(run(4.000001), [6]);
    assert_eq!(run(6.5), Vec::<u64>::new());
    assert_eq!(run(f64::INFINITY), Vec::<u64>::new());
    assert_eq!(run(f64::NEG_INFINITY), [6, 4, 2]);
}

#[test]
fn capture_cost_is_subtracted_once_from_the_weighted_saving() {
    let observations = [
        observed(8, 10, 10.0, Fidelity::BestEffort, 1.0),
        observed(8, 10, 10.0, Fidelity::BestEffort, 1.0),
    ];
    // Saves 5 per observation, 10 in all; capture 3 leaves 7.
    let proposals = plan(
        &trace(10),
        &[at(5, Fidelity::Exact, 3.0, 0.0)],
        &observations,
    );
    assert_eq!(proposals[0].expected_saved_minutes, 10.0);
    assert_eq!(proposals[0].score_minutes, 7.0);
    assert_eq!(proposals[0].capture_minutes, 3.0);

    // Capture beyond the saving makes the score negative: dropped at
    // the default threshold, kept (and ranked below) at a lower one.
    let candidates = [
        at(5, Fidelity::Exact, 12.0, 0.0),
        at(4, Fidelity::Exact, 0.0, 0.0),
    ];
    assert_eq!(
        positions(&plan(&trace(10), &candidates, &observations)),
        [4]
    );
    let lenient =
        plan_adaptive_replay_points(&trace(10), &candidates, &observations, 5, -10.0).unwrap();
    assert_eq!(positions(&lenient), [4, 5]);
    assert_eq!(lenient[1].score_minutes, -2.0);
}

#[test]
fn restore_cost_is_clamped_per_observation_not_overall() {
    // At next 5: the first observation reuses 5 of 10 minutes, the
    // second 0.5 of 1 minute; restore 2 makes the second's saving 0,
    // not -1.5.
    let observations = [
        observed(8, 10, 10.0, Fidelity::BestEffort, 1.0),
        observed(8, 10, 1.0, Fidelity::BestEffort, 1.0),
    ];
    let proposals = plan(
        &trace(10),
        &[at(5, Fidelity::Exact, 0.0, 2.0)],
        &observations,
    );
    assert_eq!(proposals[0].expected_saved_minutes, 3.0);
    assert_eq!(proposals[0].score_minutes, 3.0);
    assert_eq!(proposals[0].restore_minutes, 2.0);

    // A restore dearer than every saving still proposes, at score 0.
    let swamped = plan(
        &trace(10),
        &[at(5, Fidelity::Exact, 0.0, 50.0)],
        &observations,
    );
    assert_eq!(swamped[0].expected_saved_minutes, 0.0);
    assert_eq!(swamped[0].score_minutes, 0.0);
}

#[test]
fn expected_suffix_events_is_the_weighted_mean_over_eligible_observations() {
    let observations = [
        observed(5, 10, 0.0, Fidelity::BestEffort, 1.0),
        observed(6, 20, 0.0, Fidelity::BestEffort, 3.0),
        // Ineligible (first effect before the boundary): no say.
        observed(2, 30, 0.0, Fidelity::BestEffort, 100.0),
    ];
    let proposals = plan(
        &trace(30),
        &[at(4, Fidelity::Exact, 0.0, 0.0)],
        &observations,
    );
    // (1 * (10 - 4) + 3 * (20 - 4)) / (1 + 3) = 54 / 4.
    assert_eq!(proposals[0].expected_suffix_events, 13.5);
    assert_eq!(proposals[0].eligible_observation_weight, 4.0);
}

#[test]
fn weights_scale_the_saving() {
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 2.5)];
    let proposals = plan(
        &trace(10),
        &[at(4, Fidelity::Exact, 1.0, 0.0)],
        &observations,
    );
    assert_eq!(proposals[0].expected_saved_minutes, 10.0);
    assert_eq!(proposals[0].score_minutes, 9.0);
}

#[test]
fn max_proposals_truncates_after_ranking() {
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates: Vec<_> = (1..=8)
        .map(|next| at(next, Fidelity::Exact, 0.0, 0.0))
        .collect();
    let top = |max| {
        positions(
            &plan_adaptive_replay_points(&trace(10), &candidates, &observations, max, 0.0).unwrap(),
        )
    };
    assert_eq!(top(1), [8]);
    assert_eq!(top(DEFAULT_MAX_PROPOSALS), [8, 7, 6]);
    assert_eq!(top(100), [8, 7, 6, 5, 4, 3, 2, 1]);
}

#[test]
fn empty_inputs_plan_nothing_before_any_check() {
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [at(5, Fidelity::Exact, 0.0, 0.0)];
    // Even with an empty trace, zero max_proposals and a NaN threshold.
    let empty = TraceBoundaries::default();
    assert_eq!(
        plan_adaptive_replay_points(&empty, &[], &observations, 0, f64::NAN),
        Ok(vec![])
    );
    assert_eq!(
        plan_adaptive_replay_points(&empty, &candidates, &[], 0, f64::NAN),
        Ok(vec![])
    );
}

#[test]
fn zero_max_proposals_and_nan_threshold_are_refused() {
    let observations = [observed(8, 10, 10.0, Fidelity::BestEffort, 1.0)];
    let candidates = [at(5, Fidelity::Exact, 0.0, 0.0)];
    let error =
        plan_adaptive_replay_points(&trace(10), &candidates, &observations, 0, 0.0).unwrap_err();
    assert_eq!(error, PlanError::ZeroMaxProposals);
    assert!(error.to_string().contains("max_proposals"));
    let error = plan_adaptive_replay_points(&trace(10), &candidates, &observations, 1, f64::NAN)
        .unwrap_err();
    assert_eq!(error, PlanError::NanThreshold);
    assert!(error.to_string().contains("minimum_score_minutes"));
}

fn first_error(
    trace: &TraceBoundaries,
    candidates: &[ReplayPositionCost],
    observations: &[FailureReplayObservation],
) -> PlanError {
    plan_adaptive_replay_points(trace, candidates, observations, 3, 0.0).unwrap_err()
}

#[test]
fn candidate_positions_are_validated_against_the_trace() {
    let trace = trace(5);
    let observations = [observed(3, 5, 10.0, Fidelity::BestEffort, 1.0)];
    let fine = at(2, Fidelity::Exact, 0.0, 0.0);
    let raw = |id: Option<&str>, next| {
        ReplayPositionCost::new(id, next, Fidelity::Exact, 0.0, 0.0).unwrap()
    };

    // The head itself is a valid boundary; one past it is not.
    assert!(
        plan_adaptive_replay_points(&trace, &[raw(Some("e4"), 5)], &observations, 3, 0.0).is_ok()
    );
    let error = first_error(&trace, &[fine.clone(), raw(Some("e5"), 6)], &observations);
    assert_eq!(
        error,
        PlanError::CandidatePastHead {
            index: 1,
            next_sequence: 6,
            head: 5
        }
    );
    assert!(error.to_string().contains("candidates[1]"));
    assert!(error.to_string().contains("next_sequence 6"));

    let error = first_error(&trace, &[raw(Some("e0"), 0)], &observations);
    assert_eq!(
        error,
        PlanError::OriginNamesEvent {
            index: 0,
            after_event_id: "e0".into()
        }
    );
    assert!(error.to_string().contains("after_event_id \"e0\""));

    let error = first_error(&trace, &[raw(None, 3)], &observations);
    assert_eq!(
        error,
        PlanError::MissingAfterEventId {
            index: 0,
            next_sequence: 3
        }
    );
    assert!(error.to_string().contains("after_event_id is required"));

    let error = first_error(&trace, &[raw(Some("ghost"), 3)], &observations);
    assert_eq!(
        error,
        PlanError::UnknownEvent {
            index: 0,
            after_event_id: "ghost".into()
        }
    );
    assert!(error.to_string().contains("\"ghost\""));

    let error = first_error(&trace, &[raw(Some("e1"), 3)], &observations);
    assert_eq!(
        error,
        PlanError::BoundaryMismatch {
            index: 0,
            after_event_id: "e1".into(),
            event_sequence: 1,
            next_sequence: 3
        }
    );
    assert!(error.to_string().contains("next_sequence 3"));
}

#[test]
fn the_head_check_comes_before_the_origin_check() {
    // Like the reference, a boundary past the head is reported before
    // its missing after_event_id.
    let observations = [observed(0, 1, 1.0, Fidelity::BestEffort, 1.0)];
    let past_and_unnamed = ReplayPositionCost::new(None, 3, Fidelity::Exact, 0.0, 0.0).unwrap();
    assert!(matches!(
        first_error(&trace(1), &[past_and_unnamed], &observations),
        PlanError::CandidatePastHead { .. }
    ));
}

#[test]
fn observations_must_end_within_the_trace_and_are_checked_after_candidates() {
    let candidates = [at(2, Fidelity::Exact, 0.0, 0.0)];
    let within = observed(3, 5, 10.0, Fidelity::BestEffort, 1.0);
    let beyond = observed(3, 6, 10.0, Fidelity::BestEffort, 1.0);
    let error = first_error(&trace(5), &candidates, &[within.clone(), beyond.clone()]);
    assert_eq!(
        error,
        PlanError::TerminalPastHead {
            index: 1,
            terminal_sequence: 6,
            head: 5
        }
    );
    assert!(error.to_string().contains("observations[1]"));
    assert!(error.to_string().contains("terminal_sequence 6"));
    // The terminal sequence may equal the head.
    assert!(plan_adaptive_replay_points(&trace(5), &candidates, &[within], 3, 0.0).is_ok());
    // A bad candidate is reported first.
    let bad_candidate = [at(9, Fidelity::Exact, 0.0, 0.0)];
    assert!(matches!(
        first_error(&trace(5), &bad_candidate, &[beyond]),
        PlanError::CandidatePastHead { .. }
    ));
}

#[test]
fn cost_constructor_rules() {
    let new = |id: Option<&str>, fidelity, capture, restore| {
        ReplayPositionCost::new(id, 1, fidelity, capture, restore)
    };
    let trimmed = new(Some("  e0 "), Fidelity::Exact, 0.0, 0.0).unwrap();
    assert_eq!(trimmed.after_event_id(), Some("e0"));
    assert_eq!(
        new(Some(" \t"), Fidelity::Exact, 0.0, 0.0),
        Err(PlanError::BlankText {
            field: "after_event_id",
            value: " \t".into()
        })
    );
    assert_eq!(
        new(Some("e0"), Fidelity::NonReplayable, 0.0, 0.0),
        Err(PlanError::NonReplayable {
            field: "achievable_fidelity"
        })
    );
    assert_eq!(
        new(Some("e0"), Fidelity::Exact, -0.5, 0.0),
        Err(PlanError::NegativeMinutes {
            field: "capture_minutes",
            value: -0.5
        })
    );
    assert_eq!(
        new(Some("e0"), Fidelity::Exact, 0.0, -1.0),
        Err(PlanError::NegativeMinutes {
            field: "restore_minutes",
            value: -1.0
        })
    );
    assert!(matches!(
        new(Some("e0"), Fidelity::Exact, f64::NAN, 0.0),
        Err(PlanError::NotFinite {
            field: "capture_minutes",
            ..
        })
    ));
    assert!(matches!(
        new(Some("e0"), Fidelity::Exact, 0.0, f64::INFINITY),
        Err(PlanError::NotFinite {
            field: "restore_minutes",
            ..
        })
    ));
    let fine = new(None, Fidelity::BestEffort, 1.5, 2.5).unwrap();
    assert_eq!(
        (
            fine.after_event_id(),
            fine.next_sequence(),
            fine.achievable_fidelity(),
            fine.capture_minutes(),
            fine.restore_minutes()
        ),
        (None, 1, Fidelity::BestEffort, 1.5, 2.5)
    );
}

#[test]
fn observation_constructor_rules() {
    let new = |first, terminal, full, fidelity, weight| {
        FailureReplayObservation::new(first, terminal, full, fidelity, weight)
    };
    for terminal in [3, 2] {
        let error = new(3, terminal, 1.0, Fidelity::Exact, 1.0).unwrap_err();
        assert_eq!(
            error,
            PlanError::TerminalNotAfterFirstEffect {
                first_effect_sequence: 3,
                terminal_sequence: terminal
            }
        );
        assert!(error.to_string().contains("terminal_sequence"));
    }
    assert_eq!(
        new(0, 1, -2.0, Fidelity::Exact, 1.0),
        Err(PlanError::NegativeMinutes {
            field: "full_replay_minutes",
            value: -2.0
        })
    );
    assert!(matches!(
        new(0, 1, f64::NEG_INFINITY, Fidelity::Exact, 1.0),
        Err(PlanError::NotFinite {
            field: "full_replay_minutes",
            ..
        })
    ));
    assert_eq!(
        new(0, 1, 1.0, Fidelity::NonReplayable, 1.0),
        Err(PlanError::NonReplayable {
            field: "minimum_fidelity"
        })
    );
    for weight in [0.0, -1.0] {
        assert_eq!(
            new(0, 1, 1.0, Fidelity::Exact, weight),
            Err(PlanError::NonPositiveWeight { value: weight })
        );
    }
    assert!(matches!(
        new(0, 1, 1.0, Fidelity::Exact, f64::NAN),
        Err(PlanError::NotFinite {
            field: "weight",
            ..
        })
    ));
    let fine = new(0, 1, 1.0, Fidelity::BestEffort, 0.25).unwrap();
    assert_eq!(
        (
            fine.first_effect_sequence(),
            fine.terminal_sequence(),
            fine.full_replay_minutes(),
            fine.minimum_fidelity(),
            fine.weight()
        ),
        (0, 1, 1.0, Fidelity::BestEffort, 0.25)
    );
}

fn cost_from(value: serde_json::Value) -> Result<ReplayPositionCost, String> {
    serde_json::from_value(value).map_err(|error| error.to_string())
}

fn observation_from(value: serde_json::Value) -> Result<FailureReplayObservation, String> {
    serde_json::from_value(value).map_err(|error| error.to_string())
}

#[test]
fn cost_records_load_with_the_same_checks() {
    let record = json!({
        "after_event_id": " e3 ", "next_sequence": 4,
        "achievable_fidelity": "semantic_equivalent",
        "capture_minutes": 1, "restore_minutes": 0.5,
    });
    let cost = cost_from(record.clone()).unwrap();
    assert_eq!(
        cost,
        ReplayPositionCost::new(Some("e3"), 4, Fidelity::SemanticEquivalent, 1.0, 0.5).unwrap()
    );
    // Serialising gives back the record (trimmed id), which loads again.
    let round_trip = serde_json::to_value(&cost).unwrap();
    assert_eq!(round_trip["after_event_id"], "e3");
    assert_eq!(cost_from(round_trip), Ok(cost));

    let origin = cost_from(json!({
        "next_sequence": 0, "achievable_fidelity": "exact",
        "capture_minutes": 0, "restore_minutes": 0,
    }))
    .unwrap();
    assert_eq!(origin.after_event_id(), None);

    let with = |key: &str, value: serde_json::Value| {
        let mut changed = record.clone();
        changed[key] = value;
        cost_from(changed).unwrap_err()
    };
    let cases = [
        (with("after_event_id", json!("")), "after_event_id"),
        (
            with("next_sequence", json!(-1)),
            "next_sequence must be non-negative, got -1",
        ),
        (
            with("achievable_fidelity", json!("perfect")),
            "achievable_fidelity: unknown fidelity \"perfect\"",
        ),
        (
            with("achievable_fidelity", json!("non_replayable")),
            "achievable_fidelity must be replayable",
        ),
        (
            with("capture_minutes", json!(-3.0)),
            "capture_minutes must be non-negative minutes, got -3",
        ),
        (
            with("restore_minutes", json!(-0.25)),
            "restore_minutes must be non-negative minutes, got -0.25",
        ),
        (
            with("capture_minute", json!(1.0)),
            "unknown field `capture_minute`",
        ),
    ];
    for (message, expected) in cases {
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    }
    let mut missing = record.clone();
    missing.as_object_mut().unwrap().remove("restore_minutes");
    let message = cost_from(missing).unwrap_err();
    assert!(
        message.contains("missing field `restore_minutes`"),
        "{message}"
    );
}

#[test]
fn observation_records_load_with_the_same_checks() {
    let record = json!({
        "first_effect_sequence": 2, "terminal_sequence": 7,
        "full_replay_minutes": 12.5, "minimum_fidelity": "best_effort",
    });
    let observation = observation_from(record.clone()).unwrap();
    assert_eq!(observation.weight(), DEFAULT_OBSERVATION_WEIGHT);
    assert_eq!(
        observation,
        FailureReplayObservation::new(2, 7, 12.5, Fidelity::BestEffort, 1.0).unwrap()
    );
    assert_eq!(
        observation_from(serde_json::to_value(&observation).unwrap()),
        Ok(observation)
    );

    let with = |key: &str, value: serde_json::Value| {
        let mut changed = record.clone();
        changed[key] = value;
        observation_from(changed).unwrap_err()
    };
    let cases = [
        (
            with("first_effect_sequence", json!(-1)),
            "first_effect_sequence must be non-negative",
        ),
        (
            with("terminal_sequence", json!(-4)),
            "terminal_sequence must be non-negative",
        ),
        (
            with("terminal_sequence", json!(2)),
            "terminal_sequence must come after first_effect_sequence",
        ),
        (
            with("full_replay_minutes", json!(-1)),
            "full_replay_minutes must be non-negative",
        ),
        (
            with("minimum_fidelity", json!("nope")),
            "minimum_fidelity: unknown fidelity",
        ),
        (
            with("minimum_fidelity", json!("non_replayable")),
            "minimum_fidelity must be replayable",
        ),
        (with("weight", json!(0)), "weight must be positive, got 0"),
        (
            with("weight", json!(-2.5)),
            "weight must be positive, got -2.5",
        ),
        (with("weights", json!(1)), "unknown field `weights`"),
    ];
    for (message, expected) in cases {
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    }
}

#[test]
fn boundaries_come_from_a_log_events_or_pairs() {
    let mut log = TraceLog::new("t", "main").unwrap();
    assert_eq!(TraceBoundaries::from_log(&log).head(), 0);
    for _ in 0..3 {
        log.emit(TraceEventKind::Lifecycle, json!({}), None, None)
            .unwrap();
    }
    let from_log = TraceBoundaries::from(&log);
    assert_eq!(from_log.head(), 3);
    assert_eq!(from_log.sequence_of("t/main/1"), Some(1));
    assert_eq!(from_log.sequence_of("t/main/3"), None);
    assert_eq!(
        TraceBoundaries::from_events(log.events()),
        Ok(from_log.clone())
    );

    // A log-backed plan: the boundary after the second event.
    let proposals = plan(
        &from_log,
        &[ReplayPositionCost::new(Some("t/main/1"), 2, Fidelity::Exact, 0.0, 0.0).unwrap()],
        &[observed(2, 3, 6.0, Fidelity::BestEffort, 1.0)],
    );
    assert_eq!(proposals[0].expected_saved_minutes, 4.0);

    // A branch that starts later than 0 takes its head from its events.
    let mut events = log.events().to_vec();
    for (offset, event) in events.iter_mut().enumerate() {
        event.sequence = 10 + offset as u64;
    }
    let shifted = TraceBoundaries::from_events(&events).unwrap();
    assert_eq!(shifted.head(), 13);
    assert_eq!(shifted.sequence_of("t/main/0"), Some(10));

    let mut duplicated = log.events().to_vec();
    duplicated[2].event_id = duplicated[0].event_id.clone();
    assert_eq!(
        TraceBoundaries::from_events(&duplicated),
        Err(PlanError::DuplicateEventId {
            event_id: "t/main/0".into()
        })
    );
    let error = TraceBoundaries::from_sequences([("a", 0), ("b", 2)]).unwrap_err();
    assert_eq!(
        error,
        PlanError::NonConsecutiveSequence {
            event_id: "b".into(),
            expected: 1,
            got: 2
        }
    );
    assert!(
        error
            .to_string()
            .contains("\"b\" has sequence 2, expected 1")
    );
    assert!(TraceBoundaries::from_sequences([("a", 3), ("b", 2)]).is_err());
    assert_eq!(
        TraceBoundaries::from_sequences(Vec::<(String, u64)>::new()).unwrap(),
        TraceBoundaries::default()
    );
}

#[test]
fn boundaries_of_a_later_starting_branch_validate_by_their_own_sequences() {
    let trace = TraceBoundaries::from_sequences([("c5", 5), ("c6", 6), ("c7", 7)]).unwrap();
    let observations = [observed(7, 8, 8.0, Fidelity::BestEffort, 1.0)];
    let candidate = ReplayPositionCost::new(Some("c6"), 7, Fidelity::Exact, 0.0, 0.0).unwrap();
    let proposals = plan(&trace, &[candidate], &observations);
    assert_eq!(proposals[0].expected_saved_minutes, 7.0);
    let past = ReplayPositionCost::new(Some("c7"), 9, Fidelity::Exact, 0.0, 0.0).unwrap();
    assert!(matches!(
        first_error(&trace, &[past], &observations),
        PlanError::CandidatePastHead { head: 8, .. }
    ));
}

/// xorshift64*: a small deterministic generator for the property test
/// below (no proptest in this crate's dependencies).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn minutes(&mut self) -> f64 {
        self.below(4001) as f64 / 100.0
    }

    fn fidelity(&mut self) -> Fidelity {
        [
            Fidelity::Exact,
            Fidelity::SemanticEquivalent,
            Fidelity::BestEffort,
        ][self.below(3) as usize]
    }
}

#[test]
fn random_plans_keep_the_ranking_invariants() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..500 {
        let len = 1 + rng.below(20);
        let trace = trace(len);
        let candidates: Vec<_> = (0..1 + rng.below(8))
            .map(|_| {
                let next = rng.below(len + 1);
                let (fidelity, capture, restore) = (rng.fidelity(), rng.minutes(), rng.minutes());
                at(next, fidelity, capture, restore)
            })
            .collect();
        let observations: Vec<_> = (0..1 + rng.below(5))
            .map(|_| {
                let first = rng.below(len);
                let terminal = first + 1 + rng.below(len - first);
                let weight = (1 + rng.below(40)) as f64 / 10.0;
                observed(first, terminal, rng.minutes() * 4.0, rng.fidelity(), weight)
            })
            .collect();
        let threshold = rng.minutes() - 20.0;
        let all =
            plan_adaptive_replay_points(&trace, &candidates, &observations, usize::MAX, threshold)
                .unwrap();

        assert!(
            all.windows(2)
                .all(|pair| rank_order(&pair[0], &pair[1]) != Ordering::Greater)
        );
        for proposal in &all {
            assert!(proposal.score_minutes >= threshold);
            assert!(proposal.eligible_observation_weight > 0.0);
            assert_eq!(
                proposal.score_minutes,
                proposal.expected_saved_minutes - proposal.capture_minutes
            );
            assert!(proposal.expected_saved_minutes >= 0.0);
            let eligible: Vec<_> = observations
                .iter()
                .filter(|o| {
                    proposal.next_sequence <= o.first_effect_sequence()
                        && proposal.achievable_fidelity.meets(o.minimum_fidelity())
                })
                .collect();
            assert!(!eligible.is_empty());
            let suffixes = eligible
                .iter()
                .map(|o| (o.terminal_sequence() - proposal.next_sequence) as f64);
            let (low, high) = suffixes.fold((f64::INFINITY, 0.0_f64), |(lo, hi), s| {
                (lo.min(s), hi.max(s))
            });
            assert!(proposal.expected_suffix_events >= low - 1e-9);
            assert!(proposal.expected_suffix_events <= high + 1e-9);
        }

        // Truncation takes a prefix; a higher threshold keeps a subset
        // in the same order.
        let max = 1 + rng.below(4) as usize;
        let top = plan_adaptive_replay_points(&trace, &candidates, &observations, max, threshold)
            .unwrap();
        assert_eq!(top.as_slice(), &all[..all.len().min(max)]);
        let stricter = threshold + 5.0;
        let kept =
            plan_adaptive_replay_points(&trace, &candidates, &observations, usize::MAX, stricter)
                .unwrap();
        let expected: Vec<_> = all
            .iter()
            .filter(|p| p.score_minutes >= stricter)
            .cloned()
            .collect();
        assert_eq!(kept, expected);
    }
}
