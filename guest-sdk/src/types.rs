//! Serde-friendly values that cross the boundary: items, records, variant
//! specs, the call context, and declared errors.

use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object (`serde_json::Map<String, Value>`).
pub type Object = Map<String, Value>;

fn parse_object(text: &str, what: &str, kind: &str) -> Result<Object, Error> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Error::new(
            kind,
            format!(
                "{what} must be a JSON object, got {}",
                json_type_name(&other)
            ),
        )),
        Err(err) => Err(Error::new(kind, format!("{what} is not valid JSON: {err}"))),
    }
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn str_of<'a>(map: &'a Object, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

macro_rules! object_newtype {
    ($name:ident) => {
        impl Deref for $name {
            type Target = Object;
            fn deref(&self) -> &Object {
                &self.0
            }
        }
        impl DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Object {
                &mut self.0
            }
        }
        impl From<Object> for $name {
            fn from(map: Object) -> Self {
                Self(map)
            }
        }
        impl From<$name> for Object {
            fn from(value: $name) -> Object {
                value.0
            }
        }
        impl From<$name> for Value {
            fn from(value: $name) -> Value {
                Value::Object(value.0)
            }
        }
        impl $name {
            /// The underlying JSON object.
            pub fn into_inner(self) -> Object {
                self.0
            }
            /// Serialise to JSON text (what crosses the boundary).
            pub fn to_json(&self) -> String {
                // A `Map<String, Value>` always serialises.
                serde_json::to_string(&self.0).unwrap_or_else(|_| String::from("{}"))
            }
            /// String field `key`, if present and a string.
            pub fn str_field(&self, key: &str) -> Option<&str> {
                str_of(&self.0, key)
            }
            /// Builder: set `key` to `value`.
            pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
                self.0.insert(key.into(), value.into());
                self
            }
            /// Set `key` to `value`.
            pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
                self.0.insert(key.into(), value.into());
                self
            }
        }
    };
}

/// A work item: a JSON object with `item_id`, `family`, `text`, optional
/// `payload`; variants also carry `is_variant`, `variant_spec` and
/// `seed_item_id`. Any other field is adapter-private and passes through.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Item(pub Object);
object_newtype!(Item);

impl Item {
    /// A seed item with the three required fields.
    pub fn new(
        item_id: impl Into<String>,
        family: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        let mut map = Object::new();
        map.insert("item_id".into(), Value::String(item_id.into()));
        map.insert("family".into(), Value::String(family.into()));
        map.insert("text".into(), Value::String(text.into()));
        Item(map)
    }
    /// Parse JSON text; anything but a JSON object is an `invalid-item` error.
    pub fn from_json(text: &str) -> Result<Self, Error> {
        parse_object(text, "item", Error::INVALID_ITEM).map(Item)
    }
    /// `item_id`, or `""` when missing.
    pub fn item_id(&self) -> &str {
        self.str_field("item_id").unwrap_or("")
    }
    /// `family`, or `""` when missing.
    pub fn family(&self) -> &str {
        self.str_field("family").unwrap_or("")
    }
    /// `text`, or `""` when missing.
    pub fn text(&self) -> &str {
        self.str_field("text").unwrap_or("")
    }
    /// True for a compiled variant (`is_variant` is truthy).
    pub fn is_variant(&self) -> bool {
        match self.0.get("is_variant") {
            Some(Value::Bool(b)) => *b,
            Some(Value::Null) | None => false,
            Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
        }
    }
    /// `seed_item_id` of a variant.
    pub fn seed_item_id(&self) -> Option<&str> {
        self.str_field("seed_item_id")
    }
    /// The attached `variant_spec`, if it is an object.
    pub fn variant_spec(&self) -> Option<VariantSpec> {
        match self.0.get("variant_spec") {
            Some(Value::Object(map)) => Some(VariantSpec(map.clone())),
            _ => None,
        }
    }
    /// `payload`, if it is an object.
    pub fn payload(&self) -> Option<&Object> {
        self.0.get("payload").and_then(Value::as_object)
    }
}

/// An observation record: `observation_keys`, `weighted_flags`, `accepted`
/// plus any adapter-private fields. The host sets `item_id`, `family`,
/// `is_variant`, `variant_spec_id`, group annotations and durations itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Record(pub Object);
object_newtype!(Record);

impl Default for Record {
    fn default() -> Self {
        Self::new()
    }
}

