//! The replay rules of one episode group, for any adapter: capture a replay
//! point right after the group's prefix was prepared, make it durable when
//! the run keeps points (or keep its exported state when the group's
//! children fork from it), run each suffix from the point on its own trace
//! branch, and release the point with the group, writing its final line to
//! `replay-points.jsonl`.
//!
//! A [`GroupLane`] holds one lane's [`ReplayPointRegistry`] and settings; a
//! group's point is a [`GroupPoint`], kept by the adapter's group handle.
//! What only the adapter can do — tell whether a binding still lives,
//! export its state, run a suffix on it — is [`GroupInstance`]. The
//! isolated children of a group are `group_children.rs`;
//! the record shapes are `group_records.rs`.
//!
//! A binding lives in the instance that captured it. When the adapter loses
//! that instance (a trap, a limit), the binding dies with it: its
//! finalisation and release have nothing left to do, and the point is
//! released without being quarantined (its durable state, if written, stays
//! valid for `sandloop replay`).

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use super::agent_state::{MemoryAgentStateStore, agent_cursor};
use super::child_chunk::{ChildChunk, ChildItemResult, LaneRegistry};
use super::durable::{PointLine, ReplayStore};
use super::fidelity::Fidelity;
use super::group_records::{SuffixSpan, adapter_error_of, error_block, point_id_for};
use super::metrics::ReplayMetricLedger;
use super::point::{Lifecycle, ReplayPoint};
use super::registry::SerialChildGroup;
use super::registry::{ReplayAdapter, ReplayCause, ReplayError, ReplayPointRegistry, ReplayStage};
use crate::episode::adapter::{AdapterError, CallContext, Item, Record};
use crate::episode::records::quarantine_host_owned;
use crate::trace::TraceLog;

/// What a group's replay rules need from the adapter besides the
/// registry's [`ReplayAdapter`] calls: what only the adapter knows about
/// its instance, its exported state, the group's trace and how it forks
/// children. [`Replaying`](super::Replaying) drives these calls around any
/// adapter that implements them; the provided methods fit an adapter that
/// keeps no trace of its own and forks no children.
pub trait GroupInstance: ReplayAdapter {
    /// The adapter's snapshot of a point, when it forks children from
    /// snapshots of its live instance (`()` when it never does).
    type Snapshot;

    /// Whether `binding` still lives in the adapter's current instance (it
    /// dies with the instance that captured it).
    fn binding_alive(&self, binding: &Self::Binding) -> bool;
    /// Identity of the current instance, `None` when there is none: a
    /// different value after a call means the instance was replaced.
    fn instance_id(&self) -> Option<u64>;
    /// The largest exported state the adapter may hand over, bytes
    /// (`--max-output`).
    fn max_output_bytes(&self) -> usize;
    /// Whether the adapter can fork isolated children from an exported
    /// state (`replay-children`).
    fn forks_children(&self) -> bool;
    /// `export-replay-state`: the binding's state as bytes, `None` when the
    /// adapter cannot export it.
    fn export_replay_state(
        &mut self,
        binding: &Self::Binding,
    ) -> Result<Option<Vec<u8>>, AdapterError>;
    /// `run-replay-suffix`: run `item` on the binding's restored working
    /// copy, appending its trace events to `trace`.
    fn run_replay_suffix(
        &mut self,
        binding: &Self::Binding,
        item: &Item,
        ctx: &CallContext,
        trace: &mut Option<TraceLog>,
    ) -> Result<Record, AdapterError>;

    /// The trace of `ctx`'s group as the adapter keeps it across the
    /// group's calls, taken for the point's capture (which appends its
    /// event at the head). `None`, the default, starts a new trace named
    /// after the group.
    fn take_group_trace(&mut self, ctx: &CallContext) -> Option<TraceLog> {
        let _ = ctx;
        None
    }

    /// Hand the group's trace back after the capture; the host appended
    /// the events from sequence `host_events_from` on (the point's capture
    /// event), which the adapter reports like a call's own, for the seed
    /// `seed_item_id`. The default drops it.
    fn keep_group_trace(
        &mut self,
        ctx: &CallContext,
        trace: TraceLog,
        host_events_from: u64,
        seed_item_id: Option<&str>,
    ) {
        let _ = (ctx, trace, host_events_from, seed_item_id);
    }

    /// Settle a point whose export [`GroupLane::settle_capture`] deferred
    /// to the first fork of its children (`point.pending` taken into
    /// `items`): the adapter snapshots its instance, or exports the point
    /// as it would have been without snapshots — the default.
    fn settle_deferred_point(
        &mut self,
        lane: &GroupLane<Self::Binding>,
        point: &mut GroupPoint<Self::Snapshot>,
        items: Vec<Item>,
    ) where
        Self: Sized,
    {
        point.state = lane.export_point(self, &point.id, &items, &mut point.line);
    }

