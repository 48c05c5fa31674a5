//! One step of a loop, as the coordinator sees it: the task a step gets,
//! where its signals go, what it produced, and the two traits a step runs
//! through. `sandloop-loop` drives steps only through [`StepExecutor`] and
//! [`StepPlugin`]; `sandloop-sandbox` implements them for workflow
//! components (WIT world `workflow`), so the coordinator never sees wasmtime
//! or WIT types.

use std::path::PathBuf;
use std::sync::Arc;

use crate::dir_grant::DirGrant;
use crate::limits::SandboxLimits;

/// The task of one step (WIT `step.task`; the reference renders the same
/// fields into its prompt, `worker.py` `_render_prompt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTask {
    /// The loop's goal.
    pub goal: String,
    /// The root config's completion criteria, in order.
    pub completion_criteria: Vec<String>,
    /// The root config's stop criteria, in order.
    pub stop_criteria: Vec<String>,
    /// The session the step belongs to.
    pub session_id: String,
    /// The session's workflow set.
    pub workflow_set: String,
    /// The workflow this step runs.
    pub workflow_id: String,
    /// 1-based iteration of the session.
    pub iteration: u32,
    /// The workflow's `prompt.txt`, rendered with the task.
    pub prompt: String,
    /// Whether this step must report a goal check.
    pub emits_goal_check: bool,
}

/// Where a step's signals go: the files of its iteration and session, which
/// the coordinator reads (so crash recovery works from the files alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalTarget {
    /// `goal_check.json` of the iteration.
    pub goal_check: PathBuf,
    /// `control.json` of the session.
    pub control: PathBuf,
    /// `child_requests/` of the session.
    pub child_requests: PathBuf,
    /// The iteration, naming child request files.
    pub iteration: u32,
}

/// What a step produced (reference `IterationResult`: `success`, `text`,
/// `error`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Whether the step succeeded.
    pub success: bool,
    /// Its text.
    pub text: Option<String>,
    /// Why it failed: the plugin's own error, or the host's class of a trap,
    /// deadline or limit (`trap: ...`, `deadline: ...`, `memory_limit: ...`).
    pub error: Option<String>,
}

/// A workflow's plugin and everything it runs with, read from its
/// `workflow.toml`.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// The plugin's file.
    pub plugin_path: PathBuf,
    /// The plugin instance's limits: the sandbox's defaults with the
    /// workflow's `max_memory_mib` and `call_timeout_secs` (the deadline of
    /// one step) over them.
    pub limits: SandboxLimits,
    /// Directories granted to the plugin, already resolved beneath the
    /// repository (see [`crate::dir_grant`]).
    pub dirs: Vec<DirGrant>,
    /// `KEY=VALUE` environment variables granted to the plugin.
    pub env: Vec<String>,
    /// Hosts the plugin may reach over outgoing HTTP; empty: none.
    pub http_hosts: Vec<String>,
    /// Whether those hosts may be reached at loopback, private, link-local
    /// or unique-local addresses (the workflow's `allow_private_addresses`);
    /// false: only at public ones.
    pub allow_private_addresses: bool,
}

/// Loads plugins. One executor serves every workflow of a coordinator and
/// may share an engine between them.
pub trait StepExecutor: Send + Sync {
    /// Load the plugin `spec` describes. The error is a message naming the
    /// plugin's file (unreadable, not a workflow plugin, a grant that cannot
    /// be given).
    fn load(&self, spec: &PluginSpec) -> Result<Arc<dyn StepPlugin>, String>;
}

/// A loaded plugin, ready to run steps (each in its own sandbox).
pub trait StepPlugin: Send + Sync {
    /// A short, stable name of the plugin's bytes (the first 12 hex digits of
    /// its sha256), recorded as the step's `harness_run_id`.
    fn run_id(&self) -> String;

    /// Run one step with `target` for its signals. A trap, deadline or limit
    /// is a failed outcome (`error` says which), never an error of the host.
    fn run_step(&self, task: &StepTask, target: SignalTarget) -> StepOutcome;
}
