//! Reading a run directory into typed facts: `summary.json`,
//! `manifest.json` and `epochs.jsonl` as their host types, the host-owned
//! fields of every line of `records.jsonl`, and — when the run has them —
//! `replay-points.jsonl`, `replays.jsonl` and `counterfactuals.jsonl`.
//!
//! Records are adapter-defined in part: only the fields the host writes
//! (`item_id`, `family`, `is_variant`, `variant_spec_id`, `raw_value`,
//! `novel_value`, `duration_minutes`, `record_kind`, `execution_status`,
//! `adapter_error`, `replay`) are read, each leniently as the host reads
//! them, except that a value the host always writes as a number must be
//! one.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::episode::adapter::Record;
use crate::episode::records::{RECORD_KIND_EPISODE_SUFFIX, RECORD_KIND_SHARED_PREFIX};
use crate::episode::value::{py_str, str_or_empty, truthy};
use crate::finished_run::offline::REPLAYS_FILE;
use crate::harness::run_files::{
    EPOCHS_FILE, MANIFEST_FILE, RECORDS_FILE, SUMMARY_FILE, read_run_file,
};
use crate::harness::{EpochSummary, RunManifest, RunSummary};
use crate::replay::counterfactual::run_files::COUNTERFACTUALS_FILE;
use crate::replay::durable::{
    DurableError, POINTS_FILE, PointLine, load_points, read_jsonl, read_jsonl_from,
};
use crate::replay::point::field_error;

use super::counterfactuals::{CounterfactualLine, read_counterfactuals};
use super::error::ReportError;
use super::head::RunHead;
use super::record_facts::{ChildEnd, ErrorFacts, RecordFacts, RecordKind};

/// One line of `replays.jsonl`: what one `sandloop replay` of the run did.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayLine {
    /// `item_id` replayed.
    pub item_id: String,
    /// `succeeded`.
    pub succeeded: bool,
    /// `replay_point.replay_point_id`.
    pub replay_point_id: String,
    /// `replay_point.fidelity`.
    pub fidelity: String,
    /// `restored_from` (`state` or `snapshot`).
    pub restored_from: String,
    /// `outcome.error.message` of a failed replay, or the release error's.
    pub message: Option<String>,
    /// `replay_wall_minutes`.
    pub wall_minutes: f64,
}

/// Everything the report reads from one run directory.
#[derive(Clone, Debug)]
pub struct RunFiles {
    /// The run directory.
    pub dir: PathBuf,
    /// `summary.json`; `None` for a run that has none yet (it stopped,
    /// failed, or is still running).
    pub summary: Option<RunSummary>,
    /// The headline figures: from `summary.json`, or from what a partial
    /// run left.
    pub head: RunHead,
    /// `manifest.json`.
    pub manifest: RunManifest,
    /// `epochs.jsonl`, in order.
    pub epochs: Vec<EpochSummary>,
    /// `records.jsonl`, in order.
    pub records: Vec<RecordFacts>,
    /// `replay-points.jsonl` (last line of each id), when the run has one.
    pub points: Option<Vec<PointLine>>,
    /// `replays.jsonl`, empty when the run has none.
    pub replays: Vec<ReplayLine>,
    /// `counterfactuals.jsonl`, when the run has one.
    pub counterfactuals: Option<Vec<CounterfactualLine>>,
}

/// Reads the run directory `dir`. A run without `summary.json` — stopped,
/// failed or still running — is read from what it left (see
/// [`RunHead::of_partial`]): `epochs.jsonl` and `records.jsonl` may then
/// be missing (nothing finished yet).
///
/// Errors: `manifest.json` missing or damaged; `summary.json`,
/// `epochs.jsonl` or `records.jsonl` damaged, or missing in a finished
/// run; a damaged `checkpoint.json` or `failure.json` of a partial run, or
/// `replay-points.jsonl`, `replays.jsonl` or `counterfactuals.jsonl`; each
/// names the file, the line (JSONL) and the field.
pub fn load_run(dir: &Path) -> Result<RunFiles, ReportError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let manifest: RunManifest = read_run_file(&manifest_path)
        .map_err(|error| ReportError::run_file(&manifest_path, error))?;
    let summary_path = dir.join(SUMMARY_FILE);
    let summary: Option<RunSummary> = if summary_path.exists() {
        Some(
            read_run_file(&summary_path)
                .map_err(|error| ReportError::run_file(&summary_path, error))?,
        )
    } else {
        None
    };
    let epochs_path = dir.join(EPOCHS_FILE);
    let lines = if summary.is_some() {
        Lines::All
    } else {
        Lines::Complete
    };
    let epochs = if summary.is_some() || epochs_path.exists() {
        read_epochs(&epochs_path, lines)?
    } else {
        Vec::new()
    };
    let records_path = dir.join(RECORDS_FILE);
    let records = if summary.is_some() || records_path.exists() {
        read_records(&records_path, &epochs, lines)?
    } else {
        Vec::new()
    };
    let head = match &summary {
        Some(summary) => RunHead::of_summary(summary),
        None => RunHead::of_partial(dir, &manifest, &epochs, &records)?,
    };
    // summary.json is written after the run's last epoch line, so a file
    // with fewer lines than it counts lost some (one with more is a run
    // that resumed and stopped again before its summary).
    if let Some(summary) = &summary
        && epochs.len() < summary.arm.epoch_count
    {
        return Err(ReportError::at(
            &epochs_path,
            None,
            format!(
                "holds {} epoch line(s), but {} counts {} finished epochs",
                epochs.len(),
                summary_path.display(),
                summary.arm.epoch_count
            ),
        ));
    }
    let points = if dir.join(POINTS_FILE).exists() {
        Some(load_points(dir).map_err(|error| ReportError::jsonl(dir.join(POINTS_FILE), error))?)
    } else {
        None
    };
    let replays_path = dir.join(REPLAYS_FILE);
    let replays = if replays_path.exists() {
        read_replays(&replays_path)?
    } else {
        Vec::new()
    };
    let counterfactuals_path = dir.join(COUNTERFACTUALS_FILE);
    let counterfactuals = if counterfactuals_path.exists() {
        Some(read_counterfactuals(&counterfactuals_path)?)
    } else {
        None
    };
    Ok(RunFiles {
        dir: dir.to_owned(),
        summary,
        head,
        manifest,
        epochs,
        records,
        points,
        replays,
        counterfactuals,
    })
}

