//! Native tests: every fault breaks the rule it names, and only that one
//! (checked with the sdk's copy of the host's contract).

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::*;

fn item(id: &str, faults: &[&str]) -> Item {
    Item::new(id, "probe", format!("text of {id}")).with("faults", faults.to_vec())
}

fn capture_request() -> CaptureRequest {
    CaptureRequest {
        replay_point_id: "rp-1".into(),
        trace_id: "g-1".into(),
        branch_id: "main".into(),
        after_event_id: None,
        next_sequence: 1,
        execution_group_id: "g-1".into(),
    }
}

fn restore_request(target: &str) -> RestoreRequest {
    RestoreRequest {
        replay_point_id: "rp-1".into(),
        target_branch_id: target.into(),
        minimum_fidelity: Fidelity::BestEffort,
    }
}

/// Prepare `seed` with `others`, then capture.
fn point(seed: Item, others: &[Item]) -> (ProbeGroup, StateLease<ProbePoint>) {
    let probe = ReplayProbe;
    let mut items = vec![seed.clone()];
    items.extend_from_slice(others);
    let group = probe
        .prepare(seed, items, &Context::default())
        .unwrap()
        .unwrap()
        .group;
    let lease = probe.capture(&group, &capture_request()).unwrap();
    (group, lease)
}

/// Restore and validate `target`; the host's verdict on receipt and report.
fn verdict(lease: &StateLease<ProbePoint>, target: &str) -> Result<bool, &'static str> {
    let probe = ReplayProbe;
    let point = lease.binding.as_ref().unwrap();
    let receipt = probe.restore(point, &restore_request(target)).unwrap();
    receipt.check_against(lease.fidelity)?;
    let report = probe.validate(point, &receipt).unwrap();
    report.check_contract(
        &receipt,
        lease.projection_digest.as_deref(),
        Fidelity::BestEffort,
    )
}

#[test]
fn an_honest_point_replays_exactly_and_round_trips() {
    let probe = ReplayProbe;
    let ctx = Context::default();
    let items = [item("s", &[]), item("s~v", &[])];
    let (group, lease) = point(items[0].clone(), &items[1..]);
    assert_eq!(lease.fidelity, Fidelity::Exact);
    let digest = lease.projection_digest.clone().unwrap();
    assert_eq!(digest.len(), 16);
    assert_eq!(digest, super::digest(&group.state.borrow()));
    let point = lease.binding.as_ref().unwrap();
    trace::take_recorded();

    for item in &items {
        let request = restore_request(item.item_id());
        let receipt = probe.restore(point, &request).unwrap();
        assert_eq!(receipt.achieved_fidelity, Fidelity::Exact);
        assert_eq!(receipt.prefix_reused, Some(true));
        let report = probe.validate(point, &receipt).unwrap();
        assert_eq!(
            report.check_contract(&receipt, Some(&digest), Fidelity::Exact),
            Ok(true)
        );
        let record = probe.run_suffix(point, item.clone(), &ctx).unwrap();
        assert_eq!(
            record.observation_keys(),
            vec![format!("probe:{}", item.item_id())]
        );
        assert_eq!(record["counter_before"], 0, "each suffix starts restored");
        assert_eq!(record["via"], "replay");
        let events = trace::take_recorded();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload["item_id"], item.item_id());
        probe.finalize_suffix(point, &request, true).unwrap();
        assert!(point.working.borrow().is_none());
    }
    // without a restore there is no working copy
    let err = probe.run_suffix(point, items[0].clone(), &ctx).unwrap_err();
    assert_eq!(err.kind, "not-restored");

    let state = probe.export_state(point).unwrap().unwrap();
    let imported = probe.import_state(state, &capture_request()).unwrap();
    assert_eq!(imported.fidelity, Fidelity::Exact);
    assert_eq!(imported.projection_digest.as_deref(), Some(&*digest));
    assert_eq!(verdict(&imported, "s~v"), Ok(true));
    probe.release_state(point).unwrap();

    // the group itself runs items one after another on its own state
    let first = probe
        .execute_episode(&group, items[0].clone(), &ctx)
        .unwrap();
    let second = probe
        .execute_episode(&group, items[1].clone(), &ctx)
        .unwrap();
    assert_eq!(
        (&first["counter_before"], &second["counter_before"]),
        (&json!(0), &json!(1))
    );
    assert_eq!(first["via"], "episode");
    let plain = probe.execute(items[0].clone(), &ctx).unwrap();
    assert_eq!(plain["via"], "execute");
}

