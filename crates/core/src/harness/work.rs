//! What a queue lane runs: an episode unit, or one plain item for adapters
//! without episode groups. Applies the failure policy the way the
//! reference's `run_queue_epoch` worker does for plain `execute`.

use serde_json::Value;

use crate::episode::adapter::{AdapterError, CallContext, EpisodeAdapter, ErrorType, Item, Record};
use crate::episode::clock::Clock;
use crate::episode::group::execute_episode_group;
use crate::episode::policy::{FailurePolicy, FatalError};
use crate::episode::records::{adapter_error_record, quarantine_host_owned, set_field};
use crate::episode::stored::StoredGroup;
use crate::episode::unit_record::UnitRecord;
use crate::episode::units::{ExecutionUnit, item_concurrency_keys};
use crate::episode::value::{json_f64, truthy};

use super::queue::QueueUnit;

/// One item run with plain `execute` (arms whose adapter has no episode
/// groups).
#[derive(Clone, Debug, PartialEq)]
pub struct StandaloneItem {
    /// The queued item.
    pub item: Item,
    /// Its [`item_concurrency_keys`].
    pub concurrency_keys: Vec<String>,
}

impl StandaloneItem {
    /// Wraps `item`, computing its keys.
    pub fn new(item: Item) -> Self {
        let concurrency_keys = item_concurrency_keys(&item);
        Self {
            item,
            concurrency_keys,
        }
    }
}

/// One unit of an epoch's queue.
#[derive(Debug)]
pub enum WorkUnit {
    /// An episode group or invalid unit (episode mode).
    Episode(ExecutionUnit),
    /// An episode group whose items are still in their items file: read
    /// when a lane runs it (episode mode, seeds from `--items`).
    Stored(StoredGroup),
    /// A plain item (standalone mode).
    Standalone(StandaloneItem),
}

impl QueueUnit for WorkUnit {
    fn concurrency_keys(&self) -> &[String] {
        match self {
            WorkUnit::Episode(unit) => unit.concurrency_keys(),
            WorkUnit::Stored(group) => &group.concurrency_keys,
            WorkUnit::Standalone(item) => &item.concurrency_keys,
        }
    }
}

/// Runs one plain item (the reference's queue worker around `execute`).
///
/// Success: the adapter's record with `item_id`, `family`, `is_variant`
/// and (for variants) `variant_spec_id` filled in when missing, and
/// `duration_minutes` set to the host-measured call time. Failure under
/// [`FailurePolicy::Record`]: an error record; under
/// [`FailurePolicy::Fatal`]: `Err`. An adapter without plain `execute`
/// ([`crate::episode::adapter::Protocols::execute`] false) is not called and
/// fails with [`ErrorType::MissingExport`].
pub fn execute_standalone_item<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    item: &Item,
    ctx: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Record, FatalError> {
    let started = clock.now();
    let outcome = if adapter.protocols().execute {
        adapter.execute(item, ctx)
    } else {
        Err(AdapterError::new(
            ErrorType::MissingExport,
            "the adapter has no plain execute export",
        ))
    };
    let minutes = clock.minutes_since(started);
    match outcome {
        Ok(mut record) => {
            quarantine_host_owned(&mut record);
            set_if_missing(&mut record, "item_id", item.get("item_id"));
            set_if_missing(&mut record, "family", item.get("family"));
            let is_variant = truthy(item.get("is_variant"));
            if !record.contains_key("is_variant") {
                set_field(&mut record, "is_variant", Value::Bool(is_variant));
            }
            if is_variant && !record.contains_key("variant_spec_id") {
                let spec_id = match item.get("variant_spec") {
                    Some(Value::Object(spec)) => spec.get("spec_id").cloned(),
                    _ => None,
                };
                set_field(
                    &mut record,
                    "variant_spec_id",
                    spec_id.unwrap_or(Value::Null),
                );
            }
            set_field(&mut record, "duration_minutes", json_f64(minutes));
            Ok(record)
        }
        Err(error) if policy.is_fatal() => Err(FatalError::new(error)),
        Err(error) => Ok(adapter_error_record(item, &error, minutes)),
    }
}

fn set_if_missing(record: &mut Record, key: &str, value: Option<&Value>) {
    if !record.contains_key(key) {
        record.insert(key.into(), value.cloned().unwrap_or(Value::Null));
    }
}