/// Which lines of a run's JSONL file to read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lines {
    /// Every line: the run finished, so a torn line is damage.
    All,
    /// The complete lines: a partial run (killed, or still writing) may
    /// end its file in the middle of a line, which is left out.
    Complete,
}

/// [`read_jsonl`] of `path`, of its complete lines only under
/// [`Lines::Complete`].
fn read_lines(
    path: &Path,
    lines: Lines,
    each: impl FnMut(Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    if lines == Lines::All {
        return read_jsonl(path, each);
    }
    let shown = path.display().to_string();
    let read_error = |source| DurableError::Read {
        path: shown.clone(),
        source,
    };
    // A FIFO or a directory is refused at once, never waited on.
    let mut file = crate::input_file::open_regular_input(path).map_err(read_error)?;
    let complete = complete_length(&mut file).map_err(read_error)?;
    let reader = std::io::BufReader::new(std::io::Read::take(file, complete));
    read_jsonl_from(reader, shown.clone(), each)
}

/// The length of `file` up to and including its last newline (0 without
/// one), found by reading back from its end; the file is left at its
/// start.
fn complete_length(file: &mut std::fs::File) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 64 << 10;
    let mut end = file.metadata()?.len();
    let mut block = vec![0; BLOCK as usize];
    let complete = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(BLOCK);
        let chunk = &mut block[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = chunk.iter().rposition(|&b| b == b'\n') {
            break start + at as u64 + 1;
        }
        end = start;
    };
    file.seek(SeekFrom::Start(0))?;
    Ok(complete)
}

/// Every line of `epochs.jsonl` as an [`EpochSummary`].
fn read_epochs(path: &Path, lines: Lines) -> Result<Vec<EpochSummary>, ReportError> {
    let mut epochs = Vec::new();
    read_lines(path, lines, |line| {
        let epoch: EpochSummary =
            serde_path_to_error::deserialize(Value::Object(line)).map_err(field_error)?;
        epochs.push(epoch);
        Ok(())
    })
    .map_err(|error| ReportError::jsonl(path, error))?;
    Ok(epochs)
}

/// Every line of `records.jsonl`, each given the epoch whose
/// `record_count` range holds its position (records past the last epoch's
/// belong to the epoch after it).
fn read_records(
    path: &Path,
    epochs: &[EpochSummary],
    lines: Lines,
) -> Result<Vec<RecordFacts>, ReportError> {
    let mut bounds = Vec::with_capacity(epochs.len());
    let mut total = 0u64;
    for epoch in epochs {
        total += epoch.record_count;
        bounds.push((total, epoch.epoch));
    }
    let after_last = epochs.last().map_or(1, |epoch| epoch.epoch + 1);
    let mut records = Vec::new();
    read_lines(path, lines, |line| {
        let position = records.len() as u64;
        let epoch = bounds
            .iter()
            .find(|(end, _)| position < *end)
            .map_or(after_last, |(_, epoch)| *epoch);
        records.push(record_facts(&line, epoch)?);
        Ok(())
    })
    .map_err(|error| ReportError::jsonl(path, error))?;
    Ok(records)
}

/// `record[key]` as a number: 0 when absent or `null`, an error naming the
/// field when it is anything else.
fn number(record: &Record, key: &str) -> Result<f64, String> {
    match record.get(key) {
        None | Some(Value::Null) => Ok(0.0),
        Some(Value::Number(n)) => Ok(n.as_f64().unwrap_or(0.0)),
        Some(other) => Err(format!("{key}: expected a number, found {other}")),
    }
}

