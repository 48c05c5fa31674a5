//! Loop configuration on disk: the root config `sandloop-loop.toml`, the
//! goal file it names, and the workflow sets under `.sandloop/`. Mirrors
//! `config.py` in the reference, with TOML instead of YAML and a workflow
//! step that is a sandboxed WASM component ("workflow plugin") instead of an
//! agent team: the reference's `team_harness_*` settings are gone and each
//! workflow names its plugin and its grants.
//!
//! Layout, every path relative to the repo root:
//!
//! ```text
//! sandloop-loop.toml                                   root config
//! sandloop-goal.txt                                    goal (named by goal_file)
//! .sandloop/workflow_sets/<set>/workflows/<id>/workflow.toml
//! .sandloop/workflow_sets/<set>/workflows/<id>/prompt.txt
//! ```
//!
//! A root config (unknown keys refused; an inline `goal` is refused too):
//!
//! ```toml
//! goal_file = "sandloop-goal.txt"      # required; relative to the repo root
//! workflow_set = "main"                # required
//! max_turns = 20                       # required
//! completion_criteria = ["cargo test passes"]   # default []
//! stop_criteria = ["the build is broken twice"] # default []
//! goal_check_consecutive_failures_cap = 3       # default 3, at least 1
//! ```
//!
//! A `workflow.toml` (unknown keys refused; the workflow id is its directory
//! name):
//!
//! ```toml
//! plugin = "target/wasm32-wasip2/release/review_step.wasm"  # required
//! description = "Review the last change."   # default ""
//! enabled = true                  # default true
//! run_every = 1                   # default 1, at least 1
//! must_follow = "build"           # default: none
//! not_before_iteration = 0        # default 0
//! priority = 0                    # default 0; higher runs first
//! run_on_start = false            # default false
//! emits_goal_check = false        # default false
//! dirs = ["docs::/docs:ro"]       # default []; HOST relative to the repo root
//! env = ["RUST_LOG"]              # default []
//! http_hosts = ["api.example.com:443"]  # default []
//! allow_private_addresses = false # default false: http_hosts at public addresses only
//! max_memory_mib = 256            # default: the sandbox default
//! call_timeout_secs = 120.0       # default: the sandbox default
//!
//! [run_after_successes]           # default: none
//! workflow_id = "build"
//! every = 2                       # at least 1
//! ```
//!
//! [`run_preflight`] reports every problem it finds at once, each naming
//! the file and the field (or line and column for TOML errors).

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::models::RootConfigSnapshot;

mod error;
mod workflow;

pub use error::ConfigError;
pub use workflow::{RunAfterSuccesses, WorkflowConfig, WorkflowDefinition};

/// Root config file name at the repo root (the reference's
/// `loopy_loop_config.yaml`).
pub const ROOT_CONFIG_FILENAME: &str = "sandloop-loop.toml";
/// Goal file name an `init` template writes and names in `goal_file` (the
/// reference's `loopy_loop_goal.txt`); not a default: `goal_file` is
/// required.
pub const DEFAULT_GOAL_FILENAME: &str = "sandloop-goal.txt";
/// Directory holding workflow sets and sessions at the repo root (the
/// reference's `LOOPY_DIRNAME`, `.loopy_loop`).
pub const SANDLOOP_DIRNAME: &str = ".sandloop";
/// Directory of workflow sets inside [`SANDLOOP_DIRNAME`].
pub const WORKFLOW_SETS_DIRNAME: &str = "workflow_sets";
/// Directory of workflows inside a workflow set.
pub const WORKFLOWS_DIRNAME: &str = "workflows";
/// Config file of one workflow (the reference's `config.yaml`).
pub const WORKFLOW_CONFIG_FILENAME: &str = "workflow.toml";
/// Prompt file of one workflow.
pub const WORKFLOW_PROMPT_FILENAME: &str = "prompt.txt";
/// Hex digits kept of the goal's SHA-256 (reference `GOAL_HASH_LENGTH`).
pub const GOAL_HASH_LENGTH: usize = 12;
/// Default `goal_check_consecutive_failures_cap` (reference
/// `DEFAULT_GOAL_CHECK_FAILURE_CAP`).
pub const DEFAULT_GOAL_CHECK_FAILURE_CAP: u32 = 3;
/// Default `enabled` of a workflow (reference `DEFAULT_WORKFLOW_ENABLED`).
pub const DEFAULT_WORKFLOW_ENABLED: bool = true;
/// Default `run_every` of a workflow (reference
/// `DEFAULT_WORKFLOW_RUN_EVERY`).
pub const DEFAULT_WORKFLOW_RUN_EVERY: u32 = 1;

