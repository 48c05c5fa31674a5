//! Loop workflow plugins: a component of world `workflow` runs one step of
//! a loop in its own sandbox (a fresh instance per step, the workflow's own
//! grants and limits) and may signal the coordinator through the `signals`
//! import. The host writes each signal as the file the coordinator reads
//! (`goal_check.json`, `control.json`, `child_requests/*.json`), so crash
//! recovery works from the files alone. A plugin may also make outgoing
//! HTTP requests through `wasi:http/outgoing-handler`, to the hosts its
//! `http_hosts` grant names and nowhere else (see [`super::http_grant`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::cache::{load_or_compile, sha256_hex};
use super::classify::classify_call;
use super::config::SandboxConfig;
use super::crash::{crash_of, with_crash};
use super::engine::SandboxEngine;
use super::host_state::HostState;
use super::http_grant::HttpGrant;
use super::store::new_store;
use sandloop_core::step::{PluginSpec, StepExecutor, StepPlugin};

/// Host bindings of world `workflow`; `log` is the adapter world's.
#[allow(missing_docs)]
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "workflow",
        with: {
            "sandloop:adapter/log": crate::bindings::sandloop::adapter::log,
        },
    });
}

use bindings::exports::sandloop::adapter::step;
use bindings::sandloop::adapter::signals;

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), String> {
    let text = serde_json::to_vec_pretty(value).map_err(|error| error.to_string())?;
    sandloop_core::atomic::replace_file(path, &text)
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

impl signals::Host for HostState {
    fn report_goal_check(&mut self, goal_met: bool, reason: String) -> Result<(), String> {
        let target = self.signals.target.as_ref().ok_or("no step is running")?;
        write_json(
            &target.goal_check,
            &json!({"goal_met": goal_met, "reason": reason, "schema_version": 1}),
        )
    }

    fn request_stop(&mut self, reason: signals::StopReason, message: String) -> Result<(), String> {
        let target = self.signals.target.as_ref().ok_or("no step is running")?;
        let stop_reason = match reason {
            signals::StopReason::GoalMet => "goal_met",
            signals::StopReason::UnresolvableError => "unresolvable_error",
        };
        write_json(
            &target.control,
            &json!({
                "state": "stopped",
                "reason": message,
                "stop_reason": stop_reason,
                "schema_version": 1,
            }),
        )
    }

    fn request_child_session(&mut self, workflow_set: String, goal: String) -> Result<(), String> {
        let target = self.signals.target.clone().ok_or("no step is running")?;
        if workflow_set.trim().is_empty() || goal.trim().is_empty() {
            return Err("workflow_set and goal must be non-empty".into());
        }
        self.signals.child_requests += 1;
        let name = format!(
            "{:06}-{:03}.json",
            target.iteration, self.signals.child_requests
        );
        write_json(
            &target.child_requests.join(name),
            &json!({"workflow_set": workflow_set, "goal": goal, "schema_version": 1}),
        )
    }
}

/// A compiled workflow plugin, ready to run steps.
pub struct WorkflowPlugin {
    engine: Arc<SandboxEngine>,
    config: Arc<SandboxConfig>,
    /// Linked and checked to be of world `workflow` once, at load.
    pre: bindings::WorkflowPre<HostState>,
    /// The outgoing-HTTP grant every step starts with.
    http: HttpGrant,
    /// sha256 of the component, lowercase hex.
    pub sha256: String,
}

pub use sandloop_core::step::{SignalTarget, StepOutcome, StepTask};

impl From<&StepTask> for step::Task {
    fn from(task: &StepTask) -> Self {
        step::Task {
            goal: task.goal.clone(),
            completion_criteria: task.completion_criteria.clone(),
            stop_criteria: task.stop_criteria.clone(),
            session_id: task.session_id.clone(),
            workflow_set: task.workflow_set.clone(),
            workflow_id: task.workflow_id.clone(),
            iteration: task.iteration,
            prompt: task.prompt.clone(),
            emits_goal_check: task.emits_goal_check,
        }
    }
}

impl WorkflowPlugin {
    /// Read, compile (through the cache) and link the plugin at `path`,
    /// whose steps may reach the hosts of `http`. Errors name the file:
    /// unreadable, not a component, not of world `workflow`, importing
    /// something beyond WASI p2, `wasi:http` and the world's imports.
    pub fn load(
        path: &Path,
        engine: Arc<SandboxEngine>,
        config: Arc<SandboxConfig>,
        http: HttpGrant,
    ) -> Result<Self, String> {
        let shown = path.display();
        let bytes = sandloop_core::input_file::read_regular(path)
            .map_err(|error| format!("cannot read plugin {shown}: {error}"))?;
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" || bytes[4..8] == [1, 0, 0, 0] {
            return Err(format!("{shown} is not a WebAssembly component"));
        }
        let sha256 = sha256_hex(&bytes);
        let (component, _) = load_or_compile(
            engine.engine(),
            &bytes,
            &sha256,
            config.cache_dir.as_deref(),
        )
        .map_err(|error| {
            super::component::compile_error(
                &shown.to_string(),
                &error,
                config.limits.max_memory_mib,
            )
            .to_string()
        })?;
        let mut linker: Linker<HostState> = Linker::new(engine.engine());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .and_then(|()| super::host_state::link_deadline_clocks(&mut linker))
            .and_then(|()| super::guarded_open::link_guarded_open(&mut linker))
            .and_then(|()| {
                crate::bindings::sandloop::adapter::log::add_to_linker::<
                    HostState,
                    HasSelf<HostState>,
                >(&mut linker, |state| state)
            })
            .and_then(|()| {
                signals::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
            })
            .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker))
            .map_err(|error| format!("cannot link {shown}: {error:#}"))?;
        let pre = linker.instantiate_pre(&component).map_err(|error| {
            format!("{shown} imports something a workflow plugin may not use: {error:#}")
        })?;
        let pre = bindings::WorkflowPre::new(pre).map_err(|error| {
            format!("{shown} is not a workflow plugin (it must export sandloop:adapter/step@0.2.0): {error:#}")
        })?;
        Ok(Self {
            engine,
            config,
            pre,
            http,
            sha256,
        })
    }

    /// Run one step in a fresh instance with `target` for its signals. A
    /// trap, deadline or limit is a failed outcome (`error` says which),
    /// never an error of the host.
    pub fn run_step(&self, task: &StepTask, target: SignalTarget) -> StepOutcome {
        let failed = |error: String| StepOutcome {
            success: false,
            text: None,
            error: Some(error),
        };
        let mut state = match HostState::new(&self.config) {
            Ok(state) => state,
            Err(error) => return failed(format!("instantiation: {error:#}")),
        };
        state.signals.target = Some(target);
        state.http = self.http.clone();
        let mut store = match new_store(&self.engine, &self.config, state) {
            Ok(store) => store,
            Err(error) => return failed(format!("instantiation: {error:#}")),
        };
        let result = self.pre.instantiate(&mut store).and_then(|workflow| {
            workflow
                .sandloop_adapter_step()
                .call_run_step(&mut store, &step::Task::from(task))
        });
        let mut outcome = match result {
            Ok(outcome) => StepOutcome {
                success: outcome.success,
                text: outcome.text,
                error: outcome.error,
            },
            Err(error) => {
                let mut classified = classify_call(
                    &error,
                    &mut store,
                    self.config.limits.call_timeout.as_secs_f64(),
                );
                if let Some(crash) = crash_of(&store.data().capture.take()) {
                    classified.message = with_crash(&classified, &crash);
                }
                failed(format!(
                    "{}: {}",
                    classified.error_type.as_str(),
                    classified.message
                ))
            }
        };
        let denied = &store.data().http.denied;
        if !outcome.success && !denied.is_empty() {
            let error = outcome.error.take().unwrap_or_else(|| "step failed".into());
            outcome.error = Some(format!(
                "{error} (outgoing HTTP refused to {}: add it to http_hosts in the workflow's workflow.toml to allow it)",
                denied.join(", ")
            ));
        }
        let private = store.data().http.refused_private();
        if !outcome.success && !private.is_empty() {
            let error = outcome.error.take().unwrap_or_else(|| "step failed".into());
            outcome.error = Some(format!(
                "{error} (outgoing HTTP refused to a private address: {}; set \
                 allow_private_addresses = true in the workflow's workflow.toml to allow it)",
                private.join(", ")
            ));
        }
        outcome
    }
}

