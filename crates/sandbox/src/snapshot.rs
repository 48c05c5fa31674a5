//! Snapshot forks: freeze a live adapter instance's state into a new
//! component and start many isolated children from it.
//!
//! The expensive part of an episode group (`prepare-episode-group` reading
//! and parsing a document, say) runs once in a *parent* instance; the
//! parent's linear memories and mutable globals are then written into a
//! *snapshot component* with [`wasmtime_wizer`]; the snapshot is compiled
//! once (through the [compiled-component cache](super::cache)), and every
//! *child* instantiated from it starts with the parent's state, in its own
//! store and its own linear memory. With the pooling allocator the
//! snapshot's memory becomes a copy-on-write image, so a child costs no
//! more than a fresh instance of the original component (less, as its
//! guest-side initialisation already ran in the parent).
//!
//! # Steps
//!
//! 1. [`Instrumented::new`] (once per loaded component): wizer instruments
//!    the component — every instantiated core module exports its memories
//!    and globals, and the component gains an exported instance
//!    [`WIZER_INSTANCE`] (`wasmtime:wizer/access`) of accessor functions
//!    returning them — and the instrumented component is compiled through
//!    the cache (keyed by its sha256) and linked like any adapter. Parents
//!    are instances of the *instrumented* component ([`Instrumented::instantiate`],
//!    or a [`WasmAdapter`](super::WasmAdapter) over [`Instrumented::loaded`]
//!    for normal calls): the extra export changes nothing else.
//! 2. [`Instrumented::snapshot`] (per snapshot): the accessor functions are
//!    called on the parent (synchronous wasmtime calls, under the store's
//!    epoch deadline) and wizer rewrites the *original* component with the
//!    values read: every memory's data segments and minimum size, every
//!    mutable global's initial value. The accessor instance is not in the
//!    result; its exports are the original component's.
//! 3. [`Instrumented::compile_snapshot`]: compile the snapshot (cache key:
//!    its sha256), link it, and prepare its copy-on-write memory images.
//! 4. [`CompiledSnapshot::instantiate`] (per child), or a `WasmAdapter`
//!    over [`CompiledSnapshot::loaded`].
//!
//! # What survives a snapshot
//!
//! - Every byte of every linear memory of every instantiated core module
//!   (heap, statics, `thread_local!`s, the shadow stack), and the value of
//!   every mutable global (the stack pointer among them). A child sees
//!   exactly what the parent's memory held when the snapshot was taken;
//!   later writes of the parent or of other children are not seen.
//!
//! # What does not
//!
//! - **Resource handles.** Handles (`own`/`borrow` of `episode-group`,
//!   `replay-binding`, WASI descriptors and streams, ...) are indices into
//!   tables that wasmtime keeps per component instance *outside* linear
//!   memory. A child starts with empty tables: a handle the parent holds
//!   (a [`ResourceAny`] of the parent's
//!   store) is meaningless in the child's store, and guest code that
//!   remembers a handle index in memory finds nothing (or, if the child
//!   made handles of its own, another resource) at that index. The state a
//!   resource *owns* is in memory and does survive; a child reaches it only
//!   through exports that find it without a handle (the sdk's registry of
//!   prepared groups by `execution-group-id`, which `capture-replay-state`
//!   uses, is one).
//! - **Open WASI handles cached by the guest.** wasi-libc keeps the
//!   preopened directories as handle indices in linear memory (and, the
//!   same way, any file or stream it holds open). A parent that read a file
//!   before the snapshot leaves its children a libc that believes `/docs`
//!   is open under a handle the child does not have: the child's first
//!   file system call traps (`unknown handle index 1` for
//!   `markdown-explorer`). Take the snapshot before the guest touches WASI
//!   resources, or let children use only exports that do not (pure
//!   computation on the in-memory state, `log`, `trace`).
//! - **Host-side state.** Each child gets a new [`HostState`]: its own WASI
//!   context (built from the same [`SandboxConfig`](super::SandboxConfig)
//!   grants), empty captured
//!   output, no open trace, its own memory limiter. Nothing of the parent's
//!   `HostState` is copied.
//! - **Tables.** Funcref tables are re-initialised from their element
//!   segments; a component that mutates a table at run time is refused at
//!   instrumentation (see below).
//!
//! # What wizer refuses
//!
//! [`Instrumented::new`] fails with [`SnapshotError::Instrument`] for
//! components wizer cannot snapshot: invalid WebAssembly; a core module
//! instead of a component; a core module that mutates tables or drops
//! segments (`table.set`/`grow`/`fill`/`copy`/`init`, `elem.drop`,
//! `data.drop`), mutates GC objects, or has a mutable reference-typed or
//! `v128` global; a module instantiated twice; nested components that
//! contain modules; imported or aliased modules and components; component
//! start functions and value imports/exports. Every example adapter of this
//! workspace (`hello-adapter`, `markdown-explorer`, `hostile-adapter`,
//! `bench-adapter`, `replay-probe`, all built by `wasm32-wasip2` Rust: one
//! main module, the `wit-component` shim and fixup modules) is accepted, as
//! are the workflow plugins and the JavaScript (componentize-js) and Python
//! (componentize-py) adapters that `examples/*/build.sh` build; their
//! snapshot children run `execute` like their parents.
//!
//! # Costs and side effects on the parent
//!
//! - Each memory accessor grows its memory by one 64 KiB page (it writes
//!   the list's pointer and length there, past the snapshotted bytes), and
//!   wizer calls it twice per memory: every snapshot grows each of the
//!   parent's memories by 128 KiB. The parent keeps working; a parent at its
//!   `--max-memory` limit cannot be snapshotted (the accessor traps).
//! - The snapshot sets the parent store's epoch deadline (and fuel, when
//!   metered) to one call's budget, as [`WasmAdapter`](super::WasmAdapter)
//!   does before every call.
//! - A snapshot component is the original's code plus the non-zero bytes
//!   of its memories as data segments (runs of zeros are left out; they
//!   replace the original data segments): 1.45x the original for
//!   `replay-probe` with a 64 KiB padded group, 5.4x (3.2 MiB) for
//!   `markdown-explorer` with a 200 KB document prepared.
//! - Measured on this workspace's examples (release build, `cargo bench
//!   -p sandloop-tests --bench snapshot`): instrumentation 3–7 ms; a
//!   snapshot 5–16 ms (half of it re-deriving wizer's context for the
//!   smaller component); compiling a snapshot cold 170–310 ms — Cranelift
//!   compiles every function again although only data and globals
//!   changed, which dominates the cost of a snapshot — and 2–5 ms from the
//!   cache; a child (instantiate + a cheap call + drop) 10–40 µs.
//! - Snapshots are compiled in memory only, never into the cache
//!   directory: they hold the guest's heap.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Component, Instance, InstancePre, Lift, Linker, ResourceAny, WasmList};
use wasmtime_wizer::{ComponentContext, ComponentInstanceState, Wizer};

