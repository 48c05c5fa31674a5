//! The JSON boundary: the generated `Guest` traits implemented for
//! [`Adapter<A>`] by delegating to the protocol traits.
//!
//! Each `Guest` function is a thin shell: it converts the WIT values, calls
//! a resource-free helper (`prepare_group`, `capture_point`, ...) and wraps
//! the result into resources. The helpers hold the logic, so the unit tests
//! run them natively, where resources cannot be created.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::rc::{Rc, Weak};

use crate::bindings::child_risk::exports::sandloop::adapter::child_risk as wit_risk;
use crate::bindings::counterfactual::exports::sandloop::adapter::counterfactual as wit_counterfactual;
use crate::bindings::episode::exports::sandloop::adapter::episode as wit_episode;
use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups as wit_groups;
use crate::bindings::replay::exports::sandloop::adapter::replay as wit_replay;
use crate::bindings::replay_children::exports::sandloop::adapter::replay_children as wit_children;
use crate::bindings::seeds::exports::sandloop::adapter::seeds as wit_seeds;
use crate::bindings::variants::exports::sandloop::adapter::variants as wit_variants;
use crate::protocol::{
    ChildRisk, Counterfactual, Episode, EpisodeGroups, Replay, ReplayChildren, Seeds, Variants,
};
use crate::types::{
    CaptureRequest, ChildConcurrency, ChildLease, Context, Disposition, EquivalenceCheck,
    EquivalenceReport, Error, Fidelity, ForkRequest, Item, Prepared, Record, RestoreReceipt,
    RestoreRequest, RiskAssessment, StateLease, VariantSpec, parse_change_set, parse_intent,
};
use crate::wit::types as wit_types;
use sandloop_contract::{CounterfactualRequest, ValidationOutcome};

/// The exported type behind [`crate::export_adapter!`]: implements every
/// generated `Guest` trait whose protocol trait `A` implements.
pub struct Adapter<A>(PhantomData<A>);

thread_local! {
    static INSTANCE: Cell<Option<&'static dyn Any>> = const { Cell::new(None) };
}

impl<A: Default + 'static> Adapter<A> {
    /// The component instance's adapter value, built with `A::default()` on
    /// first use.
    pub fn instance() -> &'static A {
        let existing = INSTANCE.with(Cell::get);
        let any = match existing {
            Some(any) => any,
            None => {
                let leaked: &'static A = Box::leak(Box::new(A::default()));
                INSTANCE.with(|cell| cell.set(Some(leaked)));
                leaked
            }
        };
        any.downcast_ref::<A>()
            .expect("one component exports exactly one adapter type")
    }
}

/// Per-instance indexes of adapter values that live inside resources, by an
/// id the host passes in calls that get no handle:
///
/// - [`GROUPS`](registry::GROUPS): the groups prepared in this instance, by
///   the `execution_group_id` their prepare saw, so `capture-replay-state`
///   (which gets only a request) can find one;
/// - [`CHILDREN`](registry::CHILDREN): the replay children forked in this
///   instance, by their fork request's `child-id`, so the `child-risk`
///   calls (which get only that id) can find one;
/// - [`BINDINGS`](registry::BINDINGS): the replay bindings of this instance,
///   by the token `binding-token` handed out, so a child instance made from
///   a snapshot of this one can `resume-binding` (resource handles do not
///   survive a snapshot; these statics do).
///
/// Entries are weak: the resource owns the value, and dropping its box
/// ([`GroupBox`], [`ChildBox`]; at release, or when the host drops the
/// handle) removes the entry.
mod registry {
    use super::*;
    use std::thread::LocalKey;

    pub(super) type Entries = RefCell<BTreeMap<String, Weak<dyn Any>>>;

    thread_local! {
        pub(super) static GROUPS: Entries = const { RefCell::new(BTreeMap::new()) };
        pub(super) static CHILDREN: Entries = const { RefCell::new(BTreeMap::new()) };
        pub(super) static BINDINGS: Entries = const { RefCell::new(BTreeMap::new()) };
        pub(super) static NEXT_TOKEN: Cell<u64> = const { Cell::new(1) };
    }

