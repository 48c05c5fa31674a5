//! Loading an adapter component: validating the bytes, compiling (through
//! the cache), linking the imports the sandbox provides, and detecting which
//! protocols the component exports.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use wasmtime::component::__internal::InstanceType;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{
    Component, ComponentNamedList, HasSelf, InstancePre, Lift, Linker, Lower, Type, TypedFunc,
};

use super::bindings::exports::sandloop::adapter::{
    child_risk, episode, episode_groups, replay, replay_children, seeds, variants,
};
use super::bindings::sandloop::adapter::{log, trace, types};
use super::cache::{CacheOutcome, load_or_compile, sha256_hex};
use super::config::SandboxConfig;
use super::engine::SandboxEngine;
use super::host_state::HostState;
use sandloop_core::episode::adapter::Protocols;

/// The WIT package every interface name is qualified with, and the version
/// this host speaks (defined in `sandloop-contract`).
pub use sandloop_contract::{WIT_PACKAGE, WIT_VERSION};

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

impl LoadedAdapter {
    /// The limits and grants every instance of this adapter gets.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }
}

fn interface_name(short: &str) -> String {
    format!("{WIT_PACKAGE}/{short}@{WIT_VERSION}")
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
        let shown = info.path.clone();
        // The contract check above already typechecked every function; a
        // failure here would be a host bug, still reported by name.
        let shape = |short: &str, error: wasmtime::Error| LoadError::Contract {
            path: shown.clone(),
            message: format!(
                "exports `{}` but not with the shape this host expects (WIT {WIT_PACKAGE}@{WIT_VERSION}): {error:#}",
                interface_name(short)
            ),
        };
        let indices = ExportIndices {
            episode: protocols
                .execute
                .then(|| episode::GuestIndices::new(&pre).map_err(|e| shape("episode", e)))
                .transpose()?,
            seeds: protocols
                .seeds
                .then(|| seeds::GuestIndices::new(&pre).map_err(|e| shape("seeds", e)))
                .transpose()?,
            variants: protocols
                .variants
                .then(|| variants::GuestIndices::new(&pre).map_err(|e| shape("variants", e)))
                .transpose()?,
            groups: protocols
                .episode_groups
                .then(|| {
                    episode_groups::GuestIndices::new(&pre).map_err(|e| shape("episode-groups", e))
                })
                .transpose()?,
            replay: protocols
                .replay
                .then(|| replay::GuestIndices::new(&pre).map_err(|e| shape("replay", e)))
                .transpose()?,
            replay_children: protocols
                .replay_children
                .then(|| {
                    replay_children::GuestIndices::new(&pre)
                        .map_err(|e| shape("replay-children", e))
                })
                .transpose()?,
            child_risk: protocols
                .child_risk
                .then(|| child_risk::GuestIndices::new(&pre).map_err(|e| shape("child-risk", e)))
                .transpose()?,
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
    .map_err(|error| compile_error(&shown, &error, config.max_memory_mib))?;
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

// ---------------------------------------------------------------------------
// The contract check: what the component exports against what wit/adapter.wit
// says, in words an adapter author can act on.

/// The WIT contract this host speaks (`wit/adapter.wit`), embedded so the
/// expected signatures are quoted exactly as written and `sandloop new
/// adapter` can give every project its own copy.
pub const WIT_SOURCE: &str = include_str!("../../../wit/adapter.wit");

/// The world whose exports are every interface the host knows.
const HOST_WORLD: &str = "full";

/// One way a component breaks the contract (`sandloop inspect --json`
/// lists them under `problems`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `other_version`, `missing_function`, `wrong_signature`,
    /// `not_an_interface`, `unmet_dependency` or `nothing_to_run`.
    pub kind: &'static str,
    /// The interface concerned, as the host expects it
    /// (`sandloop:adapter/episode@0.2.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The function concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// What the host expects, as written in the WIT (a function signature,
    /// or the package version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// What the component has instead, rendered as WIT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// Why the found function does not fit (wasmtime's type check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// One sentence saying what is wrong and what to do.
    pub message: String,
}

impl Problem {
    fn new(kind: &'static str, message: String) -> Self {
        Problem {
            kind,
            interface: None,
            function: None,
            expected: None,
            found: None,
            detail: None,
            message,
        }
    }

    /// The problem as text: its message, then the expected and the found
    /// form, one per line, indented by `indent`.
    pub fn explain(&self, indent: &str) -> String {
        let mut text = self.message.clone();
        for (label, value) in [
            ("expected", &self.expected),
            ("found   ", &self.found),
            ("why     ", &self.detail),
        ] {
            if let Some(value) = value {
                text.push_str(&format!("\n{indent}{label}  {value}"));
            }
        }
        text
    }
}

/// Several problems become one message naming each; `None` when there are
/// none.
fn explain_problems(problems: &[Problem]) -> Option<String> {
    match problems {
        [] => None,
        [one] => Some(one.explain("    ")),
        many => {
            let mut text = format!(
                "does not fit the adapter contract of this host (WIT {WIT_PACKAGE}@{WIT_VERSION}); \
                 {} problems:",
                many.len()
            );
            for problem in many {
                text.push_str(&format!("\n  - {}", problem.explain("      ")));
            }
            Some(text)
        }
    }
}

/// A function of an interface as `wit/adapter.wit` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WitFunction {
    /// `execute`.
    pub name: String,
    /// `execute: func(item: json, ctx: context) -> result<json, adapter-error>`.
    pub signature: String,
}