impl Record {
    /// `{"observation_keys": [], "weighted_flags": {}, "accepted": true}`.
    pub fn new() -> Self {
        let mut map = Object::new();
        map.insert("observation_keys".into(), Value::Array(Vec::new()));
        map.insert("weighted_flags".into(), Value::Object(Object::new()));
        map.insert("accepted".into(), Value::Bool(true));
        Record(map)
    }
    /// A new record holding `keys` (duplicates dropped, order kept).
    pub fn with_keys<I, K>(keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let mut record = Self::new();
        record.observe_all(keys);
        record
    }
    /// Parse JSON text; anything but a JSON object is an `invalid-record` error.
    pub fn from_json(text: &str) -> Result<Self, Error> {
        parse_object(text, "record", "invalid-record").map(Record)
    }
    fn keys_mut(&mut self) -> &mut Vec<Value> {
        let slot = self
            .0
            .entry("observation_keys")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !slot.is_array() {
            *slot = Value::Array(Vec::new());
        }
        slot.as_array_mut().expect("array")
    }
    /// Add one observation key (kept once; order of first sight).
    pub fn observe(&mut self, key: impl Into<String>) -> &mut Self {
        let key = key.into();
        let keys = self.keys_mut();
        if !keys.iter().any(|k| k.as_str() == Some(key.as_str())) {
            keys.push(Value::String(key));
        }
        self
    }
    /// Add several observation keys.
    pub fn observe_all<I, K>(&mut self, keys: I) -> &mut Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        for key in keys {
            self.observe(key);
        }
        self
    }
    /// Set a weighted flag (`weighted_flags[name] = weight`); the novelty
    /// ledger credits `weight` the first time a family sees `name`.
    pub fn flag(&mut self, name: impl Into<String>, weight: f64) -> &mut Self {
        let slot = self
            .0
            .entry("weighted_flags")
            .or_insert_with(|| Value::Object(Object::new()));
        if !slot.is_object() {
            *slot = Value::Object(Object::new());
        }
        slot.as_object_mut()
            .expect("object")
            .insert(name.into(), Value::from(weight));
        self
    }
    /// Set `accepted`.
    pub fn set_accepted(&mut self, accepted: bool) -> &mut Self {
        self.0.insert("accepted".into(), Value::Bool(accepted));
        self
    }
    /// The observation keys that are strings.
    pub fn observation_keys(&self) -> Vec<&str> {
        self.0
            .get("observation_keys")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
    /// `weighted_flags`, if it is an object.
    pub fn weighted_flags(&self) -> Option<&Object> {
        self.0.get("weighted_flags").and_then(Value::as_object)
    }
    /// `accepted` (false when missing).
    pub fn is_accepted(&self) -> bool {
        self.0
            .get("accepted")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// One entry of the variant catalog (`loopx_explore_variant_catalog_v0`):
/// `spec_id`, `seed_family`, `intent`, `ops` (adapter-defined), `key_prefix`,
/// optional `seed_item_id` and `priority`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VariantSpec(pub Object);
object_newtype!(VariantSpec);

impl VariantSpec {
    /// Parse JSON text; anything but a JSON object is an `invalid-spec` error.
    pub fn from_json(text: &str) -> Result<Self, Error> {
        parse_object(text, "variant spec", Error::INVALID_SPEC).map(VariantSpec)
    }
    /// `spec_id`, or `""` when missing.
    pub fn spec_id(&self) -> &str {
        self.str_field("spec_id").unwrap_or("")
    }
    /// `seed_family`, or `""` when missing.
    pub fn seed_family(&self) -> &str {
        self.str_field("seed_family").unwrap_or("")
    }
    /// `intent`, or `""` when missing.
    pub fn intent(&self) -> &str {
        self.str_field("intent").unwrap_or("")
    }
    /// `key_prefix`, or `""` when missing.
    pub fn key_prefix(&self) -> &str {
        self.str_field("key_prefix").unwrap_or("")
    }
    /// `ops` (empty when missing or not an array).
    pub fn ops(&self) -> &[Value] {
        self.0
            .get("ops")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
    /// `priority` (0.0 when missing).
    pub fn priority(&self) -> f64 {
        self.0
            .get("priority")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    }
}

/// Where a call runs (mirrors WIT `types.context`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// Name of the run's arm (`--arm`, default `main`).
    pub arm: String,
    /// 1-based epoch number.
    pub epoch: u32,
    /// Queue worker lane running the call, e.g. `queue_worker_01`.
    pub branch_id: String,
    /// Episode group of the call; `None` for plain `execute`.
    pub execution_group_id: Option<String>,
}

/// What a successful `prepare` returns: the adapter-owned group state, the
/// shared prefix's observation record and an optional checkpoint reference
/// (copied by the host onto every record of the group).
#[derive(Debug)]
pub struct Prepared<G> {
    /// Adapter-owned state handed back to `execute_episode` and `release`.
    pub group: G,
    /// Observation record of the shared prefix.
    pub prefix_record: Record,
    /// Optional checkpoint reference.
    pub checkpoint_ref: Option<String>,
}

impl<G> Prepared<G> {
    /// A prepared group without a checkpoint reference.
    pub fn new(group: G, prefix_record: Record) -> Self {
        Prepared {
            group,
            prefix_record,
            checkpoint_ref: None,
        }
    }
    /// Builder: attach a checkpoint reference.
    pub fn with_checkpoint_ref(mut self, checkpoint_ref: impl Into<String>) -> Self {
        self.checkpoint_ref = Some(checkpoint_ref.into());
        self
    }
}

/// How faithfully a restore reproduces a captured replay point (WIT
/// `types.fidelity`, reference `ReplayFidelity`), strongest first.
///
/// Serialises as the reference's values: `"exact"`, `"semantic_equivalent"`,
/// `"best_effort"`, `"non_replayable"`. Compare strengths with
/// [`Fidelity::meets`], not with `==`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Byte-for-byte the captured state: the report's expected and observed
    /// digests must be present and equal.
    Exact,
    /// Equal by the adapter's explicit checks: the report must carry at
    /// least one [`EquivalenceCheck`].
    SemanticEquivalent,
    /// A restore was attempted; nothing was verified. The host runs the
    /// suffix but never promotes its result as a verified replay.
    BestEffort,
    /// The state cannot be restored: a marker point without a binding.
    NonReplayable,
}

impl Fidelity {
    /// Every fidelity, strongest first.
    pub const ALL: [Fidelity; 4] = [
        Fidelity::Exact,
        Fidelity::SemanticEquivalent,
        Fidelity::BestEffort,
        Fidelity::NonReplayable,
    ];

    /// Trust rank of the reference's `_FIDELITY_RANK`: `NonReplayable` 0,
    /// `BestEffort` 1, `SemanticEquivalent` 2, `Exact` 3.
    pub fn rank(self) -> u8 {
        match self {
            Fidelity::NonReplayable => 0,
            Fidelity::BestEffort => 1,
            Fidelity::SemanticEquivalent => 2,
            Fidelity::Exact => 3,
        }
    }

    /// True when `self` is at least as trustworthy as `required` (reference
    /// `fidelity_meets`).
    pub fn meets(self, required: Fidelity) -> bool {
        self.rank() >= required.rank()
    }

    /// True for `Exact` and `SemanticEquivalent`: the fidelities whose
    /// report must verify equivalence (`equivalent: true`).
    pub fn is_trusted(self) -> bool {
        self.meets(Fidelity::SemanticEquivalent)
    }

    /// The reference's spelling (`"semantic_equivalent"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::SemanticEquivalent => "semantic_equivalent",
            Fidelity::BestEffort => "best_effort",
            Fidelity::NonReplayable => "non_replayable",
        }
    }
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a replay point sits and which prepared group it captures (WIT
/// `replay.capture-request`, reference `CaptureReplayStateRequest` with its
/// `TraceCursor`). Also handed to [`Replay::import_state`](crate::Replay::import_state),
/// where no group is prepared and `execution_group_id` only names the
/// original one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    /// Host-assigned id of the point.
    pub replay_point_id: String,
    /// The trace the point belongs to (the episode group id).
    pub trace_id: String,
    /// The branch within the trace.
    pub branch_id: String,
    /// The branch head the point sits after; `None` at the origin.
    pub after_event_id: Option<String>,
    /// Sequence the next event on the branch will get.
    pub next_sequence: u64,
    /// The prepared episode group whose prefix state is captured: the
    /// `ctx.execution_group_id` its `prepare` saw.
    pub execution_group_id: String,
}

