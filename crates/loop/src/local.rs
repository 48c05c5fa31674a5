//! A loop driven from this process, as `sandloop loop run` and `loop serve`
//! drive it: the repository's coordinator lock, the check of configuration
//! and plugins before any state is written, the register → run → finished
//! cycle of an in-process worker, and a stop request from another shell.

use std::path::Path;

use sandloop_core::dir_lock::{DirLock, DirLockError, Holder, lock_dir};

use crate::config::{SANDLOOP_DIRNAME, run_preflight};
use crate::models::{FinishedRequest, LoopState, TaskResponse};
use crate::service::{Coordinator, CoordinatorError};
use crate::state_store::{StateStore, StateStoreError};
use crate::worker::StepRunner;

/// Why a loop could not be driven, by kind: what the operator gave
/// ([`LocalError::Refused`], before any state is written) or what failed
/// on the way ([`LocalError::Failed`]). The CLI exits 2 or 1.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The repository, its configuration or its plugins cannot be used;
    /// nothing was written.
    #[error("{0}")]
    Refused(String),
    /// A step, the state store or the coordinator failed.
    #[error("{0}")]
    Failed(String),
}

impl From<CoordinatorError> for LocalError {
    /// A bad configuration or a running loop without `--resume` is
    /// refused; the rest failed.
    fn from(error: CoordinatorError) -> Self {
        match error {
            CoordinatorError::Config(_) | CoordinatorError::RunningState(_) => {
                LocalError::Refused(error.to_string())
            }
            other => LocalError::Failed(other.to_string()),
        }
    }
}

impl From<StateStoreError> for LocalError {
    fn from(error: StateStoreError) -> Self {
        LocalError::Failed(error.to_string())
    }
}

/// Hold the repository's coordinator lock (`.sandloop/.sandloop.lock`, see
/// [`sandloop_core::dir_lock`]) for the coordinator's lifetime: one
/// `loop run` or `loop serve` drives a repository's loop at a time. A
/// second one is refused naming the holder's pid, before it reads or
/// writes any state. `None` when the repository has no `.sandloop/`: then
/// it has no loop, and the configuration check that follows refuses it.
///
/// # Errors
/// [`LocalError::Refused`] while another process holds the lock;
/// [`LocalError::Failed`] when the lock file cannot be used.
pub fn lock_coordinator(repo: &Path) -> Result<Option<DirLock>, LocalError> {
    let dir = repo.join(SANDLOOP_DIRNAME);
    if !dir.is_dir() {
        return Ok(None);
    }
    lock_dir(&dir).map(Some).map_err(|error| match error {
        DirLockError::Held { holder, .. } => LocalError::Refused(format!(
            "another sandloop coordinator ({}) is driving the loop in {}; \
             one `loop run` or `loop serve` per repository at a time \
             (stop it first: `sandloop loop stop`, or end that process)",
            Holder(holder),
            repo.display()
        )),
        other => LocalError::Failed(other.to_string()),
    })
}

/// The repository's coordinator, opened after its configuration is checked
/// and every workflow's plugin loaded by `runner` (each problem listed),
/// so a loop that cannot run writes no state. `resume`, `workflow_set` and
/// `goal_file` are [`Coordinator::open`]'s.
///
/// # Errors
/// [`LocalError::Refused`] with every configuration or plugin problem, or
/// for a running loop without `resume`; [`LocalError::Failed`] when the
/// state cannot be read or written.
pub fn open_checked(
    repo: &Path,
    resume: bool,
    workflow_set: Option<&str>,
    goal_file: Option<&Path>,
    runner: &StepRunner,
) -> Result<Coordinator, LocalError> {
    let preflight = run_preflight(repo, workflow_set, goal_file)
        .map_err(|error| LocalError::Refused(error.to_string()))?;
    runner
        .check_plugins(&preflight.workflows)
        .map_err(|problems| {
            LocalError::Refused(match problems.as_slice() {
                [one] => one.clone(),
                many => format!("{} plugin problems:\n- {}", many.len(), many.join("\n- ")),
            })
        })?;
    Ok(Coordinator::open(repo, resume, workflow_set, goal_file)?)
}

