//! Building and annotating observation records: the error record factory and
//! the normalisation/annotation steps of group execution.
//!
//! Mirrors `_adapter_error_record` (`harness_runtime.py`) and
//! `_normalize_item_record`, `_annotate_group_record`, `_standalone_record`,
//! `_attach_release_error` (`episode_runtime.py`).

use serde_json::{Map, Value};

use super::adapter::{AdapterError, Item, Record};
use super::value::{json_f64, truthy};

/// `adapter_error.schema_version` of every error record.
pub const ADAPTER_ERROR_SCHEMA_VERSION: &str = "loopx_explore_adapter_error_v0";
/// The smallest `duration_minutes` an error record carries (reference
/// `_MIN_DURATION_MINUTES`).
pub const MIN_DURATION_MINUTES: f64 = 0.05;
/// How many characters of an error message an error record keeps.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 240;

/// `record_kind` of a group's prepared prefix record.
pub const RECORD_KIND_SHARED_PREFIX: &str = "shared_prefix";
/// `record_kind` of a suffix run on a prepared prefix.
pub const RECORD_KIND_EPISODE_SUFFIX: &str = "episode_suffix";
/// `record_kind` of a record produced outside a prepared group.
pub const RECORD_KIND_STANDALONE: &str = "standalone";

/// Moves the fields only the host may set
/// ([`HOST_OWNED_FIELDS`](sandloop_contract::HOST_OWNED_FIELDS):
/// `adapter_error`, `execution_status`, `episode_release_error`) out of an
/// adapter's `record` and under `adapter_claimed`, where they are visible
/// but never counted: an adapter cannot claim a failure it did not have, or
/// hide one it had. A record without them is left as it is (three lookups);
/// an `adapter_claimed` of the adapter's own is replaced only when there is
/// something to move. The reference has no such rule (its adapters are
/// trusted in-process code); the episode runtime applies it to every record
/// an adapter returns — a prefix, a suffix, a fallback or standalone item,
/// a suffix replayed from a point, a child's outcome — before adding its own
/// fields.
pub fn quarantine_host_owned(record: &mut Record) {
    use sandloop_contract::HOST_OWNED_FIELDS;
    if !HOST_OWNED_FIELDS
        .iter()
        .any(|field| record.contains_key(*field))
    {
        return;
    }
    let mut claimed = Record::new();
    for field in HOST_OWNED_FIELDS {
        if let Some(value) = record.remove(*field) {
            claimed.insert((*field).to_string(), value);
        }
    }
    record.insert("adapter_claimed".into(), Value::Object(claimed));
}

/// Sets `record[key] = value`. One search of the map: the host's fields
/// are rarely in an adapter's record already, so the key is inserted
/// straight away (an existing entry keeps its key and takes the value).
pub fn set_field(record: &mut Record, key: &str, value: Value) {
    record.insert(key.to_owned(), value);
}

