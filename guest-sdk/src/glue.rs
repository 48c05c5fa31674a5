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
mod tests {
    use super::*;
    use crate::types::Record;

    #[derive(Default)]
    struct Echo {
        calls: Cell<u32>,
    }

    impl Episode for Echo {
        fn execute(&self, item: Item, ctx: &Context) -> Result<Record, Error> {
            self.calls.set(self.calls.get() + 1);
            if item.item_id() == "fail" {
                return Err(Error::infra("flaky", "try again"));
            }
            let mut record = Record::with_keys([item.item_id()]);
            record
                .set("arm", ctx.arm.as_str())
                .set("calls", self.calls.get());
            Ok(record)
        }
    }

    impl Seeds for Echo {
        fn list_seed_items(&self, arm: &str, epoch: u32) -> Result<Vec<Item>, Error> {
            Ok((0..epoch)
                .map(|i| Item::new(format!("{arm}-{i}"), "f", "t"))
                .collect())
        }
    }

    impl Variants for Echo {
        fn compile_variant(&self, spec: VariantSpec, seed: Item) -> Result<Item, Error> {
            Ok(Item::new(
                format!("{}~{}", seed.item_id(), spec.spec_id()),
                seed.family(),
                "v",
            )
            .with("is_variant", true))
        }
    }

    fn ctx() -> wit_types::Context {
        wit_types::Context {
            arm: "main".into(),
            epoch: 1,
            branch_id: "queue_worker_01".into(),
            execution_group_id: None,
        }
    }

