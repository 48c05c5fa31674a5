//! Loading an adapter component: reading and validating the bytes,
//! compiling them (through the cache), linking the imports the sandbox
//! provides, and binding the interfaces the contract check found fitting.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use wasmtime::component::{HasSelf, InstancePre, Linker};

use super::contract::{Problem, check_contract, explain_problems, interface_name};
use super::exports::found_exports;
use super::twin::Twins;
use crate::bindings::exports::sandloop::adapter::{
    child_risk, counterfactual, episode, episode_groups, replay, replay_children, seeds, variants,
};
use crate::bindings::sandloop::adapter::{log, trace, types};
use crate::cache::{CacheOutcome, load_or_compile, sha256_hex};
use crate::config::SandboxConfig;
use crate::engine::SandboxEngine;
use crate::host_state::HostState;
use sandloop_contract::{WIT_PACKAGE, WIT_VERSION};
use sandloop_core::episode::adapter::Protocols;

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
    /// The component's own initial linear memory is above the memory limit.
    #[error(
        "{path} starts with {needed_mib} MiB of linear memory, above the limit of {limit_mib} MiB; \
         raise --max-memory to at least {needed_mib}"
    )]
    MemoryTooSmall {
        path: String,
        needed_mib: u64,
        limit_mib: u64,
    },
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

impl LoadError {
    /// The error's kind as `inspect --json` names it: `unreadable`,
    /// `not_wasm`, `core_module`, `compile_failed`, `memory_too_small`,
    /// `unsupported_import`, `contract` or `engine`.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::Read { .. } => "unreadable",
            LoadError::NotWasm { .. } => "not_wasm",
            LoadError::CoreModule { .. } => "core_module",
            LoadError::Compile { .. } => "compile_failed",
            LoadError::MemoryTooSmall { .. } => "memory_too_small",
            LoadError::Link { .. } => "unsupported_import",
            LoadError::Contract { .. } => "contract",
            LoadError::Engine(_) => "engine",
        }
    }
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
    pub counterfactual: Option<counterfactual::GuestIndices>,
}

impl ExportIndices {
    /// Bind every interface of `protocols` in `pre`: wasmtime's type check
    /// of each function against the host's bindings of `wit/adapter.wit`.
    ///
    /// Errors: the interface (`episode`, `replay-children`, ...) that does
    /// not bind, with wasmtime's reason.
    pub(crate) fn bind(
        pre: &InstancePre<HostState>,
        protocols: &Protocols,
    ) -> Result<ExportIndices, (&'static str, wasmtime::Error)> {
        /// `GuestIndices::new` of one interface when `offered`.
        fn bound<T>(
            offered: bool,
            short: &'static str,
            new: impl FnOnce() -> wasmtime::Result<T>,
        ) -> Result<Option<T>, (&'static str, wasmtime::Error)> {
            offered
                .then(new)
                .transpose()
                .map_err(|error| (short, error))
        }
        Ok(ExportIndices {
            episode: bound(protocols.execute, "episode", || {
                episode::GuestIndices::new(pre)
            })?,
            seeds: bound(protocols.seeds, "seeds", || seeds::GuestIndices::new(pre))?,
            variants: bound(protocols.variants, "variants", || {
                variants::GuestIndices::new(pre)
            })?,
            groups: bound(protocols.episode_groups, "episode-groups", || {
                episode_groups::GuestIndices::new(pre)
            })?,
            replay: bound(protocols.replay, "replay", || {
                replay::GuestIndices::new(pre)
            })?,
            replay_children: bound(protocols.replay_children, "replay-children", || {
                replay_children::GuestIndices::new(pre)
            })?,
            child_risk: bound(protocols.child_risk, "child-risk", || {
                child_risk::GuestIndices::new(pre)
            })?,
            counterfactual: bound(protocols.counterfactual, "counterfactual", || {
                counterfactual::GuestIndices::new(pre)
            })?,
        })
    }
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
    /// The same component in engines of their own, for the children a
    /// parallel group forks on its helper threads.
    pub(crate) twins: Twins,
}

impl LoadedAdapter {
    /// The limits and grants every instance of this adapter gets.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }
}

/// A compiled component with what the host found in it, whether or not it
/// fits the contract: what `sandloop inspect` reports, and what [`load`]
/// turns into a [`LoadedAdapter`] or a [`LoadError`].
pub struct Examined {
    engine: Arc<SandboxEngine>,
    config: Arc<SandboxConfig>,
    /// The component's facts; `protocols` holds only the protocols whose
    /// interfaces fit the contract.
    pub info: ComponentInfo,
    /// Every way the exports break the contract, in the order they are
    /// reported; empty for a usable adapter.
    pub problems: Vec<Problem>,
    protocols: Protocols,
    pre: Result<InstancePre<HostState>, String>,
}

