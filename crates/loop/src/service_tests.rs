//! Scenario tests of the coordinator's `register` / `finished` state
//! machine, one per path of the reference's `CoordinatorService`. Each test
//! builds a throw-away repository (root config, goal, workflow sets, a dummy
//! plugin file), drives a [`Coordinator`] over it and checks the responses
//! and the files the coordinator leaves behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use tempfile::TempDir;

use super::{Coordinator, CoordinatorError};
use crate::config::derive_goal_hash;
use crate::events::read_events;
use crate::models::{
    FinishedRequest, LoopState, LoopStatus, RootConfigSnapshot, RunTask, TaskAction, TaskResponse,
};
use crate::sessions::{
    ParentLink, child_requests_dir_path, children_path, control_path, goal_check_path, parent_path,
    pending_finished_request_path, result_path, session_dir_path, session_metadata_path,
    sessions_root_path, state_path,
};
use crate::state_store::{ARCHIVE_PREFIX, StateStore, TEMP_FILENAME};

const GOAL: &str = "Count to three";
const CHILD_GOAL: &str = "Check the count twice";
const PLUGIN: &str = "plugins/step.wasm";
const WORKFLOW_SETS: &str = ".sandloop/workflow_sets";

/// First, once: `run_on_start`, top priority, never due again.
const PLAN: &str = "run_on_start = true\npriority = 10\nrun_every = 1000\n";
/// After the first turn, alternating with `review` (`run_every = 1` keeps a
/// workflow from running twice in a row unless it failed).
const WORK: &str = "not_before_iteration = 1\npriority = 1\n";
/// After the first turn, alternating with `work`.
const REVIEW: &str = "not_before_iteration = 1\n";
/// The built-in goal check: every other turn once something else succeeded.
const GOAL_CHECK: &str = "priority = 5\n";
/// A goal check under another id.
const VERIFY: &str = "emits_goal_check = true\nnot_before_iteration = 1\npriority = 5\n";
/// The workflows of the child set `sub`: step, tidy, step, tidy, ...
const STEP: &str = "description = \"A child step.\"\npriority = 1\n";
const TIDY: &str = "description = \"Tidy up.\"\n";

/// A repository the coordinator can open.
struct Repo {
    dir: TempDir,
}

impl Repo {
    /// Root config, goal and plugin file; no workflows yet.
    fn bare(max_turns: u32, cap: u32) -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        repo.write(
            "sandloop-loop.toml",
            &format!(
                "goal_file = \"sandloop-goal.txt\"\nworkflow_set = \"main\"\nmax_turns = {max_turns}\n\
                 completion_criteria = [\"three lines\"]\ngoal_check_consecutive_failures_cap = {cap}\n"
            ),
        );
        repo.write("sandloop-goal.txt", &format!("\n{GOAL}\n"));
        repo.write(PLUGIN, "\0asm dummy");
        repo
    }

    /// `main` = plan (iteration 1), then work (2), review (3), work (4),
    /// ... as long as they succeed.
    fn plain(max_turns: u32) -> Repo {
        let repo = Repo::bare(max_turns, 3);
        repo.workflow("main", "plan", PLAN);
        repo.workflow("main", "work", WORK);
        repo.workflow("main", "review", REVIEW);
        repo
    }

    /// `main` = plan (iteration 1), then the goal check `id` (2), work (3),
    /// the goal check (4), work (5), ...
    fn goal_checking(max_turns: u32, cap: u32, id: &str, toml: &str) -> Repo {
        let repo = Repo::bare(max_turns, cap);
        repo.workflow("main", "plan", PLAN);
        repo.workflow("main", "work", WORK);
        repo.workflow("main", id, toml);
        repo
    }

    /// [`Repo::plain`] plus the child set `sub`: step (1), tidy (2), step
    /// (3), ...
    fn with_children(max_turns: u32) -> Repo {
        let repo = Repo::plain(max_turns);
        repo.workflow("sub", "step", STEP);
        repo.workflow("sub", "tidy", TIDY);
        repo
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn workflow(&self, set: &str, id: &str, extra: &str) {
        let dir = format!("{WORKFLOW_SETS}/{set}/workflows/{id}");
        self.write(
            &format!("{dir}/workflow.toml"),
            &format!("plugin = \"{PLUGIN}\"\n{extra}"),
        );
        self.write(&format!("{dir}/prompt.txt"), &format!("Do {id}.\n"));
    }

    /// A fresh start (no `resume`).
    fn open(&self) -> Coordinator {
        Coordinator::open(self.root(), false, None, None).unwrap()
    }

    /// A start with `resume`.
    fn resume(&self) -> Coordinator {
        Coordinator::open(self.root(), true, None, None).unwrap()
    }

    fn state_file(&self, session: &str) -> PathBuf {
        state_path(self.root(), session)
    }

    /// The state of `session` as on disk.
    fn state_of(&self, session: &str) -> LoopState {
        let bytes = std::fs::read(self.state_file(session)).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Change the state of `session` under its lock, as another process
    /// (`sandloop loop stop`) would.
    fn edit_state(&self, session: &str, edit: impl FnOnce(&mut LoopState)) {
        let store: StateStore<LoopState> =
            StateStore::with_state_path(self.root(), self.state_file(session));
        store
            .mutate(|state| {
                let mut state = state.unwrap();
                edit(&mut state);
                (state, ())
            })
            .unwrap();
    }

    fn write_control(&self, session: &str, value: &Value) {
        write_json(&control_path(self.root(), session), value);
    }

    fn write_goal_check(&self, task: &TaskResponse, goal_met: bool) {
        let (session, workflow, iteration) = task_of(task);
        write_json(
            &goal_check_path(self.root(), &session, iteration, &workflow),
            &json!({"goal_met": goal_met, "reason": "checked", "schema_version": 1}),
        );
    }

    /// Drop a child-session request `name` into `session`'s requests.
    fn request_child(&self, session: &str, name: &str, value: &Value) -> PathBuf {
        let path = child_requests_dir_path(self.root(), session).join(name);
        write_json(&path, value);
        path
    }

    fn children_json(&self, session: &str) -> Value {
        read_json(&children_path(self.root(), session))
    }
}

fn write_json(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stop_goal() -> Value {
    json!({"state": "stopped", "reason": "done", "stop_reason": "goal_met", "schema_version": 1})
}

fn stop_stuck() -> Value {
    json!({"state": "stopped", "reason": "stuck", "stop_reason": "unresolvable_error",
        "schema_version": 1})
}

fn child_request(workflow_set: &str) -> Value {
    json!({"workflow_set": workflow_set, "goal": CHILD_GOAL, "schema_version": 1})
}

/// Session, workflow and iteration of a run response (panics on a stop).
fn task_of(response: &TaskResponse) -> (String, String, u32) {
    let run = run_of(response);
    (
        run.session_id.clone(),
        run.workflow_id.clone(),
        run.iteration,
    )
}

/// The task of a run response (panics on a stop).
fn run_of(response: &TaskResponse) -> &RunTask {
    assert_eq!(response.action(), TaskAction::Run, "{response:?}");
    assert_eq!(response.stop_reason(), None, "{response:?}");
    response.task().unwrap()
}

/// Assert a run response for `workflow` at `iteration`; returns its session.
fn assert_run(response: &TaskResponse, workflow: &str, iteration: u32) -> String {
    let (session, workflow_id, at) = task_of(response);
    assert_eq!(
        (workflow_id.as_str(), at),
        (workflow, iteration),
        "{response:?}"
    );
    session
}

fn assert_stop(response: &TaskResponse, reason: &str) {
    assert_eq!(*response, TaskResponse::stop(reason));
}

/// The request a worker posts after running `task`.
fn report(task: &TaskResponse, success: bool, error: Option<&str>) -> FinishedRequest {
    let (session_id, workflow_id, iteration) = task_of(task);
    FinishedRequest {
        workflow_id,
        session_id,
        iteration,
        success,
        text: success.then(|| "done".to_string()),
        error: error.map(str::to_string),
        attempt_id: run_of(task).attempt_id.clone(),
        worker: None,
    }
}

fn succeed(coordinator: &Coordinator, task: &TaskResponse) -> TaskResponse {
    coordinator.finished(&report(task, true, None)).unwrap()
}

fn fail(coordinator: &Coordinator, task: &TaskResponse, error: &str) -> TaskResponse {
    coordinator
        .finished(&report(task, false, Some(error)))
        .unwrap()
}

fn session_of(coordinator: &Coordinator) -> String {
    coordinator.state().unwrap().unwrap().active_session_id
}

/// The events of `session`'s log named `name`, oldest first.
fn events_named(repo_root: &Path, session: &str, name: &str) -> Vec<Value> {
    read_events(repo_root, session)
        .into_iter()
        .filter(|event| event["event"] == name)
        .collect()
}

/// Files named `state.json.archive_*.json` in `dir`.
fn archives_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with(ARCHIVE_PREFIX) && name.ends_with(".json")
        })
        .collect();
    found.sort();
    found
}

