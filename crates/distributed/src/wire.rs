//! What travels through NATS: a unit of work from the coordinator to the
//! workers ([`UnitMessage`]), what a worker sends back ([`UnitResult`]),
//! and a worker's answer to the coordinator's roll call ([`WorkerHello`]).
//! All JSON, versioned by [`WIRE_VERSION`]; a message of another version
//! is refused by name rather than half-read.

use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item, Record};
use sandloop_core::episode::policy::{FailurePolicy, FatalError};
use sandloop_core::episode::units::{EpisodeGroup, ExecutionUnit, InvalidUnit};
use sandloop_core::harness::work::{StandaloneItem, WorkUnit};
use sandloop_core::replay::Fidelity;
use sandloop_core::replay::metrics::ReplayTotals;
use sandloop_sandbox::CallLines;
use serde::{Deserialize, Serialize};

/// The version of every message below; bumped on any incompatible change.
pub const WIRE_VERSION: u32 = 4;

/// The sandbox limits a run sets for every instance (the run's flags of
/// the same names); a worker runs the unit under exactly these, once they
/// pass [`SandboxLimits::validate`].
pub use sandloop_core::limits::SandboxLimits;

/// How a unit of a run with replay points runs its groups (the run's
/// flags of the same names): the worker captures each group's point, runs
/// its suffixes (as isolated children when `child_workers` > 0, forked by
/// state transfer) and sends the points back in `ReplayShipment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaySettings {
    /// Fidelity a restored suffix needs to be promotion eligible
    /// (`--replay-minimum-fidelity`).
    pub minimum_fidelity: Fidelity,
    /// Threads a group's isolated children run on (`--child-workers`).
    pub child_workers: usize,
}

/// What a unit's groups left of their replay points on the worker: each
/// point's `replay-points.jsonl` line, whose `durable_state` names the
/// sha256 of its state and items objects in the replay-states bucket
/// ([`crate::transport::STATES_BUCKET`]), the unit's replay metrics, and
/// what the worker could not write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayShipment {
    /// The points' lines ([`sandloop_core::replay::durable::PointLine::to_record`]).
    pub points: Vec<serde_json::Map<String, serde_json::Value>>,
    /// The unit's replay counters and durations.
    pub metrics: ReplayTotals,
    /// Why a point could not be made durable on the worker.
    pub errors: Vec<String>,
}

/// A guest path a unit needs (the GUEST part of the run's
/// `--dir HOST::GUEST[:ro]`): only a worker offering that guest path, and
/// write access when `read_only` is false, runs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestNeed {
    /// The path the guest opens, e.g. `/docs`.
    pub guest: String,
    /// True when read access is enough.
    pub read_only: bool,
}

impl GuestNeed {
    /// `guest`, read-only when `read_only`.
    pub fn new(guest: impl Into<String>, read_only: bool) -> Self {
        Self {
            guest: guest.into(),
            read_only,
        }
    }
}

/// The work of one unit, as [`WorkUnit`] holds it (a stored group's items
/// already read by the coordinator).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UnitBody {
    /// An episode group: the seed first, then its variants.
    Group {
        /// `{arm}:epoch-{epoch}:group-{NNNN}`.
        execution_group_id: String,
        /// The seed's `item_id`.
        seed_item_id: String,
        /// The seed, then its variants.
        items: Vec<Item>,
        /// The queue's keys for the group.
        concurrency_keys: Vec<String>,
    },
    /// An item that cannot be grouped (resolved by the failure policy).
    Invalid {
        /// The item as queued.
        item: Item,
        /// Why it cannot run.
        reason: String,
        /// The item's keys.
        concurrency_keys: Vec<String>,
    },
    /// One plain item (adapters without episode groups).
    Standalone {
        /// The item.
        item: Item,
    },
}

impl UnitBody {
    /// The body of an in-memory unit (`Stored` groups are loaded by the
    /// caller first and passed as `Episode`).
    pub fn of(unit: &ExecutionUnit) -> Self {
        match unit {
            ExecutionUnit::Group(group) => UnitBody::Group {
                execution_group_id: group.execution_group_id.clone(),
                seed_item_id: group.seed_item_id.clone(),
                items: group.items.clone(),
                concurrency_keys: group.concurrency_keys.clone(),
            },
            ExecutionUnit::Invalid(invalid) => UnitBody::Invalid {
                item: invalid.item.clone(),
                reason: invalid.reason.clone(),
                concurrency_keys: invalid.concurrency_keys.clone(),
            },
        }
    }

