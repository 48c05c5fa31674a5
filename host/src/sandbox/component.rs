//! Loading an adapter component: validating the bytes, compiling (through
//! the cache), linking the imports the sandbox provides, and detecting which
//! protocols the component exports.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use wasmtime::component::{HasSelf, InstancePre, Linker, types::ComponentItem};

use super::bindings::exports::sandloop::adapter::{
    child_risk, episode, episode_groups, replay, replay_children, seeds, variants,
};
use super::bindings::sandloop::adapter::{log, trace, types};
use super::cache::{CacheOutcome, load_or_compile, sha256_hex};
use super::config::SandboxConfig;
use super::engine::SandboxEngine;
use super::host_state::HostState;
use crate::episode::adapter::Protocols;

/// The WIT package every interface name is qualified with.
pub const WIT_PACKAGE: &str = "sandloop:adapter";
/// The WIT package version this host speaks.
pub const WIT_VERSION: &str = "0.1.0";

/// Why a component cannot be used. Each message names the file and says
/// what to do; the CLI maps these to exit code 2.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant's `path` is the component file, `message` the detail
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read adapter {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The bytes are not WebAssembly.
    #[error("{path} is not WebAssembly (no `\\0asm` header)")]
    NotWasm { path: String },
    /// A core module, not a component.
    #[error(
        "{path} is a core WebAssembly module, not a component; build it for \
         `wasm32-wasip2` or wrap it with `wasm-tools component new`"
    )]
    CoreModule { path: String },
    /// wasmtime rejected the component.
    #[error("{path} could not be compiled: {message}")]
    Compile { path: String, message: String },
    /// An import the sandbox does not provide.
    #[error("{path} imports something the sandbox does not provide: {message}")]
    Link { path: String, message: String },
    /// The exports break the contract.
    #[error("{path}: {message}")]
    Contract { path: String, message: String },
    /// The engine could not be started.
    #[error("could not start the wasmtime engine: {0}")]
    Engine(String),
}

/// What `sandloop inspect` and `summary.json` report about a component.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentInfo {
    /// The path it was loaded from, as given.
    pub path: String,
    /// sha256 of the component bytes, lowercase hex.
    pub sha256: String,
    /// Size of the component, bytes.
    pub size_bytes: u64,
    /// Exported interface (or function) names, as the component declares them.
    pub exports: Vec<String>,
    /// Imported interface names.
    pub imports: Vec<String>,
    /// Protocols detected from the exports (see [`Protocols::names`]).
    pub protocols: Vec<&'static str>,
    /// Whether the compiled form came from the cache.
    pub cache: CacheOutcome,
    /// Time to compile or load from cache, milliseconds.
    pub compile_ms: f64,
}

/// Export indices for each interface the component offers.
pub(crate) struct ExportIndices {
    pub episode: Option<episode::GuestIndices>,
    pub seeds: Option<seeds::GuestIndices>,
    pub variants: Option<variants::GuestIndices>,
    pub groups: Option<episode_groups::GuestIndices>,
    pub replay: Option<replay::GuestIndices>,
    pub replay_children: Option<replay_children::GuestIndices>,
    pub child_risk: Option<child_risk::GuestIndices>,
}

/// A compiled, linked adapter ready to be instantiated many times.
pub struct LoadedAdapter {
    pub(crate) engine: Arc<SandboxEngine>,
    pub(crate) config: Arc<SandboxConfig>,
    pub(crate) pre: InstancePre<HostState>,
    pub(crate) indices: ExportIndices,
    /// What was loaded.
    pub info: ComponentInfo,
    /// The detected protocols.
    pub protocols: Protocols,
}

fn interface_name(short: &str) -> String {
    format!("{WIT_PACKAGE}/{short}@{WIT_VERSION}")
}