/// The validated root config with its goal read from `goal_file` (reference
/// `RootConfig` without the `team_harness_*` fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootConfig {
    /// Goal text: the goal file's contents, trimmed, never empty.
    pub goal: String,
    /// The goal file that was read: `goal_file` (or the override) joined to
    /// the repo root unless absolute.
    pub goal_file: PathBuf,
    /// Workflow set to run; after [`run_preflight`], the selected set (the
    /// command-line override if any).
    pub workflow_set: String,
    /// Observable criteria used by workflows and goal checks.
    pub completion_criteria: Vec<String>,
    /// Conditions that should stop the loop before the goal is met.
    pub stop_criteria: Vec<String>,
    /// Maximum number of completed workflow iterations.
    pub max_turns: u32,
    /// Consecutive invalid goal-check outputs allowed before the loop fails
    /// (at least 1).
    pub goal_check_consecutive_failures_cap: u32,
}

impl RootConfig {
    /// [`derive_goal_hash`] of the goal (the reference's computed field
    /// `goal_hash`).
    pub fn goal_hash(&self) -> String {
        derive_goal_hash(&self.goal)
    }

    /// The snapshot frozen into a new session's state (the reference's
    /// `RootConfigSnapshot.model_validate(root_config.model_dump())`).
    pub fn snapshot(&self) -> RootConfigSnapshot {
        RootConfigSnapshot {
            goal: self.goal.clone(),
            goal_hash: self.goal_hash(),
            workflow_set: self.workflow_set.clone(),
            completion_criteria: self.completion_criteria.clone(),
            stop_criteria: self.stop_criteria.clone(),
            max_turns: self.max_turns,
            goal_check_consecutive_failures_cap: self.goal_check_consecutive_failures_cap,
            team_harness: Default::default(),
        }
    }
}

/// `sandloop-loop.toml` as written. `goal` is accepted by the parser only to
/// be refused with a clear message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RootConfigFile {
    #[serde(default)]
    goal: Option<IgnoredAny>,
    #[serde(default)]
    goal_file: Option<String>,
    workflow_set: String,
    #[serde(default)]
    completion_criteria: Vec<String>,
    #[serde(default)]
    stop_criteria: Vec<String>,
    max_turns: u32,
    #[serde(default = "default_goal_check_failure_cap")]
    goal_check_consecutive_failures_cap: u32,
}

fn default_goal_check_failure_cap() -> u32 {
    DEFAULT_GOAL_CHECK_FAILURE_CAP
}

fn default_enabled() -> bool {
    DEFAULT_WORKFLOW_ENABLED
}

fn default_run_every() -> u32 {
    DEFAULT_WORKFLOW_RUN_EVERY
}

/// What [`run_preflight`] validated: the root config (its `workflow_set`
/// set to the selected one) and the selected set's workflows, sorted by id
/// (reference `PreflightResult`).
#[derive(Clone, Debug, PartialEq)]
pub struct PreflightResult {
    /// The root config.
    pub root_config: RootConfig,
    /// The selected workflow set.
    pub workflow_set: String,
    /// Its workflows, sorted by id.
    pub workflows: Vec<WorkflowDefinition>,
}

/// The first [`GOAL_HASH_LENGTH`] hex digits of the SHA-256 of the goal's
/// UTF-8 bytes (mirrors `derive_goal_hash` in the reference).
pub fn derive_goal_hash(goal: &str) -> String {
    let mut hex = sandloop_core::digest::sha256_hex(goal.as_bytes());
    hex.truncate(GOAL_HASH_LENGTH);
    hex
}

/// `<repo_root>/.sandloop/workflow_sets/<workflow_set>` (reference
/// `workflow_set_dir_path`). Does not check the name; see
/// [`validate_workflow_set_name`].
pub fn workflow_set_dir_path(repo_root: &Path, workflow_set: &str) -> PathBuf {
    repo_root
        .join(SANDLOOP_DIRNAME)
        .join(WORKFLOW_SETS_DIRNAME)
        .join(workflow_set)
}