    /// Register `value` under `id`, replacing an older value of that id.
    pub(super) fn insert<T: 'static>(
        registry: &'static LocalKey<Entries>,
        id: &str,
        value: &Rc<T>,
    ) {
        let weak: Weak<dyn Any> = Rc::downgrade(value) as Weak<dyn Any>;
        registry.with(|entries| entries.borrow_mut().insert(id.to_owned(), weak));
    }

    /// Forget `id` if it still names `value` (a later registration under
    /// the same id keeps its own entry).
    pub(super) fn remove<T: 'static>(
        registry: &'static LocalKey<Entries>,
        id: &str,
        value: &Rc<T>,
    ) {
        registry.with(|entries| {
            let mut entries = entries.borrow_mut();
            let same = entries
                .get(id)
                .is_some_and(|weak| std::ptr::addr_eq(weak.as_ptr(), Rc::as_ptr(value)));
            if same {
                entries.remove(id);
            }
        });
    }

    /// The live value of type `T` registered under `id`.
    pub(super) fn find<T: 'static>(
        registry: &'static LocalKey<Entries>,
        id: &str,
    ) -> Option<Rc<T>> {
        let found = registry.with(|entries| entries.borrow().get(id).and_then(Weak::upgrade));
        found.and_then(|value| value.downcast::<T>().ok())
    }

    /// The live group registered under `id`, or an `unknown-group` error
    /// naming `id`.
    pub(super) fn group<G: 'static>(id: &str) -> Result<Rc<G>, Error> {
        find(&GROUPS, id).ok_or_else(|| {
            Error::new(
                "unknown-group",
                format!(
                    "no episode group {id:?} is prepared in this instance; \
                     capture-replay-state needs the execution-group-id of an \
                     unreleased prepare-episode-group call"
                ),
            )
        })
    }

    /// The live child forked under `id`, or an `unknown-child` error naming
    /// `id`.
    pub(super) fn child<C: 'static>(id: &str) -> Result<Rc<C>, Error> {
        find(&CHILDREN, id).ok_or_else(|| {
            Error::new(
                Error::UNKNOWN_CHILD,
                format!(
                    "no replay child {id:?} was forked in this instance; \
                     child-risk calls need the child-id of the instance's \
                     fork-replay-child call"
                ),
            )
        })
    }

    /// Number of registered values (tests).
    #[cfg(test)]
    pub(super) fn len(registry: &'static LocalKey<Entries>) -> usize {
        registry.with(|entries| entries.borrow().len())
    }
}

/// A prepared group's state inside the `episode-group` resource.
///
/// The group sits behind an `Rc` shared with a weak per-instance index by
/// `execution_group_id`, through which `capture-replay-state` finds it;
/// dropping the box removes its index entry.
pub struct GroupBox<G: 'static> {
    group: Rc<G>,
    registered_as: Option<String>,
}

impl<G: 'static> GroupBox<G> {
    /// Box `group`; with an `execution_group_id`, register it so a capture
    /// request can name it (without one the group is not capturable).
    pub fn new(group: G, execution_group_id: Option<&str>) -> Self {
        let group = Rc::new(group);
        if let Some(id) = execution_group_id {
            registry::insert(&registry::GROUPS, id, &group);
        }
        GroupBox {
            group,
            registered_as: execution_group_id.map(str::to_owned),
        }
    }

    /// The adapter's group value.
    pub fn group(&self) -> &G {
        &self.group
    }

    /// Unregister the group and return it by value (for
    /// [`EpisodeGroups::release`]). Fails with `group-in-use` only if
    /// something still shares it, which the sdk itself never does.
    pub fn into_group(self) -> Result<G, Error> {
        let group = Rc::clone(&self.group);
        drop(self); // unregisters and drops the box's own reference
        Rc::try_unwrap(group)
            .map_err(|_| Error::new("group-in-use", "the episode group is still shared"))
    }
}

impl<G: 'static> Drop for GroupBox<G> {
    fn drop(&mut self) {
        if let Some(id) = self.registered_as.take() {
            registry::remove(&registry::GROUPS, &id, &self.group);
        }
    }
}

impl<G: 'static> wit_groups::GuestEpisodeGroup for GroupBox<G> {}

/// A replay point's adapter state ([`Replay::Binding`]) inside the
/// `replay-binding` resource; dropped, running `B`'s `Drop`, when the host
/// drops the handle (and no snapshot child still resumes it).
///
/// The binding sits behind an `Rc` indexed by a per-instance token, so that
/// `binding-token` / `resume-binding` give snapshot forks with no adapter
/// code: a child instance made from a snapshot finds the binding by its
/// token in the snapshotted statics.
pub struct BindingBox<B: 'static> {
    binding: Rc<B>,
    token: u64,
}

