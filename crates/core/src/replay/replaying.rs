//! [`Replaying`]: replay as a wrapper around any episode adapter. It is
//! itself an [`EpisodeAdapter`] whose groups carry a replay point:
//!
//! - prepare = the inner prepare, then the point's capture at the head of
//!   the group's trace and its settlement ([`GroupLane::capture`],
//!   [`GroupLane::settle_capture`]); the prefix record gets
//!   `replay_point_id` and `replay_fidelity`, or `replay_capture_error`;
//! - a batch = every item an isolated child of the point, when the adapter
//!   forks children ([`GroupLane::run_children`]);
//! - execute = the suffix from the point when it is usable
//!   ([`GroupLane::run_suffix`]), else the inner execute;
//! - release = the point's release ([`GroupLane::release`]), then the
//!   inner release.
//!
//! The reference leaves this composition to its caller: its episode
//! runtime (`episode_runtime.py`) knows nothing of replay, and
//! `replay_runtime.py`'s `ReplayPointRegistry` (`capture_at_head`,
//! `run_from`, `release`) and `child_replay_runtime.run_child_group_from`
//! are called around it. Without replay settings, or for an adapter that
//! does not offer the `replay` protocol, every call passes straight
//! through.

use std::cell::RefCell;

use super::group::{GroupInstance, GroupLane, GroupPoint, GroupSettings, SettledCapture};
use crate::episode::adapter::{
    AdapterError, CallContext, EpisodeAdapter, Item, Prepared, Protocols, Record,
};
use crate::trace::TraceLog;

/// An episode adapter with a replay point per prepared group (see the
/// module documentation). `A` is the adapter that runs the calls.
pub struct Replaying<A: GroupInstance> {
    inner: A,
    lane: Option<GroupLane<A::Binding>>,
}

/// The handle of a group prepared through [`Replaying`]: the inner
/// adapter's handle and the group's replay point, if one was captured.
pub struct ReplayGroup<H, S> {
    inner: H,
    point: RefCell<Option<GroupPoint<S>>>,
}

impl<H, S> ReplayGroup<H, S> {
    /// The inner adapter's handle of the group.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The id of the group's replay point, when one was captured and is
    /// not yet released.
    pub fn point_id(&self) -> Option<String> {
        self.point.borrow().as_ref().map(|point| point.id.clone())
    }
}

impl<A: GroupInstance + EpisodeAdapter> Replaying<A> {
    /// `inner` with a replay point per group under `settings`, when it
    /// offers the `replay` protocol; `None`, or an adapter without it,
    /// passes every call through.
    pub fn new(inner: A, settings: Option<GroupSettings>) -> Self {
        let lane = settings
            .filter(|_| inner.protocols().replay)
            .map(GroupLane::new);
        Self { inner, lane }
    }

    /// Whether groups get replay points.
    pub fn replays(&self) -> bool {
        self.lane.is_some()
    }

    /// The adapter that runs the calls.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// The lane's replay state: its registry and settings.
    pub fn lane(&self) -> Option<&GroupLane<A::Binding>> {
        self.lane.as_ref()
    }
}

/// Capture the point of a group `inner` just prepared, at the head of the
/// group's trace, and settle it: the fields for the prefix record and the
/// group's point. `None` for a call outside a group (no
/// `execution_group_id`) or when no trace can be opened.
fn capture_point<A: GroupInstance>(
    lane: &mut GroupLane<A::Binding>,
    inner: &mut A,
    seed: &Item,
    items: &[Item],
    ctx: &CallContext,
) -> Option<SettledCapture<A::Snapshot>> {
    let group_id = ctx.execution_group_id.as_deref()?;
    let mut trace = inner
        .take_group_trace(ctx)
        .or_else(|| TraceLog::new(group_id, "main").ok())?;
    let before = trace.next_sequence();
    let capture = lane.capture(inner, &mut trace, ctx, group_id);
    inner.keep_group_trace(ctx, trace, before, seed.item_id_str());
    Some(lane.settle_capture(inner, capture, ctx, seed, items))
}

