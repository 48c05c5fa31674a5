//! A child group's fork phase: every task forked from the point into a
//! child of its own, its agent state forked, its restore held to the
//! contract and validated, before any child runs — one after another on the
//! calling thread ([`fork_serially`], the reference's order), or, when the
//! forker can fork from several threads at once, on the group's workers
//! ([`fork_concurrently`]), each child then staying with the worker that
//! forked it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::{
    ChildConcurrency, ChildForker, ChildLease, ChildSession, ChildTask, ForkRequest, Prepared,
    minutes,
};
use crate::episode::adapter::AdapterError;
use crate::replay::agent_state::AgentStateStore;
use crate::replay::metrics::{ReplayCount, ReplayMetricLedger};
use crate::replay::point::{ReplayPoint, ReplayRestoreResult, validate_equivalence_contract};
use crate::replay::{Fidelity, ReplayCause, ReplayError, ReplayStage};

/// A forker whose forks are independent of one another (each child is its
/// own instance, made from shared, read-only parts), so that several
/// threads may fork at once: a parallel group then forks and validates its
/// children on its workers instead of one after another on its lane (see
/// [`ChildForker::concurrent`]).
pub trait ConcurrentForker<S>: Sync {
    /// Fork one child, as [`ChildForker::fork`] does; called from any of
    /// the group's workers.
    fn fork(&self, request: &ForkRequest) -> Result<ChildLease<S>, AdapterError>;
}

/// The point a group forks from and the group's metrics: what every fork
/// reads, from whichever worker.
pub(super) struct ForkOrigin<'a> {
    pub(super) point: &'a ReplayPoint,
    pub(super) metrics: &'a ReplayMetricLedger,
}

/// What a fork phase leaves: every child forked (in the tasks' order), for
/// the group to run or release, and the group's error, if a fork failed.
pub(super) type ForkPhase<L, K> = (Vec<Prepared<L, K>>, Option<ReplayError>);

/// Fork every task in order on this thread (reference
/// `run_child_group_from`), each child's agent state forked from the
/// point's (`point_key` in `store`): the first failure stops the forks and
/// is returned beside the children forked so far, which the caller
/// releases.
pub(super) fn fork_serially<F: ChildForker, S: AgentStateStore>(
    forker: &mut F,
    store: &mut S,
    point_key: &S::Key,
    origin: &ForkOrigin<'_>,
    tasks: Vec<ChildTask>,
) -> ForkPhase<F::Session, S::Key> {
    let mut prepared: Vec<Prepared<F::Session, S::Key>> = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (lease, restore_minutes) =
            match fork_lease(|request| forker.fork(request), origin, &task) {
                Ok(forked) => forked,
                Err(error) => return (prepared, Some(error)),
            };
        let duplicate = prepared
            .iter()
            .any(|other| other.lease.child_key == lease.child_key);
        prepared.push(Prepared::new(task, lease, None));
        let current = prepared.last_mut().expect("pushed above");
        let checked = if duplicate {
            Err(duplicate_key())
        } else {
            settle_fork(current, restore_minutes, origin, |child_id| {
                store.fork_agent_state(point_key, child_id)
            })
        };
        if let Err(error) = checked {
            return (prepared, Some(error));
        }
    }
    (prepared, None)
}

/// Fork the tasks on up to `workers` threads at once, each worker taking
/// the next task, once the first child, forked on this thread, has a lease
/// that lets children run at once (a serial-only lease: the rest are
/// forked one after another here). A worker's children are homed to it
/// (`Prepared::home`), so the run phase runs (and drops) each child on the
/// thread that made it. After the first failure no further task is taken; the returned error is
/// that of the earliest failed task in the group's order, and every child
/// forked (also those after it, forked meanwhile) is returned in the
/// tasks' order for the caller to release. Child keys are checked for
/// repeats once all forks are in.
///
/// This departs from the reference in a failed group only: its forks stop
/// at the first failure, while siblings forked at the same time here are
/// counted (`child_session_fork_*`) and released too.
pub(super) fn fork_concurrently<L: ChildSession, S: AgentStateStore + Send>(
    forker: &dyn ConcurrentForker<L>,
    store: &mut S,
    point_key: &S::Key,
    origin: &ForkOrigin<'_>,
    tasks: Vec<ChildTask>,
    workers: usize,
) -> ForkPhase<L, S::Key>
where
    S::Key: Send,
{
    let count = tasks.len();
    let tasks: Vec<Mutex<Option<ChildTask>>> =
        tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let forked: Vec<Mutex<Forked<L, S::Key>>> =
        (0..count).map(|_| Mutex::new(Forked::NotTaken)).collect();
    // The key is cloned in with the store: workers share neither alone.
    let store = Mutex::new((store, point_key.clone()));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    // Fork the next task on this thread; false when none is left or a
    // fork failed.
    let fork_next = || {
        if failed.load(Ordering::Relaxed) {
            return false;
        }
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= count {
            return false;
        }
        let task = locked(&tasks[index])
            .take()
            .expect("each task is taken once");
        let home = Some(std::thread::current().id());
        let outcome = match fork_lease(|request| forker.fork(request), origin, &task) {
            Err(error) => Forked::Failed(None, error),
            Ok((lease, restore_minutes)) => {
                let mut child = Prepared::new(task, lease, home);
                let settled = settle_fork(&mut child, restore_minutes, origin, |id| {
                    let (store, key) = &mut *locked(&store);
                    store.fork_agent_state(key, id)
                });
                match settled {
                    Ok(()) => Forked::Ready(child),
                    Err(error) => Forked::Failed(Some(child), error),
                }
            }
        };
        let ok = !matches!(outcome, Forked::Failed(..));
        if !ok {
            failed.store(true, Ordering::Relaxed);
        }
        *locked(&forked[index]) = outcome;
        ok
    };
    let fork_all = || while fork_next() {};
    // The first child is forked here: only when its lease lets children run
    // at once do its siblings fork at once (a serial-only adapter's forks
    // stay one after another, as its runs will).
    fork_next();
    let at_once = matches!(
        &*locked(&forked[0]),
        Forked::Ready(first) if first.lease.concurrency != ChildConcurrency::SerialOnly
    );
    if at_once {
        crate::replay::crew::run_scoped(workers.min(count).saturating_sub(1), &fork_all);
    } else {
        fork_all();
    }

    let mut prepared = Vec::with_capacity(count);
    let mut first_error = None;
    for slot in forked {
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Forked::NotTaken => {}
            Forked::Ready(child) => prepared.push(child),
            Forked::Failed(child, error) => {
                prepared.extend(child);
                first_error.get_or_insert(error);
            }
        }
    }
    if first_error.is_none() {
        let repeated = prepared.iter().enumerate().any(|(index, child)| {
            prepared[..index]
                .iter()
                .any(|other| other.lease.child_key == child.lease.child_key)
        });
        if repeated {
            first_error = Some(duplicate_key());
        }
    }
    (prepared, first_error)
}