    /// The body of a plain item.
    pub fn standalone(item: &StandaloneItem) -> Self {
        UnitBody::Standalone {
            item: item.item.clone(),
        }
    }

    /// The [`WorkUnit`] a worker runs.
    pub fn into_work_unit(self) -> WorkUnit {
        match self {
            UnitBody::Group {
                execution_group_id,
                seed_item_id,
                items,
                concurrency_keys,
            } => WorkUnit::Episode(ExecutionUnit::Group(EpisodeGroup {
                execution_group_id,
                seed_item_id,
                items,
                concurrency_keys,
            })),
            UnitBody::Invalid {
                item,
                reason,
                concurrency_keys,
            } => WorkUnit::Episode(ExecutionUnit::Invalid(InvalidUnit {
                item,
                reason,
                concurrency_keys,
            })),
            UnitBody::Standalone { item } => WorkUnit::Standalone(StandaloneItem::new(item)),
        }
    }
}

/// One unit of work on the units stream. A field this worker does not know
/// is refused rather than ignored: it may be a need the worker would not
/// meet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitMessage {
    /// [`WIRE_VERSION`].
    pub version: u32,
    /// The coordinator's run id (one per `sandloop run --nats` process).
    pub run_id: String,
    /// Unique within the run: `{run_id}.e{epoch}.u{index}`.
    pub unit_id: String,
    /// The subject the worker publishes its [`UnitResult`] to.
    pub results_subject: String,
    /// The component's sha256 (lowercase hex), its object-store key.
    pub component_sha256: String,
    /// The sandbox limits.
    pub limits: SandboxLimits,
    /// Guest paths the unit needs from the worker's own grants.
    pub needs: Vec<GuestNeed>,
    /// Environment variables the unit needs from the worker's own
    /// environment (the run's `--env NAME`): only a worker offering each
    /// (`sandloop worker --env NAME`) runs it, with its own values.
    #[serde(default)]
    pub env: Vec<String>,
    /// Arm name.
    pub arm: String,
    /// 1-based epoch.
    pub epoch: u32,
    /// The coordinator's lane that dispatched the unit.
    pub branch_id: String,
    /// True under `--failure-policy fatal`.
    pub fatal: bool,
    /// Replay settings; `None` runs the unit without replay points.
    #[serde(default)]
    pub replay: Option<ReplaySettings>,
    /// The work.
    pub body: UnitBody,
}

impl UnitMessage {
    /// The call context the unit runs under (the coordinator's lane).
    pub fn context(&self) -> CallContext {
        CallContext {
            arm: self.arm.clone(),
            epoch: self.epoch,
            branch_id: self.branch_id.clone(),
            execution_group_id: None,
        }
    }

    /// The unit's failure policy.
    pub fn policy(&self) -> FailurePolicy {
        if self.fatal {
            FailurePolicy::Fatal
        } else {
            FailurePolicy::Record
        }
    }
}

/// An [`AdapterError`] on the wire (`type` by its snake_case name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireAdapterError {
    /// [`ErrorType::as_str`].
    #[serde(rename = "type")]
    pub error_type: String,
    /// The adapter-chosen kind.
    pub kind: String,
    /// The message.
    pub message: String,
    /// Whether a retry could succeed.
    pub retryable_infra_error: bool,
    /// Fields for the error record.
    pub record_fields: Option<Record>,
}

/// Every [`ErrorType`], to read a type back by its name.
const ERROR_TYPES: [ErrorType; 14] = [
    ErrorType::AdapterError,
    ErrorType::InvalidItem,
    ErrorType::InvalidOutput,
    ErrorType::OutputTooLarge,
    ErrorType::Deadline,
    ErrorType::MemoryLimit,
    ErrorType::FuelExhausted,
    ErrorType::StackOverflow,
    ErrorType::Trap,
    ErrorType::MissingExport,
    ErrorType::InstanceLost,
    ErrorType::Instantiation,
    ErrorType::ReplayContract,
    ErrorType::RiskDenied,
];

impl From<&AdapterError> for WireAdapterError {
    fn from(error: &AdapterError) -> Self {
        Self {
            error_type: error.error_type.as_str().to_owned(),
            kind: error.kind.clone(),
            message: error.message.clone(),
            retryable_infra_error: error.retryable_infra_error,
            record_fields: error.record_fields.as_deref().cloned(),
        }
    }
}

