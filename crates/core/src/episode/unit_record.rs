//! [`UnitRecord`]: a record on its way from the lane that produced it to
//! `records.jsonl`, with the host's fields of a suffix kept typed beside
//! the adapter's own fields instead of inserted into them.
//!
//! Every suffix record the adapter returns gets ten host fields (reference
//! `_normalize_item_record`, `duration_minutes`, `_annotate_group_record`)
//! and then the tally's two (`novel_value`, `raw_value`). Inserted into the
//! record's JSON map, each is a new key string, a new value and a search of
//! the map, all dropped again once the line is written: most of what a lane
//! spent per item besides the component call. Here the group's fields are
//! shared by its records ([`GroupFields`], behind an `Arc`), the item's are
//! the two ids the record copies, and the line is written straight from
//! both, in key order, byte for byte what the map would give
//! ([`UnitRecord::for_each_field`], checked against the map form by a
//! property test). [`UnitRecord::get`] reads a field as the map would hold
//! it; [`UnitRecord::into_map`] builds the map where one is needed.

use std::sync::Arc;

use serde_json::Value;

use super::adapter::{Item, Record};
use super::item::ItemIdentity;
use super::records::{GroupAnnotation, quarantine_host_owned};
use super::value::json_f64;

/// Read access to a record's fields, whichever form it is in.
pub trait RecordFields {
    /// The field `key`, as the record's JSON object holds it.
    fn field(&self, key: &str) -> Option<&Value>;
}

impl RecordFields for Record {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

/// The host's fields every suffix record of one group carries (reference
/// `_annotate_group_record`), built once per group.
#[derive(Clone, Debug)]
pub struct GroupFields {
    execution_group_id: Value,
    seed_item_id: Value,
    record_kind: Value,
    prefix_reused: Value,
    /// `None` removes an adapter's `checkpoint_ref`.
    checkpoint_ref: Option<Value>,
}

impl GroupFields {
    /// The fields `annotation` writes.
    pub fn new(annotation: &GroupAnnotation<'_>) -> Arc<GroupFields> {
        Arc::new(GroupFields {
            execution_group_id: Value::from(annotation.group_id),
            seed_item_id: Value::from(annotation.seed_item_id),
            record_kind: Value::from(annotation.record_kind),
            prefix_reused: Value::Bool(annotation.prefix_reused),
            checkpoint_ref: annotation.checkpoint_ref.map(Value::from),
        })
    }
}

/// The host's fields of one suffix record: its item's identity (shared
/// with the item), the duration and its group's fields (shared with the
/// group's other records).
#[derive(Clone, Debug)]
struct SuffixFields {
    identity: Arc<ItemIdentity>,
    duration_minutes: Value,
    group: Arc<GroupFields>,
}

/// `is_variant` as a record holds it.
static IS_VARIANT: [Value; 2] = [Value::Bool(false), Value::Bool(true)];

/// The host's keys a suffix record's fields may take, in key order.
const HOST_KEYS: [&str; 12] = [
    "checkpoint_ref",
    "duration_minutes",
    "execution_group_id",
    "family",
    "is_variant",
    "item_id",
    "novel_value",
    "prefix_reused",
    "raw_value",
    "record_kind",
    "seed_item_id",
    "variant_spec_id",
];

/// What a host key holds in a record.
enum Host<'a> {
    /// The host's value.
    Set(&'a Value),
    /// Removed: the adapter's value is not written either.
    Removed,
    /// Not the host's: the adapter's value stands.
    Absent,
}

/// One record of a unit, as the arm writes and tallies it.
#[derive(Clone, Debug, Default)]
pub struct UnitRecord {
    /// The adapter's fields (or a whole record the host built as a map).
    map: Record,
    /// The host's suffix fields, when this is a suffix's record.
    host: Option<Box<SuffixFields>>,
    /// `novel_value` and `raw_value`, once the tally credited the record.
    novelty: Option<[Value; 2]>,
}

impl From<Record> for UnitRecord {
    fn from(map: Record) -> UnitRecord {
        UnitRecord {
            map,
            host: None,
            novelty: None,
        }
    }
}

impl UnitRecord {
    /// A suffix's `record` as the adapter returned it for `item`, its
    /// host-owned fields quarantined ([`quarantine_host_owned`]), with the
    /// host's fields: the item's ids (`item_id`, `family`, `is_variant`,
    /// `variant_spec_id`), `duration_minutes = minutes` and the group's
    /// `group` fields — what `normalize_item_record`, the duration and
    /// `annotate_group_record` would insert, in that order.
    pub fn suffix(mut record: Record, item: &Item, minutes: f64, group: &Arc<GroupFields>) -> Self {
        quarantine_host_owned(&mut record);
        UnitRecord {
            host: Some(Box::new(SuffixFields {
                identity: item.shared_identity(),
                duration_minutes: json_f64(minutes),
                group: Arc::clone(group),
            })),
            map: record,
            novelty: None,
        }
    }

