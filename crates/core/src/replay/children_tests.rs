//! The reference's child-group scenarios against native test children.

use std::collections::BTreeMap;
use std::thread::ThreadId;

use serde_json::json;

use super::*;
use crate::episode::adapter::ErrorType;
use crate::replay::agent_state::{MemoryAgentStateStore, agent_cursor};
use crate::replay::point::{
    CaptureRequest, EquivalenceCheck, Lifecycle, RestoreRequest, StateLease,
};
use crate::replay::registry::ReplayAdapter;
use crate::trace::{TraceEventKind, TraceLog};

/// How one child misbehaves, by child id.
#[derive(Clone, Default)]
struct Plan {
    fork_fails: bool,
    stronger: bool,
    lie_digest: bool,
    concurrency: Option<ChildConcurrency>,
    identity: Option<u64>,
    key: Option<u64>,
    deny_intent: bool,
    deny_outcome: bool,
    run_fails: bool,
    release_fails: bool,
    sleep_ms: u64,
}

#[derive(Default)]
struct Forker {
    plans: BTreeMap<String, Plan>,
    risk: bool,
    fidelity: Option<Fidelity>,
    next_key: u64,
    ran: Arc<Mutex<Vec<String>>>,
    released: Arc<Mutex<Vec<String>>>,
    /// Children running right now, and the most seen at once.
    in_flight: Arc<(
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
    )>,
    /// Each child that ran: its id, the thread that forked it and the one
    /// it ran on.
    threads: Threads,
}

type Threads = Arc<Mutex<Vec<(String, ThreadId, ThreadId)>>>;

struct Child {
    id: String,
    plan: Plan,
    ran: Arc<Mutex<Vec<String>>>,
    released: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<(
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
    )>,
    forked_on: ThreadId,
    threads: Threads,
}

fn fail(message: &str) -> AdapterError {
    AdapterError::declared("fake", message, false)
}

impl ChildSession for Child {
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        let observed = if self.plan.lie_digest {
            "other"
        } else {
            "digest"
        };
        Ok(EquivalenceReport {
            achieved_fidelity: receipt.achieved_fidelity,
            equivalent: true,
            expected_digest: Some("digest".into()),
            observed_digest: Some(observed.into()),
            checks: vec![EquivalenceCheck {
                check_id: "digest".into(),
                passed: true,
                public_summary: None,
            }],
            sanitized_reason: None,
        })
    }

    fn assess_intent(&mut self, _: &Map<String, Value>) -> Result<RiskAssessment, AdapterError> {
        Ok(RiskAssessment {
            disposition: if self.plan.deny_intent {
                Disposition::Deny
            } else {
                Disposition::Allow
            },
            policy_id: "size-budget".into(),
            sanitized_reason: Some("too large".into()),
        })
    }

    fn run(&mut self, task: &Item) -> Result<Record, AdapterError> {
        let (now, most) = &*self.in_flight;
        let running = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(running, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(self.plan.sleep_ms));
        now.fetch_sub(1, Ordering::SeqCst);
        self.ran.lock().unwrap().push(self.id.clone());
        self.threads.lock().unwrap().push((
            self.id.clone(),
            self.forked_on,
            std::thread::current().id(),
        ));
        if self.plan.run_fails {
            return Err(AdapterError::new(ErrorType::Trap, "child trapped"));
        }
        let mut record = Record::new();
        record.insert("item_id".into(), task["item_id"].clone());
        Ok(record)
    }

    fn assess_outcome(
        &mut self,
        _: &Map<String, Value>,
        _: &Record,
    ) -> Result<RiskAssessment, AdapterError> {
        Ok(RiskAssessment {
            disposition: if self.plan.deny_outcome {
                Disposition::Deny
            } else {
                Disposition::Allow
            },
            policy_id: "growth".into(),
            sanitized_reason: None,
        })
    }

    fn release(&mut self) -> Result<(), AdapterError> {
        if self.plan.release_fails {
            return Err(fail("release refused"));
        }
        self.released.lock().unwrap().push(self.id.clone());
        Ok(())
    }
}

impl ChildForker for Forker {
    type Session = Child;