/// `<repo_root>/.sandloop/workflow_sets/<workflow_set>/workflows`
/// (reference `workflow_set_workflows_dir_path`).
pub fn workflow_set_workflows_dir_path(repo_root: &Path, workflow_set: &str) -> PathBuf {
    workflow_set_dir_path(repo_root, workflow_set).join(WORKFLOWS_DIRNAME)
}

/// A workflow set name must be one non-blank path component: not `.` or
/// `..`, without `/`, `\` or NUL. The reference only refuses blank names;
/// the rest keeps a set named by a plugin's child-session request inside
/// `.sandloop/workflow_sets/`.
///
/// # Errors
/// A message saying what is wrong.
pub fn validate_workflow_set_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(format!(
            "{name:?} must be a plain directory name (no `/`, `\\`, `.` or `..`)"
        ));
    }
    Ok(())
}

/// `path` relative to `repo_root` when inside it, else as is.
fn shown(repo_root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(repo_root).unwrap_or(path).to_path_buf()
}

/// A workflow's file relative to the repo root.
fn workflow_file_shown(workflow_set: &str, id: &str, file_name: &str) -> PathBuf {
    Path::new(SANDLOOP_DIRNAME)
        .join(WORKFLOW_SETS_DIRNAME)
        .join(workflow_set)
        .join(WORKFLOWS_DIRNAME)
        .join(id)
        .join(file_name)
}

/// Read a UTF-8 file; `shown_as` is how errors name it. Text that is not
/// UTF-8 is a [`ConfigError::Toml`] at the line and column of the first
/// bad byte.
fn read_text(path: &Path, shown_as: PathBuf, what: &'static str) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => ConfigError::Missing {
            file: shown_as.clone(),
            what,
        },
        _ => ConfigError::Read {
            file: shown_as.clone(),
            source,
        },
    })?;
    String::from_utf8(bytes).map_err(|error| {
        let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
        let line_start = valid
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        let column =
            std::str::from_utf8(&valid[line_start..]).map_or(0, |text| text.chars().count());
        ConfigError::Toml {
            file: shown_as,
            position: Some((
                valid.iter().filter(|b| **b == b'\n').count() + 1,
                column + 1,
            )),
            field: None,
            message: "not valid UTF-8".into(),
        }
    })
}

/// Parse TOML into `T`, reporting errors with their line and column and the
/// dotted path of the field (through `serde_path_to_error`).
fn parse_toml<T: for<'de> Deserialize<'de>>(text: &str, file: PathBuf) -> Result<T, ConfigError> {
    let mut field = None;
    let parsed = toml::Deserializer::parse(text).and_then(|deserializer| {
        serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let path = error.path().to_string();
            // The root shows as `.`; an error there names no field.
            field = (path != ".").then_some(path);
            error.into_inner()
        })
    });
    parsed.map_err(|error| {
        let position = error.span().map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            (line, column)
        });
        ConfigError::Toml {
            file,
            position,
            field,
            message: error.message().trim().to_string(),
        }
    })
}

/// The root config as far as it could be loaded: the config when valid,
/// the set it names when that much is known, and every error.
struct RootLoad {
    config: Option<RootConfig>,
    workflow_set: Option<String>,
    errors: Vec<ConfigError>,
}

