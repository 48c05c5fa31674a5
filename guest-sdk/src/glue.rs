//! The JSON boundary: the generated `Guest` traits implemented for
//! [`Adapter<A>`] by delegating to the protocol traits.

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;

use crate::bindings::episode::exports::sandloop::adapter::episode as wit_episode;
use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups as wit_groups;
use crate::bindings::seeds::exports::sandloop::adapter::seeds as wit_seeds;
use crate::bindings::variants::exports::sandloop::adapter::variants as wit_variants;
use crate::protocol::{Episode, EpisodeGroups, Seeds, Variants};
use crate::types::{Context, Error, Item, VariantSpec};
use crate::wit::types as wit_types;

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

/// A prepared group's state inside the `episode-group` resource.
pub struct GroupBox<G>(pub G);

impl<G: 'static> wit_groups::GuestEpisodeGroup for GroupBox<G> {}

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

impl<A: EpisodeGroups + Default + 'static> wit_groups::Guest for Adapter<A> {
    type EpisodeGroup = GroupBox<A::Group>;

    fn prepare_episode_group(
        seed: String,
        items: Vec<String>,
        ctx: wit_types::Context,
    ) -> WitResult<Option<wit_groups::Prepared>> {
        let seed = Item::from_json(&seed)?;
        let items = items
            .iter()
            .map(|item| Item::from_json(item))
            .collect::<Result<Vec<_>, _>>()?;
        let prepared = Self::instance().prepare(seed, items, &ctx.into())?;
        Ok(prepared.map(|prepared| wit_groups::Prepared {
            group: wit_groups::EpisodeGroup::new(GroupBox(prepared.group)),
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
        let record = Self::instance().execute_episode(&group.0, item, &ctx.into())?;
        Ok(record.to_json())
    }

    fn release_episode_group(
        group: wit_groups::EpisodeGroup,
        ctx: wit_types::Context,
    ) -> WitResult<()> {
        let group: GroupBox<A::Group> = group.into_inner();
        Self::instance().release(group.0, &ctx.into())?;
        Ok(())
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
}