use super::bindings::exports::sandloop::adapter::{
    child_risk, episode, episode_groups, replay, replay_children, seeds, variants,
};
use super::cache::{CacheOutcome, cache_path, load_or_compile, sha256_hex};
use super::component::{ComponentInfo, ExportIndices, LoadedAdapter, linker};
use super::host_state::HostState;
use super::store::{arm_call, new_store};
use sandloop_core::episode::adapter::Protocols;

/// Name of the component instance wizer's instrumentation exports: one
/// accessor function per memory (`list<u8>`) and per mutable global (`s32`,
/// `s64`, `f32` or `f64`) of every instantiated core module.
pub const WIZER_INSTANCE: &str = "wasmtime:wizer/access";

/// Which step of a snapshot fork failed, naming the component (the path it
/// was loaded from) and wasmtime's or wizer's own words.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The component file could not be read (only [`Instrumented::load`]).
    #[error("cannot read {component} to instrument it: {message}")]
    Read {
        /// The component, as loaded.
        component: String,
        /// The I/O error.
        message: String,
    },
    /// The bytes given are not the component that was loaded.
    #[error(
        "{component}: the bytes given to instrument have sha256 {found}, \
         the loaded component {expected}"
    )]
    NotTheLoadedComponent {
        /// The component, as loaded.
        component: String,
        /// sha256 of the loaded component.
        expected: String,
        /// sha256 of the bytes given.
        found: String,
    },
    /// wizer refused the component (see the module documentation for what
    /// it refuses), or instrumented it differently the second time.
    #[error("wizer cannot instrument {component} for snapshots: {message}")]
    Instrument {
        /// The component.
        component: String,
        /// wizer's reason.
        message: String,
    },
    /// wasmtime could not compile the instrumented component or a snapshot.
    #[error("{component}: the {what} could not be compiled: {message}")]
    Compile {
        /// The component.
        component: String,
        /// `instrumented component` or `snapshot <sha256 prefix>`.
        what: String,
        /// wasmtime's reason.
        message: String,
    },
    /// The instrumented component or a snapshot does not link or no longer
    /// exports what the original did.
    #[error("{component}: the {what} cannot be linked: {message}")]
    Link {
        /// The component.
        component: String,
        /// `instrumented component` or `snapshot <sha256 prefix>`.
        what: String,
        /// wasmtime's reason.
        message: String,
    },
    /// A new instance could not be created.
    #[error("cannot instantiate {component}: {message}")]
    Instantiate {
        /// The component as its [`LoadedAdapter`] shows it: the path, then
        /// `(wizer-instrumented)` or `(snapshot <sha256 prefix>)` for the
        /// derived ones.
        component: String,
        /// wasmtime's reason (a trap, a limit, no free pool slot, ...).
        message: String,
    },
    /// The instance given is not an instance of this instrumented component.
    #[error(
        "{component}: the instance to snapshot is not an instance of this instrumented \
         component; instantiate parents from `Instrumented::instance_pre`"
    )]
    ForeignInstance {
        /// The component.
        component: String,
    },
    /// Calling an accessor function of [`WIZER_INSTANCE`] on the parent
    /// failed: a trap (the parent was poisoned by an earlier trap, its
    /// memory is at its limit, the deadline passed) or a missing export.
    #[error("snapshot of {component}: accessor call `{accessor}` failed: {message}")]
    AccessorCall {
        /// The component.
        component: String,
        /// `wasmtime:wizer/access#<function>`.
        accessor: String,
        /// wasmtime's reason.
        message: String,
    },
    /// wizer could not write the snapshot component (or its future did not
    /// complete synchronously).
    #[error("snapshot of {component}: wizer could not rewrite the component: {message}")]
    Rewrite {
        /// The component.
        component: String,
        /// wizer's reason.
        message: String,
    },
}

