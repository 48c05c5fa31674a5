//! The sandbox a finished run used, from the options its manifest
//! recorded: its limits, checked as `sandloop run` checked them, and its
//! grants, relative paths taken from the directory the run started in.

use std::path::Path;

use serde_json::{Map, Value};

use sandloop_core::finished_run::OfflineError;
use sandloop_core::finished_run::offline::{RunSource, as_run_saw_it};

use crate::config::{DirGrant, SandboxConfig, SandboxLimits, env_names};

/// The limits the run recorded in `options` (`max_memory_mib`,
/// `call_timeout_secs`, `fuel`, `max_output_bytes`, `max_open_files`; one
/// missing or `null` takes its default), checked by
/// [`SandboxLimits::validate`].
///
/// # Errors
/// [`OfflineError::Input`]: a value of the wrong type or out of its
/// bounds, naming `manifest` and the option.
pub fn recorded_limits(
    options: &Map<String, Value>,
    manifest: &Path,
) -> Result<SandboxLimits, OfflineError> {
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
        OfflineError::Input(format!(
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

/// The recorded option `key` as a list of strings (anything else in it is
/// skipped; a missing option is empty).
fn strings(options: &Map<String, Value>, key: &str) -> Vec<String> {
    options
        .get(key)
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The sandbox `source`'s run used — its limits (each checked as `sandloop run` checks them),
/// directory grants (a relative host path taken from the run's working
/// directory) and passed-through environment names — with `instances`
/// pool slots. The cache directory is the default's; the caller sets it.
///
/// # Errors
/// [`OfflineError::Input`] naming `manifest`: a limit out of bounds, a
/// grant that does not parse, an environment entry that is not a name.
pub fn recorded_config(
    source: &RunSource,
    manifest: &Path,
    instances: u32,
) -> Result<SandboxConfig, OfflineError> {
    let cwd = source.cwd.as_deref();
    let dirs: Vec<String> = strings(&source.options, "dirs")
        .into_iter()
        .map(|spec| match spec.split_once("::") {
            Some((host, guest)) => format!("{}::{guest}", as_run_saw_it(host, cwd).display()),
            None => spec,
        })
        .collect();
    let in_manifest =
        |message: String| OfflineError::Input(format!("{}: {message}", manifest.display()));
    let dirs = DirGrant::parse_all(&dirs).map_err(in_manifest)?;
    let recorded_env = strings(&source.options, "env");
    let env = env_names(&recorded_env, |name| {
        tracing::warn!(
            "the run passed {name} through; it is not set here, so the instances will not see it"
        );
    })
    .map_err(|name| {
        in_manifest(format!(
            "options.env: {name:?} is not the name of a host variable"
        ))
    })?;
    Ok(SandboxConfig {
        limits: recorded_limits(&source.options, manifest)?,
        dirs,
        env,
        pool_instances: instances,
        ..SandboxConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sandloop_core::finished_run::offline::run_source;
    use sandloop_core::hostile_inputs::{config, json_value};
    use serde_json::json;

    use super::*;

    fn source(options: Value) -> RunSource {
        RunSource {
            options: options.as_object().unwrap().clone(),
            cwd: Some("/started/here".into()),
            sha256: "ab".into(),
        }
    }

    #[test]
    fn a_manifest_without_some_options_falls_back_to_the_defaults() {
        let manifest = Path::new("run/manifest.json");
        let config = recorded_config(&source(json!({})), manifest, 2).unwrap();
        assert!(config.dirs.is_empty() && config.env.is_empty());
        assert_eq!(config.limits, SandboxLimits::default());
        assert_eq!(config.pool_instances, 2);
        let limits = recorded_limits(
            json!({"fuel": 5000, "max_memory_mib": null})
                .as_object()
                .unwrap(),
            manifest,
        )
        .unwrap();
        assert_eq!((limits.fuel, limits.max_memory_mib), (Some(5000), 512));
    }

    #[test]
    fn recorded_grants_are_taken_from_where_the_run_started_and_names_are_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let source = RunSource {
            cwd: Some(dir.path().to_owned()),
            ..source(json!({"dirs": ["data::/data"], "env": ["HOME", "HOME"]}))
        };
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let config = recorded_config(&source, Path::new("m.json"), 1).unwrap();
        assert_eq!(config.env, vec!["HOME".to_string()]);
        assert_eq!(config.dirs.len(), 1);
        let bad = recorded_config(
            &self::source(json!({"env": ["A=1"]})),
            Path::new("run/manifest.json"),
            1,
        );
        let Err(OfflineError::Input(message)) = bad else {
            panic!("a NAME=VALUE entry was accepted")
        };
        assert!(
            message.starts_with("run/manifest.json: options.env"),
            "{message}"
        );
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
            let Err(OfflineError::Input(message)) =
                recorded_limits(options.as_object().unwrap(), manifest)
            else {
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
            let path = dir.path().join("manifest.json");
            std::fs::write(&path, manifest.to_string()).unwrap();
            let shown = dir.path().display().to_string();
            match run_source(dir.path()) {
                Ok(found) => {
                    if let Err(error) = recorded_config(&found, &path, 1) {
                        let OfflineError::Input(message) = error else {
                            panic!("a recorded option is never an I/O error: {error}");
                        };
                        prop_assert!(message.contains(&shown), "{}", message);
                    }
                }
                Err(error) => {
                    let OfflineError::Input(message) = error else {
                        panic!("a readable manifest is never an I/O error: {error}");
                    };
                    prop_assert!(message.contains(&shown), "{}", message);
                }
            }
        }
    }
}