impl<B: 'static> BindingBox<B> {
    /// Box `binding` under a fresh token.
    pub fn new(binding: B) -> Self {
        let token = registry::NEXT_TOKEN.with(|next| {
            let token = next.get();
            next.set(token + 1);
            token
        });
        let binding = Rc::new(binding);
        registry::insert(&registry::BINDINGS, &token.to_string(), &binding);
        BindingBox { binding, token }
    }

    /// A second box on the binding `token` names (WIT `resume-binding`),
    /// or an `unknown-binding` error.
    pub fn resume(token: u64) -> Result<Self, Error> {
        let binding =
            registry::find::<B>(&registry::BINDINGS, &token.to_string()).ok_or_else(|| {
                Error::new(
                    "unknown-binding",
                    format!(
                        "no replay binding has token {token} in this instance; resume-binding \
                     needs a token binding-token gave before the snapshot"
                    ),
                )
            })?;
        Ok(BindingBox { binding, token })
    }

    /// The adapter's binding value.
    pub fn binding(&self) -> &B {
        &self.binding
    }

    /// The token naming this binding (WIT `binding-token`).
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl<B: 'static> Drop for BindingBox<B> {
    /// The last box on a binding unregisters it; a resumed box sharing it
    /// leaves the entry to the other.
    fn drop(&mut self) {
        if Rc::strong_count(&self.binding) == 1 {
            registry::remove(&registry::BINDINGS, &self.token.to_string(), &self.binding);
        }
    }
}

impl<B: 'static> wit_replay::GuestReplayBinding for BindingBox<B> {}

impl<B: 'static> std::fmt::Debug for BindingBox<B> {
    /// Opaque, like the handle the host holds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindingBox(..)")
    }
}

/// A replay child's adapter state ([`ReplayChildren::Child`]) inside the
/// `replay-child` resource.
///
/// The child sits behind an `Rc` shared with a weak per-instance index by
/// its fork request's `child-id`, through which the `child-risk` calls find
/// it; dropping the box (when the host drops the handle or the instance)
/// removes its index entry and runs `C`'s `Drop`.
pub struct ChildBox<C: 'static> {
    child: Rc<C>,
    child_id: String,
}

impl<C: 'static> ChildBox<C> {
    /// Box `child` and register it under `child_id` (replacing an older
    /// child of that id in this instance).
    pub fn new(child: C, child_id: &str) -> Self {
        let child = Rc::new(child);
        registry::insert(&registry::CHILDREN, child_id, &child);
        ChildBox {
            child,
            child_id: child_id.to_owned(),
        }
    }

    /// The adapter's child value.
    pub fn child(&self) -> &C {
        &self.child
    }

    /// The `child-id` the child was forked with.
    pub fn child_id(&self) -> &str {
        &self.child_id
    }
}

impl<C: 'static> Drop for ChildBox<C> {
    fn drop(&mut self) {
        registry::remove(&registry::CHILDREN, &self.child_id, &self.child);
    }
}

impl<C: 'static> wit_children::GuestReplayChild for ChildBox<C> {}

impl<C: 'static> std::fmt::Debug for ChildBox<C> {
    /// Opaque; shows the child id.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildBox")
            .field("child_id", &self.child_id)
            .finish_non_exhaustive()
    }
}

impl<G: 'static> std::fmt::Debug for GroupBox<G> {
    /// Opaque; shows the registered execution group id.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBox")
            .field("registered_as", &self.registered_as)
            .finish_non_exhaustive()
    }
}

impl From<wit_types::Context> for Context {
    fn from(ctx: wit_types::Context) -> Self {
        Context {
            arm: ctx.arm,
            epoch: ctx.epoch,
            branch_id: ctx.branch_id,
            execution_group_id: ctx.execution_group_id,
        }
    }
}

impl From<Error> for wit_types::AdapterError {
    fn from(err: Error) -> Self {
        wit_types::AdapterError {
            kind: err.kind,
            message: err.message,
            retryable_infra_error: err.retryable,
        }
    }
}

impl From<wit_types::AdapterError> for Error {
    fn from(err: wit_types::AdapterError) -> Self {
        Error {
            kind: err.kind,
            message: err.message,
            retryable: err.retryable_infra_error,
        }
    }
}

