use super::*;
use crate::types::Record;

#[derive(Default)]
struct Echo {
    calls: Cell<u32>,
}

impl Episode for Echo {
    fn execute(&self, item: Item, ctx: &Context) -> Result<Record, Error> {
        self.calls.set(self.calls.get() + 1);
        if item.item_id() == "fail" {
            return Err(Error::infra("flaky", "try again"));
        }
        let mut record = Record::with_keys([item.item_id()]);
        record
            .set("arm", ctx.arm.as_str())
            .set("calls", self.calls.get());
        Ok(record)
    }
}

impl Seeds for Echo {
    fn list_seed_items(&self, arm: &str, epoch: u32) -> Result<Vec<Item>, Error> {
        Ok((0..epoch)
            .map(|i| Item::new(format!("{arm}-{i}"), "f", "t"))
            .collect())
    }
}

impl Variants for Echo {
    fn compile_variant(&self, spec: VariantSpec, seed: Item) -> Result<Item, Error> {
        Ok(Item::new(
            format!("{}~{}", seed.item_id(), spec.spec_id()),
            seed.family(),
            "v",
        )
        .with("is_variant", true))
    }
}

fn ctx() -> wit_types::Context {
    wit_types::Context {
        arm: "main".into(),
        epoch: 1,
        branch_id: "queue_worker_01".into(),
        execution_group_id: None,
    }
}

