//! What the commands that run part of a finished run again (`sandloop
//! replay`, `sandloop counterfactual`) share: the run's lock, its
//! component loaded into the sandbox the run used, and a durable replay
//! point adopted into a fresh instance.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::{RunComponentArgs, SandboxArgs};
use super::compile_notice::while_compiling;
use super::run::sandbox_config;
use super::{CliError, open_sandbox};
use crate::episode::adapter::Item;
use crate::finished_run::offline::{ReplaysFile, RunSource, as_run_saw_it};
use crate::harness::run_files::MANIFEST_FILE;
use crate::replay::durable::{DurableKind, PointLine, read_durable_state};
use crate::replay::{MemoryAgentStateStore, ReplayError, ReplayPoint, ReplayPointRegistry};
use crate::sandbox::SandboxLimits;
use crate::sandbox::adapter::{
    BindingHandle, SnapshotCompileCost, adopt_durable_point, adopt_snapshot_point,
    snapshot_replay_adapter,
};
use crate::sandbox::snapshot::CompiledSnapshot;
use crate::sandbox::{LoadedAdapter, WasmAdapter, load};

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// The sandbox the run used, from its recorded options; relative grant
/// paths are resolved against the run's working directory.
pub(super) fn sandbox_args(
    options: &Map<String, Value>,
    cwd: Option<&Path>,
    cache_dir: Option<PathBuf>,
    no_cache: bool,
) -> SandboxArgs {
    // `Map` indexing panics on a missing key; an option a manifest lacks
    // reads as `null`, so its default applies.
    let option = |key: &str| options.get(key).unwrap_or(&Value::Null);
    let strings = |key: &str| -> Vec<String> {
        option(key)
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    // The limits are read by [`limits_from_manifest`], which names the
    // manifest when one is out of bounds; these are only their defaults.
    let limits = SandboxLimits::default();
    SandboxArgs {
        max_memory: limits.max_memory_mib,
        call_timeout: limits.call_timeout.as_secs_f64(),
        fuel: None,
        dirs: strings("dirs")
            .into_iter()
            .map(|spec| match spec.split_once("::") {
                Some((host, guest)) => {
                    format!("{}::{guest}", as_run_saw_it(host, cwd).display())
                }
                None => spec,
            })
            .collect(),
        env: strings("env"),
        max_output: limits.max_output_bytes,
        max_open_files: limits.max_open_files,
        cache_dir,
        no_cache,
    }
}

/// The limits the run recorded in `manifest` (its options
/// `max_memory_mib`, `call_timeout_secs`, `fuel`, `max_output_bytes`,
/// `max_open_files`; one missing or `null` takes its default), checked as
/// `sandloop run` checked them.
///
/// # Errors
/// A value of the wrong type or out of its bounds, naming the manifest and
/// the option.
pub(super) fn limits_from_manifest(
    options: &Map<String, Value>,
    manifest: &Path,
) -> Result<SandboxLimits, CliError> {
    const KEYS: [&str; 5] = [
        "max_memory_mib",
        "call_timeout_secs",
        "fuel",
        "max_output_bytes",
        "max_open_files",
    ];
    let recorded: Map<String, Value> = KEYS
        .iter()
        .filter_map(|key| {
            options
                .get(*key)
                .filter(|value| !value.is_null())
                .map(|value| ((*key).to_string(), value.clone()))
        })
        .collect();
    let named = |problem: String| {
        input(format!(
            "{}: the run's recorded limits: {problem}",
            manifest.display()
        ))
    };
    let limits: SandboxLimits = serde_path_to_error::deserialize(Value::Object(recorded))
        .map_err(|error| named(format!("options.{}: {}", error.path(), error.inner())))?;
    limits
        .validate()
        .map_err(|error| named(format!("options.{error}")))?;
    Ok(limits)
}

/// Where a command takes the run's component from, and where it compiles
/// it.
pub struct ComponentSource<'a> {
    /// The run directory.
    pub run: &'a Path,
    /// `--adapter` (the component, when not the one the run recorded),
    /// `--cache-dir`, `--no-cache`.
    pub component: &'a RunComponentArgs,
    /// Instances alive at once: the pooling allocator's slots.
    pub instances: u32,
}