#[test]
fn capture_faults_set_the_point_fidelity() {
    let probe = ReplayProbe;
    let group = probe
        .prepare(
            item("s", &["capture_fails"]),
            vec![item("s", &["capture_fails"])],
            &Context::default(),
        )
        .unwrap()
        .unwrap()
        .group;
    let err = probe.capture(&group, &capture_request()).unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert!(err.message.contains("capture_fails"));

    let (_, lease) = point(item("s", &["capture_non_replayable"]), &[]);
    assert!(lease.binding.is_none());
    assert_eq!(lease.fidelity, Fidelity::NonReplayable);
    assert_eq!(lease.projection_digest, None);

    let (_, lease) = point(item("s", &["capture_best_effort"]), &[]);
    assert_eq!(lease.fidelity, Fidelity::BestEffort);
    assert_eq!(verdict(&lease, "s"), Ok(false), "valid, never promoted");

    let (_, lease) = point(item("s", &["capture_semantic"]), &[]);
    assert_eq!(lease.fidelity, Fidelity::SemanticEquivalent);
    assert_eq!(verdict(&lease, "s"), Ok(true));
    let point = lease.binding.as_ref().unwrap();
    let receipt = probe.restore(point, &restore_request("s")).unwrap();
    let report = probe.validate(point, &receipt).unwrap();
    assert_eq!(report.checks.len(), 1);
    assert!(report.checks[0].passed);
}

#[test]
fn each_rule_fault_breaks_its_rule() {
    let cases: &[(&[&str], &str)] = &[
        (&["restore_stronger"], "stronger than the captured"),
        (
            &["restore_non_replayable"],
            "non_replayable while restoring",
        ),
        (&["report_disagrees"], "disagree on fidelity"),
        (&["digest_mismatch"], "equal, non-empty state digests"),
        (&["expected_digest_wrong"], "expected digest"),
        (&["semantic_without_checks"], "at least one explicit"),
        (&["equivalent_with_failed_check"], "one of its checks fails"),
        (&["unverified"], "verified state equivalence"),
    ];
    for (faults, rule) in cases {
        // restore_stronger needs a weaker capture to be stronger than
        let seed_faults: &[&str] = if faults.contains(&"restore_stronger") {
            &["capture_best_effort"]
        } else {
            &[]
        };
        let (_, lease) = point(item("s", seed_faults), &[item("s~bad", faults)]);
        let err = verdict(&lease, "s~bad").unwrap_err();
        assert!(err.contains(rule), "{faults:?}: {err}");
        // the same point is honest for the seed
        assert!(verdict(&lease, "s").is_ok(), "{faults:?}");
    }
    // with an unverified semantic point too
    let (_, lease) = point(
        item("s", &["capture_semantic"]),
        &[item("v", &["unverified"])],
    );
    assert!(
        verdict(&lease, "v")
            .unwrap_err()
            .contains("verified state equivalence")
    );
}