    fn has_risk_policy(&self) -> bool {
        self.risk
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<Child>, AdapterError> {
        let plan = self
            .plans
            .get(&request.child_id)
            .cloned()
            .unwrap_or_default();
        if plan.fork_fails {
            return Err(fail("fork refused"));
        }
        self.next_key += 1;
        let captured = self.fidelity.unwrap_or(Fidelity::Exact);
        Ok(ChildLease {
            receipt: RestoreReceipt {
                achieved_fidelity: if plan.stronger {
                    Fidelity::Exact
                } else {
                    captured
                },
                restored_projection_digest: None,
                prefix_reused: Some(true),
            },
            concurrency: plan.concurrency.unwrap_or(ChildConcurrency::ThreadSafe),
            worker_identity: plan.identity,
            child_key: plan.key.unwrap_or(self.next_key),
            session: Child {
                id: request.child_id.clone(),
                plan,
                ran: Arc::clone(&self.ran),
                released: Arc::clone(&self.released),
                in_flight: Arc::clone(&self.in_flight),
                forked_on: std::thread::current().id(),
                threads: Arc::clone(&self.threads),
            },
        })
    }
}

/// The same children forked from any thread at once (the lock guards only
/// the plans and the key counter, not the fork's length: a plan's
/// `sleep_ms` also delays its fork, outside the lock).
struct AtOnce(Mutex<Forker>);

impl ChildForker for AtOnce {
    type Session = Child;

    fn has_risk_policy(&self) -> bool {
        self.0.lock().unwrap().risk
    }

    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<Child>, AdapterError> {
        ConcurrentForker::fork(self, request)
    }

    fn concurrent(&self) -> Option<&dyn ConcurrentForker<Child>> {
        Some(self)
    }
}

impl ConcurrentForker<Child> for AtOnce {
    fn fork(&self, request: &ForkRequest) -> Result<ChildLease<Child>, AdapterError> {
        let lease = self.0.lock().unwrap().fork(request);
        if let Ok(lease) = &lease {
            std::thread::sleep(std::time::Duration::from_millis(
                lease.session.plan.sleep_ms,
            ));
        }
        lease
    }
}

impl AtOnce {
    fn forker(&self) -> std::sync::MutexGuard<'_, Forker> {
        self.0.lock().unwrap()
    }
}

/// A parent adapter with one capturable state.
struct Parent(Fidelity);