/// The run's component (its recorded path, or `--adapter`), loaded into the
/// sandbox the run used — its limits and grants, the grants still the
/// directories the run was given — and checked to be the run's (same
/// sha256) and to export `replay`. A durable point of `kind` snapshot is
/// compiled beside the instrumented component, as in the run.
pub fn load_run_adapter(
    from: &ComponentSource<'_>,
    source: &RunSource,
    kind: DurableKind,
) -> Result<Arc<LoadedAdapter>, CliError> {
    let adapter_path = match &from.component.adapter {
        Some(path) => path.clone(),
        None => as_run_saw_it(
            source
                .options
                .get("adapter")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    input("manifest.json does not name the run's adapter; give --adapter")
                })?,
            source.cwd.as_deref(),
        ),
    };
    let sandbox = sandbox_args(
        &source.options,
        source.cwd.as_deref(),
        from.component.cache_dir.clone(),
        from.component.no_cache,
    );
    let mut config = sandbox_config(&sandbox, from.instances)?;
    config.limits = limits_from_manifest(&source.options, &from.run.join(MANIFEST_FILE))?;
    // As in the run that wrote it: a snapshot is compiled beside the
    // instrumented component, whose functions it reuses.
    config.incremental_compilation = kind == DurableKind::Snapshot;
    // The directories the run was granted, not what their paths name now.
    sandloop_core::harness::grant_check::check_unchanged(
        &from.run.join(MANIFEST_FILE),
        &config.dirs,
    )
    .map_err(CliError::Input)?;
    // The run's component, by its bytes, before anything is compiled.
    if let Ok(bytes) = std::fs::read(&adapter_path) {
        let sha256 = sandloop_core::digest::sha256_hex(&bytes);
        if sha256 != source.sha256 {
            return Err(not_the_runs(&adapter_path, &sha256, &source.sha256));
        }
    }
    let (engine, config) = open_sandbox(config)?;
    let cached = config.cache_dir.is_some();
    let loaded = while_compiling(&adapter_path, "NAME", cached, false, || {
        load(&adapter_path, engine, config)
    });
    let loaded = Arc::new(loaded.map_err(|error| match error {
        crate::sandbox::LoadError::Read { .. } if from.component.adapter.is_none() => input(format!(
            "{error}; the run's component moved? give it with --adapter (its sha256 must match the run's)"
        )),
        other => other.into(),
    })?);
    if loaded.info.sha256 != source.sha256 {
        return Err(not_the_runs(
            &adapter_path,
            &loaded.info.sha256,
            &source.sha256,
        ));
    }
    if !loaded.protocols.replay {
        return Err(input(format!(
            "{} does not export `replay`",
            adapter_path.display()
        )));
    }
    Ok(loaded)
}

/// The durable point `line`'s state (its exported bytes, or its snapshot
/// component) and the item `item_id` among the group's items it was saved
/// with.
///
/// Errors: the state or items file is unreadable or does not match its
/// recorded sha256 (exit 2); the item is not among the point's items (the
/// message, for the caller to name the field it came from).
pub fn point_state_and_item(
    run: &Path,
    line: &PointLine,
    item_id: &str,
) -> Result<(Vec<u8>, Item), Result<CliError, String>> {
    let state_file = line
        .durable_state
        .as_ref()
        .expect("a planned point is durable");
    let (state, items) =
        read_durable_state(run, state_file).map_err(|error| Ok(input(error.to_string())))?;
    let item = items
        .into_iter()
        .find(|item| item.get("item_id").and_then(Value::as_str) == Some(item_id))
        .ok_or_else(|| {
            Err(format!(
                "item {item_id:?} is not among the items of replay point {}",
                line.point.replay_point_id
            ))
        })?;
    Ok((state, item))
}

/// `path` (sha256 `found`) is not the run's component (`expected`).
fn not_the_runs(path: &Path, found: &str, expected: &str) -> CliError {
    input(format!(
        "{} is not the component this run used (sha256 {}…, the run's is {}…)",
        path.display(),
        &found[..12.min(found.len())],
        &expected[..12.min(expected.len())]
    ))
}

/// A durable point adopted into a fresh instance.
pub struct AdoptedPoint {
    /// The instance holding the point's binding.
    pub adapter: WasmAdapter,
    /// For a snapshot point: what loading the snapshot cost, and the
    /// compiled snapshot (its children are instances of it).
    pub snapshot: Option<(SnapshotCompileCost, CompiledSnapshot)>,
    /// The adopted point, or why adoption failed (the command's result,
    /// not its error).
    pub point: Result<ReplayPoint, ReplayError>,
}

/// Adopt `line`'s durable point into a fresh adapter of `loaded`
/// registered in `registry`: by importing its exported `state`, or, for a
/// snapshot point, by resuming its binding in an instance of the snapshot
/// (`state` is then the snapshot component).
///
/// Errors: the snapshot cannot be compiled (exit 1).
pub fn adopt_point(
    loaded: &Arc<LoadedAdapter>,
    line: &PointLine,
    state: &[u8],
    registry: &mut ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
) -> Result<AdoptedPoint, CliError> {
    let state_file = line
        .durable_state
        .as_ref()
        .expect("a planned point is durable");
    if let (DurableKind::Snapshot, Some(token)) = (state_file.kind, state_file.binding_token) {
        let (mut adapter, cost, compiled) =
            snapshot_replay_adapter(loaded, state, &state_file.sha256).map_err(|error| {
                CliError::Failed(format!("cannot load the replay point's snapshot: {error}"))
            })?;
        let point = adopt_snapshot_point(&mut adapter, registry, &line.point, token);
        return Ok(AdoptedPoint {
            adapter,
            snapshot: Some((cost, compiled)),
            point,
        });
    }
    let mut adapter = WasmAdapter::new(Arc::clone(loaded), "replay", None);
    let point = adopt_durable_point(
        &mut adapter,
        registry,
        &line.point,
        &line.execution_group_id,
        state,
    );
    Ok(AdoptedPoint {
        adapter,
        snapshot: None,
        point,
    })
}

