//! Records of the loop coordinator: the loop state kept on disk, the tasks
//! handed to workers, the history of finished iterations and the signals a
//! workflow plugin writes. Mirrors `models.py` in the reference.
//!
//! Field names and JSON keys are the reference's, so state and signal files
//! stay comparable with it. Differences, all deliberate:
//! - timestamps are kept as RFC 3339 UTC strings (see [`utc_now`]) rather
//!   than parsed date-times;
//! - [`RootConfigSnapshot`] carries the reference's `team_harness_*` fields
//!   only as inert placeholders ([`TeamHarnessFields`], always empty), so
//!   the `/register` and `/finished` answers validate against the
//!   reference's pydantic models: a workflow step here is a sandboxed WASM
//!   component, configured per workflow (see
//!   [`super::config::WorkflowConfig`]), not an agent team;
//! - [`RootConfigSnapshot`] ignores unknown keys where the reference
//!   refuses them, so a worker accepts what a newer reference coordinator
//!   sends;
//! - serde is strict where pydantic is lax (`"1"` is not an integer, `"yes"`
//!   is not a boolean).
//!
//! Records the reference declares with `extra="forbid"` refuse unknown keys
//! (`deny_unknown_fields`); the others ignore them, as pydantic does by
//! default. `Option` fields serialise as `null` and may be missing on input.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize};

/// Seconds to wait for the state-file lock before giving up (reference
/// `DEFAULT_LOCK_TIMEOUT_SECONDS`).
pub const DEFAULT_LOCK_TIMEOUT_SECONDS: f64 = 30.0;

/// The only `schema_version` a [`ControlSignal`] may carry (reference
/// `CONTROL_SCHEMA_VERSION`).
pub const CONTROL_SCHEMA_VERSION: i64 = 1;

/// The only `schema_version` a [`GoalCheckSignal`] may carry, and its default
/// (reference `GOAL_CHECK_SCHEMA_VERSION`).
pub const GOAL_CHECK_SCHEMA_VERSION: i64 = 1;

/// The only `schema_version` a [`ChildSessionRequest`] may carry, and its
/// default (a literal `1` in the reference's validator).
pub const CHILD_SESSION_SCHEMA_VERSION: i64 = 1;

/// `action` of a [`TaskResponse`] that hands a worker a task (reference
/// `RUN_ACTION`); the JSON spelling of [`TaskAction::Run`].
pub const RUN_ACTION: &str = "run";

/// `action` of a [`TaskResponse`] that tells a worker to stop (reference
/// `STOP_ACTION`); the JSON spelling of [`TaskAction::Stop`].
pub const STOP_ACTION: &str = "stop";

/// `stop_reason` of the answer to a stale `/finished` (a report for a task
/// that is no longer the active one): nothing was recorded and nothing is
/// handed out to its sender; the report is logged as a late report in the
/// session's `events.jsonl`. The answer is a stop, so a loopy-loop worker
/// ends cleanly; `sandloop loop worker` asks for a new task instead.
pub const STALE_REPORT: &str = "stale_report";

/// Largest `/finished` body `sandloop loop serve` reads, bytes (1 MiB). A
/// larger body is answered 413 naming both sizes; `sandloop loop worker`
/// cuts a step's text so its report fits (the iteration's files keep the
/// whole text).
pub const MAX_REPORT_BYTES: usize = 1 << 20;

/// Workflow id with built-in meaning: it must write a [`GoalCheckSignal`]
/// and is never scheduled before some other workflow has succeeded
/// (reference `GOAL_CHECK_WORKFLOW_ID` in `cli.py`, and the `"goal_check"`
/// literals in `scheduler.py` and `coordinator_app.py`).
pub const GOAL_CHECK_WORKFLOW_ID: &str = "goal_check";

/// The current UTC time at second precision as RFC 3339, e.g.
/// `"2026-11-29T23:30:00Z"`. Mirrors `utc_now` in the reference
/// (`datetime.now(UTC).replace(microsecond=0)`), serialised the way pydantic
/// writes a UTC date-time.
pub fn utc_now() -> String {
    format_utc_seconds(SystemTime::now())
}

