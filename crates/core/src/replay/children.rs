//! Isolated child groups: every task of a group runs in a child forked from
//! a replay point into its own session (for components: a fresh instance,
//! its own store and linear memory), checked against the point, screened by
//! the adapter's risk policy, run serially or in parallel, and always
//! cleaned up. Mirrors `run_child_group_from` in the reference's
//! `child_replay_runtime.py`; without isolated children the caller falls
//! back to [`ReplayPointRegistry::run_from`] per task, as the reference does,
//! and counts that group with a [`SerialChildGroup`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::super::agent_state::AgentStateStore;
use super::super::counterfactual::{check_validation_outcomes, validation_outcomes_record};
use super::super::fidelity::Fidelity;
use super::super::metrics::{ReplayCount, ReplayMetricLedger};
use super::super::point::{EquivalenceReport, ReplayPoint, ReplayRestoreResult, RestoreReceipt};
use super::{ReplayCause, ReplayError, ReplayPointRegistry, ReplayStage};
use crate::episode::adapter::{AdapterError, Item, Record};
use crate::episode::records::quarantine_host_owned;
use crate::trace::{validate_public_object, validate_public_payload};

#[path = "child_forks.rs"]
mod forks;
pub use forks::ConcurrentForker;
use forks::{ForkOrigin, fork_concurrently, fork_serially};

pub use sandloop_contract::{
    ChildConcurrency, CounterfactualRequest, Disposition, ForkRequest, RiskAssessment,
    ValidationOutcome,
};

/// The host's view of a [`RiskAssessment`] (the type itself is the
/// contract's): its record shape and the reference's shape rules, whose
/// public-safety half is the trace's payload rule that only the host knows.
pub trait RiskAssessmentRules {
    /// The reference's `to_record` shape: `disposition`, `policy_id`,
    /// `sanitized_reason`.
    fn to_record(&self) -> Value;
    /// The reference's shape rules: a non-blank `policy_id` and a
    /// public-safe reason. Errors say which is broken.
    fn check(&self) -> Result<(), String>;
}

