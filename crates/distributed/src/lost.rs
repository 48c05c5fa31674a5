//! A unit given up (it started more than [`crate::ledger::MAX_STARTS`]
//! times on workers without a result: it kept killing them) is recorded,
//! not dropped: it gets the records a local run writes when none of the
//! unit's calls can get an instance — error records of type
//! `instantiation`, marked retryable, under the run's failure policy (the
//! fatal policy stops the run).

use sandloop_core::episode::adapter::{
    AdapterError, CallContext, EpisodeAdapter, ErrorType, Item, Prepared, Protocols, Record,
};
use sandloop_core::episode::clock::SystemClock;
use sandloop_core::episode::policy::FailurePolicy;
use sandloop_core::episode::unit_record::UnitRecord;
use sandloop_core::harness::work::{UnitError, WorkUnit, execute_work_unit};

/// An adapter every call of which fails with the same error.
struct Unreachable {
    protocols: Protocols,
    error: AdapterError,
}

impl EpisodeAdapter for Unreachable {
    type Handle = ();

    fn protocols(&self) -> Protocols {
        self.protocols
    }

    fn execute(&mut self, _item: &Item, _ctx: &CallContext) -> Result<Record, AdapterError> {
        Err(self.error.clone())
    }

    fn prepare_episode_group(
        &mut self,
        _seed: &Item,
        _items: &[Item],
        _ctx: &CallContext,
    ) -> Result<Option<Prepared<()>>, AdapterError> {
        Err(self.error.clone())
    }

    fn execute_episode(
        &mut self,
        _handle: &(),
        _item: &Item,
        _ctx: &CallContext,
    ) -> Result<Record, AdapterError> {
        Err(self.error.clone())
    }

    fn release_episode_group(
        &mut self,
        _handle: (),
        _ctx: &CallContext,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
}

/// The records of `unit`, lost because `why` (the error records' message),
/// for an adapter offering `protocols`.
///
/// # Errors
/// [`UnitError::Fatal`] under the fatal policy; [`UnitError::Read`] when a
/// stored group's items cannot be read back.
pub fn lost_unit_records(
    unit: &WorkUnit,
    ctx: &CallContext,
    policy: FailurePolicy,
    protocols: Protocols,
    why: String,
) -> Result<Vec<UnitRecord>, UnitError> {
    let mut error = AdapterError::new(ErrorType::Instantiation, why);
    error.retryable_infra_error = true;
    unit_error_records(unit, ctx, policy, protocols, error)
}

/// The records a local run writes when every call of `unit` fails with
/// `error` (a unit or result too large to travel), under `policy`.
///
/// # Errors
/// [`UnitError::Fatal`] under the fatal policy.
pub fn unit_error_records(
    unit: &WorkUnit,
    ctx: &CallContext,
    policy: FailurePolicy,
    protocols: Protocols,
    error: AdapterError,
) -> Result<Vec<UnitRecord>, UnitError> {
    let mut adapter = Unreachable { protocols, error };
    execute_work_unit(&mut adapter, unit, ctx, policy, &SystemClock)
}

#[cfg(test)]
mod tests {
    use sandloop_core::episode::units::{EpisodeGroup, ExecutionUnit};
    use sandloop_core::harness::work::StandaloneItem;
    use serde_json::json;

    use super::*;

    fn item(value: serde_json::Value) -> Item {
        serde_json::from_value(value).unwrap()
    }

    fn ctx() -> CallContext {
        CallContext {
            arm: "main".into(),
            epoch: 2,
            branch_id: "queue_worker_01".into(),
            execution_group_id: None,
        }
    }

    #[test]
    fn a_lost_plain_item_becomes_one_retryable_error_record() {
        let unit = WorkUnit::Standalone(StandaloneItem::new(item(
            json!({"item_id": "a", "family": "f"}),
        )));
        let records = lost_unit_records(
            &unit,
            &ctx(),
            FailurePolicy::Record,
            Protocols {
                execute: true,
                ..Protocols::default()
            },
            "a unit started 4 times without a result".into(),
        )
        .unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].to_map()["item_id"], "a");
        assert_eq!(
            records[0].to_map()["adapter_error"]["type"],
            "instantiation"
        );
        assert_eq!(records[0].to_map()["retryable_infra_error"], true);
        let first = records[0].to_map();
        let message = first["adapter_error"]["message"].as_str().unwrap();
        assert!(message.contains("started 4 times"), "{message}");
    }

    #[test]
    fn a_lost_group_is_recorded_as_its_prefix_failing_and_the_fatal_policy_stops() {
        let unit = WorkUnit::Episode(ExecutionUnit::Group(EpisodeGroup {
            execution_group_id: "main:epoch-2:group-0001".into(),
            seed_item_id: "s".into(),
            items: vec![
                item(json!({"item_id": "s", "family": "f"})),
                item(json!({"item_id": "v", "family": "f", "is_variant": true,
                            "seed_item_id": "s"})),
            ],
            concurrency_keys: vec!["f".into()],
        }));
        let protocols = Protocols {
            episode_groups: true,
            ..Protocols::default()
        };
        let records = lost_unit_records(
            &unit,
            &ctx(),
            FailurePolicy::Record,
            protocols,
            "lost".into(),
        )
        .unwrap();
        // What a local run writes when a group's prefix cannot be prepared.
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].to_map()["record_kind"], "shared_prefix");
        assert_eq!(records[0].to_map()["episode_stage"], "prepare");
        assert_eq!(
            records[0].to_map()["adapter_error"]["type"],
            "instantiation"
        );
        assert_eq!(records[0].to_map()["adapter_error"]["message"], "lost");
        let fatal = lost_unit_records(
            &unit,
            &ctx(),
            FailurePolicy::Fatal,
            protocols,
            "lost".into(),
        )
        .unwrap_err();
        assert!(matches!(fatal, UnitError::Fatal(_)), "{fatal}");
    }
}