impl ReplayAdapter for Parent {
    type Binding = u8;
    fn capture_replay_state(&mut self, _: &CaptureRequest) -> Result<StateLease<u8>, AdapterError> {
        Ok(StateLease {
            binding: Some(1),
            fidelity: self.0,
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

type Registry = ReplayPointRegistry<u8, MemoryAgentStateStore>;

fn setup(fidelity: Fidelity) -> (Registry, Parent) {
    let mut registry = ReplayPointRegistry::new(
        MemoryAgentStateStore::new(),
        Arc::new(ReplayMetricLedger::new()),
    );
    let mut parent = Parent(fidelity);
    let mut trace = TraceLog::new("trace", "main").unwrap();
    trace
        .emit(TraceEventKind::Lifecycle, json!({}), None, None)
        .unwrap();
    let cursor = agent_cursor(trace.events(), "ctx");
    registry
        .capture_at_head(&mut parent, &mut trace, cursor, "rp", "group", None)
        .unwrap();
    (registry, parent)
}

fn task(id: &str) -> ChildTask {
    let mut intent = Map::new();
    intent.insert("spec_id".into(), Value::from(id));
    let mut item = Item::new();
    item.insert("item_id".into(), Value::from(id));
    ChildTask {
        child_id: id.into(),
        target_branch_id: id.into(),
        minimum_fidelity: Fidelity::SemanticEquivalent,
        item,
        intent,
        counterfactual: None,
    }
}

fn tasks(ids: &[&str]) -> Vec<ChildTask> {
    ids.iter().map(|id| task(id)).collect()
}

fn count(registry: &Registry, field: &str) -> u64 {
    registry.metrics().count(field)
}

fn planned(plans: &[(&str, Plan)]) -> Forker {
    Forker {
        plans: plans
            .iter()
            .map(|(id, plan)| (id.to_string(), plan.clone()))
            .collect(),
        ..Forker::default()
    }
}

#[test]
fn a_group_forks_validates_runs_and_releases_every_child() {
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[]);
    forker.risk = true;
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b", "c"]), 1, false)
        .unwrap();
    assert_eq!(outcomes.len(), 3);
    for (outcome, id) in outcomes.iter().zip(["a", "b", "c"]) {
        let ChildOutcome::Succeeded(result) = outcome else {
            panic!("{id} failed")
        };
        assert_eq!(result.child_id, id);
        assert!(result.isolated);
        assert!(!result.parallel, "one worker runs serially");
        assert!(result.restore.promotion_eligible);
        assert_eq!(result.outcome["item_id"], id);
        assert_eq!(
            result.intent_assessment.as_ref().unwrap().disposition,
            Disposition::Allow
        );
        assert!(result.outcome_assessment.is_some());
    }
    assert_eq!(*forker.released.lock().unwrap(), vec!["a", "b", "c"]);
    assert_eq!(
        registry.store().live(),
        1,
        "child agent states released; the point's remains"
    );
    for field in [
        "child_session_fork_success_count",
        "child_session_release_success_count",
        "child_intent_allowed_count",
        "child_outcome_allowed_count",
    ] {
        assert_eq!(count(&registry, field), 3, "{field}");
    }
    assert_eq!(count(&registry, "child_group_success_count"), 1);
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Ready);
}

#[test]
fn child_ids_must_be_unique_and_the_point_ready() {
    let (mut registry, mut parent) = setup(Fidelity::Exact);
    let mut forker = planned(&[]);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "a"]), 1, false)
        .unwrap_err();
    assert!(
        error.to_string().contains("unique within a group"),
        "{error}"
    );
    assert!(
        registry
            .run_child_group_from(&mut forker, "rp", Vec::new(), 1, false)
            .is_err()
    );
    registry.release(&mut parent, "rp").unwrap();
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a"]), 1, false)
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("must be ready before child replay"),
        "{error}"
    );
    assert_eq!(forker.next_key, 0, "nothing was forked");
}

#[test]
fn reused_child_keys_and_lying_forks_fail_the_group_after_cleanup() {
    let (mut registry, _) = setup(Fidelity::Exact);
    let reused = Plan {
        key: Some(1),
        ..Plan::default()
    };
    let mut forker = planned(&[("b", reused)]);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b", "c"]), 2, true)
        .unwrap_err();
    assert!(
        error.to_string().contains("child keys must be unique"),
        "{error}"
    );
    assert_eq!(
        *forker.released.lock().unwrap(),
        vec!["a", "b"],
        "both forked children released"
    );
    assert!(forker.ran.lock().unwrap().is_empty(), "no child ran");
    assert_eq!(count(&registry, "child_session_fork_failure_count"), 1);
    assert_eq!(count(&registry, "child_group_failure_count"), 1);
    assert_eq!(registry.store().live(), 1);

    let (mut registry, _) = setup(Fidelity::BestEffort);
    let mut forker = planned(&[(
        "a",
        Plan {
            stronger: true,
            ..Plan::default()
        },
    )]);
    forker.fidelity = Some(Fidelity::BestEffort);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a"]), 1, true)
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("claims exact but the point was captured at best_effort"),
        "{error}"
    );

    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[(
        "b",
        Plan {
            lie_digest: true,
            ..Plan::default()
        },
    )]);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 1, true)
        .unwrap_err();
    assert!(
        error.to_string().contains("equal, non-empty state digests"),
        "{error}"
    );

    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[(
        "b",
        Plan {
            fork_fails: true,
            ..Plan::default()
        },
    )]);
    assert!(
        registry
            .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 1, true)
            .is_err()
    );
    assert_eq!(*forker.released.lock().unwrap(), vec!["a"]);
    assert_eq!(
        registry.get("rp").unwrap().lifecycle,
        Lifecycle::Ready,
        "a failed fork does not quarantine"
    );
}