/// Runs one queue unit on a lane's adapter: episode units through
/// [`execute_episode_group`] (a stored group's items read first), plain
/// items through [`execute_standalone_item`].
///
/// # Errors
/// [`UnitError::Fatal`] as the runtime decides under `policy`;
/// [`UnitError::Read`] when a stored group's items cannot be read back
/// (the items file was changed or removed under the run).
pub fn execute_work_unit<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    unit: &WorkUnit,
    ctx: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Vec<UnitRecord>, UnitError> {
    let ran = match unit {
        WorkUnit::Episode(unit) => execute_episode_group(adapter, unit, ctx, policy, clock),
        WorkUnit::Stored(group) => {
            execute_episode_group(adapter, &load_stored(group)?, ctx, policy, clock)
        }
        WorkUnit::Standalone(item) => {
            execute_standalone_item(adapter, &item.item, ctx, policy, clock)
                .map(|record| vec![record.into()])
        }
    };
    ran.map_err(|fatal| UnitError::Fatal(fatal.at(|| unit.place())))
}

impl WorkUnit {
    /// How a fatal failure names this unit ([`FatalError::place`]): the
    /// group's id, or the item's.
    pub fn place(&self) -> String {
        match self {
            WorkUnit::Episode(ExecutionUnit::Group(group)) => {
                format!("group {:?}", group.execution_group_id)
            }
            WorkUnit::Stored(group) => format!("group {:?}", group.execution_group_id),
            WorkUnit::Episode(ExecutionUnit::Invalid(invalid)) => item_place(&invalid.item),
            WorkUnit::Standalone(item) => item_place(&item.item),
        }
    }
}

/// `item "b"`, `item 5`, or `an item without an item_id`.
fn item_place(item: &Item) -> String {
    match &item.identity().item_id {
        Value::Null => "an item without an item_id".to_owned(),
        Value::String(id) => format!("item {id:?}"),
        other => format!("item {other}"),
    }
}

/// A stored group's items, read back from its items file as an episode
/// unit.
///
/// # Errors
/// [`UnitError::Read`], naming the group and the file, when the items file
/// was changed or removed under the run.
pub fn load_stored(group: &StoredGroup) -> Result<ExecutionUnit, UnitError> {
    group.load().map_err(|source| UnitError::Read {
        context: format!(
            "cannot read the items of {} from {}",
            group.execution_group_id,
            group.path().display()
        ),
        source,
    })
}

/// What a queue lane runs its units on. Every [`EpisodeAdapter`] is one
/// (the unit runs in this process through [`execute_work_unit`]); a
/// transport that runs the unit elsewhere (another machine's sandbox) is
/// another, returning the records that unit produced there. The arm only
/// sees the records, so everything around the lanes (ordering, novelty,
/// checkpoints) stays the same whichever runs them.
pub trait UnitRunner {
    /// Runs `unit` under `ctx` (arm, epoch, lane) and `policy`, returning
    /// its records in the order the unit produced them. Durations are
    /// measured with `clock` where the unit runs in this process.
    ///
    /// # Errors
    /// As [`execute_work_unit`]: [`UnitError::Fatal`] when the failure
    /// policy stops the arm, [`UnitError::Read`] when a stored group's
    /// items cannot be read back; a remote runner also reports its
    /// transport failures as [`UnitError::Remote`].
    fn run_unit(
        &mut self,
        unit: &WorkUnit,
        ctx: &CallContext,
        policy: FailurePolicy,
        clock: &dyn Clock,
    ) -> Result<Vec<UnitRecord>, UnitError>;
}

impl<A: EpisodeAdapter + ?Sized> UnitRunner for A {
    fn run_unit(
        &mut self,
        unit: &WorkUnit,
        ctx: &CallContext,
        policy: FailurePolicy,
        clock: &dyn Clock,
    ) -> Result<Vec<UnitRecord>, UnitError> {
        execute_work_unit(self, unit, ctx, policy, clock)
    }
}