impl<A: GroupInstance + EpisodeAdapter> EpisodeAdapter for Replaying<A> {
    type Handle = ReplayGroup<A::Handle, A::Snapshot>;

    fn protocols(&self) -> Protocols {
        self.inner.protocols()
    }

    fn execute(&mut self, item: &Item, ctx: &CallContext) -> Result<Record, AdapterError> {
        self.inner.execute(item, ctx)
    }

    /// The inner prepare; then, with replay on, the group's point is
    /// captured and settled even when the prefix record is malformed (the
    /// runtime releases the group, and the point with it).
    fn prepare_episode_group(
        &mut self,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Result<Option<Prepared<Self::Handle>>, AdapterError> {
        let Some(prepared) = self.inner.prepare_episode_group(seed, items, ctx)? else {
            return Ok(None);
        };
        let Prepared {
            handle,
            mut prefix_record,
            checkpoint_ref,
        } = prepared;
        let mut point = None;
        if let Some(lane) = self.lane.as_mut()
            && let Some((fields, captured)) = capture_point(lane, &mut self.inner, seed, items, ctx)
        {
            if let Ok(record) = prefix_record.as_mut() {
                record.extend(fields);
            }
            point = captured;
        }
        Ok(Some(Prepared {
            handle: ReplayGroup {
                inner: handle,
                point: RefCell::new(point),
            },
            prefix_record,
            checkpoint_ref,
        }))
    }

    /// From the group's point when it is usable, else the inner execute;
    /// a group whose children run serially counts the outcome.
    fn execute_episode(
        &mut self,
        handle: &Self::Handle,
        item: &Item,
        ctx: &CallContext,
    ) -> Result<Record, AdapterError> {
        let from_point = match (self.lane.as_mut(), handle.point.borrow().as_ref()) {
            (Some(lane), Some(point)) => lane.run_suffix(&mut self.inner, &point.id, item, ctx),
            _ => None,
        };
        let result =
            from_point.unwrap_or_else(|| self.inner.execute_episode(&handle.inner, item, ctx));
        if let Some(point) = handle.point.borrow_mut().as_mut() {
            point.observe_suffix(result.is_ok());
        }
        result
    }

    /// Every item an isolated child of the group's point, when the point
    /// is usable and the adapter forks children from it (a deferred
    /// export or snapshot is settled first). `None` lets the runtime run
    /// the items one by one; a group without a point is the inner
    /// adapter's batch.
    fn execute_episode_batch(
        &mut self,
        handle: &Self::Handle,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Vec<(Result<Record, AdapterError>, f64)>> {
        let mut slot = handle.point.borrow_mut();
        let (Some(lane), Some(point)) = (self.lane.as_mut(), slot.as_mut()) else {
            return self.inner.execute_episode_batch(&handle.inner, items, ctx);
        };
        // A deferred export or snapshot is taken only of a point its
        // children can still fork from (`run_children` checks the rest).
        if point.pending.is_some() && !lane.usable(&self.inner, &point.id) {
            return None;
        }
        if let Some(pending) = point.pending.take() {
            self.inner.settle_deferred_point(lane, point, pending);
        }
        let inner = &self.inner;
        lane.run_children(inner, point, items, |registry, chunk| {
            inner.run_child_chunk(registry, chunk, ctx)
        })
    }

    /// The point's release, then the inner release. When releasing the
    /// point took the adapter's instance down, that failure is the
    /// group's (the group died with it).
    fn release_episode_group(
        &mut self,
        handle: Self::Handle,
        ctx: &CallContext,
    ) -> Result<(), AdapterError> {
        let ReplayGroup { inner, point } = handle;
        let point_failure = match (self.lane.as_mut(), point.into_inner()) {
            (Some(lane), Some(point)) => lane.release(&mut self.inner, point),
            _ => None,
        };
        let released = self.inner.release_episode_group(inner, ctx);
        match point_failure {
            Some(failure) => Err(failure),
            None => released,
        }
    }
}

#[cfg(test)]
#[path = "replaying_tests.rs"]
mod tests;
