//! Execution units: each seed with its variants collapsed into one group,
//! malformed items kept as invalid units.
//!
//! Mirrors `item_concurrency_keys` and `build_episode_execution_units` in
//! `episode_runtime.py`.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::borrow::Cow;

use serde_json::Value;

use super::adapter::{AdapterError, ErrorType, Item};
use super::value::{py_repr, py_str, str_or_empty, truthy};

mod group_id;

pub use group_id::{GroupId, GroupIdError};

/// The exclusion keys of a queue item (reference `item_concurrency_keys`).
///
/// `concurrency_keys` (an array; `null` entries skipped, each entry as text,
/// trimmed, empty ones skipped) wins; when it yields nothing, the item's
/// `concurrency_key`, else its `family`, is the single key. Duplicates are
/// dropped, first occurrence kept. An item with no key at all returns an
/// empty list and never waits for anything.
pub fn item_concurrency_keys(item: &Item) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    if let Some(Value::Array(raw_keys)) = item.get("concurrency_keys") {
        for raw in raw_keys {
            if raw.is_null() {
                continue;
            }
            let text = py_str(raw);
            let key = text.trim();
            if !key.is_empty() && !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
        }
    }
    if keys.is_empty() {
        let fallback = if truthy(item.get("concurrency_key")) {
            str_or_empty(item.get("concurrency_key"))
        } else {
            str_or_empty(item.get("family"))
        };
        let key = fallback.trim();
        if !key.is_empty() {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// One seed and its variants, run as a prepared prefix plus suffixes.
#[derive(Clone, Debug, PartialEq)]
pub struct EpisodeGroup {
    /// `{arm}:epoch-{epoch}:group-{NNNN}` (a [`GroupId`] as text), numbered
    /// from 1 in queue order.
    pub execution_group_id: String,
    /// The seed's `item_id`, trimmed.
    pub seed_item_id: String,
    /// The seed first, then its variants in queue order. Never empty.
    pub items: Vec<Item>,
    /// Union of every item's [`item_concurrency_keys`], in first-seen order.
    pub concurrency_keys: Vec<String>,
}

impl EpisodeGroup {
    /// The seed item (`items[0]`).
    pub fn seed(&self) -> &Item {
        &self.items[0]
    }

    /// The seed's `family` (`None` when absent).
    pub fn family(&self) -> Option<&Value> {
        self.seed().get("family")
    }
}

/// An item that cannot be grouped; resolved by the failure policy.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidUnit {
    /// The item as queued.
    pub item: Item,
    /// Why it cannot run (the reference's exact `ValueError` text).
    pub reason: String,
    /// The item's own [`item_concurrency_keys`].
    pub concurrency_keys: Vec<String>,
}

/// One unit of episode-mode work on the queue.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutionUnit {
    /// A valid seed with its variants.
    Group(EpisodeGroup),
    /// A malformed item.
    Invalid(InvalidUnit),
}

impl ExecutionUnit {
    /// The keys the queue locks while this unit runs.
    pub fn concurrency_keys(&self) -> &[String] {
        match self {
            ExecutionUnit::Group(group) => &group.concurrency_keys,
            ExecutionUnit::Invalid(invalid) => &invalid.concurrency_keys,
        }
    }

    /// The number of queue items this unit stands for.
    pub fn item_count(&self) -> usize {
        match self {
            ExecutionUnit::Group(group) => group.items.len(),
            ExecutionUnit::Invalid(_) => 1,
        }
    }
}

/// The result of validating a queue: per item, its reason to be invalid, and
/// for each valid seed the indices of its valid variants.
struct Classification {
    invalid: Vec<Option<String>>,
    variants_of: HashMap<usize, Vec<usize>>,
}

impl Classification {
    fn first_invalid(&self) -> Option<&str> {
        self.invalid.iter().flatten().next().map(String::as_str)
    }
}