#[test]
fn call_faults_fail_trap_or_fail_once() {
    let probe = ReplayProbe;
    let ctx = Context::default();
    let others = [
        item("restore-fails", &["restore_fails"]),
        item("restore-traps", &["trap_in_restore"]),
        item("suffix-fails", &["suffix_fails"]),
        item("suffix-traps", &["suffix_traps"]),
        item("finalize-fails", &["finalize_fails"]),
    ];
    let (_, lease) = point(item("s", &["release_fails_once"]), &others);
    let point = lease.binding.as_ref().unwrap();

    let err = probe
        .restore(point, &restore_request("restore-fails"))
        .unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    let trapped = catch_unwind(AssertUnwindSafe(|| {
        probe.restore(point, &restore_request("restore-traps"))
    }));
    assert!(trapped.is_err());

    trace::take_recorded();
    probe
        .restore(point, &restore_request("suffix-fails"))
        .unwrap();
    let err = probe
        .run_suffix(point, others[2].clone(), &ctx)
        .unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert_eq!(trace::take_recorded().len(), 1, "the failing suffix traced");
    probe
        .finalize_suffix(point, &restore_request("suffix-fails"), false)
        .unwrap();

    probe
        .restore(point, &restore_request("suffix-traps"))
        .unwrap();
    let trapped = catch_unwind(AssertUnwindSafe(|| {
        probe.run_suffix(point, others[3].clone(), &ctx)
    }));
    assert!(trapped.is_err());
    trace::take_recorded();

    let request = restore_request("finalize-fails");
    probe.restore(point, &request).unwrap();
    probe.run_suffix(point, others[4].clone(), &ctx).unwrap();
    let err = probe.finalize_suffix(point, &request, true).unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert!(point.working.borrow().is_none(), "the copy is gone anyway");

    let err = probe.release_state(point).unwrap_err();
    assert!(err.retryable);
    probe.release_state(point).unwrap();

    let (_, lease) = point_with_release_fails();
    let point = lease.binding.as_ref().unwrap();
    for _ in 0..3 {
        assert_eq!(
            probe.release_state(point).unwrap_err().kind,
            "injected-fault"
        );
    }
}

fn point_with_release_fails() -> (ProbeGroup, StateLease<ProbePoint>) {
    point(item("s", &["release_fails"]), &[])
}

#[test]
fn export_and_import_faults() {
    let probe = ReplayProbe;
    let (_, lease) = point(item("s", &["export_none"]), &[]);
    assert_eq!(
        probe.export_state(lease.binding.as_ref().unwrap()).unwrap(),
        None
    );

    let (_, lease) = point(item("s", &["import_fails"]), &[]);
    let state = probe
        .export_state(lease.binding.as_ref().unwrap())
        .unwrap()
        .unwrap();
    let err = probe.import_state(state, &capture_request()).unwrap_err();
    assert_eq!(err.kind, "injected-fault");

    let (_, lease) = point(
        item("s", &["import_digest_wrong", "capture_semantic"]),
        &[item("v", &["suffix_fails"])],
    );
    let state = probe
        .export_state(lease.binding.as_ref().unwrap())
        .unwrap()
        .unwrap();
    let imported = probe.import_state(state, &capture_request()).unwrap();
    assert_eq!(imported.fidelity, Fidelity::SemanticEquivalent);
    assert_ne!(imported.projection_digest, lease.projection_digest);
    assert_eq!(
        imported.binding.as_ref().unwrap().digest,
        lease.projection_digest.clone().unwrap(),
        "the state itself is intact"
    );
    assert!(
        imported.binding.as_ref().unwrap().item_faults["v"].has(Fault::SuffixFails),
        "item faults survive the export"
    );

    for bad in [
        &b"[]"[..],
        br#"{"schema":"other"}"#,
        br#"{"schema":"replay-probe/state/v1","state":{"seed_item_id":"s"}}"#,
        br#"{"schema":"replay-probe/state/v1","state":{"seed_item_id":"s","seed_text":"","counter":0},"seed_faults":["nope"]}"#,
    ] {
        let err = probe
            .import_state(bad.to_vec(), &capture_request())
            .unwrap_err();
        assert_eq!(err.kind, "invalid-state", "{}", String::from_utf8_lossy(bad));
    }
    // an edited counter is a different state
    let (_, lease) = point(item("s", &[]), &[]);
    let state = probe
        .export_state(lease.binding.as_ref().unwrap())
        .unwrap()
        .unwrap();
    let mut edited: Value = serde_json::from_slice(&state).unwrap();
    edited["state"]["counter"] = json!(7);
    let imported = probe
        .import_state(serde_json::to_vec(&edited).unwrap(), &capture_request())
        .unwrap();
    assert_ne!(imported.projection_digest, lease.projection_digest);
}