/// Read, validate, compile and link the component at `path`.
///
/// Errors: [`LoadError`] for unreadable files, non-WebAssembly, core modules,
/// compile failures, imports the sandbox does not provide, and components
/// that break the contract (no `episode` nor `episode-groups` export, an
/// interface with the wrong shape or WIT version).
pub fn load(
    path: &Path,
    engine: Arc<SandboxEngine>,
    config: Arc<SandboxConfig>,
) -> Result<LoadedAdapter, LoadError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: shown.clone(),
        source,
    })?;
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm { path: shown });
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule { path: shown });
    }
    let sha256 = sha256_hex(&bytes);
    let started = Instant::now();
    let (component, cache) = load_or_compile(
        engine.engine(),
        &bytes,
        &sha256,
        config.cache_dir.as_deref(),
    )
    .map_err(|error| LoadError::Compile {
        path: shown.clone(),
        message: format!("{error:#}"),
    })?;
    let compile_ms = started.elapsed().as_secs_f64() * 1000.0;

    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine.engine())
        .map(|(name, _)| name.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(engine.engine())
        .map(|(name, _)| name.to_string())
        .collect();
    check_versions(&shown, &exports)?;

    let linker =
        linker(engine.engine()).map_err(|error| LoadError::Engine(format!("{error:#}")))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|error| LoadError::Link {
            path: shown.clone(),
            message: format!("{error:#}"),
        })?;
    let has = |short: &str| {
        let name = interface_name(short);
        matches!(
            ty.get_export(engine.engine(), &name).map(|item| item.ty),
            Some(ComponentItem::ComponentInstance(_))
        )
    };
    let shape = |short: &str, error: wasmtime::Error| LoadError::Contract {
        path: shown.clone(),
        message: format!(
            "exports `{}` but not with the shape this host expects (WIT {WIT_PACKAGE}@{WIT_VERSION}): {error:#}",
            interface_name(short)
        ),
    };
    let indices = ExportIndices {
        episode: has("episode")
            .then(|| episode::GuestIndices::new(&pre).map_err(|e| shape("episode", e)))
            .transpose()?,
        seeds: has("seeds")
            .then(|| seeds::GuestIndices::new(&pre).map_err(|e| shape("seeds", e)))
            .transpose()?,
        variants: has("variants")
            .then(|| variants::GuestIndices::new(&pre).map_err(|e| shape("variants", e)))
            .transpose()?,
        groups: has("episode-groups")
            .then(|| {
                episode_groups::GuestIndices::new(&pre).map_err(|e| shape("episode-groups", e))
            })
            .transpose()?,
        replay: has("replay")
            .then(|| replay::GuestIndices::new(&pre).map_err(|e| shape("replay", e)))
            .transpose()?,
        replay_children: has("replay-children")
            .then(|| {
                replay_children::GuestIndices::new(&pre).map_err(|e| shape("replay-children", e))
            })
            .transpose()?,
        child_risk: has("child-risk")
            .then(|| child_risk::GuestIndices::new(&pre).map_err(|e| shape("child-risk", e)))
            .transpose()?,
    };
    let protocols = Protocols {
        execute: indices.episode.is_some(),
        seeds: indices.seeds.is_some(),
        variants: indices.variants.is_some(),
        episode_groups: indices.groups.is_some(),
        replay: indices.replay.is_some(),
        replay_children: indices.replay_children.is_some(),
        child_risk: indices.child_risk.is_some(),
    };
    check_dependencies(&shown, &protocols, &exports)?;
    let info = ComponentInfo {
        path: shown,
        sha256,
        size_bytes: bytes.len() as u64,
        exports,
        imports,
        protocols: protocols.names(),
        cache,
        compile_ms,
    };
    Ok(LoadedAdapter {
        engine,
        config,
        pre,
        indices,
        info,
        protocols,
    })
}

/// The linker every adapter instance is created with: WASI p2 (restricted by
/// each instance's context) plus the `log` and `trace` imports.
fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    trace::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    Ok(linker)
}