/// The code of a WIT line: without its comment, trimmed.
fn wit_code(line: &str) -> &str {
    line.split("//").next().unwrap_or("").trim()
}

/// The lines of the top-level block opened by `header {` (e.g.
/// `interface episode`), without the opening and closing lines, each with
/// its nesting depth inside the block (1 = directly inside).
fn wit_block<'a>(source: &'a str, header: &str) -> Vec<(usize, &'a str)> {
    let opening = format!("{header} {{");
    let mut depth = 0usize;
    let mut inside = false;
    let mut lines = Vec::new();
    for line in source.lines() {
        let code = wit_code(line);
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        if !inside {
            if depth == 0 && code == opening {
                inside = true;
                depth = 1;
            } else {
                depth = (depth + opens).saturating_sub(closes);
            }
            continue;
        }
        let next = (depth + opens).saturating_sub(closes);
        if next == 0 {
            break;
        }
        lines.push((depth, code));
        depth = next;
    }
    lines
}

/// The functions `interface` declares in `source`, in declaration order,
/// each signature on one line as written (whitespace collapsed).
pub(crate) fn wit_functions(source: &str, interface: &str) -> Vec<WitFunction> {
    let mut functions = Vec::new();
    let mut pending: Option<String> = None;
    for (depth, code) in wit_block(source, &format!("interface {interface}")) {
        if let Some(signature) = pending.as_mut() {
            signature.push(' ');
            signature.push_str(code);
        } else if depth == 1 && code.contains(": func(") {
            pending = Some(code.to_string());
        }
        if let Some(signature) = pending.take_if(|signature| signature.ends_with(';')) {
            let signature = signature
                .trim_end_matches(';')
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace("( ", "(")
                .replace(" )", ")");
            let name = signature
                .split_once(':')
                .map(|(name, _)| name.trim().to_string())
                .unwrap_or_default();
            functions.push(WitFunction { name, signature });
        }
    }
    functions
}

/// The interfaces `world` exports, in declaration order.
pub(crate) fn wit_world_exports(source: &str, world: &str) -> Vec<String> {
    wit_block(source, &format!("world {world}"))
        .into_iter()
        .filter(|(depth, _)| *depth == 1)
        .filter_map(|(_, code)| code.strip_prefix("export "))
        .map(|rest| rest.trim_end_matches(';').trim().to_string())
        .collect()
}

/// The smallest world exporting `interface` with what it builds on, for
/// hints (`plain` for `episode`).
fn world_for(interface: &str) -> &'static str {
    match interface {
        "episode" => "plain",
        "episode-groups" => "grouped",
        "seeds" | "variants" => "explorer",
        "replay" => "replayable",
        _ => "isolated",
    }
}

/// The protocol an interface gives (`legacy` for `episode`).
fn protocol_of(interface: &str) -> &'static str {
    let mut protocols = Protocols::default();
    set_protocol(&mut protocols, interface);
    protocols.names().first().copied().unwrap_or("none")
}

/// Mark `interface`'s protocol as offered; false for an unknown name.
fn set_protocol(protocols: &mut Protocols, interface: &str) -> bool {
    let flag = match interface {
        "episode" => &mut protocols.execute,
        "seeds" => &mut protocols.seeds,
        "variants" => &mut protocols.variants,
        "episode-groups" => &mut protocols.episode_groups,
        "replay" => &mut protocols.replay,
        "replay-children" => &mut protocols.replay_children,
        "child-risk" => &mut protocols.child_risk,
        _ => return false,
    };
    *flag = true;
    true
}

/// An export of the component, as far as the contract check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FoundItem {
    /// An exported instance (an interface) and the functions it exports.
    Instance(Vec<FoundFunction>),
    /// A function exported at the top level of the component, as WIT.
    Function(String),
    /// Anything else: what it is (`type`, `resource`, `module`, ...).
    Other(&'static str),
}