/// `at` as RFC 3339 UTC at second precision (sub-second part dropped), e.g.
/// `"2026-11-29T23:30:00Z"`; the formatting behind [`utc_now`].
pub fn format_utc_seconds(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Root configuration frozen into a loop's state when its session starts, so
/// a running loop is not changed by later edits of `sandloop-loop.toml`.
/// Mirrors `RootConfigSnapshot` in the reference; its `team_harness_*`
/// fields are inert ([`TeamHarnessFields`]). Unknown keys are ignored (the
/// reference refuses them), so a snapshot from a loopy-loop coordinator is
/// accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootConfigSnapshot {
    /// Goal text (the trimmed contents of the goal file).
    pub goal: String,
    /// First 12 hex digits of the goal's SHA-256 (see
    /// [`super::config::derive_goal_hash`]).
    pub goal_hash: String,
    /// Workflow set the session runs.
    pub workflow_set: String,
    /// Observable criteria used by workflows and goal checks.
    pub completion_criteria: Vec<String>,
    /// Conditions that should stop the loop before the goal is met.
    pub stop_criteria: Vec<String>,
    /// Maximum number of completed iterations.
    pub max_turns: u32,
    /// Consecutive invalid goal-check outputs allowed before the loop fails
    /// with `goal_check_broken`.
    pub goal_check_consecutive_failures_cap: u32,
    /// The reference's agent-team settings, inert here.
    #[serde(flatten)]
    pub team_harness: TeamHarnessFields,
}

/// The `team_harness_*` fields of the reference's `RootConfigSnapshot`,
/// which configure the coding-agent team a loopy-loop worker runs. sandloop
/// runs a WASM component per workflow instead and never reads them: they
/// are written with inert values (empty strings, lists and maps, `null`
/// retry settings) only so the snapshot validates against the reference's
/// pydantic model (which requires six of them), and read leniently (each
/// defaults when missing; a loopy-loop coordinator's values are kept but
/// not used).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamHarnessFields {
    /// Agent provider; inert, default `""`.
    #[serde(default)]
    pub team_harness_provider: String,
    /// Agent model; inert, default `""`.
    #[serde(default)]
    pub team_harness_model: String,
    /// Agent names; inert, default empty.
    #[serde(default)]
    pub team_harness_agents: Vec<String>,
    /// Model per agent; inert, default empty.
    #[serde(default)]
    pub team_harness_agent_models: std::collections::BTreeMap<String, String>,
    /// Reasoning effort per agent; inert, default empty.
    #[serde(default)]
    pub team_harness_agent_reasoning_efforts: std::collections::BTreeMap<String, String>,
    /// Retry count; inert, default `null`.
    #[serde(default)]
    pub team_harness_max_retries: Option<i64>,
    /// First retry delay in seconds; inert, default `null`.
    #[serde(default)]
    pub team_harness_retry_base_delay_s: Option<serde_json::Number>,
    /// Longest retry delay in seconds; inert, default `null`.
    #[serde(default)]
    pub team_harness_retry_max_delay_s: Option<serde_json::Number>,
    /// Agent API base URL; inert, default `""`.
    #[serde(default)]
    pub team_harness_api_base: String,
    /// Environment variable holding the agent API key; inert, default `""`.
    #[serde(default)]
    pub team_harness_api_key_env: String,
    /// Extra system prompt for the agents; inert, default `""`.
    #[serde(default)]
    pub team_harness_system_prompt_extension: String,
}

/// Who a worker process is (loopy-loop 0.3+ `WorkerIdentity`): sent on
/// `/register` and `/finished` as `worker`, kept with the task it was
/// handed. `starttime` tells a recycled pid from the same process:
/// `linux:<boot_id>:<start ticks>` (field 22 of `/proc/PID/stat`), or
/// `null` where it cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerIdentity {
    /// The worker's host name.
    pub hostname: String,
    /// The worker's process id.
    pub pid: u32,
    /// When the process started, as above.
    #[serde(default)]
    pub starttime: Option<String>,
}