fn load_root_parts(repo_root: &Path, goal_file: Option<&Path>) -> RootLoad {
    let file = PathBuf::from(ROOT_CONFIG_FILENAME);
    let failed = |error: ConfigError| RootLoad {
        config: None,
        workflow_set: None,
        errors: vec![error],
    };
    let text = match read_text(
        &repo_root.join(ROOT_CONFIG_FILENAME),
        file.clone(),
        "root config (create one with `sandloop loop init --plugin STEPS.wasm`, or pass --repo)",
    ) {
        Ok(text) => text,
        Err(error) => return failed(error),
    };
    let raw: RootConfigFile = match parse_toml(&text, file.clone()) {
        Ok(raw) => raw,
        Err(error) => return failed(error),
    };
    let mut errors = Vec::new();
    let mut field_error = |field: &str, message: String| {
        errors.push(ConfigError::Field {
            file: file.clone(),
            field: field.into(),
            message,
        });
    };
    if raw.goal.is_some() {
        field_error(
            "goal",
            "an inline goal is not supported; write the goal to a file and name it with goal_file"
                .into(),
        );
    }
    let workflow_set = match validate_workflow_set_name(&raw.workflow_set) {
        Ok(()) => Some(raw.workflow_set.clone()),
        Err(message) => {
            field_error("workflow_set", message);
            None
        }
    };
    if raw.goal_check_consecutive_failures_cap < 1 {
        field_error(
            "goal_check_consecutive_failures_cap",
            "must be at least 1".into(),
        );
    }
    let from_cli = if goal_file.is_some() {
        " (given on the command line)"
    } else {
        ""
    };
    let goal_path = match goal_file
        .map(Path::to_path_buf)
        .or(raw.goal_file.map(PathBuf::from))
    {
        None => {
            field_error(
                "goal_file",
                "missing: name the file holding the goal".into(),
            );
            None
        }
        Some(path) if path.as_os_str().to_string_lossy().trim().is_empty() => {
            field_error("goal_file", format!("must be a non-empty path{from_cli}"));
            None
        }
        Some(path) => Some(repo_root.join(path)),
    };
    let goal = goal_path.as_ref().and_then(|path| {
        let shown_path = shown(repo_root, path);
        match std::fs::read_to_string(path) {
            Err(error) => {
                field_error(
                    "goal_file",
                    format!("cannot read {}{from_cli}: {error}", shown_path.display()),
                );
                None
            }
            Ok(text) if text.trim().is_empty() => {
                field_error(
                    "goal_file",
                    format!("{} is empty{from_cli}", shown_path.display()),
                );
                None
            }
            Ok(text) => Some(text.trim().to_string()),
        }
    });
    let config = match (goal, goal_path, &workflow_set) {
        (Some(goal), Some(goal_file), Some(set)) if errors.is_empty() => Some(RootConfig {
            goal,
            goal_file,
            workflow_set: set.clone(),
            completion_criteria: raw.completion_criteria,
            stop_criteria: raw.stop_criteria,
            max_turns: raw.max_turns,
            goal_check_consecutive_failures_cap: raw.goal_check_consecutive_failures_cap,
        }),
        _ => None,
    };
    RootLoad {
        config,
        workflow_set,
        errors,
    }
}

/// Load `<repo_root>/sandloop-loop.toml` and read its goal (mirrors
/// `load_root_config` and `_resolve_root_config_goal`). `goal_file`, when
/// given, replaces the file's `goal_file`; either is joined to the repo root
/// unless absolute. The goal is the file's text trimmed.
///
/// # Errors
/// Every problem found, each naming the file and the field (see
/// [`ConfigError`]): missing or unreadable file, malformed TOML, unknown or
/// missing keys, an inline `goal`, a missing, unreadable or empty goal file,
/// a blank or path-like `workflow_set`, a zero failure cap.
pub fn load_root_config(
    repo_root: &Path,
    goal_file: Option<&Path>,
) -> Result<RootConfig, ConfigError> {
    let load = load_root_parts(repo_root, goal_file);
    match load.config {
        Some(config) => Ok(config),
        None => Err(ConfigError::from_many(load.errors)),
    }
}

/// A workflow set as far as it could be loaded.
struct SetScan {
    /// Every workflow directory's name, loaded or not, sorted.
    ids: Vec<String>,
    /// The workflows that loaded, sorted by id.
    workflows: Vec<WorkflowDefinition>,
    /// Why the others did not.
    errors: Vec<ConfigError>,
}

