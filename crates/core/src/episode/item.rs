//! A work item: one JSON object, held either as its parsed map or as the
//! JSON text it was read from.
//!
//! An item read back from the items file ([`super::stored`]) keeps its
//! line's text and the few fields the host copies into its records
//! ([`ItemIdentity`]); the text is what a component receives
//! ([`Item::json_text`]), so a suffix run parses its item neither into a
//! map on the host nor back into text for the call. Anything that reads
//! the item's other fields (through [`std::ops::Deref`] to its map) parses
//! the text then, once. Changing the item drops the text, and the map is
//! what is sent from then on.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::value::truthy;

/// An observation record: one JSON object, what an adapter returns for an
/// item and what the host writes as one line of `records.jsonl`.
pub type Record = Map<String, Value>;

/// The fields of an item the host copies into each of its records
/// (reference `_normalize_item_record`, `_adapter_error_record`): its
/// `item_id` and `family` (`null` when absent), whether it is a variant
/// (Python truthiness of `is_variant`) and, for a variant whose
/// `variant_spec` is an object, that object's `spec_id` (`null` when
/// absent).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ItemIdentity {
    /// `item_id`, any JSON value; `null` when absent.
    pub item_id: Value,
    /// `family`, any JSON value; `null` when absent.
    pub family: Value,
    /// Python truthiness of `is_variant`.
    pub is_variant: bool,
    /// `variant_spec.spec_id` of a variant whose `variant_spec` is an
    /// object (`Some(null)` when the object has none); `None` otherwise.
    pub variant_spec_id: Option<Value>,
}

impl ItemIdentity {
    /// The identity of the item whose fields are `map`.
    pub fn of(map: &Map<String, Value>) -> ItemIdentity {
        IdentityFields {
            item_id: map.get("item_id"),
            family: map.get("family"),
            is_variant: map.get("is_variant"),
            spec_id: spec_id_of(map.get("variant_spec")),
        }
        .to_identity()
    }

    /// The identity read from an item's JSON `text`, skipping every other
    /// field without building it; `None` when the text is not a JSON
    /// object or names one of these fields twice (the caller parses the
    /// whole map then, whose last duplicate wins).
    fn read(text: &str) -> Option<ItemIdentity> {
        /// The identity's fields as they appear in the text. `null` and
        /// absent read alike for each of them.
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            item_id: Option<Value>,
            #[serde(default)]
            family: Option<Value>,
            #[serde(default)]
            is_variant: Option<Value>,
            #[serde(default)]
            variant_spec: Option<Value>,
        }
        let trimmed = text.trim_start();
        if !trimmed.starts_with('{') {
            return None; // a struct would also read a JSON array
        }
        let fields: Fields = serde_json::from_str(trimmed).ok()?;
        Some(
            IdentityFields {
                item_id: fields.item_id.as_ref(),
                family: fields.family.as_ref(),
                is_variant: fields.is_variant.as_ref(),
                spec_id: spec_id_of(fields.variant_spec.as_ref()),
            }
            .to_identity(),
        )
    }
}

/// The fields an [`ItemIdentity`] is made of, borrowed from wherever the
/// item was read (its map, or its line as the items file's reader scans
/// it): each `None` when absent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdentityFields<'a> {
    /// `item_id`.
    pub(crate) item_id: Option<&'a Value>,
    /// `family`.
    pub(crate) family: Option<&'a Value>,
    /// `is_variant`, read for its Python truthiness.
    pub(crate) is_variant: Option<&'a Value>,
    /// `Some` when `variant_spec` is an object, holding its `spec_id`.
    pub(crate) spec_id: Option<Option<&'a Value>>,
}

impl IdentityFields<'_> {
    /// The identity these fields make: absent and `null` alike become
    /// `null`; a variant whose `variant_spec` is an object has that
    /// object's `spec_id`.
    pub(crate) fn to_identity(self) -> ItemIdentity {
        let is_variant = truthy(self.is_variant);
        ItemIdentity {
            item_id: self.item_id.cloned().unwrap_or(Value::Null),
            family: self.family.cloned().unwrap_or(Value::Null),
            is_variant,
            variant_spec_id: self
                .spec_id
                .filter(|_| is_variant)
                .map(|spec_id| spec_id.cloned().unwrap_or(Value::Null)),
        }
    }
}