#[test]
fn variants_carry_spec_faults_and_typos_fail() {
    let probe = ReplayProbe;
    let spec = |value: Value| VariantSpec(value.as_object().unwrap().clone());
    let variant = probe
        .compile_variant(
            spec(json!({"spec_id": "x", "faults": ["suffix_fails"]})),
            item("s", &["capture_semantic"]),
        )
        .unwrap();
    assert_eq!(variant.item_id(), "s~x");
    assert!(variant.is_variant());
    assert_eq!(variant.seed_item_id(), Some("s"));
    assert_eq!(variant["faults"], json!(["suffix_fails"]));
    let err = probe
        .compile_variant(
            spec(json!({"spec_id": "x", "faults": ["oops"]})),
            item("s", &[]),
        )
        .unwrap_err();
    assert_eq!(err.kind, "invalid-spec");

    let err = probe
        .prepare(
            item("s", &[]),
            vec![item("s", &[]), item("v", &["oops"])],
            &Context::default(),
        )
        .err()
        .unwrap();
    assert_eq!(err.kind, "invalid-item");
    assert!(probe.list_seed_items("main", 1).unwrap().is_empty());
}

// ---- isolated children ----

use crate::children::{PROBE_POLICY, ProbeChild, SCRIBBLE_BYTES, memory_bomb, scribble};
use sandloop_guest::{ChildConcurrency, ChildRisk, ForkRequest, ReplayChildren};

fn fork_request(child_id: &str) -> ForkRequest {
    ForkRequest {
        replay_point_id: "rp-1".into(),
        child_id: child_id.into(),
        target_branch_id: child_id.into(),
        minimum_fidelity: Fidelity::BestEffort,
    }
}

/// The state a parent exports for `seed` and `others`, with its digest.
fn exported(seed: Item, others: &[Item]) -> (Vec<u8>, StateLease<ProbePoint>) {
    let (_, lease) = point(seed, others);
    let state = ReplayProbe
        .export_state(lease.binding.as_ref().unwrap())
        .unwrap()
        .unwrap();
    trace::take_recorded();
    (state, lease)
}

fn fork(state: &[u8], child_id: &str) -> sandloop_guest::ChildLease<ProbeChild> {
    ReplayProbe
        .fork_child(state.to_vec(), &fork_request(child_id))
        .unwrap()
}

/// The host's verdict on a child's receipt and report.
fn child_verdict(
    lease: &sandloop_guest::ChildLease<ProbeChild>,
    point: &StateLease<ProbePoint>,
) -> Result<bool, &'static str> {
    lease.receipt.check_against(point.fidelity)?;
    let report = ReplayProbe
        .validate_child(&lease.child, &lease.receipt)
        .unwrap();
    report.check_contract(
        &lease.receipt,
        point.projection_digest.as_deref(),
        Fidelity::BestEffort,
    )
}