// ---------------------------------------------------------------- start

#[test]
fn fresh_start_creates_a_running_session_and_register_runs_the_first_workflow() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    assert_eq!(coordinator.repo_root(), repo.root());

    let state = coordinator.state().unwrap().unwrap();
    let session = state.active_session_id.clone();
    let dir = sessions_root_path(repo.root()).join(&session);
    assert!(dir.is_dir(), "{}", dir.display());
    assert_eq!(session_dir_path(repo.root(), &session), dir);
    assert!(session_metadata_path(repo.root(), &session).is_file());
    assert!(control_path(repo.root(), &session).is_file());
    let goal_hash = derive_goal_hash(GOAL);
    assert!(session.contains(&goal_hash), "{session}");

    let on_disk = repo.state_of(&session);
    assert_eq!(on_disk, state);
    assert_eq!(on_disk.status, LoopStatus::Running);
    assert_eq!(on_disk.parent_session_id, None);
    assert_eq!(on_disk.iteration_count, 0);
    assert_eq!(on_disk.max_turns, 20);
    assert_eq!(on_disk.goal_hash, goal_hash);
    assert_eq!(on_disk.workflow_set, "main");
    assert_eq!(on_disk.current_task, None);
    assert!(on_disk.history.is_empty());
    let expected_snapshot = RootConfigSnapshot {
        goal: GOAL.into(),
        goal_hash: goal_hash.clone(),
        workflow_set: "main".into(),
        completion_criteria: vec!["three lines".into()],
        stop_criteria: vec![],
        max_turns: 20,
        goal_check_consecutive_failures_cap: 3,
        team_harness: Default::default(),
    };
    assert_eq!(on_disk.config_snapshot, expected_snapshot);

    let task = coordinator.register().unwrap();
    assert_eq!(assert_run(&task, "plan", 1), session);
    assert_eq!(run_of(&task).workflow_set, "main");
    assert_eq!(run_of(&task).config_snapshot, expected_snapshot);

    let current = repo.state_of(&session).current_task.unwrap();
    assert_eq!(
        (
            current.workflow_set.as_str(),
            current.workflow_id.as_str(),
            current.session_id.as_str(),
            current.iteration
        ),
        ("main", "plan", session.as_str(), 1)
    );
    assert_eq!(repo.state_of(&session).iteration_count, 0);

    // The next step is scheduled after the first one finished.
    let next = succeed(&coordinator, &task);
    assert_eq!(assert_run(&next, "work", 2), session);
    let state = repo.state_of(&session);
    assert_eq!(state.iteration_count, 1);
    assert_eq!(state.history.len(), 1);
    assert!(state.history[0].success);
    assert_eq!(state.history[0].error, None);
}

#[test]
fn workflow_set_and_goal_file_overrides_pick_what_the_session_runs() {
    let repo = Repo::with_children(5);
    repo.write("other-goal.txt", "Another goal\n");
    let coordinator = Coordinator::open(
        repo.root(),
        false,
        Some("sub"),
        Some(Path::new("other-goal.txt")),
    )
    .unwrap();
    let state = coordinator.state().unwrap().unwrap();
    assert_eq!(state.workflow_set, "sub");
    assert_eq!(state.config_snapshot.goal, "Another goal");
    assert_eq!(state.goal_hash, derive_goal_hash("Another goal"));
    let task = coordinator.register().unwrap();
    assert_run(&task, "step", 1);
    assert_eq!(run_of(&task).workflow_set, "sub");
}

#[test]
fn a_broken_config_is_refused_before_any_state_is_written() {
    let repo = Repo::plain(5);
    std::fs::remove_file(repo.root().join(PLUGIN)).unwrap();
    let error = Coordinator::open(repo.root(), false, None, None)
        .err()
        .expect("a missing plugin fails the preflight");
    assert!(matches!(error, CoordinatorError::Config(_)), "{error}");
    assert!(!sessions_root_path(repo.root()).exists());
}

#[test]
fn a_running_state_is_refused_without_resume() {
    let repo = Repo::plain(20);
    let first = repo.open();
    let session = session_of(&first);
    let task = first.register().unwrap();
    drop(first);
    let before = std::fs::read(repo.state_file(&session)).unwrap();

    let error = Coordinator::open(repo.root(), false, None, None)
        .err()
        .expect("a running state needs --resume");
    match &error {
        CoordinatorError::RunningState(id) => assert_eq!(*id, session),
        other => panic!("expected RunningState, got {other:?}"),
    }
    assert!(error.to_string().contains("--resume"), "{error}");
    assert_eq!(std::fs::read(repo.state_file(&session)).unwrap(), before);
    let sessions: Vec<_> = std::fs::read_dir(sessions_root_path(repo.root()))
        .unwrap()
        .collect();
    assert_eq!(sessions.len(), 1, "no second session was created");

    // With resume the same session goes on, its task still current; the
    // orphan is settled (abandoned) and the loop continues.
    let resumed = repo.resume();
    assert_eq!(session_of(&resumed), session);
    let current = resumed.state().unwrap().unwrap().current_task.unwrap();
    assert_eq!(
        (current.workflow_id.as_str(), current.iteration),
        ("plan", run_of(&task).iteration)
    );
    let next = resumed.register().unwrap();
    assert_eq!(assert_run(&next, "work", 2), session);
    assert_eq!(
        repo.state_of(&session).history[0].error.as_deref(),
        Some("abandoned")
    );
}

#[test]
fn resume_continues_the_same_session_without_rewriting_it() {
    let repo = Repo::plain(20);
    let first = repo.open();
    let session = session_of(&first);
    let task = first.register().unwrap();
    let next = succeed(&first, &task);
    assert_run(&next, "work", 2);
    drop(first);
    let metadata = std::fs::read(session_metadata_path(repo.root(), &session)).unwrap();

    let resumed = repo.resume();
    assert_eq!(session_of(&resumed), session);
    let state = resumed.state().unwrap().unwrap();
    assert_eq!(state.iteration_count, 1);
    assert_eq!(state.history.len(), 1);
    assert_eq!(
        std::fs::read(session_metadata_path(repo.root(), &session)).unwrap(),
        metadata
    );
    // The worker of iteration 2 reports after the restart: recorded.
    let after = succeed(&resumed, &next);
    assert_eq!(assert_run(&after, "review", 3), session);
    assert_eq!(repo.state_of(&session).iteration_count, 2);
}