/// `Some(spec_id)` when `variant_spec` is an object, `None` otherwise.
fn spec_id_of(variant_spec: Option<&Value>) -> Option<Option<&Value>> {
    match variant_spec {
        Some(Value::Object(spec)) => Some(spec.get("spec_id")),
        _ => None,
    }
}

/// An item read from a file: its text and its identity, read together.
#[derive(Clone)]
struct Text {
    json: Arc<String>,
    identity: Arc<ItemIdentity>,
}

/// A work item: one JSON object.
///
/// Reads as its map (`item.get("family")`, `item["item_id"]`, iteration)
/// through [`Deref`]; an item read from a file parses its text on the
/// first such read. Built from a map with [`From`]; the items file's
/// reader builds its items from their lines. Equality, `Debug` and serde
/// see only the map.
#[derive(Clone, Default)]
pub struct Item {
    text: Option<Text>,
    map: OnceLock<Map<String, Value>>,
}

impl Item {
    /// An item with no fields.
    pub fn new() -> Item {
        Item::default()
    }

    /// The item whose JSON text is `text` (surrounding whitespace is
    /// dropped), keeping the text to send and reading only its
    /// [`ItemIdentity`] now. A text that is not one JSON object, or that
    /// names an identity field twice, is parsed whole at once.
    ///
    /// For a line the items file's reader has checked
    /// (`LineChecker::check`):
    /// reading the identity skips the other fields without checking all of
    /// them (a number out of range, a lone surrogate, nesting depth), so
    /// an unchecked text that fails there reads as an empty map.
    ///
    /// # Errors
    /// What serde_json reports for a text that is not one JSON object.
    pub(crate) fn from_json_text(text: &str) -> Result<Item, serde_json::Error> {
        let text = text.trim();
        match ItemIdentity::read(text) {
            Some(identity) => Ok(Item::from_checked_text(text, identity)),
            None => serde_json::from_str::<Map<String, Value>>(text).map(Item::from),
        }
    }

    /// The item whose JSON text is `text`, already trimmed, and whose
    /// identity, read from that very text (which names none of its fields
    /// twice), is `identity`: nothing is parsed now.
    pub(crate) fn from_checked_text(text: &str, identity: ItemIdentity) -> Item {
        Item {
            text: Some(Text {
                json: Arc::new(text.to_owned()),
                identity: Arc::new(identity),
            }),
            map: OnceLock::new(),
        }
    }

    /// The item as JSON text, as a component receives it: the text it was
    /// read from, while it has not been changed; else its map, compact
    /// with keys in order.
    pub fn json_text(&self) -> Cow<'_, String> {
        match &self.text {
            Some(text) => Cow::Borrowed(&*text.json),
            None => {
                Cow::Owned(serde_json::to_string(self.map()).expect("a JSON map always serialises"))
            }
        }
    }

    /// The fields the host copies into the item's records.
    pub fn identity(&self) -> Cow<'_, ItemIdentity> {
        match &self.text {
            Some(text) => Cow::Borrowed(&text.identity),
            None => Cow::Owned(ItemIdentity::of(self.map())),
        }
    }

    /// [`Item::identity`], shared: the item's own when it was read from
    /// text (no copy), else read from its map now.
    pub fn shared_identity(&self) -> Arc<ItemIdentity> {
        match &self.text {
            Some(text) => Arc::clone(&text.identity),
            None => Arc::new(ItemIdentity::of(self.map())),
        }
    }

    /// `item_id` when it is a string.
    pub fn item_id_str(&self) -> Option<&str> {
        match &self.text {
            Some(text) => text.identity.item_id.as_str(),
            None => self.map().get("item_id").and_then(Value::as_str),
        }
    }

    /// The item's map (parsed now if it was held as text).
    pub fn into_map(mut self) -> Map<String, Value> {
        self.map();
        self.map.take().unwrap_or_default()
    }

    /// A copy of the item's map.
    pub fn to_map(&self) -> Map<String, Value> {
        self.map().clone()
    }

    fn map(&self) -> &Map<String, Value> {
        self.map.get_or_init(|| {
            // The text is a line the items file's reader checked, and its
            // hash matched when it was read back, so it parses; only a line
            // changed under the run into one that collides with its 32-bit
            // hash and skips cleanly would read as empty.
            self.text
                .as_ref()
                .and_then(|text| serde_json::from_str(&text.json).ok())
                .unwrap_or_default()
        })
    }
}