/// The body of `POST /register` (loopy-loop 0.3+ `RegisterRequest`). A
/// body that is empty or `{}` (loopy-loop 0.2.0's worker) registers an
/// unidentified worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// The worker asking for a task.
    #[serde(default)]
    pub worker: Option<WorkerIdentity>,
}

/// The task a worker is running now (reference `CurrentTask`). Set when a
/// task is handed out, cleared when it finishes or is found abandoned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentTask {
    /// Workflow set of the task.
    pub workflow_set: String,
    /// Workflow being run.
    pub workflow_id: String,
    /// Session the task belongs to.
    pub session_id: String,
    /// 1-based iteration number (`iteration_count + 1` when handed out).
    pub iteration: u32,
    /// When the task was handed out (RFC 3339 UTC, see [`utc_now`]).
    pub started_at: String,
    /// The worker the task was handed to, when it said who it is
    /// (loopy-loop 0.3+); absent for a loopy-loop 0.2.0 worker and for
    /// `loop run`'s own steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerIdentity>,
    /// This hand-out of the task (loopy-loop 0.4+: 12 lowercase hex
    /// digits), echoed by the worker's `/finished`; absent only in state
    /// written before attempts existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
}

/// `action` of a [`TaskResponse`]: `"run"` or `"stop"` (reference
/// `Literal["run", "stop"]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    /// Run the task named in the response ([`RUN_ACTION`]).
    Run,
    /// Stop; `stop_reason` says why ([`STOP_ACTION`]).
    Stop,
}

impl TaskAction {
    /// The JSON spelling: [`RUN_ACTION`] or [`STOP_ACTION`].
    pub fn as_str(self) -> &'static str {
        match self {
            TaskAction::Run => RUN_ACTION,
            TaskAction::Stop => STOP_ACTION,
        }
    }
}

/// What the coordinator answers to `/register` and `/finished` (reference
/// `TaskResponse`): a task to run, or a stop with its reason.
///
/// On the wire it is the reference's flat object — `action` (`"run"` or
/// `"stop"`) and every other field present, `null` where it does not apply —
/// so reference workers read it unchanged. A `run` answer that lacks one of
/// its fields is refused when read, naming the fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "TaskResponseWire", try_from = "TaskResponseWire")]
pub enum TaskResponse {
    /// Run one step (boxed: a task is large, a stop is small).
    Run(Box<RunTask>),
    /// The loop stopped, or this worker's report came too late.
    Stop {
        /// Why, e.g. `"goal_met"`, `"max_turns"`, `"no_eligible_workflow"`,
        /// [`STALE_REPORT`].
        stop_reason: Option<String>,
    },
}

/// The task of a `run` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunTask {
    /// Workflow set of the task.
    pub workflow_set: String,
    /// Workflow to run.
    pub workflow_id: String,
    /// Session of the task.
    pub session_id: String,
    /// Iteration of the task (1-based).
    pub iteration: u32,
    /// This hand-out of the task, to echo in `/finished` (loopy-loop 0.4+;
    /// `None` from a coordinator that does not issue attempts).
    pub attempt_id: Option<String>,
    /// Config snapshot of the session.
    pub config_snapshot: RootConfigSnapshot,
}

/// The reference's flat `TaskResponse`, as it travels.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TaskResponseWire {
    action: TaskAction,
    #[serde(default)]
    workflow_set: Option<String>,
    #[serde(default)]
    workflow_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    iteration: Option<u32>,
    #[serde(default)]
    attempt_id: Option<String>,
    #[serde(default)]
    config_snapshot: Option<RootConfigSnapshot>,
    #[serde(default)]
    stop_reason: Option<String>,
}

impl From<TaskResponse> for TaskResponseWire {
    fn from(response: TaskResponse) -> Self {
        match response {
            TaskResponse::Run(task) => {
                let task = *task;
                Self {
                    action: TaskAction::Run,
                    workflow_set: Some(task.workflow_set),
                    workflow_id: Some(task.workflow_id),
                    session_id: Some(task.session_id),
                    iteration: Some(task.iteration),
                    attempt_id: task.attempt_id,
                    config_snapshot: Some(task.config_snapshot),
                    stop_reason: None,
                }
            }
            TaskResponse::Stop { stop_reason } => Self {
                action: TaskAction::Stop,
                workflow_set: None,
                workflow_id: None,
                session_id: None,
                iteration: None,
                attempt_id: None,
                config_snapshot: None,
                stop_reason,
            },
        }
    }
}