    /// Sets `novel_value` and `raw_value` (the tally's credit).
    pub fn set_novelty(&mut self, novel_value: Value, raw_value: Value) {
        self.novelty = Some([novel_value, raw_value]);
    }

    /// The field `key`, as the record's JSON object holds it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self.host_field(key) {
            Host::Set(value) => Some(value),
            Host::Removed => None,
            Host::Absent => self.map.get(key),
        }
    }

    /// What the host holds for `key`.
    fn host_field(&self, key: &str) -> Host<'_> {
        if let Some(novelty) = &self.novelty {
            match key {
                "novel_value" => return Host::Set(&novelty[0]),
                "raw_value" => return Host::Set(&novelty[1]),
                _ => {}
            }
        }
        let Some(host) = &self.host else {
            return Host::Absent;
        };
        let group = &host.group;
        Host::Set(match key {
            "item_id" => &host.identity.item_id,
            "family" => &host.identity.family,
            "is_variant" => &IS_VARIANT[usize::from(host.identity.is_variant)],
            "duration_minutes" => &host.duration_minutes,
            "execution_group_id" => &group.execution_group_id,
            "seed_item_id" => &group.seed_item_id,
            "record_kind" => &group.record_kind,
            "prefix_reused" => &group.prefix_reused,
            // A seed's is removed; a variant's is its `variant_spec.spec_id`
            // or, without one, whatever the adapter wrote.
            "variant_spec_id" => match (host.identity.is_variant, &host.identity.variant_spec_id) {
                (false, _) => return Host::Removed,
                (true, Some(value)) => value,
                (true, None) => return Host::Absent,
            },
            "checkpoint_ref" => match &group.checkpoint_ref {
                Some(value) => value,
                None => return Host::Removed,
            },
            _ => return Host::Absent,
        })
    }

    /// Calls `each` with every field in key order, as the record's JSON
    /// object holds them; stops at the first error.
    ///
    /// # Errors
    /// The first error `each` returns.
    pub fn for_each_field<E>(
        &self,
        mut each: impl FnMut(&str, &Value) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.host.is_none() && self.novelty.is_none() {
            return self
                .map
                .iter()
                .try_for_each(|(key, value)| each(key, value));
        }
        let mut host = HOST_KEYS.iter().copied().peekable();
        for (key, value) in &self.map {
            while let Some(next) = host.next_if(|next| *next < key.as_str()) {
                if let Host::Set(value) = self.host_field(next) {
                    each(next, value)?;
                }
            }
            if host.next_if(|next| *next == key.as_str()).is_some() {
                match self.host_field(key) {
                    Host::Set(value) => each(key, value)?,
                    Host::Removed => {}
                    Host::Absent => each(key, value)?,
                }
            } else {
                each(key, value)?;
            }
        }
        for next in host {
            if let Host::Set(value) = self.host_field(next) {
                each(next, value)?;
            }
        }
        Ok(())
    }

    /// The record as a JSON map, the host's fields in it.
    pub fn into_map(self) -> Record {
        if self.host.is_none() && self.novelty.is_none() {
            return self.map;
        }
        self.to_map()
    }

    /// The record as a JSON map, the host's fields in it: the fields
    /// [`UnitRecord::for_each_field`] gives, copied (already in key order,
    /// so the map is built without a search per key).
    pub fn to_map(&self) -> Record {
        let mut fields = Vec::with_capacity(self.map.len() + HOST_KEYS.len());
        let Ok(()) = self.for_each_field(|key, value| {
            fields.push((key.to_owned(), value.clone()));
            Ok::<(), std::convert::Infallible>(())
        });
        fields.into_iter().collect()
    }
}