/// One task's fork in a concurrent fork phase.
enum Forked<L, K> {
    /// No worker took it (a sibling failed first).
    NotTaken,
    /// Forked and validated.
    Ready(Prepared<L, K>),
    /// Failed: the child, when it was forked before the failure.
    Failed(Option<Prepared<L, K>>, ReplayError),
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn duplicate_key() -> ReplayError {
    ReplayError::contract(
        ReplayStage::Restore,
        "isolated replay child keys must be unique",
    )
}

/// Fork `task`'s child with `fork` (counted as an attempt) and time it;
/// the lease and the restore's minutes.
fn fork_lease<L>(
    fork: impl FnOnce(&ForkRequest) -> Result<ChildLease<L>, AdapterError>,
    origin: &ForkOrigin<'_>,
    task: &ChildTask,
) -> Result<(ChildLease<L>, f64), ReplayError> {
    origin
        .metrics
        .increment(ReplayCount::ChildSessionForkAttempt);
    let started = Instant::now();
    let request = ForkRequest {
        replay_point_id: origin.point.replay_point_id.clone(),
        child_id: task.child_id.clone(),
        target_branch_id: task.target_branch_id.clone(),
        minimum_fidelity: task.minimum_fidelity,
    };
    let lease =
        fork(&request).map_err(|error| ReplayError::adapter(ReplayStage::Restore, error))?;
    Ok((lease, minutes(started)))
}

/// Hold a forked child's restore to the contract: a worker identity for a
/// process-isolated lease, its own agent state (`fork_state`, from the
/// point's), a replayable fidelity no better than the point's, and an
/// equivalence report that passes the contract for the task's minimum.
/// Records the child's restore result and counts the fork a success.
fn settle_fork<L: ChildSession, K>(
    current: &mut Prepared<L, K>,
    restore_minutes: f64,
    origin: &ForkOrigin<'_>,
    fork_state: impl FnOnce(&str) -> Result<K, String>,
) -> Result<(), ReplayError> {
    let point = origin.point;
    if current.lease.concurrency == ChildConcurrency::ProcessIsolated
        && current.lease.worker_identity.is_none()
    {
        return Err(ReplayError::contract(
            ReplayStage::Restore,
            "a process-isolated child lease needs a worker identity",
        ));
    }
    match fork_state(&current.task.child_id) {
        Ok(key) => current.agent_key = Some(key),
        Err(message) => {
            return Err(ReplayError::new(
                ReplayStage::Restore,
                ReplayCause::AgentState(message),
            ));
        }
    }
    let receipt = current.lease.receipt.clone();
    if receipt.achieved_fidelity == Fidelity::NonReplayable {
        return Err(ReplayError::contract(
            ReplayStage::Restore,
            "an isolated child reported non_replayable",
        ));
    }
    if !point.fidelity.meets(receipt.achieved_fidelity) {
        return Err(ReplayError::contract(
            ReplayStage::Restore,
            format!(
                "the child's restore claims {} but the point was captured at {}",
                receipt.achieved_fidelity, point.fidelity
            ),
        ));
    }
    let equivalence_started = Instant::now();
    let checked = current
        .lease
        .session
        .validate_equivalence(&receipt)
        .map_err(|error| ReplayError::adapter(ReplayStage::Equivalence, error))
        .and_then(|report| {
            validate_equivalence_contract(point, &receipt, &report, current.task.minimum_fidelity)
                .map(|eligible| (report, eligible))
                .map_err(|message| ReplayError::contract(ReplayStage::Equivalence, message))
        });
    let (report, promotion_eligible) = checked?;
    origin
        .metrics
        .observe_fidelity(report.achieved_fidelity.as_str());
    current.restore = Some(ReplayRestoreResult {
        replay_point_id: point.replay_point_id.clone(),
        target_branch_id: current.task.target_branch_id.clone(),
        achieved_fidelity: report.achieved_fidelity,
        equivalent: report.equivalent,
        promotion_eligible,
        prefix_reused: receipt.prefix_reused,
        report,
        restore_minutes,
        equivalence_minutes: minutes(equivalence_started),
        suffix_minutes: 0.0,
        replay_wall_minutes: 0.0,
    });
    origin
        .metrics
        .increment(ReplayCount::ChildSessionForkSuccess);
    Ok(())
}
