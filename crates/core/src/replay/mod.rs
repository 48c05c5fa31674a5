//! Replay points: adapter-owned state bound to a trace position, restored
//! with checked fidelity so a suffix can run again without its prefix.
//! Mirrors `replay_runtime.py`, `replay_metrics.py` and
//! `adaptive_replay_planner.py` in the reference.

pub mod fidelity;

/// Protocol names of the replay interfaces (`replayable-v2`,
/// `isolated-child-v0`, `child-risk-v0`, `counterfactual-v0`), defined in
/// `sandloop-contract`.
pub use sandloop_contract::{
    CHILD_RISK_MODE, COUNTERFACTUAL_MODE, ISOLATED_CHILD_MODE, REPLAYABLE_EPISODE_MODE,
};

pub use fidelity::Fidelity;
pub(crate) mod agent_state;
pub(crate) mod child_chunk;
pub mod counterfactual;
pub mod crew;
pub mod durable;
pub(crate) mod error;
pub mod group;
pub(crate) mod group_children;
pub(crate) mod group_records;
pub mod metrics;
pub mod planner;
pub(crate) mod point;
pub mod registry;
pub(crate) mod replaying;
pub mod snapshot_totals;

pub use agent_state::{AgentStateStore, MemoryAgentStateStore, agent_cursor};
pub use child_chunk::{ChildChunk, ChildItemResult, ForkAt, ForkSource, LaneRegistry};
pub use group::{Capture, GroupInstance, GroupLane, GroupPoint, GroupSettings, SettledCapture};
pub use group_children::MAX_CHILDREN_PER_FORK;
pub use group_records::{
    SuffixSpan, adapter_error_of, child_result, error_block, failed_child, intent_of, point_id_for,
};
pub use metrics::ReplayMetricLedger;
pub use point::{
    AgentCursor, CaptureRequest, EquivalenceCheck, EquivalenceReport, EquivalenceReportFields,
    Lifecycle, ReplayPoint, ReplayRestoreResult, RestoreReceipt, RestoreRequest, StateLease,
    TraceCursor,
};
pub use registry::{
    ChildConcurrency, ChildFailure, ChildFailureStage, ChildForker, ChildLease, ChildOutcome,
    ChildResult, ChildSession, ChildTask, ConcurrentForker, CounterfactualRequest, Disposition,
    ForkRequest, RISK_DENIED, ReplayAdapter, ReplayCause, ReplayError, ReplayPointRegistry,
    ReplayStage, RiskAssessment, RiskAssessmentRules, Selection, SerialChildGroup,
    ValidationOutcome, run_parallel, select_before,
};
pub use replaying::{ReplayGroup, Replaying};
