//! Serde-friendly values that cross the boundary: items, records, variant
//! specs, the call context, and declared errors; the replay and
//! child-group types shared with the host are re-exported from
//! `sandloop-contract`.

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

/// The protocol types shared with the host, defined once in
/// `sandloop-contract` and re-exported here so adapter code names them
/// from this crate.
pub use sandloop_contract::{
    CaptureRequest, ChildConcurrency, CounterfactualRequest, Disposition, EquivalenceCheck,
    EquivalenceReport, Fidelity, ForkRequest, RestoreReceipt, RestoreRequest, RiskAssessment,
    StateLease, ValidationOutcome,
};

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

/// Parse a child's intent (JSON object text); anything else is an
/// `invalid-intent` error.
pub(crate) fn parse_intent(text: &str) -> Result<Object, Error> {
    parse_object(text, "child intent", Error::INVALID_INTENT)
}

/// Parse a candidate's change set (JSON object text); anything else is an
/// `invalid-change-set` error.
pub(crate) fn parse_change_set(text: &str) -> Result<Object, Error> {
    parse_object(text, "counterfactual change set", Error::INVALID_CHANGE_SET)
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
    /// Kind used when a counterfactual change set is not a JSON object.
    pub const INVALID_CHANGE_SET: &'static str = "invalid-change-set";
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
    fn child_leases_wrap_contract_receipts() {
        let receipt = RestoreReceipt::new(Fidelity::Exact).with_prefix_reused(true);
        let lease = ChildLease::thread_safe(7u8, receipt.clone());
        assert_eq!(lease.concurrency, ChildConcurrency::ThreadSafe);
        let lease = lease
            .with_concurrency(ChildConcurrency::ProcessIsolated)
            .map_child(u32::from);
        assert_eq!(lease.child, 7u32);
        assert_eq!(lease.receipt, receipt);
        assert_eq!(lease.concurrency, ChildConcurrency::ProcessIsolated);
        assert_eq!(parse_intent(r#"{"item_id":"a"}"#).unwrap()["item_id"], "a");
        assert_eq!(parse_intent("[]").unwrap_err().kind, Error::INVALID_INTENT);
    }

    #[test]
    fn bindings_speak_the_contract_wit_version() {
        let bindings = include_str!("bindings.rs");
        let package = format!(
            "{}/types@{}",
            sandloop_contract::WIT_PACKAGE,
            sandloop_contract::WIT_VERSION
        );
        assert!(bindings.contains(&package), "bindings.rs lacks {package}");
        // every `sandloop:adapter/NAME@VERSION` names the contract's version
        let prefix = format!("{}/", sandloop_contract::WIT_PACKAGE);
        let suffix = format!("@{}", sandloop_contract::WIT_VERSION);
        for (index, _) in bindings.match_indices(&prefix) {
            let name: String = bindings[index..]
                .chars()
                .take_while(|c| !matches!(c, ';' | '"' | ' ' | '\n'))
                .collect();
            assert!(name.ends_with(&suffix), "{name} is not {suffix}");
        }
    }

    #[test]
    fn shared_types_are_the_contract_crates() {
        // the sdk's names are the contract's types, not copies
        let fidelity: sandloop_contract::Fidelity = crate::Fidelity::Exact;
        let report: sandloop_contract::EquivalenceReport =
            crate::EquivalenceReport::exact_digests("a", "a");
        assert_eq!(report.achieved_fidelity, fidelity);
        let assessment: crate::RiskAssessment = sandloop_contract::RiskAssessment::allow("p");
        assert!(assessment.is_allowed());
    }
}
