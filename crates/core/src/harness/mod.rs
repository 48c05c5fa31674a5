//! Epochs, the work queue, failure policy, novelty, variants and
//! checkpoints. Mirrors `harness_runtime.py` and `harness_checkpoint.py`.
//!
//! Running an arm with a run directory:
//!
//! ```no_run
//! # use sandloop_core::harness::*;
//! # use sandloop_core::episode::adapter::*;
//! # fn demo<A: EpisodeAdapter, S: SeedSource>(
//! #     seeds: &mut S,
//! #     factory: impl Fn(usize) -> Result<A, AdapterError> + Sync,
//! #     protocols: Protocols,
//! # ) -> Result<(), ArmError> {
//! let config = ArmConfig { worker_count: 4, checkpoint: true, ..ArmConfig::default() };
//! let mut run_dir = RunDir::new("runs/main");
//! let progress = |event: &ArmEvent<'_>| {
//!     if let ArmEvent::UnitDone { records, .. } = event {
//!         let _ = records.len(); // advance a progress bar
//!     }
//! };
//! let options = ArmOptions { observer: &progress, ..ArmOptions::default() };
//! let summary = run_arm(&config, protocols, seeds, &factory, &mut run_dir, options)?;
//! println!("{} records, stop: {}", summary.record_count, summary.stop_reason.as_str());
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`arm`] (the epoch loop), [`queue`] (lanes and concurrency
//! keys), [`work`] (what a lane runs), `novelty`, `catalog` (variant
//! specs and frontier selection), `checkpoint`, [`run_dir`] (outputs; `writeback` syncs `records.jsonl` as it grows),
//! [`run_files`] (the run directory's file names, `failure.json`),
//! [`manifest`] (`manifest.json`), [`run_output`] (a run's recorded options and `run --json`), [`summary`] (JSON shapes), `config`, `error`, [`items_file`] (seeds
//! from a JSONL file, for the CLI, each line checked by `item_line`).

pub mod arm;
pub(crate) mod catalog;
pub(crate) mod checkpoint;
pub(crate) mod config;
pub(crate) mod error;
pub mod error_tally;
pub mod grant_check;
pub(crate) mod item_line;
pub mod items_file;
pub(crate) mod json_list;
pub mod manifest;
pub(crate) mod novelty;
pub mod queue;
pub(crate) mod record_line;
pub mod run_dir;
pub mod run_files;
pub mod run_output;
pub mod run_session;
pub mod summary;
pub mod work;
pub(crate) mod writeback;

#[cfg(test)]
pub(crate) mod testing;

pub use arm::{ArmEvent, ArmObserver, ArmOptions, NoObserver, run_arm, runtime_signature};
pub use catalog::{CatalogError, FrontierAudit, VariantCatalog, select_frontier_work};
pub use checkpoint::{
    ArmCheckpoint, CheckpointError, CheckpointState, RuntimeSignature, load_arm_checkpoint,
};
pub use config::ArmConfig;
pub use error::ArmError;
pub use manifest::RunManifest;
pub use novelty::NoveltyLedger;
pub use queue::{LaneSummary, QueueConfig, QueueUnit, UnitDone, run_queue_epoch};
pub use run_dir::{ArmOutput, OutputOffsets, RecordsWrite, RunDir};
pub use run_files::{RunFailure, RunFileError};
pub use summary::{AnytimeCheckpoint, ArmSummary, EpochSummary, RunSummary, StopReason};
pub use work::{StandaloneItem, UnitError, UnitRunner, WorkUnit, execute_work_unit};