#[test]
fn parallel_runs_only_when_every_lease_allows_it() {
    let slow = Plan {
        sleep_ms: 60,
        ..Plan::default()
    };
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[
        ("a", slow.clone()),
        ("b", slow.clone()),
        ("c", slow.clone()),
        ("d", slow.clone()),
    ]);
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b", "c", "d"]), 4, false)
        .unwrap();
    assert!(
        forker.in_flight.1.load(Ordering::SeqCst) >= 2,
        "children overlapped"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ChildOutcome::Succeeded(r) if r.parallel))
    );
    assert_eq!(count(&registry, "child_parallel_group_count"), 1);

    let serial = Plan {
        concurrency: Some(ChildConcurrency::SerialOnly),
        ..Plan::default()
    };
    let mut forker = planned(&[("b", serial)]);
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 2, false)
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ChildOutcome::Succeeded(r) if !r.parallel))
    );
    assert_eq!(
        *forker.ran.lock().unwrap(),
        vec!["a", "b"],
        "serial, in order"
    );
    assert_eq!(
        forker.in_flight.1.load(Ordering::SeqCst),
        1,
        "never two at once"
    );
    assert_eq!(count(&registry, "child_parallel_downgrade_group_count"), 1);

    let worker = |identity| Plan {
        concurrency: Some(ChildConcurrency::ProcessIsolated),
        identity: Some(identity),
        ..Plan::default()
    };
    let mut forker = planned(&[("a", worker(7)), ("b", worker(7))]);
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 2, false)
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ChildOutcome::Succeeded(r) if !r.parallel)),
        "a shared worker identity downgrades"
    );
    assert_eq!(count(&registry, "child_parallel_downgrade_group_count"), 2);
    let mut forker = planned(&[("a", worker(7)), ("b", worker(8))]);
    registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 2, false)
        .unwrap();
    assert_eq!(
        count(&registry, "child_process_isolated_parallel_group_count"),
        1
    );

    let no_identity = Plan {
        concurrency: Some(ChildConcurrency::ProcessIsolated),
        ..Plan::default()
    };
    let mut forker = planned(&[("a", no_identity)]);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a"]), 2, false)
        .unwrap_err();
    assert!(
        error.to_string().contains("needs a worker identity"),
        "{error}"
    );
}

#[test]
fn a_denied_intent_never_runs_and_settles_beside_its_siblings() {
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[
        (
            "b",
            Plan {
                deny_intent: true,
                ..Plan::default()
            },
        ),
        (
            "c",
            Plan {
                run_fails: true,
                ..Plan::default()
            },
        ),
    ]);
    forker.risk = true;
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b", "c"]), 2, true)
        .unwrap();
    assert!(matches!(&outcomes[0], ChildOutcome::Succeeded(_)));
    let ChildOutcome::Failed(denied) = &outcomes[1] else {
        panic!("b must fail")
    };
    assert_eq!(denied.stage, ChildFailureStage::Intent);
    assert_eq!(denied.error_type, RISK_DENIED);
    assert_eq!(denied.error.error_type, ErrorType::RiskDenied);
    assert_eq!(ErrorType::RiskDenied.as_str(), RISK_DENIED);
    assert_eq!(
        denied.risk_assessment.as_ref().unwrap().policy_id,
        "size-budget"
    );
    let ChildOutcome::Failed(trapped) = &outcomes[2] else {
        panic!("c must fail")
    };
    assert_eq!(trapped.stage, ChildFailureStage::Suffix);
    assert_eq!(trapped.error_type, "trap");
    assert!(
        !forker.ran.lock().unwrap().contains(&"b".to_string()),
        "a denied intent never runs"
    );
    assert_eq!(
        forker.released.lock().unwrap().len(),
        3,
        "every child released"
    );
    assert_eq!(count(&registry, "child_intent_denied_count"), 1);
    assert_eq!(count(&registry, "child_candidate_success_count"), 1);
    assert_eq!(count(&registry, "child_candidate_failure_count"), 2);
    assert_eq!(count(&registry, "child_group_settled_count"), 1);
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Ready);

    // strict mode: the first failure fails the group, after cleanup
    let mut strict = planned(&[(
        "b",
        Plan {
            deny_intent: true,
            ..Plan::default()
        },
    )]);
    strict.risk = true;
    let error = registry
        .run_child_group_from(&mut strict, "rp", tasks(&["a", "b", "c"]), 1, false)
        .unwrap_err();
    assert!(
        error.to_string().contains("intent denied by size-budget"),
        "{error}"
    );
    assert_eq!(strict.released.lock().unwrap().len(), 3);
}