type WitResult<T> = Result<T, wit_types::AdapterError>;

impl<A: Episode + Default + 'static> wit_episode::Guest for Adapter<A> {
    fn execute(item: String, ctx: wit_types::Context) -> WitResult<String> {
        let item = Item::from_json(&item)?;
        let record = Self::instance().execute(item, &ctx.into())?;
        Ok(record.to_json())
    }
}

impl<A: Seeds + Default + 'static> wit_seeds::Guest for Adapter<A> {
    fn list_seed_items(arm: String, epoch: u32) -> WitResult<Vec<String>> {
        let items = Self::instance().list_seed_items(&arm, epoch)?;
        Ok(items.iter().map(Item::to_json).collect())
    }
}

impl<A: Variants + Default + 'static> wit_variants::Guest for Adapter<A> {
    fn compile_variant(spec: String, seed: String) -> WitResult<String> {
        let spec = VariantSpec::from_json(&spec)?;
        let seed = Item::from_json(&seed)?;
        Ok(Self::instance().compile_variant(spec, seed)?.to_json())
    }
}

impl<A: EpisodeGroups + Default + 'static> Adapter<A> {
    /// `prepare-episode-group` without the resource: parse, prepare, and box
    /// the group (registering it under `ctx.execution_group_id`).
    fn prepare_group(
        seed: &str,
        items: &[String],
        ctx: wit_types::Context,
    ) -> Result<Option<Prepared<GroupBox<A::Group>>>, Error> {
        let seed = Item::from_json(seed)?;
        let items = items
            .iter()
            .map(|item| Item::from_json(item))
            .collect::<Result<Vec<_>, _>>()?;
        let ctx = Context::from(ctx);
        let prepared = Self::instance().prepare(seed, items, &ctx)?;
        Ok(prepared.map(|prepared| Prepared {
            group: GroupBox::new(prepared.group, ctx.execution_group_id.as_deref()),
            prefix_record: prepared.prefix_record,
            checkpoint_ref: prepared.checkpoint_ref,
        }))
    }

    /// `release-episode-group` without the resource: unregister, release.
    fn release_group(group: GroupBox<A::Group>, ctx: wit_types::Context) -> Result<(), Error> {
        let group = group.into_group()?;
        Self::instance().release(group, &ctx.into())
    }
}

impl<A: EpisodeGroups + Default + 'static> wit_groups::Guest for Adapter<A> {
    type EpisodeGroup = GroupBox<A::Group>;

    fn prepare_episode_group(
        seed: String,
        items: Vec<String>,
        ctx: wit_types::Context,
    ) -> WitResult<Option<wit_groups::Prepared>> {
        let prepared = Self::prepare_group(&seed, &items, ctx)?;
        Ok(prepared.map(|prepared| wit_groups::Prepared {
            group: wit_groups::EpisodeGroup::new(prepared.group),
            prefix_record: prepared.prefix_record.to_json(),
            checkpoint_ref: prepared.checkpoint_ref,
        }))
    }

    fn execute_episode(
        group: wit_groups::EpisodeGroupBorrow<'_>,
        item: String,
        ctx: wit_types::Context,
    ) -> WitResult<String> {
        let group: &GroupBox<A::Group> = group.get();
        let item = Item::from_json(&item)?;
        let record = Self::instance().execute_episode(group.group(), item, &ctx.into())?;
        Ok(record.to_json())
    }

    fn release_episode_group(
        group: wit_groups::EpisodeGroup,
        ctx: wit_types::Context,
    ) -> WitResult<()> {
        Ok(Self::release_group(group.into_inner(), ctx)?)
    }
}

impl From<wit_types::Fidelity> for Fidelity {
    fn from(fidelity: wit_types::Fidelity) -> Self {
        match fidelity {
            wit_types::Fidelity::Exact => Fidelity::Exact,
            wit_types::Fidelity::SemanticEquivalent => Fidelity::SemanticEquivalent,
            wit_types::Fidelity::BestEffort => Fidelity::BestEffort,
            wit_types::Fidelity::NonReplayable => Fidelity::NonReplayable,
        }
    }
}

impl From<Fidelity> for wit_types::Fidelity {
    fn from(fidelity: Fidelity) -> Self {
        match fidelity {
            Fidelity::Exact => wit_types::Fidelity::Exact,
            Fidelity::SemanticEquivalent => wit_types::Fidelity::SemanticEquivalent,
            Fidelity::BestEffort => wit_types::Fidelity::BestEffort,
            Fidelity::NonReplayable => wit_types::Fidelity::NonReplayable,
        }
    }
}