/// What a capture (or import) produced (WIT `replay.state-lease`, reference
/// `AdapterStateLease`): the adapter-owned binding, its fidelity, and a
/// public-safe digest of the captured state's projection.
///
/// The contract (checked by the host, as the reference's `__post_init__`
/// does): `binding` is `Some` exactly when `fidelity` is not
/// [`Fidelity::NonReplayable`]. The fields are public so a test adapter can
/// break it on purpose; the constructors keep it.
#[derive(Debug)]
pub struct StateLease<B> {
    /// Adapter-owned state of the point; the host only holds a handle to it
    /// (WIT resource `replay-binding`). `None` for a non-replayable point.
    pub binding: Option<B>,
    /// The captured fidelity; every later restore may achieve at most this.
    pub fidelity: Fidelity,
    /// Digest of the captured state's projection; every report's
    /// `expected_digest` must repeat it. Required in practice for
    /// [`Fidelity::Exact`].
    pub projection_digest: Option<String>,
}

impl<B> StateLease<B> {
    /// A replayable lease of `fidelity` (which should not be
    /// `NonReplayable`) without a digest.
    pub fn new(binding: B, fidelity: Fidelity) -> Self {
        StateLease {
            binding: Some(binding),
            fidelity,
            projection_digest: None,
        }
    }
    /// An exact lease: `binding` with its state's `digest`.
    pub fn exact(binding: B, digest: impl Into<String>) -> Self {
        StateLease::new(binding, Fidelity::Exact).with_digest(digest)
    }
    /// A non-replayable marker point: no binding.
    pub fn non_replayable() -> Self {
        StateLease {
            binding: None,
            fidelity: Fidelity::NonReplayable,
            projection_digest: None,
        }
    }
    /// Builder: set the projection digest.
    pub fn with_digest(mut self, digest: impl Into<String>) -> Self {
        self.projection_digest = Some(digest.into());
        self
    }
    /// The same lease around another binding (the glue wraps bindings into
    /// resources with it).
    pub fn map_binding<C>(self, f: impl FnOnce(B) -> C) -> StateLease<C> {
        StateLease {
            binding: self.binding.map(f),
            fidelity: self.fidelity,
            projection_digest: self.projection_digest,
        }
    }
}

/// One restore of a replay point for one suffix (WIT
/// `replay.restore-request`, reference `RestoreReplayStateRequest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The point being restored.
    pub replay_point_id: String,
    /// The branch the restored suffix will run on (sandloop passes the
    /// suffix item's `item_id`).
    pub target_branch_id: String,
    /// The weakest fidelity the host will promote.
    pub minimum_fidelity: Fidelity,
}