/// What [`Instrumented::new`] did, for reporting.
#[derive(Clone, Debug)]
pub struct InstrumentInfo {
    /// sha256 of the original component, lowercase hex.
    pub original_sha256: String,
    /// sha256 of the instrumented component (its cache key), lowercase hex.
    pub sha256: String,
    /// Size of the original component, bytes.
    pub original_bytes: u64,
    /// Size of the instrumented component, bytes.
    pub size_bytes: u64,
    /// Wall time of wizer's instrumentation (validation, parsing,
    /// re-encoding).
    pub instrument: Duration,
    /// Wall time to compile the instrumented component or load it from the
    /// cache, link it and check its exports.
    pub compile: Duration,
    /// Whether the compiled instrumented component came from the cache.
    pub cache: CacheOutcome,
    /// Cranelift function artifacts read back into the engine's function
    /// cache with it (saved when it was compiled), so the first snapshot
    /// of a process compiles fast too; 0 without a cache directory or
    /// incremental compilation.
    pub warm_functions: usize,
}

/// How `sandloop run --fork auto` forks a group's children from its replay
/// point, given the component's protocols: by state transfer when it
/// exports `replay-children` (cheaper per child, and what its `child-risk`
/// policy was written for), else by snapshot when it exports `replay`;
/// `None` when it has no replay points to fork from.
pub fn auto_fork(protocols: &Protocols) -> Option<ForkKind> {
    if !protocols.replay {
        None
    } else if protocols.replay_children {
        Some(ForkKind::State)
    } else {
        Some(ForkKind::Snapshot)
    }
}

/// How children are forked from a replay point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkKind {
    /// The adapter exports its state and each child adopts it
    /// (`replay-children`).
    State,
    /// Each child is a fresh instance of a snapshot of the live parent.
    Snapshot,
}

/// A component prepared for snapshots: the original bytes (wizer's
/// rewrite starts from them), the instrumented component compiled and
/// linked as a [`LoadedAdapter`] with the original's protocols, and one
/// [`Linker`] for the snapshots. Built once per loaded component; cheap to
/// share behind an `Arc`.
///
/// The [`ComponentContext`] wizer needs to snapshot borrows the original
/// bytes, so it is not kept (that would make this struct self-referential):
/// every [`Instrumented::snapshot`] derives it again with the same
/// instrumentation — as long as the first instrumentation, 3.4 ms for the
/// 300 KB `replay-probe` and 6.6 ms for the 600 KB `markdown-explorer` in a
/// release build; [`SnapshotTiming::reinstrument`] reports it — and checks
/// that the result is byte for byte the instrumented component the parents
/// run, so the accessor names it calls are the parents' own.
pub struct Instrumented {
    original: Arc<[u8]>,
    instrumented: Arc<[u8]>,
    loaded: Arc<LoadedAdapter>,
    linker: Linker<HostState>,
    component: String,
    /// Where the function artifacts go when the saved ones were missing
    /// or damaged: written once, after this process's first snapshot
    /// compile has filled the function cache.
    resave: std::sync::Mutex<Option<std::path::PathBuf>>,
    /// What instrumenting and compiling cost.
    pub info: InstrumentInfo,
}

/// A snapshot component, not yet compiled.
#[derive(Clone)]
pub struct Snapshot {
    /// The snapshot component's bytes: the original component with every
    /// instantiated core module's memories and mutable globals initialised
    /// to the parent's values.
    pub bytes: Arc<[u8]>,
    /// sha256 of [`Snapshot::bytes`], lowercase hex (its cache key).
    pub sha256: String,
    /// Where the time went.
    pub timing: SnapshotTiming,
    /// Accessor functions called on the parent.
    pub accessor_calls: u32,
    /// Bytes of linear memory read from the parent (every memory is read
    /// twice: once to find its non-zero runs, once to copy them).
    pub memory_bytes_read: u64,
    /// Bytes the parent's linear memories grew by for the snapshot, and
    /// keep: wizer's memory accessor grows its memory by one 64 KiB page to
    /// hold the returned list's pointer and length (the snapshot itself
    /// leaves that page out). Wasm memories never shrink, so a long-lived
    /// parent is replaced once this adds up (see `WasmAdapter`'s
    /// snapshot recycling).
    pub parent_growth_bytes: u64,
}