fn scan_workflow_set(repo_root: &Path, workflow_set: &str) -> Result<SetScan, ConfigError> {
    let set_error = |message: String| ConfigError::WorkflowSet {
        name: workflow_set.to_string(),
        message,
    };
    validate_workflow_set_name(workflow_set).map_err(set_error)?;
    let set_dir = workflow_set_dir_path(repo_root, workflow_set);
    if !set_dir.is_dir() {
        let known = list_dirs(&repo_root.join(SANDLOOP_DIRNAME).join(WORKFLOW_SETS_DIRNAME))
            .unwrap_or_default()
            .iter()
            .filter_map(|dir| dir.file_name()?.to_str().map(str::to_owned))
            .collect::<Vec<_>>();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        return Err(set_error(format!(
            "no such workflow set: {} does not exist (known sets: {known})",
            shown(repo_root, &set_dir).display()
        )));
    }
    let workflows_dir = set_dir.join(WORKFLOWS_DIRNAME);
    let dirs = match list_dirs(&workflows_dir) {
        Ok(dirs) => dirs,
        Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(ConfigError::Read {
                file: shown(repo_root, &workflows_dir),
                source,
            });
        }
    };
    let mut scan = SetScan {
        ids: Vec::new(),
        workflows: Vec::new(),
        errors: Vec::new(),
    };
    for dir in dirs {
        let Some(id) = dir.file_name().and_then(|name| name.to_str()) else {
            scan.errors.push(set_error(format!(
                "workflow directory {} is not valid UTF-8",
                shown(repo_root, &dir).display()
            )));
            continue;
        };
        scan.ids.push(id.to_string());
        match load_workflow(repo_root, workflow_set, id, &dir) {
            Ok(workflow) => scan.workflows.push(workflow),
            Err(error) => scan.errors.extend(error.into_errors()),
        }
    }
    Ok(scan)
}

/// The subdirectories of `dir` (symlinks followed, as the reference's
/// `is_dir`), sorted.
fn list_dirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Load and check one workflow directory (reference `load_workflow_config`
/// plus the `WorkflowDefinition` it builds).
fn load_workflow(
    repo_root: &Path,
    workflow_set: &str,
    id: &str,
    dir: &Path,
) -> Result<WorkflowDefinition, ConfigError> {
    let file = workflow_file_shown(workflow_set, id, WORKFLOW_CONFIG_FILENAME);
    let config_path = dir.join(WORKFLOW_CONFIG_FILENAME);
    let text = read_text(&config_path, file.clone(), "workflow config")?;
    let config: WorkflowConfig = parse_toml(&text, file.clone())?;
    let problems = config.problems();
    if !problems.is_empty() {
        return Err(ConfigError::from_many(
            problems
                .into_iter()
                .map(|(field, message)| ConfigError::Field {
                    file: file.clone(),
                    field,
                    message,
                })
                .collect(),
        ));
    }
    Ok(WorkflowDefinition {
        workflow_set: workflow_set.to_string(),
        id: id.to_string(),
        dir: dir.to_path_buf(),
        prompt_path: dir.join(WORKFLOW_PROMPT_FILENAME),
        config_path,
        plugin_path: repo_root.join(&config.plugin),
        config,
    })
}

/// Load every workflow of `workflow_set`, sorted by id (mirrors
/// `load_workflow_definitions`). Every subdirectory of
/// `.sandloop/workflow_sets/<set>/workflows/` is a workflow; a set without
/// that directory, or with no subdirectory in it, has no workflows (`Ok`
/// with an empty list, as in the reference; [`run_preflight`] refuses it).
/// Files are not checked for existence beyond `workflow.toml`.
///
/// # Errors
/// An invalid set name or a set directory that does not exist
/// ([`ConfigError::WorkflowSet`], listing the known sets), and every
/// workflow's problems: a missing `workflow.toml`, malformed TOML, unknown
/// keys, values the rules refuse.
pub fn load_workflow_definitions(
    repo_root: &Path,
    workflow_set: &str,
) -> Result<Vec<WorkflowDefinition>, ConfigError> {
    let scan = scan_workflow_set(repo_root, workflow_set)?;
    if scan.errors.is_empty() {
        Ok(scan.workflows)
    } else {
        Err(ConfigError::from_many(scan.errors))
    }
}

/// `must_follow` and `run_after_successes.workflow_id` must name a workflow
/// of `known_ids`.
fn graph_errors(workflows: &[WorkflowDefinition], known_ids: &[String]) -> Vec<ConfigError> {
    let known = |id: &str| known_ids.iter().any(|known| known == id);
    let mut errors = Vec::new();
    for workflow in workflows {
        let mut unknown = |field: &str, target: &str| {
            errors.push(ConfigError::Field {
                file: workflow.shown_config_path(),
                field: field.into(),
                message: format!("unknown workflow {target:?}"),
            });
        };
        if let Some(target) = &workflow.config.must_follow
            && !known(target)
        {
            unknown("must_follow", target);
        }
        if let Some(rule) = &workflow.config.run_after_successes
            && !known(&rule.workflow_id)
        {
            unknown("run_after_successes.workflow_id", &rule.workflow_id);
        }
    }
    errors
}

/// Check that every `must_follow` and `run_after_successes.workflow_id`
/// names a workflow in `workflows` (mirrors `validate_workflow_graph`).
///
/// # Errors
/// One [`ConfigError::Field`] per dangling reference, e.g.
/// `.sandloop/workflow_sets/main/workflows/review/workflow.toml:
/// must_follow: unknown workflow "plan"`, combined by
/// [`ConfigError::from_many`].
pub fn validate_workflow_graph(workflows: &[WorkflowDefinition]) -> Result<(), ConfigError> {
    let ids: Vec<String> = workflows
        .iter()
        .map(|workflow| workflow.id.clone())
        .collect();
    let errors = graph_errors(workflows, &ids);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::from_many(errors))
    }
}