/// Refuse exports of this package at another version, naming both.
fn check_versions(path: &str, exports: &[String]) -> Result<(), LoadError> {
    let prefix = format!("{WIT_PACKAGE}/");
    for export in exports {
        if let Some(rest) = export.strip_prefix(&prefix) {
            let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("");
            if version != WIT_VERSION {
                return Err(LoadError::Contract {
                    path: path.to_string(),
                    message: format!(
                        "exports `{export}`, but this host speaks {WIT_PACKAGE}@{WIT_VERSION}; \
                         rebuild the adapter against the WIT shipped with this sandloop"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The host refuses a component whose exports cannot run anything.
fn check_dependencies(
    path: &str,
    protocols: &Protocols,
    exports: &[String],
) -> Result<(), LoadError> {
    for (has, needs, name, needed) in [
        (
            protocols.child_risk,
            protocols.replay_children,
            "child-risk",
            "replay-children",
        ),
        (
            protocols.replay_children,
            protocols.replay,
            "replay-children",
            "replay",
        ),
    ] {
        if has && !needs {
            return Err(LoadError::Contract {
                path: path.to_string(),
                message: format!(
                    "exports `{}` without `{}`, which it builds on; export both or neither",
                    interface_name(name),
                    interface_name(needed)
                ),
            });
        }
    }
    if protocols.replay && !protocols.episode_groups {
        return Err(LoadError::Contract {
            path: path.to_string(),
            message: format!(
                "exports `{}` without `{}`: replay points capture the state of a prepared \
                 episode group, so an adapter that exports replay must export episode groups too",
                interface_name("replay"),
                interface_name("episode-groups")
            ),
        });
    }
    if protocols.execute || protocols.episode_groups {
        return Ok(());
    }
    let offered: Vec<&str> = [("seeds", protocols.seeds), ("variants", protocols.variants)]
        .into_iter()
        .filter_map(|(name, has)| has.then_some(name))
        .collect();
    let message = if offered.is_empty() {
        format!(
            "exports none of the sandloop episode interfaces; an adapter must export \
             `{}` or `{}`",
            interface_name("episode"),
            interface_name("episode-groups")
        )
    } else {
        format!(
            "exports `{}` but neither `episode` nor `episode-groups`, so there is nothing to \
             run its items with",
            offered.join("` and `")
        )
    };
    let exported = if exports.is_empty() {
        "it exports nothing".to_string()
    } else {
        format!("it exports: {}", exports.join(", "))
    };
    Err(LoadError::Contract {
        path: path.to_string(),
        message: format!("{message} ({exported})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocols(execute: bool, seeds: bool, variants: bool, episode_groups: bool) -> Protocols {
        Protocols {
            execute,
            seeds,
            variants,
            episode_groups,
            replay: false,
            replay_children: false,
            child_risk: false,
        }
    }

    #[test]
    fn replay_without_episode_groups_is_refused_by_name() {
        let mut replay_only = protocols(true, false, false, false);
        replay_only.replay = true;
        let message = check_dependencies("a.wasm", &replay_only, &[])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("exports `sandloop:adapter/replay@0.1.0` without `sandloop:adapter/episode-groups@0.1.0`"),
            "{message}"
        );
        let mut both = protocols(false, false, false, true);
        both.replay = true;
        assert!(check_dependencies("a.wasm", &both, &[]).is_ok());
        let mut risk_only = both;
        risk_only.child_risk = true;
        let message = check_dependencies("a.wasm", &risk_only, &[])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("exports `sandloop:adapter/child-risk@0.1.0` without `sandloop:adapter/replay-children@0.1.0`"),
            "{message}"
        );
        let mut children_only = protocols(false, false, false, true);
        children_only.replay_children = true;
        let message = check_dependencies("a.wasm", &children_only, &[])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(
                "`sandloop:adapter/replay-children@0.1.0` without `sandloop:adapter/replay@0.1.0`"
            ),
            "{message}"
        );
        children_only.replay = true;
        children_only.child_risk = true;
        assert!(check_dependencies("a.wasm", &children_only, &[]).is_ok());
    }

    #[test]
    fn an_adapter_must_export_something_to_run_items_with() {
        assert!(check_dependencies("a.wasm", &protocols(true, false, false, false), &[]).is_ok());
        assert!(check_dependencies("a.wasm", &protocols(false, true, true, true), &[]).is_ok());
        let none = check_dependencies(
            "a.wasm",
            &protocols(false, false, false, false),
            &["wasi:cli/run@0.2.6".to_string()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            none.starts_with("a.wasm: exports none of the sandloop episode interfaces"),
            "{none}"
        );
        let seeds_only = check_dependencies("a.wasm", &protocols(false, true, true, false), &[])
            .unwrap_err()
            .to_string();
        assert!(
            seeds_only.contains(
                "exports `seeds` and `variants` but neither `episode` nor `episode-groups`"
            ),
            "{seeds_only}"
        );
    }

    #[test]
    fn exports_of_another_wit_version_are_refused_by_name() {
        let exports = vec!["sandloop:adapter/episode@0.2.0".to_string()];
        let message = check_versions("a.wasm", &exports).unwrap_err().to_string();
        assert!(
            message.contains("sandloop:adapter/episode@0.2.0"),
            "{message}"
        );
        assert!(
            message.contains("this host speaks sandloop:adapter@0.1.0"),
            "{message}"
        );
        let ours = vec![
            "sandloop:adapter/episode@0.1.0".to_string(),
            "wasi:cli/run@0.2.6".to_string(),
        ];
        assert!(check_versions("a.wasm", &ours).is_ok());
    }
}
