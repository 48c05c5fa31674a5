//! Isolated children of a durable replay point that a later process
//! adopted (`sandloop counterfactual`): the point's binding lives in a
//! parent instance that imported its exported state or resumed it from its
//! snapshot, and every task runs in a child of its own — a fresh instance
//! of the component that adopts the exported state, or a fresh instance of
//! the snapshot — through the same group runtime as a run's children
//! ([`ReplayPointRegistry::run_child_group_from`]).

use std::sync::Arc;

use super::WasmAdapter;
use super::child_instance::ChildOrigin;
use super::children::WasmChildForker;
use super::replay::BindingHandle;
use super::snapshot_children::SnapshotForker;
use crate::snapshot::CompiledSnapshot;
use crate::snapshot::SnapshotPoint;
use sandloop_core::episode::adapter::CallContext;
use sandloop_core::replay::{
    ChildOutcome, ChildTask, ForkAt, MemoryAgentStateStore, ReplayError, ReplayPoint,
    ReplayPointRegistry,
};

/// How the children of an adopted point are forked.
pub enum AdoptedFork {
    /// Each child is a fresh instance of the run's component that adopts
    /// the point's exported state (`fork-replay-child`).
    State(Arc<Vec<u8>>),
    /// Each child is a fresh instance of the point's compiled snapshot and
    /// resumes the binding `token` named; it also adopts the exported
    /// `state` as its replay child, so the calls that name a child by id
    /// (`child-risk`, `counterfactual`) find it.
    Snapshot {
        /// The point's snapshot, compiled.
        compiled: CompiledSnapshot,
        /// The point's `binding_token`.
        token: u64,
        /// The binding's state, exported from the parent.
        state: Arc<Vec<u8>>,
        /// Milliseconds it took to compile the snapshot.
        compile_ms: f64,
    },
}

/// Run `tasks` as isolated children of `point`, adopted into `parent` and
/// registered in `registry`, on up to `workers` threads (settled: a child
/// that fails is an outcome beside its siblings'). Every child's trace
/// branch starts after the point's `replay_point_captured` event.
///
/// Errors: the group failed as a whole (a fork, restore or equivalence
/// broke the contract, an outcome was denied, a cleanup failed); see
/// [`ReplayPointRegistry::run_child_group_from`].
pub fn run_adopted_children(
    parent: &WasmAdapter,
    registry: &mut ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    point: &ReplayPoint,
    fork: AdoptedFork,
    tasks: Vec<ChildTask>,
    workers: usize,
    ctx: &CallContext,
) -> Result<Vec<ChildOutcome>, ReplayError> {
    let fork_at = ForkAt {
        trace_id: point.cursor.trace_id.clone(),
        created_event_id: point.created_event_id.clone(),
        next_sequence: point.cursor.next_sequence + 1,
    };
    let point_id = &point.replay_point_id;
    match fork {
        AdoptedFork::State(state) => {
            let mut forker = WasmChildForker {
                origin: ChildOrigin::new(parent, &parent.loaded, ctx, fork_at),
                state,
            };
            registry.run_child_group_from(&mut forker, point_id, tasks, workers, true)
        }
        AdoptedFork::Snapshot {
            compiled,
            token,
            state,
            compile_ms,
        } => {
            let origin = ChildOrigin::new(parent, compiled.loaded(), ctx, fork_at);
            let point = Arc::new(SnapshotPoint {
                compiled,
                token,
                bytes: 0,
                snapshot_ms: 0.0,
                compile_ms,
                risk_state: Some(state),
            });
            let mut forker = SnapshotForker { origin, point };
            registry.run_child_group_from(&mut forker, point_id, tasks, workers, true)
        }
    }
}