impl WireAdapterError {
    /// The [`AdapterError`] back; an unknown type name is an error naming it.
    pub fn into_adapter_error(self) -> Result<AdapterError, String> {
        let error_type = ERROR_TYPES
            .into_iter()
            .find(|known| known.as_str() == self.error_type)
            .ok_or_else(|| format!("unknown adapter_error.type {:?}", self.error_type))?;
        let mut error = AdapterError::new(error_type, self.message);
        error.kind = self.kind;
        error.retryable_infra_error = self.retryable_infra_error;
        error.record_fields = self.record_fields.map(Box::new);
        Ok(error)
    }
}

/// How a unit ended on a worker (or that it starts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Sent before the worker runs the unit: the coordinator counts the
    /// starts of each unit and gives up one that keeps starting without a
    /// result ([`crate::ledger::MAX_STARTS`]).
    Started,
    /// The unit ran: its records, in order.
    Records {
        /// The records.
        records: Vec<Record>,
    },
    /// The failure policy stopped the arm ([`FatalError`]).
    Fatal {
        /// The primary failure.
        error: WireAdapterError,
        /// A chained cleanup failure.
        cause: Option<WireAdapterError>,
    },
    /// The worker could not run the unit at all (its component failed its
    /// digest check or did not compile); the run stops with `reason`.
    Failed {
        /// Why, naming the worker's file or object.
        reason: String,
    },
    /// The unit ran, but its result is larger than the server takes: its
    /// items get `output_too_large` error records, under the run's failure
    /// policy.
    TooLarge {
        /// Sizes, and the server setting to raise.
        reason: String,
    },
}

impl Outcome {
    /// The wire form of a fatal error.
    pub fn fatal(error: &FatalError) -> Self {
        Outcome::Fatal {
            error: (&error.error).into(),
            cause: error.cause.as_deref().map(Into::into),
        }
    }
}

/// What a worker publishes for a delivery it runs: that it starts, then
/// how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitResult {
    /// [`WIRE_VERSION`].
    pub version: u32,
    /// The unit's [`UnitMessage::unit_id`].
    pub unit_id: String,
    /// Which delivery of the unit this was (1 for the first; JetStream's
    /// delivery count).
    pub attempt: u64,
    /// The worker's name.
    pub worker: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The lines its calls added to the traces and adapter-output files.
    pub calls: Vec<CallLines>,
    /// The unit's replay points, for a unit run with [`ReplaySettings`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayShipment>,
}

/// A worker's answer to the coordinator's roll call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHello {
    /// [`WIRE_VERSION`].
    pub version: u32,
    /// The worker's name (`--name`, else host name and process id).
    pub worker: String,
    /// Lanes (units it runs at once).
    pub lanes: usize,
    /// The guest paths it offers.
    pub offers: Vec<GuestNeed>,
    /// The environment variables it offers (names).
    #[serde(default)]
    pub env: Vec<String>,
}

impl WorkerHello {
    /// Whether this worker offers every one of `needs` and every variable
    /// of `env`.
    pub fn meets(&self, needs: &[GuestNeed], env: &[String]) -> bool {
        meets(&self.offers, needs) && offers_env(&self.env, env)
    }
}

