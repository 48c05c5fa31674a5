//! The isolated children of a replay group: every item of the group forked
//! from the group's point — from its exported state, or from its snapshot
//! — and run as a settled child group
//! ([`ReplayPointRegistry::run_child_group_finishing`](super::ReplayPointRegistry::run_child_group_finishing)),
//! [`MAX_CHILDREN_PER_FORK`] at a time; or, when the point is usable but
//! its children cannot be forked, the group counted as a serial fallback
//! ([`SerialChildGroup`]) whose suffixes run one by one from the point.
//!
//! How a child is forked is the adapter's: the caller's `run_chunk` builds
//! a [`ChildForker`](super::ChildForker) for the chunk's [`ForkSource`] and
//! runs the chunk's tasks on the registry, finishing each child's outcome
//! into its item's result with the chunk's [`finish`](ChildChunk::finish).

use std::sync::Arc;

use super::child_chunk::{ChildChunk, ChildItemResult, ForkAt, ForkSource, LaneRegistry};
use super::group::{GroupInstance, GroupLane, GroupPoint};
use super::group_records::{child_result, failed_child, intent_of};
use super::registry::ReplayError;
use super::registry::{ChildOutcome, ChildTask, SerialChildGroup};
use crate::episode::adapter::Item;

/// Most children forked at once per lane; a larger group runs as several
/// child groups of this size from the same point (the instance pool is
/// sized for it).
pub const MAX_CHILDREN_PER_FORK: usize = 32;

impl<B> GroupLane<B> {
    /// Run every item of a group as an isolated child of its `point`, in
    /// chunks of [`MAX_CHILDREN_PER_FORK`], through `run_chunk`; one result
    /// per item, in order, with the minutes its replay took
    /// ([`child_result`]; when a whole chunk fails, [`failed_child`] for
    /// each of its items).
    ///
    /// `None` when the point is not [usable](GroupLane::usable) (the items
    /// then run on the prepared group), or when it is but has neither a
    /// snapshot nor an exported state, or the lane runs no child workers:
    /// the group is then started as a [`SerialChildGroup`] on the point,
    /// and its items run one by one from it.
    pub fn run_children<A, S>(
        &mut self,
        adapter: &A,
        point: &mut GroupPoint<S>,
        items: &[Item],
        mut run_chunk: impl FnMut(
            &mut LaneRegistry<B>,
            ChildChunk<'_, S>,
        ) -> Result<Vec<ChildItemResult>, ReplayError>,
    ) -> Option<Vec<ChildItemResult>>
    where
        A: GroupInstance<Binding = B>,
    {
        let source = match (&point.snapshot, &point.state) {
            (Some(snapshot), _) => Some(ForkSource::Snapshot(Arc::clone(snapshot))),
            (None, Some(state)) => Some(ForkSource::State(Arc::clone(state))),
            (None, None) => None,
        };
        if !self.usable(adapter, &point.id) {
            return None;
        }
        let replay_point = self.registry.get(&point.id)?.clone();
        let workers = self.settings.child_workers;
        let Some(source) = source.filter(|_| workers > 0) else {
            point.serial = Some(SerialChildGroup::start(&self.settings.metrics));
            return None;
        };
        let minimum = self.settings.minimum_fidelity;
        let first_sequence = replay_point.cursor.next_sequence + 1;
        let fork = source.name();
        let finish =
            |outcome: ChildOutcome| child_result(outcome, &replay_point, first_sequence, fork);
        let mut results = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_CHILDREN_PER_FORK) {
            let tasks = chunk
                .iter()
                .map(|item| {
                    let id = item.item_id_str().unwrap_or("child").to_string();
                    ChildTask {
                        child_id: id.clone(),
                        target_branch_id: id,
                        minimum_fidelity: minimum,
                        item: item.clone(),
                        intent: intent_of(item),
                        counterfactual: None,
                    }
                })
                .collect();
            let fork_at = ForkAt {
                trace_id: replay_point.cursor.trace_id.clone(),
                created_event_id: replay_point.created_event_id.clone(),
                next_sequence: first_sequence,
            };
            let chunk_of = ChildChunk {
                point_id: &point.id,
                source: &source,
                fork_at,
                tasks,
                workers,
                finish: &finish,
            };
            match run_chunk(&mut self.registry, chunk_of) {
                Ok(finished) => results.extend(finished),
                Err(error) => results.extend(
                    chunk
                        .iter()
                        .map(|item| failed_child(&error, &replay_point, fork, item)),
                ),
            }
        }
        Some(results)
    }
}
