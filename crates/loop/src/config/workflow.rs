//! A workflow of a set: its `workflow.toml` ([`WorkflowConfig`], checked
//! field by field) and where it lives ([`WorkflowDefinition`]), with its
//! directory grants resolved beneath the repository.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::{
    ConfigError, SANDLOOP_DIRNAME, WORKFLOW_CONFIG_FILENAME, default_enabled, default_run_every,
    workflow_file_shown,
};
use sandloop_core::dir_grant::{DirGrant, GrantRoot};
use sandloop_core::limits::{LimitError, SandboxLimits};

/// Cadence rule: the workflow becomes eligible once `workflow_id` has
/// succeeded `every` more times since this workflow last succeeded
/// (reference `RunAfterSuccesses`; TOML table `[run_after_successes]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAfterSuccesses {
    /// Workflow whose successful runs drive the cadence; must exist in the
    /// same set.
    pub workflow_id: String,
    /// New successful runs of `workflow_id` needed (at least 1).
    pub every: u32,
}

/// One `workflow.toml`: the reference's scheduling fields (`WorkflowConfig`)
/// plus the plugin and its sandbox grants. Unknown keys are refused.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// Whether the workflow can be scheduled; default true.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Minimum completed iterations between two runs of this workflow
    /// (at least 1); default 1.
    #[serde(default = "default_run_every")]
    pub run_every: u32,
    /// Workflow that must be the latest successful one for this one to run;
    /// must exist in the same set. Default none.
    #[serde(default)]
    pub must_follow: Option<String>,
    /// Earliest completed iteration count at which the workflow may run;
    /// default 0.
    #[serde(default)]
    pub not_before_iteration: u32,
    /// Human-readable purpose; default empty.
    #[serde(default)]
    pub description: String,
    /// First key of the scheduler's ordering: higher runs first; default 0.
    #[serde(default)]
    pub priority: i64,
    /// Lets the workflow bypass `run_after_successes` until some workflow
    /// has succeeded; default false.
    #[serde(default)]
    pub run_on_start: bool,
    /// Optional cadence on another workflow's successes.
    #[serde(default)]
    pub run_after_successes: Option<RunAfterSuccesses>,
    /// Whether the workflow must write a goal-check signal (the workflow
    /// `goal_check` must whatever this says); default false.
    #[serde(default)]
    pub emits_goal_check: bool,
    /// The workflow plugin: a `.wasm` component file, relative to the repo
    /// root (absolute paths are used as they are). Required.
    pub plugin: PathBuf,
    /// Directories granted to the plugin, `HOST::GUEST` (read-write) or
    /// `HOST::GUEST:ro`; HOST is relative to the repo root and may not leave
    /// it by `..` or be absolute; GUEST is an absolute guest path. Default
    /// none.
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Host environment variable names passed to the plugin
    /// (`[A-Za-z_][A-Za-z0-9_]*`); unset ones are skipped. Default none.
    #[serde(default)]
    pub env: Vec<String>,
    /// Hosts the plugin may reach by outgoing HTTP, `host` (HTTPS on 443)
    /// or `host:port` (that port, HTTP or HTTPS); a DNS name or IPv4
    /// address, no scheme, path or wildcard (see
    /// `sandloop_sandbox::http_grant`). Default none.
    #[serde(default)]
    pub http_hosts: Vec<String>,
    /// Whether `http_hosts` may be reached at a loopback, private (RFC
    /// 1918), shared, link-local or unique-local address, e.g. a model
    /// server on this machine; default false: a granted name that resolves
    /// only to such addresses is refused, and the connection goes to the
    /// address that was checked.
    #[serde(default)]
    pub allow_private_addresses: bool,
    /// Linear-memory limit of the plugin instance in MiB (1 to 65,536);
    /// default: the sandbox's.
    #[serde(default)]
    pub max_memory_mib: Option<u64>,
    /// Deadline of one call into the plugin in seconds (0.01, one epoch
    /// tick, to 31,536,000, one year); default: the sandbox's.
    #[serde(default)]
    pub call_timeout_secs: Option<f64>,
}

