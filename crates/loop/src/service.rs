//! The coordinator: `register` and `finished`, the loop's state machine.
//! Mirrors `CoordinatorService` in the reference's `coordinator_app.py`
//! step for step — orphaned-task recovery (from the pending finished
//! request, then from the iteration result, before calling a task
//! abandoned), stale and mismatched `finished` calls answered without
//! touching state (here with a stale-report stop, not the active task), stop precedence (goal met, stop requested, unresolvable
//! error, max turns), the goal-check signal and its consecutive-failure
//! cap, control signals, child sessions dispatched after a success and the
//! parent resumed when its child ends.
//!
//! State lives in files (one `state.json` per session, read-modify-written
//! under its lock), so a coordinator can be killed at any moment and
//! started again with `resume`. One [`Coordinator`] serialises its own
//! calls; several workers (threads or HTTP clients) may share it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::config::{
    ConfigError, PreflightResult, WorkflowDefinition, derive_goal_hash, run_preflight,
};
use super::events::{SessionEvent, append_event};
use super::identity::new_attempt_id;
use super::models::{
    ChildSessionRecord, ChildSessionRequest, ControlSignal, ControlState, ControlStopReason,
    CurrentTask, FinishedRequest, GOAL_CHECK_WORKFLOW_ID, GoalCheckSignal, HistoryEntry,
    IterationResult, LoopState, LoopStatus, TaskAction, TaskResponse, WorkerIdentity, utc_now,
};
use super::scheduler::choose_next_workflow;
use super::sessions::{
    NewSession, child_requests_dir_path, children_path, control_path, create_session_dir,
    create_session_id, goal_check_path, pending_finished_request_path, result_path, state_path,
};
use super::state_store::{StateStore, StateStoreError};

/// Why the coordinator cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The configuration is invalid (every problem, with file and field).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state file could not be locked, read or written.
    #[error(transparent)]
    State(#[from] StateStoreError),
    /// A session directory or file could not be created.
    #[error(transparent)]
    Session(#[from] super::sessions::SessionError),
    /// A running loop exists and `resume` was not asked for.
    #[error(
        "a running loop was found ({0}); continue it with --resume, or stop it first with `sandloop loop stop`"
    )]
    RunningState(String),
    /// Something that must hold does not.
    #[error("{0}")]
    Invariant(String),
}

/// How [`Coordinator::open`] found the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// No state: a new session was started.
    Fresh {
        /// The new session.
        session_id: String,
    },
    /// The previous loop had ended: its state was archived and a new session
    /// started (with or without `resume`, as the reference does).
    AfterFinished {
        /// The ended loop's session.
        previous_session_id: String,
        /// How it ended, e.g. `goal_met`.
        previous_status: LoopStatus,
        /// Where its state was archived.
        archive: Option<PathBuf>,
        /// The new session.
        session_id: String,
    },
    /// A running loop was continued (`resume`).
    Resumed {
        /// The session that goes on: the top-level one, or the child that
        /// was running.
        session_id: String,
    },
}

struct Inner {
    /// The store of the active session (switches to a child and back).
    store: StateStore<LoopState>,
    /// Preflight results per workflow set (the root's first).
    preflights: HashMap<String, PreflightResult>,
    root_workflow_set: String,
    /// Events of the call in progress, `(session_id, event)`, appended to
    /// the sessions' logs once its state change is written.
    events: Vec<(String, SessionEvent)>,
}

/// The loop coordinator over the repository at `repo_root`.
pub struct Coordinator {
    repo_root: PathBuf,
    inner: Mutex<Inner>,
    start: Start,
}

/// Read a signal file: `None` when it is missing, unreadable or of the
/// wrong schema (reference `_read_signal`, which logs and ignores).
fn read_signal<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str::<T>(&text) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(
                "ignoring the invalid signal file {}: {error}",
                path.display()
            );
            None
        }
    }
}

fn new_task(
    state: &LoopState,
    workflow: &WorkflowDefinition,
    now: &str,
    caller: Option<&WorkerIdentity>,
) -> CurrentTask {
    CurrentTask {
        workflow_set: state.workflow_set.clone(),
        workflow_id: workflow.id.clone(),
        session_id: state.active_session_id.clone(),
        iteration: state.iteration_count + 1,
        started_at: now.to_string(),
        worker: caller.cloned(),
        attempt_id: Some(new_attempt_id()),
    }
}

