//! The adapter protocol as Rust traits.
//!
//! Implement the traits your world needs on one type that also implements
//! `Default`, then export it with [`crate::export_adapter!`]. The sdk builds
//! the value once per component instance, on the first call, and hands every
//! call `&self`. The host may start a fresh instance at any time (a trap, a
//! limit, a forked child): keep per-instance state a cache, never a source of
//! truth. An instance runs one call at a time, so `Cell`/`RefCell` are the
//! tools for interior mutability.

use crate::types::{
    CaptureRequest, ChildLease, Context, CounterfactualRequest, EquivalenceReport, Error,
    ForkRequest, Item, Object, Prepared, Record, RestoreReceipt, RestoreRequest, RiskAssessment,
    StateLease, ValidationOutcome, VariantSpec,
};

/// `episode.execute`: run one work item and return its observation record
/// (reference mode `legacy`). Required by the `plain`, `grouped`,
/// `explorer`, `replayable`, `isolated` and `full` worlds; the host also
/// uses it as the fallback when [`EpisodeGroups::prepare`] returns `None`.
pub trait Episode {
    /// Run `item`; return `observation_keys`, `weighted_flags`, `accepted`
    /// and any private fields. `ctx.execution_group_id` is `None` here.
    fn execute(&self, item: Item, ctx: &Context) -> Result<Record, Error>;
}

/// `seeds.list-seed-items`: the seed items of an epoch.
pub trait Seeds {
    /// Seeds for `epoch` (1-based), each with `item_id`, `text`, `family`,
    /// optional `payload`. An empty list ends the run
    /// (`stop_reason = "seed_queue_empty"`).
    fn list_seed_items(&self, arm: &str, epoch: u32) -> Result<Vec<Item>, Error>;
}

/// `variants.compile-variant`: turn a catalog spec into an executable item.
pub trait Variants {
    /// Return the variant item: `is_variant: true`, `variant_spec`,
    /// `seed_item_id`, `family`, its own `item_id` (distinct from every seed
    /// id). The host fills in `is_variant`, `variant_spec`, `family`,
    /// `seed_item_id` and `concurrency_key` when they are missing.
    fn compile_variant(&self, spec: VariantSpec, seed: Item) -> Result<Item, Error>;
}

/// `episode-groups`: shared-prefix episodes (reference mode `recoverable-v0`).
///
/// The host calls [`prepare`](Self::prepare) once per seed with the seed and
/// its variants (seed first), then [`execute_episode`](Self::execute_episode)
/// for every item on the prepared group, then
/// [`release`](Self::release) exactly once, whatever failed in between.
pub trait EpisodeGroups {
    /// Adapter-owned state of one prepared prefix. It lives inside the
    /// component (a WIT resource); the host only holds an unforgeable handle.
    type Group: 'static;

    /// Prepare the shared prefix for `items`. `Ok(None)` is an explicit,
    /// side-effect-free opt-out: the host then runs each item through
    /// [`Episode::execute`] (so a `grouped-only` adapter must not return it).
    fn prepare(
        &self,
        seed: Item,
        items: Vec<Item>,
        ctx: &Context,
    ) -> Result<Option<Prepared<Self::Group>>, Error>;

    /// Run one item (the seed itself or a variant) as a suffix on `group`.
    fn execute_episode(
        &self,
        group: &Self::Group,
        item: Item,
        ctx: &Context,
    ) -> Result<Record, Error>;

    /// Release the prefix. The default drops `group`. An error here is
    /// attached to the prefix record as `episode_release_error`.
    fn release(&self, group: Self::Group, ctx: &Context) -> Result<(), Error> {
        let _ = (group, ctx);
        Ok(())
    }
}

