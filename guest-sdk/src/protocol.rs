//! The adapter protocol as Rust traits.
//!
//! Implement the traits your world needs on one type that also implements
//! `Default`, then export it with [`crate::export_adapter!`]. The sdk builds
//! the value once per component instance, on the first call, and hands every
//! call `&self`. The host may start a fresh instance at any time (a trap, a
//! limit, a forked child): keep per-instance state a cache, never a source of
//! truth. An instance runs one call at a time, so `Cell`/`RefCell` are the
//! tools for interior mutability.

use crate::types::{Context, Error, Item, Prepared, Record, VariantSpec};

/// `episode.execute`: run one work item and return its observation record
/// (reference mode `legacy`). Required by the `plain`, `grouped`,
/// `explorer` and `full` worlds; the host also uses it as the fallback when
/// [`EpisodeGroups::prepare`] returns `None`.
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