/// `map[key]` as text when it is a non-empty string.
fn text(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The facts of one record (see [`RecordFacts`]).
fn record_facts(record: &Record, epoch: u32) -> Result<RecordFacts, String> {
    let empty = Map::new();
    let replay = record
        .get("replay")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let error = (str_or_empty(record.get("execution_status")) == "adapter_error").then(|| {
        let block = record
            .get("adapter_error")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        ErrorFacts {
            error_type: text(block, "type").unwrap_or_else(|| "adapter_error".to_owned()),
            kind: text(block, "kind"),
            message: block
                .get("message")
                .map(py_str)
                .unwrap_or_default()
                .into_owned(),
        }
    });
    let child = truthy(replay.get("isolated")).then(|| child_end(replay, error.is_some()));
    let kind_field = str_or_empty(record.get("record_kind"));
    let kind = if child.is_some() {
        RecordKind::Child
    } else if kind_field == RECORD_KIND_SHARED_PREFIX {
        RecordKind::Prefix
    } else if kind_field == RECORD_KIND_EPISODE_SUFFIX {
        RecordKind::Suffix
    } else {
        RecordKind::Standalone
    };
    let replay_error = replay.get("error").and_then(Value::as_object);
    let quarantine_reason = replay_error
        .filter(|block| truthy(block.get("quarantined")))
        .map(|block| text(block, "message").unwrap_or_default());
    let is_variant = truthy(record.get("is_variant"));
    Ok(RecordFacts {
        epoch,
        item_id: record
            .get("item_id")
            .map(py_str)
            .unwrap_or_default()
            .into_owned(),
        family: str_or_empty(record.get("family")).into_owned(),
        is_variant,
        variant_spec_id: is_variant
            .then(|| str_or_empty(record.get("variant_spec_id")).into_owned())
            .filter(|id| !id.is_empty()),
        raw_value: number(record, "raw_value")?,
        novel_value: number(record, "novel_value")?,
        duration_minutes: number(record, "duration_minutes")?.max(0.0),
        kind,
        error,
        child,
        replay_point_id: text(replay, "replay_point_id"),
        quarantine_reason,
    })
}

/// How a child ended, from its record's `replay` block: denied when the
/// failure is `replay_risk_denied` (stage `intent` or `outcome`, the
/// `risk_assessment`'s policy), failed at `stage` (or `error.stage`)
/// otherwise, succeeded without an error.
fn child_end(replay: &Map<String, Value>, failed: bool) -> ChildEnd {
    if !failed {
        return ChildEnd::Succeeded;
    }
    let error = replay.get("error").and_then(Value::as_object);
    let stage = text(replay, "stage")
        .or_else(|| error.and_then(|e| text(e, "stage")))
        .unwrap_or_else(|| "unknown".to_owned());
    let error_type = text(replay, "error_type").or_else(|| error.and_then(|e| text(e, "type")));
    if error_type.as_deref() == Some("replay_risk_denied") {
        let policy = replay
            .get("risk_assessment")
            .and_then(Value::as_object)
            .and_then(|a| text(a, "policy_id"))
            .unwrap_or_default();
        ChildEnd::Denied { stage, policy }
    } else {
        ChildEnd::Failed { stage }
    }
}

/// Every line of `replays.jsonl`.
fn read_replays(path: &Path) -> Result<Vec<ReplayLine>, ReportError> {
    let mut lines = Vec::new();
    read_jsonl(path, |line| {
        let empty = Map::new();
        let object = |key: &str| line.get(key).and_then(Value::as_object).unwrap_or(&empty);
        let point = object("replay_point");
        let outcome_error = object("outcome").get("error").and_then(Value::as_object);
        let release_error = line.get("release_error").and_then(Value::as_object);
        let message = outcome_error
            .or(release_error)
            .and_then(|error| text(error, "message"));
        lines.push(ReplayLine {
            item_id: line
                .get("item_id")
                .map(py_str)
                .unwrap_or_default()
                .into_owned(),
            succeeded: truthy(line.get("succeeded")),
            replay_point_id: text(point, "replay_point_id").unwrap_or_default(),
            fidelity: text(point, "fidelity").unwrap_or_default(),
            restored_from: text(&line, "restored_from").unwrap_or_default(),
            message,
            wall_minutes: number(&line, "replay_wall_minutes")?,
        });
        Ok(())
    })
    .map_err(|error| ReportError::jsonl(path, error))?;
    Ok(lines)
}

#[cfg(test)]
mod complete_length_tests {
    use super::*;

    #[test]
    fn a_torn_last_line_of_any_length_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines.jsonl");
        let torn = format!("{{\"x\": \"{}", "y".repeat(200_000));
        for (text, expected) in [
            (String::new(), 0),
            ("{}\n".to_string(), 3),
            (format!("{{}}\n{{}}\n{torn}"), 6),
            (torn.clone(), 0),
        ] {
            std::fs::write(&path, &text).unwrap();
            let mut file = std::fs::File::open(&path).unwrap();
            assert_eq!(complete_length(&mut file).unwrap(), expected);
            let mut count = 0;
            read_lines(&path, Lines::Complete, |_| {
                count += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(count as u64, expected / 3);
        }
    }
}