impl RiskAssessmentRules for RiskAssessment {
    fn to_record(&self) -> Value {
        json!({
            "disposition": self.disposition.as_str(),
            "policy_id": self.policy_id,
            "sanitized_reason": self.sanitized_reason,
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.policy_id.trim().is_empty() {
            return Err("policy_id must be non-empty".into());
        }
        if let Some(reason) = &self.sanitized_reason {
            validate_public_payload(&json!({ "sanitized_reason": reason }))
                .map_err(|error| error.to_string())?;
        }
        Ok(())
    }
}

/// A forked child (reference `ReplayChildLease`): its session, restore
/// receipt and declared concurrency.
pub struct ChildLease<S> {
    /// The child's session (for components: its own instance).
    pub session: S,
    /// Its restore receipt.
    pub receipt: RestoreReceipt,
    /// What it declares about parallel execution.
    pub concurrency: ChildConcurrency,
    /// Identity of the worker it runs in; required for `ProcessIsolated`,
    /// and siblings may not share one to run in parallel.
    pub worker_identity: Option<u64>,
    /// The adapter's key for the child; unique within a group.
    pub child_key: u64,
}

/// One forked child, seen by the group runner.
pub trait ChildSession: Send {
    /// Compare the child's restored state with the captured point.
    fn validate_equivalence(
        &mut self,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError>;
    /// Assess the task's public intent before it runs.
    fn assess_intent(
        &mut self,
        intent: &Map<String, Value>,
    ) -> Result<RiskAssessment, AdapterError>;
    /// Run the task.
    fn run(&mut self, task: &Item) -> Result<Record, AdapterError>;
    /// Run the task as counterfactual candidate `request` (WIT
    /// `counterfactual.run-counterfactual`): apply its change set, run the
    /// suffix, report one outcome per validation target. The default
    /// refuses: a session that cannot run candidates says so.
    fn run_counterfactual(
        &mut self,
        task: &Item,
        request: &CounterfactualRequest,
    ) -> Result<Vec<ValidationOutcome>, AdapterError> {
        let _ = (task, request);
        Err(AdapterError::new(
            crate::episode::adapter::ErrorType::MissingExport,
            "this child cannot run counterfactual candidates",
        ))
    }
    /// Assess what the task produced.
    fn assess_outcome(
        &mut self,
        intent: &Map<String, Value>,
        outcome: &Record,
    ) -> Result<RiskAssessment, AdapterError>;
    /// Release the child.
    fn release(&mut self) -> Result<(), AdapterError>;
    /// Sequence after the last trace event the child appended, if it keeps
    /// a trace.
    fn trace_end(&self) -> Option<u64> {
        None
    }
}

/// Forks children of one replay point (reference
/// `IsolatedReplayChildAdapter.fork_replay_child`).
pub trait ChildForker {
    /// A forked child.
    type Session: ChildSession;
    /// Whether the adapter assesses intents and outcomes (`child-risk`).
    fn has_risk_policy(&self) -> bool;
    /// Fork one child.
    fn fork(&mut self, request: &ForkRequest) -> Result<ChildLease<Self::Session>, AdapterError>;
    /// This forker as one that may fork from several threads at once
    /// (each child its own instance), or `None` (the default): its children
    /// are then forked one after another on the group's lane. A parallel
    /// group whose forker is concurrent forks and validates its children on
    /// its workers, and runs each on the worker that forked it.
    fn concurrent(&self) -> Option<&dyn ConcurrentForker<Self::Session>> {
        None
    }
}

/// One task of a child group (reference `ReplayChildTask`).
#[derive(Clone, Debug)]
pub struct ChildTask {
    /// Unique within the group.
    pub child_id: String,
    /// The branch it runs on.
    pub target_branch_id: String,
    /// The fidelity its result needs to be promotion eligible.
    pub minimum_fidelity: Fidelity,
    /// What the child runs.
    pub item: Item,
    /// Its public-safe intent, shown to the risk policy.
    pub intent: Map<String, Value>,
    /// When set, the child runs `item` as this counterfactual candidate
    /// ([`ChildSession::run_counterfactual`]) instead of as a plain task;
    /// its outcome is then the checked validation outcomes.
    pub counterfactual: Option<CounterfactualRequest>,
}

/// Where a settled child failed (reference `ReplayChildFailureStage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildFailureStage {
    /// Its intent was denied (it never ran).
    Intent,
    /// Its task failed.
    Suffix,
}

impl ChildFailureStage {
    /// `intent` or `suffix`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildFailureStage::Intent => "intent",
            ChildFailureStage::Suffix => "suffix",
        }
    }
}

/// A child that ran to completion (reference `ReplayChildExecutionResult`).
#[derive(Clone, Debug)]
pub struct ChildResult {
    /// The child.
    pub child_id: String,
    /// Its restore (fork) and timings.
    pub restore: ReplayRestoreResult,
    /// What its task returned; for a counterfactual candidate, its
    /// validation outcomes as `{"outcomes": [...]}` (what the risk policy
    /// judged).
    pub outcome: Record,
    /// A counterfactual candidate's validation outcomes, checked.
    pub validations: Option<Vec<ValidationOutcome>>,
    /// True: it ran in its own session.
    pub isolated: bool,
    /// Whether the group ran in parallel.
    pub parallel: bool,
    /// The risk policy's verdict on its intent.
    pub intent_assessment: Option<RiskAssessment>,
    /// The risk policy's verdict on its outcome.
    pub outcome_assessment: Option<RiskAssessment>,
    /// Sequence after its last trace event, if it keeps a trace.
    pub trace_end: Option<u64>,
}

/// A child that failed safely in a settled group (reference
/// `ReplayChildExecutionFailure`).
#[derive(Clone, Debug)]
pub struct ChildFailure {
    /// The child.
    pub child_id: String,
    /// Its restore (fork) and timings.
    pub restore: ReplayRestoreResult,
    /// Where it failed.
    pub stage: ChildFailureStage,
    /// The error's class (`adapter_error`, `trap`, `replay_risk_denied`, ...).
    pub error_type: String,
    /// The error itself.
    pub error: AdapterError,
    /// True: it ran in its own session.
    pub isolated: bool,
    /// Whether the group ran in parallel.
    pub parallel: bool,
    /// The denying assessment, for an intent denial.
    pub risk_assessment: Option<RiskAssessment>,
    /// Sequence after its last trace event, if it keeps a trace.
    pub trace_end: Option<u64>,
}