/// `replay`: replay points over prepared episode groups (reference
/// `ReplayAdapterV2`, plus its optional `finalize_replay_suffix` and
/// sandloop's export/import). Required by the `replayable`, `isolated` and
/// `full` worlds.
///
/// A replay point binds a prepared group's prefix state to a trace
/// position, so each suffix can start again from that state. Per seed the
/// host calls:
///
/// 1. [`EpisodeGroups::prepare`], then [`capture`](Self::capture) with
///    `request.execution_group_id` = the prepare's `ctx.execution_group_id`
///    (the sdk finds that group and hands it over);
/// 2. [`export_state`](Self::export_state) once (the bytes are saved when
///    `Some`);
/// 3. per item (seed first): [`restore`](Self::restore) (with
///    `target_branch_id` = the item's `item_id`), [`validate`](Self::validate),
///    [`run_suffix`](Self::run_suffix), [`finalize_suffix`](Self::finalize_suffix)
///    (also after a failed suffix);
/// 4. [`EpisodeGroups::release`] and [`release_state`](Self::release_state)
///    (retried after an error); the binding is dropped after it succeeds.
///
/// A later process may instead call [`import_state`](Self::import_state) on
/// a fresh instance, where no group is prepared, and continue from step 3.
///
/// The host checks every answer against the reference contract (see
/// [`RestoreReceipt::check_against`] and
/// [`EquivalenceReport::check_contract`]): a broken rule quarantines the
/// point instead of promoting the suffix.
pub trait Replay: EpisodeGroups {
    /// Adapter-owned state of one replay point, kept inside the component
    /// (WIT resource `replay-binding`); the host only holds a handle. It
    /// must not borrow from the group: a group is released while its points
    /// live on, and an imported point has no group at all.
    type Binding: 'static;

    /// Capture `group`'s prefix state as a replay point. Return
    /// [`StateLease::exact`] (or another fidelity with a binding), or
    /// [`StateLease::non_replayable`] for a marker point.
    fn capture(
        &self,
        group: &Self::Group,
        request: &CaptureRequest,
    ) -> Result<StateLease<Self::Binding>, Error>;

    /// Restore the binding's state into a working copy for one suffix. The
    /// receipt's fidelity may not exceed the captured one, nor be
    /// `NonReplayable`.
    fn restore(
        &self,
        binding: &Self::Binding,
        request: &RestoreRequest,
    ) -> Result<RestoreReceipt, Error>;

    /// Compare the restored working copy with the captured state. The
    /// report repeats the receipt's fidelity and the captured digest as
    /// `expected_digest` (see [`EquivalenceReport::check_contract`]).
    fn validate(
        &self,
        binding: &Self::Binding,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error>;

    /// Run `item` as a suffix on the restored working copy and return its
    /// observation record, exactly as [`EpisodeGroups::execute_episode`]
    /// would on the group. Emit at least one trace event: the host locates
    /// each suffix by its first trace sequence.
    fn run_suffix(
        &self,
        binding: &Self::Binding,
        item: Item,
        ctx: &Context,
    ) -> Result<Record, Error>;

    /// Close the suffix (drop the working copy). Called after every
    /// [`run_suffix`](Self::run_suffix), whether it succeeded or not; an
    /// error quarantines the point. The default does nothing.
    fn finalize_suffix(
        &self,
        binding: &Self::Binding,
        request: &RestoreRequest,
        suffix_succeeded: bool,
    ) -> Result<(), Error> {
        let _ = (binding, request, suffix_succeeded);
        Ok(())
    }

    /// Release what the binding holds outside itself (WIT
    /// `release-replay-state`). May be called again after an error; the
    /// host drops the binding (running its `Drop`) once this succeeds. The
    /// default does nothing.
    fn release_state(&self, binding: &Self::Binding) -> Result<(), Error> {
        let _ = binding;
        Ok(())
    }

    /// The captured state as bytes [`import_state`](Self::import_state) can
    /// rebuild in another instance or process; `None` when the state cannot
    /// leave the instance (the default).
    fn export_state(&self, binding: &Self::Binding) -> Result<Option<Vec<u8>>, Error> {
        let _ = binding;
        Ok(None)
    }

    /// Rebuild a point from bytes [`export_state`](Self::export_state)
    /// produced. The lease must repeat the captured fidelity and projection
    /// digest; recompute the digest from the bytes rather than trusting a
    /// stored one. The default refuses (`unsupported`).
    fn import_state(
        &self,
        state: Vec<u8>,
        request: &CaptureRequest,
    ) -> Result<StateLease<Self::Binding>, Error> {
        let _ = (state, request);
        Err(Error::unsupported(
            "this adapter cannot import replay state (it exports none)",
        ))
    }
}

/// `replay-children`: isolated replay children (reference
/// `IsolatedReplayChildAdapter`). Required by the `isolated` and `full`
/// worlds.
///
/// Instead of restoring a point's working copy in the parent's instance,
/// the host forks each task of a group into a *fresh instance* of the
/// component (its own store and linear memory) and, in that instance:
///
/// 1. [`fork_child`](Self::fork_child) is the first call, with the bytes
///    the parent's [`Replay::export_state`] produced (a point whose export
///    is `None` cannot have children); build the child from them as
///    [`Replay::import_state`] would;
/// 2. [`validate_child`](Self::validate_child) with the lease's receipt;
/// 3. with [`ChildRisk`]: [`ChildRisk::assess_intent`] (a denied intent
///    never runs);
/// 4. [`run_child`](Self::run_child) with the task item;
/// 5. with [`ChildRisk`]: [`ChildRisk::assess_outcome`] (a denied outcome
///    quarantines the point);
/// 6. [`release_child`](Self::release_child); then the host drops the
///    instance (and with it the child and anything the child scribbled).
///
/// The receipt and report follow the same rules as a restore's
/// ([`RestoreReceipt::check_against`], [`EquivalenceReport::check_contract`]
/// against the point's captured fidelity and digest).
pub trait ReplayChildren: Replay {
    /// Adapter-owned state of one child inside its instance (WIT resource
    /// `replay-child`); the host only holds a handle.
    type Child: 'static;