/// A function an exported instance offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FoundFunction {
    /// Its name in the instance.
    pub name: String,
    /// Its type rendered as WIT.
    pub signature: String,
    /// Why it does not fit the contract's function of the same name (the
    /// type check's error); `None` when it fits or the contract has no such
    /// function.
    pub mismatch: Option<String>,
}

/// What [`check_contract`] concluded.
#[derive(Clone, Debug, Default)]
pub(crate) struct ContractReport {
    /// The protocols whose interfaces fit the contract.
    pub protocols: Protocols,
    /// Every way the exports break the contract.
    pub problems: Vec<Problem>,
}

/// Check the component's exports against the contract in [`WIT_SOURCE`]:
/// interfaces of another package version, missing or mistyped functions,
/// interfaces exported without the one they build on, and nothing to run
/// items with.
pub(crate) fn check_contract(found: &[(String, FoundItem)]) -> ContractReport {
    let mut report = ContractReport::default();
    let mut present = Protocols::default();
    let mut runnable_problem = false;

    // Interfaces of this package at another version (or none).
    let prefix = format!("{WIT_PACKAGE}/");
    for (name, _) in found {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let (short, version) = rest.split_once('@').unwrap_or((rest, ""));
        if version == WIT_VERSION {
            continue;
        }
        let built_against = if version.is_empty() {
            "an unversioned WIT package".to_string()
        } else {
            format!("WIT package {WIT_PACKAGE}@{version}")
        };
        let mut problem = Problem::new(
            "other_version",
            format!(
                "exports `{name}`, but this host speaks {WIT_PACKAGE}@{WIT_VERSION}: the adapter \
                 was built against {built_against}; rebuild the adapter against the WIT shipped \
                 with this sandloop (`sandloop new adapter` copies it to wit/adapter.wit)"
            ),
        );
        problem.interface = Some(interface_name(short));
        problem.expected = Some(format!("{WIT_PACKAGE}@{WIT_VERSION}"));
        problem.found = Some(if version.is_empty() {
            WIT_PACKAGE.to_string()
        } else {
            format!("{WIT_PACKAGE}@{version}")
        });
        runnable_problem |= matches!(short, "episode" | "episode-groups");
        report.problems.push(problem);
    }

    // Every interface the host knows, function by function.
    for short in wit_world_exports(WIT_SOURCE, HOST_WORLD) {
        let full = interface_name(&short);
        let Some((_, item)) = found.iter().find(|(name, _)| *name == full) else {
            continue;
        };
        let protocol = protocol_of(&short);
        let functions = match item {
            FoundItem::Instance(functions) => functions,
            FoundItem::Function(signature) => {
                let mut problem = Problem::new(
                    "not_an_interface",
                    format!(
                        "exports `{full}` as a function, not as an interface; export the \
                         interface `{short}` (world `{}` of wit/adapter.wit)",
                        world_for(&short)
                    ),
                );
                problem.interface = Some(full.clone());
                problem.found = Some(signature.clone());
                runnable_problem |= matches!(short.as_str(), "episode" | "episode-groups");
                report.problems.push(problem);
                continue;
            }
            FoundItem::Other(what) => {
                let mut problem = Problem::new(
                    "not_an_interface",
                    format!(
                        "exports `{full}` as a {what}, not as an interface; export the \
                         interface `{short}` (world `{}` of wit/adapter.wit)",
                        world_for(&short)
                    ),
                );
                problem.interface = Some(full.clone());
                runnable_problem |= matches!(short.as_str(), "episode" | "episode-groups");
                report.problems.push(problem);
                continue;
            }
        };
        set_protocol(&mut present, &short);
        let mut fits = true;
        for expected in wit_functions(WIT_SOURCE, &short) {
            let offered = functions
                .iter()
                .find(|function| function.name == expected.name);
            let problem = match offered {
                None => {
                    let found = if functions.is_empty() {
                        format!("no `{}`, and no functions at all", expected.name)
                    } else {
                        format!(
                            "no `{}`, only: {}",
                            expected.name,
                            functions
                                .iter()
                                .map(|function| function.signature.as_str())
                                .collect::<Vec<_>>()
                                .join("; ")
                        )
                    };
                    let mut problem = Problem::new(
                        "missing_function",
                        format!(
                            "exports `{full}` without its function `{}`, so it cannot offer \
                             protocol {protocol}; add the function with exactly this signature",
                            expected.name
                        ),
                    );
                    problem.found = Some(found);
                    problem
                }
                Some(function) => match &function.mismatch {
                    None => continue,
                    Some(why) => {
                        let mut problem = Problem::new(
                            "wrong_signature",
                            format!(
                                "exports `{full}`, but its function `{}` has the wrong \
                                 signature, so it cannot offer protocol {protocol}; change it \
                                 to the expected one (the types are those of interface `types` \
                                 in wit/adapter.wit; `json` is a `string`)",
                                expected.name
                            ),
                        );
                        problem.found = Some(function.signature.clone());
                        problem.detail = Some(why.clone());
                        problem
                    }
                },
            };
            fits = false;
            report.problems.push(Problem {
                interface: Some(full.clone()),
                function: Some(expected.name.clone()),
                expected: Some(expected.signature.clone()),
                ..problem
            });
        }
        if fits {
            set_protocol(&mut report.protocols, &short);
        } else {
            runnable_problem |= matches!(short.as_str(), "episode" | "episode-groups");
        }
    }

    // Interfaces exported without the one they build on.
    for message in unmet_dependencies(&present) {
        report
            .problems
            .push(Problem::new("unmet_dependency", message));
    }

    // Nothing to run items with, and no problem above that explains why.
    if !present.execute && !present.episode_groups && !runnable_problem {
        let names: Vec<String> = found.iter().map(|(name, _)| name.clone()).collect();
        let mut problem = Problem::new("nothing_to_run", nothing_to_run(&present, &names));
        let episode = wit_functions(WIT_SOURCE, "episode");
        problem.interface = Some(interface_name("episode"));
        problem.expected = Some(format!(
            "`{}` with {} (world `plain` of wit/adapter.wit), or `{}` (world `grouped-only`)",
            interface_name("episode"),
            episode
                .iter()
                .map(|function| function.signature.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            interface_name("episode-groups")
        ));
        // Functions of the contract exported at the top level instead of
        // inside their interface.
        let misplaced: Vec<&str> = found
            .iter()
            .filter_map(|(name, item)| match item {
                FoundItem::Function(signature) => wit_world_exports(WIT_SOURCE, HOST_WORLD)
                    .iter()
                    .any(|short| {
                        wit_functions(WIT_SOURCE, short)
                            .iter()
                            .any(|function| function.name == *name)
                    })
                    .then_some(signature.as_str()),
                _ => None,
            })
            .collect();
        if !misplaced.is_empty() {
            problem.found = Some(misplaced.join("; "));
            problem.message.push_str(
                "; the component exports the contract's functions at its top level, but each \
                 must be inside its interface (export the interface, e.g. `export episode;` in \
                 the world)",
            );
        } else if names.iter().any(|name| *name == interface_name("step")) {
            problem.message.push_str(
                "; this is a loop workflow plugin (world `workflow`): run it with \
                 `sandloop loop`, not as an adapter",
            );
        }
        report.problems.push(problem);
    }
    report
}

/// Render a component function's type as a WIT declaration named `name`.
pub(crate) fn wit_function(name: &str, func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(param, ty)| format!("{param}: {}", wit_type(&ty)))
        .collect();
    let results: Vec<String> = func.results().map(|ty| wit_type(&ty)).collect();
    let keyword = if func.async_() { "async func" } else { "func" };
    let mut text = format!("{name}: {keyword}({})", params.join(", "));
    match results.as_slice() {
        [] => {}
        [one] => text.push_str(&format!(" -> {one}")),
        many => text.push_str(&format!(" -> tuple<{}>", many.join(", "))),
    }
    text
}