/// Drive `coordinator` with `runner` as its one worker until it says stop:
/// register, then run each task and report it, calling `on_step` with each
/// finished step's report before it is sent. Returns the stop answer.
///
/// # Errors
/// [`LocalError::Failed`] when a step's files cannot be written or the
/// coordinator fails; the state keeps every step reported before.
pub fn drive(
    coordinator: &Coordinator,
    runner: &StepRunner,
    mut on_step: impl FnMut(&FinishedRequest),
) -> Result<TaskResponse, LocalError> {
    let mut task = coordinator.register()?;
    while let TaskResponse::Run(run) = &task {
        let finished = runner
            .run_task(run)
            .map_err(|error| LocalError::Failed(error.to_string()))?;
        on_step(&finished.request);
        task = coordinator.finished(&finished.request)?;
        // Reported: the copy kept for a crash is no longer needed.
        let _ = std::fs::remove_file(&finished.pending_path);
    }
    Ok(task)
}

/// The loop's latest state, `None` when the repository has none.
///
/// # Errors
/// [`LocalError::Failed`] when the state file cannot be read.
pub fn latest_state(repo: &Path) -> Result<Option<LoopState>, LocalError> {
    Ok(StateStore::<LoopState>::new(repo).read_state()?)
}

/// Ask the running loop of `repo` to stop before its next step (the
/// reference's `stop_requested`). A loop that has already ended is left as
/// it is: returns `Some(stop_reason)` then, `None` when the stop was asked.
///
/// # Errors
/// [`LocalError::Refused`] when the repository has no loop state;
/// [`LocalError::Failed`] when it cannot be read or written.
pub fn request_stop(repo: &Path) -> Result<Option<String>, LocalError> {
    StateStore::<LoopState>::new(repo).try_mutate(|state: Option<LoopState>| match state {
        None => Err(LocalError::Refused(format!(
            "no loop state found in {}; there is no loop to stop (start one with `sandloop loop run`)",
            repo.display()
        ))),
        Some(mut state) => match state.stop_reason.clone() {
            Some(reason) => Ok((state, Some(reason))),
            None => {
                state.stop_requested = true;
                Ok((state, None))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_coordinator_is_refused_while_the_first_holds_the_lock() {
        let repo = tempfile::tempdir().unwrap();
        assert!(
            lock_coordinator(repo.path()).unwrap().is_none(),
            "no loop, no lock"
        );
        std::fs::create_dir(repo.path().join(SANDLOOP_DIRNAME)).unwrap();
        let first = lock_coordinator(repo.path()).unwrap();
        assert!(first.is_some());
        match lock_coordinator(repo.path()) {
            Err(LocalError::Refused(message)) => {
                assert!(
                    message.contains("another sandloop coordinator"),
                    "{message}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(first);
        assert!(lock_coordinator(repo.path()).unwrap().is_some());
    }

    #[test]
    fn a_stop_is_refused_without_a_loop_and_left_alone_after_one_ended() {
        let repo = tempfile::tempdir().unwrap();
        assert!(matches!(
            request_stop(repo.path()),
            Err(LocalError::Refused(_))
        ));
        let store = StateStore::<LoopState>::new(repo.path());
        let snapshot = crate::models::RootConfigSnapshot {
            goal: "count".into(),
            goal_hash: "abcdef012345".into(),
            workflow_set: "main".into(),
            completion_criteria: vec![],
            stop_criteria: vec![],
            max_turns: 3,
            goal_check_consecutive_failures_cap: 3,
            team_harness: Default::default(),
        };
        let state = LoopState::new("s1", None, snapshot);
        store.write_state(&state).unwrap();
        assert_eq!(request_stop(repo.path()).unwrap(), None);
        assert!(latest_state(repo.path()).unwrap().unwrap().stop_requested);
        let ended = LoopState {
            stop_reason: Some("goal met".into()),
            ..state
        };
        store.write_state(&ended).unwrap();
        assert_eq!(
            request_stop(repo.path()).unwrap().as_deref(),
            Some("goal met")
        );
        assert!(!latest_state(repo.path()).unwrap().unwrap().stop_requested);
    }
}