/// Validate everything a loop needs before it starts, and report every
/// problem at once (mirrors `run_preflight`). The set is `workflow_set`
/// when given, else the root config's; `goal_file` overrides the root
/// config's as in [`load_root_config`].
///
/// Checks: the root config and goal; the set exists and has workflows; each
/// workflow's `workflow.toml`; its `prompt.txt` and plugin file exist; its
/// `dirs` grants resolve to directories; `must_follow` and
/// `run_after_successes` name workflows of the set (a workflow whose config
/// is broken still counts as existing, so one broken file does not cascade).
/// Unlike the reference, the graph is checked even when the root config is
/// broken, and no API key is looked up (plugins have no ambient authority).
///
/// # Errors
/// Every problem found, combined by [`ConfigError::from_many`].
pub fn run_preflight(
    repo_root: &Path,
    workflow_set: Option<&str>,
    goal_file: Option<&Path>,
) -> Result<PreflightResult, ConfigError> {
    let root = load_root_parts(repo_root, goal_file);
    let mut errors = root.errors;
    let selected = workflow_set.map(str::to_owned).or(root.workflow_set);
    let mut workflows = Vec::new();
    if let Some(set) = &selected {
        match scan_workflow_set(repo_root, set) {
            Err(error) => errors.push(error),
            Ok(scan) => {
                errors.extend(scan.errors);
                if scan.ids.is_empty() {
                    errors.push(ConfigError::WorkflowSet {
                        name: set.clone(),
                        message: format!(
                            "no workflows under {}",
                            shown(repo_root, &workflow_set_workflows_dir_path(repo_root, set))
                                .display()
                        ),
                    });
                }
                for workflow in &scan.workflows {
                    if !workflow.prompt_path.is_file() {
                        errors.push(ConfigError::Missing {
                            file: shown(repo_root, &workflow.prompt_path),
                            what: "workflow prompt",
                        });
                    }
                    if !workflow.plugin_path.is_file() {
                        errors.push(ConfigError::Field {
                            file: workflow.shown_config_path(),
                            field: "plugin".into(),
                            message: format!(
                                "{} is not a file",
                                shown(repo_root, &workflow.plugin_path).display()
                            ),
                        });
                    }
                    if let Err(error) = workflow.dir_grants(repo_root) {
                        errors.push(error);
                    }
                }
                errors.extend(graph_errors(&scan.workflows, &scan.ids));
                workflows = scan.workflows;
            }
        }
    }
    match (root.config, selected) {
        (Some(mut root_config), Some(set)) if errors.is_empty() => {
            root_config.workflow_set = set.clone();
            Ok(PreflightResult {
                root_config,
                workflow_set: set,
                workflows,
            })
        }
        _ => Err(ConfigError::from_many(errors)),
    }
}

/// Read a workflow's `prompt.txt` (mirrors `load_workflow_prompt`).
///
/// # Errors
/// [`ConfigError::Missing`] or [`ConfigError::Read`] naming the prompt
/// path.
pub fn load_workflow_prompt(workflow: &WorkflowDefinition) -> Result<String, ConfigError> {
    read_text(
        &workflow.prompt_path,
        workflow.prompt_path.clone(),
        "workflow prompt",
    )
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