#[test]
fn a_terminal_state_is_archived_on_the_next_start() {
    let repo = Repo::plain(1);
    let first = repo.open();
    let old = session_of(&first);
    let task = first.register().unwrap();
    assert_stop(&succeed(&first, &task), "max_turns");
    drop(first);
    let old_dir = sessions_root_path(repo.root()).join(&old);
    assert_eq!(repo.state_of(&old).status, LoopStatus::MaxTurns);

    let second = repo.open();
    let new = session_of(&second);
    assert_ne!(new, old);
    assert!(!old_dir.join("state.json").exists(), "the old state moved");
    let archives = archives_in(&old_dir);
    assert_eq!(archives.len(), 1, "{archives:?}");
    let archived: LoopState =
        serde_json::from_slice(&std::fs::read(&archives[0]).unwrap()).unwrap();
    assert_eq!(archived.active_session_id, old);
    assert_eq!(archived.status, LoopStatus::MaxTurns);
    assert_eq!(archived.history.len(), 1);
    let fresh = repo.state_of(&new);
    assert_eq!(fresh.status, LoopStatus::Running);
    assert_eq!(fresh.iteration_count, 0);
    assert!(fresh.history.is_empty());
    let task = second.register().unwrap();
    assert_eq!(assert_run(&task, "plan", 1), new);
    assert_stop(&fail(&second, &task, "trap"), "max_turns");
    drop(second);

    // `resume` does not revive a terminal loop either: it is archived too.
    let third = repo.resume();
    let newest = session_of(&third);
    assert!(newest != new && newest != old);
    assert_eq!(
        archives_in(&sessions_root_path(repo.root()).join(&new)).len(),
        1
    );
    assert_eq!(repo.state_of(&newest).status, LoopStatus::Running);
}

// ---------------------------------------------------------------- orphans

/// Opens, hands out `plan` iteration 1, and "crashes" (drops the
/// coordinator) with the task still current.
fn crash_during_first_task(repo: &Repo) -> (String, TaskResponse) {
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    (session, task)
}

#[test]
fn an_orphan_is_recovered_from_the_pending_finished_request() {
    let repo = Repo::plain(20);
    let (session, task) = crash_during_first_task(&repo);
    let started_at = repo.state_of(&session).current_task.unwrap().started_at;
    let pending = pending_finished_request_path(repo.root(), &session, 1, "plan");
    let request = FinishedRequest {
        text: Some("the worker's text".into()),
        ..report(&task, false, Some("trap: unreachable"))
    };
    write_json(&pending, &serde_json::to_value(&request).unwrap());
    // A result.json that disagrees: the pending request wins.
    write_json(
        &result_path(repo.root(), &session, 1, "plan"),
        &json!({"success": true, "text": "from result"}),
    );

    let coordinator = repo.resume();
    let next = coordinator.register().unwrap();
    assert_eq!(assert_run(&next, "work", 2), session);
    let state = repo.state_of(&session);
    assert_eq!(state.iteration_count, 1);
    assert_eq!(state.history.len(), 1);
    let entry = &state.history[0];
    assert_eq!(
        (entry.workflow_id.as_str(), entry.iteration, entry.success),
        ("plan", 1, false)
    );
    assert_eq!(entry.error.as_deref(), Some("trap: unreachable"));
    assert_eq!(
        entry.started_at, started_at,
        "the entry keeps the task's start"
    );
    assert!(entry.finished_at >= entry.started_at);
    assert!(
        !pending.exists(),
        "the recovered pending request is deleted"
    );
    assert_eq!(state.current_task.unwrap().iteration, 2);
}

#[test]
fn an_orphan_is_recovered_from_result_json_when_no_pending_request_matches() {
    let repo = Repo::plain(20);
    let (session, task) = crash_during_first_task(&repo);
    // A pending request in the right place but for another iteration is
    // not the orphan's: ignored, and left alone.
    let pending = pending_finished_request_path(repo.root(), &session, 1, "plan");
    let stale = FinishedRequest {
        iteration: 7,
        ..report(&task, false, Some("stale"))
    };
    write_json(&pending, &serde_json::to_value(&stale).unwrap());
    write_json(
        &result_path(repo.root(), &session, 1, "plan"),
        &json!({"success": true, "text": "planned", "error": null,
            "harness_run_id": "run-1", "harness_output_dir": "out"}),
    );

    let coordinator = repo.resume();
    let next = coordinator.register().unwrap();
    assert_run(&next, "work", 2);
    let state = repo.state_of(&session);
    assert_eq!(state.iteration_count, 1);
    let entry = &state.history[0];
    assert!(entry.success, "{entry:?}");
    assert_eq!(entry.error, None);
    assert!(
        pending.exists(),
        "a pending request that did not match stays"
    );
}

#[test]
fn an_orphan_is_recovered_from_a_failed_result_json() {
    let repo = Repo::plain(20);
    let (session, _task) = crash_during_first_task(&repo);
    write_json(
        &result_path(repo.root(), &session, 1, "plan"),
        &json!({"success": false, "error": "timeout"}),
    );
    let coordinator = repo.resume();
    coordinator.register().unwrap();
    let entry = &repo.state_of(&session).history[0];
    assert!(!entry.success);
    assert_eq!(entry.error.as_deref(), Some("timeout"));
}

#[test]
fn an_orphan_without_any_result_is_abandoned() {
    let repo = Repo::plain(20);
    let (session, _task) = crash_during_first_task(&repo);
    // Unreadable files count as missing.
    repo.write(
        &format!(".sandloop/sessions/{session}/iterations/0001_plan/pending_finished_request.json"),
        "{not json",
    );
    write_json(
        &result_path(repo.root(), &session, 1, "plan"),
        &json!({"text": "no success key"}),
    );

    let coordinator = repo.resume();
    let next = coordinator.register().unwrap();
    assert_eq!(assert_run(&next, "work", 2), session);
    let state = repo.state_of(&session);
    assert_eq!(state.iteration_count, 1);
    assert_eq!(state.history.len(), 1);
    let entry = &state.history[0];
    assert_eq!(
        (entry.workflow_id.as_str(), entry.iteration, entry.success),
        ("plan", 1, false)
    );
    assert_eq!(entry.error.as_deref(), Some("abandoned"));
    assert_eq!(entry.session_id, session);
    assert_eq!(entry.workflow_set, "main");
    // The same coordinator abandons its own handed-out task on a second
    // register (a worker that re-registers has lost its task).
    let again = coordinator.register().unwrap();
    assert_run(&again, "review", 3);
    let state = repo.state_of(&session);
    assert_eq!(state.history[1].error.as_deref(), Some("abandoned"));
    assert_eq!(state.iteration_count, 2);
}

#[test]
fn an_abandoned_orphan_can_reach_max_turns() {
    let repo = Repo::plain(1);
    let (session, _task) = crash_during_first_task(&repo);
    let coordinator = repo.resume();
    assert_stop(&coordinator.register().unwrap(), "max_turns");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::MaxTurns);
    assert_eq!(state.stop_reason.as_deref(), Some("max_turns"));
    assert_eq!(state.history[0].error.as_deref(), Some("abandoned"));
    assert_eq!(state.current_task, None);
}

// ---------------------------------------------------------------- stale calls

#[test]
fn finished_without_an_active_task_dispatches_like_register() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    let stale = FinishedRequest {
        workflow_id: "work".into(),
        session_id: session.clone(),
        iteration: 4,
        success: true,
        text: None,
        error: None,
        ..FinishedRequest::default()
    };
    let task = coordinator.finished(&stale).unwrap();
    assert_eq!(assert_run(&task, "plan", 1), session);
    let state = repo.state_of(&session);
    assert!(state.history.is_empty(), "the stale call is not recorded");
    assert_eq!(state.iteration_count, 0);
    assert_eq!(state.current_task.unwrap().workflow_id, "plan");
}

#[test]
fn finished_for_another_session_without_an_active_task_hands_nothing_out() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    let before = std::fs::read(repo.state_file(&session)).unwrap();
    let bogus = FinishedRequest {
        workflow_id: "work".into(),
        session_id: "no-such-session".into(),
        iteration: 1,
        success: true,
        ..FinishedRequest::default()
    };
    assert_eq!(
        coordinator.finished(&bogus).unwrap(),
        TaskResponse::stale_report()
    );
    assert_eq!(std::fs::read(repo.state_file(&session)).unwrap(), before);
    let late = events_named(repo.root(), &session, "late_report");
    assert_eq!(late.len(), 1, "{late:#?}");
    assert_eq!(late[0]["report"]["session_id"], "no-such-session");
    assert_eq!(late[0]["active_task"], Value::Null);
}