impl TryFrom<TaskResponseWire> for TaskResponse {
    type Error = String;

    fn try_from(wire: TaskResponseWire) -> Result<Self, String> {
        if wire.action == TaskAction::Stop {
            return Ok(TaskResponse::Stop {
                stop_reason: wire.stop_reason,
            });
        }
        let missing: Vec<&str> = [
            ("workflow_set", wire.workflow_set.is_none()),
            ("workflow_id", wire.workflow_id.is_none()),
            ("session_id", wire.session_id.is_none()),
            ("iteration", wire.iteration.is_none()),
            ("config_snapshot", wire.config_snapshot.is_none()),
        ]
        .into_iter()
        .filter_map(|(field, absent)| absent.then_some(field))
        .collect();
        match (
            wire.workflow_set,
            wire.workflow_id,
            wire.session_id,
            wire.iteration,
            wire.config_snapshot,
        ) {
            (
                Some(workflow_set),
                Some(workflow_id),
                Some(session_id),
                Some(iteration),
                Some(config_snapshot),
            ) => Ok(TaskResponse::Run(Box::new(RunTask {
                workflow_set,
                workflow_id,
                session_id,
                iteration,
                attempt_id: wire.attempt_id,
                config_snapshot,
            }))),
            _ => Err(format!(
                "a run task without {} (each must be given for action \"run\")",
                missing.join(", ")
            )),
        }
    }
}

impl TaskResponse {
    /// A run response for `task` (mirrors `_build_run_response` in the
    /// reference's `coordinator_app.py`).
    pub fn run(task: &CurrentTask, config_snapshot: &RootConfigSnapshot) -> Self {
        TaskResponse::Run(Box::new(RunTask {
            workflow_set: task.workflow_set.clone(),
            workflow_id: task.workflow_id.clone(),
            session_id: task.session_id.clone(),
            iteration: task.iteration,
            attempt_id: task.attempt_id.clone(),
            config_snapshot: config_snapshot.clone(),
        }))
    }

    /// A stop response carrying `stop_reason`.
    pub fn stop(stop_reason: impl Into<String>) -> Self {
        TaskResponse::Stop {
            stop_reason: Some(stop_reason.into()),
        }
    }

    /// The answer to a stale report: a stop with [`STALE_REPORT`].
    pub fn stale_report() -> Self {
        Self::stop(STALE_REPORT)
    }

    /// True for the answer to a stale report ([`TaskResponse::stale_report`]).
    pub fn is_stale_report(&self) -> bool {
        self.stop_reason() == Some(STALE_REPORT)
    }

    /// Run or stop, as the wire's `action` says it.
    pub fn action(&self) -> TaskAction {
        match self {
            TaskResponse::Run(_) => TaskAction::Run,
            TaskResponse::Stop { .. } => TaskAction::Stop,
        }
    }

    /// The task to run, if this is a `run` answer.
    pub fn task(&self) -> Option<&RunTask> {
        match self {
            TaskResponse::Run(task) => Some(task.as_ref()),
            TaskResponse::Stop { .. } => None,
        }
    }

    /// Why the loop stopped, if this is a `stop` answer that says.
    pub fn stop_reason(&self) -> Option<&str> {
        match self {
            TaskResponse::Run(_) => None,
            TaskResponse::Stop { stop_reason } => stop_reason.as_deref(),
        }
    }
}

/// One finished (or abandoned) iteration in a loop's history (reference
/// `HistoryEntry`). The scheduler reads these; see
/// `scheduler::choose_next_workflow`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// 1-based iteration number.
    pub iteration: u32,
    /// Workflow set the workflow belongs to.
    pub workflow_set: String,
    /// Workflow that ran.
    pub workflow_id: String,
    /// Session it ran in.
    pub session_id: String,
    /// Whether it succeeded (after the coordinator's own checks: an invalid
    /// goal-check or control output turns a success into a failure).
    pub success: bool,
    /// Why it failed, e.g. `"abandoned"`, `"invalid_goal_check_output"`.
    pub error: Option<String>,
    /// When the task was handed out (RFC 3339 UTC).
    pub started_at: String,
    /// When the coordinator recorded the result (RFC 3339 UTC).
    pub finished_at: String,
}