/// Render a component type as WIT. Named types appear by their structure
/// (a component does not carry the names of its records), resources as
/// `resource`.
pub(crate) fn wit_type(ty: &Type) -> String {
    let list = |items: Vec<String>| items.join(", ");
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(inner) => format!("list<{}>", wit_type(&inner.ty())),
        Type::FixedLengthList(inner) => format!("list<{}, {}>", wit_type(&inner.ty()), inner.len()),
        Type::Map(map) => format!("map<{}, {}>", wit_type(&map.key()), wit_type(&map.value())),
        Type::Record(record) => format!(
            "record {{ {} }}",
            list(
                record
                    .fields()
                    .map(|field| format!("{}: {}", field.name, wit_type(&field.ty)))
                    .collect()
            )
        ),
        Type::Tuple(tuple) => format!(
            "tuple<{}>",
            list(tuple.types().map(|t| wit_type(&t)).collect())
        ),
        Type::Variant(variant) => format!(
            "variant {{ {} }}",
            list(
                variant
                    .cases()
                    .map(|case| match &case.ty {
                        Some(ty) => format!("{}({})", case.name, wit_type(ty)),
                        None => case.name.to_string(),
                    })
                    .collect()
            )
        ),
        Type::Enum(names) => format!(
            "enum {{ {} }}",
            list(names.names().map(str::to_string).collect())
        ),
        Type::Flags(names) => format!(
            "flags {{ {} }}",
            list(names.names().map(str::to_string).collect())
        ),
        Type::Option(inner) => format!("option<{}>", wit_type(&inner.ty())),
        Type::Result(result) => match (result.ok(), result.err()) {
            (None, None) => "result".into(),
            (Some(ok), None) => format!("result<{}>", wit_type(&ok)),
            (None, Some(err)) => format!("result<_, {}>", wit_type(&err)),
            (Some(ok), Some(err)) => format!("result<{}, {}>", wit_type(&ok), wit_type(&err)),
        },
        Type::Own(_) => "resource".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        Type::Future(inner) => match inner.ty() {
            Some(ty) => format!("future<{}>", wit_type(&ty)),
            None => "future".into(),
        },
        Type::Stream(inner) => match inner.ty() {
            Some(ty) => format!("stream<{}>", wit_type(&ty)),
            None => "stream".into(),
        },
        Type::ErrorContext => "error-context".into(),
    }
}

