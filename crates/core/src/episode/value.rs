//! Python-compatible readings of JSON values.
//!
//! The reference reads records through Python's truthiness, `str()`, `repr()`,
//! `float()` and `round()`. These helpers reproduce the parts of those rules
//! that matter for JSON values, so records, reasons and metrics stay
//! comparable with the reference.

use std::borrow::Cow;

use serde_json::Value;

/// Python truthiness of a JSON value: `null`, `false`, `0`, `""`, `[]` and
/// `{}` are false; everything else is true.
pub fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Python `str(value)` for a JSON value. Strings are borrowed; `null`,
/// booleans and numbers read as Python would print them (`None`, `True`,
/// `5`); arrays and objects fall back to their JSON text.
pub fn py_str(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s.as_str()),
        Value::Null => Cow::Borrowed("None"),
        Value::Bool(true) => Cow::Borrowed("True"),
        Value::Bool(false) => Cow::Borrowed("False"),
        other => Cow::Owned(other.to_string()),
    }
}

/// Python `str(item.get(key) or "")`: the value as text, or `""` when it is
/// missing or falsy.
pub fn str_or_empty(value: Option<&Value>) -> Cow<'_, str> {
    match value {
        Some(v) if truthy(Some(v)) => py_str(v),
        _ => Cow::Borrowed(""),
    }
}

/// Python `repr(value)` for a JSON value, as used in the reference's
/// messages: strings are single-quoted (double-quoted when they contain a
/// single quote and no double quote) with Python's escapes.
pub fn py_repr(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "None".to_owned(),
        Some(Value::String(s)) => repr_str(s),
        Some(other) => py_str(other).into_owned(),
    }
}

fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Most levels of arrays and objects accepted in JSON from outside the host
/// (items files, values returned by components). serde_json reads at most
/// 128; the rest is room for the host to nest an accepted value in its own
/// files (a record under `adapter_claimed`, items in a durable point's
/// list) and still read those files back.
pub const MAX_INPUT_NESTING: usize = 100;

/// Levels of arrays and objects in `value`: 0 for a scalar, 1 for `[]` or
/// `{"a": 1}`, 2 for `[[]]`. Walks without recursion.
pub fn nesting_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(depth);
                stack.extend(items.iter().map(|child| (child, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth);
                stack.extend(map.values().map(|child| (child, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Python `float(value)` for a JSON value: numbers, booleans (`1.0`/`0.0`)
/// and numeric strings; `None` for anything Python would reject.
pub fn py_float(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

/// Python `float(value or 0.0)`: falsy or missing values read as `0.0`;
/// `None` when a truthy value is not numeric.
pub fn float_or_zero(value: Option<&Value>) -> Option<f64> {
    match value {
        Some(v) if truthy(Some(v)) => py_float(v),
        _ => Some(0.0),
    }
}

/// Python `round(x, places)`: correctly rounded to `places` decimals (the
/// decimal text Rust prints is exact, like CPython's `round`). Non-finite
/// values are returned unchanged.
pub fn round_to(x: f64, places: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let rounded = format!("{x:.places$}").parse::<f64>().unwrap_or(x);
    // Avoid "-0.0" in outputs.
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// Converts a non-finite float to JSON `null` (JSON has no infinity),
/// otherwise to a JSON number.
pub fn json_f64(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn truthiness_follows_python() {
        for falsy in [
            json!(null),
            json!(false),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!truthy(Some(&falsy)), "{falsy} should be falsy");
        }
        for truthy_value in [
            json!(true),
            json!(1),
            json!(-0.5),
            json!(" "),
            json!([0]),
            json!({"a": 1}),
        ] {
            assert!(
                truthy(Some(&truthy_value)),
                "{truthy_value} should be truthy"
            );
        }
        assert!(!truthy(None));
    }

    #[test]
    fn str_and_repr_follow_python() {
        assert_eq!(py_str(&json!("x")), "x");
        assert_eq!(py_str(&json!(5)), "5");
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(str_or_empty(Some(&json!(0))), "");
        assert_eq!(str_or_empty(Some(&json!(7))), "7");
        assert_eq!(py_repr(Some(&json!("a"))), "'a'");
        assert_eq!(py_repr(Some(&json!("it's"))), "\"it's\"");
        assert_eq!(py_repr(Some(&json!("a'b\"c"))), "'a\\'b\"c'");
        assert_eq!(py_repr(Some(&json!("x\ny"))), "'x\\ny'");
        assert_eq!(py_repr(None), "None");
        assert_eq!(py_repr(Some(&json!(3))), "3");
    }

    #[test]
    fn float_and_round_follow_python() {
        assert_eq!(py_float(&json!("1.5")), Some(1.5));
        assert_eq!(py_float(&json!(true)), Some(1.0));
        assert_eq!(py_float(&json!("abc")), None);
        assert_eq!(py_float(&json!([1])), None);
        assert_eq!(float_or_zero(None), Some(0.0));
        assert_eq!(float_or_zero(Some(&json!(""))), Some(0.0));
        assert_eq!(float_or_zero(Some(&json!("x"))), None);
        assert_eq!(round_to(0.1234567, 6), 0.123457);
        // 0.1234565 is 0.12345649999... in binary: Python gives 0.123456.
        assert_eq!(round_to(0.1234565, 6), 0.123456);
        // 2.675 is 2.67499999... in binary, so Python rounds it down.
        assert_eq!(round_to(2.675, 2), 2.67);
        assert_eq!(round_to(-0.0000001, 3), 0.0);
        assert!(round_to(f64::INFINITY, 3).is_infinite());
        assert_eq!(json_f64(f64::INFINITY), Value::Null);
    }
}
