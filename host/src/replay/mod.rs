//! Replay points: adapter-owned state bound to a trace position, restored
//! with checked fidelity so a suffix can run again without its prefix.
//! Mirrors `replay_runtime.py`, `replay_metrics.py` and
//! `adaptive_replay_planner.py` in the reference.

pub mod fidelity;

/// Protocol name of an adapter exporting `replay` (reference
/// `REPLAYABLE_EPISODE_V2_MODE`).
pub const REPLAYABLE_EPISODE_MODE: &str = "replayable-v2";
/// Protocol name of an adapter exporting `replay-children` (reference
/// `isolated_replay_child_mode`).
pub const ISOLATED_CHILD_MODE: &str = "isolated-child-v0";
/// Protocol name of an adapter exporting `child-risk` (reference
/// `replay_child_risk_mode`).
pub const CHILD_RISK_MODE: &str = "child-risk-v0";

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
    ChildConcurrency, ChildFailure, ChildFailureStage, ChildForker, ChildLease, ChildOutcome,
    ChildResult, ChildSession, ChildTask, Disposition, ForkRequest, RISK_DENIED, ReplayAdapter,
    ReplayCause, ReplayError, ReplayPointRegistry, ReplayStage, RiskAssessment, Selection,
    SerialChildGroup, select_before,
};