#[test]
fn a_denied_outcome_or_failed_release_quarantines_the_point() {
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[(
        "b",
        Plan {
            deny_outcome: true,
            ..Plan::default()
        },
    )]);
    forker.risk = true;
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 1, true)
        .unwrap_err();
    assert!(error.quarantined);
    assert!(
        error.to_string().contains("outcome denied by growth"),
        "{error}"
    );
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(count(&registry, "child_outcome_denied_count"), 1);
    assert_eq!(count(&registry, "replay_point_quarantine_count"), 1);

    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = planned(&[(
        "a",
        Plan {
            release_fails: true,
            ..Plan::default()
        },
    )]);
    let error = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b"]), 1, true)
        .unwrap_err();
    assert!(error.quarantined);
    assert_eq!(error.stage, ReplayStage::Release);
    assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Failed);
    assert_eq!(count(&registry, "child_session_release_failure_count"), 1);
    assert_eq!(
        forker.released.lock().unwrap().len(),
        1,
        "the sibling is still released"
    );
}

#[test]
fn intents_must_be_public_safe() {
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut leaky = task("a");
    leaky.intent.insert("file".into(), json!("/etc/passwd"));
    let error = registry
        .run_child_group_from(&mut planned(&[]), "rp", vec![leaky], 1, true)
        .unwrap_err();
    assert!(error.to_string().contains("not public-safe"), "{error}");
}

#[test]
fn a_group_whose_children_cannot_fork_counts_as_a_serial_fallback() {
    // Reference `run_child_group_from` without isolated children: one
    // group attempt, one serial fallback, then a success or a failure.
    let metrics = ReplayMetricLedger::new();
    let mut group = SerialChildGroup::start(&metrics);
    assert_eq!(metrics.count("child_group_attempt_count"), 1);
    assert_eq!(metrics.count("child_serial_fallback_group_count"), 1);
    for succeeded in [true, false, true] {
        group.observe(succeeded);
    }
    group.finish(&metrics);
    assert_eq!(metrics.count("child_group_failure_count"), 1);
    assert_eq!(metrics.count("child_group_success_count"), 0);

    let mut group = SerialChildGroup::start(&metrics);
    group.observe(true);
    group.finish(&metrics);
    assert_eq!(metrics.count("child_group_attempt_count"), 2);
    assert_eq!(metrics.count("child_serial_fallback_group_count"), 2);
    assert_eq!(metrics.count("child_group_success_count"), 1);
    assert_eq!(metrics.count("child_group_failure_count"), 1);
    // No child was forked, screened or settled.
    for field in [
        "child_session_fork_attempt_count",
        "child_group_settled_count",
        "child_candidate_success_count",
    ] {
        assert_eq!(metrics.count(field), 0, "{field}");
    }
}

#[test]
fn a_replay_intent_is_counted_as_a_childs_and_a_denial_refuses_it() {
    use super::judge_replay_intent;
    let metrics = ReplayMetricLedger::new();
    judge_replay_intent(&metrics, &RiskAssessment::allow("budget")).unwrap();
    let denied =
        judge_replay_intent(&metrics, &RiskAssessment::deny("budget", "too large")).unwrap_err();
    assert_eq!(denied.stage, ReplayStage::Intent);
    assert_eq!(denied.cause.error_type(), RISK_DENIED);
    assert_eq!(
        denied.cause.to_string(),
        "replay intent denied by budget: too large"
    );
    assert_eq!(metrics.count("child_intent_assessment_count"), 2);
    assert_eq!(metrics.count("child_intent_allowed_count"), 1);
    assert_eq!(metrics.count("child_intent_denied_count"), 1);
}