/// What a restore achieved (WIT `types.restore-receipt`, reference
/// `RestoreReceipt`).
///
/// The host refuses a receipt whose `achieved_fidelity` is
/// `NonReplayable` or stronger than the point's captured fidelity (see
/// [`RestoreReceipt::check_against`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReceipt {
    /// Fidelity the restore achieved; at most the captured fidelity.
    pub achieved_fidelity: Fidelity,
    /// Digest of the restored working copy; when present it must equal the
    /// report's `observed_digest`.
    pub restored_projection_digest: Option<String>,
    /// `Some(true)` when the prefix state was reused, `Some(false)` when it
    /// was rebuilt, `None` when unknown (the host counts each case).
    pub prefix_reused: Option<bool>,
}

impl RestoreReceipt {
    /// A receipt of `fidelity` without digest or reuse information.
    pub fn new(fidelity: Fidelity) -> Self {
        RestoreReceipt {
            achieved_fidelity: fidelity,
            restored_projection_digest: None,
            prefix_reused: None,
        }
    }
    /// Builder: set the restored projection digest.
    pub fn with_digest(mut self, digest: impl Into<String>) -> Self {
        self.restored_projection_digest = Some(digest.into());
        self
    }
    /// Builder: set `prefix_reused`.
    pub fn with_prefix_reused(mut self, reused: bool) -> Self {
        self.prefix_reused = Some(reused);
        self
    }
    /// The host's receipt rules (reference `ReplayPointRegistry.restore`):
    /// not `NonReplayable`, and not stronger than `captured`.
    pub fn check_against(&self, captured: Fidelity) -> Result<(), &'static str> {
        if self.achieved_fidelity == Fidelity::NonReplayable {
            return Err("adapter reported non_replayable while restoring a replay point");
        }
        if !captured.meets(self.achieved_fidelity) {
            return Err("restore achieved a fidelity stronger than the captured replay point");
        }
        Ok(())
    }
}

/// One explicit equivalence check (WIT `types.equivalence-check`,
/// reference `EquivalenceCheck`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EquivalenceCheck {
    /// Non-empty id of the check, e.g. `state-digest`.
    pub check_id: String,
    /// Whether the check passed.
    pub passed: bool,
    /// Public-safe text (no absolute paths; the host validates it).
    pub public_summary: Option<String>,
}

impl EquivalenceCheck {
    /// A check without a summary.
    pub fn new(check_id: impl Into<String>, passed: bool) -> Self {
        EquivalenceCheck {
            check_id: check_id.into(),
            passed,
            public_summary: None,
        }
    }
    /// Builder: set the public summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.public_summary = Some(summary.into());
        self
    }
}

/// How the restored working copy compares with the captured state (WIT
/// `types.equivalence-report`, reference `EquivalenceReport`).
///
/// The host enforces the reference's `_validate_equivalence_contract`; see
/// [`EquivalenceReport::check_contract`] for the same rules in Rust.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EquivalenceReport {
    /// Must equal the receipt's `achieved_fidelity`.
    pub achieved_fidelity: Fidelity,
    /// Whether equivalence was verified; must be true for `Exact` and
    /// `SemanticEquivalent`, and false while any check fails.
    pub equivalent: bool,
    /// Must equal the point's captured projection digest (when it has one).
    pub expected_digest: Option<String>,
    /// Digest of the working copy; for `Exact`, present and equal to
    /// `expected_digest`.
    pub observed_digest: Option<String>,
    /// Explicit checks; at least one for `SemanticEquivalent`.
    pub checks: Vec<EquivalenceCheck>,
    /// Public-safe reason, e.g. why equivalence could not be verified.
    pub sanitized_reason: Option<String>,
}

impl EquivalenceReport {
    /// A report of `fidelity` and `equivalent` without digests or checks.
    pub fn new(fidelity: Fidelity, equivalent: bool) -> Self {
        EquivalenceReport {
            achieved_fidelity: fidelity,
            equivalent,
            expected_digest: None,
            observed_digest: None,
            checks: Vec::new(),
            sanitized_reason: None,
        }
    }
    /// An exact report comparing two digests: `equivalent` is their
    /// equality, with one `state-digest` check saying so.
    pub fn exact_digests(expected: impl Into<String>, observed: impl Into<String>) -> Self {
        let (expected, observed) = (expected.into(), observed.into());
        let equal = expected == observed;
        let summary = if equal {
            "restored state digest equals the captured digest"
        } else {
            "restored state digest differs from the captured digest"
        };
        EquivalenceReport::new(Fidelity::Exact, equal)
            .with_digests(expected, observed)
            .with_check(EquivalenceCheck::new("state-digest", equal).with_summary(summary))
    }
    /// Builder: set the expected and observed digests.
    pub fn with_digests(
        mut self,
        expected: impl Into<String>,
        observed: impl Into<String>,
    ) -> Self {
        self.expected_digest = Some(expected.into());
        self.observed_digest = Some(observed.into());
        self
    }
    /// Builder: append a check.
    pub fn with_check(mut self, check: EquivalenceCheck) -> Self {
        self.checks.push(check);
        self
    }
    /// Builder: set the sanitized reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.sanitized_reason = Some(reason.into());
        self
    }
    /// The reference's `_validate_equivalence_contract`, for adapter unit
    /// tests: `Err(rule)` names the first broken rule, `Ok(eligible)` says
    /// whether the host would promote the suffix (equivalent, trusted
    /// fidelity, and at least `minimum`). `captured_digest` is the point's
    /// projection digest.
    pub fn check_contract(
        &self,
        receipt: &RestoreReceipt,
        captured_digest: Option<&str>,
        minimum: Fidelity,
    ) -> Result<bool, &'static str> {
        if self.achieved_fidelity != receipt.achieved_fidelity {
            return Err("restore receipt and equivalence report fidelity disagree");
        }
        if let (Some(restored), Some(observed)) = (
            receipt.restored_projection_digest.as_deref(),
            self.observed_digest.as_deref(),
        ) && restored != observed
        {
            return Err("restore receipt and equivalence report observed digests disagree");
        }
        if let Some(captured) = captured_digest
            && self.expected_digest.as_deref() != Some(captured)
        {
            return Err("equivalence report expected digest does not match the captured point");
        }
        if self.equivalent && self.checks.iter().any(|check| !check.passed) {
            return Err("equivalence report cannot pass while a declared check fails");
        }
        if self.achieved_fidelity == Fidelity::Exact {
            match (&self.expected_digest, &self.observed_digest) {
                (Some(expected), Some(observed))
                    if !expected.is_empty() && expected == observed => {}
                _ => return Err("exact replay requires equal non-empty state digests"),
            }
        }
        if self.achieved_fidelity == Fidelity::SemanticEquivalent && self.checks.is_empty() {
            return Err("semantic replay requires at least one explicit equivalence check");
        }
        let trusted = self.achieved_fidelity.is_trusted();
        if trusted && !self.equivalent {
            return Err("exact or semantic replay requires verified state equivalence");
        }
        Ok(self.equivalent && trusted && self.achieved_fidelity.meets(minimum))
    }
}