    /// Fork one chunk of a group's children from `chunk.source` and run
    /// them on `registry`
    /// ([`run_child_group_finishing`](super::ReplayPointRegistry::run_child_group_finishing)),
    /// finishing each outcome with `chunk.finish`. Only called for a point
    /// with a snapshot, or with a state exported because the adapter
    /// [forks children](GroupInstance::forks_children); the default, for
    /// an adapter that does neither, fails the chunk.
    fn run_child_chunk(
        &self,
        registry: &mut LaneRegistry<Self::Binding>,
        chunk: ChildChunk<'_, Self::Snapshot>,
        ctx: &CallContext,
    ) -> Result<Vec<ChildItemResult>, ReplayError> {
        let _ = (registry, ctx);
        Err(ReplayError::new(
            ReplayStage::Lookup,
            ReplayCause::Unavailable(format!(
                "the adapter forks no children of point {}",
                chunk.point_id
            )),
        ))
    }
}

/// [`GroupInstance::run_replay_suffix`] with its record's host-owned fields
/// quarantined ([`quarantine_host_owned`]): how a run and `sandloop replay`
/// alike take the record of a suffix replayed from a point.
pub fn replayed_suffix_record<A: GroupInstance + ?Sized>(
    adapter: &mut A,
    binding: &A::Binding,
    item: &Item,
    ctx: &CallContext,
    trace: &mut Option<TraceLog>,
) -> Result<Record, AdapterError> {
    let mut record = adapter.run_replay_suffix(binding, item, ctx, trace)?;
    quarantine_host_owned(&mut record);
    Ok(record)
}

/// Replay settings of a lane (shared by every lane of a run).
#[derive(Clone)]
pub struct GroupSettings {
    /// Counters and minutes of every lane.
    pub metrics: Arc<ReplayMetricLedger>,
    /// Where point lines and durable states go; `None` keeps nothing.
    pub store: Option<Arc<ReplayStore>>,
    /// Fidelity a restored suffix needs to be promotion eligible.
    pub minimum_fidelity: Fidelity,
    /// Threads a group's isolated children run on (`--child-workers`); 0
    /// runs every suffix serially from the point.
    pub child_workers: usize,
    /// Children fork from a snapshot of the live instance (`--fork
    /// snapshot`), taken when they are first forked: the point's export
    /// waits for it.
    pub fork_by_snapshot: bool,
}

/// The replay state of one lane: its registry and settings.
pub struct GroupLane<B> {
    /// The lane's points and their bindings.
    pub registry: ReplayPointRegistry<B, MemoryAgentStateStore>,
    /// The run's replay settings.
    pub settings: GroupSettings,
}

/// What a group keeps about its replay point. `S` is the adapter's
/// snapshot of the point, when it forks children from snapshots.
pub struct GroupPoint<S> {
    /// The point's id ([`point_id_for`]).
    pub id: String,
    /// Its line in `replay-points.jsonl`, written when it is released.
    pub line: PointLine,
    /// The exported state, kept when children are forked from it.
    pub state: Option<Arc<Vec<u8>>>,
    /// The point frozen as a snapshot, when children fork from snapshots.
    pub snapshot: Option<Arc<S>>,
    /// The group's items while its snapshot is still to be taken (at the
    /// first fork of its children).
    pub pending: Option<Vec<Item>>,
    /// Set when the group's suffixes run serially from the point because
    /// its children cannot be forked: finished when the point is released.
    pub serial: Option<SerialChildGroup>,
}

impl<S> GroupPoint<S> {
    /// One suffix of the group ran; counted when the group runs serially.
    pub fn observe_suffix(&mut self, succeeded: bool) {
        if let Some(serial) = self.serial.as_mut() {
            serial.observe(succeeded);
        }
    }
}

/// A settled capture ([`GroupLane::settle_capture`]): the fields for the
/// prefix record and the group's point, if it has one.
pub type SettledCapture<S> = (Map<String, Value>, Option<GroupPoint<S>>);

/// A capture at the head of a group's trace, before it is settled
/// ([`GroupLane::settle_capture`]).
pub struct Capture {
    /// The point's id.
    pub point_id: String,
    /// The group it belongs to.
    pub execution_group_id: String,
    /// The registered point, or why the capture failed.
    pub result: Result<ReplayPoint, ReplayError>,
    /// Wall minutes of the capture.
    pub minutes: f64,
}