/// Size of a WebAssembly page, bytes.
const WASM_PAGE_BYTES: u64 = 64 << 10;

/// Wall times of one [`Instrumented::snapshot`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SnapshotTiming {
    /// The whole snapshot, from the call to the returned bytes and digest.
    pub total: Duration,
    /// Deriving wizer's context again (instrumenting the original bytes
    /// once more and comparing the result).
    pub reinstrument: Duration,
    /// The accessor calls on the parent, with what wizer does with each
    /// result while the parent's memory is lent to it (scanning for
    /// non-zero runs, copying them).
    pub accessors: Duration,
    /// The rest: re-encoding the component, its sha256.
    pub rewrite: Duration,
}

/// A compiled, linked snapshot: instantiate children from it.
pub struct CompiledSnapshot {
    loaded: Arc<LoadedAdapter>,
    /// sha256 of the snapshot component.
    pub sha256: String,
    /// Whether the compiled form came from the cache.
    pub cache: CacheOutcome,
    /// Wall time to compile (or load from the cache), link and check the
    /// exports.
    pub compile: Duration,
    /// Wall time to build the copy-on-write memory images
    /// ([`Component::initialize_copy_on_write_image`]), so the first child
    /// does not pay for it.
    pub image: Duration,
}

/// One instance in its own store, set up like a
/// [`WasmAdapter`](super::WasmAdapter)'s: a fresh [`HostState`] from the
/// adapter's [`SandboxConfig`](super::SandboxConfig), its memory limiter,
/// an epoch deadline of one call that traps, and fuel when metered.
/// Dropping it drops the instance (its pool slot returns to the pool).
pub struct LiveInstance {
    /// The store owning the instance.
    pub store: Store<HostState>,
    /// The instance.
    pub instance: Instance,
}

impl LiveInstance {
    /// Instantiate `loaded` (any [`LoadedAdapter`]: the original, an
    /// [`Instrumented::loaded`] or a [`CompiledSnapshot::loaded`]) in a new
    /// store.
    ///
    /// Errors: [`SnapshotError::Instantiate`] when the WASI context cannot
    /// be built, the instance traps while starting, or the pool has no free
    /// slot.
    pub fn new(loaded: &LoadedAdapter) -> Result<LiveInstance, SnapshotError> {
        let fail = |error: wasmtime::Error| SnapshotError::Instantiate {
            component: loaded.info.path.clone(),
            message: format!("{error:#}"),
        };
        let state = HostState::new(&loaded.config).map_err(fail)?;
        let mut store = new_store(&loaded.engine, &loaded.config, state).map_err(fail)?;
        let instance = loaded.pre.instantiate(&mut store).map_err(fail)?;
        Ok(LiveInstance { store, instance })
    }

    /// Give the store one call's budget again (epoch deadline, fuel), as
    /// before every adapter call.
    ///
    /// Errors: only when fuel cannot be set (fuel metering off in the
    /// engine while the config asks for it).
    pub fn reset_budget(&mut self, loaded: &LoadedAdapter) -> wasmtime::Result<()> {
        reset_budget(&mut self.store, loaded)
    }

    /// The [`InstancePre`] this instance came from, for the binding's
    /// `GuestIndices::new` (look the indices up once, then `load` them for
    /// each instance).
    pub fn instance_pre(&self) -> InstancePre<HostState> {
        self.instance.instance_pre(&self.store)
    }

    /// Drop a resource handle of this store (an `own` the guest returned),
    /// running the guest's destructor. Errors when the guest's destructor
    /// traps or the handle is not of this store.
    pub fn drop_resource(&mut self, resource: ResourceAny) -> wasmtime::Result<()> {
        resource.resource_drop(&mut self.store)
    }
}

impl Instrumented {
    /// Instrument `original`'s component from its `bytes` (which must be
    /// the bytes it was loaded from), compile the result through the cache
    /// of `original`'s config (keyed by the instrumented bytes' sha256) and
    /// link it like `original`, with `original`'s engine, config and
    /// protocols.
    ///
    /// Errors: [`SnapshotError::NotTheLoadedComponent`] when the bytes'
    /// sha256 is not `original.info.sha256`; [`SnapshotError::Instrument`]
    /// when wizer refuses the component; [`SnapshotError::Compile`] or
    /// [`SnapshotError::Link`] when the instrumented component does not
    /// compile, link, or export the original's interfaces.
    pub fn new(
        original: &LoadedAdapter,
        bytes: impl Into<Arc<[u8]>>,
    ) -> Result<Instrumented, SnapshotError> {
        let original_bytes: Arc<[u8]> = bytes.into();
        let component = original.info.path.clone();
        let original_sha256 = sha256_hex(&original_bytes);
        if original_sha256 != original.info.sha256 {
            return Err(SnapshotError::NotTheLoadedComponent {
                component,
                expected: original.info.sha256.clone(),
                found: original_sha256,
            });
        }
        let started = Instant::now();
        let instrumented: Arc<[u8]> = instrument(&component, &original_bytes)?.into();
        let instrument_time = started.elapsed();

        let started = Instant::now();
        let linker = linker(original.engine.engine()).map_err(|error| SnapshotError::Link {
            component: component.clone(),
            what: "instrumented component".into(),
            message: format!("{error:#}"),
        })?;
        let sha256 = sha256_hex(&instrumented);
        let (loaded, cache) = load_derived(
            &component,
            original,
            &linker,
            &instrumented,
            &sha256,
            original.config.cache_dir.as_deref(),
            "instrumented component",
            format!("{component} (wizer-instrumented)"),
        )?;
        let compile = started.elapsed();
        let (warm_functions, resave) = share_functions(original, &sha256, cache);
        Ok(Instrumented {
            resave: std::sync::Mutex::new(resave),
            info: InstrumentInfo {
                warm_functions,
                original_sha256,
                sha256,
                original_bytes: original_bytes.len() as u64,
                size_bytes: instrumented.len() as u64,
                instrument: instrument_time,
                compile,
                cache,
            },
            original: original_bytes,
            instrumented,
            loaded: Arc::new(loaded),
            linker,
            component,
        })
    }