fn normalized_id<'a>(item: &'a Item, key: &str) -> Cow<'a, str> {
    match str_or_empty(item.get(key)) {
        Cow::Borrowed(text) => Cow::Borrowed(text.trim()),
        Cow::Owned(text) => Cow::Owned(text.trim().to_owned()),
    }
}

fn classify(items: &[Item]) -> Classification {
    let mut invalid: Vec<Option<String>> = vec![None; items.len()];
    let mut seeds: HashMap<Cow<'_, str>, usize> = HashMap::with_capacity(items.len());
    let mut ambiguous: HashSet<Cow<'_, str>> = HashSet::new();

    for (index, item) in items.iter().enumerate() {
        if truthy(item.get("is_variant")) {
            continue;
        }
        let item_id = normalized_id(item, "item_id");
        if item_id.is_empty() {
            invalid[index] =
                Some("recoverable episode seed items require a non-empty item_id".to_owned());
            continue;
        }
        if let Some(&first) = seeds.get(&item_id) {
            let reason = format!(
                "recoverable episode seed item_id is duplicated: {}",
                py_repr(Some(&Value::String(item_id.to_string())))
            );
            if invalid[first].is_none() {
                invalid[first] = Some(reason.clone());
            }
            invalid[index] = Some(reason);
            ambiguous.insert(item_id);
            continue;
        }
        seeds.insert(item_id, index);
    }

    let mut variants_of: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut variant_ids: HashSet<Cow<'_, str>> = HashSet::new();
    for (index, item) in items.iter().enumerate() {
        if !truthy(item.get("is_variant")) {
            continue;
        }
        let item_id = normalized_id(item, "item_id");
        if item_id.is_empty() {
            invalid[index] =
                Some("recoverable episode variant items require a non-empty item_id".to_owned());
            continue;
        }
        let id_repr = || py_repr(Some(&Value::String(item_id.to_string())));
        if seeds.contains_key(&item_id) {
            invalid[index] = Some(format!(
                "recoverable episode variant item_id collides with a seed item_id: {}",
                id_repr()
            ));
            variant_ids.insert(item_id);
            continue;
        }
        if variant_ids.contains(&item_id) {
            invalid[index] = Some(format!(
                "recoverable episode variant item_id is duplicated: {}",
                id_repr()
            ));
            continue;
        }
        variant_ids.insert(item_id);
        let seed_item_id = normalized_id(item, "seed_item_id");
        if ambiguous.contains(&seed_item_id) {
            invalid[index] = Some(format!(
                "recoverable episode variant seed_item_id is ambiguous because the seed \
                 item_id is duplicated: {}",
                py_repr(Some(&Value::String(seed_item_id.into_owned())))
            ));
            continue;
        }
        match seeds.get(&seed_item_id) {
            Some(&seed_index) if !seed_item_id.is_empty() => {
                variants_of.entry(seed_index).or_default().push(index);
            }
            _ => {
                invalid[index] = Some(format!(
                    "recoverable episode variant requires seed_item_id matching an epoch seed: {}",
                    py_repr(item.get("item_id"))
                ));
            }
        }
    }
    Classification {
        invalid,
        variants_of,
    }
}

/// The reference's `fatal_preflight=True` check: `Err` with the reason of
/// the lowest-index invalid item ([`ErrorType::InvalidItem`]), `Ok` when
/// every item can be grouped. Makes no adapter call.
pub fn fatal_preflight(items: &[Item]) -> Result<(), AdapterError> {
    match classify(items).first_invalid() {
        Some(reason) => Err(AdapterError::new(ErrorType::InvalidItem, reason)),
        None => Ok(()),
    }
}

/// Collapses each seed and its variants into one [`EpisodeGroup`] (reference
/// `build_episode_execution_units` with `fatal_preflight=False`).
///
/// Total: malformed items become [`InvalidUnit`]s with the reference's
/// reasons, never an error:
/// - a seed (`is_variant` falsy) or variant with an empty `item_id`;
/// - a seed `item_id` seen twice (both seeds become invalid, and so does
///   every variant naming that seed: the seed is ambiguous);
/// - a variant `item_id` equal to a seed's, or seen on an earlier variant;
/// - a variant whose `seed_item_id` names no seed of this queue.
///
/// Units come out in queue order: each valid seed's group where the seed
/// was, each invalid item where it was; valid variants travel inside their
/// seed's group. Items are moved, not copied.
pub fn build_episode_execution_units(
    items: Vec<Item>,
    arm: &str,
    epoch: u32,
) -> Vec<ExecutionUnit> {
    let classification = classify(&items);
    assemble(items, classification, arm, epoch)
}