#[test]
fn run_parallel_runs_every_child_once_and_returns_outcomes_in_order() {
    use std::collections::HashSet;
    use std::sync::Mutex;

    let threads = Mutex::new(HashSet::new());
    let mut children: Vec<u32> = (0..64).collect();
    let outcomes = run_parallel(&mut children, 2, &|child: &mut u32| {
        threads.lock().unwrap().insert(std::thread::current().id());
        *child += 100;
        *child * 2
    });
    let expected: Vec<u32> = (0..64).map(|k| (k + 100) * 2).collect();
    assert_eq!(outcomes, expected, "one outcome per child, in order");
    assert!(
        children
            .iter()
            .zip(100..)
            .all(|(child, want)| *child == want),
        "every child ran exactly once: {children:?}"
    );
    let used = threads.into_inner().unwrap().len();
    assert!((1..=2).contains(&used), "at most 2 workers, got {used}");

    // One worker: the calling thread runs every child itself.
    let caller = std::thread::current().id();
    let seen = Mutex::new(HashSet::new());
    let mut one = vec![0u8; 8];
    let outcomes = run_parallel(&mut one, 1, &|child: &mut u8| {
        seen.lock().unwrap().insert(std::thread::current().id());
        *child = 1;
    });
    assert_eq!(outcomes.len(), 8);
    assert_eq!(one, vec![1u8; 8]);
    assert_eq!(seen.into_inner().unwrap(), HashSet::from([caller]));
}

#[test]
fn a_concurrent_forker_forks_on_the_workers_and_counts_as_a_serial_fork_does() {
    let slow = Plan {
        sleep_ms: 5,
        ..Plan::default()
    };
    let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let plans: Vec<(&str, Plan)> = ids.iter().map(|id| (*id, slow.clone())).collect();
    let mut totals = Vec::new();
    for workers in [1, 2] {
        let (mut registry, _) = setup(Fidelity::Exact);
        let mut forker = AtOnce(Mutex::new(planned(&plans)));
        forker.forker().risk = true;
        let outcomes = registry
            .run_child_group_from(&mut forker, "rp", tasks(&ids), workers, false)
            .unwrap();
        let ran: Vec<&str> = outcomes.iter().map(ChildOutcome::child_id).collect();
        assert_eq!(ran, ids, "one outcome per task, in the tasks' order");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, ChildOutcome::Succeeded(r) if r.parallel == (workers > 1)))
        );
        let mut released = forker.forker().released.lock().unwrap().clone();
        released.sort();
        assert_eq!(released, ids, "every child released once");
        assert_eq!(registry.store().live(), 1, "child agent states released");
        let threads = forker.forker().threads.lock().unwrap().clone();
        let forked_on: std::collections::HashSet<ThreadId> =
            threads.iter().map(|(_, forked, _)| *forked).collect();
        if workers == 1 {
            assert_eq!(
                forked_on,
                std::collections::HashSet::from([std::thread::current().id()]),
                "one worker forks on the lane"
            );
        } else {
            assert!(forked_on.len() <= 2, "at most two workers forked");
        }
        let mut snapshot = registry.metrics().snapshot();
        snapshot.retain(|key, _| !key.ends_with("_minutes") && !key.contains("parallel"));
        totals.push(snapshot);
    }
    assert_eq!(
        totals[0], totals[1],
        "forking at once counts what forking in turn counts"
    );
}

#[test]
fn a_failed_concurrent_fork_fails_the_group_before_any_child_runs() {
    let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let broken = Plan {
        fork_fails: true,
        ..Plan::default()
    };
    let liar = Plan {
        lie_digest: true,
        ..Plan::default()
    };
    let mut errors = Vec::new();
    for concurrent in [false, true] {
        let (mut registry, _) = setup(Fidelity::Exact);
        let plans = [("c", liar.clone()), ("f", broken.clone())];
        let mut at_once = AtOnce(Mutex::new(planned(&plans)));
        let mut serial = planned(&plans);
        let error = if concurrent {
            registry.run_child_group_from(&mut at_once, "rp", tasks(&ids), 2, true)
        } else {
            registry.run_child_group_from(&mut serial, "rp", tasks(&ids), 2, true)
        }
        .unwrap_err();
        let forker = if concurrent {
            at_once.0.into_inner().unwrap()
        } else {
            serial
        };
        assert!(forker.ran.lock().unwrap().is_empty(), "no child ran");
        assert_eq!(
            forker.released.lock().unwrap().len() as u64,
            count(&registry, "child_session_release_success_count"),
        );
        assert!(
            count(&registry, "child_session_fork_attempt_count") >= 3,
            "forked up to the earliest failure at least"
        );
        assert_eq!(registry.store().live(), 1, "child agent states released");
        assert_eq!(count(&registry, "child_group_failure_count"), 1);
        assert_eq!(count(&registry, "child_session_fork_failure_count"), 1);
        assert_eq!(registry.get("rp").unwrap().lifecycle, Lifecycle::Ready);
        errors.push(error.to_string());
    }
    assert_eq!(
        errors[0], errors[1],
        "the earliest failure in the tasks' order is the group's error"
    );
}