    /// [`Instrumented::new`] with the bytes read from the file `original`
    /// was loaded from.
    ///
    /// Errors: [`SnapshotError::Read`] when the file cannot be read, then
    /// as [`Instrumented::new`] (a file changed since it was loaded is
    /// [`SnapshotError::NotTheLoadedComponent`]).
    pub fn load(original: &LoadedAdapter) -> Result<Instrumented, SnapshotError> {
        let bytes = std::fs::read(&original.info.path).map_err(|error| SnapshotError::Read {
            component: original.info.path.clone(),
            message: error.to_string(),
        })?;
        Instrumented::new(original, bytes)
    }

    /// Bytes one snapshot grows a parent's memories by: wizer reads every
    /// memory twice through an accessor of [`WIZER_INSTANCE`], and each
    /// read leaves a 64 KiB page behind
    /// ([`Snapshot::parent_growth_bytes`]). Counted from the instrumented
    /// component's accessors named `memory*`.
    pub fn parent_growth_per_snapshot(&self) -> u64 {
        let engine = self.loaded.engine.engine();
        let component = self.loaded.pre.component().component_type();
        let memories = match component.get_export(engine, WIZER_INSTANCE).map(|e| e.ty) {
            Some(wasmtime::component::types::ComponentItem::ComponentInstance(access)) => access
                .exports(engine)
                .filter(|(name, _)| name.starts_with("memory"))
                .count()
                as u64,
            _ => 1,
        };
        2 * memories * WASM_PAGE_BYTES
    }

    /// The instrumented component as an adapter: the original's protocols,
    /// engine and config. A [`WasmAdapter`](super::WasmAdapter) over it
    /// runs normal calls exactly like the original (the only difference is
    /// the extra [`WIZER_INSTANCE`] export).
    pub fn loaded(&self) -> &Arc<LoadedAdapter> {
        &self.loaded
    }

    /// The linked instrumented component, for the bindings'
    /// `GuestIndices::new`.
    pub fn instance_pre(&self) -> &InstancePre<HostState> {
        &self.loaded.pre
    }