/// The `session_stopped` event when a call moved `state` from a running
/// status (`was_terminal` false) to a terminal one.
fn stopped_event(was_terminal: bool, state: &LoopState) -> Option<(String, SessionEvent)> {
    (!was_terminal && state.status.is_terminal()).then(|| {
        (
            state.active_session_id.clone(),
            SessionEvent::SessionStopped {
                at: utc_now(),
                status: state.status,
                stop_reason: state.stop_reason.clone(),
            },
        )
    })
}

impl Coordinator {
    /// Check the configuration (every problem at once), then prepare the
    /// state (reference `_prepare_state`): no state → a fresh session; a
    /// terminal state → archived, then a fresh session; a running state →
    /// refused unless `resume`, which continues it.
    pub fn open(
        repo_root: &Path,
        resume: bool,
        workflow_set: Option<&str>,
        goal_file: Option<&Path>,
    ) -> Result<Self, CoordinatorError> {
        let preflight = run_preflight(repo_root, workflow_set, goal_file)?;
        let root_workflow_set = preflight.workflow_set.clone();
        let mut preflights = HashMap::new();
        preflights.insert(root_workflow_set.clone(), preflight);
        let mut coordinator = Self {
            repo_root: repo_root.to_path_buf(),
            inner: Mutex::new(Inner {
                store: StateStore::new(repo_root),
                preflights,
                root_workflow_set,
                events: Vec::new(),
            }),
            start: Start::Fresh {
                session_id: String::new(),
            },
        };
        coordinator.start = coordinator.prepare_state(resume)?;
        Ok(coordinator)
    }