impl From<wit_replay::CaptureRequest> for CaptureRequest {
    fn from(request: wit_replay::CaptureRequest) -> Self {
        CaptureRequest {
            replay_point_id: request.replay_point_id,
            trace_id: request.trace_id,
            branch_id: request.branch_id,
            after_event_id: request.after_event_id,
            next_sequence: request.next_sequence,
            execution_group_id: request.execution_group_id,
        }
    }
}

impl From<CaptureRequest> for wit_replay::CaptureRequest {
    fn from(request: CaptureRequest) -> Self {
        wit_replay::CaptureRequest {
            replay_point_id: request.replay_point_id,
            trace_id: request.trace_id,
            branch_id: request.branch_id,
            after_event_id: request.after_event_id,
            next_sequence: request.next_sequence,
            execution_group_id: request.execution_group_id,
        }
    }
}

impl From<wit_replay::RestoreRequest> for RestoreRequest {
    fn from(request: wit_replay::RestoreRequest) -> Self {
        RestoreRequest {
            replay_point_id: request.replay_point_id,
            target_branch_id: request.target_branch_id,
            minimum_fidelity: request.minimum_fidelity.into(),
        }
    }
}

impl From<RestoreRequest> for wit_replay::RestoreRequest {
    fn from(request: RestoreRequest) -> Self {
        wit_replay::RestoreRequest {
            replay_point_id: request.replay_point_id,
            target_branch_id: request.target_branch_id,
            minimum_fidelity: request.minimum_fidelity.into(),
        }
    }
}

impl From<wit_types::RestoreReceipt> for RestoreReceipt {
    fn from(receipt: wit_types::RestoreReceipt) -> Self {
        RestoreReceipt {
            achieved_fidelity: receipt.achieved_fidelity.into(),
            restored_projection_digest: receipt.restored_projection_digest,
            prefix_reused: receipt.prefix_reused,
        }
    }
}

impl From<RestoreReceipt> for wit_types::RestoreReceipt {
    fn from(receipt: RestoreReceipt) -> Self {
        wit_types::RestoreReceipt {
            achieved_fidelity: receipt.achieved_fidelity.into(),
            restored_projection_digest: receipt.restored_projection_digest,
            prefix_reused: receipt.prefix_reused,
        }
    }
}

impl From<wit_types::EquivalenceCheck> for EquivalenceCheck {
    fn from(check: wit_types::EquivalenceCheck) -> Self {
        EquivalenceCheck {
            check_id: check.check_id,
            passed: check.passed,
            public_summary: check.public_summary,
        }
    }
}

impl From<EquivalenceCheck> for wit_types::EquivalenceCheck {
    fn from(check: EquivalenceCheck) -> Self {
        wit_types::EquivalenceCheck {
            check_id: check.check_id,
            passed: check.passed,
            public_summary: check.public_summary,
        }
    }
}

impl From<wit_types::EquivalenceReport> for EquivalenceReport {
    fn from(report: wit_types::EquivalenceReport) -> Self {
        EquivalenceReport {
            achieved_fidelity: report.achieved_fidelity.into(),
            equivalent: report.equivalent,
            expected_digest: report.expected_digest,
            observed_digest: report.observed_digest,
            checks: report.checks.into_iter().map(Into::into).collect(),
            sanitized_reason: report.sanitized_reason,
        }
    }
}

impl From<EquivalenceReport> for wit_types::EquivalenceReport {
    fn from(report: EquivalenceReport) -> Self {
        wit_types::EquivalenceReport {
            achieved_fidelity: report.achieved_fidelity.into(),
            equivalent: report.equivalent,
            expected_digest: report.expected_digest,
            observed_digest: report.observed_digest,
            checks: report.checks.into_iter().map(Into::into).collect(),
            sanitized_reason: report.sanitized_reason,
        }
    }
}

impl<B: 'static> From<StateLease<BindingBox<B>>> for wit_replay::StateLease {
    /// Wraps the binding, if any, into a `replay-binding` resource (inside a
    /// component only: natively, creating a resource panics).
    fn from(lease: StateLease<BindingBox<B>>) -> Self {
        wit_replay::StateLease {
            binding: lease.binding.map(wit_replay::ReplayBinding::new),
            fidelity: lease.fidelity.into(),
            projection_digest: lease.projection_digest,
        }
    }
}