/// [`build_episode_execution_units`] with the reference's
/// `fatal_preflight=True`: `Err` with the first invalid reason by index
/// before anything is grouped.
pub fn build_episode_execution_units_checked(
    items: Vec<Item>,
    arm: &str,
    epoch: u32,
) -> Result<Vec<ExecutionUnit>, AdapterError> {
    let classification = classify(&items);
    if let Some(reason) = classification.first_invalid() {
        return Err(AdapterError::new(ErrorType::InvalidItem, reason));
    }
    Ok(assemble(items, classification, arm, epoch))
}

fn assemble(
    items: Vec<Item>,
    mut classification: Classification,
    arm: &str,
    epoch: u32,
) -> Vec<ExecutionUnit> {
    let is_variant: Vec<bool> = items
        .iter()
        .map(|item| truthy(item.get("is_variant")))
        .collect();
    let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
    let mut units = Vec::with_capacity(slots.len());
    let mut group_index = 0u32;
    for index in 0..slots.len() {
        if let Some(reason) = classification.invalid[index].take() {
            let item = slots[index].take().expect("each item is placed once");
            let concurrency_keys = item_concurrency_keys(&item);
            units.push(ExecutionUnit::Invalid(InvalidUnit {
                item,
                reason,
                concurrency_keys,
            }));
            continue;
        }
        if is_variant[index] {
            continue; // scheduled inside its seed's group
        }
        let seed = slots[index].take().expect("each item is placed once");
        group_index += 1;
        let execution_group_id = GroupId::new(arm, epoch, group_index).to_string();
        let seed_item_id = normalized_id(&seed, "item_id").into_owned();
        let variant_indices = classification
            .variants_of
            .remove(&index)
            .unwrap_or_default();
        let mut group_items = Vec::with_capacity(1 + variant_indices.len());
        group_items.push(seed);
        for variant_index in variant_indices {
            group_items.push(
                slots[variant_index]
                    .take()
                    .expect("each item is placed once"),
            );
        }
        let mut concurrency_keys: Vec<String> = Vec::new();
        for item in &group_items {
            for key in item_concurrency_keys(item) {
                if !concurrency_keys.contains(&key) {
                    concurrency_keys.push(key);
                }
            }
        }
        units.push(ExecutionUnit::Group(EpisodeGroup {
            execution_group_id,
            seed_item_id,
            items: group_items,
            concurrency_keys,
        }));
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(value: Value) -> Item {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn seed(id: &str, family: &str) -> Item {
        item(json!({"item_id": id, "family": family}))
    }

    fn variant(id: &str, seed_id: &str, family: &str) -> Item {
        item(json!({
            "item_id": id, "family": family, "is_variant": true, "seed_item_id": seed_id,
            "concurrency_key": format!("{family}:variant:{id}")
        }))
    }

    fn invalid_reasons(units: &[ExecutionUnit]) -> Vec<(Value, String)> {
        units
            .iter()
            .filter_map(|unit| match unit {
                ExecutionUnit::Invalid(invalid) => Some((
                    invalid.item.get("item_id").cloned().unwrap_or(Value::Null),
                    invalid.reason.clone(),
                )),
                ExecutionUnit::Group(_) => None,
            })
            .collect()
    }

    #[test]
    fn concurrency_keys_normalise_like_the_reference() {
        let keys = item_concurrency_keys(&item(json!({
            "concurrency_keys": [" a ", null, "", "b", "a", 7], "family": "fam"
        })));
        assert_eq!(keys, vec!["a", "b", "7"]);
        // An empty list (or one with only blanks) falls back.
        let keys = item_concurrency_keys(&item(json!({
            "concurrency_keys": ["  ", null], "concurrency_key": " ck ", "family": "fam"
        })));
        assert_eq!(keys, vec!["ck"]);
        // A string is not a list of keys.
        let keys = item_concurrency_keys(&item(json!({"concurrency_keys": "ab", "family": "fam"})));
        assert_eq!(keys, vec!["fam"]);
        let keys = item_concurrency_keys(&item(json!({"concurrency_key": "", "family": "fam"})));
        assert_eq!(keys, vec!["fam"]);
        assert!(item_concurrency_keys(&item(json!({"item_id": "x"}))).is_empty());
    }

    #[test]
    fn seeds_and_variants_collapse_into_numbered_groups() {
        let items = vec![
            variant("v2", "s2", "g"), // a variant may precede its seed
            seed("s1", "f"),
            variant("v1", "s1", "f"),
            seed(" s2 ", "g"),
            variant("v3", "s1", "f"),
        ];
        let units = build_episode_execution_units(items, "main", 3);
        assert_eq!(units.len(), 2);
        let ExecutionUnit::Group(first) = &units[0] else {
            panic!("expected a group")
        };
        assert_eq!(first.execution_group_id, "main:epoch-3:group-0001");
        assert_eq!(first.seed_item_id, "s1");
        let ids: Vec<_> = first.items.iter().map(|i| i["item_id"].clone()).collect();
        assert_eq!(ids, vec![json!("s1"), json!("v1"), json!("v3")]);
        assert_eq!(
            first.concurrency_keys,
            vec!["f", "f:variant:v1", "f:variant:v3"]
        );
        assert_eq!(first.family(), Some(&json!("f")));
        let ExecutionUnit::Group(second) = &units[1] else {
            panic!("expected a group")
        };
        assert_eq!(second.execution_group_id, "main:epoch-3:group-0002");
        assert_eq!(second.seed_item_id, "s2");
        assert_eq!(second.items.len(), 2);
        assert_eq!(second.seed()["item_id"], json!(" s2 "));
    }

    #[test]
    fn empty_ids_are_invalid_with_exact_reasons() {
        let items = vec![
            item(json!({"item_id": "  ", "family": "f"})),
            item(json!({"is_variant": true, "seed_item_id": "s"})),
            seed("s", "f"),
        ];
        let units = build_episode_execution_units(items, "a", 1);
        assert_eq!(
            invalid_reasons(&units),
            vec![
                (
                    json!("  "),
                    "recoverable episode seed items require a non-empty item_id".to_owned()
                ),
                (
                    Value::Null,
                    "recoverable episode variant items require a non-empty item_id".to_owned()
                ),
            ]
        );
        // The valid seed is still grouped, numbered 1.
        let ExecutionUnit::Group(group) = &units[2] else {
            panic!("expected a group")
        };
        assert_eq!(group.execution_group_id, "a:epoch-1:group-0001");
    }

    #[test]
    fn duplicated_seed_invalidates_both_copies_and_makes_its_variants_ambiguous() {
        let items = vec![
            seed("s", "f"),
            seed("s", "f"),
            variant("v", "s", "f"),
            seed("t", "g"),
        ];
        let units = build_episode_execution_units(items, "a", 1);
        let dup = "recoverable episode seed item_id is duplicated: 's'".to_owned();
        assert_eq!(
            invalid_reasons(&units),
            vec![
                (json!("s"), dup.clone()),
                (json!("s"), dup),
                (
                    json!("v"),
                    "recoverable episode variant seed_item_id is ambiguous because the seed \
                     item_id is duplicated: 's'"
                        .to_owned()
                ),
            ]
        );
        assert_eq!(units.len(), 4);
        let ExecutionUnit::Group(group) = &units[3] else {
            panic!("expected a group")
        };
        assert_eq!(group.execution_group_id, "a:epoch-1:group-0001");
    }

    #[test]
    fn variant_collisions_duplicates_and_unknown_seeds_have_exact_reasons() {
        let items = vec![
            seed("s", "f"),
            variant("s", "s", "f"),       // collides with the seed id
            variant("v", "s", "f"),       // fine
            variant("v", "s", "f"),       // duplicated variant id
            variant("w", "nowhere", "f"), // unknown seed
            variant("x", "", "f"),        // no seed at all
        ];
        let units = build_episode_execution_units(items, "a", 1);
        assert_eq!(
            invalid_reasons(&units),
            vec![
                (
                    json!("s"),
                    "recoverable episode variant item_id collides with a seed item_id: 's'"
                        .to_owned()
                ),
                (
                    json!("v"),
                    "recoverable episode variant item_id is duplicated: 'v'".to_owned()
                ),
                (
                    json!("w"),
                    "recoverable episode variant requires seed_item_id matching an epoch seed: 'w'"
                        .to_owned()
                ),
                (
                    json!("x"),
                    "recoverable episode variant requires seed_item_id matching an epoch seed: 'x'"
                        .to_owned()
                ),
            ]
        );
        let ExecutionUnit::Group(group) = &units[0] else {
            panic!("expected a group")
        };
        assert_eq!(
            group.items.len(),
            2,
            "only the valid variant joins the seed"
        );
    }

    #[test]
    fn a_variant_id_colliding_twice_is_reported_as_collision_both_times() {
        // The reference records the colliding id among variant ids, so a
        // second variant with the same id also reports the collision first.
        let items = vec![
            seed("s", "f"),
            variant("s", "s", "f"),
            variant("s", "s", "f"),
        ];
        let units = build_episode_execution_units(items, "a", 1);
        let reasons = invalid_reasons(&units);
        assert_eq!(reasons.len(), 2);
        assert!(
            reasons
                .iter()
                .all(|(_, r)| r.contains("collides with a seed item_id"))
        );
    }

    #[test]
    fn unknown_seed_reason_reprs_the_raw_item_id() {
        let items = vec![item(
            json!({"item_id": 42, "is_variant": true, "seed_item_id": "x"}),
        )];
        let units = build_episode_execution_units(items, "a", 1);
        assert_eq!(
            invalid_reasons(&units)[0].1,
            "recoverable episode variant requires seed_item_id matching an epoch seed: 42"
        );
    }

    #[test]
    fn invalid_units_lock_their_own_keys() {
        let items = vec![item(
            json!({"item_id": "", "family": "fam", "concurrency_keys": ["k1", "k2"]}),
        )];
        let units = build_episode_execution_units(items, "a", 1);
        assert_eq!(units[0].concurrency_keys(), ["k1", "k2"]);
    }

    #[test]
    fn fatal_preflight_raises_the_lowest_index_reason() {
        let items = vec![
            seed("ok", "f"),
            variant("v", "missing", "f"), // index 1: unknown seed
            seed("d", "f"),
            seed("d", "f"), // indices 2 and 3: duplicates (found in the seed pass first)
        ];
        let error = fatal_preflight(&items).unwrap_err();
        assert_eq!(error.error_type, ErrorType::InvalidItem);
        assert_eq!(
            error.message,
            "recoverable episode variant requires seed_item_id matching an epoch seed: 'v'"
        );
        let error = build_episode_execution_units_checked(items, "a", 1).unwrap_err();
        assert!(error.message.contains("'v'"));
        // The duplicate's first copy (index 2) is reported before index 3.
        let items = vec![seed("d", "f"), seed("e", "f"), seed("d", "f")];
        assert_eq!(
            fatal_preflight(&items).unwrap_err().message,
            "recoverable episode seed item_id is duplicated: 'd'"
        );
        let clean = vec![seed("a", "f"), variant("b", "a", "f")];
        assert!(fatal_preflight(&clean).is_ok());
        assert_eq!(
            build_episode_execution_units_checked(clean, "a", 1)
                .unwrap()
                .len(),
            1
        );
    }
}