#[test]
fn a_mismatched_finished_is_answered_stale_changes_nothing_and_is_logged() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    let before = std::fs::read(repo.state_file(&session)).unwrap();
    let good = report(&task, true, None);
    let mismatches = [
        FinishedRequest {
            iteration: 2,
            ..good.clone()
        },
        FinishedRequest {
            workflow_id: "work".into(),
            ..good.clone()
        },
        FinishedRequest {
            session_id: "20000101_000000_000000000000_00000000".into(),
            ..good.clone()
        },
    ];
    for request in &mismatches {
        let answer = coordinator.finished(request).unwrap();
        assert_eq!(answer, TaskResponse::stale_report(), "for {request:?}");
        assert!(answer.is_stale_report());
        assert_eq!(
            std::fs::read(repo.state_file(&session)).unwrap(),
            before,
            "state.json changed for {request:?}"
        );
    }
    // Each is in the session's event log as a late report, not a result.
    let events = events_named(repo.root(), &session, "late_report");
    assert_eq!(events.len(), mismatches.len(), "{events:#?}");
    for (event, request) in events.iter().zip(&mismatches) {
        assert_eq!(event["event"], "late_report");
        assert_eq!(event["report"], serde_json::to_value(request).unwrap());
        assert_eq!(event["active_task"]["iteration"], 1);
        assert_eq!(event["active_task"]["workflow_id"], "plan");
    }
    // The matching report is still accepted afterwards.
    let next = coordinator.finished(&good).unwrap();
    assert_run(&next, "work", 2);
    assert_eq!(repo.state_of(&session).history.len(), 1);
}

// ---------------------------------------------------------------- goal check

#[test]
fn a_goal_check_without_its_signal_is_an_invalid_output() {
    let repo = Repo::goal_checking(20, 3, "goal_check", GOAL_CHECK);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    let check = succeed(&coordinator, &plan);
    assert_run(&check, "goal_check", 2);
    // The worker says success, but wrote no goal_check.json.
    let work = succeed(&coordinator, &check);
    assert_run(&work, "work", 3);
    let state = repo.state_of(&session);
    let entry = &state.history[1];
    assert_eq!(entry.workflow_id, "goal_check");
    assert!(!entry.success);
    assert_eq!(entry.error.as_deref(), Some("invalid_goal_check_output"));
    assert_eq!(state.goal_check_consecutive_failures, 1);
    assert_eq!(state.status, LoopStatus::Running);
    // Other workflows need no signal and do not touch the count.
    let check = succeed(&coordinator, &work);
    assert_run(&check, "goal_check", 4);
    let state = repo.state_of(&session);
    assert!(state.history[2].success);
    assert_eq!(state.goal_check_consecutive_failures, 1);
    // A signal of another schema version is no valid signal either.
    write_json(
        &goal_check_path(repo.root(), &session, 4, "goal_check"),
        &json!({"goal_met": false, "reason": "r", "schema_version": 2}),
    );
    assert_run(&succeed(&coordinator, &check), "work", 5);
    let state = repo.state_of(&session);
    assert_eq!(state.goal_check_consecutive_failures, 2);
    assert_eq!(
        state.history[3].error.as_deref(),
        Some("invalid_goal_check_output")
    );
}

#[test]
fn goal_check_failures_reaching_the_cap_break_the_loop() {
    let repo = Repo::goal_checking(20, 2, "goal_check", GOAL_CHECK);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    let first = succeed(&coordinator, &plan);
    assert_run(&first, "goal_check", 2);
    let work = succeed(&coordinator, &first);
    let second = succeed(&coordinator, &work);
    assert_run(&second, "goal_check", 4);
    assert_eq!(repo.state_of(&session).goal_check_consecutive_failures, 1);

    let stop = fail(&coordinator, &second, "trap");
    assert_stop(&stop, "goal_check_broken");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Failed);
    assert_eq!(state.stop_reason.as_deref(), Some("goal_check_broken"));
    assert_eq!(state.goal_check_consecutive_failures, 2);
    assert_eq!(state.iteration_count, 4);
    assert_eq!(state.current_task, None);
    assert_eq!(
        state.history[3].error.as_deref(),
        Some("invalid_goal_check_output")
    );
    // The loop stays stopped for any later call.
    assert_stop(&coordinator.register().unwrap(), "goal_check_broken");
    assert_stop(
        &coordinator.finished(&report(&second, true, None)).unwrap(),
        "goal_check_broken",
    );
}

#[test]
fn a_valid_goal_check_resets_the_failure_count() {
    let repo = Repo::goal_checking(20, 3, "goal_check", GOAL_CHECK);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    // Goal check, then work: finish both, the check without a signal.
    let round = |check: &TaskResponse| -> TaskResponse {
        let work = succeed(&coordinator, check);
        assert_eq!(task_of(&work).1, "work");
        succeed(&coordinator, &work)
    };
    let check = succeed(&coordinator, &plan);
    let check = round(&check); // 2: no signal -> 1
    assert_run(&check, "goal_check", 4);
    assert_eq!(repo.state_of(&session).goal_check_consecutive_failures, 1);
    // A valid verdict resets the count; a met goal alone does not stop the
    // loop (that takes the control signal).
    repo.write_goal_check(&check, true);
    let work = succeed(&coordinator, &check);
    assert_run(&work, "work", 5);
    let state = repo.state_of(&session);
    assert_eq!(state.goal_check_consecutive_failures, 0);
    assert!(state.history[3].success);
    assert_eq!(state.history[3].error, None);
    assert!(!state.goal_met);
    assert_eq!(state.status, LoopStatus::Running);
    // The cap counts consecutive failures: three more are needed now.
    let check = succeed(&coordinator, &work);
    let check = round(&check); // 6 -> 1
    let check = round(&check); // 8 -> 2
    assert_run(&check, "goal_check", 10);
    assert_eq!(repo.state_of(&session).goal_check_consecutive_failures, 2);
    assert_stop(&succeed(&coordinator, &check), "goal_check_broken");
    let state = repo.state_of(&session);
    assert_eq!(state.goal_check_consecutive_failures, 3);
    assert_eq!(state.iteration_count, 10);
}

#[test]
fn a_broken_goal_check_stops_before_control_and_flags_are_weighed() {
    let repo = Repo::goal_checking(20, 1, "goal_check", GOAL_CHECK);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    let check = succeed(&coordinator, &plan);
    assert_run(&check, "goal_check", 2);
    // The step asked to stop with its goal met, and a stop was requested,
    // but it wrote no verdict: the broken goal check wins, and the control
    // file is not applied.
    repo.write_control(&session, &stop_goal());
    repo.edit_state(&session, |state| state.stop_requested = true);
    assert_stop(&succeed(&coordinator, &check), "goal_check_broken");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Failed);
    assert_eq!(state.stop_reason.as_deref(), Some("goal_check_broken"));
    assert!(!state.goal_met, "the control file was not applied");
    assert_eq!(state.iteration_count, 2);
}

#[test]
fn a_workflow_that_emits_goal_check_needs_the_signal_too() {
    let repo = Repo::goal_checking(20, 1, "verify", VERIFY);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    // Plan emits no goal check: no signal needed.
    let verify = succeed(&coordinator, &plan);
    assert_run(&verify, "verify", 2);
    assert_eq!(repo.state_of(&session).goal_check_consecutive_failures, 0);
    repo.write_goal_check(&verify, false);
    let work = succeed(&coordinator, &verify);
    assert_run(&work, "work", 3);
    assert!(repo.state_of(&session).history[1].success);
    let verify = succeed(&coordinator, &work);
    assert_run(&verify, "verify", 4);
    // Cap 1: the first missing signal breaks the loop.
    assert_stop(&succeed(&coordinator, &verify), "goal_check_broken");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Failed);
    assert_eq!(
        state.history[3].error.as_deref(),
        Some("invalid_goal_check_output")
    );
}

#[test]
fn an_orphaned_goal_check_recovered_at_register_is_checked_too() {
    let repo = Repo::goal_checking(20, 3, "goal_check", GOAL_CHECK);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let session = assert_run(&plan, "plan", 1);
    let check = succeed(&coordinator, &plan);
    assert_run(&check, "goal_check", 2);
    drop(coordinator);
    write_json(
        &result_path(repo.root(), &session, 2, "goal_check"),
        &json!({"success": true, "text": "looks done"}),
    );
    let coordinator = repo.resume();
    let next = coordinator.register().unwrap();
    assert_run(&next, "work", 3);
    let state = repo.state_of(&session);
    assert_eq!(
        state.history[1].error.as_deref(),
        Some("invalid_goal_check_output")
    );
    assert_eq!(state.goal_check_consecutive_failures, 1);
}