#[test]
fn an_honest_child_forks_validates_runs_and_releases() {
    let probe = ReplayProbe;
    let items = [item("s", &[]), item("s~v", &[])];
    let (state, point) = exported(items[0].clone(), &items[1..]);
    for task in &items {
        let lease = fork(&state, task.item_id());
        assert_eq!(lease.concurrency, ChildConcurrency::ThreadSafe);
        assert_eq!(lease.receipt.achieved_fidelity, Fidelity::Exact);
        assert_eq!(lease.receipt.prefix_reused, Some(true));
        assert_eq!(child_verdict(&lease, &point), Ok(true));
        let child = lease.child;
        assert_eq!(child.child_id(), task.item_id());
        assert!(child.faults().is_empty());

        let intent = json!({"item_id": task.item_id()})
            .as_object()
            .unwrap()
            .clone();
        let allowed = probe.assess_intent(&child, &intent).unwrap();
        assert!(allowed.is_allowed());
        assert_eq!(allowed.policy_id, PROBE_POLICY);
        let record = probe
            .run_child(&child, task.clone(), &Context::default())
            .unwrap();
        assert_eq!(record["via"], "child");
        assert_eq!(
            record["counter_before"], 0,
            "a correct fork starts restored"
        );
        assert_eq!(record["child_id"], task.item_id());
        assert_eq!(record["seed_item_id"], "s");
        assert_eq!(
            record.observation_keys(),
            vec![format!("probe:{}", task.item_id())]
        );
        let events = trace::take_recorded();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload["via"], "child");
        assert!(
            probe
                .assess_outcome(&child, &intent, &record)
                .unwrap()
                .is_allowed()
        );
        probe.release_child(&child).unwrap();
    }
    // the seed's point-wide fidelity carries over; bad state is refused
    let (state, point) = exported(item("s", &["capture_semantic"]), &[]);
    let lease = fork(&state, "s");
    assert_eq!(
        lease.receipt.achieved_fidelity,
        Fidelity::SemanticEquivalent
    );
    assert_eq!(child_verdict(&lease, &point), Ok(true));
    let err = probe
        .fork_child(b"{}".to_vec(), &fork_request("s"))
        .unwrap_err();
    assert_eq!(err.kind, "invalid-state");
}

#[test]
fn fork_faults_fail_trap_or_claim_too_much() {
    let probe = ReplayProbe;
    let others = [
        item("fails", &["fork_fails"]),
        item("traps", &["fork_traps"]),
        item("stronger", &["fork_stronger"]),
        item("serial", &["child_serial_only"]),
        item("process", &["child_process_isolated"]),
        item("lies", &["child_validate_lies"]),
    ];
    let (state, point) = exported(item("s", &["capture_best_effort"]), &others);

    let err = probe
        .fork_child(state.clone(), &fork_request("fails"))
        .unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert!(err.message.contains("fork_fails"), "{}", err.message);
    let trapped = catch_unwind(AssertUnwindSafe(|| {
        probe.fork_child(state.clone(), &fork_request("traps"))
    }));
    assert!(trapped.is_err());

    let stronger = fork(&state, "stronger");
    assert_eq!(stronger.receipt.achieved_fidelity, Fidelity::Exact);
    assert!(
        child_verdict(&stronger, &point)
            .unwrap_err()
            .contains("stronger than the captured")
    );
    // the same point's honest child is valid, never promoted
    assert_eq!(child_verdict(&fork(&state, "s"), &point), Ok(false));

    assert_eq!(
        fork(&state, "serial").concurrency,
        ChildConcurrency::SerialOnly
    );
    assert_eq!(
        fork(&state, "process").concurrency,
        ChildConcurrency::ProcessIsolated
    );

    // lies break the exact digest rule on an exact point
    let (state, point) = exported(item("s", &[]), &others);
    let lies = fork(&state, "lies");
    let report = probe.validate_child(&lies.child, &lies.receipt).unwrap();
    assert!(report.equivalent);
    assert_ne!(report.expected_digest, report.observed_digest);
    assert!(
        child_verdict(&lies, &point)
            .unwrap_err()
            .contains("equal, non-empty state digests")
    );
    let record = probe
        .run_child(&lies.child, others[5].clone(), &Context::default())
        .unwrap();
    assert_eq!(
        record["counter_before"], 1,
        "the lying child really differs"
    );
    trace::take_recorded();
}

