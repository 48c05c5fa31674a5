//! Running a coordinator's tasks: each `run` task is one step of a
//! workflow plugin in a fresh sandbox, with the workflow's own grants and
//! limits. Mirrors `_run_task` in the reference's `worker.py`: the
//! iteration directory gets `prompt.txt`, `result.json` and
//! `result_text.txt`; the finished request is written to
//! `pending_finished_request.json` *before* it is reported, so a crash
//! between the two loses nothing (the coordinator recovers it on the next
//! `register`); it is removed once the coordinator has it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::config::{
    ConfigError, WorkflowDefinition, load_workflow_definitions, load_workflow_prompt,
};
use super::models::{FinishedRequest, IterationResult, RootConfigSnapshot, RunTask};
use super::sessions::{
    UnsafeIdError, check_path_component, child_requests_dir_path, control_path,
    ensure_iteration_dir, goal_check_path, pending_finished_request_path, prompt_path, result_path,
    result_text_path,
};
use sandloop_core::step::{PluginSpec, SignalTarget, StepExecutor, StepPlugin, StepTask};

/// Why a task could not be run at all (the loop stops: the configuration
/// or the disk is broken, not the step).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The workflow's configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file of the iteration could not be written.
    #[error("{0}")]
    Io(String),
    /// The task names a session, workflow set or workflow that is not one
    /// plain path component (a coordinator's `"../../x"`); it was refused
    /// before anything was written.
    #[error("refused a task from the coordinator: {0}; nothing was written")]
    UnsafeTask(#[from] UnsafeIdError),
}

/// Runs workflow steps for one repository through a [`StepExecutor`];
/// loaded plugins are kept per workflow and shared by every thread.
pub struct StepRunner {
    repo_root: PathBuf,
    executor: Arc<dyn StepExecutor>,
    plugins: Mutex<HashMap<(String, String), Arc<dyn StepPlugin>>>,
}

/// A finished task and where its pending request was written.
pub struct FinishedAssignment {
    /// What to report.
    pub request: FinishedRequest,
    /// `pending_finished_request.json`, to remove once reported.
    pub pending_path: PathBuf,
}

fn io_error(path: &Path, error: impl std::fmt::Display) -> WorkerError {
    WorkerError::Io(format!("cannot write {}: {error}", path.display()))
}

/// The prompt a step receives: the task, then the workflow's `prompt.txt`
/// (reference `_render_prompt`; paths are the session's, relative to the
/// repository, since a plugin sees only what it is granted).
pub fn render_prompt(
    snapshot: &RootConfigSnapshot,
    session_id: &str,
    workflow_set: &str,
    iteration: u32,
    workflow_id: &str,
    emits_goal_check: bool,
    workflow_prompt: &str,
) -> String {
    let mut lines = vec![
        "sandloop loop assignment".to_string(),
        String::new(),
        format!("Goal: {}", snapshot.goal),
        "Completion criteria:".to_string(),
    ];
    lines.extend(
        snapshot
            .completion_criteria
            .iter()
            .map(|item| format!("- {item}")),
    );
    lines.push("Stop criteria:".to_string());
    lines.extend(
        snapshot
            .stop_criteria
            .iter()
            .map(|item| format!("- {item}")),
    );
    lines.extend([
        String::new(),
        format!("Session ID: {session_id}"),
        format!("Workflow set: {workflow_set}"),
        format!("Iteration: {iteration}"),
        format!("Workflow ID: {workflow_id}"),
    ]);
    if emits_goal_check || workflow_id == super::models::GOAL_CHECK_WORKFLOW_ID {
        lines.push("This step must report a goal check (signals.report-goal-check).".into());
    }
    lines.extend([
        String::new(),
        "Workflow body:".to_string(),
        workflow_prompt.to_string(),
    ]);
    format!("{}\n", lines.join("\n").trim_end())
}