// ---------------------------------------------------------------- control

#[test]
fn a_control_goal_met_stops_with_goal_met() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.write_control(&session, &stop_goal());
    assert_stop(&succeed(&coordinator, &task), "goal_met");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::GoalMet);
    assert_eq!(state.stop_reason.as_deref(), Some("goal_met"));
    assert!(state.goal_met);
    assert!(state.history[0].success, "the step itself succeeded");
    assert_eq!(state.iteration_count, 1);
    assert_eq!(state.current_task, None);
    assert_stop(&coordinator.register().unwrap(), "goal_met");
}

#[test]
fn a_control_unresolvable_error_fails_the_loop() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.write_control(&session, &stop_stuck());
    assert_stop(&succeed(&coordinator, &task), "unresolvable_error");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Failed);
    assert_eq!(state.stop_reason.as_deref(), Some("unresolvable_error"));
    assert!(state.unresolvable_error);
    assert!(!state.goal_met);
}

#[test]
fn a_running_control_signal_lets_the_loop_go_on() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.write_control(
        &session,
        &json!({"state": "running", "reason": "keep going", "schema_version": 1}),
    );
    assert_run(&succeed(&coordinator, &task), "work", 2);
    // A missing control file is no signal at all.
    std::fs::remove_file(control_path(repo.root(), &session)).unwrap();
    let next = coordinator.register().unwrap(); // abandons work 2
    assert_run(&next, "review", 3);
    assert_eq!(repo.state_of(&session).status, LoopStatus::Running);
}

#[test]
fn an_invalid_control_output_fails_the_step_and_stops() {
    let invalid = [
        "{not json".to_string(),
        // stopped without a stop reason
        json!({"state": "stopped", "reason": "r", "schema_version": 1}).to_string(),
        // a version the coordinator does not know
        json!({"state": "running", "reason": "r", "schema_version": 2}).to_string(),
        // not a state
        json!({"state": "paused", "reason": "r", "schema_version": 1}).to_string(),
    ];
    for text in invalid {
        let repo = Repo::plain(20);
        let coordinator = repo.open();
        let task = coordinator.register().unwrap();
        let session = assert_run(&task, "plan", 1);
        std::fs::write(control_path(repo.root(), &session), &text).unwrap();
        assert_stop(&succeed(&coordinator, &task), "invalid_control_output");
        let state = repo.state_of(&session);
        assert_eq!(state.status, LoopStatus::Failed, "{text}");
        assert_eq!(state.stop_reason.as_deref(), Some("invalid_control_output"));
        assert_eq!(state.history.len(), 1);
        assert!(!state.history[0].success, "{text}");
        assert_eq!(
            state.history[0].error.as_deref(),
            Some("invalid_control_output")
        );
        assert_stop(&coordinator.register().unwrap(), "invalid_control_output");
    }
}

#[test]
fn a_control_signal_found_at_register_stops_before_any_task() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    repo.write_control(&session, &stop_goal());
    assert_stop(&coordinator.register().unwrap(), "goal_met");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::GoalMet);
    assert!(state.history.is_empty());
    assert_eq!(state.current_task, None);

    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    std::fs::write(control_path(repo.root(), &session), "[]").unwrap();
    assert_stop(&coordinator.register().unwrap(), "invalid_control_output");
    assert_eq!(repo.state_of(&session).status, LoopStatus::Failed);
}

// ---------------------------------------------------------------- stop precedence

#[test]
fn stop_precedence_goal_met_then_stop_requested_then_unresolvable_then_max_turns() {
    // (goal_met, stop_requested, unresolvable_error, at max_turns) ->
    // (reason, status)
    let cases = [
        ((true, true, true, true), ("goal_met", LoopStatus::GoalMet)),
        (
            (false, true, true, true),
            ("stop_requested", LoopStatus::Stopped),
        ),
        (
            (false, false, true, true),
            ("unresolvable_error", LoopStatus::Failed),
        ),
        (
            (false, false, false, true),
            ("max_turns", LoopStatus::MaxTurns),
        ),
        (
            (true, false, false, false),
            ("goal_met", LoopStatus::GoalMet),
        ),
        (
            (false, true, false, false),
            ("stop_requested", LoopStatus::Stopped),
        ),
    ];
    for ((goal_met, stop_requested, unresolvable, at_max), (reason, status)) in cases {
        let repo = Repo::plain(4);
        let coordinator = repo.open();
        let session = session_of(&coordinator);
        repo.edit_state(&session, |state| {
            state.goal_met = goal_met;
            state.stop_requested = stop_requested;
            state.unresolvable_error = unresolvable;
            if at_max {
                state.iteration_count = state.max_turns;
            }
        });
        assert_stop(&coordinator.register().unwrap(), reason);
        let state = repo.state_of(&session);
        assert_eq!(state.status, status, "{reason}");
        assert_eq!(state.stop_reason.as_deref(), Some(reason));
        assert_eq!(state.current_task, None);
    }
}

#[test]
fn stop_precedence_holds_for_flags_set_by_the_control_file() {
    // control goal_met beats a stop request in the state.
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.edit_state(&session, |state| state.stop_requested = true);
    repo.write_control(&session, &stop_goal());
    assert_stop(&succeed(&coordinator, &task), "goal_met");
    assert_eq!(repo.state_of(&session).status, LoopStatus::GoalMet);

    // A stop request beats a control unresolvable error.
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.edit_state(&session, |state| state.stop_requested = true);
    repo.write_control(&session, &stop_stuck());
    assert_stop(&succeed(&coordinator, &task), "stop_requested");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Stopped);
    assert!(state.unresolvable_error, "the flag is kept");

    // A control unresolvable error on the last turn beats max_turns.
    let repo = Repo::plain(1);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.write_control(&session, &stop_stuck());
    assert_stop(&succeed(&coordinator, &task), "unresolvable_error");
    assert_eq!(repo.state_of(&session).status, LoopStatus::Failed);

    // A stop request between two steps is honoured at the next finish.
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    repo.edit_state(&session, |state| state.stop_requested = true);
    assert_stop(&succeed(&coordinator, &task), "stop_requested");
    let state = repo.state_of(&session);
    assert_eq!(
        state.history.len(),
        1,
        "the finished step is still recorded"
    );
    assert!(state.history[0].success);
}

#[test]
fn a_terminal_status_keeps_its_reason() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    repo.edit_state(&session, |state| {
        state.status = LoopStatus::Failed;
        state.stop_reason = Some("custom_reason".into());
    });
    assert_stop(&coordinator.register().unwrap(), "custom_reason");
    assert_eq!(repo.state_of(&session).status, LoopStatus::Failed);

    repo.edit_state(&session, |state| {
        state.status = LoopStatus::Stopped;
        state.stop_reason = None;
    });
    assert_stop(&coordinator.register().unwrap(), "stopped");
    assert_eq!(repo.state_of(&session).stop_reason, None);
}

// ---------------------------------------------------------------- max turns

#[test]
fn the_loop_stops_after_max_turns_iterations() {
    let repo = Repo::plain(3);
    let coordinator = repo.open();
    let first = coordinator.register().unwrap();
    let session = assert_run(&first, "plan", 1);
    let second = succeed(&coordinator, &first);
    assert_run(&second, "work", 2);
    let third = fail(&coordinator, &second, "oops");
    assert_run(&third, "review", 3);
    assert_stop(&succeed(&coordinator, &third), "max_turns");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::MaxTurns);
    assert_eq!(state.stop_reason.as_deref(), Some("max_turns"));
    assert_eq!(state.iteration_count, 3);
    let iterations: Vec<u32> = state.history.iter().map(|e| e.iteration).collect();
    assert_eq!(iterations, [1, 2, 3]);
    assert_eq!(state.current_task, None);
    // Later calls, stale or not, keep answering stop.
    assert_stop(&coordinator.register().unwrap(), "max_turns");
    assert_stop(
        &coordinator.finished(&report(&third, true, None)).unwrap(),
        "max_turns",
    );
    assert_eq!(repo.state_of(&session).history.len(), 3);
}