impl<A: Replay + Default + 'static> Adapter<A> {
    /// `capture-replay-state` without the resource: find the group prepared
    /// under `request.execution_group_id` and capture it.
    fn capture_point(
        request: &CaptureRequest,
    ) -> Result<StateLease<BindingBox<A::Binding>>, Error> {
        let group = registry::group::<A::Group>(&request.execution_group_id)?;
        let lease = Self::instance().capture(&group, request)?;
        Ok(lease.map_binding(BindingBox::new))
    }

    /// `import-replay-state` without the resource.
    fn import_point(
        state: Vec<u8>,
        request: &CaptureRequest,
    ) -> Result<StateLease<BindingBox<A::Binding>>, Error> {
        let lease = Self::instance().import_state(state, request)?;
        Ok(lease.map_binding(BindingBox::new))
    }
}

impl<A: Replay + Default + 'static> wit_replay::Guest for Adapter<A> {
    type ReplayBinding = BindingBox<A::Binding>;

    fn capture_replay_state(
        request: wit_replay::CaptureRequest,
    ) -> WitResult<wit_replay::StateLease> {
        Ok(Self::capture_point(&request.into())?.into())
    }

    fn restore_replay_state(
        binding: wit_replay::ReplayBindingBorrow<'_>,
        request: wit_replay::RestoreRequest,
    ) -> WitResult<wit_types::RestoreReceipt> {
        let binding: &BindingBox<A::Binding> = binding.get();
        let receipt = Self::instance().restore(binding.binding(), &request.into())?;
        Ok(receipt.into())
    }

    fn validate_replay_equivalence(
        binding: wit_replay::ReplayBindingBorrow<'_>,
        receipt: wit_types::RestoreReceipt,
    ) -> WitResult<wit_types::EquivalenceReport> {
        let binding: &BindingBox<A::Binding> = binding.get();
        let report = Self::instance().validate(binding.binding(), &receipt.into())?;
        Ok(report.into())
    }

    fn run_replay_suffix(
        binding: wit_replay::ReplayBindingBorrow<'_>,
        item: String,
        ctx: wit_types::Context,
    ) -> WitResult<String> {
        let binding: &BindingBox<A::Binding> = binding.get();
        let item = Item::from_json(&item)?;
        let record = Self::instance().run_suffix(binding.binding(), item, &ctx.into())?;
        Ok(record.to_json())
    }

    fn finalize_replay_suffix(
        binding: wit_replay::ReplayBindingBorrow<'_>,
        request: wit_replay::RestoreRequest,
        suffix_succeeded: bool,
    ) -> WitResult<()> {
        let binding: &BindingBox<A::Binding> = binding.get();
        Self::instance().finalize_suffix(binding.binding(), &request.into(), suffix_succeeded)?;
        Ok(())
    }

    fn release_replay_state(binding: wit_replay::ReplayBindingBorrow<'_>) -> WitResult<()> {
        let binding: &BindingBox<A::Binding> = binding.get();
        Self::instance().release_state(binding.binding())?;
        Ok(())
    }

    fn export_replay_state(
        binding: wit_replay::ReplayBindingBorrow<'_>,
    ) -> WitResult<Option<Vec<u8>>> {
        let binding: &BindingBox<A::Binding> = binding.get();
        Ok(Self::instance().export_state(binding.binding())?)
    }

    fn import_replay_state(
        state: Vec<u8>,
        request: wit_replay::CaptureRequest,
    ) -> WitResult<wit_replay::StateLease> {
        Ok(Self::import_point(state, &request.into())?.into())
    }

    fn binding_token(binding: wit_replay::ReplayBindingBorrow<'_>) -> WitResult<Option<u64>> {
        let binding: &BindingBox<A::Binding> = binding.get();
        Ok(Some(binding.token()))
    }

    fn resume_binding(token: u64) -> WitResult<wit_replay::ReplayBinding> {
        let resumed = BindingBox::<A::Binding>::resume(token)?;
        Ok(wit_replay::ReplayBinding::new(resumed))
    }
}

