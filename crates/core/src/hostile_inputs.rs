//! Strategies for the `prop_` property tests of everything the host parses
//! from untrusted sources (items files, variant catalogs, checkpoints,
//! replay points, workflow TOML, JSON returned by guests): arbitrary JSON
//! values, hostile strings and numbers, deep nesting, and byte-level edits
//! of valid documents (truncation, stray and invalid UTF-8 bytes, very long
//! lines). Test-only.
//!
//! Each property runs [`config`]`(n)` cases; `PROPTEST_CASES=N` overrides
//! that for a longer run (README, "Run the tests").

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};

/// `default_cases` cases unless `PROPTEST_CASES` is set, and no
/// regression files written beside the sources (a failing case becomes a
/// named unit test instead).
pub fn config(default_cases: u32) -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = default_cases;
    }
    config.failure_persistence = None;
    config
}

/// Strings a hostile producer might send: any string, number- and
/// path-like text, control and bidi characters, and very long text.
pub fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        3 => prop::sample::select(vec![
            "", " ", "NaN", "-NaN", "nan", "Infinity", "-Infinity", "inf", "1e999",
            "-1e999", "-0", "0x1F", "1_000", "null", "true", "/etc/passwd",
            "C:\\Windows", "\\\\server\\share", "../../outside", "replay-points/../x",
            "replay-points/", ".", "..", "\u{feff}", "\u{0}", "\u{202e}", "\u{3000}",
            "\u{fffd}", "ℵ", "🦀", "a\nb", "\r\n", "a::/b", "::", "[]", "{}",
        ])
        .prop_map(String::from),
        1 => (1usize..100_000).prop_map(|n| "é".repeat(n)),
    ]
}

/// Numbers at the edges of what JSON producers write.
pub fn edge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("JSON has no NaN or infinity", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        prop::sample::select(vec![
            Value::from(0),
            Value::from(-1),
            Value::from(u64::MAX),
            Value::from(i64::MIN),
            Value::from(1e308),
            Value::from(-1e308),
            Value::from(5e-324),
            Value::from(0.5),
            Value::from(-0.0),
            Value::from(4_294_967_296_u64),
        ]),
    ]
}

