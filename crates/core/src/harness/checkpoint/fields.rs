//! The checkpoint's per-field rules, as serde `deserialize_with` functions,
//! and the wording of a deserialization error.
//!
//! Each function reads its field as JSON first, so it can say which rule
//! the value breaks in the reference's words (`state.novelty_seen must be a
//! list`) instead of serde's (`invalid type: string, expected a sequence`).
//! It says so through a custom error message carrying a marker, the path
//! below the field (`[1].record_count`, `.fam`) and the text; [`describe`]
//! joins that path to the one `serde_path_to_error` tracked down to the
//! field, and words the whole message.

use serde::de::{DeserializeOwned, Deserializer, Error};
use serde::{Deserialize, de::Unexpected};
use serde_json::{Map, Value};

/// Starts a message stating a broken rule: `RULE suffix SEPARATOR text`,
/// worded `resume checkpoint FIELD{suffix} {text}`.
const RULE: char = '\u{1}';
/// Starts a message on a malformed value below the field: `MALFORMED suffix
/// SEPARATOR text`, worded `resume checkpoint FIELD{suffix} is malformed:
/// {text}`.
const MALFORMED: char = '\u{2}';
/// Starts a message about the checkpoint as a whole (no field path):
/// `WHOLE text`, worded `resume checkpoint {text}`.
const WHOLE: char = '\u{3}';
/// Ends the suffix path in a [`RULE`] or [`MALFORMED`] message.
const SEPARATOR: char = '\u{4}';

fn rule<E: Error>(suffix: &str, text: &str) -> E {
    E::custom(format!("{RULE}{suffix}{SEPARATOR}{text}"))
}

fn malformed<E: Error>(suffix: &str, text: impl std::fmt::Display) -> E {
    E::custom(format!("{MALFORMED}{suffix}{SEPARATOR}{text}"))
}

fn whole<E: Error>(text: &str) -> E {
    E::custom(format!("{WHOLE}{text}"))
}

/// `path.suffix` (a field path as `serde_path_to_error` prints it, `.` for
/// the root, followed by `[i]...` or `.key...`).
fn join(path: &str, suffix: &str) -> String {
    if path == "." || path.is_empty() {
        suffix.trim_start_matches('.').to_owned()
    } else {
        format!("{path}{suffix}")
    }
}

/// The message for a deserialization error `message` at `path` (the
/// `serde_path_to_error` path): `resume checkpoint FIELD must ...` for a
/// broken rule, `resume checkpoint FIELD is malformed: ...` otherwise
/// (`resume checkpoint is malformed: ...` at the root).
pub(super) fn describe(path: &str, message: &str) -> String {
    let split = |rest: &str| -> (String, String) {
        let (suffix, text) = rest.split_once(SEPARATOR).unwrap_or(("", rest));
        (join(path, suffix), text.to_owned())
    };
    if let Some(text) = message.strip_prefix(WHOLE) {
        return format!("resume checkpoint {text}");
    }
    if let Some(rest) = message.strip_prefix(RULE) {
        let (field, text) = split(rest);
        return format!("resume checkpoint {field} {text}");
    }
    let (field, text) = match message.strip_prefix(MALFORMED) {
        Some(rest) => split(rest),
        None => (join(path, ""), message.to_owned()),
    };
    if field.is_empty() {
        format!("resume checkpoint is malformed: {text}")
    } else {
        format!("resume checkpoint {field} is malformed: {text}")
    }
}

/// A JSON integer >= 0, or `null` read as 0 (the reference's
/// `int(x or 0)`); an integral float such as `3.0` reads as its integer.
pub(super) fn count(value: &Value) -> Option<u64> {
    match value {
        Value::Null => Some(0),
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                .map(|f| f as u64)
        }),
        _ => None,
    }
}

fn counted<'de, D: Deserializer<'de>, T: TryFrom<u64>>(
    deserializer: D,
    text: &str,
) -> Result<T, D::Error> {
    let value = Value::deserialize(deserializer)?;
    count(&value)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| rule("", text))
}

/// An epoch number or count: [`count`], else `must be an integer`.
pub(super) fn integer<'de, D: Deserializer<'de>, T: TryFrom<u64>>(
    deserializer: D,
) -> Result<T, D::Error> {
    counted(deserializer, "must be an integer")
}

/// A byte length or record count: [`count`], else `must be a non-negative
/// integer`.
pub(super) fn non_negative_integer<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<u64, D::Error> {
    counted(deserializer, "must be a non-negative integer")
}

/// A total: any JSON number, `null` read as 0, else `must be numeric`.
pub(super) fn numeric<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(0.0),
        Value::Number(n) => Ok(n.as_f64().unwrap_or(0.0)),
        _ => Err(rule("", "must be numeric")),
    }
}

/// A whole total: [`numeric`], and then an integer >= 0 (an integral float
/// reads as its integer).
pub(super) fn whole_total<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = Value::deserialize(deserializer)?;
    match &value {
        Value::Null | Value::Number(_) => count(&value).ok_or_else(|| {
            D::Error::invalid_value(
                Unexpected::Float(value.as_f64().unwrap_or(f64::NAN)),
                &"a non-negative integer",
            )
        }),
        _ => Err(rule("", "must be numeric")),
    }
}

/// The items of a list field: `must be a list`, and each must pass `is`,
/// else `must contain {what}`.
fn list<E: Error>(value: Value, is: fn(&Value) -> bool, what: &str) -> Result<Vec<Value>, E> {
    let Value::Array(items) = value else {
        return Err(rule("", "must be a list"));
    };
    if !items.iter().all(is) {
        return Err(rule("", &format!("must contain {what}")));
    }
    Ok(items)
}

/// A list of strings (`novelty_seen`, `catalog_consumed`).
pub(super) fn strings<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let items = list(
        Value::deserialize(deserializer)?,
        Value::is_string,
        "strings",
    )?;
    Ok(items
        .into_iter()
        .filter_map(|item| match item {
            Value::String(text) => Some(text),
            _ => None,
        })
        .collect())
}

/// An epoch history (`epochs`, `checkpoints`): a list of objects, each
/// with an integer `epoch` (else `epoch history must use integer epoch
/// ids`), each then read as a `T` with the path of the field at fault
/// (`[1].record_count`).
pub(super) fn epoch_history<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    let items = list(
        Value::deserialize(deserializer)?,
        Value::is_object,
        "objects",
    )?;
    if items
        .iter()
        .any(|item| count(item.get("epoch").unwrap_or(&Value::Null)).is_none())
    {
        return Err(whole("epoch history must use integer epoch ids"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            serde_path_to_error::deserialize(item).map_err(|error| {
                let below = error.path().to_string();
                let suffix = if below == "." {
                    format!("[{index}]")
                } else {
                    format!("[{index}].{below}")
                };
                malformed(&suffix, error.into_inner())
            })
        })
        .collect()
}

/// `coverage_first_seen`: an object (else `must be an object`) of numbers
/// (else `.{family} must be numeric`), kept as written.
pub(super) fn coverage<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Map<String, Value>, D::Error> {
    let Value::Object(coverage) = Value::deserialize(deserializer)? else {
        return Err(rule("", "must be an object"));
    };
    if let Some((family, _)) = coverage.iter().find(|(_, minutes)| !minutes.is_number()) {
        return Err(rule(&format!(".{family}"), "must be numeric"));
    }
    Ok(coverage)
}