// ---------------------------------------------------------------- no workflow

#[test]
fn no_eligible_workflow_at_register_fails_the_loop() {
    for extra in ["not_before_iteration = 5\n", "enabled = false\n"] {
        let repo = Repo::bare(20, 3);
        repo.workflow("main", "later", extra);
        let coordinator = repo.open();
        let session = session_of(&coordinator);
        assert_stop(&coordinator.register().unwrap(), "no_eligible_workflow");
        let state = repo.state_of(&session);
        assert_eq!(state.status, LoopStatus::Failed, "{extra}");
        assert_eq!(state.stop_reason.as_deref(), Some("no_eligible_workflow"));
        assert_eq!(state.current_task, None);
        assert_stop(&coordinator.register().unwrap(), "no_eligible_workflow");
    }
}

#[test]
fn no_eligible_workflow_after_a_finished_step_fails_the_loop() {
    let repo = Repo::bare(20, 3);
    repo.workflow("main", "once", "run_every = 100\n");
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    let session = assert_run(&task, "once", 1);
    // A failure is retried (run_every waived), not a dead end.
    let retry = fail(&coordinator, &task, "flaky");
    assert_run(&retry, "once", 2);
    assert_stop(&succeed(&coordinator, &retry), "no_eligible_workflow");
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::Failed);
    assert_eq!(state.stop_reason.as_deref(), Some("no_eligible_workflow"));
    assert_eq!(state.iteration_count, 2);
}

// ---------------------------------------------------------------- children

#[test]
fn a_child_session_runs_to_max_turns_then_the_parent_resumes() {
    let repo = Repo::with_children(3);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let parent = assert_run(&plan, "plan", 1);
    let request = repo.request_child(&parent, "0001.json", &child_request("sub"));
    // Other files in the requests directory are not requests.
    let note = child_requests_dir_path(repo.root(), &parent).join("notes.txt");
    std::fs::write(&note, "not a request").unwrap();

    let child_task = succeed(&coordinator, &plan);
    let child = assert_run(&child_task, "step", 1);
    assert_ne!(child, parent);
    assert_eq!(run_of(&child_task).workflow_set, "sub");
    let snapshot = run_of(&child_task).config_snapshot.clone();
    assert_eq!(snapshot.goal, CHILD_GOAL);
    assert_eq!(snapshot.goal_hash, derive_goal_hash(CHILD_GOAL));
    assert_eq!(snapshot.workflow_set, "sub");
    assert_eq!(snapshot.max_turns, 3);
    assert!(child.contains(&derive_goal_hash(CHILD_GOAL)), "{child}");

    // The child's files sit under the parent's children/.
    let child_dir = sessions_root_path(repo.root())
        .join(&parent)
        .join("children")
        .join(&child);
    assert!(child_dir.is_dir(), "{}", child_dir.display());
    assert_eq!(session_dir_path(repo.root(), &child), child_dir);
    let link: ParentLink =
        serde_json::from_slice(&std::fs::read(parent_path(repo.root(), &child)).unwrap()).unwrap();
    assert_eq!(link.parent_session_id, parent);
    assert_eq!(link.parent_relative_path, "../..");
    let children = repo.children_json(&parent);
    assert_eq!(children["schema_version"], 1);
    let records = children["children"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["session_id"], child.as_str());
    assert_eq!(records[0]["workflow_set"], "sub");
    assert_eq!(
        records[0]["goal_hash"],
        derive_goal_hash(CHILD_GOAL).as_str()
    );
    assert_eq!(records[0]["status"], "running");
    assert_eq!(records[0]["completed_at"], Value::Null);
    assert_eq!(records[0]["stop_reason"], Value::Null);
    assert!(records[0]["created_at"].is_string());
    assert!(!request.exists(), "the dispatched request is deleted");
    assert!(note.exists());

    // The parent recorded its step and waits; the child holds the task.
    let parent_state = repo.state_of(&parent);
    assert_eq!(parent_state.iteration_count, 1);
    assert_eq!(parent_state.current_task, None);
    assert_eq!(parent_state.status, LoopStatus::Running);
    let child_state = repo.state_of(&child);
    assert_eq!(
        child_state.parent_session_id.as_deref(),
        Some(parent.as_str())
    );
    assert_eq!(child_state.workflow_set, "sub");
    assert_eq!(child_state.status, LoopStatus::Running);
    assert_eq!(child_state.max_turns, 3);
    let current = child_state.current_task.clone().unwrap();
    assert_eq!(
        (
            current.session_id.as_str(),
            current.workflow_id.as_str(),
            current.iteration
        ),
        (child.as_str(), "step", 1)
    );
    assert_eq!(coordinator.state().unwrap().unwrap(), child_state);

    // A child does not start children of its own.
    let nested = repo.request_child(&child, "0001.json", &child_request("main"));
    let step2 = succeed(&coordinator, &child_task);
    assert_eq!(assert_run(&step2, "tidy", 2), child);
    assert!(nested.exists());
    // A report for the parent's old task is stale: the child's is active.
    assert_eq!(
        coordinator.finished(&report(&plan, true, None)).unwrap(),
        TaskResponse::stale_report()
    );
    let step3 = succeed(&coordinator, &step2);
    assert_eq!(assert_run(&step3, "step", 3), child);

    // The child's last turn ends it; the parent's next task comes back.
    let back = succeed(&coordinator, &step3);
    assert_eq!(assert_run(&back, "work", 2), parent);
    assert_eq!(run_of(&back).workflow_set, "main");
    assert_eq!(run_of(&back).config_snapshot.goal, GOAL);
    let child_state = repo.state_of(&child);
    assert_eq!(child_state.status, LoopStatus::MaxTurns);
    assert_eq!(child_state.history.len(), 3);
    assert!(child_state.history.iter().all(|e| e.session_id == child));
    let records = repo.children_json(&parent)["children"].clone();
    assert_eq!(records.as_array().unwrap().len(), 1);
    assert_eq!(records[0]["status"], "max_turns");
    assert_eq!(records[0]["stop_reason"], "max_turns");
    assert!(records[0]["completed_at"].is_string());
    let parent_state = repo.state_of(&parent);
    assert_eq!(parent_state.current_task.unwrap().iteration, 2);
    assert_eq!(session_of(&coordinator), parent);

    // The parent goes on to its own max_turns.
    let last = succeed(&coordinator, &back);
    assert_eq!(assert_run(&last, "review", 3), parent);
    assert_stop(&succeed(&coordinator, &last), "max_turns");
    assert_eq!(repo.state_of(&parent).status, LoopStatus::MaxTurns);
    assert_eq!(repo.state_of(&parent).history.len(), 3);
}