impl Examined {
    /// The protocols whose interfaces fit the contract.
    pub fn protocols(&self) -> Protocols {
        self.protocols
    }

    /// Why the component cannot be loaded (its contract problems first,
    /// then an import the sandbox does not provide), or `None` when it can.
    pub fn error(&self) -> Option<LoadError> {
        if let Some(message) = explain_problems(&self.problems) {
            return Some(LoadError::Contract {
                path: self.info.path.clone(),
                message,
            });
        }
        self.pre.as_ref().err().map(|message| LoadError::Link {
            path: self.info.path.clone(),
            message: message.clone(),
        })
    }

    /// The usable adapter, or why the component cannot be used.
    pub fn into_loaded(self) -> Result<LoadedAdapter, LoadError> {
        if let Some(error) = self.error() {
            return Err(error);
        }
        let Examined {
            engine,
            config,
            info,
            protocols,
            pre,
            ..
        } = self;
        let pre = pre.expect("checked by error()");
        // The contract check above already typechecked every function; a
        // failure here would be a host bug, still reported by name.
        let indices = ExportIndices::bind(&pre, &protocols).map_err(|(short, error)| {
            LoadError::Contract {
                path: info.path.clone(),
                message: format!(
                    "exports `{}` but not with the shape this host expects (WIT {WIT_PACKAGE}@{WIT_VERSION}): {error:#}",
                    interface_name(short)
                ),
            }
        })?;
        Ok(LoadedAdapter {
            engine,
            config,
            pre,
            indices,
            info,
            protocols,
            twins: Twins::for_helpers(),
        })
    }
}

/// A compile error, told as a memory limit when the pooling allocator
/// refused the component's initial memory (wasmtime says "memory has a
/// minimum byte size of N which exceeds the limit of 0xM bytes").
pub(crate) fn compile_error(path: &str, error: &wasmtime::Error, limit_mib: u64) -> LoadError {
    let message = format!("{error:#}");
    let needed = message
        .split("minimum byte size of ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|bytes| bytes.parse::<u64>().ok());
    match needed {
        Some(bytes) if message.contains("exceeds the limit") => LoadError::MemoryTooSmall {
            path: path.to_string(),
            needed_mib: bytes.div_ceil(1 << 20),
            limit_mib,
        },
        _ => LoadError::Compile {
            path: path.to_string(),
            message,
        },
    }
}

/// Read, validate, compile and link the component at `path`.
///
/// Errors: [`LoadError`] for unreadable files, non-WebAssembly, core modules,
/// compile failures, imports the sandbox does not provide, and components
/// that break the contract (no `episode` nor `episode-groups` export, an
/// interface with a missing or mistyped function or of another WIT version,
/// an interface without the one it builds on) — the message names each
/// problem with the expected and the found WIT signature.
pub fn load(
    path: &Path,
    engine: Arc<SandboxEngine>,
    config: Arc<SandboxConfig>,
) -> Result<LoadedAdapter, LoadError> {
    examine(path, engine, config)?.into_loaded()
}

/// Read, validate and compile the component at `path`, and check its
/// exports against the contract without refusing it: what is wrong is in
/// [`Examined::problems`] and [`Examined::error`].
///
/// Errors: only for what cannot be examined at all (unreadable,
/// non-WebAssembly, a core module, a compile failure).
pub fn examine(
    path: &Path,
    engine: Arc<SandboxEngine>,
    config: Arc<SandboxConfig>,
) -> Result<Examined, LoadError> {
    let shown = path.display().to_string();
    let bytes =
        sandloop_core::input_file::read_regular(path).map_err(|source| LoadError::Read {
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
    .map_err(|error| compile_error(&shown, &error, config.limits.max_memory_mib))?;
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
    let found = found_exports(engine.engine(), &component);
    let report = check_contract(&found);

    let linker =
        linker(engine.engine()).map_err(|error| LoadError::Engine(format!("{error:#}")))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|error| format!("{error:#}"));
    let info = ComponentInfo {
        path: shown,
        sha256,
        size_bytes: bytes.len() as u64,
        exports,
        imports,
        protocols: report.protocols.names(),
        cache,
        compile_ms,
    };
    Ok(Examined {
        engine,
        config,
        info,
        problems: report.problems,
        protocols: report.protocols,
        pre,
    })
}

/// The linker every adapter instance gets: WASI p2 (no ambient authority;
/// grants come with the store; clock waits end at the call deadline; only
/// regular files and directories open, a bounded number of them) and the
/// `types`, `log` and `trace` imports.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    crate::host_state::link_deadline_clocks(&mut linker)?;
    crate::guarded_open::link_guarded_open(&mut linker)?;
    types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    trace::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    Ok(linker)
}
