//! `sandloop try`'s runs: a few items through exactly what a run does (one
//! epoch, one worker) in a scratch run directory, read back as records
//! with what their items' calls printed, and the changes between two
//! rounds of the same items.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{LaunchError, RunObserver, RunRequest};
use sandloop_core::harness::items_file::STDIN_PATH;
use sandloop_core::harness::run_files::{ADAPTER_OUTPUT_DIR, RECORDS_FILE};
use sandloop_core::report::guest_output::{Entry, read_call_lines};

/// A record of a trial run, with the lines its item's calls printed (an
/// item's calls under its first record only).
#[derive(Clone, Debug, PartialEq)]
pub struct TriedRecord {
    /// The record, as `records.jsonl` holds it.
    pub record: Value,
    /// What the item's calls printed, a line each.
    pub guest_output: Vec<String>,
}

impl TriedRecord {
    /// The record's `item_id`, `record_kind` (`standalone` when absent) and
    /// `ok` or `error: TYPE`.
    pub fn headline(&self) -> (String, String, String) {
        let record = &self.record;
        let id = record.get("item_id").and_then(Value::as_str).unwrap_or("");
        let kind = record
            .get("record_kind")
            .and_then(Value::as_str)
            .unwrap_or("standalone");
        let outcome = match record
            .pointer("/adapter_error/type")
            .and_then(Value::as_str)
        {
            Some(error_type) => format!("error: {error_type}"),
            None => "ok".to_string(),
        };
        (id.to_string(), kind.to_string(), outcome)
    }

    /// Whether the record carries `adapter_error` (what `sandloop try`
    /// counts as failed).
    pub fn has_error(&self) -> bool {
        self.record.get("adapter_error").is_some()
    }
}

/// The items of `--items path` (`-`: stdin), one JSON text a line, blank
/// lines skipped, at most `limit`.
///
/// # Errors
/// The file cannot be opened as a regular file or read; the message names
/// `--items` and the path.
pub fn read_item_lines(path: &Path, limit: usize) -> Result<Vec<String>, String> {
    let stdin = path == Path::new(STDIN_PATH);
    let shown = if stdin {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    let reader: Box<dyn BufRead> = if stdin {
        Box::new(std::io::stdin().lock())
    } else {
        let file = sandloop_core::input_file::open_regular_input(path)
            .map_err(|error| format!("--items {shown}: {error}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut lines = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(|error| format!("--items {shown}: {error}"))?;
        if !line.trim().is_empty() {
            lines.push(line);
        }
        if lines.len() == limit {
            break;
        }
    }
    Ok(lines)
}

/// The `--item` texts as item lines: each must be one JSON object. An item
/// reaches the adapter as written; only one that spans lines is written on
/// one.
///
/// # Errors
/// The first text that is not a JSON object, named `--item N` (1-based).
pub fn item_texts(texts: &[String]) -> Result<Vec<String>, String> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(_)) if !text.contains('\n') => Ok(text.trim().to_string()),
            Ok(object @ Value::Object(_)) => Ok(object.to_string()),
            Ok(_) => Err(format!("--item {}: not a JSON object: {text}", index + 1)),
            Err(error) => Err(format!("--item {}: not JSON ({error}): {text}", index + 1)),
        })
        .collect()
}

/// Run `lines` once as `request` says, in a scratch run directory under
/// `root` (removed afterwards): `request`'s `items` and `out` are set to
/// the scratch's. Returns the records with what their calls printed.
///
/// # Errors
/// What [`super::run`] returns, and [`LaunchError::Failed`] when the
/// scratch directory cannot be written or its records read.
pub fn run_items(
    request: &RunRequest,
    lines: &[String],
    root: &Path,
    observer: &dyn RunObserver,
) -> Result<Vec<TriedRecord>, LaunchError> {
    let failed = |what: &str, path: &Path, error: std::io::Error| {
        LaunchError::Failed(format!("cannot {what} {}: {error}", path.display()))
    };
    let scratch = tempfile::tempdir_in(root)
        .map_err(|error| failed("make a scratch directory in", root, error))?;
    let items: PathBuf = scratch.path().join("items.jsonl");
    std::fs::write(&items, lines.join("\n") + "\n")
        .map_err(|error| failed("write", &items, error))?;
    let mut request = request.clone();
    request.options.items = Some(items);
    request.options.out = scratch.path().join("run");
    super::run(&request, observer)?;
    read_records(&request.options.out)
}