    /// The instrumented component's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.instrumented
    }

    /// A new parent: an instance of the instrumented component in its own
    /// store (see [`LiveInstance::new`]).
    pub fn instantiate(&self) -> Result<LiveInstance, SnapshotError> {
        LiveInstance::new(&self.loaded)
    }

    /// Snapshot the linear memories and mutable globals of `instance` (an
    /// instance of this instrumented component living in `store`) into a
    /// new component.
    ///
    /// The accessors run as ordinary synchronous calls on the parent, under
    /// a fresh epoch deadline (and fuel budget, when metered); wizer's
    /// future is polled once and must be ready (no async runtime is
    /// involved). The parent is left usable, its memories grown by 128 KiB
    /// each (see the module documentation).
    ///
    /// Errors: [`SnapshotError::ForeignInstance`] for an instance of another
    /// component; [`SnapshotError::Instrument`] if wizer's context cannot be
    /// derived again identically; [`SnapshotError::AccessorCall`] when an
    /// accessor traps or is missing (the first failure is reported; the
    /// parent may be poisoned then, as after any trap);
    /// [`SnapshotError::Rewrite`] when wizer fails to write the component.
    ///
    /// Panics if `instance` does not belong to `store` (as wasmtime does).
    pub fn snapshot(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Result<Snapshot, SnapshotError> {
        let started = Instant::now();
        let ours = self.loaded.pre.component().image_range();
        if instance.instance_pre(&*store).component().image_range() != ours {
            return Err(SnapshotError::ForeignInstance {
                component: self.component.clone(),
            });
        }

        let cx = self.context()?;
        let reinstrument = started.elapsed();

        reset_budget(store, &self.loaded).map_err(|error| SnapshotError::AccessorCall {
            component: self.component.clone(),
            accessor: "(setting the call budget)".into(),
            message: format!("{error:#}"),
        })?;
        let mut state = Accessors {
            store,
            instance: *instance,
            failure: None,
            calls: 0,
            memory_calls: 0,
            elapsed: Duration::ZERO,
            memory_bytes: 0,
        };
        let wizer = Wizer::new();
        let rewritten = catch_panic(|| {
            let future = wizer.snapshot_component(&cx, &mut state);
            let mut future = std::pin::pin!(future);
            match future
                .as_mut()
                .poll(&mut TaskContext::from_waker(std::task::Waker::noop()))
            {
                Poll::Ready(result) => result.map_err(|error| format!("{error:#}")),
                Poll::Pending => Err("wizer's snapshot future did not complete on its first \
                     poll (an accessor future was not ready)"
                    .to_string()),
            }
        });
        if let Some((accessor, error)) = state.failure.take() {
            return Err(SnapshotError::AccessorCall {
                component: self.component.clone(),
                accessor,
                message: format!("{error:#}"),
            });
        }
        let bytes: Arc<[u8]> = rewritten
            .map_err(|message| SnapshotError::Rewrite {
                component: self.component.clone(),
                message,
            })?
            .into();
        let sha256 = sha256_hex(&bytes);
        let total = started.elapsed();
        Ok(Snapshot {
            bytes,
            sha256,
            timing: SnapshotTiming {
                total,
                reinstrument,
                accessors: state.elapsed,
                rewrite: total.saturating_sub(reinstrument + state.elapsed),
            },
            accessor_calls: state.calls,
            memory_bytes_read: state.memory_bytes,
            parent_growth_bytes: u64::from(state.memory_calls) * WASM_PAGE_BYTES,
        })
    }

    /// Compile `snapshot` (in memory only: a snapshot carries the guest's
    /// heap — the items it read, anything granted to it — so it is never
    /// written to the on-disk cache; the engine's function cache, when on,
    /// reuses the instrumented component's functions), link it and check
    /// it still exports the original's interfaces, then build its
    /// copy-on-write memory images.
    ///
    /// Errors: [`SnapshotError::Compile`] or [`SnapshotError::Link`].
    pub fn compile_snapshot(&self, snapshot: &Snapshot) -> Result<CompiledSnapshot, SnapshotError> {
        self.compile_snapshot_bytes(&snapshot.bytes, &snapshot.sha256)
    }

    /// [`Instrumented::compile_snapshot`] for a snapshot component's
    /// `bytes` with their `sha256` (lowercase hex), e.g. a durable replay
    /// point read back from a run directory. A snapshot of another
    /// component fails to link or to export the original's interfaces.
    ///
    /// Errors: [`SnapshotError::Compile`] or [`SnapshotError::Link`].
    pub fn compile_snapshot_bytes(
        &self,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<CompiledSnapshot, SnapshotError> {
        let what = format!("snapshot {}", &sha256[..12.min(sha256.len())]);
        let started = Instant::now();
        let (loaded, cache) = load_derived(
            &self.component,
            &self.loaded,
            &self.linker,
            bytes,
            sha256,
            None,
            &what,
            format!("{} ({what})", self.component),
        )?;
        let compile = started.elapsed();
        let resave = self.resave.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(path), Some(functions)) = (resave, self.loaded.engine.function_cache()) {
            let _ = functions.save(&path);
        }
        let started = Instant::now();
        loaded
            .pre
            .component()
            .initialize_copy_on_write_image()
            .map_err(|error| SnapshotError::Compile {
                component: self.component.clone(),
                what,
                message: format!("copy-on-write image: {error:#}"),
            })?;
        Ok(CompiledSnapshot {
            loaded: Arc::new(loaded),
            sha256: sha256.to_owned(),
            cache,
            compile,
            image: started.elapsed(),
        })
    }

    /// wizer's context for the original bytes, derived again; it must
    /// produce the instrumented component the parents run.
    fn context(&self) -> Result<ComponentContext<'_>, SnapshotError> {
        let (cx, again) = catch_panic(|| {
            Wizer::new()
                .instrument_component(&self.original)
                .map_err(|error| format!("{error:#}"))
        })
        .map_err(|message| SnapshotError::Instrument {
            component: self.component.clone(),
            message,
        })?;
        if *again != *self.instrumented {
            return Err(SnapshotError::Instrument {
                component: self.component.clone(),
                message: "instrumenting the component again gave other bytes; the \
                          accessors of the running parents cannot be trusted"
                    .into(),
            });
        }
        Ok(cx)
    }
}

impl CompiledSnapshot {
    /// The snapshot as an adapter: the original's protocols, engine and
    /// config. A [`WasmAdapter`](super::WasmAdapter) over it is a child
    /// (its first call instantiates it).
    pub fn loaded(&self) -> &Arc<LoadedAdapter> {
        &self.loaded
    }

    /// The compiled snapshot component.
    pub fn component(&self) -> &Component {
        self.loaded.pre.component()
    }

    /// The linked snapshot, for the bindings' `GuestIndices::new`.
    pub fn instance_pre(&self) -> &InstancePre<HostState> {
        &self.loaded.pre
    }