impl From<wit_children::ForkRequest> for ForkRequest {
    fn from(request: wit_children::ForkRequest) -> Self {
        ForkRequest {
            replay_point_id: request.replay_point_id,
            child_id: request.child_id,
            target_branch_id: request.target_branch_id,
            minimum_fidelity: request.minimum_fidelity.into(),
        }
    }
}

impl From<ForkRequest> for wit_children::ForkRequest {
    fn from(request: ForkRequest) -> Self {
        wit_children::ForkRequest {
            replay_point_id: request.replay_point_id,
            child_id: request.child_id,
            target_branch_id: request.target_branch_id,
            minimum_fidelity: request.minimum_fidelity.into(),
        }
    }
}

impl From<wit_children::ChildConcurrency> for ChildConcurrency {
    fn from(concurrency: wit_children::ChildConcurrency) -> Self {
        match concurrency {
            wit_children::ChildConcurrency::SerialOnly => ChildConcurrency::SerialOnly,
            wit_children::ChildConcurrency::ThreadSafe => ChildConcurrency::ThreadSafe,
            wit_children::ChildConcurrency::ProcessIsolated => ChildConcurrency::ProcessIsolated,
        }
    }
}

impl From<ChildConcurrency> for wit_children::ChildConcurrency {
    fn from(concurrency: ChildConcurrency) -> Self {
        match concurrency {
            ChildConcurrency::SerialOnly => wit_children::ChildConcurrency::SerialOnly,
            ChildConcurrency::ThreadSafe => wit_children::ChildConcurrency::ThreadSafe,
            ChildConcurrency::ProcessIsolated => wit_children::ChildConcurrency::ProcessIsolated,
        }
    }
}

impl<C: 'static> From<ChildLease<ChildBox<C>>> for wit_children::ChildLease {
    /// Wraps the child into a `replay-child` resource (inside a component
    /// only: natively, creating a resource panics).
    fn from(lease: ChildLease<ChildBox<C>>) -> Self {
        wit_children::ChildLease {
            child: wit_children::ReplayChild::new(lease.child),
            receipt: lease.receipt.into(),
            concurrency: lease.concurrency.into(),
        }
    }
}

impl From<wit_risk::Disposition> for Disposition {
    fn from(disposition: wit_risk::Disposition) -> Self {
        match disposition {
            wit_risk::Disposition::Allow => Disposition::Allow,
            wit_risk::Disposition::Deny => Disposition::Deny,
        }
    }
}

impl From<Disposition> for wit_risk::Disposition {
    fn from(disposition: Disposition) -> Self {
        match disposition {
            Disposition::Allow => wit_risk::Disposition::Allow,
            Disposition::Deny => wit_risk::Disposition::Deny,
        }
    }
}

impl From<wit_risk::RiskAssessment> for RiskAssessment {
    fn from(assessment: wit_risk::RiskAssessment) -> Self {
        RiskAssessment {
            disposition: assessment.disposition.into(),
            policy_id: assessment.policy_id,
            sanitized_reason: assessment.sanitized_reason,
        }
    }
}

impl From<RiskAssessment> for wit_risk::RiskAssessment {
    fn from(assessment: RiskAssessment) -> Self {
        wit_risk::RiskAssessment {
            disposition: assessment.disposition.into(),
            policy_id: assessment.policy_id,
            sanitized_reason: assessment.sanitized_reason,
        }
    }
}

impl<A: ReplayChildren + Default + 'static> Adapter<A> {
    /// `fork-replay-child` without the resource: fork, and box the child
    /// (registering it under `request.child_id`).
    fn fork_child_box(
        state: Vec<u8>,
        request: &ForkRequest,
    ) -> Result<ChildLease<ChildBox<A::Child>>, Error> {
        let lease = Self::instance().fork_child(state, request)?;
        Ok(lease.map_child(|child| ChildBox::new(child, &request.child_id)))
    }

    /// `run-replay-child` without the resource: parse the task, run it.
    fn run_child_box(
        child: &ChildBox<A::Child>,
        task: &str,
        ctx: wit_types::Context,
    ) -> Result<Record, Error> {
        let task = Item::from_json(task)?;
        Self::instance().run_child(child.child(), task, &ctx.into())
    }
}