#[test]
fn run_faults_fail_trap_scribble_or_bomb() {
    let probe = ReplayProbe;
    let ctx = Context::default();
    let others = [
        item("fails", &["child_fails"]),
        item("traps", &["child_traps"]),
        item("scribbles", &["child_scribbles"]),
        item("release", &["child_release_fails"]),
        item("ok", &[]),
    ];
    let (state, _) = exported(item("s", &[]), &others);

    let child = fork(&state, "fails").child;
    let err = probe
        .run_child(&child, others[0].clone(), &ctx)
        .unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert_eq!(trace::take_recorded().len(), 1, "the failing child traced");

    let child = fork(&state, "traps").child;
    let trapped = catch_unwind(AssertUnwindSafe(|| {
        probe.run_child(&child, others[1].clone(), &ctx)
    }));
    assert!(trapped.is_err());
    trace::take_recorded();

    // a scribbling child returns a normal record, with its state garbage
    let scribbler = fork(&state, "scribbles").child;
    let sibling = fork(&state, "ok").child;
    let record = probe
        .run_child(&scribbler, others[2].clone(), &ctx)
        .unwrap();
    assert!(record.is_accepted());
    assert_eq!(record["counter_before"], 0);
    assert_eq!(record["scribbled_bytes"], SCRIBBLE_BYTES);
    assert_ne!(scribbler.state().seed_item_id, "s", "the state is garbage");
    let sibling_record = probe.run_child(&sibling, others[4].clone(), &ctx).unwrap();
    assert_eq!(sibling_record["counter_before"], 0);
    assert_eq!(sibling_record["seed_item_id"], "s");
    assert!(sibling_record.get("scribbled_bytes").is_none());
    trace::take_recorded();

    // a task's own faults apply even when the state lacks its item
    let stranger = fork(&state, "not-in-state").child;
    assert!(stranger.faults().is_empty());
    let err = probe
        .run_child(&stranger, item("not-in-state", &["child_fails"]), &ctx)
        .unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    let err = probe
        .run_child(&stranger, item("x", &["typo"]), &ctx)
        .unwrap_err();
    assert_eq!(err.kind, "invalid-item");
    trace::take_recorded();

    let child = fork(&state, "release").child;
    assert_eq!(
        probe.release_child(&child).unwrap_err().kind,
        "injected-fault"
    );
    probe.release_child(&sibling).unwrap();

    // the helpers behind child_scribbles and child_memory_bomb
    let mut garbage = ProbeState::of(&item("s", &[])).unwrap();
    assert_eq!(scribble(&mut garbage), SCRIBBLE_BYTES);
    assert_ne!(
        super::digest(&garbage),
        super::digest(&ProbeState::of(&item("s", &[])).unwrap())
    );
    assert_eq!(memory_bomb(3 << 20), 3 << 20);
}

#[test]
fn risk_faults_deny_or_fail() {
    let probe = ReplayProbe;
    let others = [
        item("intent-denied", &["intent_denied"]),
        item("outcome-denied", &["outcome_denied"]),
        item("intent-fails", &["intent_fails"]),
    ];
    let (state, _) = exported(item("s", &[]), &others);
    let intent = json!({"spec_id": "v"}).as_object().unwrap().clone();
    let outcome = Record::with_keys(["probe:x"]);

    let child = fork(&state, "intent-denied").child;
    let denied = probe.assess_intent(&child, &intent).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.policy_id, "probe-policy");
    assert!(denied.sanitized_reason.unwrap().contains("intent_denied"));
    assert!(
        probe
            .assess_outcome(&child, &intent, &outcome)
            .unwrap()
            .is_allowed()
    );

    let child = fork(&state, "outcome-denied").child;
    assert!(probe.assess_intent(&child, &intent).unwrap().is_allowed());
    let denied = probe.assess_outcome(&child, &intent, &outcome).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.policy_id, PROBE_POLICY);

    let child = fork(&state, "intent-fails").child;
    let err = probe.assess_intent(&child, &intent).unwrap_err();
    assert_eq!(err.kind, "injected-fault");
    assert!(err.message.contains("assess-replay-child-intent"));
}

// ---- padding (`pad_bytes`) ----

fn padded(id: &str, pad_bytes: u64) -> Item {
    item(id, &[]).with("pad_bytes", pad_bytes)
}