/// Guest paths (`/docs:ro`) and variables (`$NAME`) as a list for people,
/// or `no directories` when there are none.
pub fn shown_offers(grants: &[GuestNeed], env: &[String]) -> String {
    let mut parts: Vec<String> = grants
        .iter()
        .map(|grant| {
            format!(
                "{}{}",
                grant.guest,
                if grant.read_only { ":ro" } else { "" }
            )
        })
        .collect();
    parts.extend(env.iter().map(|name| format!("${name}")));
    if parts.is_empty() {
        "no directories".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Whether `offered` holds every name of `needed`.
pub fn offers_env(offered: &[String], needed: &[String]) -> bool {
    needed.iter().all(|name| offered.contains(name))
}

/// Whether `offers` cover `needs`: each needed guest path is offered, with
/// write access where the need is not read-only.
pub fn meets(offers: &[GuestNeed], needs: &[GuestNeed]) -> bool {
    needs.iter().all(|need| {
        offers
            .iter()
            .any(|offer| offer.guest == need.guest && (need.read_only || !offer.read_only))
    })
}

/// Reads a message of type `T`, refusing another [`WIRE_VERSION`].
///
/// # Errors
/// A message that is not JSON of `T`'s shape (the serde error's path and
/// position), or of another version.
pub fn decode<T: serde::de::DeserializeOwned>(what: &str, payload: &[u8]) -> Result<T, String> {
    #[derive(Deserialize)]
    struct Versioned {
        version: u32,
    }
    let versioned: Versioned = serde_json::from_slice(payload)
        .map_err(|error| format!("{what}: not a sandloop message: {error}"))?;
    if versioned.version != WIRE_VERSION {
        return Err(format!(
            "{what}: wire version {} (this sandloop speaks {WIRE_VERSION}); run the same sandloop \
             version on the coordinator and the workers",
            versioned.version
        ));
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(payload);
    serde_path_to_error::deserialize(deserializer)
        .map_err(|error| format!("{what}: field {}: {}", error.path(), error.inner()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj<T: From<serde_json::Map<String, serde_json::Value>>>(value: serde_json::Value) -> T {
        match value {
            serde_json::Value::Object(map) => T::from(map),
            _ => unreachable!(),
        }
    }

    fn unit(body: UnitBody) -> UnitMessage {
        UnitMessage {
            version: WIRE_VERSION,
            run_id: "r1".into(),
            unit_id: "r1.e1.u0".into(),
            results_subject: "sandloop.results.r1".into(),
            component_sha256: "ab".repeat(32),
            limits: SandboxLimits {
                max_memory_mib: 64,
                call_timeout: std::time::Duration::from_millis(2500),
                fuel: Some(1_000_000),
                max_output_bytes: 1 << 20,
                max_guest_output_bytes: 64 << 10,
                max_open_files: 256,
            },
            needs: vec![GuestNeed::new("/docs", true)],
            env: vec!["API_TOKEN".into()],
            arm: "main".into(),
            epoch: 3,
            branch_id: "queue_worker_02".into(),
            fatal: true,
            replay: Some(ReplaySettings {
                minimum_fidelity: Fidelity::SemanticEquivalent,
                child_workers: 2,
            }),
            body,
        }
    }

    #[test]
    fn every_unit_body_round_trips_to_the_same_work_unit() {
        let group = ExecutionUnit::Group(EpisodeGroup {
            execution_group_id: "main:epoch-3:group-0001".into(),
            seed_item_id: "s".into(),
            items: vec![obj(json!({"item_id": "s", "n": 1.5}))],
            concurrency_keys: vec!["k".into()],
        });
        let invalid = ExecutionUnit::Invalid(InvalidUnit {
            item: obj(json!({"item_id": ""})),
            reason: "empty".into(),
            concurrency_keys: vec![],
        });
        for execution in [group, invalid] {
            let message = unit(UnitBody::of(&execution));
            let bytes = serde_json::to_vec(&message).unwrap();
            let back: UnitMessage = decode("unit", &bytes).unwrap();
            assert_eq!(back, message);
            match back.body.into_work_unit() {
                WorkUnit::Episode(unit) => assert_eq!(unit, execution),
                other => panic!("expected an episode unit, got {other:?}"),
            }
        }
        let item = StandaloneItem::new(obj(json!({"item_id": "p", "concurrency_key": "ck"})));
        let message = unit(UnitBody::standalone(&item));
        let back: UnitMessage = decode("unit", &serde_json::to_vec(&message).unwrap()).unwrap();
        match back.body.into_work_unit() {
            WorkUnit::Standalone(back) => assert_eq!(back, item),
            other => panic!("expected a standalone unit, got {other:?}"),
        }
        assert_eq!(message.policy(), FailurePolicy::Fatal);
        assert_eq!(message.context().branch_id, "queue_worker_02");
    }

    #[test]
    fn results_round_trip_with_errors_and_call_lines() {
        let mut error = AdapterError::new(ErrorType::FuelExhausted, "out of fuel");
        error.kind = "k".into();
        error.retryable_infra_error = true;
        error.record_fields = Some(Box::new(obj(json!({"replay": {"x": 1}}))));
        let cause = AdapterError::new(ErrorType::RiskDenied, "denied");
        let fatal = FatalError::chained(error.clone(), cause.clone());
        let result = UnitResult {
            version: WIRE_VERSION,
            unit_id: "r1.e1.u0".into(),
            attempt: 2,
            worker: "w1".into(),
            outcome: Outcome::fatal(&fatal),
            calls: vec![CallLines {
                epoch: 1,
                traces: vec![r#"{"a":1}"#.into()],
                output: None,
            }],
            replay: Some(ReplayShipment {
                points: vec![obj(json!({"replay_point_id": "p"}))],
                metrics: ReplayTotals {
                    counts: [("capture_attempt_count".to_owned(), 1)].into(),
                    ..ReplayTotals::default()
                },
                errors: vec!["disk full".into()],
            }),
        };
        let back: UnitResult = decode("result", &serde_json::to_vec(&result).unwrap()).unwrap();
        assert_eq!(back, result);
        let Outcome::Fatal {
            error: wire,
            cause: Some(wire_cause),
        } = back.outcome
        else {
            panic!("a fatal outcome");
        };
        assert_eq!(wire.into_adapter_error().unwrap(), error);
        assert_eq!(wire_cause.into_adapter_error().unwrap(), cause);
    }

    #[test]
    fn every_error_type_is_read_back_by_name_and_an_unknown_one_is_refused() {
        for error_type in ERROR_TYPES {
            let wire = WireAdapterError::from(&AdapterError::new(error_type, "m"));
            assert_eq!(wire.into_adapter_error().unwrap().error_type, error_type);
        }
        let mut wire = WireAdapterError::from(&AdapterError::new(ErrorType::Trap, "m"));
        wire.error_type = "meltdown".into();
        assert!(wire.into_adapter_error().unwrap_err().contains("meltdown"));
    }

    #[test]
    fn another_wire_version_or_shape_is_refused_by_name() {
        let error = decode::<UnitResult>("result", br#"{"version": 99}"#).unwrap_err();
        assert!(error.contains("wire version 99"), "{error}");
        let error = decode::<UnitResult>("result", br#"{"version": 1}"#).unwrap_err();
        assert!(
            error.contains("wire version 1 (this sandloop speaks 4)"),
            "{error}"
        );
        let shape = format!(r#"{{"version": {WIRE_VERSION}, "unit_id": 5}}"#);
        let error = decode::<UnitResult>("result", shape.as_bytes()).unwrap_err();
        assert!(error.contains("unit_id"), "{error}");
        assert!(decode::<UnitResult>("result", b"not json").is_err());
    }

    #[test]
    fn grants_are_met_by_the_same_guest_path_with_enough_access() {
        let need = GuestNeed::new;
        let offers = [need("/docs", true), need("/out", false)];
        assert!(meets(&offers, &[]));
        assert!(meets(&offers, &[need("/docs", true), need("/out", true)]));
        assert!(meets(&offers, &[need("/out", false)]));
        assert!(
            !meets(&offers, &[need("/docs", false)]),
            "read-only offer, write need"
        );
        assert!(!meets(&offers, &[need("/data", true)]), "not offered");
        assert!(!meets(&[], &[need("/docs", true)]));
        let hello = WorkerHello {
            version: WIRE_VERSION,
            worker: "w".into(),
            lanes: 1,
            offers: offers.to_vec(),
            env: vec!["API_TOKEN".into()],
        };
        assert!(hello.meets(&[need("/docs", true)], &["API_TOKEN".into()]));
        assert!(hello.meets(&[], &[]));
        assert!(
            !hello.meets(&[], &["HOME".into()]),
            "a variable not offered"
        );
        assert!(!hello.meets(&[need("/data", true)], &["API_TOKEN".into()]));
    }

    mod properties {
        use proptest::prelude::*;
        use sandloop_core::hostile_inputs::{config, mutate_bytes, value_not_of};

        use super::*;

        fn valid_unit() -> serde_json::Value {
            serde_json::to_value(unit(UnitBody::Standalone {
                item: obj(json!({"item_id": "a"})),
            }))
            .unwrap()
        }

        proptest! {
            #![proptest_config(config(128))]

            #[test]
            fn prop_a_damaged_message_never_panics_and_says_what_it_was(
                bytes in mutate_bytes(serde_json::to_vec(&valid_unit()).unwrap(), false),
            ) {
                if let Err(error) = decode::<UnitMessage>("a unit", &bytes) {
                    prop_assert!(error.starts_with("a unit: "), "{}", error);
                }
                if let Err(error) = decode::<UnitResult>("a unit result", &bytes) {
                    prop_assert!(error.starts_with("a unit result: "), "{}", error);
                }
                if let Err(error) = decode::<WorkerHello>("a worker's answer", &bytes) {
                    prop_assert!(error.starts_with("a worker's answer: "), "{}", error);
                }
            }

            #[test]
            fn prop_a_field_of_the_wrong_type_is_named(
                field in prop::sample::select(vec!["unit_id", "run_id", "arm", "results_subject"]),
                value in value_not_of(&["string"]),
            ) {
                let mut message = valid_unit();
                message[field] = value;
                let error = decode::<UnitMessage>("a unit", message.to_string().as_bytes())
                    .unwrap_err();
                prop_assert!(error.contains(field), "{}", error);
            }
        }
    }
}
