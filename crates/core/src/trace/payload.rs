//! Public-payload validation: what may enter a trace event. Mirrors
//! `_freeze_public_value` / `freeze_public_mapping` in `trace_runtime.py`.

use serde_json::{Map, Value};

use crate::episode::value::{MAX_INPUT_NESTING, nesting_depth};

/// Keys that name adapter-owned or sensitive state; compared after trimming
/// and lower-casing, at any depth (reference `_FORBIDDEN_PUBLIC_KEYS`).
pub const FORBIDDEN_PUBLIC_KEYS: &[&str] = &[
    "adapter_state",
    "credential",
    "credentials",
    "environment_state",
    "file_path",
    "handle",
    "live_handle",
    "password",
    "path",
    "raw_screenshot",
    "screenshot_bytes",
    "secret",
    "software_state",
    "token",
];

/// Why a payload was refused, naming the offending field by its path from
/// `public_payload` (e.g. `public_payload.files[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The payload is not a JSON object.
    #[error("{0} must be a JSON object")]
    NotAnObject(String),
    /// A key is empty.
    #[error("public trace payload keys must be non-empty strings: {0}")]
    EmptyKey(String),
    /// A key names sensitive or adapter-owned state.
    #[error("adapter-owned or sensitive state must not enter public trace payloads: {0}")]
    ForbiddenKey(String),
    /// A string is an absolute path (POSIX, UNC or a Windows drive path).
    #[error("public trace payload must not contain absolute paths: {0}")]
    AbsolutePath(String),
    /// The payload nests arrays and objects more than
    /// [`MAX_INPUT_NESTING`] levels deep (the count): its event line could
    /// not be read back from the trace file.
    #[error(
        "public_payload nests arrays and objects {0} levels deep, over the limit of {MAX_INPUT_NESTING}"
    )]
    TooDeep(usize),
}

/// Check that `value` is a public-safe JSON object: no forbidden keys, no
/// empty keys, no absolute paths in any string, at any depth, and at most
/// [`MAX_INPUT_NESTING`] levels of arrays and objects. JSON has no binary
/// or path types, so the reference's type checks hold by construction.
pub fn validate_public_payload(value: &Value) -> Result<(), PayloadError> {
    match value {
        Value::Object(map) => validate_public_object(map),
        _ => Err(PayloadError::NotAnObject(FIELD.to_string())),
    }
}

/// [`validate_public_payload`] for an object held as its map, checked
/// where it lies (no `Value` is built around it).
pub fn validate_public_object(map: &Map<String, Value>) -> Result<(), PayloadError> {
    let depth = 1 + map.values().map(nesting_depth).max().unwrap_or(0);
    if depth > MAX_INPUT_NESTING {
        return Err(PayloadError::TooDeep(depth));
    }
    check_object(map, &mut FIELD.to_string())
}

/// The name a payload's offending fields are given from.
const FIELD: &str = "public_payload";