#[test]
fn execute_parses_delegates_and_serialises() {
    type A = Adapter<Echo>;
    let out = <A as wit_episode::Guest>::execute(r#"{"item_id":"x"}"#.into(), ctx()).unwrap();
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    assert_eq!(
        json(&out),
        serde_json::json!({"observation_keys":["x"],"weighted_flags":{},"accepted":true,"arm":"main","calls":1})
    );
    // one instance per component: state persists across calls
    let out = <A as wit_episode::Guest>::execute(r#"{"item_id":"y"}"#.into(), ctx()).unwrap();
    assert_eq!(json(&out)["calls"], 2, "{out}");

    let err = <A as wit_episode::Guest>::execute("[1,2]".into(), ctx()).unwrap_err();
    assert_eq!(err.kind, "invalid-item");
    assert!(!err.retryable_infra_error);
    let err = <A as wit_episode::Guest>::execute("{".into(), ctx()).unwrap_err();
    assert_eq!(err.kind, "invalid-item");

    let err =
        <A as wit_episode::Guest>::execute(r#"{"item_id":"fail"}"#.into(), ctx()).unwrap_err();
    assert_eq!(err.kind, "flaky");
    assert!(err.retryable_infra_error);
}

#[test]
fn seeds_and_variants() {
    type A = Adapter<Echo>;
    let seeds = <A as wit_seeds::Guest>::list_seed_items("arm".into(), 2).unwrap();
    assert_eq!(seeds.len(), 2);
    let first: serde_json::Value = serde_json::from_str(&seeds[0]).unwrap();
    assert_eq!(first["item_id"], "arm-0");
    let variant = <A as wit_variants::Guest>::compile_variant(
        r#"{"spec_id":"s"}"#.into(),
        r#"{"item_id":"a","family":"f"}"#.into(),
    )
    .unwrap();
    let variant: serde_json::Value = serde_json::from_str(&variant).unwrap();
    assert_eq!(variant["item_id"], "a~s", "{variant}");
    let err = <A as wit_variants::Guest>::compile_variant("1".into(), "{}".into()).unwrap_err();
    assert_eq!(err.kind, "invalid-spec");
}

/// A grouped, replayable adapter: the group is the seed id and the item
/// count; a binding holds the captured seed id and a working copy.
#[derive(Default)]
struct Counter;

struct Tally {
    seed: String,
    items: usize,
}

struct Snapshot {
    captured: String,
    working: std::cell::RefCell<Option<String>>,
}

fn digest(state: &str) -> String {
    format!("digest:{state}")
}

impl EpisodeGroups for Counter {
    type Group = Tally;

    fn prepare(
        &self,
        seed: Item,
        items: Vec<Item>,
        _ctx: &Context,
    ) -> Result<Option<Prepared<Tally>>, Error> {
        if seed.item_id() == "opt-out" {
            return Ok(None);
        }
        let tally = Tally {
            seed: seed.item_id().to_owned(),
            items: items.len(),
        };
        Ok(Some(Prepared::new(tally, Record::with_keys(["prefix"]))))
    }

    fn execute_episode(&self, group: &Tally, item: Item, _ctx: &Context) -> Result<Record, Error> {
        Ok(Record::with_keys([format!(
            "{}:{}",
            group.seed,
            item.item_id()
        )]))
    }
}

impl Replay for Counter {
    type Binding = Snapshot;

    fn capture(
        &self,
        group: &Tally,
        request: &CaptureRequest,
    ) -> Result<StateLease<Snapshot>, Error> {
        if request.replay_point_id == "marker" {
            return Ok(StateLease::non_replayable());
        }
        let snapshot = Snapshot {
            captured: format!("{}/{}", group.seed, group.items),
            working: Default::default(),
        };
        let digest = digest(&snapshot.captured);
        Ok(StateLease::exact(snapshot, digest))
    }

    fn restore(
        &self,
        binding: &Snapshot,
        _request: &RestoreRequest,
    ) -> Result<RestoreReceipt, Error> {
        let working = binding.captured.clone();
        let receipt = RestoreReceipt::new(Fidelity::Exact)
            .with_digest(digest(&working))
            .with_prefix_reused(true);
        *binding.working.borrow_mut() = Some(working);
        Ok(receipt)
    }

    fn validate(
        &self,
        binding: &Snapshot,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        let working = binding.working.borrow();
        let working = working.as_deref().ok_or("not restored")?;
        Ok(EquivalenceReport::exact_digests(
            digest(&binding.captured),
            digest(working),
        ))
    }

    fn run_suffix(&self, binding: &Snapshot, item: Item, _ctx: &Context) -> Result<Record, Error> {
        let working = binding.working.borrow();
        let working = working.as_deref().ok_or("not restored")?;
        Ok(Record::with_keys([format!("{working}:{}", item.item_id())]))
    }

    fn export_state(&self, binding: &Snapshot) -> Result<Option<Vec<u8>>, Error> {
        Ok(Some(binding.captured.as_bytes().to_vec()))
    }
}

fn group_ctx(id: &str) -> wit_types::Context {
    wit_types::Context {
        execution_group_id: Some(id.to_owned()),
        ..ctx()
    }
}

fn capture_request(group: &str) -> CaptureRequest {
    CaptureRequest {
        replay_point_id: format!("rp-{group}"),
        trace_id: group.to_owned(),
        branch_id: "main".into(),
        after_event_id: Some("e-1".into()),
        next_sequence: 2,
        execution_group_id: group.to_owned(),
    }
}

fn prepare(seed: &str, group: wit_types::Context) -> GroupBox<Tally> {
    let seed = format!(r#"{{"item_id":"{seed}"}}"#);
    Adapter::<Counter>::prepare_group(&seed, &[seed.clone(), r#"{"item_id":"v"}"#.into()], group)
        .unwrap()
        .unwrap()
        .group
}

#[test]
fn a_binding_is_resumed_by_its_token_until_it_is_dropped() {
    type A = Adapter<Counter>;
    let group = prepare("seed-t", group_ctx("g-t"));
    let first = A::capture_point(&capture_request("g-t"))
        .unwrap()
        .binding
        .unwrap();
    let second = A::capture_point(&capture_request("g-t"))
        .unwrap()
        .binding
        .unwrap();
    assert_ne!(
        first.token(),
        second.token(),
        "every binding has its own token"
    );
    let resumed = BindingBox::<Snapshot>::resume(first.token()).unwrap();
    assert!(
        std::ptr::eq(resumed.binding(), first.binding()),
        "the same state, shared"
    );
    drop(resumed);
    assert!(
        BindingBox::<Snapshot>::resume(first.token()).is_ok(),
        "first still holds it"
    );
    drop(first);
    let token = second.token();
    drop(second);
    let error = BindingBox::<Snapshot>::resume(token).unwrap_err();
    assert_eq!(error.kind, "unknown-binding");
    A::release_group(group, group_ctx("g-t")).unwrap();
}

#[test]
fn capture_finds_the_group_prepared_under_its_id() {
    type A = Adapter<Counter>;
    let before = registry::len(&registry::GROUPS);
    let first = prepare("seed-a", group_ctx("g-a"));
    let second = prepare("seed-b", group_ctx("g-b"));
    assert_eq!(registry::len(&registry::GROUPS), before + 2);
    assert_eq!(first.group().seed, "seed-a");

    let lease = A::capture_point(&capture_request("g-b")).unwrap();
    assert_eq!(lease.fidelity, Fidelity::Exact);
    assert_eq!(lease.projection_digest.as_deref(), Some("digest:seed-b/2"));
    assert_eq!(
        lease.binding.as_ref().unwrap().binding().captured,
        "seed-b/2"
    );
    let lease = A::capture_point(&capture_request("g-a")).unwrap();
    assert_eq!(lease.binding.unwrap().binding().captured, "seed-a/2");

    // release unregisters; the point captured before lives on
    A::release_group(first, group_ctx("g-a")).unwrap();
    let err = A::capture_point(&capture_request("g-a")).unwrap_err();
    assert_eq!(err.kind, "unknown-group");
    // dropping the box (the host dropped the handle) unregisters too
    drop(second);
    assert_eq!(
        A::capture_point(&capture_request("g-b")).unwrap_err().kind,
        "unknown-group"
    );
    assert_eq!(registry::len(&registry::GROUPS), before);
}

#[test]
fn unknown_group_is_a_declared_error_naming_the_id() {
    type A = Adapter<Counter>;
    let err = A::capture_point(&capture_request("never-prepared")).unwrap_err();
    assert_eq!(err.kind, "unknown-group");
    assert!(
        err.message.contains("\"never-prepared\""),
        "{}",
        err.message
    );
    assert!(!err.retryable);

    // a prepare without an execution group id is not capturable
    let before = registry::len(&registry::GROUPS);
    let plain = prepare("seed-c", ctx());
    assert_eq!(registry::len(&registry::GROUPS), before);
    assert_eq!(plain.group().items, 2);
    // an opt-out registers nothing
    let none = A::prepare_group(r#"{"item_id":"opt-out"}"#, &[], group_ctx("g-none")).unwrap();
    assert!(none.is_none());
    assert_eq!(
        A::capture_point(&capture_request("g-none"))
            .unwrap_err()
            .kind,
        "unknown-group"
    );
    // the WIT shell reports the same error
    let err =
        <A as wit_replay::Guest>::capture_replay_state(capture_request("nope").into()).unwrap_err();
    assert_eq!(err.kind, "unknown-group");
}

#[test]
fn a_later_prepare_under_the_same_id_wins() {
    type A = Adapter<Counter>;
    let old = prepare("old", group_ctx("g-same"));
    let new = prepare("new", group_ctx("g-same"));
    let lease = A::capture_point(&capture_request("g-same")).unwrap();
    assert_eq!(lease.binding.unwrap().binding().captured, "new/2");
    // releasing the older group keeps the newer one capturable
    A::release_group(old, group_ctx("g-same")).unwrap();
    let lease = A::capture_point(&capture_request("g-same")).unwrap();
    assert_eq!(lease.binding.unwrap().binding().captured, "new/2");
    drop(new);
}

#[test]
fn replay_calls_through_the_wit_shell() {
    type A = Adapter<Counter>;
    let group = prepare("seed-r", group_ctx("g-r"));
    let lease = A::capture_point(&capture_request("g-r")).unwrap();
    // Natively a resource cannot be created, but a borrow is a pointer
    // to the resource's representation (`Option<T>`).
    let mut rep: Option<BindingBox<Snapshot>> = lease.binding;
    let rep_ptr = &mut rep as *mut Option<BindingBox<Snapshot>> as usize;
    let borrow = || unsafe { wit_replay::ReplayBindingBorrow::lift(rep_ptr) };

    let request = RestoreRequest {
        replay_point_id: "rp-g-r".into(),
        target_branch_id: "v".into(),
        minimum_fidelity: Fidelity::SemanticEquivalent,
    };
    let receipt =
        <A as wit_replay::Guest>::restore_replay_state(borrow(), request.clone().into()).unwrap();
    assert_eq!(receipt.achieved_fidelity, wit_types::Fidelity::Exact);
    assert_eq!(receipt.prefix_reused, Some(true));
    let report =
        <A as wit_replay::Guest>::validate_replay_equivalence(borrow(), receipt.clone()).unwrap();
    let report = EquivalenceReport::from(report);
    assert!(report.equivalent);
    assert_eq!(report.checks.len(), 1);
    assert_eq!(
        report.check_contract(
            &receipt.into(),
            Some("digest:seed-r/2"),
            request.minimum_fidelity
        ),
        Ok(true)
    );

    let record =
        <A as wit_replay::Guest>::run_replay_suffix(borrow(), r#"{"item_id":"v"}"#.into(), ctx())
            .unwrap();
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(
        record["observation_keys"],
        serde_json::json!(["seed-r/2:v"])
    );
    let err =
        <A as wit_replay::Guest>::run_replay_suffix(borrow(), "[]".into(), ctx()).unwrap_err();
    assert_eq!(err.kind, "invalid-item");

    // defaults: finalize and release succeed, import is refused
    <A as wit_replay::Guest>::finalize_replay_suffix(borrow(), request.into(), true).unwrap();
    <A as wit_replay::Guest>::release_replay_state(borrow()).unwrap();
    let state = <A as wit_replay::Guest>::export_replay_state(borrow()).unwrap();
    assert_eq!(state.as_deref(), Some(&b"seed-r/2"[..]));
    let err = <A as wit_replay::Guest>::import_replay_state(
        state.unwrap(),
        capture_request("g-r").into(),
    )
    .unwrap_err();
    assert_eq!(err.kind, "unsupported");
    drop(rep);
    drop(group);
}

#[test]
fn leases_receipts_and_reports_convert() {
    type A = Adapter<Counter>;
    // a non-replayable lease crosses without a resource
    let group = prepare("seed-m", group_ctx("g-m"));
    let mut request = capture_request("g-m");
    request.replay_point_id = "marker".into();
    let lease: wit_replay::StateLease = A::capture_point(&request).unwrap().into();
    assert!(lease.binding.is_none());
    assert_eq!(lease.fidelity, wit_types::Fidelity::NonReplayable);
    assert_eq!(lease.projection_digest, None);
    drop(group);

    for fidelity in Fidelity::ALL {
        let wit: wit_types::Fidelity = fidelity.into();
        assert_eq!(Fidelity::from(wit), fidelity);
    }
    let request = capture_request("g-x");
    let wit: wit_replay::CaptureRequest = request.clone().into();
    assert_eq!(wit.next_sequence, 2);
    assert_eq!(wit.after_event_id.as_deref(), Some("e-1"));
    assert_eq!(CaptureRequest::from(wit), request);

    let receipt = RestoreReceipt::new(Fidelity::BestEffort).with_digest("d");
    let wit: wit_types::RestoreReceipt = receipt.clone().into();
    assert_eq!(wit.achieved_fidelity, wit_types::Fidelity::BestEffort);
    assert_eq!(wit.restored_projection_digest.as_deref(), Some("d"));
    assert_eq!(wit.prefix_reused, None);
    assert_eq!(RestoreReceipt::from(wit), receipt);

    let report = EquivalenceReport::new(Fidelity::SemanticEquivalent, true)
        .with_check(EquivalenceCheck::new("rows", true).with_summary("3 rows"))
        .with_reason("checked");
    let wit: wit_types::EquivalenceReport = report.clone().into();
    assert_eq!(
        wit.achieved_fidelity,
        wit_types::Fidelity::SemanticEquivalent
    );
    assert_eq!(wit.checks.len(), 1);
    assert_eq!(wit.checks[0].check_id, "rows");
    assert_eq!(wit.checks[0].public_summary.as_deref(), Some("3 rows"));
    assert_eq!(wit.sanitized_reason.as_deref(), Some("checked"));
    assert_eq!(EquivalenceReport::from(wit), report);
}

/// A child of `Counter`: the exported state it was forked from.
struct Fork {
    child_id: String,
    state: String,
    runs: Cell<u32>,
}

impl ReplayChildren for Counter {
    type Child = Fork;

    fn fork_child(&self, state: Vec<u8>, request: &ForkRequest) -> Result<ChildLease<Fork>, Error> {
        let state = String::from_utf8(state)?;
        if state.is_empty() {
            return Err(Error::new("invalid-state", "no state"));
        }
        let receipt = RestoreReceipt::new(Fidelity::Exact)
            .with_digest(digest(&state))
            .with_prefix_reused(true);
        let fork = Fork {
            child_id: request.child_id.clone(),
            state,
            runs: Cell::new(0),
        };
        let lease = ChildLease::thread_safe(fork, receipt);
        Ok(if request.child_id.starts_with("serial") {
            lease.with_concurrency(ChildConcurrency::SerialOnly)
        } else {
            lease
        })
    }

    fn validate_child(
        &self,
        child: &Fork,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        Ok(EquivalenceReport::exact_digests(
            digest(&child.state),
            digest(&child.state),
        ))
    }

    fn run_child(&self, child: &Fork, task: Item, _ctx: &Context) -> Result<Record, Error> {
        child.runs.set(child.runs.get() + 1);
        let mut record = Record::with_keys([format!("child:{}:{}", child.state, task.item_id())]);
        record.set("child_id", child.child_id.as_str());
        if task.item_id() == "reject" {
            record.set_accepted(false);
        }
        Ok(record)
    }
}

impl ChildRisk for Counter {
    fn assess_intent(&self, child: &Fork, intent: &crate::Object) -> Result<RiskAssessment, Error> {
        if intent.get("danger") == Some(&serde_json::Value::Bool(true)) {
            return Ok(RiskAssessment::deny(
                "danger-flag",
                format!("{} asks for danger", child.child_id),
            ));
        }
        Ok(RiskAssessment::allow("danger-flag"))
    }

    fn assess_outcome(
        &self,
        child: &Fork,
        _intent: &crate::Object,
        outcome: &Record,
    ) -> Result<RiskAssessment, Error> {
        if !outcome.is_accepted() {
            return Ok(RiskAssessment::deny(
                "accepted-outcome",
                format!(
                    "{} was not accepted after {} run(s)",
                    child.child_id,
                    child.runs.get()
                ),
            ));
        }
        Ok(RiskAssessment::allow("accepted-outcome").with_reason("accepted"))
    }
}

impl Counterfactual for Counter {
    /// Passes `fixed` when the change sets `"fix": true`; reports the
    /// child's state and the request's candidate in the summary.
    fn run_counterfactual(
        &self,
        child: &Fork,
        item: Item,
        request: &CounterfactualRequest,
        change: &crate::Object,
        _ctx: &Context,
    ) -> Result<Vec<ValidationOutcome>, Error> {
        let fixed = change.get("fix") == Some(&serde_json::Value::Bool(true));
        Ok(vec![ValidationOutcome {
            validation_id: "fixed".into(),
            passed: fixed,
            public_summary: Some(format!(
                "{} on {} for {}",
                request.candidate_id,
                child.state,
                item.item_id()
            )),
        }])
    }
}

fn counterfactual_request(change: &str) -> wit_counterfactual::CounterfactualRequest {
    wit_counterfactual::CounterfactualRequest {
        hypothesis_id: "h".into(),
        candidate_id: "cand".into(),
        replay_point_id: "rp-c".into(),
        first_affected_event_id: "e-3".into(),
        first_affected_sequence: 3,
        public_change_set: change.into(),
    }
}

#[test]
fn a_counterfactual_finds_its_child_by_id_and_gets_the_change_parsed() {
    type A = Adapter<Counter>;
    let lease = A::fork_child_box(b"seed-f".to_vec(), &fork_request("cand")).unwrap();
    let outcomes = <A as wit_counterfactual::Guest>::run_counterfactual(
        "cand".into(),
        r#"{"item_id":"doc"}"#.into(),
        counterfactual_request(r#"{"fix":true}"#),
        ctx(),
    )
    .unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].validation_id, "fixed");
    assert!(outcomes[0].passed);
    assert_eq!(
        outcomes[0].public_summary.as_deref(),
        Some("cand on seed-f for doc")
    );
    let not_fixed = <A as wit_counterfactual::Guest>::run_counterfactual(
        "cand".into(),
        r#"{"item_id":"doc"}"#.into(),
        counterfactual_request("{}"),
        ctx(),
    )
    .unwrap();
    assert!(!not_fixed[0].passed);
    let bad_change = <A as wit_counterfactual::Guest>::run_counterfactual(
        "cand".into(),
        r#"{"item_id":"doc"}"#.into(),
        counterfactual_request("[1]"),
        ctx(),
    )
    .unwrap_err();
    assert_eq!(bad_change.kind, Error::INVALID_CHANGE_SET);
    let unknown = <A as wit_counterfactual::Guest>::run_counterfactual(
        "nobody".into(),
        r#"{"item_id":"doc"}"#.into(),
        counterfactual_request("{}"),
        ctx(),
    )
    .unwrap_err();
    assert_eq!(unknown.kind, Error::UNKNOWN_CHILD);
    drop(lease);
}

fn fork_request(child_id: &str) -> ForkRequest {
    ForkRequest {
        replay_point_id: "rp-c".into(),
        child_id: child_id.into(),
        target_branch_id: child_id.into(),
        minimum_fidelity: Fidelity::Exact,
    }
}

#[test]
fn children_fork_validate_run_and_release_through_the_wit_shell() {
    type A = Adapter<Counter>;
    let before = registry::len(&registry::CHILDREN);
    let lease = A::fork_child_box(b"seed-c/2".to_vec(), &fork_request("c~v")).unwrap();
    assert_eq!(registry::len(&registry::CHILDREN), before + 1);
    assert_eq!(lease.concurrency, ChildConcurrency::ThreadSafe);
    assert_eq!(lease.child.child_id(), "c~v");
    assert_eq!(lease.receipt.check_against(Fidelity::Exact), Ok(()));
    let receipt = lease.receipt.clone();

    // Natively a resource cannot be created, but a borrow is a pointer
    // to the resource's representation (`Option<T>`).
    let mut rep: Option<ChildBox<Fork>> = Some(lease.child);
    let rep_ptr = &mut rep as *mut Option<ChildBox<Fork>> as usize;
    let borrow = || unsafe { wit_children::ReplayChildBorrow::lift(rep_ptr) };

    let report = <A as wit_children::Guest>::validate_replay_child_equivalence(
        borrow(),
        receipt.clone().into(),
    )
    .unwrap();
    let report = EquivalenceReport::from(report);
    assert_eq!(
        report.check_contract(&receipt, Some("digest:seed-c/2"), Fidelity::Exact),
        Ok(true)
    );

    // intent, run, outcome, release: the order the host uses
    let intent = <A as wit_risk::Guest>::assess_replay_child_intent(
        "c~v".into(),
        r#"{"spec_id":"v"}"#.into(),
    )
    .unwrap();
    assert_eq!(intent.disposition, wit_risk::Disposition::Allow);
    assert_eq!(intent.policy_id, "danger-flag");
    assert_eq!(intent.sanitized_reason, None);
    let record = <A as wit_children::Guest>::run_replay_child(
        borrow(),
        r#"{"item_id":"c~v"}"#.into(),
        ctx(),
    )
    .unwrap();
    let value: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(
        value["observation_keys"],
        serde_json::json!(["child:seed-c/2:c~v"])
    );
    assert_eq!(value["child_id"], "c~v");
    let outcome = <A as wit_risk::Guest>::assess_replay_child_outcome(
        "c~v".into(),
        r#"{"spec_id":"v"}"#.into(),
        record,
    )
    .unwrap();
    assert_eq!(
        RiskAssessment::from(outcome),
        RiskAssessment::allow("accepted-outcome").with_reason("accepted")
    );
    let err =
        <A as wit_children::Guest>::run_replay_child(borrow(), "[]".into(), ctx()).unwrap_err();
    assert_eq!(err.kind, "invalid-item");
    <A as wit_children::Guest>::release_replay_child(borrow()).unwrap();

    // the host drops the handle: the child is gone from the index
    drop(rep);
    assert_eq!(registry::len(&registry::CHILDREN), before);
    let err =
        <A as wit_risk::Guest>::assess_replay_child_intent("c~v".into(), "{}".into()).unwrap_err();
    assert_eq!(err.kind, "unknown-child");
}

#[test]
fn risk_calls_find_the_child_by_its_id() {
    type A = Adapter<Counter>;
    let serial = A::fork_child_box(b"s".to_vec(), &fork_request("serial-1")).unwrap();
    assert_eq!(serial.concurrency, ChildConcurrency::SerialOnly);
    let other = A::fork_child_box(b"o".to_vec(), &fork_request("other")).unwrap();

    let denied = A::assess_intent_of("serial-1", r#"{"danger":true}"#).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.policy_id, "danger-flag");
    assert_eq!(
        denied.sanitized_reason.as_deref(),
        Some("serial-1 asks for danger"),
        "the reason names the child the id resolved to"
    );
    let denied =
        A::assess_outcome_of("other", "{}", r#"{"observation_keys":[],"accepted":false}"#).unwrap();
    assert_eq!(denied.disposition, Disposition::Deny);
    assert!(denied.sanitized_reason.unwrap().starts_with("other "));

    // an id this instance never forked
    let err = A::assess_intent_of("never", "{}").unwrap_err();
    assert_eq!(err.kind, Error::UNKNOWN_CHILD);
    assert!(err.message.contains("\"never\""), "{}", err.message);
    assert!(!err.retryable);
    let err = A::assess_outcome_of("never", "{}", "{}").unwrap_err();
    assert_eq!(err.kind, "unknown-child");
    // malformed intent and outcome
    assert_eq!(
        A::assess_intent_of("other", "[1]").unwrap_err().kind,
        "invalid-intent"
    );
    assert_eq!(
        A::assess_outcome_of("other", "{", "{}").unwrap_err().kind,
        "invalid-intent"
    );
    assert_eq!(
        A::assess_outcome_of("other", "{}", "7").unwrap_err().kind,
        "invalid-record"
    );
    // the adapter's own fork error crosses unchanged
    assert_eq!(
        A::fork_child_box(Vec::new(), &fork_request("empty"))
            .unwrap_err()
            .kind,
        "invalid-state"
    );
    let err = <A as wit_risk::Guest>::assess_replay_child_intent("empty".into(), "{}".into())
        .unwrap_err();
    assert_eq!(err.kind, "unknown-child", "a failed fork registers nothing");

    // a later fork under the same id wins; dropping the older keeps it
    let newer = A::fork_child_box(b"n".to_vec(), &fork_request("other")).unwrap();
    drop(other);
    let denied = A::assess_intent_of("other", r#"{"danger":true}"#).unwrap();
    assert!(denied.is_denied());
    assert_eq!(newer.child.child().state, "n");
    drop(newer);
    drop(serial);
    assert_eq!(
        A::assess_intent_of("other", "{}").unwrap_err().kind,
        "unknown-child"
    );
}

#[test]
fn child_values_convert() {
    let request = fork_request("c");
    let wit: wit_children::ForkRequest = request.clone().into();
    assert_eq!(wit.child_id, "c");
    assert_eq!(wit.minimum_fidelity, wit_types::Fidelity::Exact);
    assert_eq!(ForkRequest::from(wit), request);
    for concurrency in [
        ChildConcurrency::SerialOnly,
        ChildConcurrency::ThreadSafe,
        ChildConcurrency::ProcessIsolated,
    ] {
        let wit: wit_children::ChildConcurrency = concurrency.into();
        assert_eq!(ChildConcurrency::from(wit), concurrency);
    }
    for assessment in [
        RiskAssessment::allow("p"),
        RiskAssessment::deny("p", "too big"),
    ] {
        let wit: wit_risk::RiskAssessment = assessment.clone().into();
        assert_eq!(wit.policy_id, "p");
        assert_eq!(RiskAssessment::from(wit), assessment);
    }
    assert_eq!(
        wit_risk::Disposition::from(Disposition::Deny),
        wit_risk::Disposition::Deny
    );
}
