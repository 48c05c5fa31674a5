//! The run's inputs, loaded and checked before anything is written: the
//! component in a sandbox sized for the run, the seed items, the variant
//! catalog, and the instrumented component children are snapshot-forked
//! from.

use std::path::Path;
use std::sync::Arc;

use super::{LaunchError, RunObserver, RunRequest, error_chain};
use crate::episode::stored::StoredItems;
use crate::harness::VariantCatalog;
use crate::harness::items_file::load_items_file;
use crate::sandbox::snapshot::{ForkKind, Instrumented};
use crate::sandbox::{LoadedAdapter, SandboxConfig, SandboxEngine, WasmAdapter, load};

/// What a run reads before it starts.
pub struct Inputs {
    /// The component, loaded and shown to start under the run's limits.
    pub loaded: Arc<LoadedAdapter>,
    /// The seed items of `--items`; `None`: the component's `seeds`.
    pub items: Option<StoredItems>,
    /// The variant catalog of `--variants`.
    pub catalog: Option<VariantCatalog>,
}

/// Start the engine for `config`.
///
/// # Errors
/// The engine's refusal of the limits, as a sentence that says what to
/// change (bad input).
pub fn open_engine(
    config: SandboxConfig,
) -> Result<(Arc<SandboxEngine>, Arc<SandboxConfig>), String> {
    let engine = SandboxEngine::new(&config).map_err(|error| {
        format!(
            "could not start the wasmtime engine with these limits (try a smaller \
             --max-memory or fewer --workers): {error:#}"
        )
    })?;
    Ok((Arc::new(engine), Arc::new(config)))
}

/// The component, loaded into a sandbox sized for the run's lanes and
/// children and shown to start under its limits, with the seed items and
/// the variant catalog; each refused when the component cannot use it.
///
/// A regular items file is read on its own thread while the component
/// loads and starts (the two are independent, and each keeps a core busy
/// for milliseconds). The errors keep their order: the component's first,
/// then the items file's. A pipe is read after the component, so a
/// component that cannot load is reported without waiting on a writer.
///
/// # Errors
/// [`LaunchError::Refused`] for bad input (a component that is not one, an
/// unreadable items file, inputs the component cannot use);
/// [`LaunchError::Failed`] for a component that cannot be instantiated
/// under these limits.
pub fn load_inputs(
    request: &RunRequest,
    observer: &dyn RunObserver,
) -> Result<Inputs, LaunchError> {
    let options = &request.options;
    // Each lane may hold a chunk of forked children besides its own
    // instance.
    let child_slots = if options.child_workers > 0 {
        crate::sandbox::adapter::MAX_CHILDREN_PER_FORK as u32
    } else {
        0
    };
    let workers = options.workers as u32;
    let mut config = request.sandbox.clone();
    config.pool_instances = (workers + 2) * 2 + workers * child_slots;
    // Snapshot forks compile a component per replay point whose functions
    // are the instrumented component's: keep them for reuse.
    config.incremental_compilation =
        request.fork != Some(ForkKind::State) && request.children_requested();
    let start_component = || -> Result<Arc<LoadedAdapter>, LaunchError> {
        let (engine, config) = open_engine(config).map_err(LaunchError::Refused)?;
        let cached = config.cache_dir.is_some();
        let loaded = Arc::new(compiled(
            observer,
            &options.adapter,
            "NAME",
            cached,
            || load(&options.adapter, engine, config),
        )?);
        // A component that cannot start under these limits would fail every
        // item the same way: say so once, before anything is written.
        WasmAdapter::check_starts(Arc::clone(&loaded)).map_err(|error| {
            LaunchError::Failed(format!(
                "{} cannot be instantiated under these limits ({}): {}; nothing was run",
                options.adapter.display(),
                error.error_type.as_str(),
                error.message
            ))
        })?;
        Ok(loaded)
    };
    let read_items = || {
        options
            .items
            .as_deref()
            .map(load_items_file)
            .transpose()
            .map_err(|error| LaunchError::Refused(error.to_string()))
    };
    let items_are_a_file = options
        .items
        .as_deref()
        .is_some_and(|path| std::fs::metadata(path).is_ok_and(|meta| meta.is_file()));
    let (loaded, items) = std::thread::scope(|scope| {
        let reader = items_are_a_file
            .then(|| {
                std::thread::Builder::new()
                    .name("sandloop-items".into())
                    .spawn_scoped(scope, read_items)
                    .ok()
            })
            .flatten();
        let loaded = start_component();
        let items = match reader {
            Some(reader) => reader
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // A pipe (or no thread to be had): read after the component,
            // and not at all when it failed.
            None if loaded.is_ok() => read_items(),
            None => Ok(None),
        };
        Ok::<_, LaunchError>((loaded?, items?))
    })?;
    let protocols = loaded.protocols;
    if items.is_none() && !protocols.seeds {
        return Err(LaunchError::Refused(format!(
            "{} does not export `seeds`; give the seed items with --items FILE.jsonl",
            options.adapter.display()
        )));
    }
    let catalog = match &options.variants {
        None => None,
        Some(path) => {
            if !protocols.variants {
                return Err(LaunchError::Refused(format!(
                    "--variants given, but {} does not export `variants` to compile them",
                    options.adapter.display()
                )));
            }
            Some(
                VariantCatalog::open(path)
                    .map_err(|error| LaunchError::Refused(error_chain(&error)))?,
            )
        }
    };
    Ok(Inputs {
        loaded,
        items,
        catalog,
    })
}

/// The instrumented component children are snapshot-forked from, when
/// `fork` ([`RunRequest::fork_kind`]) is by snapshot; `None` for state
/// transfer or no children at all.
///
/// # Errors
/// [`LaunchError::Refused`] when wizer refuses the component.
pub fn snapshot_forks(
    request: &RunRequest,
    loaded: &LoadedAdapter,
    fork: Option<ForkKind>,
    observer: &dyn RunObserver,
) -> Result<Option<Arc<Instrumented>>, LaunchError> {
    if fork != Some(ForkKind::Snapshot) {
        return Ok(None);
    }
    let cached = loaded.config().cache_dir.is_some();
    compiled(
        observer,
        &request.options.adapter,
        "NAME for snapshot forks",
        cached,
        || Instrumented::load(loaded),
    )
    .map(|instrumented| Some(Arc::new(instrumented)))
    .map_err(|error| LaunchError::Refused(format!("--fork snapshot: {error}")))
}

/// `work`'s result, run through [`RunObserver::compiling`].
fn compiled<T>(
    observer: &dyn RunObserver,
    component: &Path,
    what: &str,
    cached: bool,
    work: impl FnOnce() -> T,
) -> T {
    let mut work = Some(work);
    let mut result = None;
    observer.compiling(component, what, cached, &mut || {
        result = work.take().map(|work| work());
    });
    result.expect("RunObserver::compiling runs its work")
}
