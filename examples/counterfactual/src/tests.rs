use super::*;

fn dataset(name: &str) -> Ledger {
    let text = DATASETS.iter().find(|(n, _)| *n == name).unwrap().1;
    Ledger::parse(text).unwrap()
}

fn passed(outcomes: &[ValidationOutcome]) -> Vec<(&str, bool)> {
    outcomes
        .iter()
        .map(|o| (o.validation_id.as_str(), o.passed))
        .collect()
}

fn change(value: sandloop_guest::Value) -> Object {
    value.as_object().unwrap().clone()
}

#[test]
fn the_default_importer_fails_the_second_quarter_at_amounts_parse() {
    assert!(
        import(&dataset("2024-q1"), Settings::default())
            .first_failure()
            .is_none()
    );
    assert!(
        import(&dataset("2024-q3"), Settings::default())
            .first_failure()
            .is_none()
    );
    let q2 = import(&dataset("2024-q2"), Settings::default());
    assert_eq!(q2.first_failure().unwrap().validation_id, "amounts-parse");
    assert_eq!(
        passed(&q2.outcomes),
        vec![
            ("header-valid", true),
            ("dates-valid", true),
            ("rows-kept", true),
            ("amounts-parse", false)
        ]
    );
    let item = Item::from_json(r#"{"item_id":"2024-q2"}"#).unwrap();
    let error = run_import(&dataset("2024-q2"), &item).unwrap_err();
    assert_eq!(error.kind, "import-failed");
    assert!(error.message.contains("1,250.00"), "{}", error.message);
}

#[test]
fn reading_thousands_separators_fixes_it_and_dropping_rows_regresses_rows_kept() {
    let q2 = dataset("2024-q2");
    let fixed =
        Settings::from_change(&change(json!({"amount_format": "thousands-separator"}))).unwrap();
    assert!(import(&q2, fixed).first_failure().is_none());
    let dropping = Settings::from_change(&change(json!({"on_bad_amount": "drop-row"}))).unwrap();
    let result = import(&q2, dropping);
    assert_eq!(
        passed(&result.outcomes),
        vec![
            ("header-valid", true),
            ("dates-valid", true),
            ("rows-kept", false),
            ("amounts-parse", true),
            ("totals-balance", false)
        ]
    );
    assert!(Settings::from_change(&change(json!({"amount_format": "roman"}))).is_err());
}

#[test]
fn the_state_round_trips_and_its_digest_is_the_parsed_form() {
    let q1 = dataset("2024-q1");
    let back = Ledger::from_state(&q1.to_state()).unwrap();
    assert_eq!(back, q1);
    assert_eq!(back.digest(), q1.digest());
    assert_ne!(dataset("2024-q2").digest(), q1.digest());
    assert!(Ledger::from_state(b"{}").is_err());
}

#[test]
fn a_rebuild_branch_forks_a_best_effort_unverified_child() {
    let adapter = LedgerImport;
    let state = dataset("2024-q2").to_state();
    let request = |branch: &str| ForkRequest {
        replay_point_id: "rp".into(),
        child_id: "c".into(),
        target_branch_id: branch.into(),
        minimum_fidelity: Fidelity::SemanticEquivalent,
    };
    let exact = adapter
        .fork_child(state.clone(), &request("counterfactual-c"))
        .unwrap();
    assert_eq!(exact.receipt.achieved_fidelity, Fidelity::Exact);
    let report = adapter
        .validate_child(&exact.child, &exact.receipt)
        .unwrap();
    assert!(report.equivalent);
    let rebuilt = adapter.fork_child(state, &request("rebuild/c")).unwrap();
    assert_eq!(rebuilt.receipt.achieved_fidelity, Fidelity::BestEffort);
    assert_eq!(rebuilt.receipt.prefix_reused, Some(false));
    let report = adapter
        .validate_child(&rebuilt.child, &rebuilt.receipt)
        .unwrap();
    assert!(!report.equivalent);
}

#[test]
fn the_risk_policy_bounds_how_many_settings_a_change_touches() {
    let adapter = LedgerImport;
    let child = adapter
        .fork_child(
            dataset("2024-q1").to_state(),
            &ForkRequest {
                replay_point_id: "rp".into(),
                child_id: "c".into(),
                target_branch_id: "c".into(),
                minimum_fidelity: Fidelity::Exact,
            },
        )
        .unwrap()
        .child;
    let small = change(json!({"public_change_set": {"amount_format": "plain"}}));
    assert_eq!(
        adapter.assess_intent(&child, &small).unwrap().disposition,
        sandloop_guest::Disposition::Allow
    );
    let wide = change(json!({"public_change_set": {"a": 1, "b": 2, "c": 3}}));
    assert_eq!(
        adapter.assess_intent(&child, &wide).unwrap().disposition,
        sandloop_guest::Disposition::Deny
    );
}
