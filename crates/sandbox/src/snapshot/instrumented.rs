//! Preparing a component for snapshots and taking them: wizer's
//! instrumentation compiled and linked like the original, a snapshot of a
//! live parent, and compiling a snapshot.

use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre, Linker};
use wasmtime_wizer::{ComponentContext, Wizer};

use super::accessors::Accessors;
use super::live::reset_budget;
use super::wizer::{catch_panic, instrument};
use super::{
    CompiledSnapshot, LiveInstance, Snapshot, SnapshotError, SnapshotTiming, WASM_PAGE_BYTES,
    WIZER_INSTANCE,
};
use crate::cache::{CacheOutcome, cache_path, load_or_compile, sha256_hex};
use crate::component::{ComponentInfo, ExportIndices, LoadedAdapter, Twins, linker};
use crate::host_state::HostState;

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
        let bytes =
            sandloop_core::input_file::read_regular(std::path::Path::new(&original.info.path))
                .map_err(|error| SnapshotError::Read {
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
    /// engine and config. A [`WasmAdapter`](crate::WasmAdapter) over it
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
    let indices = ExportIndices::bind(&pre, &base.protocols).map_err(|(_, error)| link(error))?;
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
        twins: Twins::none(),
    };
    Ok((loaded, cache))
}
