//! The run's failures by `adapter_error.type`: what `summary.json` and
//! `sandloop run --json` say as `error_count` and `errors_by_type`, and the
//! closing lines print.
//!
//! A record counts once for its own `adapter_error` and once for the
//! `adapter_error` of a failed release attached to it
//! (`episode_release_error`), so a prefix whose group failed to release is
//! counted even though its own call succeeded. A resumed run counts the
//! records it kept from before with [`ErrorTally::add_records_file`].

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::episode::unit_record::UnitRecord;

/// Failure counts by `adapter_error.type`, shared by the lanes that write
/// records.
#[derive(Debug, Default)]
pub struct ErrorTally {
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    by_type: BTreeMap<String, u64>,
    /// `duration_minutes` of the records with an `adapter_error`.
    charged_minutes: f64,
}

/// `error_count` and `errors_by_type`, as `summary.json` and `run --json`
/// carry them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Failures in the run (a record and its attached release failure
    /// count once each).
    pub error_count: u64,
    /// The same, by `adapter_error.type` (`trap`, `deadline`,
    /// `adapter_error`, …), in name order.
    pub errors_by_type: BTreeMap<String, u64>,
}

impl ErrorTally {
    /// Counts the failures of records as they are written.
    pub fn add_records(&self, records: &[UnitRecord]) {
        // Most units fail nothing: they leave the shared tally untouched.
        let failed = |record: &UnitRecord| {
            record.get("adapter_error").is_some() || record.get("episode_release_error").is_some()
        };
        if !records.iter().any(failed) {
            return;
        }
        let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        for record in records {
            if record.get("adapter_error").is_some() {
                tally.charged_minutes += record
                    .get("duration_minutes")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
            }
            let failures = [
                record.get("adapter_error"),
                record
                    .get("episode_release_error")
                    .and_then(|release| release.get("adapter_error")),
            ];
            for error_type in failures
                .into_iter()
                .flatten()
                .filter_map(|error| error.get("type").and_then(Value::as_str))
            {
                *tally.by_type.entry(error_type.to_string()).or_default() += 1;
            }
        }
    }

    /// Counts the failures of the first `lines` lines of `records.jsonl`
    /// at `path` (a resumed run's kept records). A line that does not
    /// parse is skipped: the resume has already checked the file.
    ///
    /// Errors: the file cannot be read.
    pub fn add_records_file(&self, path: &Path, lines: u64) -> std::io::Result<()> {
        #[derive(Deserialize)]
        struct Failure {
            #[serde(rename = "type")]
            error_type: Option<String>,
        }
        #[derive(Deserialize)]
        struct Release {
            adapter_error: Option<Failure>,
        }
        #[derive(Deserialize)]
        struct Line {
            adapter_error: Option<Failure>,
            episode_release_error: Option<Release>,
            duration_minutes: Option<f64>,
        }
        let file = std::fs::File::open(path)?;
        let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        for line in std::io::BufReader::new(file).lines().take(lines as usize) {
            let Ok(record) = serde_json::from_str::<Line>(&line?) else {
                continue;
            };
            if record.adapter_error.is_some() {
                tally.charged_minutes += record.duration_minutes.unwrap_or(0.0);
            }
            let release = record.episode_release_error.and_then(|r| r.adapter_error);
            for error_type in [record.adapter_error, release]
                .into_iter()
                .flatten()
                .filter_map(|failure| failure.error_type)
            {
                *tally.by_type.entry(error_type).or_default() += 1;
            }
        }
        Ok(())
    }

    /// The counts so far.
    pub fn counts(&self) -> ErrorCounts {
        let by_type = self
            .tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_type
            .clone();
        ErrorCounts {
            error_count: by_type.values().sum(),
            errors_by_type: by_type,
        }
    }
}

impl ErrorTally {
    /// Minutes charged to failed records so far (their `duration_minutes`:
    /// at least the reference's 0.05 each), part of the run's effective
    /// compute minutes.
    pub fn charged_minutes(&self) -> f64 {
        self.tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .charged_minutes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> UnitRecord {
        match value {
            Value::Object(map) => UnitRecord::from(map),
            _ => unreachable!(),
        }
    }

    #[test]
    fn records_and_their_attached_release_failures_count_by_type() {
        let tally = ErrorTally::default();
        tally.add_records(&[
            record(json!({"item_id": "a", "accepted": true})),
            record(json!({"item_id": "b", "duration_minutes": 0.05, "adapter_error": {"type": "trap", "message": "m"}})),
            record(json!({"item_id": "c", "adapter_error": {"type": "deadline"}})),
            record(json!({"item_id": "p", "episode_release_error": {"adapter_error": {"type": "trap"}}})),
        ]);
        let counts = tally.counts();
        assert_eq!(counts.error_count, 3);
        assert_eq!(tally.charged_minutes(), 0.05);
        assert_eq!(
            counts.errors_by_type,
            BTreeMap::from([("deadline".to_string(), 1), ("trap".to_string(), 2)])
        );
        assert_eq!(
            serde_json::to_value(&counts).unwrap(),
            json!({"error_count": 3, "errors_by_type": {"deadline": 1, "trap": 2}})
        );
    }

    #[test]
    fn a_resumed_run_counts_only_the_records_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let lines = [
            json!({"item_id": "a", "adapter_error": {"type": "trap"}}).to_string(),
            "{damaged".to_string(),
            json!({"item_id": "p", "episode_release_error": {"adapter_error": {"type": "fuel_exhausted"}}}).to_string(),
            json!({"item_id": "cut", "adapter_error": {"type": "trap"}}).to_string(),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let tally = ErrorTally::default();
        tally.add_records_file(&path, 3).unwrap();
        assert_eq!(
            tally.counts().errors_by_type,
            BTreeMap::from([("fuel_exhausted".to_string(), 1), ("trap".to_string(), 1)])
        );
        assert!(tally.add_records_file(&dir.path().join("none"), 1).is_err());
    }
}
