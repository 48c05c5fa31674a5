//! A list of JSON values kept as their text, packed: what an epoch's lane
//! summaries hold for every record they produced (`item_ids`, `families`),
//! a million entries for a million records, at a few bytes each instead of
//! a `serde_json::Value` and its allocation each.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Error as _, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// JSON values kept as the text of the JSON array of them (`["a",null]`),
/// so that writing the list out copies nothing; read from such an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonList {
    /// Always a complete JSON array.
    text: String,
    len: usize,
}

impl Default for JsonList {
    fn default() -> Self {
        Self {
            text: "[]".to_owned(),
            len: 0,
        }
    }
}

impl JsonList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `value`, or `null` for `None`.
    pub fn push(&mut self, value: Option<&Value>) {
        // Grown by half at a time rather than doubled: a lane's list for a
        // million-record epoch is megabytes, and it lives until the epoch's
        // summary is written.
        if self.text.capacity() - self.text.len() < 64 {
            self.text.reserve_exact((self.text.len() / 2).max(4096));
        }
        self.text.pop(); // the closing bracket
        if self.len > 0 {
            self.text.push(',');
        }
        match value {
            // A string is by far the common case: written without going
            // through the serializer.
            Some(Value::String(text)) if !needs_escape(text) => {
                self.text.push('"');
                self.text.push_str(text);
                self.text.push('"');
            }
            Some(value) => self.text.push_str(&value.to_string()),
            None => self.text.push_str("null"),
        }
        self.text.push(']');
        self.len += 1;
    }

    /// How many values the list holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values, parsed back, in order.
    pub fn values(&self) -> Vec<Value> {
        serde_json::from_str(&self.text).expect("the list holds the JSON array it wrote")
    }
}

/// Whether `text` needs escaping inside a JSON string.
fn needs_escape(text: &str) -> bool {
    text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

impl Serialize for JsonList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.text)
            .map_err(|_| S::Error::custom("a JsonList holds a JSON array"))?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let values = Vec::<Value>::deserialize(deserializer)?;
        let mut list = JsonList::new();
        for value in &values {
            list.push(Some(value));
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_as_the_json_array_of_its_values() {
        let values = vec![
            json!("a"),
            json!("quote \" and \\ and \n"),
            json!(null),
            json!(7),
            json!({"k": [1, "x"]}),
            json!("ünïcode"),
        ];
        let mut list = JsonList::new();
        for value in &values {
            list.push(Some(value));
        }
        list.push(None);
        assert_eq!(list.len(), 7);
        let written = serde_json::to_string(&list).unwrap();
        let mut expected = values.clone();
        expected.push(Value::Null);
        assert_eq!(written, serde_json::to_string(&expected).unwrap());
        assert_eq!(list.values(), expected);
        let read: JsonList = serde_json::from_str(&written).unwrap();
        assert_eq!(read, list);
        assert_eq!(serde_json::to_value(&list).unwrap(), Value::Array(expected));
        assert_eq!(serde_json::to_string(&JsonList::new()).unwrap(), "[]");
    }
}
