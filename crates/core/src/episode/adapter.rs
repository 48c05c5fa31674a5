//! The adapter seam: what the episode and harness runtimes need from an
//! adapter, independent of how it runs (a sandboxed WebAssembly component in
//! `sandloop-sandbox`, or a native test double).

pub use super::adapter_error::{AdapterError, ErrorType};
pub use super::item::{Item, ItemIdentity, Record};

/// Where a call runs; mirrors the keyword context the reference passes to
/// `execute`, `prepare_episode_group`, `execute_episode` and
/// `release_episode_group` (`arm`, `epoch`, `branch_id`,
/// `execution_group_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallContext {
    /// Arm name (`--arm`, default `main`).
    pub arm: String,
    /// 1-based epoch number.
    pub epoch: u32,
    /// Queue worker lane, e.g. `queue_worker_01`.
    pub branch_id: String,
    /// Episode group id; `None` for plain `execute` calls.
    pub execution_group_id: Option<String>,
}

/// Which optional protocols an adapter offers. Mirrors the reference's
/// duck-typed checks (`recoverable_episode_mode`, `hasattr(adapter, ...)`);
/// with components each flag is one exported WIT interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Protocols {
    /// `episode.execute` (reference mode `legacy`).
    pub execute: bool,
    /// `seeds.list-seed-items`.
    pub seeds: bool,
    /// `variants.compile-variant`.
    pub variants: bool,
    /// `episode-groups` (reference mode `recoverable-v0`).
    pub episode_groups: bool,
    /// `replay` (reference mode `replayable-v2`): prefixes can be captured
    /// as replay points.
    pub replay: bool,
    /// `replay-children` (reference mode `isolated-child-v0`): variants
    /// run as children forked into fresh instances.
    pub replay_children: bool,
    /// `child-risk` (reference mode `child-risk-v0`): each child's intent
    /// and outcome are assessed.
    pub child_risk: bool,
    /// `counterfactual` (reference `counterfactual_runtime.py`): a failed
    /// item's suffix can run again on an isolated child with a candidate
    /// change applied (`sandloop counterfactual`).
    pub counterfactual: bool,
}

impl Protocols {
    /// The names reported in `summary.json` and by `sandloop inspect`, in a
    /// fixed order: `legacy`, `recoverable-v0`, `replayable-v2`,
    /// `isolated-child-v0`, `child-risk-v0`, `counterfactual-v0`, `seeds`,
    /// `variants`.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.execute {
            names.push("legacy");
        }
        if self.episode_groups {
            names.push(crate::episode::RECOVERABLE_EPISODE_MODE);
        }
        if self.replay {
            names.push(sandloop_contract::REPLAYABLE_EPISODE_MODE);
        }
        if self.replay_children {
            names.push(sandloop_contract::ISOLATED_CHILD_MODE);
        }
        if self.child_risk {
            names.push(sandloop_contract::CHILD_RISK_MODE);
        }
        if self.counterfactual {
            names.push(sandloop_contract::COUNTERFACTUAL_MODE);
        }
        if self.seeds {
            names.push("seeds");
        }
        if self.variants {
            names.push("variants");
        }
        names
    }

    /// The protocols named by `names` as [`Protocols::names`] spells them
    /// (e.g. a manifest's `adapter.protocols`); unknown names are ignored.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        let mut protocols = Protocols::default();
        for name in names {
            let flag = match name.as_ref() {
                "legacy" => &mut protocols.execute,
                crate::episode::RECOVERABLE_EPISODE_MODE => &mut protocols.episode_groups,
                sandloop_contract::REPLAYABLE_EPISODE_MODE => &mut protocols.replay,
                sandloop_contract::ISOLATED_CHILD_MODE => &mut protocols.replay_children,
                sandloop_contract::CHILD_RISK_MODE => &mut protocols.child_risk,
                sandloop_contract::COUNTERFACTUAL_MODE => &mut protocols.counterfactual,
                "seeds" => &mut protocols.seeds,
                "variants" => &mut protocols.variants,
                _ => continue,
            };
            *flag = true;
        }
        protocols
    }

    /// The reference's `episode_mode`: `Some("recoverable-v0")` when the
    /// adapter offers episode groups, else `None` (standalone execution).
    pub fn episode_mode(&self) -> Option<&'static str> {
        self.episode_groups
            .then_some(crate::episode::RECOVERABLE_EPISODE_MODE)
    }
}