/// Type-checks one exported function against the host's binding of it.
type Checker = fn(&ComponentFunc, &InstanceType<'_>) -> Result<(), String>;

/// Type-check `func` as the host will call it: with the parameter and result
/// types of the binding's typed function (`witness`, e.g.
/// `episode::Guest::func_execute`), exactly the check an instance makes
/// when it is created.
fn fits<G, P, R>(
    func: &ComponentFunc,
    cx: &InstanceType<'_>,
    _witness: fn(&'static G) -> TypedFunc<P, R>,
) -> Result<(), String>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    // `typecheck` is wasmtime's own check behind `get_typed_func` (hidden
    // from its docs, stable within a major version; wasmtime is pinned).
    func.typecheck::<P, R>(cx)
        .map_err(|error| format!("type check: {error:#}"))
}

/// The checker of `function` in contract interface `interface`; `None` for
/// a name the contract does not have.
fn checker(interface: &str, function: &str) -> Option<Checker> {
    Some(match (interface, function) {
        ("episode", "execute") => |f, cx| fits(f, cx, episode::Guest::func_execute),
        ("seeds", "list-seed-items") => |f, cx| fits(f, cx, seeds::Guest::func_list_seed_items),
        ("variants", "compile-variant") => {
            |f, cx| fits(f, cx, variants::Guest::func_compile_variant)
        }
        ("episode-groups", "prepare-episode-group") => {
            |f, cx| fits(f, cx, episode_groups::Guest::func_prepare_episode_group)
        }
        ("episode-groups", "execute-episode") => {
            |f, cx| fits(f, cx, episode_groups::Guest::func_execute_episode)
        }
        ("episode-groups", "release-episode-group") => {
            |f, cx| fits(f, cx, episode_groups::Guest::func_release_episode_group)
        }
        ("replay", "capture-replay-state") => {
            |f, cx| fits(f, cx, replay::Guest::func_capture_replay_state)
        }
        ("replay", "restore-replay-state") => {
            |f, cx| fits(f, cx, replay::Guest::func_restore_replay_state)
        }
        ("replay", "validate-replay-equivalence") => {
            |f, cx| fits(f, cx, replay::Guest::func_validate_replay_equivalence)
        }
        ("replay", "run-replay-suffix") => {
            |f, cx| fits(f, cx, replay::Guest::func_run_replay_suffix)
        }
        ("replay", "finalize-replay-suffix") => {
            |f, cx| fits(f, cx, replay::Guest::func_finalize_replay_suffix)
        }
        ("replay", "release-replay-state") => {
            |f, cx| fits(f, cx, replay::Guest::func_release_replay_state)
        }
        ("replay", "export-replay-state") => {
            |f, cx| fits(f, cx, replay::Guest::func_export_replay_state)
        }
        ("replay", "import-replay-state") => {
            |f, cx| fits(f, cx, replay::Guest::func_import_replay_state)
        }
        ("replay", "binding-token") => |f, cx| fits(f, cx, replay::Guest::func_binding_token),
        ("replay", "resume-binding") => |f, cx| fits(f, cx, replay::Guest::func_resume_binding),
        ("replay-children", "fork-replay-child") => {
            |f, cx| fits(f, cx, replay_children::Guest::func_fork_replay_child)
        }
        ("replay-children", "validate-replay-child-equivalence") => |f, cx| {
            fits(
                f,
                cx,
                replay_children::Guest::func_validate_replay_child_equivalence,
            )
        },
        ("replay-children", "run-replay-child") => {
            |f, cx| fits(f, cx, replay_children::Guest::func_run_replay_child)
        }
        ("replay-children", "release-replay-child") => {
            |f, cx| fits(f, cx, replay_children::Guest::func_release_replay_child)
        }
        ("child-risk", "assess-replay-child-intent") => {
            |f, cx| fits(f, cx, child_risk::Guest::func_assess_replay_child_intent)
        }
        ("child-risk", "assess-replay-child-outcome") => {
            |f, cx| fits(f, cx, child_risk::Guest::func_assess_replay_child_outcome)
        }
        _ => return None,
    })
}

/// The contract interface `name` is (`episode` for
/// `sandloop:adapter/episode@0.2.0`), if it is one at this host's version.
fn contract_interface(name: &str) -> Option<&str> {
    let short = name
        .strip_prefix(WIT_PACKAGE)?
        .strip_prefix('/')?
        .strip_suffix(WIT_VERSION)?
        .strip_suffix('@')?;
    Some(short)
}

/// Walk the component's exports: every instance with its functions
/// (type-checked against the host's bindings when the instance is a
/// contract interface), every top-level function, and what else there is.
fn found_exports(engine: &wasmtime::Engine, component: &Component) -> Vec<(String, FoundItem)> {
    let ty = component.component_type();
    let cx = ty.instance_type();
    ty.exports(engine)
        .map(|(name, export)| {
            let item = match export.ty {
                ComponentItem::ComponentInstance(instance) => {
                    let interface = contract_interface(name);
                    FoundItem::Instance(
                        instance
                            .exports(engine)
                            .filter_map(|(function, export)| match export.ty {
                                ComponentItem::ComponentFunc(func) => Some(FoundFunction {
                                    name: function.to_string(),
                                    signature: wit_function(function, &func),
                                    mismatch: interface
                                        .and_then(|interface| checker(interface, function))
                                        .and_then(|check| check(&func, &cx).err()),
                                }),
                                _ => None,
                            })
                            .collect(),
                    )
                }
                ComponentItem::ComponentFunc(func) => {
                    FoundItem::Function(wit_function(name, &func))
                }
                ComponentItem::CoreFunc(_) => FoundItem::Other("core function"),
                ComponentItem::Module(_) => FoundItem::Other("core module"),
                ComponentItem::Component(_) => FoundItem::Other("component"),
                ComponentItem::Type(_) => FoundItem::Other("type"),
                ComponentItem::Resource(_) => FoundItem::Other("resource"),
            };
            (name.to_string(), item)
        })
        .collect()
}

/// The linker every adapter instance gets: WASI p2 (no ambient authority;
/// grants come with the store; clock waits end at the call deadline; only
/// regular files and directories open, a bounded number of them) and the
/// `types`, `log` and `trace` imports.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    super::host_state::link_deadline_clocks(&mut linker)?;
    super::guarded_open::link_guarded_open(&mut linker)?;
    types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    trace::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    Ok(linker)
}

