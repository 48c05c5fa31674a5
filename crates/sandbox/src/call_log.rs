//! [`CallLog`]: writes what adapter calls printed and traced into the run
//! directory, one JSONL file per epoch under `traces/` and
//! `adapter-output/`. An epoch's files are started afresh the first time
//! the process writes to them, so an epoch re-run after `--resume` leaves no
//! stale lines behind.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;

use super::adapter::{CallObserver, CallReport};
use sandloop_core::harness::run_files::{ADAPTER_OUTPUT_DIR, TRACES_DIR};

/// Files of the open epochs (at most the two latest of each kind stay
/// open, so a run of many epochs does not pile up descriptors), and the
/// files this process has started.
#[derive(Default)]
struct Files {
    traces: HashMap<u32, BufWriter<File>>,
    output: HashMap<u32, BufWriter<File>>,
    started: HashSet<(&'static str, u32)>,
}

/// A [`CallObserver`] writing to `DIR/traces/epoch-NNNN.jsonl` (one trace
/// event per line, the reference's `TraceEvent.to_record` shape) and
/// `DIR/adapter-output/epoch-NNNN.jsonl` (one line per call that printed,
/// logged or had trace events refused).
pub struct CallLog {
    dir: PathBuf,
    files: Mutex<Files>,
    errors: Mutex<Vec<String>>,
}

impl CallLog {
    /// A log writing under the run directory `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            files: Mutex::new(Files::default()),
            errors: Mutex::new(Vec::new()),
        }
    }

    /// I/O errors met while writing (the run goes on without the log line).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn writer<'a>(
        dir: &Path,
        map: &'a mut HashMap<u32, BufWriter<File>>,
        started: &mut HashSet<(&'static str, u32)>,
        name: &'static str,
        epoch: u32,
    ) -> std::io::Result<&'a mut BufWriter<File>> {
        if !map.contains_key(&epoch) {
            // Every line is flushed as written: closing loses nothing.
            map.retain(|open, _| *open + 1 >= epoch);
        }
        match map.entry(epoch) {
            std::collections::hash_map::Entry::Occupied(entry) => Ok(entry.into_mut()),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let folder = dir.join(name);
                std::fs::create_dir_all(&folder)?;
                let path = folder.join(format!("epoch-{epoch:04}.jsonl"));
                let file = if started.insert((name, epoch)) {
                    File::create(path)?
                } else {
                    // Started earlier by this process and closed since.
                    std::fs::OpenOptions::new().append(true).open(path)?
                };
                Ok(entry.insert(BufWriter::new(file)))
            }
        }
    }

    /// Writes `lines` into their epoch's files (what [`CallObserver::on_call`]
    /// does with a report's [`CallLines`]; a distributed run's coordinator
    /// writes the lines its workers sent the same way). Errors are kept
    /// for [`CallLog::errors`], as a report's are.
    pub fn write_lines(&self, lines: &CallLines) {
        if let Err(error) = self.write(lines) {
            self.keep_error(error.to_string());
        }
    }

    /// Keeps the first 16 errors for [`CallLog::errors`].
    fn keep_error(&self, error: String) {
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < 16
        {
            errors.push(error);
        }
    }

    fn write(&self, lines: &CallLines) -> std::io::Result<()> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let Files {
            traces,
            output,
            started,
        } = &mut *files;
        if !lines.traces.is_empty() {
            let writer = Self::writer(&self.dir, traces, started, TRACES_DIR, lines.epoch)?;
            for line in &lines.traces {
                writer.write_all(line.as_bytes())?;
                writer.write_all(b"\n")?;
            }
            writer.flush()?;
        }
        if let Some(line) = &lines.output {
            let writer = Self::writer(&self.dir, output, started, ADAPTER_OUTPUT_DIR, lines.epoch)?;
            writer.write_all(line.as_bytes())?;
            writer.write_all(b"\n")?;
            writer.flush()?;
        }
        Ok(())
    }
}