impl WorkflowConfig {
    /// The plugin's limits: the sandbox's defaults with this workflow's
    /// `max_memory_mib` and `call_timeout_secs` over them.
    ///
    /// # Errors
    /// A value out of its bounds (which the config check reports when the
    /// file is read).
    pub fn limits(&self) -> Result<SandboxLimits, LimitError> {
        let mut limits = SandboxLimits::default();
        if let Some(max_memory_mib) = self.max_memory_mib {
            limits.max_memory_mib = max_memory_mib;
        }
        if let Some(secs) = self.call_timeout_secs {
            limits.call_timeout = SandboxLimits::call_timeout_from_secs(secs)?;
        }
        limits.validate()?;
        Ok(limits)
    }

    /// Every value rule the types do not enforce, as `(field, message)`
    /// pairs; empty when the config is valid.
    pub(super) fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |field: String, message: String| problems.push((field, message));
        if self.run_every < 1 {
            problem("run_every".into(), "must be at least 1".into());
        }
        if let Some(rule) = &self.run_after_successes
            && rule.every < 1
        {
            problem(
                "run_after_successes.every".into(),
                "must be at least 1".into(),
            );
        }
        if self.plugin.as_os_str().is_empty() {
            problem("plugin".into(), "must name a .wasm file".into());
        } else if self.plugin.extension().is_none_or(|ext| ext != "wasm") {
            problem(
                "plugin".into(),
                format!("{:?} must name a .wasm component file", self.plugin),
            );
        }
        for (index, spec) in self.dirs.iter().enumerate() {
            if let Err(message) = split_dir_grant(spec) {
                problem(format!("dirs[{index}]"), message);
            }
        }
        for (index, name) in self.env.iter().enumerate() {
            if !is_env_name(name) {
                problem(
                    format!("env[{index}]"),
                    format!("{name:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
                );
            }
        }
        for (index, host) in self.http_hosts.iter().enumerate() {
            if let Err(message) = check_http_host(host) {
                problem(format!("http_hosts[{index}]"), message);
            }
        }
        if let Some(max_memory_mib) = self.max_memory_mib
            && let Err(error) = (SandboxLimits {
                max_memory_mib,
                ..SandboxLimits::default()
            })
            .validate()
        {
            problem(error.key.into(), error.problem);
        }
        if let Some(secs) = self.call_timeout_secs
            && let Err(error) = SandboxLimits::call_timeout_from_secs(secs)
        {
            problem(error.key.into(), error.problem);
        }
        problems
    }
}

/// Split a `dirs` entry into HOST and the rest (`GUEST[:ro|:rw]`), checking
/// only what is ours: HOST is a non-empty relative path that stays inside
/// the repo root. The rest is checked by [`DirGrant::parse`].
fn split_dir_grant(spec: &str) -> Result<(&str, &str), String> {
    let (host, rest) = spec
        .split_once("::")
        .ok_or_else(|| format!("{spec:?}: expected HOST::GUEST or HOST::GUEST:ro"))?;
    if host.is_empty() {
        return Err(format!("{spec:?}: HOST must not be empty"));
    }
    let inside = Path::new(host)
        .components()
        .all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
    if !inside {
        return Err(format!(
            "{spec:?}: HOST must be relative to the repo root, without `..`"
        ));
    }
    // The loop's own state, configuration and plugins are not a plugin's.
    let mut parts = Path::new(host)
        .components()
        .filter(|part| matches!(part, Component::Normal(_)));
    match parts.next() {
        None => {
            return Err(format!(
                "{spec:?}: HOST must be a directory inside the repository, not the repository \
                 itself (which holds {SANDLOOP_DIRNAME}, the loop's own state)"
            ));
        }
        Some(first) if first.as_os_str() == SANDLOOP_DIRNAME => {
            return Err(format!(
                "{spec:?}: {SANDLOOP_DIRNAME} holds the loop's own state, workflows and plugins; \
                 it cannot be granted to a plugin"
            ));
        }
        Some(_) => {}
    }
    Ok((host, rest))
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn check_http_host(entry: &str) -> Result<(), String> {
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    };
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|port| port != 0)
    {
        return Err(format!(
            "{entry:?}: the port must be a number from 1 to 65535"
        ));
    }
    let labels_ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c == '-' || c.is_ascii_alphanumeric())
        });
    if !labels_ok {
        return Err(format!(
            "{entry:?}: expected host or host:port, a DNS name or IPv4 address without scheme, path or wildcard"
        ));
    }
    Ok(())
}