/// What is exported without the interface it builds on, one message each:
/// `child-risk` needs `replay-children`, which needs `replay`, which needs
/// `episode-groups`.
fn unmet_dependencies(protocols: &Protocols) -> Vec<String> {
    let mut unmet = Vec::new();
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
            unmet.push(format!(
                "exports `{}` without `{}`, which it builds on; export both or neither",
                interface_name(name),
                interface_name(needed)
            ));
        }
    }
    if protocols.replay && !protocols.episode_groups {
        unmet.push(format!(
            "exports `{}` without `{}`: replay points capture the state of a prepared \
             episode group, so an adapter that exports replay must export episode groups too",
            interface_name("replay"),
            interface_name("episode-groups")
        ));
    }
    unmet
}

/// Why a component that exports neither `episode` nor `episode-groups` has
/// nothing to run its items with, naming what it does export.
fn nothing_to_run(protocols: &Protocols, exports: &[String]) -> String {
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
    format!("{message} ({exported})")
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

    /// An instance exporting `functions` of `interface` as the contract
    /// declares them, all fitting.
    fn fitting(interface: &str) -> (String, FoundItem) {
        (
            interface_name(interface),
            FoundItem::Instance(
                wit_functions(WIT_SOURCE, interface)
                    .into_iter()
                    .map(|function| FoundFunction {
                        name: function.name,
                        signature: function.signature,
                        mismatch: None,
                    })
                    .collect(),
            ),
        )
    }

    fn messages(report: &ContractReport) -> Vec<String> {
        report
            .problems
            .iter()
            .map(|problem| problem.explain("  "))
            .collect()
    }

    #[test]
    fn replay_without_episode_groups_is_refused_by_name() {
        let mut replay_only = protocols(true, false, false, false);
        replay_only.replay = true;
        let unmet = unmet_dependencies(&replay_only);
        assert_eq!(unmet.len(), 1);
        assert!(
            unmet[0].contains("exports `sandloop:adapter/replay@0.2.0` without `sandloop:adapter/episode-groups@0.2.0`"),
            "{unmet:?}"
        );
        let mut both = protocols(false, false, false, true);
        both.replay = true;
        assert!(unmet_dependencies(&both).is_empty());
        let mut risk_only = both;
        risk_only.child_risk = true;
        let unmet = unmet_dependencies(&risk_only);
        assert!(
            unmet[0].contains("exports `sandloop:adapter/child-risk@0.2.0` without `sandloop:adapter/replay-children@0.2.0`"),
            "{unmet:?}"
        );
        let mut children_only = protocols(false, false, false, true);
        children_only.replay_children = true;
        let unmet = unmet_dependencies(&children_only);
        assert!(
            unmet[0].contains(
                "`sandloop:adapter/replay-children@0.2.0` without `sandloop:adapter/replay@0.2.0`"
            ),
            "{unmet:?}"
        );
        children_only.replay = true;
        children_only.child_risk = true;
        assert!(unmet_dependencies(&children_only).is_empty());

        // Every unmet dependency is reported, not only the first.
        let report =
            check_contract(&[fitting("episode"), fitting("replay"), fitting("child-risk")]);
        let unmet: Vec<&Problem> = report
            .problems
            .iter()
            .filter(|problem| problem.kind == "unmet_dependency")
            .collect();
        assert_eq!(unmet.len(), 2, "{:?}", messages(&report));
        assert_eq!(
            report.protocols.names(),
            ["legacy", "replayable-v2", "child-risk-v0"]
        );
    }

    #[test]
    fn an_adapter_must_export_something_to_run_items_with() {
        assert!(check_contract(&[fitting("episode")]).problems.is_empty());
        assert!(
            check_contract(&[
                fitting("seeds"),
                fitting("variants"),
                fitting("episode-groups")
            ])
            .problems
            .is_empty()
        );
        let none = check_contract(&[(
            "wasi:cli/run@0.2.6".to_string(),
            FoundItem::Instance(vec![]),
        )]);
        assert_eq!(none.problems.len(), 1);
        assert_eq!(none.problems[0].kind, "nothing_to_run");
        let text = explain_problems(&none.problems).unwrap();
        assert!(
            text.starts_with("exports none of the sandloop episode interfaces"),
            "{text}"
        );
        assert!(text.contains("it exports: wasi:cli/run@0.2.6"), "{text}");
        assert!(
            text.contains("execute: func(item: json, ctx: context) -> result<json, adapter-error>"),
            "the expected signature is shown: {text}"
        );
        let seeds_only = check_contract(&[fitting("seeds"), fitting("variants")]);
        assert!(
            seeds_only.problems[0].message.contains(
                "exports `seeds` and `variants` but neither `episode` nor `episode-groups`"
            ),
            "{:?}",
            messages(&seeds_only)
        );
    }

    #[test]
    fn exports_of_another_wit_version_name_both_versions() {
        let report = check_contract(&[(
            "sandloop:adapter/episode@0.0.9".to_string(),
            FoundItem::Instance(vec![]),
        )]);
        // The version problem explains it; no second "nothing to run".
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "other_version");
        assert_eq!(problem.expected.as_deref(), Some("sandloop:adapter@0.2.0"));
        assert_eq!(problem.found.as_deref(), Some("sandloop:adapter@0.0.9"));
        assert_eq!(
            problem.interface.as_deref(),
            Some("sandloop:adapter/episode@0.2.0")
        );
        assert!(
            problem.message.contains("sandloop:adapter/episode@0.0.9"),
            "{}",
            problem.message
        );
        assert!(
            problem
                .message
                .contains("this host speaks sandloop:adapter@0.2.0"),
            "{}",
            problem.message
        );
        let unversioned = check_contract(&[
            fitting("episode"),
            (
                "sandloop:adapter/seeds".to_string(),
                FoundItem::Instance(vec![]),
            ),
        ]);
        assert_eq!(unversioned.problems.len(), 1);
        assert!(
            unversioned.problems[0]
                .message
                .contains("an unversioned WIT package")
        );
        let ours = check_contract(&[
            fitting("episode"),
            (
                "wasi:cli/run@0.2.6".to_string(),
                FoundItem::Instance(vec![]),
            ),
        ]);
        assert!(ours.problems.is_empty());
        assert_eq!(ours.protocols.names(), ["legacy"]);
    }

    #[test]
    fn missing_and_mistyped_functions_show_expected_and_found_signatures() {
        let report = check_contract(&[(
            interface_name("episode"),
            FoundItem::Instance(vec![FoundFunction {
                name: "run".into(),
                signature: "run: func(item: string) -> string".into(),
                mismatch: None,
            }]),
        )]);
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "missing_function");
        assert_eq!(problem.function.as_deref(), Some("execute"));
        assert_eq!(
            problem.expected.as_deref(),
            Some("execute: func(item: json, ctx: context) -> result<json, adapter-error>")
        );
        assert_eq!(
            problem.found.as_deref(),
            Some("no `execute`, only: run: func(item: string) -> string")
        );
        assert!(report.protocols.names().is_empty());

        let report = check_contract(&[
            fitting("episode"),
            (
                interface_name("seeds"),
                FoundItem::Instance(vec![FoundFunction {
                    name: "list-seed-items".into(),
                    signature: "list-seed-items: func(arm: string) -> list<string>".into(),
                    mismatch: Some("expected 2 types, found 1".into()),
                }]),
            ),
        ]);
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "wrong_signature");
        assert_eq!(
            problem.expected.as_deref(),
            Some(
                "list-seed-items: func(arm: string, epoch: u32) -> result<list<json>, adapter-error>"
            )
        );
        let text = problem.explain("  ");
        assert!(
            text.contains("found     list-seed-items: func(arm: string) -> list<string>"),
            "{text}"
        );
        assert!(text.contains("expected 2 types, found 1"), "{text}");
        // The broken interface gives no protocol; the fitting one does.
        assert_eq!(report.protocols.names(), ["legacy"]);
    }

    #[test]
    fn functions_exported_outside_their_interface_are_pointed_out() {
        let report = check_contract(&[(
            "execute".to_string(),
            FoundItem::Function("execute: func(item: string) -> string".into()),
        )]);
        assert_eq!(report.problems.len(), 1);
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "nothing_to_run");
        assert!(
            problem.message.contains("at its top level"),
            "{}",
            problem.message
        );
        assert_eq!(
            problem.found.as_deref(),
            Some("execute: func(item: string) -> string")
        );
    }

    #[test]
    fn several_problems_are_listed_one_by_one() {
        let report = check_contract(&[
            (
                "sandloop:adapter/episode@0.0.9".to_string(),
                FoundItem::Instance(vec![]),
            ),
            fitting("replay-children"),
        ]);
        let text = explain_problems(&report.problems).unwrap();
        assert!(
            text.starts_with("does not fit the adapter contract"),
            "{text}"
        );
        assert!(
            text.contains("\n  - exports `sandloop:adapter/episode@0.0.9`"),
            "{text}"
        );
        assert!(
            text.contains("\n  - exports `sandloop:adapter/replay-children@0.2.0` without"),
            "{text}"
        );
        // The error names the file once, first.
        let error = LoadError::Contract {
            path: "a.wasm".into(),
            message: text,
        };
        assert!(error.to_string().starts_with("a.wasm: does not fit"));
    }

    #[test]
    fn the_embedded_wit_is_parsed_into_every_interface_and_function() {
        let interfaces = wit_world_exports(WIT_SOURCE, HOST_WORLD);
        assert_eq!(
            interfaces,
            [
                "episode",
                "seeds",
                "variants",
                "episode-groups",
                "replay",
                "replay-children",
                "child-risk"
            ]
        );
        assert_eq!(wit_world_exports(WIT_SOURCE, "plain"), ["episode"]);
        for interface in &interfaces {
            let functions = wit_functions(WIT_SOURCE, interface);
            assert!(!functions.is_empty(), "{interface}");
            for function in functions {
                assert!(
                    function
                        .signature
                        .starts_with(&format!("{}: func(", function.name)),
                    "{function:?}"
                );
                assert!(
                    checker(interface, &function.name).is_some(),
                    "no type check for {interface}.{}",
                    function.name
                );
                assert!(!function.signature.contains("  "), "{function:?}");
            }
            assert!(set_protocol(&mut Protocols::default(), interface));
        }
        assert_eq!(
            wit_functions(WIT_SOURCE, "replay")[0].signature,
            "capture-replay-state: func(request: capture-request) -> result<state-lease, adapter-error>"
        );
        assert_eq!(protocol_of("episode-groups"), "recoverable-v0");
        assert_eq!(
            contract_interface("sandloop:adapter/episode@0.2.0"),
            Some("episode")
        );
        assert_eq!(contract_interface("sandloop:adapter/episode@0.0.9"), None);
    }
}
