//! Execution units: each seed with its variants collapsed into one group,
//! malformed items kept as invalid units.
//!
//! Mirrors `item_concurrency_keys` and `build_episode_execution_units` in
//! `episode_runtime.py`.

use std::hash::BuildHasher;

use foldhash::{HashSet, HashSetExt};
use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use super::adapter_error::{AdapterError, ErrorType};
use super::item::Item;
use super::value::{py_repr, py_str, str_or_empty, truthy};

mod group_id;

pub use group_id::{GroupId, GroupIdError};

/// Read access to the fields of an item: a held [`Item`], or the few
/// fields an items file keeps of each line.
pub trait ItemFields {
    /// The value of field `name`, if present.
    fn field(&self, name: &str) -> Option<&Value>;
}

impl ItemFields for Item {
    fn field(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

/// The exclusion keys of a queue item (reference `item_concurrency_keys`).
///
/// `concurrency_keys` (an array; `null` entries skipped, each entry as text,
/// trimmed, empty ones skipped) wins; when it yields nothing, the item's
/// `concurrency_key`, else its `family`, is the single key. Duplicates are
/// dropped, first occurrence kept. An item with no key at all returns an
/// empty list and never waits for anything.
pub fn item_concurrency_keys<F: ItemFields + ?Sized>(item: &F) -> Vec<String> {
    let mut keys = Vec::new();
    for_each_concurrency_key(item, |key| keys.push(key.to_owned()));
    keys
}

/// Calls `each` with every one of [`item_concurrency_keys`] in order,
/// copying none of them (the store of a million items reads them so).
pub(crate) fn for_each_concurrency_key<F: ItemFields + ?Sized>(
    item: &F,
    mut each: impl FnMut(&str),
) {
    fn trimmed(text: Cow<'_, str>) -> Option<Cow<'_, str>> {
        Some(trim(text)).filter(|key| !key.is_empty())
    }
    let mut seen: Vec<Cow<'_, str>> = Vec::new();
    if let Some(Value::Array(raw_keys)) = item.field("concurrency_keys") {
        for raw in raw_keys {
            if raw.is_null() {
                continue;
            }
            if let Some(key) = trimmed(py_str(raw))
                && !seen.contains(&key)
            {
                each(&key);
                seen.push(key);
            }
        }
    }
    if seen.is_empty() {
        let fallback = if truthy(item.field("concurrency_key")) {
            str_or_empty(item.field("concurrency_key"))
        } else {
            str_or_empty(item.field("family"))
        };
        if let Some(key) = trimmed(fallback) {
            each(&key);
        }
    }
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

impl InvalidUnit {
    /// `item`, found invalid for `reason`: the reason's message and the
    /// item's own keys.
    pub(crate) fn found(item: Item, reason: &InvalidReason) -> Self {
        Self {
            reason: reason.message(&item),
            concurrency_keys: item_concurrency_keys(&item),
            item,
        }
    }
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

/// Why an item cannot be grouped; its text is the reference's exact
/// `ValueError` message ([`InvalidReason::message`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InvalidReason {
    EmptySeedId,
    DuplicatedSeed(String),
    EmptyVariantId,
    CollidesWithSeed(String),
    DuplicatedVariant(String),
    AmbiguousSeed(String),
    UnknownSeed,
}

impl InvalidReason {
    /// The reference's message for `item` (the item the reason was found
    /// on: an unknown seed is reported with the raw `item_id`).
    pub(crate) fn message(&self, item: &Item) -> String {
        let repr = |text: &str| py_repr(Some(&Value::String(text.to_owned())));
        match self {
            Self::EmptySeedId => {
                "recoverable episode seed items require a non-empty item_id".to_owned()
            }
            Self::DuplicatedSeed(id) => format!(
                "recoverable episode seed item_id is duplicated: {}",
                repr(id)
            ),
            Self::EmptyVariantId => {
                "recoverable episode variant items require a non-empty item_id".to_owned()
            }
            Self::CollidesWithSeed(id) => format!(
                "recoverable episode variant item_id collides with a seed item_id: {}",
                repr(id)
            ),
            Self::DuplicatedVariant(id) => format!(
                "recoverable episode variant item_id is duplicated: {}",
                repr(id)
            ),
            Self::AmbiguousSeed(seed_id) => format!(
                "recoverable episode variant seed_item_id is ambiguous because the seed \
                 item_id is duplicated: {}",
                repr(seed_id)
            ),
            Self::UnknownSeed => format!(
                "recoverable episode variant requires seed_item_id matching an epoch seed: {}",
                py_repr(item.get("item_id"))
            ),
        }
    }
}

/// What grouping reads of a queued item: its `item_id` and `seed_item_id`
/// as text, trimmed, and whether `is_variant` is truthy.
#[derive(Clone, Debug)]
pub(crate) struct ItemHead<'a> {
    pub(crate) item_id: Cow<'a, str>,
    pub(crate) seed_item_id: Cow<'a, str>,
    pub(crate) is_variant: bool,
}

impl<'a> ItemHead<'a> {
    /// The head of an item.
    pub(crate) fn of<F: ItemFields + ?Sized>(item: &'a F) -> Self {
        Self {
            item_id: normalized_id(item, "item_id"),
            seed_item_id: normalized_id(item, "seed_item_id"),
            is_variant: truthy(item.field("is_variant")),
        }
    }
}

/// One unit of a queue, as positions in it: what [`build_episode_execution_units`]
/// and the stored-items grouping both build their units from.
#[derive(Debug)]
pub(crate) enum UnitPlan {
    /// A valid seed (`members[0]`) and its valid variants, in queue order.
    Group {
        execution_group_id: String,
        seed_item_id: String,
        members: Vec<u32>,
    },
    /// An item that cannot be grouped.
    Invalid { index: u32, reason: InvalidReason },
}

/// The result of validating a queue: per item, its reason to be invalid, and
/// which valid seed each valid variant joins.
/// Invalid items are few, so their reasons are kept by position.
struct Classification {
    invalid: BTreeMap<usize, InvalidReason>,
    /// `(variant, seed)` queue positions of every valid variant and the
    /// valid seed it joins, in queue order.
    joins: Vec<(u32, u32)>,
}

/// A queue position that is no group's seed.
const NO_GROUP: u32 = u32::MAX;

impl Classification {
    fn first_invalid(&self) -> Option<(usize, &InvalidReason)> {
        self.invalid
            .first_key_value()
            .map(|(index, reason)| (*index, reason))
    }
}

/// A queue as grouping reads it: per position, the [`ItemHead`] fields.
/// Implemented by held items' heads and by
/// [`crate::episode::stored::StoredItems`], which keeps them compactly.
pub(crate) trait QueueHeads {
    /// Items in the queue.
    fn len(&self) -> usize;
    /// The trimmed `item_id` text of the item at `index`.
    fn item_id(&self, index: usize) -> &str;
    /// The trimmed `seed_item_id` text (read only for variants).
    fn seed_item_id(&self, index: usize) -> &str;
    /// Whether `is_variant` is truthy.
    fn is_variant(&self, index: usize) -> bool;
}

impl QueueHeads for [ItemHead<'_>] {
    fn len(&self) -> usize {
        <[ItemHead<'_>]>::len(self)
    }
    fn item_id(&self, index: usize) -> &str {
        &self[index].item_id
    }
    fn seed_item_id(&self, index: usize) -> &str {
        &self[index].seed_item_id
    }
    fn is_variant(&self, index: usize) -> bool {
        self[index].is_variant
    }
}

fn normalized_id<'a, F: ItemFields + ?Sized>(item: &'a F, key: &str) -> Cow<'a, str> {
    trim(str_or_empty(item.field(key)))
}

/// `text` without surrounding whitespace, copied only if it was owned.
fn trim(text: Cow<'_, str>) -> Cow<'_, str> {
    match text {
        Cow::Borrowed(text) => Cow::Borrowed(text.trim()),
        Cow::Owned(text) => Cow::Owned(text.trim().to_owned()),
    }
}

/// Queue positions keyed by their item's id text: a set of ids (or an id
/// to position map) at four bytes per entry, the text staying in the
/// queue's heads. A queue of a million variants is grouped without a
/// million borrowed strings in a hash set.
struct IdTable<'h, H: ?Sized> {
    heads: &'h H,
    id: fn(&H, usize) -> &str,
    hasher: foldhash::fast::RandomState,
    table: hashbrown::HashTable<u32>,
}

impl<'h, H: QueueHeads + ?Sized> IdTable<'h, H> {
    /// An empty table with room for `capacity` positions.
    fn new(heads: &'h H, id: fn(&H, usize) -> &str, capacity: usize) -> Self {
        Self {
            heads,
            id,
            hasher: foldhash::fast::RandomState::default(),
            table: hashbrown::HashTable::with_capacity(capacity),
        }
    }

    /// The position first inserted under `id`.
    fn get(&self, id: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(id);
        self.table
            .find(hash, |&at| (self.id)(self.heads, at as usize) == id)
            .map(|&at| at as usize)
    }

    /// Inserts `index` under its own id unless that id is present; whether
    /// it was inserted.
    fn insert(&mut self, index: usize) -> bool {
        let (heads, id_of, hasher) = (self.heads, self.id, &self.hasher);
        let id = id_of(heads, index);
        let hash = hasher.hash_one(id);
        match self.table.entry(
            hash,
            |&at| id_of(heads, at as usize) == id,
            |&at| hasher.hash_one(id_of(heads, at as usize)),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(queue_position(index));
                true
            }
        }
    }
}

fn classify<H: QueueHeads + ?Sized>(heads: &H) -> Classification {
    let mut invalid: BTreeMap<usize, InvalidReason> = BTreeMap::new();
    let variants = (0..heads.len())
        .filter(|&index| heads.is_variant(index))
        .count();
    let seed_count = heads.len() - variants;
    let mut seeds = IdTable::new(heads, H::item_id, seed_count);
    let mut ambiguous: HashSet<&str> = HashSet::new();

    for index in 0..heads.len() {
        if heads.is_variant(index) {
            continue;
        }
        let item_id = heads.item_id(index);
        if item_id.is_empty() {
            invalid.insert(index, InvalidReason::EmptySeedId);
            continue;
        }
        if let Some(first) = seeds.get(item_id) {
            let reason = InvalidReason::DuplicatedSeed(item_id.to_owned());
            invalid.entry(first).or_insert_with(|| reason.clone());
            invalid.insert(index, reason);
            ambiguous.insert(item_id);
            continue;
        }
        seeds.insert(index);
    }

    let mut joins = Vec::with_capacity(variants);
    let mut variant_ids = IdTable::new(heads, H::item_id, variants);
    for index in 0..heads.len() {
        if !heads.is_variant(index) {
            continue;
        }
        let item_id = heads.item_id(index);
        if item_id.is_empty() {
            invalid.insert(index, InvalidReason::EmptyVariantId);
            continue;
        }
        if seeds.get(item_id).is_some() {
            invalid.insert(index, InvalidReason::CollidesWithSeed(item_id.to_owned()));
            variant_ids.insert(index);
            continue;
        }
        if !variant_ids.insert(index) {
            invalid.insert(index, InvalidReason::DuplicatedVariant(item_id.to_owned()));
            continue;
        }
        let seed_item_id = heads.seed_item_id(index);
        if ambiguous.contains(seed_item_id) {
            invalid.insert(index, InvalidReason::AmbiguousSeed(seed_item_id.to_owned()));
            continue;
        }
        match seeds.get(seed_item_id) {
            Some(seed_index) if !seed_item_id.is_empty() => {
                joins.push((queue_position(index), queue_position(seed_index)));
            }
            _ => {
                invalid.insert(index, InvalidReason::UnknownSeed);
            }
        }
    }
    Classification { invalid, joins }
}

/// A queue position as stored in a [`UnitPlan`].
fn queue_position(index: usize) -> u32 {
    u32::try_from(index).expect("a queue holds fewer than 2^32 items")
}

/// Plans the units of a queue whose items have `heads` (reference
/// `build_episode_execution_units`): `Err((index, reason))` with the
/// lowest-index invalid item when `fatal_preflight`, else every unit in
/// queue order — each valid seed's group where the seed was, each invalid
/// item where it was.
pub(crate) fn plan_units<H: QueueHeads + ?Sized>(
    heads: &H,
    arm: &str,
    epoch: u32,
    fatal_preflight: bool,
) -> Result<Vec<UnitPlan>, (usize, InvalidReason)> {
    let mut classification = classify(heads);
    if fatal_preflight && let Some((index, reason)) = classification.first_invalid() {
        return Err((index, reason.clone()));
    }
    // A group per valid seed, in queue order, its members allocated once at
    // their final size: the seed, then its variants in queue order (a
    // variant may come before its seed in the queue). `group_of` maps a
    // seed's queue position to its group.
    let mut group_of = vec![NO_GROUP; heads.len()];
    // Per group: its seed's queue position and how many members it has.
    let mut groups: Vec<(u32, usize)> = Vec::new();
    for (index, group) in group_of.iter_mut().enumerate() {
        if !heads.is_variant(index) && !classification.invalid.contains_key(&index) {
            *group = queue_position(groups.len());
            groups.push((queue_position(index), 1));
        }
    }
    for &(_, seed) in &classification.joins {
        groups[group_of[seed as usize] as usize].1 += 1;
    }
    let mut members_of: Vec<Vec<u32>> = groups
        .into_iter()
        .map(|(seed, member_count)| {
            let mut members = Vec::with_capacity(member_count);
            members.push(seed);
            members
        })
        .collect();
    for &(variant, seed) in &classification.joins {
        members_of[group_of[seed as usize] as usize].push(variant);
    }
    let mut members_of = members_of.into_iter();
    let mut plans = Vec::with_capacity(members_of.len() + classification.invalid.len());
    let mut group_index = 0u32;
    for index in 0..heads.len() {
        if let Some(reason) = classification.invalid.remove(&index) {
            plans.push(UnitPlan::Invalid {
                index: queue_position(index),
                reason,
            });
            continue;
        }
        if heads.is_variant(index) {
            continue; // scheduled inside its seed's group
        }
        group_index += 1;
        let members = members_of
            .next()
            .expect("a group was made for every valid seed");
        plans.push(UnitPlan::Group {
            execution_group_id: GroupId::new(arm, epoch, group_index).to_string(),
            seed_item_id: heads.item_id(index).to_owned(),
            members,
        });
    }
    Ok(plans)
}

/// The union of the members' keys, in first-seen order.
pub(crate) fn union_keys<I, K, S>(members: I) -> Vec<String>
where
    I: IntoIterator<Item = K>,
    K: IntoIterator<Item = S>,
    S: AsRef<str> + Into<String>,
{
    let mut union: Vec<String> = Vec::new();
    for keys in members {
        for key in keys {
            if !union.iter().any(|known| known == key.as_ref()) {
                union.push(key.into());
            }
        }
    }
    union
}

/// The reference's `fatal_preflight=True` check: `Err` with the reason of
/// the lowest-index invalid item ([`ErrorType::InvalidItem`]), `Ok` when
/// every item can be grouped. Makes no adapter call.
pub fn fatal_preflight(items: &[Item]) -> Result<(), AdapterError> {
    let heads: Vec<ItemHead<'_>> = items.iter().map(ItemHead::of).collect();
    match classify(heads.as_slice()).first_invalid() {
        Some((index, reason)) => Err(AdapterError::new(
            ErrorType::InvalidItem,
            reason.message(&items[index]),
        )),
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
    match build_units(items, arm, epoch, false) {
        Ok(units) => units,
        Err(_) => unreachable!("only a fatal preflight refuses a queue"),
    }
}

/// [`build_episode_execution_units`] with the reference's
/// `fatal_preflight=True`: `Err` with the first invalid reason by index
/// before anything is grouped.
pub fn build_episode_execution_units_checked(
    items: Vec<Item>,
    arm: &str,
    epoch: u32,
) -> Result<Vec<ExecutionUnit>, AdapterError> {
    build_units(items, arm, epoch, true)
}

fn build_units(
    items: Vec<Item>,
    arm: &str,
    epoch: u32,
    fatal_preflight: bool,
) -> Result<Vec<ExecutionUnit>, AdapterError> {
    let plans = {
        let heads: Vec<ItemHead<'_>> = items.iter().map(ItemHead::of).collect();
        plan_units(heads.as_slice(), arm, epoch, fatal_preflight).map_err(|(index, reason)| {
            AdapterError::new(ErrorType::InvalidItem, reason.message(&items[index]))
        })?
    };
    let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
    let mut take = |index: u32| {
        slots[index as usize]
            .take()
            .expect("each item is placed once")
    };
    Ok(plans
        .into_iter()
        .map(|plan| match plan {
            UnitPlan::Invalid { index, reason } => {
                ExecutionUnit::Invalid(InvalidUnit::found(take(index), &reason))
            }
            UnitPlan::Group {
                execution_group_id,
                seed_item_id,
                members,
            } => {
                let items: Vec<Item> = members.into_iter().map(&mut take).collect();
                let concurrency_keys = union_keys(items.iter().map(item_concurrency_keys));
                ExecutionUnit::Group(EpisodeGroup {
                    execution_group_id,
                    seed_item_id,
                    items,
                    concurrency_keys,
                })
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(value: Value) -> Item {
        match value {
            Value::Object(map) => map.into(),
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