/// Any JSON value, nested up to 4 levels.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        edge_number(),
        hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((hostile_string(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// The JSON type of `value`, for "a value of another type" strategies.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON value whose type is none of `allowed` (see [`json_type`]).
pub fn value_not_of(allowed: &'static [&'static str]) -> impl Strategy<Value = Value> {
    json_value().prop_filter("a value of another type", move |value| {
        !allowed.contains(&json_type(value))
    })
}

/// `depth` nested arrays or objects around `null`, as JSON text.
pub fn deep_json(depth: usize, objects: bool) -> String {
    if objects {
        format!("{}null{}", "{\"a\":".repeat(depth), "}".repeat(depth))
    } else {
        format!("{}null{}", "[".repeat(depth), "]".repeat(depth))
    }
}

/// Byte sequences that are not UTF-8.
const INVALID_UTF8: &[&[u8]] = &[
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\xaf",
];

/// One hostile edit of a valid document's bytes: cut it short, insert
/// stray or invalid UTF-8 bytes, drop or change a byte, wrap it in deep
/// nesting, or make it a very long line. With `one_line`, the edit never
/// adds a line break (so a line-oriented reader must blame this line).
pub fn mutate_bytes(valid: Vec<u8>, one_line: bool) -> impl Strategy<Value = Vec<u8>> {
    let len = valid.len();
    let at = 0..=len;
    let strategy = prop_oneof![
        at.clone().prop_map({
            let valid = valid.clone();
            move |cut| valid[..cut].to_vec()
        }),
        (at.clone(), prop::collection::vec(any::<u8>(), 1..6)).prop_map({
            let valid = valid.clone();
            move |(pos, bytes)| splice(&valid, pos, 0, &bytes)
        }),
        (at.clone(), prop::sample::select(INVALID_UTF8)).prop_map({
            let valid = valid.clone();
            move |(pos, bytes)| splice(&valid, pos, 0, bytes)
        }),
        (at.clone(), any::<u8>()).prop_map({
            let valid = valid.clone();
            move |(pos, byte)| splice(&valid, pos, usize::from(pos < len), &[byte])
        }),
        (100usize..3000, any::<bool>()).prop_map({
            let valid = valid.clone();
            move |(depth, objects)| {
                let deep = deep_json(depth, objects);
                let (open, close) = deep.split_once("null").expect("deep_json has null");
                [open.as_bytes(), &valid, close.as_bytes()].concat()
            }
        }),
        (at, 50_000usize..200_000)
            .prop_map(move |(pos, n)| { splice(&valid, pos, 0, " ".repeat(n).as_bytes()) }),
    ];
    strategy.prop_map(move |mut bytes| {
        if one_line {
            for byte in &mut bytes {
                if matches!(*byte, b'\n' | b'\r') {
                    *byte = b' ';
                }
            }
        }
        bytes
    })
}

/// `valid` with `remove` bytes at `pos` replaced by `insert`.
fn splice(valid: &[u8], pos: usize, remove: usize, insert: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(valid.len() + insert.len());
    out.extend_from_slice(&valid[..pos]);
    out.extend_from_slice(insert);
    out.extend_from_slice(&valid[pos + remove..]);
    out
}

/// `object` as JSON text with `key` written a second time, holding
/// `value`, after the others (most parsers keep the last).
pub fn with_duplicate_key(object: &Map<String, Value>, key: &str, value: &Value) -> String {
    let text = serde_json::to_string(object).expect("a JSON map serialises");
    let body = text.strip_suffix('}').expect("an object ends with }");
    let separator = if object.is_empty() { "" } else { "," };
    format!("{body}{separator}{}:{value}}}", Value::from(key))
}

/// JSON pointers of every scalar, empty list and empty object in `value`,
/// each with the last object key on its way (the field an error about it
/// should name).
pub fn leaf_pointers(value: &Value) -> Vec<(String, String)> {
    fn walk(value: &Value, pointer: String, key: &str, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, child) in map {
                    walk(child, format!("{pointer}/{k}"), k, out);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, format!("{pointer}/{i}"), key, out);
                }
            }
            _ => out.push((pointer, key.to_owned())),
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), "", &mut out);
    out
}

/// `bytes` written as `name` in a fresh temporary directory (removed when
/// the returned guard drops); returns the guard, the file and `read(file)`.
pub fn read_temp_file<T>(
    name: &str,
    bytes: &[u8],
    read: impl FnOnce(&std::path::Path) -> T,
) -> (tempfile::TempDir, std::path::PathBuf, T) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("the temporary file is written");
    let result = read(&path);
    (dir, path, result)
}

/// `document` with one of its non-null leaves (see [`leaf_pointers`]) whose
/// pointer passes `keep` set to a non-null value of another JSON type;
/// yields the changed document and the field an error should name.
pub fn with_a_leaf_of_another_type(
    document: Value,
    keep: impl Fn(&str) -> bool,
) -> impl Strategy<Value = (Value, String)> {
    let leaves: Vec<(String, String)> = leaf_pointers(&document)
        .into_iter()
        .filter(|(pointer, _)| {
            keep(pointer) && !document.pointer(pointer).is_some_and(Value::is_null)
        })
        .collect();
    prop::sample::select(leaves).prop_flat_map(move |(pointer, key)| {
        let original = json_type(document.pointer(&pointer).expect("a leaf of the document"));
        let document = document.clone();
        json_value()
            .prop_filter("a non-null value of another type", move |value| {
                !value.is_null() && json_type(value) != original
            })
            .prop_map(move |value| {
                let mut changed = document.clone();
                *changed
                    .pointer_mut(&pointer)
                    .expect("a leaf of the document") = value;
                (changed, key.clone())
            })
    })
}