/// The request to fork one isolated replay child (WIT
/// `replay-children.fork-request`, reference `ForkReplayChildRequest`).
///
/// The host forks every child into a fresh component instance; the child's
/// state arrives next to this request as the bytes the parent's
/// [`Replay::export_state`](crate::Replay::export_state) produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRequest {
    /// The replay point the child is forked from.
    pub replay_point_id: String,
    /// Unique within the group; sandloop uses the task item's `item_id`.
    /// The [`ChildRisk`](crate::ChildRisk) calls name the child by it.
    pub child_id: String,
    /// The branch the child's task runs on.
    pub target_branch_id: String,
    /// The weakest fidelity the host will promote (never
    /// [`Fidelity::NonReplayable`]).
    pub minimum_fidelity: Fidelity,
}

/// What the adapter declares about running a child beside its siblings
/// (WIT `replay-children.child-concurrency`, reference
/// `ReplayChildConcurrency`).
///
/// Every child is its own sandbox, so [`ThreadSafe`](Self::ThreadSafe) and
/// [`ProcessIsolated`](Self::ProcessIsolated) both let the host run it in
/// parallel; one [`SerialOnly`](Self::SerialOnly) child makes the whole
/// group serial. The default is `SerialOnly`, as in the reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildConcurrency {
    /// The child must not run beside its siblings.
    #[default]
    SerialOnly,
    /// The child may run beside its siblings.
    ThreadSafe,
    /// The child runs in its own process (sandloop: its own instance).
    ProcessIsolated,
}

impl ChildConcurrency {
    /// The reference's spelling (`"serial_only"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ChildConcurrency::SerialOnly => "serial_only",
            ChildConcurrency::ThreadSafe => "thread_safe",
            ChildConcurrency::ProcessIsolated => "process_isolated",
        }
    }

    /// True when the host may run the child in parallel with its siblings.
    pub fn allows_parallel(self) -> bool {
        !matches!(self, ChildConcurrency::SerialOnly)
    }
}

impl fmt::Display for ChildConcurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A forked child and its restore receipt (WIT
/// `replay-children.child-lease`, reference `ReplayChildLease`).
///
/// The host checks the receipt like a restore's
/// ([`RestoreReceipt::check_against`] the point's captured fidelity) and
/// then asks [`ReplayChildren::validate_child`](crate::ReplayChildren::validate_child)
/// for the report.
#[derive(Debug)]
pub struct ChildLease<C> {
    /// Adapter-owned state of the child (WIT resource `replay-child`).
    pub child: C,
    /// What the fork achieved; at most the captured fidelity.
    pub receipt: RestoreReceipt,
    /// Whether the child may run beside its siblings.
    pub concurrency: ChildConcurrency,
}

impl<C> ChildLease<C> {
    /// A lease of `child` with `receipt` and `concurrency`.
    pub fn new(child: C, receipt: RestoreReceipt, concurrency: ChildConcurrency) -> Self {
        ChildLease {
            child,
            receipt,
            concurrency,
        }
    }
    /// A [`ChildConcurrency::ThreadSafe`] lease.
    pub fn thread_safe(child: C, receipt: RestoreReceipt) -> Self {
        ChildLease::new(child, receipt, ChildConcurrency::ThreadSafe)
    }
    /// Builder: set the concurrency.
    pub fn with_concurrency(mut self, concurrency: ChildConcurrency) -> Self {
        self.concurrency = concurrency;
        self
    }
    /// The same lease around another child (the glue wraps children into
    /// resources with it).
    pub fn map_child<D>(self, f: impl FnOnce(C) -> D) -> ChildLease<D> {
        ChildLease {
            child: f(self.child),
            receipt: self.receipt,
            concurrency: self.concurrency,
        }
    }
}

/// A risk policy's verdict (WIT `child-risk.disposition`, reference
/// `ReplayRiskDisposition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// The child may go on.
    Allow,
    /// A denied intent never runs; a denied outcome quarantines the point.
    Deny,
}