#[test]
fn a_child_that_meets_its_goal_hands_back_to_the_parent() {
    let repo = Repo::with_children(10);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let parent = assert_run(&plan, "plan", 1);
    // Requests go in name order; an invalid one is skipped and kept.
    let bad = repo.request_child(
        &parent,
        "0001.json",
        &json!({"workflow_set": "sub", "goal": "g", "schema_version": 2}),
    );
    let good = repo.request_child(&parent, "0002.json", &child_request("sub"));
    let later = repo.request_child(&parent, "0003.json", &child_request("sub"));

    let child_task = succeed(&coordinator, &plan);
    let child = assert_run(&child_task, "step", 1);
    assert!(bad.exists());
    assert!(!good.exists());
    assert!(later.exists(), "one child at a time");

    // The child's own control file stops the child, not the parent.
    repo.write_control(&child, &stop_goal());
    let back = succeed(&coordinator, &child_task);
    // The parent's register sees its last step succeeded and the next
    // request waiting: the second child starts straight away.
    let second_child = assert_run(&back, "step", 1);
    assert!(second_child != child && second_child != parent);
    assert!(!later.exists());
    let child_state = repo.state_of(&child);
    assert_eq!(child_state.status, LoopStatus::GoalMet);
    assert_eq!(child_state.stop_reason.as_deref(), Some("goal_met"));
    let records = repo.children_json(&parent)["children"].clone();
    assert_eq!(records.as_array().unwrap().len(), 2);
    assert_eq!(records[0]["session_id"], child.as_str());
    assert_eq!(records[0]["status"], "goal_met");
    assert_eq!(records[0]["stop_reason"], "goal_met");
    assert_eq!(records[1]["session_id"], second_child.as_str());
    assert_eq!(records[1]["status"], "running");
    assert_eq!(repo.state_of(&parent).status, LoopStatus::Running);

    // The second child fails for good; the parent resumes with its work.
    repo.write_control(&second_child, &stop_stuck());
    let back = succeed(&coordinator, &back);
    assert_eq!(assert_run(&back, "work", 2), parent);
    let records = repo.children_json(&parent)["children"].clone();
    assert_eq!(records[1]["status"], "failed");
    assert_eq!(records[1]["stop_reason"], "unresolvable_error");
    let parent_state = repo.state_of(&parent);
    assert_eq!(parent_state.status, LoopStatus::Running);
    assert!(!parent_state.goal_met && !parent_state.unresolvable_error);
    assert!(bad.exists());
}

#[test]
fn a_child_request_after_a_failed_step_is_not_dispatched() {
    let repo = Repo::with_children(10);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let parent = assert_run(&plan, "plan", 1);
    let request = repo.request_child(&parent, "0001.json", &child_request("sub"));
    let next = fail(&coordinator, &plan, "trap");
    assert_eq!(assert_run(&next, "work", 2), parent);
    assert!(request.exists(), "the request waits");
    assert_eq!(
        repo.children_json(&parent)["children"],
        json!([]),
        "no child was created"
    );
    assert!(
        !child_sessions_exist(repo.root(), &parent),
        "no child directory"
    );
    // register after a failure does not dispatch it either.
    let again = coordinator.register().unwrap(); // abandons work 2
    assert_eq!(assert_run(&again, "review", 3), parent);
    assert!(request.exists());
    // The next success does.
    let child_task = succeed(&coordinator, &again);
    let child = assert_run(&child_task, "step", 1);
    assert_ne!(child, parent);
    assert!(!request.exists());
}

#[test]
fn a_child_request_for_an_unknown_workflow_set_is_refused_once_with_its_reason() {
    let repo = Repo::with_children(10);
    let coordinator = repo.open();
    let plan = coordinator.register().unwrap();
    let parent = assert_run(&plan, "plan", 1);
    let request = repo.request_child(&parent, "0001.json", &child_request("nowhere"));
    let next = succeed(&coordinator, &plan);
    assert_eq!(assert_run(&next, "work", 2), parent);
    assert!(!request.exists(), "a refused request is not scanned again");
    let mut refused = request.clone().into_os_string();
    refused.push(".refused");
    assert!(Path::new(&refused).exists(), "it is kept, renamed");
    let refusals = |session: &str| -> Vec<Value> {
        read_events(repo.root(), session)
            .into_iter()
            .filter(|event| event["event"] == "child_request_refused")
            .collect()
    };
    let events = refusals(&parent);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["workflow_set"], "nowhere");
    assert!(
        events[0]["reason"].as_str().unwrap().contains("nowhere"),
        "{events:#?}"
    );
    // Later successes do not refuse it again, and no child was made.
    let next = succeed(&coordinator, &next);
    assert_eq!(assert_run(&next, "review", 3), parent);
    succeed(&coordinator, &next);
    assert_eq!(refusals(&parent).len(), 1);
    assert_eq!(repo.children_json(&parent)["children"], json!([]));
}

#[test]
fn a_child_session_active_at_a_crash_is_resumed_first_then_the_parent() {
    let repo = Repo::with_children(3);
    let (parent, child, step1) = {
        let coordinator = repo.open();
        let plan = coordinator.register().unwrap();
        let parent = assert_run(&plan, "plan", 1);
        repo.request_child(&parent, "0001.json", &child_request("sub"));
        let step1 = succeed(&coordinator, &plan);
        let child = assert_run(&step1, "step", 1);
        (parent, child, step1)
        // The coordinator dies here, with the child's step running.
    };
    // The step had finished and its report was written before the crash.
    let pending = pending_finished_request_path(repo.root(), &child, 1, "step");
    write_json(
        &pending,
        &serde_json::to_value(report(&step1, true, None)).unwrap(),
    );
    let coordinator = repo.resume();
    assert_eq!(session_of(&coordinator), child, "the child resumes first");
    let step2 = coordinator.register().unwrap();
    assert_eq!(assert_run(&step2, "tidy", 2), child);
    assert!(!pending.exists());
    let recovered = repo.state_of(&child);
    assert_eq!(recovered.history.len(), 1);
    assert!(recovered.history[0].success, "{:?}", recovered.history);
    let step3 = succeed(&coordinator, &step2);
    assert_eq!(assert_run(&step3, "step", 3), child);
    drop(coordinator);

    // Killed again during the child's last step, with no result: the step
    // is abandoned, which ends the child, and the parent goes on.
    let coordinator = repo.resume();
    assert_eq!(session_of(&coordinator), child);
    let back = coordinator.register().unwrap();
    assert_eq!(assert_run(&back, "work", 2), parent);
    let child_state = repo.state_of(&child);
    assert_eq!(child_state.status, LoopStatus::MaxTurns);
    assert_eq!(child_state.current_task, None);
    let iterations: Vec<(u32, bool)> = child_state
        .history
        .iter()
        .map(|e| (e.iteration, e.success))
        .collect();
    assert_eq!(iterations, [(1, true), (2, true), (3, false)]);
    assert_eq!(child_state.history[2].error.as_deref(), Some("abandoned"));
    let records = repo.children_json(&parent)["children"].clone();
    assert_eq!(records[0]["status"], "max_turns");
    assert!(records[0]["completed_at"].is_string());

    // A crash after the child ended but before the parent took over: the
    // record is completed on resume and the parent resumes.
    drop(coordinator);
    repo.write(
        &children_path(repo.root(), &parent)
            .strip_prefix(repo.root())
            .unwrap()
            .to_string_lossy(),
        &serde_json::to_string(&json!({"schema_version": 1, "children": [
            {"session_id": child, "workflow_set": "sub", "goal_hash": "x",
             "status": "running", "created_at": "2026-01-01T00:00:00Z"}]}))
        .unwrap(),
    );
    let coordinator = repo.resume();
    assert_eq!(session_of(&coordinator), parent);
    assert_eq!(
        repo.children_json(&parent)["children"][0]["status"],
        "max_turns"
    );
    let last = coordinator.register().unwrap(); // work 2 abandoned
    assert_eq!(assert_run(&last, "review", 3), parent);
    assert_stop(&succeed(&coordinator, &last), "max_turns");
}