/// The task a plugin's step receives for `workflow` at `iteration` of
/// `session_id`, with the rendered `prompt`. `emits_goal_check` is exactly
/// the coordinator's test ([`WorkflowDefinition::expects_goal_check`]).
pub fn step_task(
    workflow: &WorkflowDefinition,
    snapshot: &RootConfigSnapshot,
    session_id: &str,
    iteration: u32,
    prompt: &str,
) -> StepTask {
    StepTask {
        goal: snapshot.goal.clone(),
        completion_criteria: snapshot.completion_criteria.clone(),
        stop_criteria: snapshot.stop_criteria.clone(),
        session_id: session_id.to_string(),
        workflow_set: workflow.workflow_set.clone(),
        workflow_id: workflow.id.clone(),
        iteration,
        prompt: prompt.to_string(),
        emits_goal_check: workflow.expects_goal_check(),
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), WorkerError> {
    sandloop_core::atomic::write_json_atomic(path, value).map_err(|error| io_error(path, error))
}

impl StepRunner {
    /// A runner for the repository at `repo_root` whose steps run through
    /// `executor`.
    pub fn new(repo_root: &Path, executor: Arc<dyn StepExecutor>) -> Self {
        Self {
            repo_root: repo_root.to_path_buf(),
            executor,
            plugins: Mutex::new(HashMap::new()),
        }
    }

    fn plugin(&self, workflow: &WorkflowDefinition) -> Result<Arc<dyn StepPlugin>, String> {
        let key = (workflow.workflow_set.clone(), workflow.id.clone());
        if let Some(plugin) = self
            .plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(plugin));
        }
        let spec = PluginSpec {
            plugin_path: workflow.plugin_path.clone(),
            limits: workflow
                .config
                .limits()
                .map_err(|error| format!("{}: {error}", workflow.id))?,
            dirs: workflow
                .dir_grants(&self.repo_root)
                .map_err(|error| error.to_string())?,
            env: workflow.config.env.clone(),
            http_hosts: workflow.config.http_hosts.clone(),
            allow_private_addresses: workflow.config.allow_private_addresses,
        };
        let plugin = self.executor.load(&spec)?;
        self.plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::clone(&plugin));
        Ok(plugin)
    }

    /// Load every workflow's plugin and grants now, so a plugin that is not
    /// a workflow component, or a grant that cannot be given, is reported
    /// before the loop starts. Returns every problem, each naming the
    /// workflow's `workflow.toml`.
    pub fn check_plugins(&self, workflows: &[WorkflowDefinition]) -> Result<(), Vec<String>> {
        let problems: Vec<String> = workflows
            .iter()
            .filter(|workflow| workflow.config.enabled)
            .filter_map(|workflow| {
                self.plugin(workflow)
                    .err()
                    .map(|error| format!("{}: plugin: {error}", workflow.config_path.display()))
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Run the `run` task `task` (reference `_run_task`). A step that fails
    /// — the plugin's own failure, a trap, a deadline, a plugin that cannot
    /// be loaded — is a failed finished request, not an error: the loop
    /// goes on. A task whose `session_id`, `workflow_set` or `workflow_id`
    /// is not one plain path component ([`check_path_component`]) is
    /// refused with [`WorkerError::UnsafeTask`] before anything is read or
    /// written: a worker trusts no id a coordinator sends.
    pub fn run_task(&self, task: &RunTask) -> Result<FinishedAssignment, WorkerError> {
        let RunTask {
            session_id,
            workflow_set,
            workflow_id,
            iteration,
            config_snapshot: snapshot,
            ..
        } = task;
        check_path_component("session_id", session_id)?;
        check_path_component("workflow_set", workflow_set)?;
        check_path_component("workflow_id", workflow_id)?;
        let iteration = *iteration;
        let workflows = load_workflow_definitions(&self.repo_root, workflow_set)?;
        let workflow = workflows
            .iter()
            .find(|workflow| workflow.id == *workflow_id)
            .ok_or_else(|| {
                WorkerError::Io(format!(
                    "workflow {workflow_id:?} is not in set {workflow_set:?}"
                ))
            })?;
        let body = load_workflow_prompt(workflow)?;
        ensure_iteration_dir(&self.repo_root, session_id, iteration, workflow_id)
            .map_err(|error| WorkerError::Io(error.to_string()))?;
        let prompt = render_prompt(
            snapshot,
            session_id,
            workflow_set,
            iteration,
            workflow_id,
            workflow.expects_goal_check(),
            &body,
        );
        let prompt_file = prompt_path(&self.repo_root, session_id, iteration, workflow_id);
        std::fs::write(&prompt_file, &prompt).map_err(|error| io_error(&prompt_file, error))?;

        let outcome = match self.plugin(workflow) {
            Err(error) => IterationResult {
                success: false,
                text: None,
                error: Some(error),
                attempt_id: task.attempt_id.clone(),
                ..IterationResult::default()
            },
            Ok(plugin) => {
                let step = step_task(workflow, snapshot, session_id, iteration, &prompt);
                let target = SignalTarget {
                    goal_check: goal_check_path(
                        &self.repo_root,
                        session_id,
                        iteration,
                        workflow_id,
                    ),
                    control: control_path(&self.repo_root, session_id),
                    child_requests: child_requests_dir_path(&self.repo_root, session_id),
                    iteration,
                };
                let outcome = plugin.run_step(&step, target);
                IterationResult {
                    success: outcome.success,
                    text: outcome.text,
                    error: outcome.error,
                    harness_run_id: plugin.run_id(),
                    attempt_id: task.attempt_id.clone(),
                    ..IterationResult::default()
                }
            }
        };
        write_json(
            &result_path(&self.repo_root, session_id, iteration, workflow_id),
            &outcome,
        )?;
        if let Some(text) = &outcome.text {
            let path = result_text_path(&self.repo_root, session_id, iteration, workflow_id);
            std::fs::write(&path, text).map_err(|error| io_error(&path, error))?;
        }
        let request = FinishedRequest {
            workflow_id: workflow_id.to_string(),
            session_id: session_id.to_string(),
            iteration,
            success: outcome.success,
            text: outcome.text,
            error: outcome.error,
            attempt_id: task.attempt_id.clone(),
            worker: None,
        };
        let pending_path =
            pending_finished_request_path(&self.repo_root, session_id, iteration, workflow_id);
        write_json(&pending_path, &request)?;
        Ok(FinishedAssignment {
            request,
            pending_path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::run_preflight;

    #[test]
    fn the_plugin_is_told_to_report_a_goal_check_exactly_when_the_coordinator_demands_one() {
        let dir = tempfile::tempdir().unwrap();
        let write = |relative: &str, text: &str| {
            let path = dir.path().join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "sandloop-loop.toml",
            "goal_file = \"goal.txt\"\nworkflow_set = \"main\"\nmax_turns = 5\n",
        );
        write("goal.txt", "Count.\n");
        write("step.wasm", "");
        let workflows = ".sandloop/workflow_sets/main/workflows";
        for (id, extra) in [
            ("goal_check", ""),
            ("verify", "emits_goal_check = true\n"),
            ("work", ""),
        ] {
            write(
                &format!("{workflows}/{id}/workflow.toml"),
                &format!("plugin = \"step.wasm\"\n{extra}"),
            );
            write(&format!("{workflows}/{id}/prompt.txt"), "Do it.\n");
        }
        let preflight = run_preflight(dir.path(), None, None).unwrap();
        let snapshot = preflight.root_config.snapshot();
        for workflow in &preflight.workflows {
            let task = step_task(workflow, &snapshot, "s1", 2, "prompt");
            assert_eq!(
                task.emits_goal_check,
                workflow.expects_goal_check(),
                "{}",
                workflow.id
            );
            assert_eq!(
                task.emits_goal_check,
                workflow.id != "work",
                "{}",
                workflow.id
            );
            assert_eq!(
                (task.workflow_id.as_str(), task.iteration),
                (workflow.id.as_str(), 2)
            );
        }
    }
}