impl<B> GroupLane<B> {
    /// A lane with an empty registry counting into `settings.metrics`.
    pub fn new(settings: GroupSettings) -> Self {
        Self {
            registry: ReplayPointRegistry::new(
                MemoryAgentStateStore::new(),
                Arc::clone(&settings.metrics),
            ),
            settings,
        }
    }

    /// Whether point `point_id` is ready and its binding lives in
    /// `adapter`'s current instance: a suffix can run from it.
    pub fn usable<A: GroupInstance<Binding = B>>(&self, adapter: &A, point_id: &str) -> bool {
        self.registry
            .get(point_id)
            .is_some_and(|point| point.lifecycle == Lifecycle::Ready)
            && self
                .registry
                .binding(point_id)
                .is_some_and(|binding| adapter.binding_alive(binding))
    }

    /// Capture the point of group `execution_group_id` (of `ctx`'s arm and
    /// epoch) at the head of the group's `trace`, right after its prefix
    /// was prepared: the point's id is [`point_id_for`], and its agent
    /// cursor names the arm and the group.
    pub fn capture<A: ReplayAdapter<Binding = B>>(
        &mut self,
        adapter: &mut A,
        trace: &mut TraceLog,
        ctx: &CallContext,
        execution_group_id: &str,
    ) -> Capture {
        let cursor = agent_cursor(
            trace.events(),
            &format!("{}\n{}", ctx.arm, execution_group_id),
        );
        let point_id = point_id_for(&ctx.arm, ctx.epoch, execution_group_id);
        let started = Instant::now();
        let result = self.registry.capture_at_head(
            adapter,
            trace,
            cursor,
            &point_id,
            execution_group_id,
            None,
        );
        Capture {
            point_id,
            execution_group_id: execution_group_id.to_string(),
            result,
            minutes: started.elapsed().as_secs_f64() / 60.0,
        }
    }

    /// Settle a capture: the fields for the prefix record
    /// (`replay_point_id` and `replay_fidelity`, or `replay_capture_error`
    /// as an [`error_block`]) and the group's point, exported now — unless
    /// its snapshot is deferred to the first fork of its children (the run
    /// forks by snapshot, children run on workers, the group has more than
    /// one item and the point a binding): the snapshot is then the point's
    /// durable form, and the export waits for its outcome.
    pub fn settle_capture<A: GroupInstance<Binding = B>, S>(
        &mut self,
        adapter: &mut A,
        capture: Capture,
        ctx: &CallContext,
        seed: &Item,
        items: &[Item],
    ) -> SettledCapture<S> {
        let mut fields = Map::new();
        let point = match capture.result {
            Ok(point) => point,
            Err(error) => {
                fields.insert("replay_capture_error".into(), error_block(&error));
                return (fields, None);
            }
        };
        let point_id = capture.point_id;
        let mut line = PointLine {
            point: point.clone(),
            arm: ctx.arm.clone(),
            epoch: ctx.epoch,
            execution_group_id: capture.execution_group_id,
            seed_item_id: seed.item_id_str().unwrap_or_default().to_string(),
            capture_minutes: capture.minutes,
            durable_state: None,
            durable_error: None,
            quarantined: false,
            snapshot: None,
            snapshot_error: None,
            release_error: None,
        };
        let snapshot_pending = self.settings.fork_by_snapshot
            && self.settings.child_workers > 0
            && items.len() > 1
            && self.registry.binding(&point_id).is_some();
        let state = if snapshot_pending {
            None
        } else {
            self.export_point(adapter, &point_id, items, &mut line)
        };
        fields.insert(
            "replay_point_id".into(),
            Value::from(point.replay_point_id.clone()),
        );
        fields.insert(
            "replay_fidelity".into(),
            Value::from(point.fidelity.as_str()),
        );
        let group_point = GroupPoint {
            id: point_id,
            line,
            state,
            snapshot: None,
            pending: snapshot_pending.then(|| items.to_vec()),
            serial: None,
        };
        (fields, Some(group_point))
    }