impl StepPlugin for WorkflowPlugin {
    fn run_id(&self) -> String {
        self.sha256[..12].to_string()
    }

    fn run_step(&self, task: &StepTask, target: SignalTarget) -> StepOutcome {
        WorkflowPlugin::run_step(self, task, target)
    }
}

/// The sandbox's [`StepExecutor`]: loads workflow plugins with each
/// workflow's limits and grants, on one engine (and epoch ticker) shared by
/// every workflow, started with the first plugin.
pub struct WorkflowSteps {
    cache_dir: Option<PathBuf>,
    engine: Mutex<Option<Arc<SandboxEngine>>>,
}

impl WorkflowSteps {
    /// An executor caching compiled plugins in `cache_dir` (none: compile in
    /// memory).
    pub fn new(cache_dir: Option<PathBuf>) -> Self {
        Self {
            cache_dir,
            engine: Mutex::new(None),
        }
    }

    /// The plugin at `path`, shown to load as `loop run` will load it —
    /// compiled through the cache, linked against world `workflow`,
    /// default limits and no grants — and its bytes: what `loop init`
    /// copies into a new loop.
    ///
    /// # Errors
    /// Why it cannot be used: unreadable, not a component, not a workflow
    /// plugin ([`WorkflowPlugin::load`], naming the file).
    pub fn check_plugin(&self, path: &Path) -> Result<Vec<u8>, String> {
        StepExecutor::load(
            self,
            &PluginSpec {
                plugin_path: path.to_path_buf(),
                limits: Default::default(),
                dirs: Vec::new(),
                env: Vec::new(),
                http_hosts: Vec::new(),
                allow_private_addresses: false,
            },
        )?;
        sandloop_core::input_file::read_regular(path)
            .map_err(|error| format!("cannot read plugin {}: {error}", path.display()))
    }

