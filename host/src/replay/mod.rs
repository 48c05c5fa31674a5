//! Replay points: adapter-owned state bound to a trace position, restored
//! with checked fidelity so a suffix can run again without its prefix.
//! Mirrors `replay_runtime.py`, `replay_metrics.py` and
//! `adaptive_replay_planner.py` in the reference.

pub mod fidelity;

/// Protocol name of an adapter exporting `replay` (reference
/// `REPLAYABLE_EPISODE_V2_MODE`).
pub const REPLAYABLE_EPISODE_MODE: &str = "replayable-v2";

pub use fidelity::Fidelity;
pub mod agent_state;
pub mod durable;
pub mod evidence;
pub mod metrics;
pub mod planner;
pub mod point;
pub mod registry;

pub use agent_state::{AgentStateStore, MemoryAgentStateStore, agent_cursor};
pub use metrics::ReplayMetricLedger;
pub use point::{
    AgentCursor, CaptureRequest, EquivalenceCheck, EquivalenceReport, Lifecycle, ReplayPoint,
    ReplayRestoreResult, RestoreReceipt, RestoreRequest, StateLease, TraceCursor,
};
pub use registry::{
    ReplayAdapter, ReplayCause, ReplayError, ReplayPointRegistry, ReplayStage, Selection,
    select_before,
};