/// The lines one call adds to its epoch's files: one JSON text per trace
/// event for `traces/epoch-NNNN.jsonl`, and the call's line for
/// `adapter-output/epoch-NNNN.jsonl` when it printed, logged or had trace
/// events refused. Plain data, so the lines of a call made elsewhere
/// (a distributed run's worker) can travel to the run directory's writer.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallLines {
    /// The epoch whose files the lines go to.
    pub epoch: u32,
    /// One JSON text per trace event (the reference's
    /// `TraceEvent.to_record` shape), without newlines.
    pub traces: Vec<String>,
    /// The adapter-output line (`branch_id`, `call`, `item_id`, `entries`,
    /// `dropped_bytes`, `trace_refusals`), when there is one.
    pub output: Option<String>,
}

impl CallLines {
    /// The lines of `report`; `None` when the call left nothing to write.
    ///
    /// # Errors
    /// When a trace event cannot be serialised.
    pub fn of(report: &CallReport<'_>) -> Result<Option<Self>, serde_json::Error> {
        let traces = report
            .trace_events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        let output = (!report.output.is_empty() || report.trace_refusals > 0).then(|| {
            json!({
                "branch_id": report.branch_id,
                "call": report.call,
                "item_id": report.item_id,
                "entries": report.output.entries,
                "dropped_bytes": report.output.dropped_bytes,
                "trace_refusals": report.trace_refusals,
            })
            .to_string()
        });
        if traces.is_empty() && output.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            epoch: report.epoch,
            traces,
            output,
        }))
    }
}

impl CallObserver for CallLog {
    fn on_call(&self, report: &CallReport<'_>) {
        match CallLines::of(report) {
            Ok(Some(lines)) => self.write_lines(&lines),
            Ok(None) => {}
            Err(error) => self.keep_error(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{CallOutput, OutputEntry};

    fn report<'a>(output: &'a CallOutput, refusals: u32) -> CallReport<'a> {
        CallReport {
            branch_id: "queue_worker_01",
            epoch: 3,
            call: "execute",
            item_id: Some("a"),
            output,
            trace_events: &[],
            trace_refusals: refusals,
        }
    }

    #[test]
    fn a_call_that_left_nothing_has_no_lines() {
        let quiet = CallOutput::default();
        assert_eq!(CallLines::of(&report(&quiet, 0)).unwrap(), None);
        let refused = CallLines::of(&report(&quiet, 2)).unwrap().expect("a line");
        assert!(refused.output.unwrap().contains(r#""trace_refusals":2"#));
    }

    #[test]
    fn lines_written_from_elsewhere_land_in_their_epochs_file_as_a_reports_would() {
        let dir = tempfile::tempdir().unwrap();
        let output = CallOutput {
            entries: vec![OutputEntry {
                stream: "log",
                level: Some("info"),
                text: "hello".into(),
            }],
            dropped_bytes: 0,
        };
        let lines = CallLines::of(&report(&output, 0)).unwrap().expect("a line");
        // Through the wire and back, as a worker's lines travel.
        let lines: CallLines =
            serde_json::from_str(&serde_json::to_string(&lines).unwrap()).unwrap();
        let log = CallLog::new(dir.path());
        log.on_call(&report(&output, 0));
        log.write_lines(&lines);
        let written =
            std::fs::read_to_string(dir.path().join("adapter-output/epoch-0003.jsonl")).unwrap();
        let written: Vec<&str> = written.lines().collect();
        assert_eq!(written.len(), 2);
        assert_eq!(written[0], written[1], "the same line either way");
        assert_eq!(
            written[0],
            r#"{"branch_id":"queue_worker_01","call":"execute","dropped_bytes":0,"entries":[{"level":"info","stream":"log","text":"hello"}],"item_id":"a","trace_refusals":0}"#
        );
        assert!(log.errors().is_empty());
    }
}