/// One workflow of a set: its [`WorkflowConfig`] and where it lives
/// (reference `WorkflowDefinition`). Paths are the repo root joined with
/// the layout, so absolute when the repo root is.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowDefinition {
    /// Workflow set the workflow belongs to.
    pub workflow_set: String,
    /// Workflow id: the name of its directory.
    pub id: String,
    /// `.sandloop/workflow_sets/<set>/workflows/<id>`.
    pub dir: PathBuf,
    /// `<dir>/prompt.txt`.
    pub prompt_path: PathBuf,
    /// `<dir>/workflow.toml`.
    pub config_path: PathBuf,
    /// `config.plugin` resolved against the repo root.
    pub plugin_path: PathBuf,
    /// The parsed `workflow.toml`.
    pub config: WorkflowConfig,
}

impl WorkflowDefinition {
    /// Whether a step of this workflow must report a goal-check verdict: its
    /// id is `goal_check` or its `workflow.toml` sets `emits_goal_check`
    /// (reference `_workflow_expects_goal_check_signal`). The coordinator
    /// checks for the verdict by this test, and the worker tells the plugin
    /// (`task.emits-goal-check`) by the same one.
    pub fn expects_goal_check(&self) -> bool {
        self.id == crate::models::GOAL_CHECK_WORKFLOW_ID || self.config.emits_goal_check
    }

    /// `workflow.toml` relative to the repo root, as errors show it.
    pub(super) fn shown_config_path(&self) -> PathBuf {
        workflow_file_shown(&self.workflow_set, &self.id, WORKFLOW_CONFIG_FILENAME)
    }

    /// The `dirs` grants with HOST resolved against `repo_root`, checked as
    /// the sandbox checks `--dir` (HOST an existing directory, GUEST a plain
    /// absolute path, no guest path granted twice).
    ///
    /// # Errors
    /// [`ConfigError::Field`] naming `workflow.toml` and `dirs`.
    pub fn dir_grants(&self, repo_root: &Path) -> Result<Vec<DirGrant>, ConfigError> {
        let field_error = |field: String, message: String| ConfigError::Field {
            file: self.shown_config_path(),
            field,
            message,
        };
        let mut specs = Vec::with_capacity(self.config.dirs.len());
        for (index, spec) in self.config.dirs.iter().enumerate() {
            let (host, rest) = split_dir_grant(spec)
                .map_err(|message| field_error(format!("dirs[{index}]"), message))?;
            specs.push(format!("{host}::{rest}"));
        }
        // Opened once here; each step resolves its grants beneath it again
        // (`sandloop_core::dir_grant`), so a symlink planted later cannot lead out.
        let root = GrantRoot::open(repo_root).map_err(|error| {
            field_error(
                "dirs".into(),
                format!(
                    "cannot open the repository {}: {error}",
                    repo_root.display()
                ),
            )
        })?;
        // Drop the sandbox's `--dir ` prefix: here the grant comes from a file.
        DirGrant::parse_all_beneath(&root, &specs).map_err(|message| {
            let message = message.strip_prefix("--dir ").unwrap_or(&message);
            let field = specs
                .iter()
                .position(|spec| message.starts_with(&format!("{spec:?}")))
                .map_or_else(|| "dirs".to_string(), |index| format!("dirs[{index}]"));
            field_error(field, message.to_string())
        })
    }
}
