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
//!   (a [`ResourceAny`](wasmtime::component::ResourceAny) of the parent's
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
//! - **Host-side state.** Each child gets a new
//!   `HostState`: its own WASI
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

mod accessors;
mod error;
mod forks;
mod instrumented;
mod live;
mod point;
mod wizer;

pub use error::SnapshotError;
pub use forks::ForkSupport;
pub use instrumented::{InstrumentInfo, Instrumented};
pub use live::{CompiledSnapshot, LiveInstance, Snapshot, SnapshotTiming};
pub use point::SnapshotPoint;
pub use wizer::instrument;

use sandloop_core::episode::adapter::Protocols;

/// Name of the component instance wizer's instrumentation exports: one
/// accessor function per memory (`list<u8>`) and per mutable global (`s32`,
/// `s64`, `f32` or `f64`) of every instantiated core module.
pub const WIZER_INSTANCE: &str = "wasmtime:wizer/access";

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

/// How a run forks its children: `requested` (`None`: `--fork auto`, see
/// [`auto_fork`]), given the component's `protocols` (the component at
/// `adapter`, named in errors) and whether children run at all
/// (`children_run`: replay on and at least one child worker). `None`: no
/// children are forked.
///
/// Errors: a fork was requested that the component cannot give — `state`
/// without `replay-children`, either without `replay`.
pub fn choose_fork(
    requested: Option<ForkKind>,
    protocols: &Protocols,
    children_run: bool,
    adapter: &std::path::Path,
) -> Result<Option<ForkKind>, String> {
    let name = |kind: ForkKind| match kind {
        ForkKind::State => "state",
        ForkKind::Snapshot => "snapshot",
    };
    if !protocols.replay || !children_run {
        if let Some(kind) = requested
            && !protocols.replay
        {
            return Err(format!(
                "--fork {}: {} does not export `replay`, so it has no replay points to fork from",
                name(kind),
                adapter.display()
            ));
        }
        return Ok(None);
    }
    match requested {
        Some(ForkKind::State) if !protocols.replay_children => Err(format!(
            "--fork state: {} does not export `replay-children`; use --fork snapshot",
            adapter.display()
        )),
        Some(kind) => Ok(Some(kind)),
        None => Ok(auto_fork(protocols)),
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

/// Size of a WebAssembly page, bytes.
const WASM_PAGE_BYTES: u64 = 64 << 10;

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
}