impl Disposition {
    /// `"allow"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Allow => "allow",
            Disposition::Deny => "deny",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One risk assessment of a child's intent or outcome (WIT
/// `child-risk.risk-assessment`, reference `ReplayRiskAssessment`).
///
/// `policy_id` must be non-empty and `sanitized_reason` public-safe (no
/// absolute paths); the host validates both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskAssessment {
    /// The verdict.
    pub disposition: Disposition,
    /// Which policy decided, e.g. `edit-size-budget`.
    pub policy_id: String,
    /// Public-safe reason.
    pub sanitized_reason: Option<String>,
}

impl RiskAssessment {
    /// `policy` allows, without a reason.
    pub fn allow(policy: impl Into<String>) -> Self {
        RiskAssessment {
            disposition: Disposition::Allow,
            policy_id: policy.into(),
            sanitized_reason: None,
        }
    }
    /// `policy` denies, saying why.
    pub fn deny(policy: impl Into<String>, reason: impl Into<String>) -> Self {
        RiskAssessment {
            disposition: Disposition::Deny,
            policy_id: policy.into(),
            sanitized_reason: Some(reason.into()),
        }
    }
    /// Builder: set the sanitized reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.sanitized_reason = Some(reason.into());
        self
    }
    /// True for [`Disposition::Allow`].
    pub fn is_allowed(&self) -> bool {
        self.disposition == Disposition::Allow
    }
    /// True for [`Disposition::Deny`].
    pub fn is_denied(&self) -> bool {
        self.disposition == Disposition::Deny
    }
}

/// Parse a child's intent (JSON object text); anything else is an
/// `invalid-intent` error.
pub(crate) fn parse_intent(text: &str) -> Result<Object, Error> {
    parse_object(text, "child intent", Error::INVALID_INTENT)
}

/// An error the adapter reports on purpose (WIT `types.adapter-error`).
///
/// The host records it as `adapter_error.type = "adapter_error"` with this
/// `kind` and message (first 240 characters) and sets the record's
/// `retryable_infra_error` from [`Error::retryable`]. Traps (panics), deadlines,
/// memory or fuel exhaustion and invalid output are classified by the host,
/// not through this type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// Adapter-chosen class, e.g. `parse-failed`.
    pub kind: String,
    /// Human-readable message.
    pub message: String,
    /// True when a retry could succeed (an infrastructure hiccup).
    pub retryable: bool,
}

impl Error {
    /// Kind used when an incoming item is not a JSON object.
    pub const INVALID_ITEM: &'static str = "invalid-item";
    /// Kind used when an incoming variant spec is not a JSON object.
    pub const INVALID_SPEC: &'static str = "invalid-spec";
    /// Kind used when a child's intent (`child-risk`) is not a JSON object.
    pub const INVALID_INTENT: &'static str = "invalid-intent";
    /// Kind used when a `child-risk` call names a child this instance
    /// never forked (or already dropped).
    pub const UNKNOWN_CHILD: &'static str = "unknown-child";

    /// A non-retryable error of `kind`.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            kind: kind.into(),
            message: message.into(),
            retryable: false,
        }
    }
    /// A retryable (infrastructure) error of `kind`.
    pub fn infra(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Error::new(kind, message).retryable(true)
    }
    /// `invalid-item`: the item lacks or mangles something the adapter needs.
    pub fn invalid_item(message: impl Into<String>) -> Self {
        Error::new(Self::INVALID_ITEM, message)
    }
    /// `invalid-spec`: the variant spec cannot be compiled.
    pub fn invalid_spec(message: impl Into<String>) -> Self {
        Error::new(Self::INVALID_SPEC, message)
    }
    /// `unsupported`: the adapter does not handle this request.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new("unsupported", message)
    }
    /// Builder: set [`Error::retryable`].
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    /// kind `adapter`.
    fn from(message: &str) -> Self {
        Error::new("adapter", message)
    }
}

impl From<String> for Error {
    /// kind `adapter`.
    fn from(message: String) -> Self {
        Error::new("adapter", message)
    }
}

impl From<std::io::Error> for Error {
    /// kind `io`; retryable for interrupted / timed-out / would-block.
    fn from(err: std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        let retryable = matches!(err.kind(), Interrupted | TimedOut | WouldBlock);
        Error::new("io", err.to_string()).retryable(retryable)
    }
}

impl From<serde_json::Error> for Error {
    /// kind `json`.
    fn from(err: serde_json::Error) -> Self {
        Error::new("json", err.to_string())
    }
}

impl From<std::str::Utf8Error> for Error {
    /// kind `utf8`.
    fn from(err: std::str::Utf8Error) -> Self {
        Error::new("utf8", err.to_string())
    }
}

impl From<std::string::FromUtf8Error> for Error {
    /// kind `utf8`.
    fn from(err: std::string::FromUtf8Error) -> Self {
        Error::new("utf8", err.to_string())
    }
}

