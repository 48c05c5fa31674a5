//! Snapshots and their instances: a snapshot component's bytes, the
//! compiled snapshot children are instantiated from, and one instance in
//! its own store.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Component, Instance, InstancePre, ResourceAny};

use super::SnapshotError;
use crate::cache::CacheOutcome;
use crate::component::LoadedAdapter;
use crate::host_state::HostState;
use crate::store::{arm_call, new_store};

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

/// Wall times of one [`Instrumented::snapshot`](super::Instrumented::snapshot).
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
    pub(super) loaded: Arc<LoadedAdapter>,
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
/// [`WasmAdapter`](crate::WasmAdapter)'s: a fresh `HostState` from the
/// adapter's [`SandboxConfig`](crate::SandboxConfig), its memory limiter,
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
    /// [`Instrumented::loaded`](super::Instrumented::loaded) or a
    /// [`CompiledSnapshot::loaded`]) in a new
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

impl CompiledSnapshot {
    /// The snapshot as an adapter: the original's protocols, engine and
    /// config. A [`WasmAdapter`](crate::WasmAdapter) over it is a child
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

/// One call's epoch deadline and fuel for `store`, from `loaded`'s config.
pub(super) fn reset_budget(
    store: &mut Store<HostState>,
    loaded: &LoadedAdapter,
) -> wasmtime::Result<()> {
    arm_call(store, &loaded.config)
}
