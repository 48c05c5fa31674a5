//! Checking one line of an items file without building its JSON map: the
//! line is parsed in full (so any JSON error is found), but only the fields
//! the runtime reads are kept (grouping's, and of `variant_spec` only its
//! `spec_id`, which the item's records copy); every other field is measured
//! for its nesting depth and dropped.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::episode::item::IdentityFields;
use crate::episode::units::ItemFields;
use crate::episode::value::{MAX_INPUT_NESTING, nesting_depth};

/// The fields of an item the runtime reads before its unit runs: grouping
/// (`item_id`, `is_variant`, `seed_item_id`) and exclusion
/// (`concurrency_keys`, `concurrency_key`, `family`).
const KEPT_FIELDS: [&str; 6] = [
    "item_id",
    "is_variant",
    "seed_item_id",
    "concurrency_keys",
    "concurrency_key",
    "family",
];

/// Checks the lines of an items file one after another. The kept fields'
/// strings of a line the caller has [recycled](LineChecker::recycle) hold
/// the next line's, so that a file of a million lines is checked without
/// allocating its ids one by one.
#[derive(Debug, Default)]
pub(crate) struct LineChecker {
    spare: Vec<String>,
}

impl LineChecker {
    /// Checks one trimmed, non-blank line: `Ok` with the item's
    /// [`KEPT_FIELDS`], or the message naming what is wrong (without the
    /// file and line, which the caller adds). The rules and their order
    /// are the items file's: JSON syntax anywhere in the line first, then
    /// one object per line, then no field nesting past
    /// [`MAX_INPUT_NESTING`] levels (the first such field in key order),
    /// then the kept fields' types. When a key repeats, its last value is
    /// the one read.
    pub(crate) fn check(&mut self, text: &str) -> Result<KeptFields, String> {
        check_with(text, &mut self.spare)
    }

    /// Takes back the strings of `fields`, once the caller is done with
    /// them.
    pub(crate) fn recycle(&mut self, fields: KeptFields) {
        let values = fields.values.into_iter().chain(fields.spec_id);
        for value in values.flatten() {
            if let Value::String(text) = value {
                self.spare.push(text);
            }
        }
    }
}

fn check_with(text: &str, spare: &mut Vec<String>) -> Result<KeptFields, String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let scanned = deserializer
        .deserialize_any(LineVisitor { spare })
        .and_then(|line| deserializer.end().map(|()| line))
        .map_err(|error| format!("not valid JSON: {error}"))?;
    let Some(Scanned { fields, too_deep }) = scanned else {
        return Err("each line must be one JSON object".to_string());
    };
    if let Some((field, depth)) = too_deep.into_iter().min() {
        return Err(format!(
            "field `{field}` nests arrays and objects {depth} levels deep, over the limit of {MAX_INPUT_NESTING}"
        ));
    }
    check_field(
        &fields,
        "item_id",
        |v| v.is_string() || v.is_number() || v.is_null(),
        "a string or a number",
    )?;
    check_field(
        &fields,
        "is_variant",
        |v| v.is_boolean() || v.is_null(),
        "true or false",
    )?;
    check_field(
        &fields,
        "seed_item_id",
        |v| v.is_string() || v.is_null(),
        "a string",
    )?;
    check_field(
        &fields,
        "concurrency_keys",
        |v| v.is_array() || v.is_null(),
        "an array of strings",
    )?;
    Ok(fields)
}

fn check_field(
    item: &KeptFields,
    field: &str,
    ok: impl Fn(&Value) -> bool,
    expected: &str,
) -> Result<(), String> {
    match item.field(field) {
        Some(value) if !ok(value) => {
            Err(format!("field `{field}` must be {expected}, got {value}"))
        }
        _ => Ok(()),
    }
}

/// The [`KEPT_FIELDS`] of a line, in that order, and what its records'
/// identity needs of `variant_spec` (only its `spec_id`); the last value
/// of a repeated key.
#[derive(Debug, Default)]
pub(crate) struct KeptFields {
    values: [Option<Value>; KEPT_FIELDS.len()],
    /// `Some` when `variant_spec` is an object, holding its `spec_id`.
    spec_id: Option<Option<Value>>,
    /// Whether the line names one of [`IDENTITY_FIELDS`] twice: such an
    /// item is sent to a component as its map, not as its line.
    identity_repeated: bool,
}

/// The top-level fields an item's records' identity is read from.
const IDENTITY_FIELDS: [&str; 4] = ["item_id", "family", "is_variant", "variant_spec"];

impl ItemFields for KeptFields {
    fn field(&self, name: &str) -> Option<&Value> {
        let at = KEPT_FIELDS.iter().position(|kept| *kept == name)?;
        self.values[at].as_ref()
    }
}

