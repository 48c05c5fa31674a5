//! A record's `records.jsonl` line, serialized on the lane that produced
//! it, with two gaps for the fields only the epoch's tally can fill in
//! order: `novel_value` and `raw_value` (the novelty ledger's credit).
//! Filling them is a copy, so serializing — most of the cost of writing a
//! record — happens outside the tally's lock, in parallel.
//!
//! The line is byte for byte what `serde_json::to_writer` makes of the
//! record with both fields set: a record is a `BTreeMap`, written in key
//! order, so each field goes before the first key that sorts after it.

use std::io;

use serde_json::Value;

use crate::episode::unit_record::UnitRecord;

/// The field a tally fills first.
const NOVEL: &str = "novel_value";
/// The field a tally fills second.
const RAW: &str = "raw_value";

/// A serialized record missing its `novel_value` and `raw_value`.
#[derive(Clone, Debug, Default)]
pub struct RecordLine {
    /// `,"key":value` for each other field, in key order.
    body: Vec<u8>,
    /// Where `,"novel_value":…` goes in `body`.
    novel_at: usize,
    /// Where `,"raw_value":…` goes in `body`.
    raw_at: usize,
}

impl RecordLine {
    /// Serializes every field of `record` but `novel_value` and
    /// `raw_value`.
    ///
    /// # Errors
    /// What serde_json reports (a value it cannot write).
    pub fn new(record: &UnitRecord) -> Result<Self, serde_json::Error> {
        // Room for a typical record (~15 fields of ~25 bytes) and then
        // some, so the line is allocated once rather than grown by doubling.
        let mut line = RecordLine {
            body: Vec::with_capacity(640),
            ..RecordLine::default()
        };
        let (mut novel_at, mut raw_at) = (None, None);
        record.for_each_field(|key, value| {
            if novel_at.is_none() && key >= NOVEL {
                novel_at = Some(line.body.len());
            }
            if raw_at.is_none() && key >= RAW {
                raw_at = Some(line.body.len());
            }
            if key == NOVEL || key == RAW {
                return Ok(());
            }
            field(&mut line.body, key, value)
        })?;
        line.novel_at = novel_at.unwrap_or(line.body.len());
        line.raw_at = raw_at.unwrap_or(line.body.len());
        Ok(line)
    }

    /// Appends the whole line, `novel` and `raw` in their places, and a
    /// newline to `out`.
    pub fn write(&self, novel: &Value, raw: &Value, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        out.extend_from_slice(&self.body[..self.novel_at]);
        field(out, NOVEL, novel).map_err(io::Error::other)?;
        out.extend_from_slice(&self.body[self.novel_at..self.raw_at]);
        field(out, RAW, raw).map_err(io::Error::other)?;
        out.extend_from_slice(&self.body[self.raw_at..]);
        // The first field's leading comma becomes the opening brace.
        out[start] = b'{';
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}

/// Writes `text` as a JSON string, as serde_json does: a text with no
/// byte to escape (the usual key or id) is copied as it is.
fn write_str(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, text).expect("a string always serialises");
    }
}

/// Writes `value` as serde_json does, strings through [`write_str`].
fn write_value(out: &mut Vec<u8>, value: &Value) -> Result<(), serde_json::Error> {
    match value {
        Value::String(text) => {
            write_str(out, text);
            Ok(())
        }
        Value::Bool(true) => {
            out.extend_from_slice(b"true");
            Ok(())
        }
        Value::Bool(false) => {
            out.extend_from_slice(b"false");
            Ok(())
        }
        Value::Null => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        _ => serde_json::to_writer(out, value),
    }
}

/// Writes `,"key":value`.
fn field(out: &mut Vec<u8>, key: &str, value: &Value) -> Result<(), serde_json::Error> {
    out.push(b',');
    write_str(out, key);
    out.push(b':');
    write_value(out, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::adapter::Record;
    use crate::hostile_inputs::{config, json_value};
    use proptest::prelude::*;
    use serde_json::json;

    /// What the line must equal: the record with both fields set, as
    /// serde_json writes it.
    fn expected(record: &Record, novel: &Value, raw: &Value) -> Vec<u8> {
        let mut record = record.clone();
        record.insert(NOVEL.into(), novel.clone());
        record.insert(RAW.into(), raw.clone());
        let mut line = serde_json::to_vec(&record).unwrap();
        line.push(b'\n');
        line
    }

    fn written(record: &Record, novel: &Value, raw: &Value) -> Vec<u8> {
        written_unit(&UnitRecord::from(record.clone()), novel, raw)
    }

    fn written_unit(record: &UnitRecord, novel: &Value, raw: &Value) -> Vec<u8> {
        let mut out = b"earlier line\n".to_vec();
        RecordLine::new(record)
            .unwrap()
            .write(novel, raw, &mut out)
            .unwrap();
        out.split_off(b"earlier line\n".len())
    }

    #[test]
    fn the_line_is_the_records_with_both_fields_in_key_order() {
        let cases = [
            json!({}),
            json!({"a": 1}),
            json!({"zzz": [1, {"b": null}]}),
            json!({"item_id": "x", "novel_value": 9, "o": true, "raw_value": "adapter's", "s": 1.5}),
            json!({"novel_value": 1}),
            json!({"p": "between", "é": "after", "\"q": "escaped"}),
        ];
        for case in cases {
            let record = case.as_object().unwrap().clone();
            let (novel, raw) = (json!(2.0), json!(0.5));
            assert_eq!(
                String::from_utf8(written(&record, &novel, &raw)).unwrap(),
                String::from_utf8(expected(&record, &novel, &raw)).unwrap(),
                "{case}"
            );
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_record_line_matches_serde_json(
            fields in prop::collection::btree_map("[a-z_\"é]{0,12}", json_value(), 0..8),
            novel in -1.0e6f64..1.0e6,
            raw in 0.0f64..1.0e6,
        ) {
            let record: Record = fields.into_iter().collect();
            let (novel, raw) = (json!(novel), json!(raw));
            prop_assert_eq!(written(&record, &novel, &raw), expected(&record, &novel, &raw));
        }

        #[test]
        fn prop_a_suffix_records_line_is_its_maps(
            fields in prop::collection::btree_map("[a-z_]{0,16}", json_value(), 0..8),
            is_variant in any::<bool>(),
            checkpoint_ref in prop::option::of("[a-z]{1,4}"),
            novel in -1.0e6f64..1.0e6,
        ) {
            let item = match json!({"item_id": "s1~v1", "family": "f", "is_variant": is_variant,
                                    "variant_spec": {"spec_id": "v1"}}) {
                Value::Object(map) => crate::episode::adapter::Item::from(map),
                _ => unreachable!(),
            };
            let annotation = crate::episode::records::GroupAnnotation {
                group_id: "main:epoch-1:group-0001",
                seed_item_id: "s1",
                record_kind: "episode_suffix",
                prefix_reused: true,
                checkpoint_ref: checkpoint_ref.as_deref(),
            };
            let group = crate::episode::unit_record::GroupFields::new(&annotation);
            let record = UnitRecord::suffix(fields.into_iter().collect(), &item, 1e-7, &group);
            let (novel, raw) = (json!(novel), json!(1.0));
            prop_assert_eq!(
                written_unit(&record, &novel, &raw),
                expected(&record.to_map(), &novel, &raw)
            );
        }
    }
}