    /// Export point `point_id`'s state: written durable (with `items`)
    /// when the run keeps points, and returned when the group's children
    /// fork from it by state transfer (`child_workers > 0` and the adapter
    /// [forks children](GroupInstance::forks_children)). Nothing is
    /// exported when neither needs it or the point has no binding; `None`
    /// from the adapter keeps the point in-process. A state over
    /// [`max_output_bytes`](GroupInstance::max_output_bytes), a failed
    /// export or an unwritable state goes to `line.durable_error`.
    pub fn export_point<A: GroupInstance<Binding = B>>(
        &self,
        adapter: &mut A,
        point_id: &str,
        items: &[Item],
        line: &mut PointLine,
    ) -> Option<Arc<Vec<u8>>> {
        let forks_children = self.settings.child_workers > 0 && adapter.forks_children();
        let binding = self.registry.binding(point_id)?;
        if self.settings.store.is_none() && !forks_children {
            return None;
        }
        let max = adapter.max_output_bytes();
        match adapter.export_replay_state(binding) {
            Ok(Some(bytes)) if bytes.len() > max => {
                line.durable_error = Some(format!(
                    "the exported state is {} bytes, over the limit of {max} (--max-output)",
                    bytes.len()
                ));
                None
            }
            Ok(Some(bytes)) => {
                if let Some(store) = &self.settings.store {
                    match store.write_state(&bytes, items) {
                        Ok(durable) => line.durable_state = Some(durable),
                        Err(error) => line.durable_error = Some(error.to_string()),
                    }
                }
                forks_children.then(|| Arc::new(bytes))
            }
            Ok(None) => None,
            Err(error) => {
                line.durable_error = Some(error.to_string());
                None
            }
        }
    }

    /// Run `item` as a suffix from point `point_id`, on its own trace
    /// branch (named after the item, forked right after the point's
    /// capture event: the group's main branch keeps only the prefix).
    /// `None` when the point is not [usable](Self::usable): the caller runs
    /// the item on the prepared group instead. The record carries its
    /// `replay` block ([`SuffixSpan::result`]).
    pub fn run_suffix<A: GroupInstance<Binding = B>>(
        &mut self,
        adapter: &mut A,
        point_id: &str,
        item: &Item,
        ctx: &CallContext,
    ) -> Option<Result<Record, AdapterError>> {
        if !self.usable(adapter, point_id) {
            return None;
        }
        let target = item.item_id_str().unwrap_or("suffix").to_string();
        let point = self.registry.get(point_id)?.clone();
        let mut trace = TraceLog::fork(
            &point.cursor.trace_id,
            &target,
            Some(&point.created_event_id),
            point.cursor.next_sequence + 1,
        )
        .ok();
        let first = point.cursor.next_sequence + 1;
        let minimum = self.settings.minimum_fidelity;
        let outcome = self.registry.run_from(
            adapter,
            point_id,
            &target,
            minimum,
            |adapter, binding, _| replayed_suffix_record(adapter, binding, item, ctx, &mut trace),
        );
        let (trace_id, branch_id) = trace
            .as_ref()
            .map(|log| (log.trace_id().to_string(), log.branch_id().to_string()))
            .unwrap_or_default();
        let span = SuffixSpan {
            replay_point_id: point_id.to_string(),
            fidelity: Some(point.fidelity),
            trace_id,
            branch_id,
            first_sequence: first,
            end_sequence: trace.as_ref().map_or(first, TraceLog::next_sequence),
        };
        Some(span.result(outcome))
    }

    /// Release the group's point with the group: a serial child group is
    /// finished first; the release is retried once; the point's line gets
    /// the release's failure (`release_error`), whether it was or became
    /// quarantined, and the point as it ends, and is appended to the store.
    /// Returns the release's failure ([`adapter_error_of`]) when it also
    /// took the adapter's instance down (a trap in the release or in the
    /// binding's destructor): it is then the group release's own failure,
    /// since the group died with it.
    pub fn release<A: GroupInstance<Binding = B>, S>(
        &mut self,
        adapter: &mut A,
        mut point: GroupPoint<S>,
    ) -> Option<AdapterError> {
        if let Some(serial) = point.serial.take() {
            serial.finish(&self.settings.metrics);
        }
        let instance = adapter.instance_id();
        let failed = |lane: &Self| {
            lane.registry
                .get(&point.id)
                .is_some_and(|p| p.lifecycle == Lifecycle::Failed)
        };
        point.line.quarantined = failed(self);
        let released = match self.registry.release(adapter, &point.id) {
            Err(_) => self.registry.release(adapter, &point.id),
            done => done,
        };
        let error = released.err();
        point.line.release_error = error.as_ref().map(error_block);
        point.line.quarantined |= failed(self);
        if let Some(current) = self.registry.get(&point.id) {
            point.line.point = current.clone();
        }
        if let Some(store) = &self.settings.store {
            store.append_point(&point.line);
        }
        let lost = instance.is_some() && adapter.instance_id() != instance;
        error.filter(|_| lost).map(|error| adapter_error_of(&error))
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
pub(super) mod tests;