fn check(value: &Value, field: &mut String) -> Result<(), PayloadError> {
    match value {
        Value::String(text) if is_absolute_path(text) => {
            Err(PayloadError::AbsolutePath(field.clone()))
        }
        Value::Object(map) => check_object(map, field),
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                let len = field.len();
                field.push_str(&format!("[{index}]"));
                check(child, field)?;
                field.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_object(map: &Map<String, Value>, field: &mut String) -> Result<(), PayloadError> {
    for (key, child) in map {
        if key.is_empty() {
            return Err(PayloadError::EmptyKey(field.clone()));
        }
        let len = field.len();
        field.push('.');
        field.push_str(key);
        if is_forbidden(key) {
            return Err(PayloadError::ForbiddenKey(field.clone()));
        }
        check(child, field)?;
        field.truncate(len);
    }
    Ok(())
}

/// Whether `key`, trimmed and lower-cased, is one of the
/// [`FORBIDDEN_PUBLIC_KEYS`] (Unicode lower case, as Python's `lower`).
fn is_forbidden(key: &str) -> bool {
    let key = key.trim();
    if key.is_ascii() {
        FORBIDDEN_PUBLIC_KEYS
            .iter()
            .any(|forbidden| forbidden.eq_ignore_ascii_case(key))
    } else {
        FORBIDDEN_PUBLIC_KEYS.contains(&key.to_lowercase().as_str())
    }
}

/// `/x`, `\\server\share` or `C:\x` / `C:/x` (reference
/// `_WINDOWS_ABSOLUTE_PATH` and the leading-separator checks).
fn is_absolute_path(text: &str) -> bool {
    let bytes = text.as_bytes();
    text.starts_with('/')
        || text.starts_with("\\\\")
        || (bytes.len() >= 3
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && (bytes[2] == b'\\' || bytes[2] == b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_nested_public_values() {
        let payload =
            json!({"count": 3, "items": ["a", {"kind": "heading"}], "ok": true, "n": null});
        assert_eq!(validate_public_payload(&payload), Ok(()));
    }

    #[test]
    fn refuses_non_objects() {
        assert!(matches!(
            validate_public_payload(&json!([1])),
            Err(PayloadError::NotAnObject(_))
        ));
    }

    #[test]
    fn refuses_forbidden_keys_at_any_depth_case_insensitively() {
        let err = validate_public_payload(&json!({"outer": [{" Token ": "x"}]})).unwrap_err();
        assert_eq!(
            err,
            PayloadError::ForbiddenKey("public_payload.outer[0]. Token ".into())
        );
        for key in FORBIDDEN_PUBLIC_KEYS {
            let payload = json!({ *key: 1 });
            assert!(validate_public_payload(&payload).is_err(), "{key}");
        }
    }

    #[test]
    fn refuses_absolute_paths_in_any_string() {
        for bad in ["/etc/passwd", "\\\\server\\share", "C:\\Windows", "d:/data"] {
            let err = validate_public_payload(&json!({"list": ["ok", bad]})).unwrap_err();
            assert_eq!(
                err,
                PayloadError::AbsolutePath("public_payload.list[1]".into())
            );
        }
        for fine in ["relative/path.md", "C:", "c:x", "not/abs"] {
            assert_eq!(validate_public_payload(&json!({"v": fine})), Ok(()));
        }
    }

    #[test]
    fn refuses_payloads_nested_too_deeply_to_be_read_back() {
        // 127 levels parse (serde_json's limit is 128), but the event line
        // in traces/epoch-N.jsonl nests the payload once more, and no
        // reader could parse that line again.
        let text = format!("{{\"a\":{}}}", crate::hostile_inputs::deep_json(126, true));
        let payload: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            validate_public_payload(&payload),
            Err(PayloadError::TooDeep(127))
        );
        let text = format!("{{\"a\":{}}}", crate::hostile_inputs::deep_json(98, false));
        let payload: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(validate_public_payload(&payload), Ok(()));
    }

    #[test]
    fn keys_are_lower_cased_as_python_does_before_they_are_compared() {
        // U+212A KELVIN SIGN lower-cases to `k`, as in Python's `lower`.
        for key in ["TOKEN", " Secret ", "To\u{212A}en", "PASSWORD\t"] {
            let payload = json!({ "outer": { key: 1 } });
            let Value::Object(map) = &payload else {
                unreachable!()
            };
            let expected = Err(PayloadError::ForbiddenKey(format!(
                "public_payload.outer.{key}"
            )));
            assert_eq!(validate_public_payload(&payload), expected, "{key:?}");
            assert_eq!(validate_public_object(map), expected, "{key:?}");
        }
        assert_eq!(
            validate_public_payload(&json!({"tokens": 1, "k\u{212A}": 2})),
            Ok(())
        );
    }

    #[test]
    fn refuses_empty_keys() {
        assert!(matches!(
            validate_public_payload(&json!({"": 1})),
            Err(PayloadError::EmptyKey(_))
        ));
    }

    mod props {
        use super::*;
        use crate::hostile_inputs::{config, hostile_string, json_value};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(config(256))]

            #[test]
            fn prop_trace_payloads_are_accepted_or_refused_naming_the_field(
                value in json_value(),
                key in hostile_string(),
            ) {
                for payload in [value.clone(), serde_json::json!({ key.clone(): value })] {
                    if let Value::Object(map) = &payload {
                        prop_assert_eq!(
                            validate_public_object(map),
                            validate_public_payload(&payload),
                            "an object is judged the same held as a map"
                        );
                    }
                    match validate_public_payload(&payload) {
                        Ok(()) => prop_assert!(payload.is_object()),
                        Err(PayloadError::NotAnObject(field)) => {
                            prop_assert!(!payload.is_object());
                            prop_assert_eq!(field, "public_payload");
                        }
                        Err(PayloadError::TooDeep(depth)) => prop_assert!(depth > 100),
                        Err(PayloadError::EmptyKey(field)
                            | PayloadError::ForbiddenKey(field)
                            | PayloadError::AbsolutePath(field)) => {
                            prop_assert!(field.starts_with("public_payload"), "{}", field);
                        }
                    }
                }
            }
        }
    }
}
