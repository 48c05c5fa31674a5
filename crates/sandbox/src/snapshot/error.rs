//! What can fail in a snapshot fork, step by step.

/// Which step of a snapshot fork failed, naming the component (the path it
/// was loaded from) and wasmtime's or wizer's own words.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The component file could not be read (only
    /// [`Instrumented::load`](super::Instrumented::load)).
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
        /// The component as its
        /// [`LoadedAdapter`](crate::component::LoadedAdapter) shows it: the
        /// path, then `(wizer-instrumented)` or `(snapshot <sha256 prefix>)`
        /// for the derived ones.
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
    /// Calling an accessor function of [`WIZER_INSTANCE`](super::WIZER_INSTANCE) on the parent
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
