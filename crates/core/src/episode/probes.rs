//! Router probes: one observation per group, one per ungrouped record.
//!
//! Mirrors `build_router_probes` in `episode_runtime.py`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::adapter::Record;
use super::metrics::record_duration_minutes;
use super::records::RECORD_KIND_EPISODE_SUFFIX;
use super::value::{json_f64, py_float, py_str, str_or_empty, truthy};

/// Folds sibling prefix/suffix records into one router observation each
/// (reference `build_router_probes`).
///
/// Output order follows the first appearance of each group or ungrouped
/// record. An ungrouped record (no `execution_group_id`) gives
/// `{family, duration_minutes, observation_keys, weighted_flags, accepted,
/// retryable_infra_error}` with its own values (`family` defaults to
/// `general`). A group gives `{execution_group_id, family (of its first
/// record), duration_minutes (sum), observation_keys (union, first-seen
/// order), weighted_flags (max weight per flag), accepted (any),
/// accepted_count, attempt_count, retryable_infra_error (any)}`, where
/// acceptance counts only the suffixes when the group has any, else all
/// siblings. Flag weights that are not numeric are skipped (the reference
/// would raise).
pub fn build_router_probes(records: &[Record]) -> Vec<Map<String, Value>> {
    enum Slot {
        Record(usize),
        Group(String),
    }
    let mut order: Vec<Slot> = Vec::new();
    let mut grouped: HashMap<String, Vec<&Record>> = HashMap::new();
    for (index, record) in records.iter().enumerate() {
        let group_id = str_or_empty(record.get("execution_group_id"));
        let group_id = group_id.trim();
        if group_id.is_empty() {
            order.push(Slot::Record(index));
            continue;
        }
        match grouped.get_mut(group_id) {
            Some(siblings) => siblings.push(record),
            None => {
                grouped.insert(group_id.to_owned(), vec![record]);
                order.push(Slot::Group(group_id.to_owned()));
            }
        }
    }

    let family_of = |record: &Record| -> Value {
        Value::from(match str_or_empty(record.get("family")) {
            text if text.is_empty() => "general".to_owned(),
            text => text.into_owned(),
        })
    };

    let mut probes = Vec::with_capacity(order.len());
    for slot in order {
        let mut probe = Map::new();
        match slot {
            Slot::Record(index) => {
                let record = &records[index];
                let or_empty = |key: &str, empty: Value| match record.get(key) {
                    Some(value) if truthy(Some(value)) => value.clone(),
                    _ => empty,
                };
                probe.insert("family".into(), family_of(record));
                probe.insert(
                    "duration_minutes".into(),
                    record
                        .get("duration_minutes")
                        .cloned()
                        .unwrap_or(Value::Null),
                );
                probe.insert(
                    "observation_keys".into(),
                    or_empty("observation_keys", Value::Array(Vec::new())),
                );
                probe.insert(
                    "weighted_flags".into(),
                    or_empty("weighted_flags", Value::Object(Map::new())),
                );
                probe.insert(
                    "accepted".into(),
                    Value::Bool(truthy(record.get("accepted"))),
                );
                probe.insert(
                    "retryable_infra_error".into(),
                    Value::Bool(truthy(record.get("retryable_infra_error"))),
                );
            }
            Slot::Group(group_id) => {
                let siblings = &grouped[&group_id];
                let mut keys: Vec<Value> = Vec::new();
                let mut seen_keys: HashSet<String> = HashSet::new();
                let mut flags: Map<String, Value> = Map::new();
                let mut flag_max: HashMap<String, f64> = HashMap::new();
                for record in siblings {
                    if let Some(Value::Array(observed)) = record.get("observation_keys") {
                        for key in observed {
                            let key = py_str(key);
                            if seen_keys.insert(key.to_string()) {
                                keys.push(Value::from(key.into_owned()));
                            }
                        }
                    }
                    if let Some(Value::Object(weighted)) = record.get("weighted_flags") {
                        for (name, weight) in weighted {
                            let Some(weight) = py_float(weight) else {
                                continue;
                            };
                            let best = flag_max.entry(name.clone()).or_insert(f64::NEG_INFINITY);
                            *best = best.max(weight);
                            flags.insert(name.clone(), json_f64(*best));
                        }
                    }
                }
                let suffixes: Vec<&&Record> = siblings
                    .iter()
                    .filter(|r| {
                        r.get("record_kind").and_then(Value::as_str)
                            == Some(RECORD_KIND_EPISODE_SUFFIX)
                    })
                    .collect();
                let (accepted_count, attempt_count) = if suffixes.is_empty() {
                    (
                        siblings
                            .iter()
                            .filter(|r| truthy(r.get("accepted")))
                            .count(),
                        siblings.len(),
                    )
                } else {
                    (
                        suffixes
                            .iter()
                            .filter(|r| truthy(r.get("accepted")))
                            .count(),
                        suffixes.len(),
                    )
                };
                let duration: f64 = siblings.iter().map(|r| record_duration_minutes(*r)).sum();
                probe.insert("execution_group_id".into(), Value::from(group_id.as_str()));
                probe.insert("family".into(), family_of(siblings[0]));
                probe.insert("duration_minutes".into(), json_f64(duration));
                probe.insert("observation_keys".into(), Value::Array(keys));
                probe.insert("weighted_flags".into(), Value::Object(flags));
                probe.insert("accepted".into(), Value::Bool(accepted_count > 0));
                probe.insert("accepted_count".into(), Value::from(accepted_count));
                probe.insert("attempt_count".into(), Value::from(attempt_count));
                probe.insert(
                    "retryable_infra_error".into(),
                    Value::Bool(
                        siblings
                            .iter()
                            .any(|r| truthy(r.get("retryable_infra_error"))),
                    ),
                );
            }
        }
        probes.push(probe);
    }
    probes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> Record {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn siblings_fold_into_one_probe_in_first_seen_order() {
        let records = vec![
            record(
                json!({"family": "solo", "duration_minutes": 0.3, "accepted": true,
                          "observation_keys": ["x"]}),
            ),
            record(
                json!({"execution_group_id": "g1", "record_kind": "shared_prefix",
                          "family": "f", "duration_minutes": 1.0, "accepted": true,
                          "observation_keys": ["a", "b"], "weighted_flags": {"hot": 0.5}}),
            ),
            record(json!({"duration_minutes": 0.1})),
            record(
                json!({"execution_group_id": "g1", "record_kind": "episode_suffix",
                          "family": "f", "duration_minutes": 0.5, "accepted": false,
                          "observation_keys": ["b", "c", 3], "weighted_flags": {"hot": 2.0, "cold": "1"},
                          "retryable_infra_error": true}),
            ),
            record(
                json!({"execution_group_id": "g1", "record_kind": "episode_suffix",
                          "family": "f", "duration_minutes": 0.25, "accepted": true,
                          "weighted_flags": {"hot": 1.0, "bad": "x"}}),
            ),
        ];
        let probes = build_router_probes(&records);
        assert_eq!(probes.len(), 3);
        assert_eq!(
            Value::Object(probes[0].clone()),
            json!({"family": "solo", "duration_minutes": 0.3, "observation_keys": ["x"],
                   "weighted_flags": {}, "accepted": true, "retryable_infra_error": false})
        );
        assert_eq!(
            Value::Object(probes[1].clone()),
            json!({
                "execution_group_id": "g1", "family": "f", "duration_minutes": 1.75,
                "observation_keys": ["a", "b", "c", "3"],
                "weighted_flags": {"hot": 2.0, "cold": 1.0},
                // only the suffixes count: one of two accepted
                "accepted": true, "accepted_count": 1, "attempt_count": 2,
                "retryable_infra_error": true
            })
        );
        assert_eq!(
            Value::Object(probes[2].clone()),
            json!({"family": "general", "duration_minutes": 0.1, "observation_keys": [],
                   "weighted_flags": {}, "accepted": false, "retryable_infra_error": false})
        );
    }

    #[test]
    fn a_group_without_suffixes_counts_acceptance_over_all_siblings() {
        let records = vec![record(json!({
            "execution_group_id": "g", "record_kind": "shared_prefix",
            "accepted": false, "duration_minutes": "2"
        }))];
        let probes = build_router_probes(&records);
        assert_eq!(probes[0]["accepted"], json!(false));
        assert_eq!(probes[0]["accepted_count"], json!(0));
        assert_eq!(probes[0]["attempt_count"], json!(1));
        assert_eq!(probes[0]["duration_minutes"], json!(2.0));
        assert_eq!(probes[0]["family"], json!("general"));
    }
}