impl From<std::num::ParseIntError> for Error {
    /// kind `parse`.
    fn from(err: std::num::ParseIntError) -> Self {
        Error::new("parse", err.to_string())
    }
}

impl From<std::num::ParseFloatError> for Error {
    /// kind `parse`.
    fn from(err: std::num::ParseFloatError) -> Self {
        Error::new("parse", err.to_string())
    }
}

impl From<std::fmt::Error> for Error {
    /// kind `fmt`.
    fn from(err: std::fmt::Error) -> Self {
        Error::new("fmt", err.to_string())
    }
}

/// `result.or_kind("read-failed")?`: turn any displayable error into an
/// [`Error`] of the given kind.
pub trait ResultExt<T> {
    /// Map the error to `Error::new(kind, err.to_string())`.
    fn or_kind(self, kind: &str) -> Result<T, Error>;
}

impl<T, E: fmt::Display> ResultExt<T> for Result<T, E> {
    fn or_kind(self, kind: &str) -> Result<T, Error> {
        self.map_err(|err| Error::new(kind, err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_parsing_and_accessors() {
        let item = Item::from_json(
            r#"{"item_id":"a","family":"f","text":"t","is_variant":true,"seed_item_id":"s","variant_spec":{"spec_id":"x","ops":[1]}}"#,
        )
        .unwrap();
        assert_eq!(item.item_id(), "a");
        assert_eq!(item.family(), "f");
        assert_eq!(item.text(), "t");
        assert!(item.is_variant());
        assert_eq!(item.seed_item_id(), Some("s"));
        let spec = item.variant_spec().unwrap();
        assert_eq!(spec.spec_id(), "x");
        assert_eq!(spec.ops().len(), 1);
        assert_eq!(spec.priority(), 0.0);

        let err = Item::from_json("[1]").unwrap_err();
        assert_eq!(err.kind, "invalid-item");
        let err = Item::from_json("nope").unwrap_err();
        assert_eq!(err.kind, "invalid-item");
        assert!(!err.retryable);
    }

    #[test]
    fn record_builders() {
        let mut record = Record::with_keys(["a", "b", "a"]);
        record.observe("c").flag("rare", 2.0).set("extra", 3);
        assert_eq!(record.observation_keys(), vec!["a", "b", "c"]);
        assert!(record.is_accepted());
        assert_eq!(record.weighted_flags().unwrap()["rare"], 2.0);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&record.to_json()).unwrap(),
            serde_json::json!({"observation_keys":["a","b","c"],"weighted_flags":{"rare":2.0},"accepted":true,"extra":3})
        );
        record.set_accepted(false);
        assert!(!record.is_accepted());
    }

    #[test]
    fn error_conversions() {
        let err: Error = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow").into();
        assert_eq!(err.kind, "io");
        assert!(err.retryable);
        let err: Error = "plain".into();
        assert_eq!(err.kind, "adapter");
        let err = "12x".parse::<u32>().or_kind("bad-number").unwrap_err();
        assert_eq!(err.kind, "bad-number");
        assert_eq!(Error::infra("net", "down").to_string(), "net: down");
    }

    #[test]
    fn fidelity_ranks_and_names() {
        use Fidelity::*;
        assert!(Exact.meets(SemanticEquivalent) && Exact.meets(Exact));
        assert!(!BestEffort.meets(SemanticEquivalent));
        assert!(NonReplayable.meets(NonReplayable) && !NonReplayable.meets(BestEffort));
        assert!(SemanticEquivalent.is_trusted() && !BestEffort.is_trusted());
        let names: Vec<_> = Fidelity::ALL.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            names,
            [
                "exact",
                "semantic_equivalent",
                "best_effort",
                "non_replayable"
            ]
        );
        for fidelity in Fidelity::ALL {
            let json = serde_json::to_string(&fidelity).unwrap();
            assert_eq!(json, format!("\"{fidelity}\""));
            assert_eq!(serde_json::from_str::<Fidelity>(&json).unwrap(), fidelity);
        }
        let lease = StateLease::exact(7u8, "d").map_binding(u32::from);
        assert_eq!(lease.binding, Some(7u32));
        assert_eq!(lease.projection_digest.as_deref(), Some("d"));
        let marker = StateLease::<u8>::non_replayable();
        assert!(marker.binding.is_none());
        assert_eq!(marker.fidelity, Fidelity::NonReplayable);
    }

    #[test]
    fn receipt_rules() {
        let exact = RestoreReceipt::new(Fidelity::Exact);
        assert_eq!(exact.check_against(Fidelity::Exact), Ok(()));
        assert!(exact.check_against(Fidelity::BestEffort).is_err());
        assert!(
            RestoreReceipt::new(Fidelity::NonReplayable)
                .check_against(Fidelity::Exact)
                .is_err()
        );
        assert_eq!(
            RestoreReceipt::new(Fidelity::BestEffort).check_against(Fidelity::Exact),
            Ok(())
        );
    }