#[test]
fn pad_bytes_travel_with_the_state_and_count_in_its_digest() {
    let probe = ReplayProbe;
    let ctx = Context::default();
    const PAD: usize = 64 << 10;
    let items = [padded("s", PAD as u64), item("s~v", &[])];
    let (state, point) = exported(items[0].clone(), &items[1..]);
    let unpadded = exported(item("s", &[]), &items[1..]).0;
    assert_eq!(
        state.len(),
        unpadded.len() + PAD + r#","pad_bytes":65536"#.len(),
        "the padding follows the JSON document raw"
    );
    let document: Value = serde_json::Deserializer::from_slice(&state)
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(document["state"]["pad_bytes"], PAD);
    assert_eq!(
        document["item_faults"],
        json!({}),
        "items without faults are left out"
    );
    let binding = point.binding.as_ref().unwrap();
    let padding = &binding.captured.padding;
    assert_eq!(padding.len(), PAD);
    assert_eq!(padding.hash(), padding_hash(padding.bytes()));
    assert_eq!(&state[state.len() - PAD..], padding.bytes());
    assert_ne!(
        point.projection_digest.as_deref(),
        Some(&*super::digest(&ProbeState::of(&item("s", &[])).unwrap())),
        "the digest covers the padding"
    );

    // every child adopts the padding and forks, validates and runs honestly
    for task in &items {
        let lease = fork(&state, task.item_id());
        assert_eq!(child_verdict(&lease, &point), Ok(true));
        assert_eq!(lease.child.state().padding, *padding);
        let record = probe.run_child(&lease.child, task.clone(), &ctx).unwrap();
        assert_eq!(record["counter_before"], 0);
        trace::take_recorded();
    }
    // import round-trips; a flipped padding byte is a different state
    let imported = probe
        .import_state(state.clone(), &capture_request())
        .unwrap();
    assert_eq!(imported.projection_digest, point.projection_digest);
    let mut flipped = state.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let imported = probe
        .import_state(flipped.clone(), &capture_request())
        .unwrap();
    assert_ne!(imported.projection_digest, point.projection_digest);
    let lease = fork(&flipped, "s~v");
    assert!(
        child_verdict(&lease, &point).is_err(),
        "the host's contract sees the corrupted padding"
    );

    // the padding must be exactly as long as announced; no stray bytes
    for bad in [&state[..state.len() - 1], &[&state[..], b"x"].concat()[..]] {
        let err = probe
            .import_state(bad.to_vec(), &capture_request())
            .unwrap_err();
        assert_eq!(err.kind, "invalid-state");
    }
    let err = probe
        .import_state([&unpadded[..], b"x"].concat(), &capture_request())
        .unwrap_err();
    assert_eq!(err.kind, "invalid-state");
    assert!(
        probe
            .import_state([&unpadded[..], b" \n"].concat(), &capture_request())
            .is_ok(),
        "trailing whitespace after an unpadded document is still fine"
    );

    // the padding is deterministic per seed; bad pad_bytes are refused
    assert_eq!(Padding::generate(100, "s"), Padding::generate(100, "s"));
    assert_ne!(Padding::generate(100, "s"), Padding::generate(100, "t"));
    assert_eq!(Padding::generate(99, "s").len(), 99);
    assert!(Padding::generate(0, "s").is_empty());
    for bad in [json!(-1), json!("64"), json!(1.5), json!(MAX_PAD_BYTES + 1)] {
        let seed = item("s", &[]).with("pad_bytes", bad);
        let err = probe
            .prepare(seed.clone(), vec![seed], &Context::default())
            .unwrap_err();
        assert_eq!(err.kind, "invalid-item");
    }
    assert!(ProbeState::of(&item("s", &[]).with("pad_bytes", Value::Null)).is_ok());
}

#[test]
fn binding_drop_traps_panics_in_the_destructor_after_a_clean_release() {
    let probe = ReplayProbe;
    let (_, lease) = point(item("s", &["binding_drop_traps"]), &[]);
    let binding = lease.binding.unwrap();
    probe.release_state(&binding).unwrap();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(binding)));
    assert!(dropped.is_err(), "the destructor panics");

    let (_, honest) = point(item("s", &[]), &[]);
    drop(honest);
}