/// A settled group's per-child outcome.
#[derive(Clone, Debug)]
pub enum ChildOutcome {
    /// It ran.
    Succeeded(ChildResult),
    /// It failed safely; its siblings are unaffected.
    Failed(ChildFailure),
}

impl ChildOutcome {
    /// The child's id.
    pub fn child_id(&self) -> &str {
        match self {
            ChildOutcome::Succeeded(result) => &result.child_id,
            ChildOutcome::Failed(failure) => &failure.child_id,
        }
    }
}

/// Error type name of a risk denial (`ErrorType::RiskDenied`'s name).
pub const RISK_DENIED: &str = "replay_risk_denied";

/// Why one child's execution stopped.
enum ExecutionError {
    Denied(&'static str, RiskAssessment),
    Adapter(AdapterError),
    Contract(String),
}

impl ExecutionError {
    /// A settled child's failure: its stage, error type, the adapter error
    /// its record carries, and the denying assessment, if any.
    fn settled(
        self,
    ) -> (
        ChildFailureStage,
        String,
        AdapterError,
        Option<RiskAssessment>,
    ) {
        match self {
            ExecutionError::Denied(stage, assessment) => (
                if stage == "intent" {
                    ChildFailureStage::Intent
                } else {
                    ChildFailureStage::Suffix
                },
                RISK_DENIED.to_string(),
                AdapterError::new(
                    crate::episode::adapter::ErrorType::RiskDenied,
                    format!("replay child {stage} denied by {}", assessment.policy_id),
                ),
                Some(assessment),
            ),
            ExecutionError::Adapter(error) => (
                ChildFailureStage::Suffix,
                error.error_type.as_str().to_string(),
                error,
                None,
            ),
            ExecutionError::Contract(message) => (
                ChildFailureStage::Suffix,
                "replay_contract".to_string(),
                AdapterError::new(crate::episode::adapter::ErrorType::ReplayContract, message),
                None,
            ),
        }
    }