    /// A new child in its own store (see [`LiveInstance::new`]).
    pub fn instantiate(&self) -> Result<LiveInstance, SnapshotError> {
        LiveInstance::new(&self.loaded)
    }
}

/// Instrument the component `bytes` with wizer, returning the instrumented
/// component (the original plus the [`WIZER_INSTANCE`] export). Use it to
/// check whether wizer accepts a component without loading it; `component`
/// only names it in the error.
///
/// Errors: [`SnapshotError::Instrument`] with wizer's reason.
pub fn instrument(component: &str, bytes: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    catch_panic(|| {
        Wizer::new()
            .instrument_component(bytes)
            .map(|(_, instrumented)| instrumented)
            .map_err(|error| format!("{error:#}"))
    })
    .map_err(|message| SnapshotError::Instrument {
        component: component.to_string(),
        message,
    })
}

thread_local! {
    /// Set while wizer runs on this thread: its panics become errors, so
    /// the process's panic hook keeps quiet about them.
    static IN_WIZER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `body`, turning a panic inside wizer into an error message (wizer
/// panics, e.g., when an accessor call failed and it gets no memory to
/// read); the panic is not printed.
fn catch_panic<R>(body: impl FnOnce() -> Result<R, String>) -> Result<R, String> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_WIZER.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    IN_WIZER.with(|flag| flag.set(true));
    let caught = std::panic::catch_unwind(AssertUnwindSafe(body));
    IN_WIZER.with(|flag| flag.set(false));
    caught.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("wizer panicked: {what}"))
    })
}

/// One call's epoch deadline and fuel for `store`, from `loaded`'s config.
fn reset_budget(store: &mut Store<HostState>, loaded: &LoadedAdapter) -> wasmtime::Result<()> {
    arm_call(store, &loaded.config)
}

/// Save the engine's function cache beside the instrumented component
/// `sha256` when it was just compiled, or load it back when the component
/// came from the cache. Returns the artifacts loaded, and where to save
/// them again when the saved ones were missing or damaged (after the
/// first snapshot compile, [`Instrumented::compile_snapshot_bytes`]).
/// Failures only cost speed: the snapshot's functions are compiled again.
fn share_functions(
    original: &LoadedAdapter,
    sha256: &str,
    cache: CacheOutcome,
) -> (usize, Option<std::path::PathBuf>) {
    let (Some(functions), Some(dir)) = (
        original.engine.function_cache(),
        original.config.cache_dir.as_deref(),
    ) else {
        return (0, None);
    };
    let path = cache_path(dir, sha256, original.engine.engine()).with_extension("functions");
    match cache {
        CacheOutcome::Miss => {
            let _ = functions.save(&path);
            (0, None)
        }
        CacheOutcome::Hit => match functions.load(&path) {
            Ok(loaded) => (loaded, None),
            Err(_) => (0, Some(path)),
        },
        CacheOutcome::Uncached => (0, None),
    }
}

/// Compile `bytes` (a component derived from `base`'s: instrumented or a
/// snapshot) through the cache under `sha256`, link it and bind the
/// interfaces of `base`'s protocols, as a [`LoadedAdapter`] shown as
/// `path`; errors name `component` and `what`.
#[allow(clippy::too_many_arguments)] // one call per kind of derived component
fn load_derived(
    component: &str,
    base: &LoadedAdapter,
    linker: &Linker<HostState>,
    bytes: &[u8],
    sha256: &str,
    cache_dir: Option<&std::path::Path>,
    what: &str,
    path: String,
) -> Result<(LoadedAdapter, CacheOutcome), SnapshotError> {
    let started = Instant::now();
    let engine = base.engine.engine();
    let (compiled, cache) = load_or_compile(engine, bytes, sha256, cache_dir).map_err(|error| {
        SnapshotError::Compile {
            component: component.to_string(),
            what: what.to_string(),
            message: format!("{error:#}"),
        }
    })?;
    let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
    let link = |error: wasmtime::Error| SnapshotError::Link {
        component: component.to_string(),
        what: what.to_string(),
        message: format!("{error:#}"),
    };
    let pre = linker.instantiate_pre(&compiled).map_err(link)?;
    let indices = export_indices(&pre, &base.protocols).map_err(link)?;
    let ty = compiled.component_type();
    let info = ComponentInfo {
        path,
        sha256: sha256.to_string(),
        size_bytes: bytes.len() as u64,
        exports: ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
        imports: ty
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
        protocols: base.protocols.names(),
        cache,
        compile_ms,
    };
    let loaded = LoadedAdapter {
        engine: Arc::clone(&base.engine),
        config: Arc::clone(&base.config),
        pre,
        indices,
        info,
        protocols: base.protocols,
    };
    Ok((loaded, cache))
}