impl RecordFields for UnitRecord {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::records::{RECORD_KIND_EPISODE_SUFFIX, set_field};
    use crate::hostile_inputs::{config, json_value};
    use proptest::prelude::*;
    use serde_json::{Map, json};

    /// What [`UnitRecord::suffix`] stands for, done on the map: the reference's
    /// steps one after another (for tests).
    fn suffix_stepwise(
        mut record: Record,
        item: &Item,
        minutes: f64,
        annotation: &GroupAnnotation<'_>,
    ) -> Record {
        use crate::episode::records::{annotate_group_record, normalize_item_record};
        normalize_item_record(&mut record, item);
        set_field(&mut record, "duration_minutes", json_f64(minutes));
        annotate_group_record(&mut record, annotation);
        record
    }

    fn record_strategy() -> impl Strategy<Value = Record> {
        // The host's own keys among others, so overwrites and removals
        // are exercised.
        let key = prop_oneof![
            prop::sample::select(HOST_KEYS.to_vec()).prop_map(str::to_owned),
            Just("a".to_string()),
            Just("zz".to_string()),
            Just("observation_keys".to_string()),
            "[a-z_]{0,12}",
        ];
        prop::collection::btree_map(key, json_value(), 0..10)
            .prop_map(|map| map.into_iter().collect())
    }

    fn item_strategy() -> impl Strategy<Value = Item> {
        (
            prop_oneof![Just(json!(true)), Just(json!(false)), json_value()],
            prop::option::of(json_value()),
            prop::option::of(json_value()),
            json_value(),
        )
            .prop_map(|(is_variant, spec_id, item_id, family)| {
                let mut map = Map::new();
                map.insert("is_variant".into(), is_variant);
                if let Some(item_id) = item_id {
                    map.insert("item_id".into(), item_id);
                }
                map.insert("family".into(), family);
                if let Some(spec_id) = spec_id {
                    map.insert("variant_spec".into(), json!({"spec_id": spec_id}));
                }
                Item::from(map)
            })
    }

    fn written(record: &UnitRecord) -> String {
        let mut fields = Vec::new();
        record
            .for_each_field(|key, value| {
                fields.push(format!("{}:{}", json!(key), value));
                Ok::<_, ()>(())
            })
            .unwrap();
        format!("{{{}}}", fields.join(","))
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn prop_a_suffix_record_is_the_reference_steps_on_the_map(
            record in record_strategy(),
            item in item_strategy(),
            minutes in prop_oneof![Just(0.0), 1e-9..10.0f64],
            checkpoint_ref in prop::option::of("[a-z:]{0,8}"),
            prefix_reused in any::<bool>(),
            novelty in prop::option::of((json_value(), json_value())),
        ) {
            let annotation = GroupAnnotation {
                group_id: "main:epoch-1:group-0001",
                seed_item_id: "s1",
                record_kind: RECORD_KIND_EPISODE_SUFFIX,
                prefix_reused,
                checkpoint_ref: checkpoint_ref.as_deref(),
            };
            let mut expected = suffix_stepwise(record.clone(), &item, minutes, &annotation);
            let mut typed =
                UnitRecord::suffix(record, &item, minutes, &GroupFields::new(&annotation));
            if let Some((novel, raw)) = novelty {
                set_field(&mut expected, "novel_value", novel.clone());
                set_field(&mut expected, "raw_value", raw.clone());
                typed.set_novelty(novel, raw);
            }
            // Written in key order, byte for byte as the map.
            prop_assert_eq!(written(&typed), serde_json::to_string(&expected).unwrap());
            // Every field reads as the map holds it, and no other.
            for key in expected.keys().map(String::as_str).chain(HOST_KEYS).chain(["nope"]) {
                prop_assert_eq!(typed.get(key), expected.get(key), "{}", key);
            }
            prop_assert_eq!(typed.into_map(), expected);
        }

        #[test]
        fn prop_a_map_record_is_itself(record in record_strategy()) {
            let typed = UnitRecord::from(record.clone());
            prop_assert_eq!(written(&typed), serde_json::to_string(&record).unwrap());
            prop_assert_eq!(typed.into_map(), record);
        }
    }
}