/// Status of a loop (reference `LoopState.status`), serialised snake_case:
/// `running`, `stopped`, `goal_met`, `failed`, `max_turns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopStatus {
    /// The loop is running (the default).
    #[default]
    Running,
    /// Stopped on request.
    Stopped,
    /// The goal was met.
    GoalMet,
    /// Failed: unresolvable error, broken goal check, invalid control output
    /// or no eligible workflow.
    Failed,
    /// `max_turns` iterations completed.
    MaxTurns,
}

impl LoopStatus {
    /// The JSON spelling, e.g. `"goal_met"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LoopStatus::Running => "running",
            LoopStatus::Stopped => "stopped",
            LoopStatus::GoalMet => "goal_met",
            LoopStatus::Failed => "failed",
            LoopStatus::MaxTurns => "max_turns",
        }
    }

    /// True for every status but `running` (mirrors `TERMINAL_STATUSES` in
    /// the reference's `state_store.py`).
    pub fn is_terminal(self) -> bool {
        self != LoopStatus::Running
    }
}

impl fmt::Display for LoopStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one session's loop, one `state.json` per session (reference
/// `LoopState`). Fields with a default may be missing on input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopState {
    /// Loop status; default `running`.
    #[serde(default)]
    pub status: LoopStatus,
    /// Goal hash of the session.
    pub goal_hash: String,
    /// Workflow set the session runs.
    pub workflow_set: String,
    /// Parent session when this is a child session.
    #[serde(default)]
    pub parent_session_id: Option<String>,
    /// Maximum number of completed iterations.
    pub max_turns: u32,
    /// This session's id.
    pub active_session_id: String,
    /// Set by a `stopped`/`goal_met` control signal; default false.
    #[serde(default)]
    pub goal_met: bool,
    /// Set by `sandloop stop`; default false.
    #[serde(default)]
    pub stop_requested: bool,
    /// Set by a `stopped`/`unresolvable_error` control signal; default false.
    #[serde(default)]
    pub unresolvable_error: bool,
    /// Why the loop stopped, once it has.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Completed (or abandoned) iterations; default 0.
    #[serde(default)]
    pub iteration_count: u32,
    /// Invalid goal-check outputs in a row; default 0.
    #[serde(default)]
    pub goal_check_consecutive_failures: u32,
    /// The task handed out and not yet finished.
    #[serde(default)]
    pub current_task: Option<CurrentTask>,
    /// Finished iterations, oldest first; default empty.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Root config frozen at session start.
    pub config_snapshot: RootConfigSnapshot,
}

impl LoopState {
    /// A fresh running state for session `active_session_id`, taking
    /// `goal_hash`, `workflow_set` and `max_turns` from `config_snapshot`
    /// (as the reference's `_write_fresh_state` and child-session dispatch
    /// do), every counter at zero and no history.
    pub fn new(
        active_session_id: impl Into<String>,
        parent_session_id: Option<String>,
        config_snapshot: RootConfigSnapshot,
    ) -> Self {
        Self {
            status: LoopStatus::Running,
            goal_hash: config_snapshot.goal_hash.clone(),
            workflow_set: config_snapshot.workflow_set.clone(),
            parent_session_id,
            max_turns: config_snapshot.max_turns,
            active_session_id: active_session_id.into(),
            goal_met: false,
            stop_requested: false,
            unresolvable_error: false,
            stop_reason: None,
            iteration_count: 0,
            goal_check_consecutive_failures: 0,
            current_task: None,
            history: Vec::new(),
            config_snapshot,
        }
    }
}

