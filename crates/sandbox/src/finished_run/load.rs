//! A finished run's component, loaded into the sandbox the run used and
//! checked to be the run's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use sandloop_core::finished_run::offline::as_run_saw_it;
use sandloop_core::finished_run::{FinishedRun, OfflineError};
use sandloop_core::harness::run_files::MANIFEST_FILE;
use sandloop_core::replay::durable::DurableKind;

use super::recorded::recorded_config;
use crate::component::{LoadError, LoadedAdapter, load};
use crate::engine::SandboxEngine;

/// Which component a command loads and where it compiles it.
#[derive(Clone, Debug, Default)]
pub struct RunComponent {
    /// The component, when not the one the run recorded (`--adapter`): its
    /// sha256 must still be the run's.
    pub adapter: Option<PathBuf>,
    /// The compile cache: `None` for the default directory.
    pub cache_dir: Option<PathBuf>,
    /// Compile in memory only (`--no-cache`).
    pub no_cache: bool,
    /// Instances alive at once: the pooling allocator's slots.
    pub instances: u32,
}

/// `run`'s component (its recorded path, or `component.adapter`), loaded
/// into the sandbox the run used — its recorded limits and grants, the
/// grants still the directories the run was given
/// ([`check_unchanged`](sandloop_core::harness::grant_check::check_unchanged))
/// — and checked to be the run's (same sha256) and to export `replay`. A
/// durable point of `kind` snapshot is compiled beside the instrumented
/// component, as in the run. `compile` is given the component's path,
/// whether its compiled code is cached, and the load to run (the compile,
/// on a cache miss): a caller shows a notice while it runs.
///
/// # Errors
/// [`OfflineError::Input`]: the manifest names no component, a recorded
/// option is out of bounds, a grant changed, the component is missing, not
/// the run's or exports no `replay`, the engine cannot start with the
/// recorded limits. [`OfflineError::Failed`]: the engine failed compiling
/// it.
pub fn load_run_component(
    run: &FinishedRun,
    component: &RunComponent,
    kind: DurableKind,
    compile: impl FnOnce(
        &Path,
        bool,
        &mut dyn FnMut() -> Result<LoadedAdapter, LoadError>,
    ) -> Result<LoadedAdapter, LoadError>,
) -> Result<Arc<LoadedAdapter>, OfflineError> {
    let input = OfflineError::Input;
    let source = run.source();
    let manifest = run.dir().join(MANIFEST_FILE);
    let path = match &component.adapter {
        Some(path) => path.clone(),
        None => as_run_saw_it(
            source
                .options
                .get("adapter")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    input("manifest.json does not name the run's adapter; give --adapter".into())
                })?,
            source.cwd.as_deref(),
        ),
    };
    let mut config = recorded_config(source, &manifest, component.instances)?;
    if component.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &component.cache_dir {
        config.cache_dir = Some(dir.clone());
    }
    // As in the run that wrote it: a snapshot is compiled beside the
    // instrumented component, whose functions it reuses.
    config.incremental_compilation = kind == DurableKind::Snapshot;
    // The directories the run was granted, not what their paths name now.
    sandloop_core::harness::grant_check::check_unchanged(&manifest, &config.dirs).map_err(input)?;
    // The run's component, by its bytes, before anything is compiled.
    if let Ok(bytes) = std::fs::read(&path) {
        let sha256 = sandloop_core::digest::sha256_hex(&bytes);
        if sha256 != source.sha256 {
            return Err(not_the_runs(&path, &sha256, &source.sha256));
        }
    }
    let engine = SandboxEngine::new(&config).map_err(|error| {
        input(format!(
            "could not start the wasmtime engine with the run's limits: {error:#}"
        ))
    })?;
    let (engine, config) = (Arc::new(engine), Arc::new(config));
    let cached = config.cache_dir.is_some();
    let loaded = compile(&path, cached, &mut || {
        load(&path, Arc::clone(&engine), Arc::clone(&config))
    })
    .map_err(|error| match error {
        LoadError::Read { .. } if component.adapter.is_none() => input(format!(
            "{error}; the run's component moved? give it with --adapter (its sha256 must match the run's)"
        )),
        LoadError::Engine(message) => OfflineError::Failed(message),
        other => input(other.to_string()),
    })?;
    if loaded.info.sha256 != source.sha256 {
        return Err(not_the_runs(&path, &loaded.info.sha256, &source.sha256));
    }
    if !loaded.protocols.replay {
        return Err(input(format!(
            "{} does not export `replay`",
            path.display()
        )));
    }
    Ok(Arc::new(loaded))
}

/// `path` (sha256 `found`) is not the run's component (`expected`).
fn not_the_runs(path: &Path, found: &str, expected: &str) -> OfflineError {
    OfflineError::Input(format!(
        "{} is not the component this run used (sha256 {}…, the run's is {}…)",
        path.display(),
        &found[..12.min(found.len())],
        &expected[..12.min(expected.len())]
    ))
}