#[test]
fn a_serial_only_first_lease_keeps_the_forks_on_the_lane() {
    let serial = Plan {
        concurrency: Some(ChildConcurrency::SerialOnly),
        sleep_ms: 2,
        ..Plan::default()
    };
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = AtOnce(Mutex::new(planned(&[
        ("a", serial.clone()),
        ("b", serial.clone()),
        ("c", serial),
    ])));
    let outcomes = registry
        .run_child_group_from(&mut forker, "rp", tasks(&["a", "b", "c"]), 2, false)
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ChildOutcome::Succeeded(r) if !r.parallel))
    );
    let lane = std::thread::current().id();
    let threads = forker.forker().threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 3);
    assert!(
        threads
            .iter()
            .all(|(_, forked, ran)| *forked == lane && *ran == lane),
        "forked and run in turn on the lane: {threads:?}"
    );
    assert_eq!(*forker.forker().ran.lock().unwrap(), vec!["a", "b", "c"]);
    assert_eq!(count(&registry, "child_parallel_downgrade_group_count"), 1);
}

#[test]
fn each_worker_runs_the_children_at_home_on_it_first() {
    let me = std::thread::current().id();
    let elsewhere = std::thread::spawn(|| std::thread::current().id())
        .join()
        .unwrap();
    let homes = [Some(elsewhere), Some(me), None, Some(me), Some(elsewhere)];
    let order = Mutex::new(Vec::new());
    let mut children: Vec<usize> = (0..homes.len()).collect();
    let outcomes = run_parallel_at_home(&mut children, &homes, 1, &|child: &mut usize| {
        order.lock().unwrap().push(*child);
        *child * 10
    });
    assert_eq!(outcomes, vec![0, 10, 20, 30, 40], "outcomes in order");
    assert_eq!(
        order.into_inner().unwrap(),
        vec![1, 3, 0, 4, 2],
        "its own first, then the rest, each home's in order"
    );
}

#[test]
fn each_outcome_is_finished_on_the_thread_that_ran_its_child() {
    let slow = Plan {
        sleep_ms: 5,
        ..Plan::default()
    };
    let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut plans: Vec<(&str, Plan)> = ids.iter().map(|id| (*id, slow.clone())).collect();
    plans[5].1.run_fails = true;
    let (mut registry, _) = setup(Fidelity::Exact);
    let mut forker = AtOnce(Mutex::new(planned(&plans)));
    let finished = Mutex::new(Vec::new());
    let finish = |outcome: ChildOutcome| {
        let on = std::thread::current().id();
        let failed = matches!(outcome, ChildOutcome::Failed(_));
        finished
            .lock()
            .unwrap()
            .push((outcome.child_id().to_string(), on));
        (outcome.child_id().to_string(), failed)
    };
    let results = registry
        .run_child_group_finishing(&mut forker, "rp", tasks(&ids), 2, true, &finish)
        .unwrap();
    let expected: Vec<(String, bool)> = ids.iter().map(|id| (id.to_string(), *id == "f")).collect();
    assert_eq!(results, expected, "one finished result per task, in order");
    let ran_on: BTreeMap<String, ThreadId> = forker
        .forker()
        .threads
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _, ran)| (id.clone(), *ran))
        .collect();
    let finished = finished.into_inner().unwrap();
    assert_eq!(finished.len(), ids.len(), "each outcome finished once");
    for (id, on) in &finished {
        assert_eq!(Some(on), ran_on.get(id), "{id} finished where it ran");
    }
    assert_eq!(count(&registry, "child_candidate_success_count"), 7);
    assert_eq!(count(&registry, "child_candidate_failure_count"), 1);
    assert_eq!(count(&registry, "child_group_settled_count"), 1);
}