/// Lock the run directory as `sandloop run` does; refuse (exit 2) while a
/// run or another command holds it.
pub fn lock_run(run: &Path, command: &str) -> Result<sandloop_core::dir_lock::DirLock, CliError> {
    sandloop_core::dir_lock::lock_dir(run).map_err(|error| match error {
        sandloop_core::dir_lock::DirLockError::Held { holder, .. } => input(format!(
            "{} is in use by another sandloop process ({}); run `sandloop {command}` again once it has finished",
            run.display(),
            sandloop_core::dir_lock::Holder(holder)
        )),
        other => CliError::Failed(other.to_string()),
    })
}

/// Open the run's log `path` (`replays.jsonl`, `counterfactuals.jsonl`)
/// for appending, what it already holds, and refuse (exit 2) a symbolic
/// link or anything but a regular file (a FIFO is never waited on): a
/// command writes inside its run directory only
/// ([`sandloop_core::atomic::open_regular`]).
pub fn open_run_log(path: &Path) -> Result<(std::fs::File, ReplaysFile), CliError> {
    let mut file = sandloop_core::atomic::open_regular(
        std::fs::OpenOptions::new()
            .read(true)
            .create(true)
            .append(true),
        path,
    )
    .map_err(|error| input(error.to_string()))?;
    let log = ReplaysFile::read(&mut file, path)?;
    Ok((file, log))
}

/// An error's `stage`, `type` and `message`, as `replays.jsonl` and
/// `counterfactuals.jsonl` hold it.
pub fn error_fields(error: &ReplayError) -> Value {
    json!({
        "stage": error.stage.as_str(),
        "type": error.cause.error_type(),
        "message": error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finished_run::offline::run_source;
    use proptest::prelude::*;
    use sandloop_core::hostile_inputs::{config, json_value};
    use serde_json::json;

    #[test]
    fn a_manifest_without_some_options_falls_back_to_the_defaults() {
        let sandbox = sandbox_args(&Map::new(), None, None, false);
        assert!(sandbox.dirs.is_empty() && sandbox.env.is_empty());
        let manifest = Path::new("run/manifest.json");
        let limits = limits_from_manifest(&Map::new(), manifest).unwrap();
        assert_eq!(limits, SandboxLimits::default());
        let Value::Object(options) = json!({"fuel": 5000, "max_memory_mib": null}) else {
            unreachable!()
        };
        let limits = limits_from_manifest(&options, manifest).unwrap();
        assert_eq!((limits.fuel, limits.max_memory_mib), (Some(5000), 512));
    }

    #[test]
    fn recorded_limits_out_of_bounds_name_the_manifest_and_the_option() {
        let manifest = Path::new("run/manifest.json");
        for (options, named) in [
            (
                json!({"call_timeout_secs": 1e20}),
                "options.call_timeout_secs: 1e20 is not a number of seconds",
            ),
            (
                json!({"call_timeout_secs": 1e-300}),
                "options.call_timeout_secs: must be between 0.01",
            ),
            (
                json!({"max_memory_mib": 0}),
                "options.max_memory_mib: must be between 1 and 65536 MiB",
            ),
            (json!({"fuel": "lots"}), "options.fuel: invalid type"),
        ] {
            let Value::Object(options) = options else {
                unreachable!()
            };
            let Err(CliError::Input(message)) = limits_from_manifest(&options, manifest) else {
                panic!("{options:?} was accepted");
            };
            assert!(
                message.starts_with("run/manifest.json: the run's recorded limits: ")
                    && message.contains(named),
                "{message}"
            );
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_replay_manifest_any_json_never_panics_and_errors_name_it(
            manifest in prop_oneof![
                json_value(),
                (json_value(), json_value(), json_value()).prop_map(|(options, cwd, sha)| {
                    json!({"invocations": [{"options": options, "cwd": cwd}],
                           "adapter": {"sha256": sha}})
                }),
                prop::collection::vec((
                    prop::sample::select(vec!["max_memory_mib", "call_timeout_secs", "fuel",
                                              "dirs", "env", "max_output_bytes", "adapter"]),
                    json_value(),
                ), 0..7).prop_map(|options| {
                    let options: Map<String, Value> =
                        options.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    json!({"invocations": [{"options": options}], "adapter": {"sha256": "ab"}})
                }),
            ],
        ) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
            match run_source(dir.path()) {
                Ok(found) => {
                    let _ = sandbox_args(&found.options, found.cwd.as_deref(), None, true);
                    if let Err(CliError::Input(message)) =
                        limits_from_manifest(&found.options, &dir.path().join("manifest.json"))
                    {
                        prop_assert!(message.contains(&dir.path().display().to_string()), "{}", message);
                    }
                }
                Err(error) => {
                    let crate::finished_run::OfflineError::Input(message) = error else {
                        panic!("a readable manifest is never an I/O error: {error}");
                    };
                    prop_assert!(message.contains(&dir.path().display().to_string()), "{}", message);
                }
            }
        }
    }
}