/// A prepared shared prefix, as returned by `prepare_episode_group`.
pub struct Prepared<H> {
    /// Adapter-owned handle; always passed back to
    /// [`EpisodeAdapter::release_episode_group`] exactly once.
    pub handle: H,
    /// The prefix observation record, or why what the adapter returned is
    /// not one (the runtime then releases the handle and records the error,
    /// mirroring the reference's `TypeError` path).
    pub prefix_record: Result<Record, AdapterError>,
    /// Optional adapter checkpoint reference.
    pub checkpoint_ref: Option<String>,
}

/// One adapter instance as the runtimes see it. Every call takes `&mut self`:
/// a queue lane owns its instance, so distinct groups never share one.
///
/// Mirrors the reference's duck-typed adapter protocol in
/// `harness_runtime.py` (module docstring) and `episode_runtime.py`.
pub trait EpisodeAdapter {
    /// Handle of a prepared episode group.
    type Handle;

    /// The protocols this adapter offers.
    fn protocols(&self) -> Protocols;

    /// Plain execution of one item (reference `execute`).
    fn execute(&mut self, item: &Item, ctx: &CallContext) -> Result<Record, AdapterError>;

    /// Prepare the seed's shared prefix (reference `prepare_episode_group`).
    /// `Ok(None)` is the explicit opt-out to plain `execute`.
    fn prepare_episode_group(
        &mut self,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Result<Option<Prepared<Self::Handle>>, AdapterError>;

    /// Run one item as a suffix on a prepared prefix (reference
    /// `execute_episode`).
    fn execute_episode(
        &mut self,
        handle: &Self::Handle,
        item: &Item,
        ctx: &CallContext,
    ) -> Result<Record, AdapterError>;

    /// Release a prepared prefix (reference `release_episode_group`).
    fn release_episode_group(
        &mut self,
        handle: Self::Handle,
        ctx: &CallContext,
    ) -> Result<(), AdapterError>;

    /// Run every item of a prepared group at once (for components with
    /// isolated replay children: each item a child forked from the group's
    /// replay point, run in parallel). `None`, the default, means the
    /// runtime calls [`EpisodeAdapter::execute_episode`] for each item;
    /// otherwise one result per item, in order, each with the minutes it
    /// took.
    fn execute_episode_batch(
        &mut self,
        handle: &Self::Handle,
        items: &[Item],
        ctx: &CallContext,
    ) -> Option<Vec<(Result<Record, AdapterError>, f64)>> {
        let _ = (handle, items, ctx);
        None
    }
}

/// The control-plane calls of an adapter: seeds and variant compilation,
/// made once per epoch by the harness on its own instance.
pub trait SeedSource {
    /// Seeds for `epoch` (reference `list_seed_items`).
    fn list_seed_items(&mut self, arm: &str, epoch: u32) -> Result<Vec<Item>, AdapterError>;
    /// The same seeds kept on disk, when this source has them that way (an
    /// items file): the runtime then groups them without holding them and
    /// reads each group's items when its unit runs. `None`, the default,
    /// means [`SeedSource::list_seed_items`].
    fn stored_seed_items(
        &mut self,
        arm: &str,
        epoch: u32,
    ) -> Option<std::sync::Arc<super::stored::StoredItems>> {
        let _ = (arm, epoch);
        None
    }
    /// Compile a catalog spec against its seed (reference `compile_variant`).
    fn compile_variant(&mut self, spec: &Item, seed: &Item) -> Result<Item, AdapterError>;
}

#[cfg(test)]
mod tests {
    use super::Protocols;

    #[test]
    fn protocol_names_read_back_as_the_protocols_that_wrote_them() {
        let all = Protocols {
            execute: true,
            seeds: true,
            variants: true,
            episode_groups: true,
            replay: true,
            replay_children: true,
            child_risk: true,
            counterfactual: true,
        };
        assert_eq!(Protocols::from_names(&all.names()), all);
        let some = Protocols {
            execute: true,
            replay: true,
            ..Protocols::default()
        };
        assert_eq!(Protocols::from_names(&some.names()), some);
        assert_eq!(
            Protocols::from_names(&["legacy", "telepathy"]),
            Protocols {
                execute: true,
                ..Protocols::default()
            }
        );
    }
}