impl KeptFields {
    /// The fields of the line's [`crate::episode::ItemIdentity`], as
    /// [`crate::episode::ItemIdentity::of`] reads them from its map; `None`
    /// when the line names one of them twice (its item is then read back
    /// and sent as its map, whose last duplicate wins).
    pub(crate) fn identity(&self) -> Option<IdentityFields<'_>> {
        if self.identity_repeated {
            return None;
        }
        Some(IdentityFields {
            item_id: self.field("item_id"),
            family: self.field("family"),
            is_variant: self.field("is_variant"),
            spec_id: self.spec_id.as_ref().map(Option::as_ref),
        })
    }
}

/// A line scanned as an object: its kept fields and its fields nested too
/// deep (name, levels counting the field's own). A line holding anything
/// else scans as `None`.
struct Scanned {
    fields: KeptFields,
    too_deep: Vec<(String, usize)>,
}

struct LineVisitor<'s> {
    spare: &'s mut Vec<String>,
}

impl<'de> Visitor<'de> for LineVisitor<'_> {
    type Value = Option<Scanned>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Scanned>, A::Error> {
        let mut fields = KeptFields::default();
        let mut identity_seen = [false; IDENTITY_FIELDS.len()];
        let mut too_deep: Vec<(String, usize)> = Vec::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if let Some(at) = IDENTITY_FIELDS.iter().position(|field| *field == key) {
                fields.identity_repeated |= identity_seen[at];
                identity_seen[at] = true;
            }
            let depth = if let Some(at) = KEPT_FIELDS.iter().position(|kept| *kept == key) {
                let value = map.next_value_seed(Pooled(self.spare))?;
                let depth = nesting_depth(&value) + 1;
                fields.values[at] = Some(value);
                depth
            } else if key == "variant_spec" {
                let (depth, spec_id) = map.next_value_seed(SpecSeed(self.spare))?;
                fields.spec_id = spec_id;
                depth + 1
            } else {
                map.next_value_seed(DepthSeed)? + 1
            };
            // A repeated key: its last value is the one that counts.
            too_deep.retain(|(field, _)| *field != key);
            if depth > MAX_INPUT_NESTING {
                too_deep.push((key.into_owned(), depth));
            }
        }
        Ok(Some(Scanned { fields, too_deep }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Scanned>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Scanned>, E> {
        Ok(None)
    }
}

/// A map key, borrowed from the line when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string key")
    }
    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(text))
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(text.to_owned()))
    }
}

/// Reads `variant_spec`: its levels of arrays and objects (as
/// [`DepthSeed`]) and, when it is an object, its `spec_id` (the last one
/// when the key repeats; `None` when absent), which is all of it an
/// item's records copy.
struct SpecSeed<'s>(&'s mut Vec<String>);

