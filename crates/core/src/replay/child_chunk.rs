//! One chunk of a replay group's children as the adapter receives it
//! ([`GroupInstance::run_child_chunk`](super::GroupInstance::run_child_chunk)):
//! where the children fork from ([`ForkSource`], [`ForkAt`]), their tasks,
//! and the registry they run on ([`LaneRegistry`]).

use std::sync::Arc;

use super::registry::ChildForker;
use super::registry::{ChildOutcome, ChildTask};
use super::registry::{ReplayError, ReplayPointRegistry};
use crate::episode::adapter::{AdapterError, Record};
use crate::replay::agent_state::MemoryAgentStateStore;

/// Where a group's children come from: the point's exported state, or its
/// snapshot (`S`, the adapter's).
pub enum ForkSource<S> {
    /// The exported state each child adopts (`replay-children`).
    State(Arc<Vec<u8>>),
    /// The point frozen as a snapshot each child is an instance of.
    Snapshot(Arc<S>),
}

impl<S> ForkSource<S> {
    /// The `fork` value of a child's `replay` block: `state` or `snapshot`.
    pub fn name(&self) -> &'static str {
        match self {
            ForkSource::State(_) => "state",
            ForkSource::Snapshot(_) => "snapshot",
        }
    }
}

/// The trace position children fork at: the point's trace, its capture
/// event, and the sequence after it (each child's branch starts there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkAt {
    /// The group's trace.
    pub trace_id: String,
    /// The point's `replay_point_captured` event.
    pub created_event_id: String,
    /// The first sequence of every child's branch.
    pub next_sequence: u64,
}

/// One item's result from a child group: its record or the adapter's
/// error, and the minutes its replay took.
pub type ChildItemResult = (Result<Record, AdapterError>, f64);

/// One chunk of a group's children, handed to the caller's `run_chunk`.
pub struct ChildChunk<'a, S> {
    /// The point they fork from.
    pub point_id: &'a str,
    /// Where they fork from.
    pub source: &'a ForkSource<S>,
    /// Where their trace branches start.
    pub fork_at: ForkAt,
    /// One task per item: child id and branch = the item's id (`child`
    /// when it has none), the lane's minimum fidelity, the item's
    /// [`intent_of`](super::intent_of).
    pub tasks: Vec<ChildTask>,
    /// Threads to run them on.
    pub workers: usize,
    /// Each child's outcome as its item's result ([`child_result`](super::child_result)), for
    /// [`run_child_group_finishing`](ReplayPointRegistry::run_child_group_finishing):
    /// a child's record is built on the thread that ran it.
    pub finish: &'a (dyn Fn(ChildOutcome) -> ChildItemResult + Sync),
}

/// The registry a group's children run on.
pub type LaneRegistry<B> = ReplayPointRegistry<B, MemoryAgentStateStore>;

impl<S> ChildChunk<'_, S> {
    /// Fork and run the chunk's tasks with `forker` on `registry` as one
    /// settled child group of its point, each child's outcome finished into
    /// its item's result on the thread that ran it.
    ///
    /// # Errors
    /// The registry's refusal of the group as a whole (an unknown or
    /// released point); a child's own failure is its item's result.
    pub fn run_on<B, F: ChildForker>(
        self,
        registry: &mut LaneRegistry<B>,
        forker: &mut F,
    ) -> Result<Vec<ChildItemResult>, ReplayError> {
        registry.run_child_group_finishing(
            forker,
            self.point_id,
            self.tasks,
            self.workers,
            true,
            self.finish,
        )
    }
}