    fn engine(&self, config: &SandboxConfig) -> Result<Arc<SandboxEngine>, String> {
        let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(engine) = engine.as_ref() {
            return Ok(Arc::clone(engine));
        }
        let started = Arc::new(
            SandboxEngine::new(config)
                .map_err(|error| format!("cannot start the engine: {error:#}"))?,
        );
        *engine = Some(Arc::clone(&started));
        Ok(started)
    }
}

impl StepExecutor for WorkflowSteps {
    fn load(&self, spec: &PluginSpec) -> Result<Arc<dyn StepPlugin>, String> {
        spec.limits
            .validate()
            .map_err(|error| format!("workflow limits: {error}"))?;
        let config = SandboxConfig {
            limits: spec.limits.clone(),
            dirs: spec.dirs.clone(),
            env: spec.env.clone(),
            cache_dir: self.cache_dir.clone(),
            pool_instances: 0,
            ..SandboxConfig::default()
        };
        let http = HttpGrant::new(
            &spec.http_hosts,
            config.limits.call_timeout,
            spec.allow_private_addresses,
        )
        .map_err(|error| format!("http_hosts: {error}"))?;
        let engine = self.engine(&config)?;
        let plugin = WorkflowPlugin::load(&spec.plugin_path, engine, Arc::new(config), http)?;
        Ok(Arc::new(plugin))
    }
}