/// Bind every interface of `protocols` in `pre` (a type check of each
/// function against the host's WIT).
fn export_indices(
    pre: &InstancePre<HostState>,
    protocols: &Protocols,
) -> wasmtime::Result<ExportIndices> {
    Ok(ExportIndices {
        episode: protocols
            .execute
            .then(|| episode::GuestIndices::new(pre))
            .transpose()?,
        seeds: protocols
            .seeds
            .then(|| seeds::GuestIndices::new(pre))
            .transpose()?,
        variants: protocols
            .variants
            .then(|| variants::GuestIndices::new(pre))
            .transpose()?,
        groups: protocols
            .episode_groups
            .then(|| episode_groups::GuestIndices::new(pre))
            .transpose()?,
        replay: protocols
            .replay
            .then(|| replay::GuestIndices::new(pre))
            .transpose()?,
        replay_children: protocols
            .replay_children
            .then(|| replay_children::GuestIndices::new(pre))
            .transpose()?,
        child_risk: protocols
            .child_risk
            .then(|| child_risk::GuestIndices::new(pre))
            .transpose()?,
    })
}

/// wizer's view of the parent: calls the accessor functions of
/// [`WIZER_INSTANCE`] synchronously and returns ready futures. wizer's
/// trait has no error channel, so the first failure is kept (the failing
/// accessor and wasmtime's error) and every later accessor returns a
/// placeholder (zero, an empty memory) without calling the guest; the
/// caller reports the failure and throws the rewritten bytes away.
struct Accessors<'a> {
    store: &'a mut Store<HostState>,
    instance: Instance,
    failure: Option<(String, wasmtime::Error)>,
    calls: u32,
    memory_calls: u32,
    elapsed: Duration,
    memory_bytes: u64,
}

impl Accessors<'_> {
    /// Call `instance#func: func() -> R` on the parent and hand its result
    /// to `use_ret`; on failure record it and return `fallback()`.
    fn call<R, O>(
        &mut self,
        instance: &str,
        func: &str,
        use_ret: impl FnOnce(&Store<HostState>, R) -> O,
        fallback: impl FnOnce() -> O,
    ) -> O
    where
        R: Lift + 'static,
    {
        if self.failure.is_some() {
            return fallback();
        }
        let started = Instant::now();
        self.calls += 1;
        let result = (|| -> wasmtime::Result<R> {
            let store = &mut *self.store;
            let parent = self
                .instance
                .get_export_index(&mut *store, None, instance)
                .ok_or_else(|| {
                    wasmtime::format_err!("the instance exports no `{instance}` instance")
                })?;
            let index = self
                .instance
                .get_export_index(&mut *store, Some(&parent), func)
                .ok_or_else(|| {
                    wasmtime::format_err!("`{instance}` exports no function `{func}`")
                })?;
            let typed = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *store, &index)?;
            // No `post_return`: wasmtime 48 runs it inside `call`.
            let (value,) = typed.call(&mut *store, ())?;
            Ok(value)
        })();
        let out = match result {
            Ok(value) => use_ret(self.store, value),
            Err(error) => {
                self.failure = Some((format!("{instance}#{func}"), error));
                fallback()
            }
        };
        self.elapsed += started.elapsed();
        out
    }
}

impl ComponentInstanceState for Accessors<'_> {
    fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) -> impl Future<Output = ()> + Send {
        // `contents` is called exactly once either way: wizer records the
        // memory's size from it.
        let contents = std::cell::Cell::new(Some(contents));
        let mut read = 0u64;
        self.call(
            instance,
            func,
            |store, list: WasmList<u8>| {
                let bytes = list.as_le_slice(store);
                read = bytes.len() as u64;
                if let Some(contents) = contents.take() {
                    contents(bytes);
                }
            },
            || (),
        );
        if let Some(contents) = contents.take() {
            contents(&[]);
        }
        self.memory_bytes += read;
        self.memory_calls += 1;
        std::future::ready(())
    }

    fn call_func_ret_s32(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = i32> + Send {
        std::future::ready(self.call(instance, func, |_, value: i32| value, || 0))
    }

    fn call_func_ret_s64(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = i64> + Send {
        std::future::ready(self.call(instance, func, |_, value: i64| value, || 0))
    }

    fn call_func_ret_f32(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = u32> + Send {
        std::future::ready(self.call(instance, func, |_, value: f32| value.to_bits(), || 0))
    }

    fn call_func_ret_f64(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = u64> + Send {
        std::future::ready(self.call(instance, func, |_, value: f64| value.to_bits(), || 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instrumented_components_and_snapshots_are_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Instrumented>();
        shared::<Snapshot>();
        shared::<CompiledSnapshot>();
    }

    #[test]
    fn a_panic_inside_wizer_becomes_an_error() {
        let caught = catch_panic::<()>(|| panic!("no accessor for {}", "memory0"));
        assert_eq!(
            caught,
            Err("wizer panicked: no accessor for memory0".into())
        );
        assert_eq!(catch_panic(|| Ok(3)), Ok(3));
    }

    #[test]
    fn wizer_refuses_what_is_not_a_component() {
        let error = instrument("core.wasm", b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("wizer cannot instrument core.wasm for snapshots: "),
            "{error}"
        );
    }
}