/// What a worker posts to `/finished` (reference `FinishedRequest`); also
/// persisted locally as `pending_finished_request.json` for crash recovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedRequest {
    /// Workflow that ran.
    pub workflow_id: String,
    /// Session it ran in.
    pub session_id: String,
    /// Iteration it ran as.
    pub iteration: u32,
    /// Whether the workflow plugin succeeded.
    pub success: bool,
    /// Text the plugin returned.
    #[serde(default)]
    pub text: Option<String>,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The task's `attempt_id`, echoed (loopy-loop 0.4+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
    /// The reporting worker (loopy-loop 0.3+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerIdentity>,
}

impl FinishedRequest {
    /// True when the request is for `task` (loopy-loop 0.4's
    /// `_matches_current_task`): same session, workflow and iteration, and
    /// the same attempt. A request without an `attempt_id` matches by the
    /// other three only when the task went to a worker that did not say
    /// who it is (loopy-loop 0.2.0's, which never echoes one); a worker
    /// that identifies itself always echoes, so its missing echo is stale.
    pub fn matches_task(&self, task: &CurrentTask) -> bool {
        let same_attempt = match (&task.attempt_id, &self.attempt_id) {
            (Some(issued), Some(echoed)) => issued == echoed,
            (Some(_), None) => task.worker.is_none(),
            (None, _) => true,
        };
        self.session_id == task.session_id
            && self.workflow_id == task.workflow_id
            && self.iteration == task.iteration
            && same_attempt
    }
}

/// A signal record broke one of the reference's validators. `field` names
/// the JSON key; the display reads `field: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The offending JSON key, e.g. `schema_version`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

fn check_schema_version(value: i64, expected: i64) -> Result<(), ValidationError> {
    if value == expected {
        Ok(())
    } else {
        Err(ValidationError {
            field: "schema_version",
            message: format!("must equal {expected}, got {value}"),
        })
    }
}

/// `state` of a [`ControlSignal`]: `running` or `stopped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlState {
    /// Keep looping.
    Running,
    /// Stop; `stop_reason` says why.
    Stopped,
}

/// `stop_reason` of a stopped [`ControlSignal`]: `goal_met` or
/// `unresolvable_error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlStopReason {
    /// The goal is met.
    GoalMet,
    /// The loop cannot make progress.
    UnresolvableError,
}

/// The session control signal a workflow writes to stop the loop
/// (`control.json`; reference `ControlSignal`). Deserialising validates it
/// (see [`ControlSignal::validate`]), so an invalid file never parses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControlSignal {
    /// `running` or `stopped`.
    pub state: ControlState,
    /// Human-readable explanation.
    pub reason: String,
    /// Required when stopped, forbidden when running.
    pub stop_reason: Option<ControlStopReason>,
    /// Must equal [`CONTROL_SCHEMA_VERSION`]; required.
    pub schema_version: i64,
}

impl ControlSignal {
    /// The reference's validators: `schema_version` must equal
    /// [`CONTROL_SCHEMA_VERSION`]; a `running` state must not set
    /// `stop_reason`; a `stopped` state must set it.
    ///
    /// # Errors
    /// A [`ValidationError`] naming `schema_version` or `stop_reason`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_schema_version(self.schema_version, CONTROL_SCHEMA_VERSION)?;
        match (self.state, self.stop_reason) {
            (ControlState::Running, Some(_)) => Err(ValidationError {
                field: "stop_reason",
                message: "a running control state must not set stop_reason".into(),
            }),
            (ControlState::Stopped, None) => Err(ValidationError {
                field: "stop_reason",
                message: "a stopped control state must set stop_reason".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl<'de> Deserialize<'de> for ControlSignal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            state: ControlState,
            reason: String,
            #[serde(default)]
            stop_reason: Option<ControlStopReason>,
            schema_version: i64,
        }
        let fields = Fields::deserialize(deserializer)?;
        let signal = ControlSignal {
            state: fields.state,
            reason: fields.reason,
            stop_reason: fields.stop_reason,
            schema_version: fields.schema_version,
        };
        signal.validate().map_err(serde::de::Error::custom)?;
        Ok(signal)
    }
}

fn default_schema_version() -> i64 {
    1
}

/// The verdict a goal-check workflow writes (`goal_check.json`; reference
/// `GoalCheckSignal`). Deserialising validates it (see
/// [`GoalCheckSignal::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoalCheckSignal {
    /// Whether the goal is met.
    pub goal_met: bool,
    /// Human-readable explanation.
    pub reason: String,
    /// Must equal [`GOAL_CHECK_SCHEMA_VERSION`]; defaults to it.
    pub schema_version: i64,
}