/// Why a lane could not run a unit.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    /// The failure policy stopped the arm.
    #[error(transparent)]
    Fatal(#[from] FatalError),
    /// A stored group's items could not be read back.
    #[error("{context}: {source}")]
    Read {
        /// What was being read.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A runner that sends units elsewhere could not get this one run
    /// (the transport failed, or no worker could take it); the message
    /// says which unit and why.
    #[error("{0}")]
    Remote(String),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::episode::adapter::Protocols;
    use crate::episode::clock::ManualClock;
    use crate::episode::testing::{Script, ScriptedAdapter, obj};

    fn ctx() -> CallContext {
        CallContext {
            arm: "main".into(),
            epoch: 1,
            branch_id: "queue_worker_01".into(),
            execution_group_id: None,
        }
    }

    #[test]
    fn plain_execute_fills_identity_if_missing_and_measures_duration() {
        let clock = Arc::new(ManualClock::new());
        let mut script = Script::standalone();
        script.execute_minutes = 0.75;
        let mut adapter = ScriptedAdapter::new(script).with_clock(Arc::clone(&clock));
        let item = obj(json!({"item_id": "v", "family": "f", "is_variant": true,
                               "variant_spec": {"spec_id": "sp"}}));
        let record =
            execute_standalone_item(&mut adapter, &item, &ctx(), FailurePolicy::Record, &*clock)
                .unwrap();
        // The scripted adapter writes its own (forged) item_id: kept, as
        // the reference only sets missing fields.
        assert_eq!(record["item_id"], json!("forged-by-adapter"));
        assert_eq!(record["family"], json!("f"));
        assert_eq!(record["is_variant"], json!(true));
        assert_eq!(record["variant_spec_id"], json!("sp"));
        assert!((record["duration_minutes"].as_f64().unwrap() - 0.75).abs() < 1e-9);
        assert!(!record.contains_key("record_kind"));
    }

    #[test]
    fn plain_execute_failures_follow_the_policy() {
        let clock = ManualClock::new();
        let mut script = Script::standalone();
        script
            .execute_errors
            .insert("s".into(), AdapterError::new(ErrorType::MemoryLimit, "oom"));
        let mut adapter = ScriptedAdapter::new(script);
        let item = obj(json!({"item_id": "s", "family": "f"}));
        let record =
            execute_standalone_item(&mut adapter, &item, &ctx(), FailurePolicy::Record, &clock)
                .unwrap();
        assert_eq!(record["execution_status"], json!("adapter_error"));
        assert_eq!(record["adapter_error"]["type"], json!("memory_limit"));
        assert_eq!(record["item_id"], json!("s"));
        let fatal =
            execute_standalone_item(&mut adapter, &item, &ctx(), FailurePolicy::Fatal, &clock)
                .unwrap_err();
        assert_eq!(fatal.error.message, "oom");
    }

    #[test]
    fn a_fatal_failure_names_the_item_it_stopped_in() {
        let clock = ManualClock::new();
        let mut script = Script::standalone();
        for id in ["s", "5", ""] {
            script
                .execute_errors
                .insert(id.into(), AdapterError::new(ErrorType::Trap, "boom"));
        }
        let mut adapter = ScriptedAdapter::new(script);
        for (item, place) in [
            (json!({"item_id": "s"}), "item \"s\""),
            (json!({"item_id": 5}), "item 5"),
            (json!({"family": "f"}), "an item without an item_id"),
        ] {
            let unit = WorkUnit::Standalone(StandaloneItem::new(obj(item)));
            let Err(UnitError::Fatal(fatal)) =
                execute_work_unit(&mut adapter, &unit, &ctx(), FailurePolicy::Fatal, &clock)
            else {
                panic!("{place}: expected a fatal failure");
            };
            assert_eq!(fatal.place.as_deref(), Some(place));
            assert!(
                fatal.to_string().starts_with(&format!("{place}: ")),
                "{fatal}"
            );
        }
    }

    #[test]
    fn an_adapter_without_execute_is_not_called() {
        let clock = ManualClock::new();
        let mut script = Script::standalone();
        script.protocols = Protocols {
            execute: false,
            ..Protocols::default()
        };
        let mut adapter = ScriptedAdapter::new(script);
        let item = obj(json!({"item_id": "s"}));
        let unit = WorkUnit::Standalone(StandaloneItem::new(item));
        let records =
            execute_work_unit(&mut adapter, &unit, &ctx(), FailurePolicy::Record, &clock).unwrap();
        assert_eq!(
            records[0].to_map()["adapter_error"]["type"],
            json!("missing_export")
        );
        assert!(adapter.ops().is_empty());
    }

    #[test]
    fn standalone_items_lock_their_own_keys() {
        let unit = WorkUnit::Standalone(StandaloneItem::new(obj(
            json!({"item_id": "s", "family": "f", "concurrency_key": "ck"}),
        )));
        assert_eq!(unit.concurrency_keys(), ["ck"]);
    }
}