impl<A: ReplayChildren + Default + 'static> wit_children::Guest for Adapter<A> {
    type ReplayChild = ChildBox<A::Child>;

    fn fork_replay_child(
        state: Vec<u8>,
        request: wit_children::ForkRequest,
    ) -> WitResult<wit_children::ChildLease> {
        Ok(Self::fork_child_box(state, &request.into())?.into())
    }

    fn validate_replay_child_equivalence(
        child: wit_children::ReplayChildBorrow<'_>,
        receipt: wit_types::RestoreReceipt,
    ) -> WitResult<wit_types::EquivalenceReport> {
        let child: &ChildBox<A::Child> = child.get();
        let report = Self::instance().validate_child(child.child(), &receipt.into())?;
        Ok(report.into())
    }

    fn run_replay_child(
        child: wit_children::ReplayChildBorrow<'_>,
        task: String,
        ctx: wit_types::Context,
    ) -> WitResult<String> {
        let child: &ChildBox<A::Child> = child.get();
        Ok(Self::run_child_box(child, &task, ctx)?.to_json())
    }

    fn release_replay_child(child: wit_children::ReplayChildBorrow<'_>) -> WitResult<()> {
        let child: &ChildBox<A::Child> = child.get();
        Self::instance().release_child(child.child())?;
        Ok(())
    }
}

impl<A: ChildRisk + Default + 'static> Adapter<A> {
    /// `assess-replay-child-intent` on plain strings: find the child by
    /// id (`unknown-child`), parse the intent (`invalid-intent`), assess.
    fn assess_intent_of(child_id: &str, intent: &str) -> Result<RiskAssessment, Error> {
        let child = registry::child::<A::Child>(child_id)?;
        let intent = parse_intent(intent)?;
        Self::instance().assess_intent(&child, &intent)
    }

    /// `assess-replay-child-outcome` on plain strings; the outcome must be
    /// a JSON object (`invalid-record`).
    fn assess_outcome_of(
        child_id: &str,
        intent: &str,
        outcome: &str,
    ) -> Result<RiskAssessment, Error> {
        let child = registry::child::<A::Child>(child_id)?;
        let intent = parse_intent(intent)?;
        let outcome = Record::from_json(outcome)?;
        Self::instance().assess_outcome(&child, &intent, &outcome)
    }
}

impl<A: ChildRisk + Default + 'static> wit_risk::Guest for Adapter<A> {
    fn assess_replay_child_intent(
        child_id: String,
        intent: String,
    ) -> WitResult<wit_risk::RiskAssessment> {
        Ok(Self::assess_intent_of(&child_id, &intent)?.into())
    }

    fn assess_replay_child_outcome(
        child_id: String,
        intent: String,
        outcome: String,
    ) -> WitResult<wit_risk::RiskAssessment> {
        Ok(Self::assess_outcome_of(&child_id, &intent, &outcome)?.into())
    }
}

impl<A: Counterfactual + Default + 'static> Adapter<A> {
    /// `run-counterfactual` on plain strings: find the child by id
    /// (`unknown-child`), parse the item (`invalid-item`) and the change set
    /// (`invalid-change-set`), run the candidate.
    fn run_counterfactual_of(
        child_id: &str,
        item: &str,
        request: &CounterfactualRequest,
        ctx: &Context,
    ) -> Result<Vec<ValidationOutcome>, Error> {
        let child = registry::child::<A::Child>(child_id)?;
        let item = Item::from_json(item)?;
        let change = parse_change_set(&request.public_change_set)?;
        Self::instance().run_counterfactual(&child, item, request, &change, ctx)
    }
}

impl<A: Counterfactual + Default + 'static> wit_counterfactual::Guest for Adapter<A> {
    fn run_counterfactual(
        child_id: String,
        item: String,
        request: wit_counterfactual::CounterfactualRequest,
        ctx: wit_types::Context,
    ) -> WitResult<Vec<wit_counterfactual::ValidationOutcome>> {
        let request = CounterfactualRequest {
            hypothesis_id: request.hypothesis_id,
            candidate_id: request.candidate_id,
            replay_point_id: request.replay_point_id,
            first_affected_event_id: request.first_affected_event_id,
            first_affected_sequence: request.first_affected_sequence,
            public_change_set: request.public_change_set,
        };
        let outcomes = Self::run_counterfactual_of(&child_id, &item, &request, &ctx.into())?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| wit_counterfactual::ValidationOutcome {
                validation_id: outcome.validation_id,
                passed: outcome.passed,
                public_summary: outcome.public_summary,
            })
            .collect())
    }
}

#[cfg(test)]
#[path = "glue_tests.rs"]
mod tests;
