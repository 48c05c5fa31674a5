//! Distributed runs on NATS JetStream.
//!
//! `sandloop run --nats URL` stays the coordinator of its run (run
//! directory, epochs, checkpoint, novelty, ordering, summary); its queue
//! lanes send their units through a [`Dispatcher`] to
//! `sandloop worker` processes ([`run_worker`]) on any number of
//! machines, which run them in their own sandboxes and send the records
//! back. Modules: `wire` (the messages), [`transport`] (connection,
//! streams, the component's object store), `ledger` (units in flight,
//! one result per unit, the summary's figures), `lost` (the records of
//! a unit no worker could finish), `points` (replay points between the
//! two ends), `scratch` (a worker's directory for them), [`storage`] (what
//! runs keep on the server, for operators), `coordinator`, `worker`.

#![forbid(unsafe_code)]

mod coordinator;
mod ledger;
mod lost;
mod points;
mod scratch;
pub mod storage;
pub mod transport;
mod wire;
mod worker;

pub use coordinator::{Dispatcher, RemoteLane, RunSpec};
pub use ledger::DistributedSummary;
pub use points::RemoteReplay;
pub use scratch::Scratch;
pub use transport::NatsTarget;
pub use wire::{GuestNeed, ReplaySettings, SandboxLimits};
pub use worker::{MAX_LANES, WorkerConfig, default_name, run_worker};

/// Locks `mutex`, taking over a poisoned one (a panicked lane's state is
/// plain bookkeeping, still consistent).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