    #[test]
    fn equivalence_contract_mirrors_the_reference() {
        use Fidelity::*;
        let receipt = RestoreReceipt::new(Exact).with_digest("a");
        let good = EquivalenceReport::exact_digests("a", "a");
        assert_eq!(good.check_contract(&receipt, Some("a"), Exact), Ok(true));
        assert_eq!(good.check_contract(&receipt, None, Exact), Ok(true));

        let broken = |report: EquivalenceReport, receipt: &RestoreReceipt| {
            report
                .check_contract(receipt, Some("a"), BestEffort)
                .unwrap_err()
        };
        // fidelity disagrees with the receipt
        let mut report = good.clone();
        report.achieved_fidelity = SemanticEquivalent;
        assert!(broken(report, &receipt).contains("fidelity disagree"));
        // observed digest disagrees with the receipt's restored digest
        let other = RestoreReceipt::new(Exact).with_digest("b");
        assert!(broken(good.clone(), &other).contains("observed digests disagree"));
        // expected digest is not the captured one
        let report = EquivalenceReport::exact_digests("b", "b");
        let receipt_b = RestoreReceipt::new(Exact);
        assert!(broken(report, &receipt_b).contains("expected digest"));
        // exact with different digests
        let report = EquivalenceReport::new(Exact, true).with_digests("a", "c");
        assert!(broken(report, &RestoreReceipt::new(Exact)).contains("equal non-empty"));
        // exact without digests
        let report = EquivalenceReport::new(Exact, true);
        assert!(
            report
                .check_contract(&RestoreReceipt::new(Exact), None, Exact)
                .unwrap_err()
                .contains("equal non-empty")
        );
        // equivalent while a check fails
        let report = good.clone().with_check(EquivalenceCheck::new("x", false));
        assert!(broken(report, &receipt).contains("check fails"));
        // semantic without checks
        let semantic = RestoreReceipt::new(SemanticEquivalent);
        let report = EquivalenceReport::new(SemanticEquivalent, true);
        assert!(
            report
                .check_contract(&semantic, None, BestEffort)
                .unwrap_err()
                .contains("at least one")
        );
        // trusted fidelity but not equivalent
        let report = EquivalenceReport::new(SemanticEquivalent, false)
            .with_check(EquivalenceCheck::new("x", false));
        assert!(
            report
                .check_contract(&semantic, None, BestEffort)
                .unwrap_err()
                .contains("verified state equivalence")
        );
        // best effort passes the contract but is never promoted
        let best = RestoreReceipt::new(BestEffort);
        let report = EquivalenceReport::new(BestEffort, false);
        assert_eq!(report.check_contract(&best, None, BestEffort), Ok(false));
        // semantic below the minimum is valid but not promoted
        let report = EquivalenceReport::new(SemanticEquivalent, true)
            .with_check(EquivalenceCheck::new("x", true));
        assert_eq!(report.check_contract(&semantic, None, Exact), Ok(false));
        assert_eq!(
            report.check_contract(&semantic, None, SemanticEquivalent),
            Ok(true)
        );
    }

    #[test]
    fn child_leases_and_risk_assessments() {
        assert_eq!(ChildConcurrency::default(), ChildConcurrency::SerialOnly);
        assert!(!ChildConcurrency::SerialOnly.allows_parallel());
        assert!(ChildConcurrency::ThreadSafe.allows_parallel());
        assert!(ChildConcurrency::ProcessIsolated.allows_parallel());
        for (concurrency, name) in [
            (ChildConcurrency::SerialOnly, "serial_only"),
            (ChildConcurrency::ThreadSafe, "thread_safe"),
            (ChildConcurrency::ProcessIsolated, "process_isolated"),
        ] {
            assert_eq!(concurrency.to_string(), name);
            assert_eq!(
                serde_json::to_string(&concurrency).unwrap(),
                format!("\"{name}\"")
            );
        }

        let receipt = RestoreReceipt::new(Fidelity::Exact).with_prefix_reused(true);
        let lease = ChildLease::thread_safe(7u8, receipt.clone());
        assert_eq!(lease.concurrency, ChildConcurrency::ThreadSafe);
        let lease = lease
            .with_concurrency(ChildConcurrency::ProcessIsolated)
            .map_child(u32::from);
        assert_eq!(lease.child, 7u32);
        assert_eq!(lease.receipt, receipt);
        assert_eq!(lease.concurrency, ChildConcurrency::ProcessIsolated);

        let allow = RiskAssessment::allow("edit-size-budget");
        assert!(allow.is_allowed() && !allow.is_denied());
        assert_eq!(allow.sanitized_reason, None);
        let deny = RiskAssessment::deny("document-growth", "grew 9x");
        assert!(deny.is_denied());
        assert_eq!(deny.disposition.to_string(), "deny");
        assert_eq!(
            serde_json::to_value(&deny).unwrap(),
            serde_json::json!({"disposition": "deny", "policy_id": "document-growth", "sanitized_reason": "grew 9x"})
        );
        assert_eq!(
            allow.with_reason("small").sanitized_reason.as_deref(),
            Some("small")
        );

        let request = ForkRequest {
            replay_point_id: "rp".into(),
            child_id: "a~b".into(),
            target_branch_id: "a~b".into(),
            minimum_fidelity: Fidelity::SemanticEquivalent,
        };
        assert_eq!(
            serde_json::to_value(&request).unwrap()["minimum_fidelity"],
            "semantic_equivalent"
        );
        assert_eq!(parse_intent(r#"{"item_id":"a"}"#).unwrap()["item_id"], "a");
        assert_eq!(parse_intent("[]").unwrap_err().kind, Error::INVALID_INTENT);
    }
}