/// Folds every run of whitespace in `message` to one space and keeps the
/// first [`MAX_ERROR_MESSAGE_CHARS`] characters (reference:
/// `" ".join(str(error).split())[:240]`).
pub fn fold_error_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_ERROR_MESSAGE_CHARS * 4));
    let mut chars = 0usize;
    'words: for (i, word) in message.split_whitespace().enumerate() {
        if i > 0 {
            if chars == MAX_ERROR_MESSAGE_CHARS {
                break;
            }
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == MAX_ERROR_MESSAGE_CHARS {
                break 'words;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// The structured zero-value record for a failed item (reference
/// `_adapter_error_record`).
///
/// Shape: `item_id`, `family`, `is_variant`, `variant_spec_id` (the
/// variant's `variant_spec.spec_id`, else `null`),
/// `execution_status = "adapter_error"`, `item_failure_policy = "record"`,
/// `accepted = false`, `observation_keys = []`, `weighted_flags = {}`,
/// `duration_minutes = max(0.05, duration_minutes)`,
/// `retryable_infra_error`, and `adapter_error = {schema_version, type,
/// message, kind?}` where `type` is [`AdapterError::error_type`]'s name
/// (the reference writes the Python exception class), `message` is folded
/// by [`fold_error_message`], and `kind` is present only when the adapter
/// declared one. Never fails.
pub fn adapter_error_record(item: &Item, error: &AdapterError, duration_minutes: f64) -> Record {
    let mut adapter_error = Map::with_capacity(4);
    adapter_error.insert(
        "schema_version".into(),
        Value::from(ADAPTER_ERROR_SCHEMA_VERSION),
    );
    adapter_error.insert("type".into(), Value::from(error.error_type.as_str()));
    adapter_error.insert(
        "message".into(),
        Value::from(fold_error_message(&error.message)),
    );
    if !error.kind.is_empty() {
        adapter_error.insert("kind".into(), Value::from(error.kind.as_str()));
    }

    let identity = item.identity().into_owned();
    let mut record = Map::with_capacity(14);
    record.insert("item_id".into(), identity.item_id);
    record.insert("family".into(), identity.family);
    record.insert("is_variant".into(), Value::Bool(identity.is_variant));
    record.insert(
        "variant_spec_id".into(),
        identity.variant_spec_id.unwrap_or(Value::Null),
    );
    record.insert("execution_status".into(), Value::from("adapter_error"));
    record.insert("item_failure_policy".into(), Value::from("record"));
    record.insert("accepted".into(), Value::Bool(false));
    record.insert("observation_keys".into(), Value::Array(Vec::new()));
    record.insert("weighted_flags".into(), Value::Object(Map::new()));
    record.insert(
        "duration_minutes".into(),
        json_f64(MIN_DURATION_MINUTES.max(duration_minutes)),
    );
    record.insert(
        "retryable_infra_error".into(),
        Value::Bool(error.retryable_infra_error),
    );
    record.insert("adapter_error".into(), Value::Object(adapter_error));
    if let Some(fields) = &error.record_fields {
        for (key, value) in fields.iter() {
            record.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    record
}

/// Makes an adapter's record describe `item` (reference
/// `_normalize_item_record`): `item_id` and `family` are copied from the
/// item (`null` when absent), `is_variant` is the item's truthiness; a
/// variant whose `variant_spec` is an object gets its `spec_id` as
/// `variant_spec_id`, a non-variant loses any `variant_spec_id`.
pub fn normalize_item_record(record: &mut Record, item: &Item) {
    let identity = item.identity();
    set_field(record, "item_id", identity.item_id.clone());
    set_field(record, "family", identity.family.clone());
    set_field(record, "is_variant", Value::Bool(identity.is_variant));
    if identity.is_variant {
        if let Some(spec_id) = &identity.variant_spec_id {
            set_field(record, "variant_spec_id", spec_id.clone());
        }
    } else {
        record.remove("variant_spec_id");
    }
}

/// What [`annotate_group_record`] writes onto a record of a group.
#[derive(Clone, Copy, Debug)]
pub struct GroupAnnotation<'a> {
    /// `execution_group_id`.
    pub group_id: &'a str,
    /// `seed_item_id`.
    pub seed_item_id: &'a str,
    /// `record_kind` ([`RECORD_KIND_SHARED_PREFIX`] or
    /// [`RECORD_KIND_EPISODE_SUFFIX`]).
    pub record_kind: &'a str,
    /// `prefix_reused`: the group runs more than one suffix on the prefix.
    pub prefix_reused: bool,
    /// `checkpoint_ref`; `None` removes the field.
    pub checkpoint_ref: Option<&'a str>,
}

/// Writes the group fields onto `record` (reference
/// `_annotate_group_record`).
pub fn annotate_group_record(record: &mut Record, annotation: &GroupAnnotation<'_>) {
    set_field(
        record,
        "execution_group_id",
        Value::from(annotation.group_id),
    );
    set_field(record, "record_kind", Value::from(annotation.record_kind));
    set_field(record, "seed_item_id", Value::from(annotation.seed_item_id));
    set_field(
        record,
        "prefix_reused",
        Value::Bool(annotation.prefix_reused),
    );
    match annotation.checkpoint_ref {
        Some(reference) => {
            set_field(record, "checkpoint_ref", Value::from(reference));
        }
        None => {
            record.remove("checkpoint_ref");
        }
    }
}

/// Marks `record` as produced outside a prepared group (reference
/// `_standalone_record`): no `execution_group_id`,
/// `record_kind = "standalone"`, `prefix_reused = false`.
pub fn standalone_record(record: &mut Record) {
    record.remove("execution_group_id");
    set_field(record, "record_kind", Value::from(RECORD_KIND_STANDALONE));
    set_field(record, "prefix_reused", Value::Bool(false));
}

/// Attaches a failed release to `record` (reference `_attach_release_error`):
/// `episode_release_error = {duration_minutes, retryable_infra_error,
/// adapter_error}` taken from the release's error record, and
/// `retryable_infra_error` becomes true if either was retryable.
pub fn attach_release_error(record: &mut Record, release_error: &Record) {
    let release_retryable = truthy(release_error.get("retryable_infra_error"));
    let mut attached = Map::with_capacity(3);
    attached.insert(
        "duration_minutes".into(),
        release_error
            .get("duration_minutes")
            .cloned()
            .unwrap_or(Value::Null),
    );
    attached.insert(
        "retryable_infra_error".into(),
        Value::Bool(release_retryable),
    );
    attached.insert(
        "adapter_error".into(),
        release_error
            .get("adapter_error")
            .cloned()
            .unwrap_or(Value::Null),
    );
    set_field(record, "episode_release_error", Value::Object(attached));
    let retryable = truthy(record.get("retryable_infra_error")) || release_retryable;
    set_field(record, "retryable_infra_error", Value::Bool(retryable));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::adapter::ErrorType;
    use serde_json::json;

    fn obj<T: From<Map<String, Value>>>(value: Value) -> T {
        match value {
            Value::Object(map) => T::from(map),
            other => panic!("not a JSON object: {other}"),
        }
    }

    #[test]
    fn error_record_has_the_reference_shape() {
        let item = obj(json!({
            "item_id": "v1", "family": "fam", "is_variant": true,
            "variant_spec": {"spec_id": "spec-9"}, "text": "ignored"
        }));
        let error = AdapterError {
            error_type: ErrorType::Deadline,
            kind: String::new(),
            message: "  call\n ran   out\tof time ".into(),
            retryable_infra_error: true,
            record_fields: None,
        };
        let record = adapter_error_record(&item, &error, 0.01);
        assert_eq!(
            Value::Object(record),
            json!({
                "item_id": "v1", "family": "fam", "is_variant": true,
                "variant_spec_id": "spec-9",
                "execution_status": "adapter_error",
                "item_failure_policy": "record",
                "accepted": false, "observation_keys": [], "weighted_flags": {},
                "duration_minutes": 0.05,
                "retryable_infra_error": true,
                "adapter_error": {
                    "schema_version": "loopx_explore_adapter_error_v0",
                    "type": "deadline",
                    "message": "call ran out of time"
                }
            })
        );
    }

    #[test]
    fn error_record_keeps_kind_and_measured_duration_and_tolerates_bad_specs() {
        // A variant whose variant_spec is not an object must not make the
        // factory fail; variant_spec_id is then null.
        let item = obj(json!({"item_id": 3, "is_variant": 1, "variant_spec": "nope"}));
        let error = AdapterError::declared("quota", "over quota", false);
        let record = adapter_error_record(&item, &error, 2.5);
        assert_eq!(record["item_id"], json!(3));
        assert_eq!(record["family"], Value::Null);
        assert_eq!(record["is_variant"], json!(true));
        assert_eq!(record["variant_spec_id"], Value::Null);
        assert_eq!(record["duration_minutes"], json!(2.5));
        assert_eq!(record["adapter_error"]["kind"], json!("quota"));
        assert_eq!(record["adapter_error"]["type"], json!("adapter_error"));
        // A non-variant never reports a spec id even if it carries a spec.
        let seed = obj(json!({"item_id": "s", "variant_spec": {"spec_id": "x"}}));
        let record = adapter_error_record(&seed, &error, 0.0);
        assert_eq!(record["variant_spec_id"], Value::Null);
        assert_eq!(record["is_variant"], json!(false));
    }

    #[test]
    fn error_message_is_folded_and_cut_at_240_characters() {
        let long = format!("{}  \n tail", "é".repeat(300));
        let folded = fold_error_message(&long);
        assert_eq!(folded.chars().count(), 240);
        assert!(folded.chars().all(|c| c == 'é'));
        assert_eq!(fold_error_message("a\n\nb  c"), "a b c");
        let exact = format!("{} b", "a".repeat(239));
        // The separating space is the 240th character; nothing after it.
        assert_eq!(fold_error_message(&exact), format!("{} ", "a".repeat(239)));
        assert_eq!(fold_error_message("   "), "");
    }

    #[test]
    fn normalize_overwrites_identity_and_handles_spec_ids() {
        let variant = obj(json!({
            "item_id": "v", "family": "f", "is_variant": true,
            "variant_spec": {"spec_id": "s1"}
        }));
        let mut record = obj(json!({
            "item_id": "forged", "family": "other", "is_variant": false,
            "observation_keys": ["k"]
        }));
        normalize_item_record(&mut record, &variant);
        assert_eq!(
            Value::Object(record),
            json!({"item_id": "v", "family": "f", "is_variant": true,
                   "observation_keys": ["k"], "variant_spec_id": "s1"})
        );

        let seed = obj(json!({"item_id": "s"}));
        let mut record = obj(json!({"variant_spec_id": "stale", "x": 1}));
        normalize_item_record(&mut record, &seed);
        assert_eq!(
            Value::Object(record),
            json!({"x": 1, "item_id": "s", "family": null, "is_variant": false})
        );

        // A variant without an object spec keeps what the adapter said.
        let odd = obj(json!({"item_id": "v", "is_variant": true}));
        let mut record = obj(json!({"variant_spec_id": "adapter-said"}));
        normalize_item_record(&mut record, &odd);
        assert_eq!(record["variant_spec_id"], json!("adapter-said"));
    }

    #[test]
    fn annotate_and_standalone_set_and_clear_group_fields() {
        let mut record = obj(json!({"checkpoint_ref": "old", "a": 1}));
        annotate_group_record(
            &mut record,
            &GroupAnnotation {
                group_id: "g",
                seed_item_id: "s",
                record_kind: RECORD_KIND_EPISODE_SUFFIX,
                prefix_reused: true,
                checkpoint_ref: None,
            },
        );
        assert_eq!(
            Value::Object(record.clone()),
            json!({"a": 1, "execution_group_id": "g", "record_kind": "episode_suffix",
                   "seed_item_id": "s", "prefix_reused": true})
        );
        annotate_group_record(
            &mut record,
            &GroupAnnotation {
                group_id: "g",
                seed_item_id: "s",
                record_kind: RECORD_KIND_SHARED_PREFIX,
                prefix_reused: false,
                checkpoint_ref: Some("ckpt"),
            },
        );
        assert_eq!(record["checkpoint_ref"], json!("ckpt"));
        assert_eq!(record["record_kind"], json!("shared_prefix"));
        standalone_record(&mut record);
        assert!(!record.contains_key("execution_group_id"));
        assert_eq!(record["record_kind"], json!("standalone"));
        assert_eq!(record["prefix_reused"], json!(false));
    }

    #[test]
    fn release_error_attaches_and_ors_retryability() {
        let seed = obj(json!({"item_id": "s"}));
        let release = adapter_error_record(
            &seed,
            &AdapterError {
                error_type: ErrorType::Trap,
                kind: String::new(),
                message: "release trapped".into(),
                retryable_infra_error: true,
                record_fields: None,
            },
            0.2,
        );
        let mut prefix = obj(json!({"accepted": true, "retryable_infra_error": false}));
        attach_release_error(&mut prefix, &release);
        assert_eq!(prefix["retryable_infra_error"], json!(true));
        assert_eq!(prefix["accepted"], json!(true));
        assert_eq!(
            prefix["episode_release_error"],
            json!({
                "duration_minutes": 0.2,
                "retryable_infra_error": true,
                "adapter_error": {
                    "schema_version": "loopx_explore_adapter_error_v0",
                    "type": "trap", "message": "release trapped"
                }
            })
        );
        // A retryable prefix stays retryable when the release was not.
        let quiet = adapter_error_record(&seed, &AdapterError::new(ErrorType::Trap, "x"), 0.0);
        let mut prefix = obj(json!({"retryable_infra_error": true}));
        attach_release_error(&mut prefix, &quiet);
        assert_eq!(prefix["retryable_infra_error"], json!(true));
        assert_eq!(
            prefix["episode_release_error"]["retryable_infra_error"],
            json!(false)
        );
    }
}