    fn into_replay_error(self) -> ReplayError {
        match self {
            ExecutionError::Denied(stage, assessment) => ReplayError::new(
                ReplayStage::Suffix,
                ReplayCause::RiskDenied(format!(
                    "replay child {stage} denied by {}",
                    assessment.policy_id
                )),
            ),
            ExecutionError::Adapter(error) => ReplayError::adapter(ReplayStage::Suffix, error),
            ExecutionError::Contract(message) => {
                ReplayError::contract(ReplayStage::Suffix, message)
            }
        }
    }
}

/// A forked child of the group, from its fork to its release.
struct Prepared<S, K> {
    task: ChildTask,
    lease: ChildLease<S>,
    agent_key: Option<K>,
    restore: Option<ReplayRestoreResult>,
    cleaned: Option<Result<(), ReplayError>>,
    /// The worker that forked it, when the forks ran on the group's
    /// workers: it runs there too, so its instance is made, used and
    /// dropped on one thread.
    home: Option<ThreadId>,
}

impl<S, K> Prepared<S, K> {
    fn new(task: ChildTask, lease: ChildLease<S>, home: Option<ThreadId>) -> Self {
        Prepared {
            task,
            lease,
            agent_key: None,
            restore: None,
            cleaned: None,
            home,
        }
    }
}

fn minutes(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() / 60.0
}

/// Release a child and its agent state once; a failure is remembered.
fn cleanup<S: ChildSession, K>(
    prepared: &mut Prepared<S, K>,
    store: &Mutex<&mut dyn AgentStateRelease<K>>,
    metrics: &ReplayMetricLedger,
    cleanup_failed: &AtomicBool,
) -> Result<(), ReplayError> {
    if let Some(done) = &prepared.cleaned {
        return done.clone();
    }
    metrics.increment(ReplayCount::ChildSessionReleaseAttempt);
    let mut result = prepared
        .lease
        .session
        .release()
        .map_err(|error| ReplayError::adapter(ReplayStage::Release, error));
    if let Some(key) = &prepared.agent_key {
        let released = store.lock().unwrap_or_else(|p| p.into_inner()).release(key);
        if let (Ok(()), Err(message)) = (&result, released) {
            result = Err(ReplayError::new(
                ReplayStage::Release,
                ReplayCause::AgentState(message),
            ));
        }
    }
    if result.is_ok() {
        metrics.increment(ReplayCount::ChildSessionReleaseSuccess);
    } else {
        cleanup_failed.store(true, Ordering::SeqCst);
        metrics.increment(ReplayCount::ChildSessionReleaseFailure);
    }
    prepared.cleaned = Some(result.clone());
    result
}

/// The agent-state operations children need, object-safe so the group can
/// share one store across worker threads.
trait AgentStateRelease<K>: Send {
    fn release(&mut self, key: &K) -> Result<(), String>;
    fn restore(&mut self, key: &K) -> Result<(), String>;
}

impl<S: AgentStateStore + Send> AgentStateRelease<S::Key> for S {
    fn release(&mut self, key: &S::Key) -> Result<(), String> {
        self.release_agent_state(key)
    }
    fn restore(&mut self, key: &S::Key) -> Result<(), String> {
        self.restore_agent_state(key)
    }
}

impl<B, S> ReplayPointRegistry<B, S>
where
    S: AgentStateStore + Send,
    S::Key: Send,
{
    /// Run `tasks` as isolated children of `replay_point_id` (reference
    /// `run_child_group_from`, and `run_child_group_settled_from` when
    /// `settle` is true).
    ///
    /// Every child is forked and validated first (a fork, receipt or
    /// equivalence failure fails the whole group, after cleaning up every
    /// child): in order on this thread, or, with `workers > 1` and a
    /// forker that is [`concurrent`](ChildForker::concurrent), on the
    /// workers at once after the first child (the group's error is then
    /// the earliest failure in the tasks' order, and siblings forked
    /// meanwhile are counted and released too). Then each child's intent
    /// is assessed, its task run, its outcome assessed, and it is always
    /// released. The group runs in
    /// parallel on up to `workers` threads only when `workers > 1`, there is
    /// more than one child, every lease allows it and no two
    /// process-isolated leases share a worker identity; otherwise serially
    /// (a requested parallel group that cannot be is counted as a
    /// downgrade). A denied outcome or a failed cleanup quarantines the
    /// point and fails the group. In settled mode any other child failure
    /// (an intent denial, a failed task) is returned beside its siblings'
    /// results; in strict mode the first one fails the group, after every
    /// child was cleaned up.
    pub fn run_child_group_from<F>(
        &mut self,
        forker: &mut F,
        replay_point_id: &str,
        tasks: Vec<ChildTask>,
        workers: usize,
        settle: bool,
    ) -> Result<Vec<ChildOutcome>, ReplayError>
    where
        F: ChildForker,
    {
        self.run_child_group_finishing(forker, replay_point_id, tasks, workers, settle, &|o| o)
    }

    /// [`run_child_group_from`](Self::run_child_group_from), with each
    /// child's outcome turned into what the caller keeps by `finish` on the
    /// thread that ran the child, right after its release: a parallel
    /// group's records are then built where their children ran, in the
    /// same phase, instead of in one more hand-off to the workers. `finish`
    /// is called once per child whose run came to an outcome, also when the
    /// group then fails (its results are then dropped with the group's
    /// error).
    pub fn run_child_group_finishing<F, T>(
        &mut self,
        forker: &mut F,
        replay_point_id: &str,
        tasks: Vec<ChildTask>,
        workers: usize,
        settle: bool,
        finish: &(dyn Fn(ChildOutcome) -> T + Sync),
    ) -> Result<Vec<T>, ReplayError>
    where
        F: ChildForker,
        T: Send,
    {
        if tasks.is_empty() {
            return Err(ReplayError::unavailable(
                "a child group needs at least one task",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for task in &tasks {
            if task.child_id.trim().is_empty() {
                return Err(ReplayError::unavailable("child_id must be non-empty"));
            }
            if !seen.insert(task.child_id.as_str()) {
                return Err(ReplayError::unavailable(format!(
                    "child ids must be unique within a group: {:?} repeats",
                    task.child_id
                )));
            }
            if task.minimum_fidelity == Fidelity::NonReplayable {
                return Err(ReplayError::unavailable(
                    "isolated replay children need a replayable minimum fidelity",
                ));
            }
            if let Err(error) = validate_public_object(&task.intent) {
                return Err(ReplayError::contract(
                    ReplayStage::Lookup,
                    format!(
                        "the intent of child {:?} is not public-safe: {error}",
                        task.child_id
                    ),
                ));
            }
        }
        let metrics = Arc::clone(&self.metrics);
        metrics.increment(ReplayCount::ChildGroupAttempt);
        let result =
            self.child_group_inner(forker, replay_point_id, tasks, workers, settle, finish);
        if result.is_err() {
            metrics.increment(ReplayCount::ChildGroupFailure);
        }
        result
    }

    fn child_group_inner<F: ChildForker, T: Send>(
        &mut self,
        forker: &mut F,
        replay_point_id: &str,
        tasks: Vec<ChildTask>,
        workers: usize,
        settle: bool,
        finish: &(dyn Fn(ChildOutcome) -> T + Sync),
    ) -> Result<Vec<T>, ReplayError> {
        let metrics = Arc::clone(&self.metrics);
        let slot = self.slot(replay_point_id)?;
        let Self { entries, store, .. } = self;
        let entry = &mut entries[slot];
        // Checked again right before forking, as the reference does under
        // the point's lock (here `&mut self` is that lock).
        super::require_ready(&entry.point, "child replay")?;
        if entry.binding.is_none() {
            return Err(ReplayError::unavailable(
                "the replayable replay point has no adapter binding",
            ));
        }
        let point = entry.point.clone();
        let point_key = entry.agent_state_key.clone();
        let has_risk = forker.has_risk_policy();
        let cleanup_failed = AtomicBool::new(false);
        let unsafe_outcome = AtomicBool::new(false);

        // Fork and validate every child first.
        let origin = ForkOrigin {
            point: &point,
            metrics: &metrics,
        };
        let concurrent = (workers > 1 && tasks.len() > 1)
            .then(|| forker.concurrent())
            .flatten();
        let (mut prepared, fork_error) = match concurrent {
            Some(concurrent) => {
                fork_concurrently(concurrent, store, &point_key, &origin, tasks, workers)
            }
            None => fork_serially(forker, store, &point_key, &origin, tasks),
        };

        let store_dyn: &mut dyn AgentStateRelease<S::Key> = store;
        let shared_store = Mutex::new(store_dyn);
        let fail_group = |prepared: &mut Vec<Prepared<F::Session, S::Key>>,
                          error: ReplayError,
                          entry_point: &mut ReplayPoint| {
            let mut cleanup_error = None;
            for child in prepared.iter_mut() {
                if let Err(error) = cleanup(child, &shared_store, &metrics, &cleanup_failed) {
                    cleanup_error.get_or_insert(error);
                }
            }
            let mut error = error;
            if cleanup_failed.load(Ordering::SeqCst) || unsafe_outcome.load(Ordering::SeqCst) {
                super::quarantine(entry_point, &metrics);
                error.quarantined = true;
            }
            if error.also.is_none() {
                error.also = cleanup_error.filter(|c| *c != error).map(Box::new);
            }
            error
        };
        if let Some(error) = fork_error {
            metrics.increment(ReplayCount::ChildSessionForkFailure);
            return Err(fail_group(&mut prepared, error, &mut entry.point));
        }

        let parallel = runs_in_parallel(&prepared, workers, &metrics);

        let run = ChildRun {
            has_risk,
            settle,
            parallel,
            metrics: &metrics,
            store: &shared_store,
            cleanup_failed: &cleanup_failed,
            unsafe_outcome: &unsafe_outcome,
        };
        // Each child's outcome is finished where it ran; whether it failed
        // is kept beside it for the group's counts.
        let execute = |child: &mut Prepared<F::Session, S::Key>| {
            run.run(child).map(|outcome| {
                let failed = matches!(outcome, ChildOutcome::Failed(_));
                (failed, finish(outcome))
            })
        };
        let outcomes: Vec<Result<(bool, T), ReplayError>> = if parallel {
            let homes: Vec<Option<ThreadId>> = prepared.iter().map(|child| child.home).collect();
            run_parallel_at_home(&mut prepared, &homes, workers, &execute)
        } else {
            prepared.iter_mut().map(&execute).collect()
        };
        let mut results = Vec::with_capacity(outcomes.len());
        let mut failures = 0;
        let mut first_error = None;
        for outcome in outcomes {
            match outcome {
                Ok((failed, result)) => {
                    failures += u64::from(failed);
                    results.push(result);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let Some(error) = first_error {
            return Err(fail_group(&mut prepared, error, &mut entry.point));
        }
        count_group_outcome(results.len() as u64, failures, settle, &metrics);
        Ok(results)
    }
}

/// What every child of a group runs with: whether the adapter screens
/// children (`has_risk`), whether failures settle into outcomes, whether
/// the group runs in parallel, and the group's shared bookkeeping.
struct ChildRun<'a, 'b, K> {
    has_risk: bool,
    settle: bool,
    parallel: bool,
    metrics: &'a ReplayMetricLedger,
    store: &'a Mutex<&'b mut dyn AgentStateRelease<K>>,
    cleanup_failed: &'a AtomicBool,
    unsafe_outcome: &'a AtomicBool,
}

impl<K> ChildRun<'_, '_, K> {
    /// Run one forked child: screen its intent, restore its agent state, run
    /// its item, screen the outcome, then release it. A failure is the
    /// group's error unless the group settles (and no outcome was unsafe),
    /// when it becomes the child's failed outcome.
    fn run<S: ChildSession>(
        &self,
        child: &mut Prepared<S, K>,
    ) -> Result<ChildOutcome, ReplayError> {
        let started = Instant::now();
        let intent = &child.task.intent;
        let mut intent_assessment = None;
        let mut outcome_assessment = None;
        let mut validations = None;
        let session = &mut child.lease.session;
        let ran: Result<Record, ExecutionError> = (|| {
            if self.has_risk {
                self.metrics.increment(ReplayCount::ChildIntentAssessment);
                let assessment = session
                    .assess_intent(intent)
                    .map_err(ExecutionError::Adapter)?;
                assessment.check().map_err(ExecutionError::Contract)?;
                intent_assessment = Some(assessment.clone());
                if assessment.disposition == Disposition::Deny {
                    self.metrics.increment(ReplayCount::ChildIntentDenied);
                    return Err(ExecutionError::Denied("intent", assessment));
                }
                self.metrics.increment(ReplayCount::ChildIntentAllowed);
            }
            if let Some(key) = &child.agent_key {
                self.store
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .restore(key)
                    .map_err(ExecutionError::Contract)?;
            }
            let (outcome, checked) = match &child.task.counterfactual {
                None => {
                    let mut record = session
                        .run(&child.task.item)
                        .map_err(ExecutionError::Adapter)?;
                    quarantine_host_owned(&mut record);
                    (record, None)
                }
                Some(request) => {
                    let reported = session
                        .run_counterfactual(&child.task.item, request)
                        .map_err(ExecutionError::Adapter)?;
                    let checked =
                        check_validation_outcomes(reported).map_err(ExecutionError::Contract)?;
                    (validation_outcomes_record(&checked), Some(checked))
                }
            };
            validations = checked;
            if self.has_risk {
                self.metrics.increment(ReplayCount::ChildOutcomeAssessment);
                let assessment = session
                    .assess_outcome(intent, &outcome)
                    .map_err(ExecutionError::Adapter)?;
                assessment.check().map_err(ExecutionError::Contract)?;
                outcome_assessment = Some(assessment.clone());
                if assessment.disposition == Disposition::Deny {
                    self.metrics.increment(ReplayCount::ChildOutcomeDenied);
                    self.unsafe_outcome.store(true, Ordering::SeqCst);
                    return Err(ExecutionError::Denied("outcome", assessment));
                }
                self.metrics.increment(ReplayCount::ChildOutcomeAllowed);
            }
            Ok(outcome)
        })();
        let suffix_minutes = minutes(started);
        let trace_end = child.lease.session.trace_end();
        let cleaned = cleanup(child, self.store, self.metrics, self.cleanup_failed);
        let mut restore = child
            .restore
            .take()
            .expect("every prepared child was validated, and runs once");
        restore.suffix_minutes = suffix_minutes;
        restore.replay_wall_minutes =
            restore.restore_minutes + restore.equivalence_minutes + suffix_minutes;
        match ran {
            Ok(outcome) => {
                cleaned?;
                Ok(ChildOutcome::Succeeded(ChildResult {
                    child_id: child.task.child_id.clone(),
                    restore,
                    outcome,
                    validations,
                    isolated: true,
                    parallel: self.parallel,
                    intent_assessment,
                    outcome_assessment,
                    trace_end,
                }))
            }
            Err(error) => {
                if let Err(cleanup_error) = cleaned {
                    return Err(error.into_replay_error().also(Some(cleanup_error)));
                }
                if !self.settle || self.unsafe_outcome.load(Ordering::SeqCst) {
                    return Err(error.into_replay_error());
                }
                let (stage, error_type, adapter_error, assessment) = error.settled();
                Ok(ChildOutcome::Failed(ChildFailure {
                    child_id: child.task.child_id.clone(),
                    restore,
                    stage,
                    error_type,
                    error: adapter_error,
                    isolated: true,
                    parallel: self.parallel,
                    risk_assessment: assessment,
                    trace_end,
                }))
            }
        }
    }
}

/// Whether a group's children run in parallel: more than one child and
/// worker asked for it, no child is serial-only, and process-isolated
/// children have distinct worker identities. Counts the decision.
fn runs_in_parallel<S, K>(
    prepared: &[Prepared<S, K>],
    workers: usize,
    metrics: &ReplayMetricLedger,
) -> bool {
    let requested = workers > 1 && prepared.len() > 1;
    let identities: Vec<u64> = prepared
        .iter()
        .filter(|p| p.lease.concurrency == ChildConcurrency::ProcessIsolated)
        .filter_map(|p| p.lease.worker_identity)
        .collect();
    let distinct = identities
        .iter()
        .enumerate()
        .all(|(index, id)| !identities[..index].contains(id));
    let parallel = requested
        && distinct
        && prepared
            .iter()
            .all(|p| p.lease.concurrency != ChildConcurrency::SerialOnly);
    if parallel {
        metrics.increment(ReplayCount::ChildParallelGroup);
        if !identities.is_empty() {
            metrics.increment(ReplayCount::ChildProcessIsolatedParallelGroup);
        }
    } else if requested {
        metrics.increment(ReplayCount::ChildParallelDowngradeGroup);
    }
    parallel
}

/// Count a finished group of `children`, `failures` of them failed: each
/// settled child's success or failure, and the group as settled (some
/// failed) or succeeded.
fn count_group_outcome(children: u64, failures: u64, settle: bool, metrics: &ReplayMetricLedger) {
    if !settle {
        metrics.increment(ReplayCount::ChildGroupSuccess);
        return;
    }
    metrics.add(ReplayCount::ChildCandidateSuccess, children - failures);
    metrics.add(ReplayCount::ChildCandidateFailure, failures);
    metrics.increment(if failures > 0 {
        ReplayCount::ChildGroupSettled
    } else {
        ReplayCount::ChildGroupSuccess
    });
}

/// A child group run by the serial fallback (reference
/// `run_child_group_from` when the adapter has no isolated child mode): its
/// children cannot be forked — the adapter cannot export the point,
/// `--child-workers 0`, a refused snapshot — so each task's suffix runs from
/// the point in the parent, one after another. Counted as the reference
/// counts it: [`start`](Self::start) is one `child_group_attempt_count` and
/// one `child_serial_fallback_group_count`; [`finish`](Self::finish) is one
/// `child_group_success_count` when every suffix [`observe`](Self::observe)d
/// succeeded, else one `child_group_failure_count`.
#[derive(Debug)]
pub struct SerialChildGroup {
    failed: bool,
}

impl SerialChildGroup {
    /// A group about to run its suffixes serially, counted as an attempt
    /// and a serial fallback.
    pub fn start(metrics: &ReplayMetricLedger) -> Self {
        metrics.increment(ReplayCount::ChildGroupAttempt);
        metrics.increment(ReplayCount::ChildSerialFallbackGroup);
        Self { failed: false }
    }

    /// One suffix ran (from the point, or on the group after the point was
    /// lost); `succeeded` is whether it did.
    pub fn observe(&mut self, succeeded: bool) {
        self.failed |= !succeeded;
    }

    /// The group is done (released): a success, or a failure when any
    /// suffix failed.
    pub fn finish(self, metrics: &ReplayMetricLedger) {
        metrics.increment(if self.failed {
            ReplayCount::ChildGroupFailure
        } else {
            ReplayCount::ChildGroupSuccess
        });
    }
}

/// Run `execute` over `children` on up to `workers` threads, each taking
/// the next child; outcomes come back in the children's order.
///
/// The calling thread is one of the workers, and the others are helper
/// threads of its [`crew`](crate::replay::crew) (at most one per core; so at most
/// cores + 1 children run at once, however many `workers` are asked for):
/// a group starts no threads after its first, and its helpers wait for
/// the next phase spinning rather than asleep. A child taken by a worker
/// is finished by it; the call returns when every child has run.
pub fn run_parallel<C: Send, R: Send>(
    children: &mut [C],
    workers: usize,
    execute: &(dyn Fn(&mut C) -> R + Sync),
) -> Vec<R> {
    run_parallel_at_home(children, &[], workers, execute)
}

/// [`run_parallel`], where `homes[i]`, when given, is the thread child `i`
/// belongs on (the one that made it): each worker first takes the children
/// at home on it, in order, then helps with the rest, so a child's memory
/// is made, used and freed on one thread unless its home thread fell
/// behind. `homes` may be shorter than `children` (an empty slice: no
/// child has a home).
pub fn run_parallel_at_home<C: Send, R: Send>(
    children: &mut [C],
    homes: &[Option<ThreadId>],
    workers: usize,
    execute: &(dyn Fn(&mut C) -> R + Sync),
) -> Vec<R> {
    let count = children.len();
    // The children in order, grouped by home: each queue is taken from the
    // front, by its home thread first and then by any worker.
    let mut queues: Vec<(Option<ThreadId>, Vec<usize>, AtomicUsize)> = Vec::new();
    for index in 0..count {
        let home = homes.get(index).copied().flatten();
        match queues.iter_mut().find(|(at, ..)| *at == home) {
            Some((_, members, _)) => members.push(index),
            None => queues.push((home, vec![index], AtomicUsize::new(0))),
        }
    }
    let take = |queue: &(Option<ThreadId>, Vec<usize>, AtomicUsize)| {
        let (_, members, next) = queue;
        members.get(next.fetch_add(1, Ordering::Relaxed)).copied()
    };
    let slots: Vec<Mutex<Option<&mut C>>> = children
        .iter_mut()
        .map(|child| Mutex::new(Some(child)))
        .collect();
    let results: Vec<Mutex<Option<R>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let work = || {
        let me = Some(std::thread::current().id());
        let own = queues.iter().filter(|(home, ..)| *home == me);
        let others = queues.iter().filter(|(home, ..)| *home != me);
        for queue in own.chain(others) {
            while let Some(index) = take(queue) {
                let child = slots[index]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .expect("each child is taken once");
                let result = execute(child);
                *results[index].lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            }
        }
    };
    crate::replay::crew::run_scoped(workers.min(count).saturating_sub(1), &work);
    results
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every child ran")
        })
        .collect()
}

/// Count a replay's intent `assessment` in `metrics` as the child runtime
/// counts a child's
/// (`child_intent_assessment_count`, then `child_intent_allowed_count` or
/// `child_intent_denied_count`); a denial is the replay's `intent` failure
/// (`replay_risk_denied`), naming the policy and its reason (reference
/// `RiskAwareReplayChildAdapter`: a denied intent never runs).
pub fn judge_replay_intent(
    metrics: &ReplayMetricLedger,
    assessment: &RiskAssessment,
) -> Result<(), ReplayError> {
    let denied = assessment.disposition == Disposition::Deny;
    metrics.increment(ReplayCount::ChildIntentAssessment);
    metrics.increment(if denied {
        ReplayCount::ChildIntentDenied
    } else {
        ReplayCount::ChildIntentAllowed
    });
    if !denied {
        return Ok(());
    }
    let reason = assessment
        .sanitized_reason
        .as_deref()
        .map(|reason| format!(": {reason}"))
        .unwrap_or_default();
    Err(ReplayError::new(
        ReplayStage::Intent,
        ReplayCause::RiskDenied(format!(
            "replay intent denied by {}{reason}",
            assessment.policy_id
        )),
    ))
}

#[cfg(test)]
#[path = "children_tests.rs"]
mod tests;