fn child_sessions_exist(repo_root: &Path, session: &str) -> bool {
    let dir = session_dir_path(repo_root, session).join("children");
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

// ---------------------------------------------------------------- crash safety

#[test]
fn two_coordinators_on_one_repo_see_the_same_state() {
    let repo = Repo::plain(20);
    let first = repo.open();
    let task = first.register().unwrap();
    let session = assert_run(&task, "plan", 1);
    let second = repo.resume();
    assert_eq!(second.state().unwrap(), first.state().unwrap());

    let next = succeed(&second, &task);
    assert_run(&next, "work", 2);
    let seen = first.state().unwrap().unwrap();
    assert_eq!(seen.iteration_count, 1);
    assert_eq!(seen.current_task.as_ref().unwrap().iteration, 2);
    assert_eq!(Some(seen), second.state().unwrap());

    // The first one's late report of the same task is stale now.
    let before = std::fs::read(repo.state_file(&session)).unwrap();
    assert_eq!(
        first.finished(&report(&task, true, None)).unwrap(),
        TaskResponse::stale_report()
    );
    assert_eq!(std::fs::read(repo.state_file(&session)).unwrap(), before);
    // And either can go on.
    let after = succeed(&first, &next);
    assert_run(&after, "review", 3);
    assert_eq!(second.state().unwrap().unwrap().iteration_count, 2);
}

#[test]
fn concurrent_coordinators_never_lose_or_double_an_iteration() {
    const TURNS: u32 = 30;
    let repo = Repo::plain(TURNS);
    let first = repo.open();
    let session = session_of(&first);
    let second = repo.resume();
    let runs = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for coordinator in [&first, &second] {
            let runs = &runs;
            scope.spawn(move || {
                let mut task = coordinator.register().unwrap();
                while task.action() == TaskAction::Run {
                    runs.fetch_add(1, Ordering::Relaxed);
                    task = succeed(coordinator, &task);
                    // The other side took this task back (a register while
                    // it was out abandons it): ask for a new one, as a
                    // worker does.
                    if task.is_stale_report() {
                        task = coordinator.register().unwrap();
                    }
                }
                assert_stop(&task, "max_turns");
            });
        }
    });
    let state = repo.state_of(&session);
    assert_eq!(state.status, LoopStatus::MaxTurns);
    assert_eq!(state.iteration_count, TURNS);
    let iterations: Vec<u32> = state.history.iter().map(|e| e.iteration).collect();
    assert_eq!(iterations, (1..=TURNS).collect::<Vec<_>>());
    assert!(runs.load(Ordering::Relaxed) >= TURNS as usize);
}

#[test]
fn state_json_is_never_half_written() {
    const TURNS: u32 = 60;
    let repo = Repo::plain(TURNS);
    let coordinator = repo.open();
    let session = session_of(&coordinator);
    let path = repo.state_file(&session);
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut reads = 0u32;
            loop {
                let finished = done.load(Ordering::Acquire);
                // Read without the lock, as a crash-time reader would.
                let bytes = std::fs::read(&path).expect("state.json always exists");
                let state: LoopState = serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                    panic!(
                        "half-written state.json ({error}): {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
                assert_eq!(state.active_session_id, session);
                reads += 1;
                if finished {
                    break reads;
                }
            }
        });
        let mut task = coordinator.register().unwrap();
        let mut calls = 1;
        while task.action() == TaskAction::Run {
            task = if calls % 7 == 0 {
                coordinator.register().unwrap() // abandons, also a write
            } else {
                succeed(&coordinator, &task)
            };
            calls += 1;
        }
        assert_stop(&task, "max_turns");
        done.store(true, Ordering::Release);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    let state = repo.state_of(&session);
    assert_eq!(state.iteration_count, TURNS);
    assert_eq!(state.history.len(), TURNS as usize);
    assert!(
        !path.with_file_name(TEMP_FILENAME).exists(),
        "no temporary file is left behind"
    );
}

// ---------------------------------------------------------------- attempts

fn worker(pid: u32) -> crate::models::WorkerIdentity {
    crate::models::WorkerIdentity {
        hostname: "builder-1".into(),
        pid,
        starttime: Some(format!("linux:boot:{pid}")),
    }
}

#[test]
fn each_hand_out_has_its_own_attempt_kept_with_the_worker_it_went_to() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let first = coordinator.register_as(Some(&worker(7))).unwrap();
    let session = assert_run(&first, "plan", 1);
    let attempt = run_of(&first).attempt_id.clone().unwrap();
    assert_eq!(attempt.len(), 12, "{attempt}");
    let current = repo.state_of(&session).current_task.unwrap();
    assert_eq!(current.attempt_id.as_deref(), Some(attempt.as_str()));
    assert_eq!(current.worker, Some(worker(7)));
    // The next task goes to whoever reported, under a new attempt.
    let report = FinishedRequest {
        worker: Some(worker(8)),
        ..report(&first, true, None)
    };
    let second = coordinator.finished(&report).unwrap();
    assert_run(&second, "work", 2);
    assert_ne!(run_of(&second).attempt_id, Some(attempt));
    assert_eq!(
        repo.state_of(&session).current_task.unwrap().worker,
        Some(worker(8))
    );
}

#[test]
fn a_report_of_another_attempt_is_stale_recorded_and_changes_nothing() {
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register_as(Some(&worker(7))).unwrap();
    let session = assert_run(&task, "plan", 1);
    let before = std::fs::read(repo.state_file(&session)).unwrap();
    let good = FinishedRequest {
        worker: Some(worker(7)),
        ..report(&task, true, None)
    };
    let superseded = FinishedRequest {
        attempt_id: Some("0123456789ab".into()),
        ..good.clone()
    };
    // An identified worker always echoes its attempt: no echo is stale.
    let unechoed = FinishedRequest {
        attempt_id: None,
        ..good.clone()
    };
    for request in [&superseded, &unechoed] {
        assert_eq!(
            coordinator.finished(request).unwrap(),
            TaskResponse::stale_report()
        );
        assert_eq!(std::fs::read(repo.state_file(&session)).unwrap(), before);
    }
    let late = events_named(repo.root(), &session, "late_report");
    assert_eq!(late.len(), 2, "{late:#?}");
    assert_eq!(late[0]["report"]["attempt_id"], "0123456789ab");
    assert_eq!(
        late[0]["active_task"]["attempt_id"],
        json!(run_of(&task).attempt_id)
    );
    assert_run(&coordinator.finished(&good).unwrap(), "work", 2);
}

#[test]
fn a_worker_that_never_echoes_an_attempt_still_reports_by_its_ids() {
    // loopy-loop 0.2.0's worker: no identity, no attempt id.
    let repo = Repo::plain(20);
    let coordinator = repo.open();
    let task = coordinator.register().unwrap();
    assert!(run_of(&task).attempt_id.is_some(), "issued all the same");
    let legacy = FinishedRequest {
        attempt_id: None,
        ..report(&task, true, None)
    };
    assert_run(&coordinator.finished(&legacy).unwrap(), "work", 2);
}

#[test]
fn a_result_json_of_another_attempt_is_not_recovered() {
    let repo = Repo::plain(20);
    let (session, _task) = crash_during_first_task(&repo);
    write_json(
        &result_path(repo.root(), &session, 1, "plan"),
        &json!({"success": true, "text": "an older attempt's", "attempt_id": "ffffffffffff"}),
    );
    let coordinator = repo.resume();
    assert_run(&coordinator.register().unwrap(), "work", 2);
    let entry = &repo.state_of(&session).history[0];
    assert_eq!(
        (entry.success, entry.error.as_deref()),
        (false, Some("abandoned"))
    );
}

#[test]
fn the_event_log_tells_each_task_s_life_with_loopy_loop_s_names() {
    let repo = Repo::plain(3);
    let coordinator = repo.open();
    let plan = coordinator.register_as(Some(&worker(7))).unwrap();
    let session = assert_run(&plan, "plan", 1);
    let work = succeed(&coordinator, &plan);
    // The worker of `work` is lost: the next register takes it back.
    let review = coordinator.register().unwrap();
    assert_run(&review, "review", 3);
    let stop = fail(&coordinator, &review, "trap");
    assert_stop(&stop, "max_turns");

    let events = read_events(repo.root(), &session);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "task_dispatched",
            "task_finished",
            "task_dispatched",
            "iteration_abandoned",
            "task_dispatched",
            "task_finished",
            "session_stopped"
        ]
    );
    let attempt = |task: &TaskResponse| json!(run_of(task).attempt_id);
    assert_eq!(events[0]["workflow_id"], "plan");
    assert_eq!(events[0]["attempt_id"], attempt(&plan));
    assert_eq!(events[0]["worker"]["pid"], 7);
    assert_eq!(
        (&events[1]["success"], &events[1]["recovered"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(events[3]["attempt_id"], attempt(&work));
    assert_eq!(events[3]["error"], "abandoned");
    assert_eq!(events[4]["worker"], Value::Null);
    assert_eq!(events[5]["error"], "trap");
    assert_eq!(events[6]["status"], "max_turns");
    assert_eq!(events[6]["stop_reason"], "max_turns");
    assert!(events.iter().all(|e| e["at"].is_string()));
}