    #[test]
    fn execute_parses_delegates_and_serialises() {
        type A = Adapter<Echo>;
        let out = <A as wit_episode::Guest>::execute(r#"{"item_id":"x"}"#.into(), ctx()).unwrap();
        let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
        assert_eq!(
            json(&out),
            serde_json::json!({"observation_keys":["x"],"weighted_flags":{},"accepted":true,"arm":"main","calls":1})
        );
        // one instance per component: state persists across calls
        let out = <A as wit_episode::Guest>::execute(r#"{"item_id":"y"}"#.into(), ctx()).unwrap();
        assert_eq!(json(&out)["calls"], 2, "{out}");

        let err = <A as wit_episode::Guest>::execute("[1,2]".into(), ctx()).unwrap_err();
        assert_eq!(err.kind, "invalid-item");
        assert!(!err.retryable_infra_error);
        let err = <A as wit_episode::Guest>::execute("{".into(), ctx()).unwrap_err();
        assert_eq!(err.kind, "invalid-item");

        let err =
            <A as wit_episode::Guest>::execute(r#"{"item_id":"fail"}"#.into(), ctx()).unwrap_err();
        assert_eq!(err.kind, "flaky");
        assert!(err.retryable_infra_error);
    }

    #[test]
    fn seeds_and_variants() {
        type A = Adapter<Echo>;
        let seeds = <A as wit_seeds::Guest>::list_seed_items("arm".into(), 2).unwrap();
        assert_eq!(seeds.len(), 2);
        let first: serde_json::Value = serde_json::from_str(&seeds[0]).unwrap();
        assert_eq!(first["item_id"], "arm-0");
        let variant = <A as wit_variants::Guest>::compile_variant(
            r#"{"spec_id":"s"}"#.into(),
            r#"{"item_id":"a","family":"f"}"#.into(),
        )
        .unwrap();
        let variant: serde_json::Value = serde_json::from_str(&variant).unwrap();
        assert_eq!(variant["item_id"], "a~s", "{variant}");
        let err = <A as wit_variants::Guest>::compile_variant("1".into(), "{}".into()).unwrap_err();
        assert_eq!(err.kind, "invalid-spec");
    }

    /// A grouped, replayable adapter: the group is the seed id and the item
    /// count; a binding holds the captured seed id and a working copy.
    #[derive(Default)]
    struct Counter;

    struct Tally {
        seed: String,
        items: usize,
    }

    struct Snapshot {
        captured: String,
        working: std::cell::RefCell<Option<String>>,
    }

    fn digest(state: &str) -> String {
        format!("digest:{state}")
    }

    impl EpisodeGroups for Counter {
        type Group = Tally;

        fn prepare(
            &self,
            seed: Item,
            items: Vec<Item>,
            _ctx: &Context,
        ) -> Result<Option<Prepared<Tally>>, Error> {
            if seed.item_id() == "opt-out" {
                return Ok(None);
            }
            let tally = Tally {
                seed: seed.item_id().to_owned(),
                items: items.len(),
            };
            Ok(Some(Prepared::new(tally, Record::with_keys(["prefix"]))))
        }

        fn execute_episode(
            &self,
            group: &Tally,
            item: Item,
            _ctx: &Context,
        ) -> Result<Record, Error> {
            Ok(Record::with_keys([format!(
                "{}:{}",
                group.seed,
                item.item_id()
            )]))
        }
    }

    impl Replay for Counter {
        type Binding = Snapshot;

        fn capture(
            &self,
            group: &Tally,
            request: &CaptureRequest,
        ) -> Result<StateLease<Snapshot>, Error> {
            if request.replay_point_id == "marker" {
                return Ok(StateLease::non_replayable());
            }
            let snapshot = Snapshot {
                captured: format!("{}/{}", group.seed, group.items),
                working: Default::default(),
            };
            let digest = digest(&snapshot.captured);
            Ok(StateLease::exact(snapshot, digest))
        }

        fn restore(
            &self,
            binding: &Snapshot,
            _request: &RestoreRequest,
        ) -> Result<RestoreReceipt, Error> {
            let working = binding.captured.clone();
            let receipt = RestoreReceipt::new(Fidelity::Exact)
                .with_digest(digest(&working))
                .with_prefix_reused(true);
            *binding.working.borrow_mut() = Some(working);
            Ok(receipt)
        }

        fn validate(
            &self,
            binding: &Snapshot,
            _receipt: &RestoreReceipt,
        ) -> Result<EquivalenceReport, Error> {
            let working = binding.working.borrow();
            let working = working.as_deref().ok_or("not restored")?;
            Ok(EquivalenceReport::exact_digests(
                digest(&binding.captured),
                digest(working),
            ))
        }

        fn run_suffix(
            &self,
            binding: &Snapshot,
            item: Item,
            _ctx: &Context,
        ) -> Result<Record, Error> {
            let working = binding.working.borrow();
            let working = working.as_deref().ok_or("not restored")?;
            Ok(Record::with_keys([format!("{working}:{}", item.item_id())]))
        }

        fn export_state(&self, binding: &Snapshot) -> Result<Option<Vec<u8>>, Error> {
            Ok(Some(binding.captured.as_bytes().to_vec()))
        }
    }

    fn group_ctx(id: &str) -> wit_types::Context {
        wit_types::Context {
            execution_group_id: Some(id.to_owned()),
            ..ctx()
        }
    }

    fn capture_request(group: &str) -> CaptureRequest {
        CaptureRequest {
            replay_point_id: format!("rp-{group}"),
            trace_id: group.to_owned(),
            branch_id: "main".into(),
            after_event_id: Some("e-1".into()),
            next_sequence: 2,
            execution_group_id: group.to_owned(),
        }
    }

    fn prepare(seed: &str, group: wit_types::Context) -> GroupBox<Tally> {
        let seed = format!(r#"{{"item_id":"{seed}"}}"#);
        Adapter::<Counter>::prepare_group(
            &seed,
            &[seed.clone(), r#"{"item_id":"v"}"#.into()],
            group,
        )
        .unwrap()
        .unwrap()
        .group
    }

    #[test]
    fn a_binding_is_resumed_by_its_token_until_it_is_dropped() {
        type A = Adapter<Counter>;
        let group = prepare("seed-t", group_ctx("g-t"));
        let first = A::capture_point(&capture_request("g-t"))
            .unwrap()
            .binding
            .unwrap();
        let second = A::capture_point(&capture_request("g-t"))
            .unwrap()
            .binding
            .unwrap();
        assert_ne!(
            first.token(),
            second.token(),
            "every binding has its own token"
        );
        let resumed = BindingBox::<Snapshot>::resume(first.token()).unwrap();
        assert!(
            std::ptr::eq(resumed.binding(), first.binding()),
            "the same state, shared"
        );
        drop(resumed);
        assert!(
            BindingBox::<Snapshot>::resume(first.token()).is_ok(),
            "first still holds it"
        );
        drop(first);
        let token = second.token();
        drop(second);
        let error = BindingBox::<Snapshot>::resume(token).unwrap_err();
        assert_eq!(error.kind, "unknown-binding");
        A::release_group(group, group_ctx("g-t")).unwrap();
    }

    #[test]
    fn capture_finds_the_group_prepared_under_its_id() {
        type A = Adapter<Counter>;
        let before = registry::len(&registry::GROUPS);
        let first = prepare("seed-a", group_ctx("g-a"));
        let second = prepare("seed-b", group_ctx("g-b"));
        assert_eq!(registry::len(&registry::GROUPS), before + 2);
        assert_eq!(first.group().seed, "seed-a");

        let lease = A::capture_point(&capture_request("g-b")).unwrap();
        assert_eq!(lease.fidelity, Fidelity::Exact);
        assert_eq!(lease.projection_digest.as_deref(), Some("digest:seed-b/2"));
        assert_eq!(
            lease.binding.as_ref().unwrap().binding().captured,
            "seed-b/2"
        );
        let lease = A::capture_point(&capture_request("g-a")).unwrap();
        assert_eq!(lease.binding.unwrap().binding().captured, "seed-a/2");

        // release unregisters; the point captured before lives on
        A::release_group(first, group_ctx("g-a")).unwrap();
        let err = A::capture_point(&capture_request("g-a")).unwrap_err();
        assert_eq!(err.kind, "unknown-group");
        // dropping the box (the host dropped the handle) unregisters too
        drop(second);
        assert_eq!(
            A::capture_point(&capture_request("g-b")).unwrap_err().kind,
            "unknown-group"
        );
        assert_eq!(registry::len(&registry::GROUPS), before);
    }

    #[test]
    fn unknown_group_is_a_declared_error_naming_the_id() {
        type A = Adapter<Counter>;
        let err = A::capture_point(&capture_request("never-prepared")).unwrap_err();
        assert_eq!(err.kind, "unknown-group");
        assert!(
            err.message.contains("\"never-prepared\""),
            "{}",
            err.message
        );
        assert!(!err.retryable);

        // a prepare without an execution group id is not capturable
        let before = registry::len(&registry::GROUPS);
        let plain = prepare("seed-c", ctx());
        assert_eq!(registry::len(&registry::GROUPS), before);
        assert_eq!(plain.group().items, 2);
        // an opt-out registers nothing
        let none = A::prepare_group(r#"{"item_id":"opt-out"}"#, &[], group_ctx("g-none")).unwrap();
        assert!(none.is_none());
        assert_eq!(
            A::capture_point(&capture_request("g-none"))
                .unwrap_err()
                .kind,
            "unknown-group"
        );
        // the WIT shell reports the same error
        let err = <A as wit_replay::Guest>::capture_replay_state(capture_request("nope").into())
            .unwrap_err();
        assert_eq!(err.kind, "unknown-group");
    }

    #[test]
    fn a_later_prepare_under_the_same_id_wins() {
        type A = Adapter<Counter>;
        let old = prepare("old", group_ctx("g-same"));
        let new = prepare("new", group_ctx("g-same"));
        let lease = A::capture_point(&capture_request("g-same")).unwrap();
        assert_eq!(lease.binding.unwrap().binding().captured, "new/2");
        // releasing the older group keeps the newer one capturable
        A::release_group(old, group_ctx("g-same")).unwrap();
        let lease = A::capture_point(&capture_request("g-same")).unwrap();
        assert_eq!(lease.binding.unwrap().binding().captured, "new/2");
        drop(new);
    }

    #[test]
    fn replay_calls_through_the_wit_shell() {
        type A = Adapter<Counter>;
        let group = prepare("seed-r", group_ctx("g-r"));
        let lease = A::capture_point(&capture_request("g-r")).unwrap();
        // Natively a resource cannot be created, but a borrow is a pointer
        // to the resource's representation (`Option<T>`).
        let mut rep: Option<BindingBox<Snapshot>> = lease.binding;
        let rep_ptr = &mut rep as *mut Option<BindingBox<Snapshot>> as usize;
        let borrow = || unsafe { wit_replay::ReplayBindingBorrow::lift(rep_ptr) };

        let request = RestoreRequest {
            replay_point_id: "rp-g-r".into(),
            target_branch_id: "v".into(),
            minimum_fidelity: Fidelity::SemanticEquivalent,
        };
        let receipt =
            <A as wit_replay::Guest>::restore_replay_state(borrow(), request.clone().into())
                .unwrap();
        assert_eq!(receipt.achieved_fidelity, wit_types::Fidelity::Exact);
        assert_eq!(receipt.prefix_reused, Some(true));
        let report =
            <A as wit_replay::Guest>::validate_replay_equivalence(borrow(), receipt.clone())
                .unwrap();
        let report = EquivalenceReport::from(report);
        assert!(report.equivalent);
        assert_eq!(report.checks.len(), 1);
        assert_eq!(
            report.check_contract(
                &receipt.into(),
                Some("digest:seed-r/2"),
                request.minimum_fidelity
            ),
            Ok(true)
        );

        let record = <A as wit_replay::Guest>::run_replay_suffix(
            borrow(),
            r#"{"item_id":"v"}"#.into(),
            ctx(),
        )
        .unwrap();
        let record: serde_json::Value = serde_json::from_str(&record).unwrap();
        assert_eq!(
            record["observation_keys"],
            serde_json::json!(["seed-r/2:v"])
        );
        let err =
            <A as wit_replay::Guest>::run_replay_suffix(borrow(), "[]".into(), ctx()).unwrap_err();
        assert_eq!(err.kind, "invalid-item");

        // defaults: finalize and release succeed, import is refused
        <A as wit_replay::Guest>::finalize_replay_suffix(borrow(), request.into(), true).unwrap();
        <A as wit_replay::Guest>::release_replay_state(borrow()).unwrap();
        let state = <A as wit_replay::Guest>::export_replay_state(borrow()).unwrap();
        assert_eq!(state.as_deref(), Some(&b"seed-r/2"[..]));
        let err = <A as wit_replay::Guest>::import_replay_state(
            state.unwrap(),
            capture_request("g-r").into(),
        )
        .unwrap_err();
        assert_eq!(err.kind, "unsupported");
        drop(rep);
        drop(group);
    }

    #[test]
    fn leases_receipts_and_reports_convert() {
        type A = Adapter<Counter>;
        // a non-replayable lease crosses without a resource
        let group = prepare("seed-m", group_ctx("g-m"));
        let mut request = capture_request("g-m");
        request.replay_point_id = "marker".into();
        let lease: wit_replay::StateLease = A::capture_point(&request).unwrap().into();
        assert!(lease.binding.is_none());
        assert_eq!(lease.fidelity, wit_types::Fidelity::NonReplayable);
        assert_eq!(lease.projection_digest, None);
        drop(group);

        for fidelity in Fidelity::ALL {
            let wit: wit_types::Fidelity = fidelity.into();
            assert_eq!(Fidelity::from(wit), fidelity);
        }
        let request = capture_request("g-x");
        let wit: wit_replay::CaptureRequest = request.clone().into();
        assert_eq!(wit.next_sequence, 2);
        assert_eq!(wit.after_event_id.as_deref(), Some("e-1"));
        assert_eq!(CaptureRequest::from(wit), request);

        let receipt = RestoreReceipt::new(Fidelity::BestEffort).with_digest("d");
        let wit: wit_types::RestoreReceipt = receipt.clone().into();
        assert_eq!(wit.achieved_fidelity, wit_types::Fidelity::BestEffort);
        assert_eq!(wit.restored_projection_digest.as_deref(), Some("d"));
        assert_eq!(wit.prefix_reused, None);
        assert_eq!(RestoreReceipt::from(wit), receipt);

        let report = EquivalenceReport::new(Fidelity::SemanticEquivalent, true)
            .with_check(EquivalenceCheck::new("rows", true).with_summary("3 rows"))
            .with_reason("checked");
        let wit: wit_types::EquivalenceReport = report.clone().into();
        assert_eq!(
            wit.achieved_fidelity,
            wit_types::Fidelity::SemanticEquivalent
        );
        assert_eq!(wit.checks.len(), 1);
        assert_eq!(wit.checks[0].check_id, "rows");
        assert_eq!(wit.checks[0].public_summary.as_deref(), Some("3 rows"));
        assert_eq!(wit.sanitized_reason.as_deref(), Some("checked"));
        assert_eq!(EquivalenceReport::from(wit), report);
    }

    /// A child of `Counter`: the exported state it was forked from.
    struct Fork {
        child_id: String,
        state: String,
        runs: Cell<u32>,
    }

    impl ReplayChildren for Counter {
        type Child = Fork;

        fn fork_child(
            &self,
            state: Vec<u8>,
            request: &ForkRequest,
        ) -> Result<ChildLease<Fork>, Error> {
            let state = String::from_utf8(state)?;
            if state.is_empty() {
                return Err(Error::new("invalid-state", "no state"));
            }
            let receipt = RestoreReceipt::new(Fidelity::Exact)
                .with_digest(digest(&state))
                .with_prefix_reused(true);
            let fork = Fork {
                child_id: request.child_id.clone(),
                state,
                runs: Cell::new(0),
            };
            let lease = ChildLease::thread_safe(fork, receipt);
            Ok(if request.child_id.starts_with("serial") {
                lease.with_concurrency(ChildConcurrency::SerialOnly)
            } else {
                lease
            })
        }

        fn validate_child(
            &self,
            child: &Fork,
            _receipt: &RestoreReceipt,
        ) -> Result<EquivalenceReport, Error> {
            Ok(EquivalenceReport::exact_digests(
                digest(&child.state),
                digest(&child.state),
            ))
        }

        fn run_child(&self, child: &Fork, task: Item, _ctx: &Context) -> Result<Record, Error> {
            child.runs.set(child.runs.get() + 1);
            let mut record =
                Record::with_keys([format!("child:{}:{}", child.state, task.item_id())]);
            record.set("child_id", child.child_id.as_str());
            if task.item_id() == "reject" {
                record.set_accepted(false);
            }
            Ok(record)
        }
    }

    impl ChildRisk for Counter {
        fn assess_intent(
            &self,
            child: &Fork,
            intent: &crate::Object,
        ) -> Result<RiskAssessment, Error> {
            if intent.get("danger") == Some(&serde_json::Value::Bool(true)) {
                return Ok(RiskAssessment::deny(
                    "danger-flag",
                    format!("{} asks for danger", child.child_id),
                ));
            }
            Ok(RiskAssessment::allow("danger-flag"))
        }

        fn assess_outcome(
            &self,
            child: &Fork,
            _intent: &crate::Object,
            outcome: &Record,
        ) -> Result<RiskAssessment, Error> {
            if !outcome.is_accepted() {
                return Ok(RiskAssessment::deny(
                    "accepted-outcome",
                    format!(
                        "{} was not accepted after {} run(s)",
                        child.child_id,
                        child.runs.get()
                    ),
                ));
            }
            Ok(RiskAssessment::allow("accepted-outcome").with_reason("accepted"))
        }
    }

    impl Counterfactual for Counter {
        /// Passes `fixed` when the change sets `"fix": true`; reports the
        /// child's state and the request's candidate in the summary.
        fn run_counterfactual(
            &self,
            child: &Fork,
            item: Item,
            request: &CounterfactualRequest,
            change: &crate::Object,
            _ctx: &Context,
        ) -> Result<Vec<ValidationOutcome>, Error> {
            let fixed = change.get("fix") == Some(&serde_json::Value::Bool(true));
            Ok(vec![ValidationOutcome {
                validation_id: "fixed".into(),
                passed: fixed,
                public_summary: Some(format!(
                    "{} on {} for {}",
                    request.candidate_id,
                    child.state,
                    item.item_id()
                )),
            }])
        }
    }

    fn counterfactual_request(change: &str) -> wit_counterfactual::CounterfactualRequest {
        wit_counterfactual::CounterfactualRequest {
            hypothesis_id: "h".into(),
            candidate_id: "cand".into(),
            replay_point_id: "rp-c".into(),
            first_affected_event_id: "e-3".into(),
            first_affected_sequence: 3,
            public_change_set: change.into(),
        }
    }

    #[test]
    fn a_counterfactual_finds_its_child_by_id_and_gets_the_change_parsed() {
        type A = Adapter<Counter>;
        let lease = A::fork_child_box(b"seed-f".to_vec(), &fork_request("cand")).unwrap();
        let outcomes = <A as wit_counterfactual::Guest>::run_counterfactual(
            "cand".into(),
            r#"{"item_id":"doc"}"#.into(),
            counterfactual_request(r#"{"fix":true}"#),
            ctx(),
        )
        .unwrap();
        assert_eq!(outcomes.len(), 1);
        assert_eq!(outcomes[0].validation_id, "fixed");
        assert!(outcomes[0].passed);
        assert_eq!(
            outcomes[0].public_summary.as_deref(),
            Some("cand on seed-f for doc")
        );
        let not_fixed = <A as wit_counterfactual::Guest>::run_counterfactual(
            "cand".into(),
            r#"{"item_id":"doc"}"#.into(),
            counterfactual_request("{}"),
            ctx(),
        )
        .unwrap();
        assert!(!not_fixed[0].passed);
        let bad_change = <A as wit_counterfactual::Guest>::run_counterfactual(
            "cand".into(),
            r#"{"item_id":"doc"}"#.into(),
            counterfactual_request("[1]"),
            ctx(),
        )
        .unwrap_err();
        assert_eq!(bad_change.kind, Error::INVALID_CHANGE_SET);
        let unknown = <A as wit_counterfactual::Guest>::run_counterfactual(
            "nobody".into(),
            r#"{"item_id":"doc"}"#.into(),
            counterfactual_request("{}"),
            ctx(),
        )
        .unwrap_err();
        assert_eq!(unknown.kind, Error::UNKNOWN_CHILD);
        drop(lease);
    }

    fn fork_request(child_id: &str) -> ForkRequest {
        ForkRequest {
            replay_point_id: "rp-c".into(),
            child_id: child_id.into(),
            target_branch_id: child_id.into(),
            minimum_fidelity: Fidelity::Exact,
        }
    }

    #[test]
    fn children_fork_validate_run_and_release_through_the_wit_shell() {
        type A = Adapter<Counter>;
        let before = registry::len(&registry::CHILDREN);
        let lease = A::fork_child_box(b"seed-c/2".to_vec(), &fork_request("c~v")).unwrap();
        assert_eq!(registry::len(&registry::CHILDREN), before + 1);
        assert_eq!(lease.concurrency, ChildConcurrency::ThreadSafe);
        assert_eq!(lease.child.child_id(), "c~v");
        assert_eq!(lease.receipt.check_against(Fidelity::Exact), Ok(()));
        let receipt = lease.receipt.clone();

        // Natively a resource cannot be created, but a borrow is a pointer
        // to the resource's representation (`Option<T>`).
        let mut rep: Option<ChildBox<Fork>> = Some(lease.child);
        let rep_ptr = &mut rep as *mut Option<ChildBox<Fork>> as usize;
        let borrow = || unsafe { wit_children::ReplayChildBorrow::lift(rep_ptr) };

        let report = <A as wit_children::Guest>::validate_replay_child_equivalence(
            borrow(),
            receipt.clone().into(),
        )
        .unwrap();
        let report = EquivalenceReport::from(report);
        assert_eq!(
            report.check_contract(&receipt, Some("digest:seed-c/2"), Fidelity::Exact),
            Ok(true)
        );

        // intent, run, outcome, release: the order the host uses
        let intent = <A as wit_risk::Guest>::assess_replay_child_intent(
            "c~v".into(),
            r#"{"spec_id":"v"}"#.into(),
        )
        .unwrap();
        assert_eq!(intent.disposition, wit_risk::Disposition::Allow);
        assert_eq!(intent.policy_id, "danger-flag");
        assert_eq!(intent.sanitized_reason, None);
        let record = <A as wit_children::Guest>::run_replay_child(
            borrow(),
            r#"{"item_id":"c~v"}"#.into(),
            ctx(),
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&record).unwrap();
        assert_eq!(
            value["observation_keys"],
            serde_json::json!(["child:seed-c/2:c~v"])
        );
        assert_eq!(value["child_id"], "c~v");
        let outcome = <A as wit_risk::Guest>::assess_replay_child_outcome(
            "c~v".into(),
            r#"{"spec_id":"v"}"#.into(),
            record,
        )
        .unwrap();
        assert_eq!(
            RiskAssessment::from(outcome),
            RiskAssessment::allow("accepted-outcome").with_reason("accepted")
        );
        let err =
            <A as wit_children::Guest>::run_replay_child(borrow(), "[]".into(), ctx()).unwrap_err();
        assert_eq!(err.kind, "invalid-item");
        <A as wit_children::Guest>::release_replay_child(borrow()).unwrap();

        // the host drops the handle: the child is gone from the index
        drop(rep);
        assert_eq!(registry::len(&registry::CHILDREN), before);
        let err = <A as wit_risk::Guest>::assess_replay_child_intent("c~v".into(), "{}".into())
            .unwrap_err();
        assert_eq!(err.kind, "unknown-child");
    }

    #[test]
    fn risk_calls_find_the_child_by_its_id() {
        type A = Adapter<Counter>;
        let serial = A::fork_child_box(b"s".to_vec(), &fork_request("serial-1")).unwrap();
        assert_eq!(serial.concurrency, ChildConcurrency::SerialOnly);
        let other = A::fork_child_box(b"o".to_vec(), &fork_request("other")).unwrap();

        let denied = A::assess_intent_of("serial-1", r#"{"danger":true}"#).unwrap();
        assert!(denied.is_denied());
        assert_eq!(denied.policy_id, "danger-flag");
        assert_eq!(
            denied.sanitized_reason.as_deref(),
            Some("serial-1 asks for danger"),
            "the reason names the child the id resolved to"
        );
        let denied =
            A::assess_outcome_of("other", "{}", r#"{"observation_keys":[],"accepted":false}"#)
                .unwrap();
        assert_eq!(denied.disposition, Disposition::Deny);
        assert!(denied.sanitized_reason.unwrap().starts_with("other "));

        // an id this instance never forked
        let err = A::assess_intent_of("never", "{}").unwrap_err();
        assert_eq!(err.kind, Error::UNKNOWN_CHILD);
        assert!(err.message.contains("\"never\""), "{}", err.message);
        assert!(!err.retryable);
        let err = A::assess_outcome_of("never", "{}", "{}").unwrap_err();
        assert_eq!(err.kind, "unknown-child");
        // malformed intent and outcome
        assert_eq!(
            A::assess_intent_of("other", "[1]").unwrap_err().kind,
            "invalid-intent"
        );
        assert_eq!(
            A::assess_outcome_of("other", "{", "{}").unwrap_err().kind,
            "invalid-intent"
        );
        assert_eq!(
            A::assess_outcome_of("other", "{}", "7").unwrap_err().kind,
            "invalid-record"
        );
        // the adapter's own fork error crosses unchanged
        assert_eq!(
            A::fork_child_box(Vec::new(), &fork_request("empty"))
                .unwrap_err()
                .kind,
            "invalid-state"
        );
        let err = <A as wit_risk::Guest>::assess_replay_child_intent("empty".into(), "{}".into())
            .unwrap_err();
        assert_eq!(err.kind, "unknown-child", "a failed fork registers nothing");

        // a later fork under the same id wins; dropping the older keeps it
        let newer = A::fork_child_box(b"n".to_vec(), &fork_request("other")).unwrap();
        drop(other);
        let denied = A::assess_intent_of("other", r#"{"danger":true}"#).unwrap();
        assert!(denied.is_denied());
        assert_eq!(newer.child.child().state, "n");
        drop(newer);
        drop(serial);
        assert_eq!(
            A::assess_intent_of("other", "{}").unwrap_err().kind,
            "unknown-child"
        );
    }

    #[test]
    fn child_values_convert() {
        let request = fork_request("c");
        let wit: wit_children::ForkRequest = request.clone().into();
        assert_eq!(wit.child_id, "c");
        assert_eq!(wit.minimum_fidelity, wit_types::Fidelity::Exact);
        assert_eq!(ForkRequest::from(wit), request);
        for concurrency in [
            ChildConcurrency::SerialOnly,
            ChildConcurrency::ThreadSafe,
            ChildConcurrency::ProcessIsolated,
        ] {
            let wit: wit_children::ChildConcurrency = concurrency.into();
            assert_eq!(ChildConcurrency::from(wit), concurrency);
        }
        for assessment in [
            RiskAssessment::allow("p"),
            RiskAssessment::deny("p", "too big"),
        ] {
            let wit: wit_risk::RiskAssessment = assessment.clone().into();
            assert_eq!(wit.policy_id, "p");
            assert_eq!(RiskAssessment::from(wit), assessment);
        }
        assert_eq!(
            wit_risk::Disposition::from(Disposition::Deny),
            wit_risk::Disposition::Deny
        );
    }
}