impl<'de> DeserializeSeed<'de> for SpecSeed<'_> {
    type Value = (usize, Option<Option<Value>>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SpecSeed<'_> {
    type Value = (usize, Option<Option<Value>>);

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut deepest = 0;
        let mut spec_id = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let depth = if key == "spec_id" {
                let value = map.next_value_seed(Pooled(&mut *self.0))?;
                let depth = nesting_depth(&value);
                spec_id = Some(value);
                depth
            } else {
                map.next_value_seed(DepthSeed)?
            };
            deepest = deepest.max(depth);
        }
        Ok((deepest + 1, Some(spec_id)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok((DepthSeed.visit_seq(seq)?, None))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok((0, None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok((0, None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok((0, None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok((0, None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok((0, None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((0, None))
    }
}

/// Reads a kept field's value as serde_json's [`Value`] does, a string
/// into a spare one's room when there is one.
struct Pooled<'s>(&'s mut Vec<String>);

impl<'de> DeserializeSeed<'de> for Pooled<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Pooled<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Value, E> {
        let mut owned = self.0.pop().unwrap_or_default();
        owned.clear();
        owned.push_str(text);
        Ok(Value::String(owned))
    }
    fn visit_string<E: de::Error>(self, text: String) -> Result<Value, E> {
        Ok(Value::String(text))
    }
    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }
    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// Skips a value, returning its levels of arrays and objects (as
/// [`nesting_depth`]: 0 for a scalar, 1 for `[]`).
struct DepthSeed;

impl<'de> DeserializeSeed<'de> for DepthSeed {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(DepthSeed)
    }
}

impl<'de> Visitor<'de> for DepthSeed {
    type Value = usize;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut deepest = 0;
        while let Some(depth) = seq.next_element_seed(DepthSeed)? {
            deepest = deepest.max(depth);
        }
        Ok(deepest + 1)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut deepest = 0;
        while map.next_key::<IgnoredAny>()?.is_some() {
            deepest = deepest.max(map.next_value_seed(DepthSeed)?);
        }
        Ok(deepest + 1)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Ok(0)
    }
}

/// [`LineChecker::check`] of one line on its own.
#[cfg(test)]
pub(crate) fn check_line(text: &str) -> Result<KeptFields, String> {
    LineChecker::default().check(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The line's verdict through a full parse, as the items file judged it
    /// before lines were scanned (the reference for these tests).
    fn by_full_parse(text: &str) -> Result<(), String> {
        let value: Value =
            serde_json::from_str(text).map_err(|error| format!("not valid JSON: {error}"))?;
        let Value::Object(item) = value else {
            return Err("each line must be one JSON object".to_string());
        };
        if let Some((field, depth)) = item
            .iter()
            .map(|(field, value)| (field, nesting_depth(value) + 1))
            .find(|(_, depth)| *depth > MAX_INPUT_NESTING)
        {
            return Err(format!(
                "field `{field}` nests arrays and objects {depth} levels deep, over the limit of {MAX_INPUT_NESTING}"
            ));
        }
        Ok(())
    }

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn keeps_only_the_fields_the_runtime_reads() {
        let fields = check_line(
            r#"{"item_id":"a","text":"long","family":"f","nested":{"x":[1,2]},"is_variant":false}"#,
        )
        .unwrap();
        let kept: Vec<(&str, Option<&Value>)> = KEPT_FIELDS
            .iter()
            .map(|name| (*name, fields.field(name)))
            .collect();
        assert_eq!(
            kept,
            vec![
                ("item_id", Some(&json!("a"))),
                ("is_variant", Some(&json!(false))),
                ("seed_item_id", None),
                ("concurrency_keys", None),
                ("concurrency_key", None),
                ("family", Some(&json!("f"))),
            ]
        );
        assert_eq!(fields.field("text"), None);
    }

    #[test]
    fn depth_and_syntax_verdicts_match_a_full_parse() {
        let lines = [
            format!(r#"{{"a":{}}}"#, nested(99)),
            format!(r#"{{"a":{}}}"#, nested(100)),
            format!(r#"{{"zz":{},"b":{}}}"#, nested(101), nested(120)),
            format!(r#"{{"item_id":{}}}"#, nested(100)),
            format!(r#"{{"a":{}}}"#, nested(130)),
            r#"{"a":1,"a":[[1]]}"#.to_owned(),
            r#"{"a":1} x"#.to_owned(),
            r#"[1,{"a":2}]"#.to_owned(),
            r#""text""#.to_owned(),
            r#"{"a":"\u00e9\n","b\"":{"c":[true,null,1.5e3]}}"#.to_owned(),
            r#"{"a":}"#.to_owned(),
        ];
        for line in &lines {
            let scanned = check_line(line).map(|_| ());
            assert_eq!(scanned, by_full_parse(line), "{line}");
        }
    }

    #[test]
    fn recycled_strings_hold_the_next_lines_fields_alike() {
        let lines = [
            r#"{"item_id":"a-long-first-id","family":"f","variant_spec":{"spec_id":"v0"}}"#,
            r#"{"item_id":"b","seed_item_id":"s","concurrency_keys":["k",1]}"#,
            r#"{"item_id":7,"family":null,"variant_spec":{"spec_id":"\u00e9"}}"#,
            r#"{"family":"g"}"#,
        ];
        let mut checker = LineChecker::default();
        for line in lines {
            let reused = checker.check(line).unwrap();
            let fresh = check_line(line).unwrap();
            for name in KEPT_FIELDS {
                assert_eq!(reused.field(name), fresh.field(name), "{name} of {line}");
            }
            assert_eq!(reused.spec_id, fresh.spec_id, "{line}");
            checker.recycle(reused);
        }
        assert!(!checker.spare.is_empty(), "strings are kept for reuse");
    }

    proptest::proptest! {
        #![proptest_config(crate::hostile_inputs::config(128))]

        /// Lines checked one after another by one checker read as each
        /// line checked alone.
        #[test]
        fn prop_a_reused_checker_reads_each_line_as_a_fresh_one(
            lines in proptest::collection::vec(
                proptest::collection::btree_map(
                    proptest::sample::select(vec![
                        "item_id", "family", "seed_item_id", "concurrency_keys",
                        "concurrency_key", "variant_spec", "x",
                    ]),
                    crate::hostile_inputs::json_value(),
                    0..5,
                ),
                1..6,
            ),
        ) {
            let mut checker = LineChecker::default();
            for fields in lines {
                let line = serde_json::to_string(&fields).unwrap();
                match (checker.check(&line), check_line(&line)) {
                    (Ok(reused), Ok(fresh)) => {
                        for name in KEPT_FIELDS {
                            proptest::prop_assert_eq!(reused.field(name), fresh.field(name));
                        }
                        proptest::prop_assert_eq!(&reused.spec_id, &fresh.spec_id);
                        checker.recycle(reused);
                    }
                    (reused, fresh) => proptest::prop_assert_eq!(reused.err(), fresh.err()),
                }
            }
        }
    }

    #[test]
    fn a_repeated_key_is_judged_by_its_last_value() {
        let deep_then_flat = format!(r#"{{"a":{},"a":1}}"#, nested(101));
        assert!(check_line(&deep_then_flat).is_ok());
        let fields = check_line(r#"{"item_id":"x","item_id":"y"}"#).unwrap();
        assert_eq!(fields.field("item_id"), Some(&json!("y")));
        let error = check_line(r#"{"is_variant":true,"is_variant":"yes"}"#).unwrap_err();
        assert!(error.contains("field `is_variant` must be"), "{error}");
    }
}