impl GoalCheckSignal {
    /// `schema_version` must equal [`GOAL_CHECK_SCHEMA_VERSION`]. The
    /// reference model accepts any version and its `_read_signal` ignores a
    /// signal whose version is not 1; here the model refuses it.
    ///
    /// # Errors
    /// A [`ValidationError`] naming `schema_version`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_schema_version(self.schema_version, GOAL_CHECK_SCHEMA_VERSION)
    }
}

impl<'de> Deserialize<'de> for GoalCheckSignal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            goal_met: bool,
            reason: String,
            #[serde(default = "default_schema_version")]
            schema_version: i64,
        }
        let fields = Fields::deserialize(deserializer)?;
        let signal = GoalCheckSignal {
            goal_met: fields.goal_met,
            reason: fields.reason,
            schema_version: fields.schema_version,
        };
        signal.validate().map_err(serde::de::Error::custom)?;
        Ok(signal)
    }
}

/// What a worker records for one iteration (`result.json`; reference
/// `IterationResult`). The coordinator reads it to recover an orphaned
/// task. `harness_*` keep the reference's names: the run id and output
/// directory of the step that produced the result, empty by default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationResult {
    /// Whether the step succeeded.
    pub success: bool,
    /// Text the step returned.
    #[serde(default)]
    pub text: Option<String>,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Structured failure detail (a JSON object).
    #[serde(default)]
    pub error_detail: Option<serde_json::Map<String, serde_json::Value>>,
    /// Run id of the step; default empty.
    #[serde(default)]
    pub harness_run_id: String,
    /// Output directory of the step; default empty.
    #[serde(default)]
    pub harness_output_dir: String,
    /// The attempt that produced the result (loopy-loop 0.4+), so a result
    /// of a superseded attempt is never recovered as the current one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
}

/// A workflow's request to start a child session on another workflow set
/// and goal (a JSON file under the session's `child_requests/`; reference
/// `ChildSessionRequest`). Deserialising validates it (see
/// [`ChildSessionRequest::validate`]). `workflow_set` comes from a plugin:
/// the config loader refuses names that are not a single path component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChildSessionRequest {
    /// Workflow set the child runs.
    pub workflow_set: String,
    /// Goal text of the child.
    pub goal: String,
    /// Must equal [`CHILD_SESSION_SCHEMA_VERSION`]; defaults to it.
    pub schema_version: i64,
}

impl ChildSessionRequest {
    /// `schema_version` must equal [`CHILD_SESSION_SCHEMA_VERSION`].
    ///
    /// # Errors
    /// A [`ValidationError`] naming `schema_version`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_schema_version(self.schema_version, CHILD_SESSION_SCHEMA_VERSION)
    }
}

impl<'de> Deserialize<'de> for ChildSessionRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            workflow_set: String,
            goal: String,
            #[serde(default = "default_schema_version")]
            schema_version: i64,
        }
        let fields = Fields::deserialize(deserializer)?;
        let request = ChildSessionRequest {
            workflow_set: fields.workflow_set,
            goal: fields.goal,
            schema_version: fields.schema_version,
        };
        request.validate().map_err(serde::de::Error::custom)?;
        Ok(request)
    }
}

/// One child session in a parent's `children.json` (reference
/// `ChildSessionRecord`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSessionRecord {
    /// The child's session id.
    pub session_id: String,
    /// Workflow set the child runs.
    pub workflow_set: String,
    /// Goal hash of the child's goal.
    pub goal_hash: String,
    /// The child's [`LoopStatus`] spelling, `"running"` until it ends.
    pub status: String,
    /// When the child was created (RFC 3339 UTC).
    pub created_at: String,
    /// When the child ended (RFC 3339 UTC).
    #[serde(default)]
    pub completed_at: Option<String>,
    /// Why the child stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
}

#[cfg(test)]
#[path = "models_tests.rs"]
mod tests;