/// The records of the run in `out`, each with its item's guest output (an
/// item's calls under its first record).
///
/// # Errors
/// [`LaunchError::Failed`] when `records.jsonl` cannot be read or holds a
/// line that is not JSON.
pub fn read_records(out: &Path) -> Result<Vec<TriedRecord>, LaunchError> {
    let text = std::fs::read_to_string(out.join(RECORDS_FILE))
        .map_err(|error| LaunchError::Failed(format!("cannot read the records: {error}")))?;
    let calls = read_call_lines(&out.join(ADAPTER_OUTPUT_DIR).join("epoch-0001.jsonl"));
    let mut shown_output = HashSet::new();
    let mut records = Vec::new();
    for line in text.lines() {
        let record: Value = serde_json::from_str(line)
            .map_err(|error| LaunchError::Failed(format!("a record is not JSON: {error}")))?;
        let id = record
            .get("item_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let guest_output = if shown_output.insert(id.clone()) {
            calls
                .iter()
                .filter(|call| call.item_id.as_deref() == Some(id.as_str()))
                .flat_map(|call| call.entries.iter().flat_map(Entry::lines))
                .collect()
        } else {
            Vec::new()
        };
        records.push(TriedRecord {
            record,
            guest_output,
        });
    }
    Ok(records)
}

/// How a record differs from the last round's.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A record whose fields (timings aside) changed, or a new one.
    Changed {
        /// Its `item_id`, `record_kind` and outcome ([`TriedRecord::headline`]).
        headline: (String, String, String),
        /// The fields that changed (`new record` for a new one).
        fields: Vec<String>,
        /// A failure's error message.
        message: Option<String>,
    },
    /// A record of the last round that is gone: its `item_id` and
    /// `record_kind`.
    Gone(String, String),
}

/// Which records of `after` changed since `before` — their fields other
/// than timings (every `*_minutes`), keyed by item id and kind — which are
/// new, and which are gone.
pub fn changes(before: &[TriedRecord], after: &[TriedRecord]) -> Vec<Change> {
    let key = |entry: &TriedRecord| {
        let (id, kind, _) = entry.headline();
        (id, kind)
    };
    let old: HashMap<_, _> = before.iter().map(|entry| (key(entry), entry)).collect();
    let mut found = Vec::new();
    for entry in after {
        let headline = entry.headline();
        let record = untimed(&entry.record);
        let fields: Vec<String> = match old.get(&(headline.0.clone(), headline.1.clone())) {
            None => vec!["new record".into()],
            Some(previous) => {
                let previous = untimed(&previous.record);
                let keys: BTreeSet<&String> = record
                    .as_object()
                    .into_iter()
                    .chain(previous.as_object())
                    .flat_map(|map| map.keys())
                    .collect();
                keys.into_iter()
                    .filter(|key| record.get(key.as_str()) != previous.get(key.as_str()))
                    .cloned()
                    .collect()
            }
        };
        if fields.is_empty() {
            continue;
        }
        let message = record
            .pointer("/adapter_error/message")
            .and_then(Value::as_str)
            .map(str::to_owned);
        found.push(Change::Changed {
            headline,
            fields,
            message,
        });
    }
    let now: HashSet<_> = after.iter().map(key).collect();
    for entry in before {
        let (id, kind) = key(entry);
        if !now.contains(&(id.clone(), kind.clone())) {
            found.push(Change::Gone(id, kind));
        }
    }
    found
}

/// `value` without its timing fields (keys ending in `_minutes`), at
/// every depth.
fn untimed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !key.ends_with("_minutes"))
                .map(|(key, value)| (key.clone(), untimed(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(untimed).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tried(record: Value) -> TriedRecord {
        TriedRecord {
            record,
            guest_output: Vec::new(),
        }
    }

    #[test]
    fn only_objects_are_items_and_an_item_on_several_lines_is_put_on_one() {
        let texts = ["{\"a\": 1}".to_owned(), "{\n\"b\": 2\n}".to_owned()];
        assert_eq!(item_texts(&texts).unwrap(), ["{\"a\": 1}", "{\"b\":2}"]);
        let error = item_texts(&["{}".to_owned(), "[1]".to_owned()]).unwrap_err();
        assert_eq!(error, "--item 2: not a JSON object: [1]");
        let error = item_texts(&["{".to_owned()]).unwrap_err();
        assert!(error.starts_with("--item 1: not JSON ("), "{error}");
    }

    #[test]
    fn changes_ignore_timings_and_name_new_changed_and_gone_records() {
        let before = [
            tried(json!({"item_id": "a", "value": 1, "wall_minutes": 0.1})),
            tried(json!({"item_id": "b", "value": 2})),
        ];
        let after = [
            tried(json!({"item_id": "a", "value": 1, "wall_minutes": 0.7})),
            tried(json!({"item_id": "c", "value": 3})),
            tried(json!({"item_id": "b", "value": 5,
                "adapter_error": {"type": "trap", "message": "boom"}})),
        ];
        let found = changes(&before, &after);
        assert_eq!(
            found,
            [
                Change::Changed {
                    headline: ("c".into(), "standalone".into(), "ok".into()),
                    fields: vec!["new record".into()],
                    message: None,
                },
                Change::Changed {
                    headline: ("b".into(), "standalone".into(), "error: trap".into()),
                    fields: vec!["adapter_error".into(), "value".into()],
                    message: Some("boom".into()),
                },
            ]
        );
        assert_eq!(
            changes(&after, &before).last(),
            Some(&Change::Gone("c".into(), "standalone".into()))
        );
    }
}