impl Deref for Item {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.map()
    }
}

impl DerefMut for Item {
    /// The map, to change: the item's text, if any, no longer describes it
    /// and is dropped.
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.map();
        self.text = None;
        self.map.get_mut().expect("parsed above")
    }
}

impl From<Map<String, Value>> for Item {
    fn from(map: Map<String, Value>) -> Item {
        Item {
            text: None,
            map: OnceLock::from(map),
        }
    }
}

impl From<Item> for Map<String, Value> {
    fn from(item: Item) -> Map<String, Value> {
        item.into_map()
    }
}

impl From<Item> for Value {
    fn from(item: Item) -> Value {
        Value::Object(item.into_map())
    }
}

impl FromIterator<(String, Value)> for Item {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Item {
        Item::from(Map::from_iter(iter))
    }
}

impl<'a> IntoIterator for &'a Item {
    type Item = (&'a String, &'a Value);
    type IntoIter = serde_json::map::Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.map().iter()
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Item) -> bool {
        self.map() == other.map()
    }
}

impl fmt::Debug for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.map().fmt(f)
    }
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Item, D::Error> {
        Map::deserialize(deserializer).map(Item::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile_inputs::{config, json_value};
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_text_item_sends_its_text_and_reads_as_its_map() {
        let line = r#" {"text": "x", "item_id": "a", "family": 3, "is_variant": 1,
                        "variant_spec": {"spec_id": "v"}} "#;
        let item = Item::from_json_text(line).unwrap();
        assert_eq!(*item.json_text(), line.trim());
        assert_eq!(item.item_id_str(), Some("a"));
        let identity = item.identity().into_owned();
        assert_eq!(identity.family, json!(3));
        assert!(identity.is_variant);
        assert_eq!(identity.variant_spec_id, Some(json!("v")));
        assert_eq!(item["text"], json!("x"));
        assert_eq!(identity, ItemIdentity::of(&item));
    }

    #[test]
    fn changing_a_text_item_drops_its_text() {
        let mut item = Item::from_json_text(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(*item.json_text(), r#"{"b": 1, "a": 2}"#);
        item.insert("c".into(), json!(3));
        assert_eq!(*item.json_text(), r#"{"a":2,"b":1,"c":3}"#);
        item.insert("item_id".into(), json!("now"));
        assert_eq!(item.item_id_str(), Some("now"));
        assert_eq!(item.identity().item_id, json!("now"));
    }

    #[test]
    fn duplicate_identity_fields_are_read_as_the_map_reads_them() {
        let item = Item::from_json_text(r#"{"item_id": "first", "item_id": "last"}"#).unwrap();
        assert_eq!(item.item_id_str(), Some("last"));
        // Sent as its map: the component never sees the duplicate.
        assert_eq!(*item.json_text(), r#"{"item_id":"last"}"#);
    }

    #[test]
    fn texts_that_are_not_one_object_are_errors() {
        for text in ["[1, 2]", "3", "{", "", "{} {}"] {
            assert!(Item::from_json_text(text).is_err(), "{text:?}");
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        /// Held as text or as a map, an item reads, compares and
        /// identifies alike.
        #[test]
        fn prop_text_and_map_items_agree(
            fields in prop::collection::btree_map(
                prop::sample::select(vec![
                    "item_id", "family", "is_variant", "variant_spec", "x", "seed_item_id",
                ]).prop_map(str::to_string),
                json_value(),
                0..6,
            ),
            spec in json_value(),
        ) {
            let mut map: Map<String, Value> = fields.into_iter().collect();
            if map.contains_key("variant_spec") {
                map.insert("variant_spec".into(), json!({"spec_id": spec}));
            }
            // Both read from the same text, as the items file's reader
            // did before items kept their text (serde_json does not read
            // every float back bit for bit).
            let line = Value::Object(map).to_string();
            let map: Map<String, Value> = serde_json::from_str(&line).unwrap();
            let text = Item::from_json_text(&line).unwrap();
            let held = Item::from(map.clone());
            prop_assert_eq!(text.identity().into_owned(), held.identity().into_owned());
            prop_assert_eq!(text.item_id_str(), held.item_id_str());
            prop_assert_eq!(&text, &held);
            // The text is sent as it was read, digit for digit.
            prop_assert_eq!(text.json_text().into_owned(), line);
            prop_assert_eq!(text.into_map(), map);
        }
    }
}