    /// Adopt `state` (from [`Replay::export_state`]) as this instance's
    /// child for `request.child_id`. The receipt may not claim more than
    /// the point's captured fidelity; the lease's concurrency says whether
    /// the child may run beside its siblings.
    fn fork_child(
        &self,
        state: Vec<u8>,
        request: &ForkRequest,
    ) -> Result<ChildLease<Self::Child>, Error>;

    /// Compare the child's restored state with the captured point: the
    /// report repeats the receipt's fidelity and the captured digest as
    /// `expected_digest`, like [`Replay::validate`].
    fn validate_child(
        &self,
        child: &Self::Child,
        receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error>;

    /// Run the child's task (a seed or variant item) and return its
    /// observation record, as [`Replay::run_suffix`] would on a restored
    /// working copy.
    fn run_child(&self, child: &Self::Child, task: Item, ctx: &Context) -> Result<Record, Error>;

    /// Release the child; an error quarantines the point. The host drops
    /// the child with its instance afterwards. The default does nothing.
    fn release_child(&self, child: &Self::Child) -> Result<(), Error> {
        let _ = child;
        Ok(())
    }
}

/// `child-risk`: risk interception for isolated children (reference
/// `RiskAwareReplayChildAdapter`). Required by the `isolated` and `full`
/// worlds.
///
/// Both calls run in the child's own instance; the sdk finds the child by
/// the WIT call's `child-id` (the [`ForkRequest::child_id`] it was forked
/// with) and answers `unknown-child` for any other id. The host's intent is
/// the task's public intent: a variant's `variant_spec` object, or
/// `{"item_id": ...}` for a seed.
pub trait ChildRisk: ReplayChildren {
    /// Assess the child's intent before it runs. A
    /// [`RiskAssessment::deny`] keeps the task from running (the host
    /// records the denial with its policy id and reason).
    fn assess_intent(&self, child: &Self::Child, intent: &Object) -> Result<RiskAssessment, Error>;

    /// Assess what the child produced (its record) for `intent`. A
    /// [`RiskAssessment::deny`] quarantines the point.
    fn assess_outcome(
        &self,
        child: &Self::Child,
        intent: &Object,
        outcome: &Record,
    ) -> Result<RiskAssessment, Error>;
}

/// Counterfactual fixes (WIT `counterfactual`; `sandloop counterfactual`):
/// would a candidate change have fixed a failed item?
///
/// The host forks one isolated child per candidate from the nearest
/// trusted replay point before the failure, exactly as for a variant
/// ([`ReplayChildren::fork_child`], [`ReplayChildren::validate_child`],
/// [`ChildRisk`] when implemented, [`ReplayChildren::release_child`]), and
/// calls [`run_counterfactual`](Self::run_counterfactual) in place of
/// [`ReplayChildren::run_child`]. It decides promotion itself from the
/// outcomes: every fix target must pass, no guard target may fail, and the
/// restore must be eligible for promotion.
pub trait Counterfactual: ReplayChildren {
    /// Apply `change` (the candidate's `public_change_set`, parsed) to
    /// `child`, run `item` (the failed item) as its suffix, and report one
    /// outcome per validation target checked; ids must be unique, and a
    /// target left out counts as missing. `request` names the hypothesis,
    /// the candidate, the point and the first affected event.
    fn run_counterfactual(
        &self,
        child: &Self::Child,
        item: Item,
        request: &CounterfactualRequest,
        change: &Object,
        ctx: &Context,
    ) -> Result<Vec<ValidationOutcome>, Error>;
}
