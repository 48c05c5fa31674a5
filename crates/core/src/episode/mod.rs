//! Episode execution: seeds and their variants grouped into units, a shared
//! prefix prepared once and sibling suffixes run on it. Mirrors
//! `episode_runtime.py` in the reference.
//!
//! - [`units`]: concurrency keys, execution units, fatal preflight;
//! - `group`: running one unit (prepare, suffixes, release, fallback);
//! - `item`: a work item, held as its map or as the text it was read from;
//! - [`records`]: the error record factory and record annotation;
//! - [`unit_record`]: a unit's record on its way to the run's files, the
//!   host's suffix fields typed beside the adapter's;
//! - `metrics`: actual and avoided recomputation minutes;
//! - `probes`: router probes folding siblings into one observation;
//! - [`policy`]: the item failure policy and [`FatalError`];
//! - [`clock`]: the host clock every duration is measured with;
//! - [`value`]: Python-compatible readings of JSON values.
//!
//! Host-measured durations: every record produced here carries the host's
//! measurement of the call that produced it as `duration_minutes`; see
//! `group` for this deliberate deviation from the reference.

pub mod adapter;
pub(crate) mod adapter_error;
pub mod clock;
pub(crate) mod group;
pub(crate) mod item;
pub(crate) mod metrics;
pub mod policy;
pub(crate) mod probes;
pub mod records;
pub mod stored;
pub mod unit_record;
pub mod units;
pub mod value;

#[cfg(test)]
pub(crate) mod testing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use group::execute_episode_group;
pub use metrics::{
    ExecutionMetrics, MetricsAccumulator, combine_execution_metrics, summarize_execution_records,
};
pub use policy::{FailurePolicy, FatalError};
pub use probes::build_router_probes;
pub use records::{
    RECORD_KIND_EPISODE_SUFFIX, RECORD_KIND_SHARED_PREFIX, RECORD_KIND_STANDALONE,
    adapter_error_record,
};
pub use unit_record::{GroupFields, RecordFields, UnitRecord};
pub use units::{
    EpisodeGroup, ExecutionUnit, InvalidUnit, build_episode_execution_units,
    build_episode_execution_units_checked, fatal_preflight, item_concurrency_keys,
};

/// The protocol name of shared-prefix episode groups (reference
/// `RECOVERABLE_EPISODE_MODE`).
pub const RECOVERABLE_EPISODE_MODE: &str = "recoverable-v0";