    /// How the loop was found when the coordinator opened it.
    pub fn start(&self) -> &Start {
        &self.start
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The repository the loop runs in.
    pub fn repo_root(&self) -> &Path {
        &self.repo_root
    }

    /// The active session's state, as on disk.
    pub fn state(&self) -> Result<Option<LoopState>, CoordinatorError> {
        Ok(self.lock().store.read_state()?)
    }

    /// The active session's state file (it changes when a child session
    /// starts or ends, in `register` and `finished`). The file is replaced
    /// atomically, so it can be read whole without the state lock.
    pub fn state_path(&self) -> Option<PathBuf> {
        self.lock().store.state_path()
    }

    fn prepare_state(&self, resume: bool) -> Result<Start, CoordinatorError> {
        let mut inner = self.lock();
        let existing = inner.store.read_state()?;
        let Some(existing) = existing else {
            let session_id = self.write_fresh_state(&mut inner)?;
            return Ok(Start::Fresh { session_id });
        };
        if existing.status.is_terminal() {
            let archive = inner.store.archive_state()?;
            let session_id = self.write_fresh_state(&mut inner)?;
            return Ok(Start::AfterFinished {
                previous_session_id: existing.active_session_id,
                previous_status: existing.status,
                archive,
                session_id,
            });
        }
        if !resume {
            return Err(CoordinatorError::RunningState(existing.active_session_id));
        }
        // Resume the latest top-level session's active child first (at any
        // depth): its orphaned task is recovered by the next `register`
        // exactly like a top-level one, it runs to its end, then its parent
        // goes on. The reference resumes the top-level session and leaves
        // the child running forever.
        let mut resumed = existing;
        while let Some(child) = self.running_child_of(&resumed)? {
            tracing::info!(
                "sandloop loop: resuming child session {} (workflow set {}) of session {} first",
                child.active_session_id,
                child.workflow_set,
                resumed.active_session_id
            );
            resumed = child;
        }
        let path = state_path(&self.repo_root, &resumed.active_session_id);
        create_session_dir(
            &self.repo_root,
            &NewSession {
                session_id: &resumed.active_session_id,
                goal_hash: &resumed.goal_hash,
                goal: &resumed.config_snapshot.goal,
                workflow_set: &resumed.workflow_set,
                parent_session_id: resumed.parent_session_id.as_deref(),
            },
        )?;
        inner.store = StateStore::with_state_path(&self.repo_root, path);
        Ok(Start::Resumed {
            session_id: resumed.active_session_id,
        })
    }

    /// The child of `parent` that was running at a crash: the newest entry
    /// of its `children.json` still marked `running` whose state is not
    /// terminal. An entry whose child had already ended (the crash came
    /// before the parent took over) is marked complete on the way.
    fn running_child_of(&self, parent: &LoopState) -> Result<Option<LoopState>, CoordinatorError> {
        let path = children_path(&self.repo_root, &parent.active_session_id);
        let payload = self.read_children(&path);
        let running: Vec<String> = payload["children"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|record| record["status"] == "running")
            .filter_map(|record| record["session_id"].as_str().map(str::to_owned))
            .collect();
        for child_id in running.iter().rev() {
            let store: StateStore<LoopState> =
                StateStore::with_state_path(&self.repo_root, state_path(&self.repo_root, child_id));
            let Some(child) = store.read_state()? else {
                continue;
            };
            if child.status.is_terminal() {
                self.mark_child_record_complete(&parent.active_session_id, &child)?;
                continue;
            }
            return Ok(Some(child));
        }
        Ok(None)
    }

    fn write_fresh_state(&self, inner: &mut Inner) -> Result<String, CoordinatorError> {
        let preflight = &inner.preflights[&inner.root_workflow_set];
        let snapshot = preflight.root_config.snapshot();
        let session_id = create_session_id(&snapshot.goal_hash);
        create_session_dir(
            &self.repo_root,
            &NewSession {
                session_id: &session_id,
                goal_hash: &snapshot.goal_hash,
                goal: &snapshot.goal,
                workflow_set: &snapshot.workflow_set,
                parent_session_id: None,
            },
        )?;
        inner.store =
            StateStore::with_state_path(&self.repo_root, state_path(&self.repo_root, &session_id));
        let state = LoopState::new(session_id.clone(), None, snapshot);
        inner.store.write_state(&state)?;
        Ok(session_id)
    }

    /// A worker that does not say who it is asks for work: see
    /// [`Coordinator::register_as`].
    pub fn register(&self) -> Result<TaskResponse, CoordinatorError> {
        self.register_as(None)
    }

    /// The worker `caller` asks for work (reference `register_worker`):
    /// recover or abandon an orphaned task, stop if a stop condition holds,
    /// dispatch a requested child session, or choose the next workflow. A
    /// task handed out carries a new `attempt_id` and is kept with
    /// `caller`. Every step is logged in the session's `events.jsonl`.
    pub fn register_as(
        &self,
        caller: Option<&WorkerIdentity>,
    ) -> Result<TaskResponse, CoordinatorError> {
        let mut inner = self.lock();
        let response = self
            .register_locked(&mut inner, caller)
            .and_then(|response| self.resume_parent_if_stopped(&mut inner, response, caller));
        self.flush_events(&mut inner);
        response
    }

    /// Append the events of the call that just ended to their sessions'
    /// logs (a warning on stderr for each that cannot be).
    fn flush_events(&self, inner: &mut Inner) {
        for (session_id, event) in inner.events.drain(..) {
            if let Err(error) = append_event(&self.repo_root, &session_id, &event) {
                tracing::warn!("{error}");
            }
        }
    }

    fn register_locked(
        &self,
        inner: &mut Inner,
        caller: Option<&WorkerIdentity>,
    ) -> Result<TaskResponse, CoordinatorError> {
        let mut recovered_pending: Vec<PathBuf> = Vec::new();
        let mut events = Vec::new();
        let store = std::mem::replace(&mut inner.store, StateStore::new(&self.repo_root));
        let response = store.try_mutate(|state: Option<LoopState>| {
            let mut current = require_state(state)?;
            let was_terminal = current.status.is_terminal();
            let now = utc_now();
            if let Some(orphaned) = current.current_task.clone() {
                match self.read_recoverable_finished_request(&orphaned) {
                    None => {
                        events.push((
                            orphaned.session_id.clone(),
                            SessionEvent::IterationAbandoned {
                                at: now.clone(),
                                workflow_id: orphaned.workflow_id.clone(),
                                iteration: orphaned.iteration,
                                attempt_id: orphaned.attempt_id.clone(),
                                error: "abandoned".into(),
                            },
                        ));
                        current.history.push(HistoryEntry {
                            iteration: orphaned.iteration,
                            workflow_set: orphaned.workflow_set.clone(),
                            workflow_id: orphaned.workflow_id.clone(),
                            session_id: orphaned.session_id.clone(),
                            success: false,
                            error: Some("abandoned".into()),
                            started_at: orphaned.started_at.clone(),
                            finished_at: now.clone(),
                        });
                        current.iteration_count += 1;
                        current.current_task = None;
                    }
                    Some((request, pending)) => {
                        if let Some(pending) = pending {
                            recovered_pending.push(pending);
                        }
                        let event = self.record_finished_task(
                            inner,
                            &mut current,
                            &orphaned,
                            &request,
                            &now,
                        );
                        events.push((orphaned.session_id.clone(), event.recovered()));
                    }
                }
            }
            let response = self.dispatch(inner, &mut current, &now, caller, &mut events)?;
            events.extend(stopped_event(was_terminal, &current));
            Ok::<_, CoordinatorError>((current, response))
        });
        inner.store = store;
        let response = response?;
        inner.events.append(&mut events);
        for path in recovered_pending {
            let _ = std::fs::remove_file(path);
        }
        self.after_dispatch(inner, response)
    }

    /// The stop check, child dispatch and workflow choice shared by
    /// `register` and `finished` (steps 4–6 / 7–9 of the reference).
    fn dispatch(
        &self,
        inner: &mut Inner,
        current: &mut LoopState,
        now: &str,
        caller: Option<&WorkerIdentity>,
        events: &mut Vec<(String, SessionEvent)>,
    ) -> Result<Dispatch, CoordinatorError> {
        if let Some(stop) = self.stop_response_if_needed(current) {
            return Ok(Dispatch::Respond(stop));
        }
        if let Some(child) =
            self.dispatch_child_session_after_success(inner, current, caller, events)?
        {
            return Ok(child);
        }
        let workflows = &self.preflight_for(inner, &current.workflow_set)?.workflows;
        let Some(workflow) =
            choose_next_workflow(workflows, &current.history, current.iteration_count)
        else {
            current.stop_reason = Some("no_eligible_workflow".into());
            current.status = LoopStatus::Failed;
            return Ok(Dispatch::Respond(TaskResponse::stop(
                "no_eligible_workflow",
            )));
        };
        let task = new_task(current, workflow, now, caller);
        let response = TaskResponse::run(&task, &current.config_snapshot);
        events.push((
            task.session_id.clone(),
            SessionEvent::task_dispatched(&task),
        ));
        current.current_task = Some(task);
        Ok(Dispatch::Respond(response))
    }

    /// Switch to a dispatched child's store, if the dispatch made one.
    fn after_dispatch(
        &self,
        inner: &mut Inner,
        dispatch: Dispatch,
    ) -> Result<TaskResponse, CoordinatorError> {
        match dispatch {
            Dispatch::Respond(response) => Ok(response),
            Dispatch::Child { store, response } => {
                inner.store = store;
                Ok(response)
            }
        }
    }

    /// A worker reports a finished task (reference `finish_assignment`).
    /// A call with no active task dispatches as `register` would. A call
    /// for another task than the active one (a stale report) changes no
    /// state, hands nothing out and is answered
    /// [`TaskResponse::stale_report`]; it is logged as a late report in the
    /// session's event log. (The reference answers it with the active task,
    /// which hands another worker's task to the stale one.)
    ///
    /// A report matches the active task when its session, workflow,
    /// iteration and `attempt_id` agree ([`FinishedRequest::matches_task`]);
    /// the next task goes to the reporting worker (`request.worker`).
    pub fn finished(&self, request: &FinishedRequest) -> Result<TaskResponse, CoordinatorError> {
        let mut inner = self.lock();
        let response = self.finished_locked(&mut inner, request);
        self.flush_events(&mut inner);
        response
    }

    fn finished_locked(
        &self,
        inner: &mut Inner,
        request: &FinishedRequest,
    ) -> Result<TaskResponse, CoordinatorError> {
        let caller = request.worker.as_ref();
        let mut events = Vec::new();
        let store = std::mem::replace(&mut inner.store, StateStore::new(&self.repo_root));
        let dispatch = store.try_mutate(|state: Option<LoopState>| {
            let mut current = require_state(state)?;
            let was_terminal = current.status.is_terminal();
            let now = utc_now();
            let Some(active) = current.current_task.clone() else {
                // A report for another session hands nothing out (the
                // reference dispatches for any report when no task is out,
                // which gives the next task to whoever sends one).
                if request.session_id != current.active_session_id {
                    events.push(self.late_report(request, None, &current.active_session_id));
                    return Ok((current, Dispatch::Respond(TaskResponse::stale_report())));
                }
                let response = self.dispatch(inner, &mut current, &now, caller, &mut events)?;
                events.extend(stopped_event(was_terminal, &current));
                return Ok::<_, CoordinatorError>((current, response));
            };
            if !request.matches_task(&active) {
                events.push(self.late_report(request, Some(&active), &active.session_id));
                return Ok((current, Dispatch::Respond(TaskResponse::stale_report())));
            }
            let finished = self.record_finished_task(inner, &mut current, &active, request, &now);
            events.push((active.session_id.clone(), finished));
            let response = if current.stop_reason.as_deref() == Some("goal_check_broken") {
                Dispatch::Respond(TaskResponse::stop("goal_check_broken"))
            } else {
                self.dispatch(inner, &mut current, &now, caller, &mut events)?
            };
            events.extend(stopped_event(was_terminal, &current));
            Ok((current, response))
        });
        inner.store = store;
        let dispatch = dispatch?;
        inner.events.append(&mut events);
        let response = self.after_dispatch(inner, dispatch)?;
        if response.is_stale_report() {
            return Ok(response);
        }
        self.resume_parent_if_stopped(inner, response, caller)
    }

    /// After a stop in a child session that has ended, mark it complete in
    /// its parent's `children.json` and go on with the parent (reference
    /// `_resume_parent_if_active_child_completed`, applied after
    /// `register` too, so a child whose recovered orphan ends it hands
    /// back to its parent).
    fn resume_parent_if_stopped(
        &self,
        inner: &mut Inner,
        response: TaskResponse,
        caller: Option<&WorkerIdentity>,
    ) -> Result<TaskResponse, CoordinatorError> {
        if response.action() == TaskAction::Stop
            && let Some(parent) = self.resume_parent_if_active_child_completed(inner, caller)?
        {
            return Ok(parent);
        }
        Ok(response)
    }

    /// Say on stderr that a report for another task or attempt than
    /// `active` (none: no task is out) was ignored; the late-report event
    /// for the log of `session_id`.
    fn late_report(
        &self,
        request: &FinishedRequest,
        active: Option<&CurrentTask>,
        session_id: &str,
    ) -> (String, SessionEvent) {
        let attempt = match (
            &request.attempt_id,
            active.and_then(|a| a.attempt_id.as_ref()),
        ) {
            (Some(sent), Some(issued)) if sent != issued => {
                format!(" (attempt {sent}; the active attempt is {issued})")
            }
            (None, Some(issued)) => format!(" (no attempt id; the active attempt is {issued})"),
            _ => String::new(),
        };
        let instead = active.map_or_else(
            || format!("no task is out in session {session_id}"),
            |active| {
                format!(
                    "iteration {} ({}) is the active task",
                    active.iteration, active.workflow_id
                )
            },
        );
        tracing::warn!(
            "sandloop loop: a late report for iteration {} ({}) of session {}{attempt} was \
             ignored: {instead}",
            request.iteration,
            request.workflow_id,
            request.session_id,
        );
        (
            session_id.to_string(),
            SessionEvent::late_report(request, active),
        )
    }

    /// Record `request` as the result of `active`; returns the
    /// `task_finished` event (not recovered) describing what was recorded.
    fn record_finished_task(
        &self,
        inner: &mut Inner,
        state: &mut LoopState,
        active: &CurrentTask,
        request: &FinishedRequest,
        now: &str,
    ) -> SessionEvent {
        let mut success = request.success;
        let mut error = request.error.clone();
        if self.workflow_expects_goal_check_signal(inner, &active.workflow_set, &active.workflow_id)
        {
            let path = goal_check_path(
                &self.repo_root,
                &active.session_id,
                active.iteration,
                &active.workflow_id,
            );
            match read_signal::<GoalCheckSignal>(&path) {
                None => {
                    success = false;
                    error = Some("invalid_goal_check_output".into());
                    state.goal_check_consecutive_failures += 1;
                    if state.goal_check_consecutive_failures
                        >= state.config_snapshot.goal_check_consecutive_failures_cap
                    {
                        state.stop_reason = Some("goal_check_broken".into());
                        state.status = LoopStatus::Failed;
                    }
                }
                // A met goal stops the loop through the step's control
                // signal, as in the reference; the verdict only resets the
                // failure count.
                Some(_) => state.goal_check_consecutive_failures = 0,
            }
        }
        if state.stop_reason.as_deref() != Some("goal_check_broken") {
            self.apply_session_control(state);
            if state.stop_reason.as_deref() == Some("invalid_control_output") {
                success = false;
                error = Some("invalid_control_output".into());
            }
        }
        state.history.push(HistoryEntry {
            iteration: active.iteration,
            workflow_set: active.workflow_set.clone(),
            workflow_id: active.workflow_id.clone(),
            session_id: active.session_id.clone(),
            success,
            error: error.clone(),
            started_at: active.started_at.clone(),
            finished_at: now.to_string(),
        });
        state.iteration_count += 1;
        state.current_task = None;
        SessionEvent::TaskFinished {
            at: now.to_string(),
            workflow_id: active.workflow_id.clone(),
            iteration: active.iteration,
            attempt_id: active.attempt_id.clone(),
            success,
            error,
            recovered: false,
        }
    }

    /// Reference `_read_recoverable_finished_request`: the pending finished
    /// request the worker wrote before reporting (if it matches), else the
    /// iteration's `result.json`.
    fn read_recoverable_finished_request(
        &self,
        task: &CurrentTask,
    ) -> Option<(FinishedRequest, Option<PathBuf>)> {
        let pending = pending_finished_request_path(
            &self.repo_root,
            &task.session_id,
            task.iteration,
            &task.workflow_id,
        );
        if let Some(request) = read_signal::<FinishedRequest>(&pending)
            && request.matches_task(task)
        {
            return Some((request, Some(pending)));
        }
        let result: IterationResult = read_signal(&result_path(
            &self.repo_root,
            &task.session_id,
            task.iteration,
            &task.workflow_id,
        ))?;
        // A result of another attempt of this iteration is not this one's.
        let request = FinishedRequest {
            session_id: task.session_id.clone(),
            workflow_id: task.workflow_id.clone(),
            iteration: task.iteration,
            success: result.success,
            text: result.text,
            error: result.error,
            attempt_id: result.attempt_id,
            worker: task.worker.clone(),
        };
        request.matches_task(task).then_some((request, None))
    }

    /// The preflight of `workflow_set`, run once and kept.
    fn preflight_for<'a>(
        &self,
        inner: &'a mut Inner,
        workflow_set: &str,
    ) -> Result<&'a PreflightResult, CoordinatorError> {
        if !inner.preflights.contains_key(workflow_set) {
            let preflight = run_preflight(&self.repo_root, Some(workflow_set), None)?;
            inner.preflights.insert(workflow_set.to_string(), preflight);
        }
        Ok(&inner.preflights[workflow_set])
    }

    fn workflow_expects_goal_check_signal(
        &self,
        inner: &mut Inner,
        workflow_set: &str,
        workflow_id: &str,
    ) -> bool {
        workflow_id == GOAL_CHECK_WORKFLOW_ID
            || self
                .preflight_for(inner, workflow_set)
                .ok()
                .and_then(|preflight| preflight.workflows.iter().find(|w| w.id == workflow_id))
                .is_some_and(WorkflowDefinition::expects_goal_check)
    }

    fn dispatch_child_session_after_success(
        &self,
        inner: &mut Inner,
        state: &LoopState,
        caller: Option<&WorkerIdentity>,
        events: &mut Vec<(String, SessionEvent)>,
    ) -> Result<Option<Dispatch>, CoordinatorError> {
        if !state.history.last().is_some_and(|entry| entry.success) {
            return Ok(None);
        }
        if state.parent_session_id.is_some() {
            return Ok(None);
        }
        let dir = child_requests_dir_path(&self.repo_root, &state.active_session_id);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(None);
        };
        let mut requests: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        requests.sort();
        for request_path in requests {
            let Some(request) = read_signal::<ChildSessionRequest>(&request_path) else {
                continue;
            };
            let base = match self.preflight_for(inner, &request.workflow_set) {
                Ok(base) => base,
                Err(error) => {
                    self.refuse_child_request(
                        &state.active_session_id,
                        &request_path,
                        &request,
                        &error,
                    );
                    continue;
                }
            };
            let Some(workflow) = choose_next_workflow(&base.workflows, &[], 0) else {
                continue;
            };
            let mut snapshot = base.root_config.snapshot();
            snapshot.goal = request.goal.clone();
            snapshot.goal_hash = derive_goal_hash(&request.goal);
            snapshot.workflow_set = request.workflow_set.clone();
            let child_session_id = create_session_id(&snapshot.goal_hash);
            create_session_dir(
                &self.repo_root,
                &NewSession {
                    session_id: &child_session_id,
                    goal_hash: &snapshot.goal_hash,
                    goal: &request.goal,
                    workflow_set: &request.workflow_set,
                    parent_session_id: Some(&state.active_session_id),
                },
            )?;
            let now = utc_now();
            let mut child = LoopState::new(
                child_session_id.clone(),
                Some(state.active_session_id.clone()),
                snapshot,
            );
            let task = CurrentTask {
                workflow_set: request.workflow_set.clone(),
                workflow_id: workflow.id.clone(),
                session_id: child_session_id.clone(),
                iteration: 1,
                started_at: now.clone(),
                worker: caller.cloned(),
                attempt_id: Some(new_attempt_id()),
            };
            events.push((
                child_session_id.clone(),
                SessionEvent::task_dispatched(&task),
            ));
            child.current_task = Some(task.clone());
            let store = StateStore::with_state_path(
                &self.repo_root,
                state_path(&self.repo_root, &child_session_id),
            );
            store.write_state(&child)?;
            self.append_child_record(
                &state.active_session_id,
                &ChildSessionRecord {
                    session_id: child_session_id,
                    workflow_set: request.workflow_set.clone(),
                    goal_hash: child.goal_hash.clone(),
                    status: "running".into(),
                    created_at: now,
                    completed_at: None,
                    stop_reason: None,
                },
            )?;
            let _ = std::fs::remove_file(&request_path);
            let response = TaskResponse::run(&task, &child.config_snapshot);
            return Ok(Some(Dispatch::Child { store, response }));
        }
        Ok(None)
    }

    /// Refuse a child-session request whose workflow set cannot be loaded,
    /// once: say so on stderr, log it in the session's event log, and
    /// rename the request `<name>.refused` so it is not scanned again (the
    /// reference skips it silently, every step).
    fn refuse_child_request(
        &self,
        session_id: &str,
        request_path: &Path,
        request: &ChildSessionRequest,
        error: &CoordinatorError,
    ) {
        let reason = error.to_string();
        tracing::warn!(
            "sandloop loop: refused the child-session request {} (workflow set {:?}): {reason}",
            request_path.display(),
            request.workflow_set
        );
        let mut refused = request_path.as_os_str().to_owned();
        refused.push(".refused");
        if let Err(error) = std::fs::rename(request_path, &refused) {
            tracing::warn!("cannot rename {}: {error}", request_path.display());
        }
        let event = SessionEvent::ChildRequestRefused {
            at: utc_now(),
            request_file: request_path.to_path_buf(),
            workflow_set: request.workflow_set.clone(),
            reason,
        };
        if let Err(error) = append_event(&self.repo_root, session_id, &event) {
            tracing::warn!("{error}");
        }
    }

    fn resume_parent_if_active_child_completed(
        &self,
        inner: &mut Inner,
        caller: Option<&WorkerIdentity>,
    ) -> Result<Option<TaskResponse>, CoordinatorError> {
        let Some(child) = inner.store.read_state()? else {
            return Ok(None);
        };
        let Some(parent_id) = child.parent_session_id.clone() else {
            return Ok(None);
        };
        if !child.status.is_terminal() {
            return Ok(None);
        }
        self.mark_child_record_complete(&parent_id, &child)?;
        inner.store =
            StateStore::with_state_path(&self.repo_root, state_path(&self.repo_root, &parent_id));
        let response = self.register_locked(inner, caller)?;
        Ok(Some(
            self.resume_parent_if_stopped(inner, response, caller)?,
        ))
    }

    fn read_children(&self, path: &Path) -> Value {
        let raw: Value = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        let children = match raw {
            Value::Object(mut map) if map.get("children").is_some_and(Value::is_array) => {
                map.remove("children").unwrap_or_default()
            }
            Value::Array(children) => Value::Array(children),
            _ => Value::Array(Vec::new()),
        };
        json!({"schema_version": 1, "children": children})
    }

    fn write_children(&self, path: &Path, payload: &Value) -> Result<(), CoordinatorError> {
        sandloop_core::atomic::write_json_atomic(path, payload).map_err(|error| {
            CoordinatorError::Invariant(format!("cannot write {}: {error}", path.display()))
        })
    }

    fn append_child_record(
        &self,
        parent: &str,
        record: &ChildSessionRecord,
    ) -> Result<(), CoordinatorError> {
        let path = children_path(&self.repo_root, parent);
        let mut payload = self.read_children(&path);
        let value =
            serde_json::to_value(record).map_err(|e| CoordinatorError::Invariant(e.to_string()))?;
        if let Some(children) = payload["children"].as_array_mut() {
            children.push(value);
        }
        self.write_children(&path, &payload)
    }

    fn mark_child_record_complete(
        &self,
        parent: &str,
        child: &LoopState,
    ) -> Result<(), CoordinatorError> {
        let path = children_path(&self.repo_root, parent);
        let mut payload = self.read_children(&path);
        if let Some(children) = payload["children"].as_array_mut()
            && let Some(record) = children
                .iter_mut()
                .find(|record| record["session_id"] == child.active_session_id.as_str())
        {
            record["status"] = Value::from(child.status.as_str());
            record["completed_at"] = Value::from(utc_now());
            record["stop_reason"] = child.stop_reason.clone().map_or(Value::Null, Value::from);
        }
        self.write_children(&path, &payload)
    }

    /// Reference `_apply_stop_precedence`: goal met, then stop requested,
    /// then unresolvable error, then max turns; a terminal status keeps its
    /// reason.
    fn apply_stop_precedence(state: &mut LoopState) -> Option<String> {
        let (status, reason) = if state.goal_met {
            (LoopStatus::GoalMet, "goal_met")
        } else if state.stop_requested {
            (LoopStatus::Stopped, "stop_requested")
        } else if state.unresolvable_error {
            (LoopStatus::Failed, "unresolvable_error")
        } else if state.iteration_count >= state.max_turns {
            (LoopStatus::MaxTurns, "max_turns")
        } else if state.status.is_terminal() {
            return Some(
                state
                    .stop_reason
                    .clone()
                    .unwrap_or_else(|| state.status.as_str().to_string()),
            );
        } else {
            return None;
        };
        state.status = status;
        state.stop_reason = Some(reason.to_string());
        Some(reason.to_string())
    }

    fn stop_response_if_needed(&self, state: &mut LoopState) -> Option<TaskResponse> {
        self.apply_session_control(state);
        Self::apply_stop_precedence(state).map(TaskResponse::stop)
    }

    /// Reference `_apply_session_control`: an invalid control file fails
    /// the loop (`invalid_control_output`); `stopped` sets the goal-met or
    /// unresolvable-error flag.
    fn apply_session_control(&self, state: &mut LoopState) {
        let path = control_path(&self.repo_root, &state.active_session_id);
        if !path.exists() {
            return;
        }
        let Some(signal) = read_signal::<ControlSignal>(&path) else {
            state.status = LoopStatus::Failed;
            state.stop_reason = Some("invalid_control_output".into());
            return;
        };
        match (signal.state, signal.stop_reason) {
            (ControlState::Running, _) => {}
            (ControlState::Stopped, Some(ControlStopReason::GoalMet)) => state.goal_met = true,
            (ControlState::Stopped, Some(ControlStopReason::UnresolvableError)) => {
                state.unresolvable_error = true
            }
            (ControlState::Stopped, None) => {}
        }
    }
}

/// What a dispatch decided: answer, or answer from a new child session.
enum Dispatch {
    Respond(TaskResponse),
    Child {
        store: StateStore<LoopState>,
        response: TaskResponse,
    },
}

fn require_state(state: Option<LoopState>) -> Result<LoopState, CoordinatorError> {
    state.ok_or_else(|| {
        CoordinatorError::Invariant("the coordinator's state is not initialised".into())
    })
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
