//! Durable replay points in a run directory: `replay-points.jsonl` (one
//! public record per point, written when its group finished) and, per
//! point, either `replay-points/<id>.bin` (the adapter's exported state) or
//! `replay-points/<id>.wasm` (a snapshot component of the live instance,
//! when the run forked its children by snapshot), with `<id>.items.json`
//! (the group's items, so a suffix can run again in another process).
//!
//! Point ids are deterministic per arm, epoch and group, so a resumed run
//! that runs a group again writes the same files; readers keep the last
//! line of each id.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::point::ReplayPoint;
use crate::episode::adapter::Item;

/// `replay-points.jsonl`.
pub const POINTS_FILE: &str = "replay-points.jsonl";
/// `replay-points/`, the folder of durable states.
pub const STATES_DIR: &str = "replay-points";

/// What a durable point's file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurableKind {
    /// The bytes `export-replay-state` gave; a later process rebuilds the
    /// binding with `import-replay-state` in a fresh instance.
    #[default]
    State,
    /// A snapshot component of the instance that captured the point (its
    /// linear memories and globals baked in as data); a later process
    /// instantiates it and asks `resume-binding` for the binding named by
    /// [`DurableState::binding_token`].
    Snapshot,
}

/// Where a point's durable form is, and how to check it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableState {
    /// What the file holds; `state` when absent (lines written before
    /// snapshot points existed).
    #[serde(default)]
    pub kind: DurableKind,
    /// Path relative to the run directory: `replay-points/<id>.bin` for a
    /// state, `replay-points/<id>.wasm` for a snapshot.
    pub file: String,
    /// sha256 of the file, lowercase hex.
    pub sha256: String,
    /// Size of the file, bytes.
    pub size_bytes: u64,
    /// The group's items, relative path `replay-points/<id>.items.json`.
    pub items_file: String,
    /// sha256 of the items file, lowercase hex.
    pub items_sha256: String,
    /// For a snapshot: the token `binding-token` gave for the point's
    /// binding, which `resume-binding` takes in the snapshot's instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_token: Option<u64>,
}

/// One line of `replay-points.jsonl`: the point's public record
/// ([`ReplayPoint::to_record`]) plus where and when it was captured. Never
/// holds a binding or a state key.
#[derive(Clone, Debug, PartialEq)]
pub struct PointLine {
    /// The point (its final lifecycle when written).
    pub point: ReplayPoint,
    /// The run's arm.
    pub arm: String,
    /// The epoch its group ran in.
    pub epoch: u32,
    /// The episode group whose prefix it captured.
    pub execution_group_id: String,
    /// The group's seed item.
    pub seed_item_id: String,
    /// Wall-clock minutes the capture took (host-measured).
    pub capture_minutes: f64,
    /// The exported state, when the adapter exported one.
    pub durable_state: Option<DurableState>,
    /// Why the state could not be exported or written, if it could not.
    pub durable_error: Option<String>,
    /// Whether the point was quarantined during the run (a failed
    /// finalisation or release): its state is not trusted for replay even
    /// if it was released afterwards.
    pub quarantined: bool,
    /// The point's snapshot, when children were forked from a snapshot of
    /// the live instance: `sha256`, `bytes`, `snapshot_ms`, `compile_ms`.
    pub snapshot: Option<Value>,
    /// Why the point could not be snapshotted, if that was asked and failed.
    pub snapshot_error: Option<String>,
    /// Why the point's release failed (`{stage, type, message, ...}`, as a
    /// record's `replay.error`), when it did: the release itself, or the
    /// binding's destructor after it. Written only when present.
    pub release_error: Option<Value>,
}

impl PointLine {
    /// The JSON object written to `replay-points.jsonl`.
    pub fn to_record(&self) -> Map<String, Value> {
        let mut record = self.point.to_record();
        record.insert("arm".into(), Value::from(self.arm.clone()));
        record.insert("epoch".into(), Value::from(self.epoch));
        record.insert(
            "execution_group_id".into(),
            Value::from(self.execution_group_id.clone()),
        );
        record.insert(
            "seed_item_id".into(),
            Value::from(self.seed_item_id.clone()),
        );
        record.insert("capture_minutes".into(), Value::from(self.capture_minutes));
        record.insert(
            "durable_state".into(),
            serde_json::to_value(&self.durable_state).unwrap_or(Value::Null),
        );
        record.insert(
            "durable_error".into(),
            self.durable_error.clone().map_or(Value::Null, Value::from),
        );
        record.insert("quarantined".into(), Value::from(self.quarantined));
        if let Some(snapshot) = &self.snapshot {
            record.insert("snapshot".into(), snapshot.clone());
        }
        if let Some(error) = &self.snapshot_error {
            record.insert("snapshot_error".into(), Value::from(error.clone()));
        }
        if let Some(error) = &self.release_error {
            record.insert("release_error".into(), error.clone());
        }
        record
    }

    /// Parse a line written by [`PointLine::to_record`]. Errors name the
    /// field.
    pub fn from_record(record: &Map<String, Value>) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Extra {
            arm: String,
            epoch: u32,
            execution_group_id: String,
            seed_item_id: String,
            capture_minutes: f64,
            durable_state: Option<DurableState>,
            durable_error: Option<String>,
            #[serde(default)]
            quarantined: bool,
            #[serde(default)]
            snapshot: Option<Value>,
            #[serde(default)]
            snapshot_error: Option<String>,
            #[serde(default)]
            release_error: Option<Value>,
        }
        let point = ReplayPoint::from_record(record)?;
        // Errors name the field's path, e.g. `durable_state.binding_token`.
        let extra: Extra = serde_path_to_error::deserialize(Value::Object(record.clone()))
            .map_err(super::point::field_error)?;
        Ok(Self {
            point,
            arm: extra.arm,
            epoch: extra.epoch,
            execution_group_id: extra.execution_group_id,
            seed_item_id: extra.seed_item_id,
            capture_minutes: extra.capture_minutes,
            durable_state: extra.durable_state,
            durable_error: extra.durable_error,
            quarantined: extra.quarantined,
            snapshot: extra.snapshot,
            snapshot_error: extra.snapshot_error,
            release_error: extra.release_error,
        })
    }
}

/// Writes a run's replay points; shared by every lane (thread-safe).
pub struct ReplayStore {
    root: PathBuf,
    points: Mutex<Option<File>>,
    errors: Mutex<Vec<String>>,
    /// Most bytes of snapshot components the run keeps durable.
    snapshot_budget: u64,
    /// Bytes of snapshot components written so far (those of a resumed
    /// run's kept epochs included).
    snapshot_bytes: AtomicU64,
    /// `Some` for a store that keeps its point lines for
    /// [`ReplayStore::take_captured`] instead of appending them to
    /// `replay-points.jsonl` (a distributed run's worker).
    captured: Option<Mutex<Vec<PointLine>>>,
}

use crate::atomic::{replace_file, write_new_file};
use crate::digest::sha256_hex;

impl ReplayStore {
    /// A store writing under the run directory `root` (files are created on
    /// first use).
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            points: Mutex::new(None),
            errors: Mutex::new(Vec::new()),
            snapshot_budget: u64::MAX,
            snapshot_bytes: AtomicU64::new(0),
            captured: None,
        }
    }

    /// A store writing durable states under `root` but keeping its point
    /// lines in memory, for [`ReplayStore::take_captured`]: a distributed
    /// run's worker sends them, and the states, to the coordinator, whose
    /// store writes them with [`ReplayStore::receive_point`].
    pub fn capturing(root: &Path) -> Self {
        Self {
            captured: Some(Mutex::new(Vec::new())),
            ..Self::new(root)
        }
    }

    /// The point lines a [`ReplayStore::capturing`] store kept since the
    /// last call (none for a store writing its file).
    pub fn take_captured(&self) -> Vec<PointLine> {
        self.captured.as_ref().map_or_else(Vec::new, |captured| {
            std::mem::take(&mut *captured.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// Takes the write errors so far (a worker sends them with the unit
    /// that had them).
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Keeps `error` for [`ReplayStore::errors`]: a point the run could not
    /// make durable (another process's write error, one it received).
    pub fn note_error(&self, error: String) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(error);
    }

    /// Writes a point another process captured: its state and items files
    /// (`files`, when the line names a durable state), then its line.
    ///
    /// # Errors
    /// Nothing is written when the line's durable state is not a state
    /// (snapshots do not travel), names other files than
    /// `replay-points/<id>.bin` and `replay-points/<id>.items.json`, or does
    /// not match `files` (sha256, size); or when `files` are given without a
    /// durable state, or missing for one. A write error is an error too.
    pub fn receive_point(
        &self,
        line: &PointLine,
        files: Option<(&[u8], &[u8])>,
    ) -> Result<(), String> {
        let id = &line.point.replay_point_id;
        match (&line.durable_state, files) {
            (None, None) => {}
            (Some(durable), Some((state, items))) => {
                let expected = format!("{STATES_DIR}/{id}.bin");
                let items_expected = format!("{STATES_DIR}/{id}.items.json");
                if durable.kind != DurableKind::State {
                    return Err(format!(
                        "point {id}: only exported states travel between processes, not {:?}",
                        durable.kind
                    ));
                }
                if !is_state_file_name(&expected) {
                    return Err(format!(
                        "point id {id:?} cannot name a file under {STATES_DIR}/ (it holds a path \
                         separator or is `.` or `..`)"
                    ));
                }
                if durable.file != expected || durable.items_file != items_expected {
                    return Err(format!(
                        "point {id}: durable_state names {:?} and {:?}, not {expected:?} and {items_expected:?}",
                        durable.file, durable.items_file
                    ));
                }
                if sha256_hex(state) != durable.sha256 || state.len() as u64 != durable.size_bytes {
                    return Err(format!(
                        "point {id}: its state does not match durable_state.sha256 and size_bytes"
                    ));
                }
                if sha256_hex(items) != durable.items_sha256 {
                    return Err(format!(
                        "point {id}: its items do not match durable_state.items_sha256"
                    ));
                }
                write_new_file(&self.root.join(&durable.file), state)
                    .and_then(|()| write_new_file(&self.root.join(&durable.items_file), items))
                    .map_err(|error| format!("point {id}: writing {}: {error}", durable.file))?;
            }
            (None, Some(_)) => {
                return Err(format!("point {id}: files sent without a durable_state"));
            }
            (Some(durable), None) => {
                return Err(format!("point {id}: {} was not sent", durable.file));
            }
        }
        self.append_point(line);
        Ok(())
    }

    /// Keep at most `bytes` of snapshot components durable in this run
    /// (`--max-durable-snapshots`), counting those already under
    /// `replay-points/` (a resumed run's). A snapshot of an interpreter is
    /// its whole heap — 12 to 18 MB for the Python and JavaScript examples —
    /// so a long run needs a bound; points past it are not durable, and
    /// their `durable_error` says so.
    pub fn with_snapshot_budget(mut self, bytes: u64) -> Self {
        let existing = std::fs::read_dir(self.root.join(STATES_DIR))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.path().extension().is_some_and(|e| e == "wasm"))
            .filter_map(|entry| entry.metadata().ok())
            .map(|metadata| metadata.len())
            .sum();
        self.snapshot_budget = bytes;
        self.snapshot_bytes = AtomicU64::new(existing);
        self
    }

    /// Write `state` and the group's `items` for point `id`. Each file is
    /// created in place ([`write_new_file`]: exclusively, never through a
    /// link; replaced when it exists): half a file after a crash is caught
    /// by the sha256 the point's line records, and that line is written
    /// only after both files.
    pub fn write_state(&self, id: &str, state: &[u8], items: &[Item]) -> io::Result<DurableState> {
        self.write_durable(id, DurableKind::State, state, items, None)
    }

    /// Write the snapshot component `component` of point `id`, whose
    /// binding answers to `binding_token`, and the group's `items`, as
    /// [`ReplayStore::write_state`] writes a state.
    pub fn write_snapshot(
        &self,
        id: &str,
        component: &[u8],
        binding_token: u64,
        items: &[Item],
    ) -> io::Result<DurableState> {
        let size = component.len() as u64;
        let before = self.snapshot_bytes.fetch_add(size, Ordering::Relaxed);
        if before.saturating_add(size) > self.snapshot_budget {
            self.snapshot_bytes.fetch_sub(size, Ordering::Relaxed);
            return Err(io::Error::other(format!(
                "not kept: this {} MiB snapshot would take the run's durable snapshots past \
                 --max-durable-snapshots {} MiB ({} MiB kept)",
                size.div_ceil(1 << 20),
                self.snapshot_budget >> 20,
                before >> 20
            )));
        }
        let written = self.write_durable(
            id,
            DurableKind::Snapshot,
            component,
            items,
            Some(binding_token),
        );
        if written.is_err() {
            self.snapshot_bytes.fetch_sub(size, Ordering::Relaxed);
        }
        written
    }

    fn write_durable(
        &self,
        id: &str,
        kind: DurableKind,
        bytes: &[u8],
        items: &[Item],
        binding_token: Option<u64>,
    ) -> io::Result<DurableState> {
        let extension = match kind {
            DurableKind::State => "bin",
            DurableKind::Snapshot => "wasm",
        };
        let file = format!("{STATES_DIR}/{id}.{extension}");
        let items_file = format!("{STATES_DIR}/{id}.items.json");
        write_new_file(&self.root.join(&file), bytes)?;
        let items_json = serde_json::to_vec(items).map_err(io::Error::other)?;
        write_new_file(&self.root.join(&items_file), &items_json)?;
        Ok(DurableState {
            kind,
            file,
            sha256: sha256_hex(bytes),
            size_bytes: bytes.len() as u64,
            items_file,
            items_sha256: sha256_hex(&items_json),
            binding_token,
        })
    }

    /// Append `line` to `replay-points.jsonl`. A write error is kept for
    /// [`ReplayStore::errors`] (the run goes on; the point is just not
    /// durable).
    pub fn append_point(&self, line: &PointLine) {
        if let Some(captured) = &self.captured {
            captured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line.clone());
            return;
        }
        let mut text = serde_json::to_vec(&line.to_record()).unwrap_or_default();
        text.push(b'\n');
        let mut file = self.points.lock().unwrap_or_else(|p| p.into_inner());
        let result = (|| {
            if file.is_none() {
                *file = Some(
                    OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(self.root.join(POINTS_FILE))?,
                );
            }
            file.as_mut().expect("opened above").write_all(&text)
        })();
        if let Err(error) = result {
            self.errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{POINTS_FILE}: {error}"));
        }
    }

    /// Write errors so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// Why a run directory's replay points cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// The run has no `replay-points.jsonl`.
    #[error(
        "{0} has no {POINTS_FILE}: the run captured no replay points (does the adapter export `replay`?)"
    )]
    NoPoints(String),
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A line is not a point record.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A state file does not match its record.
    #[error("{path} was changed after the run wrote it ({what}); refusing to restore from it")]
    Tampered {
        /// The state file.
        path: String,
        /// What differs.
        what: String,
    },
}

/// Whether `name` is `replay-points/FILE` with a plain file name (no other
/// directory, no `..`, not absolute): the only files a point may name.
fn is_state_file_name(name: &str) -> bool {
    match name
        .strip_prefix(STATES_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        Some(file) => {
            !file.is_empty() && !file.contains(['/', '\\']) && file != "." && file != ".."
        }
        None => false,
    }
}

/// On resume: drop the points of epochs at or after `next_epoch` (the
/// epochs the checkpoint does not cover, which run again) and their state
/// files, so every point appears once. Returns how many were dropped.
///
/// Only lines of those epochs are dropped. A damaged line (not a JSON
/// object with an `epoch`) is dropped only as the file's last line — the
/// tail a killed run tore while writing — and only when what is left of
/// it does not show an epoch the checkpoint covers; anywhere else it may
/// be a checkpointed point, so the resume is refused and nothing changes.
///
/// # Errors
/// [`DurableError::Malformed`] naming the file and line of such a damaged
/// line; [`DurableError::Read`] when the file cannot be read or rewritten.
pub fn cut_back_points(root: &Path, next_epoch: u32) -> Result<usize, DurableError> {
    let path = root.join(POINTS_FILE);
    let io_error = |source| DurableError::Read {
        path: path.display().to_string(),
        source,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(io_error(error)),
    };
    let next = u64::from(next_epoch);
    // (1-based number, text, the record or why it is damaged)
    type Line<'a> = (usize, &'a str, Result<Map<String, Value>, String>);
    let lines: Vec<Line<'_>> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let record = serde_json::from_str::<Map<String, Value>>(line)
                .map_err(|error| error.to_string())
                .and_then(|record| match record.get("epoch").and_then(Value::as_u64) {
                    Some(_) => Ok(record),
                    None => Err("no `epoch`".to_string()),
                });
            (index + 1, line, record)
        })
        .collect();
    let epoch_of = |record: &Map<String, Value>| record.get("epoch").and_then(Value::as_u64);
    let last_covered = lines.iter().rposition(|(_, _, record)| {
        record
            .as_ref()
            .ok()
            .and_then(epoch_of)
            .is_some_and(|e| e < next)
    });
    let mut kept = String::with_capacity(text.len());
    let mut dropped = 0;
    for (position, (number, line, record)) in lines.iter().enumerate() {
        let record = match record {
            Ok(record) if epoch_of(record).is_some_and(|epoch| epoch < next) => {
                kept.push_str(line);
                kept.push('\n');
                continue;
            }
            Ok(record) => Some(record),
            Err(problem) => {
                let torn_tail = position + 1 == lines.len()
                    && last_covered.is_none_or(|covered| covered < position)
                    && epoch_in_text(line).is_none_or(|epoch| epoch >= next);
                if !torn_tail {
                    return Err(DurableError::Malformed {
                        path: path.display().to_string(),
                        line: *number,
                        message: format!(
                            "this line is damaged ({problem}) and may be a point of an epoch \
                             the checkpoint covers (epochs before {next_epoch}); --resume \
                             keeps those, so it stops here and changes nothing: restore the \
                             line, or start the run again in a new directory"
                        ),
                    });
                }
                None
            }
        };
        dropped += 1;
        if let Some(id) = record
            .and_then(|r| r.get("replay_point_id"))
            .and_then(Value::as_str)
            .filter(|id| !id.contains(['/', '\\']) && !id.starts_with('.'))
        {
            let dir = root.join(STATES_DIR);
            let _ = std::fs::remove_file(dir.join(format!("{id}.bin")));
            let _ = std::fs::remove_file(dir.join(format!("{id}.wasm")));
            let _ = std::fs::remove_file(dir.join(format!("{id}.items.json")));
        }
    }
    if dropped > 0 {
        replace_file(&path, kept.as_bytes()).map_err(io_error)?;
    }
    Ok(dropped)
}

/// The number after the first `"epoch":` in `text` (what is left of a
/// damaged line may still show it).
fn epoch_in_text(text: &str) -> Option<u64> {
    let (_, rest) = text.split_once("\"epoch\":")?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Every point of the run at `root`, the last line of each id winning, in
/// first-seen order.
pub fn load_points(root: &Path) -> Result<Vec<PointLine>, DurableError> {
    let path = root.join(POINTS_FILE);
    if !path.exists() {
        return Err(DurableError::NoPoints(root.display().to_string()));
    }
    let mut order: Vec<String> = Vec::new();
    let mut latest: BTreeMap<String, PointLine> = BTreeMap::new();
    read_jsonl(&path, |record| {
        let point = PointLine::from_record(&record)?;
        let id = point.point.replay_point_id.clone();
        if !latest.contains_key(&id) {
            order.push(id.clone());
        }
        latest.insert(id, point);
        Ok(())
    })?;
    Ok(order
        .into_iter()
        .filter_map(|id| latest.remove(&id))
        .collect())
}

/// Call `each` with every non-blank line of the JSONL file at `path`,
/// parsed as a JSON object. A line that is not one, or that `each` refuses
/// (with a message naming the field), is an error naming the file and line.
pub fn read_jsonl(
    path: &Path,
    each: impl FnMut(Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|source| DurableError::Read {
        path: shown.clone(),
        source,
    })?;
    read_jsonl_from(BufReader::new(file), shown, each)
}

/// [`read_jsonl`] of the lines `reader` gives, errors naming the file
/// `shown`.
pub fn read_jsonl_from(
    reader: impl BufRead,
    shown: String,
    mut each: impl FnMut(Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    for (index, line) in reader.lines().enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                return Err(DurableError::Malformed {
                    path: shown,
                    line: index + 1,
                    message: "not valid UTF-8".into(),
                });
            }
            Err(source) => {
                return Err(DurableError::Read {
                    path: shown,
                    source,
                });
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |message: String| DurableError::Malformed {
            path: shown.clone(),
            line: index + 1,
            message,
        };
        let record: Map<String, Value> =
            serde_json::from_str(&line).map_err(|error| malformed(error.to_string()))?;
        each(record).map_err(malformed)?;
    }
    Ok(())
}

/// Read a durable state (or snapshot component) and the group's items,
/// checking the file's size and sha256 against the record, and that a
/// snapshot names its binding token.
pub fn read_durable_state(
    root: &Path,
    durable: &DurableState,
) -> Result<(Vec<u8>, Vec<Item>), DurableError> {
    if durable.kind == DurableKind::Snapshot && durable.binding_token.is_none() {
        return Err(DurableError::Tampered {
            path: root.join(POINTS_FILE).display().to_string(),
            what: format!(
                "the snapshot point {} has no durable_state.binding_token",
                durable.file
            ),
        });
    }
    for name in [&durable.file, &durable.items_file] {
        if !is_state_file_name(name) {
            return Err(DurableError::Tampered {
                path: root.join(POINTS_FILE).display().to_string(),
                what: format!("it names {name:?}, which is not a file under {STATES_DIR}/"),
            });
        }
    }
    let path = root.join(&durable.file);
    let shown = path.display().to_string();
    let bytes = std::fs::read(&path).map_err(|source| DurableError::Read {
        path: shown.clone(),
        source,
    })?;
    if bytes.len() as u64 != durable.size_bytes {
        return Err(DurableError::Tampered {
            path: shown,
            what: format!("{} bytes, recorded {}", bytes.len(), durable.size_bytes),
        });
    }
    let digest = sha256_hex(&bytes);
    if digest != durable.sha256 {
        return Err(DurableError::Tampered {
            path: shown,
            what: format!("sha256 {digest}, recorded {}", durable.sha256),
        });
    }
    let items_path = root.join(&durable.items_file);
    let items_shown = items_path.display().to_string();
    let text = std::fs::read_to_string(&items_path).map_err(|source| DurableError::Read {
        path: items_shown.clone(),
        source,
    })?;
    let digest = sha256_hex(text.as_bytes());
    if digest != durable.items_sha256 {
        return Err(DurableError::Tampered {
            path: items_shown,
            what: format!("sha256 {digest}, recorded {}", durable.items_sha256),
        });
    }
    let items: Vec<Item> =
        serde_json::from_str(&text).map_err(|error| DurableError::Malformed {
            path: items_shown,
            line: error.line(),
            message: error.to_string(),
        })?;
    Ok((bytes, items))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::replay::Fidelity;
    use crate::replay::point::{AgentCursor, Lifecycle, TraceCursor};

    pub(crate) fn line(id: &str, lifecycle: Lifecycle) -> PointLine {
        PointLine {
            point: ReplayPoint {
                replay_point_id: id.into(),
                cursor: TraceCursor {
                    trace_id: "g".into(),
                    branch_id: "main".into(),
                    after_event_id: None,
                    next_sequence: 0,
                    agent_cursor: AgentCursor {
                        history_index: 0,
                        history_digest: "h".into(),
                        context_digest: "c".into(),
                    },
                },
                fidelity: Fidelity::Exact,
                captured_projection_digest: Some("d".into()),
                lifecycle,
                created_event_id: "g/main/0".into(),
                replaces_replay_point_id: None,
            },
            arm: "main".into(),
            epoch: 1,
            execution_group_id: "g".into(),
            seed_item_id: "s".into(),
            capture_minutes: 0.001,
            durable_state: None,
            durable_error: None,
            snapshot: None,
            snapshot_error: None,
            release_error: None,
            quarantined: false,
        }
    }

    #[test]
    fn a_point_captured_elsewhere_is_written_as_the_capturing_store_would() {
        let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
        // The worker's store keeps its lines in memory.
        let worker = tempfile::tempdir().unwrap();
        let capturing = ReplayStore::capturing(worker.path());
        let durable = capturing
            .write_state("rp-1", b"state", std::slice::from_ref(&item))
            .unwrap();
        let mut sent = line("rp-1", Lifecycle::Released);
        sent.durable_state = Some(durable.clone());
        capturing.append_point(&sent);
        capturing.append_point(&line("rp-2", Lifecycle::Released));
        assert!(
            !worker.path().join(POINTS_FILE).exists(),
            "lines stay in memory"
        );
        let lines = capturing.take_captured();
        assert_eq!(lines.len(), 2);
        assert!(capturing.take_captured().is_empty(), "taken once");
        let state = std::fs::read(worker.path().join(&durable.file)).unwrap();
        let items = std::fs::read(worker.path().join(&durable.items_file)).unwrap();

        // The coordinator's store writes them, checked.
        let run = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(run.path());
        store
            .receive_point(&lines[0], Some((&state, &items)))
            .unwrap();
        store.receive_point(&lines[1], None).unwrap();
        let points = load_points(run.path()).unwrap();
        assert_eq!(points, lines);
        let (bytes, read_items) = read_durable_state(run.path(), &durable).unwrap();
        assert_eq!(bytes, b"state");
        assert_eq!(read_items, vec![item]);

        // What does not match its line is refused, and nothing is written.
        let other = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(other.path());
        let refused = |line: &PointLine, files: Option<(&[u8], &[u8])>| {
            store.receive_point(line, files).unwrap_err()
        };
        assert!(refused(&lines[0], Some((b"forged", &items))).contains("sha256"));
        assert!(refused(&lines[0], Some((&state, b"[]"))).contains("items_sha256"));
        assert!(refused(&lines[0], None).contains("was not sent"));
        assert!(refused(&lines[1], Some((&state, &items))).contains("without a durable_state"));
        let mut escaping = lines[0].clone();
        escaping.durable_state.as_mut().unwrap().file = "../outside.bin".into();
        assert!(refused(&escaping, Some((&state, &items))).contains("../outside.bin"));
        let mut climbing = lines[0].clone();
        climbing.point.replay_point_id = "../rp-1".into();
        assert!(refused(&climbing, Some((&state, &items))).contains("cannot name a file"));
        let mut snapshot = lines[0].clone();
        snapshot.durable_state.as_mut().unwrap().kind = DurableKind::Snapshot;
        assert!(refused(&snapshot, Some((&state, &items))).contains("Snapshot"));
        assert!(!other.path().join(POINTS_FILE).exists());
        assert!(!other.path().join(STATES_DIR).exists());
    }

    #[test]
    fn the_last_line_of_each_point_wins_and_states_are_verified() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
        let durable = store.write_state("rp-1", b"state", &[item]).unwrap();
        assert_eq!(durable.size_bytes, 5);
        let mut first = line("rp-1", Lifecycle::Ready);
        first.durable_state = Some(durable.clone());
        store.append_point(&first);
        store.append_point(&line("rp-2", Lifecycle::Released));
        let mut again = first.clone();
        again.point.lifecycle = Lifecycle::Released;
        store.append_point(&again);
        let points = load_points(dir.path()).unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[0], again);
        assert_eq!(points[1].point.replay_point_id, "rp-2");

        let (bytes, items) = read_durable_state(dir.path(), &durable).unwrap();
        assert_eq!(bytes, b"state");
        assert_eq!(items[0]["item_id"], "s");
        let items_path = dir.path().join(&durable.items_file);
        let items_text = std::fs::read_to_string(&items_path).unwrap();
        std::fs::write(&items_path, items_text.replace("\"s\"", "\"t\"")).unwrap();
        let error = read_durable_state(dir.path(), &durable)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("items.json was changed after the run wrote it"),
            "{error}"
        );
        std::fs::write(&items_path, items_text).unwrap();
        std::fs::write(dir.path().join(&durable.file), b"stale").unwrap();
        let error = read_durable_state(dir.path(), &durable)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("was changed after the run wrote it (sha256"),
            "{error}"
        );
        for outside in [
            "/etc/hostname",
            "replay-points/../../x.bin",
            "records.jsonl",
            "replay-points/",
        ] {
            let mut escaped = durable.clone();
            escaped.file = outside.into();
            let error = read_durable_state(dir.path(), &escaped)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("which is not a file under replay-points/"),
                "{outside}: {error}"
            );
        }
    }

    #[test]
    fn snapshot_points_keep_their_kind_and_binding_token() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
        let durable = store
            .write_snapshot("rp-1", b"\0asm\x0d\0\x01\0", 42, &[item])
            .unwrap();
        assert_eq!(durable.kind, DurableKind::Snapshot);
        assert_eq!(durable.file, "replay-points/rp-1.wasm");
        assert_eq!(durable.binding_token, Some(42));
        let mut point = line("rp-1", Lifecycle::Released);
        point.durable_state = Some(durable.clone());
        store.append_point(&point);
        let text = std::fs::read_to_string(dir.path().join(POINTS_FILE)).unwrap();
        assert!(text.contains(r#""kind":"snapshot""#), "{text}");
        assert!(text.contains(r#""binding_token":42"#), "{text}");
        assert_eq!(load_points(dir.path()).unwrap()[0], point);
        let (bytes, items) = read_durable_state(dir.path(), &durable).unwrap();
        assert_eq!(bytes.len(), 8);
        assert_eq!(items[0]["item_id"], "s");

        // A line without `kind` (written before snapshots) is a state, and a
        // snapshot that lost its token is refused by name.
        let legacy: DurableState = serde_json::from_value(serde_json::json!({
            "file": "replay-points/rp-0.bin", "sha256": "00", "size_bytes": 1,
            "items_file": "replay-points/rp-0.items.json", "items_sha256": "00",
        }))
        .unwrap();
        assert_eq!(legacy.kind, DurableKind::State);
        assert_eq!(legacy.binding_token, None);
        let mut tokenless = durable;
        tokenless.binding_token = None;
        let error = read_durable_state(dir.path(), &tokenless)
            .unwrap_err()
            .to_string();
        assert!(error.contains("binding_token"), "{error}");

        // A malformed field of a line is named by its path.
        let mut record = point.to_record();
        record["durable_state"]["binding_token"] = serde_json::json!(-1);
        let error = PointLine::from_record(&record).unwrap_err();
        assert!(
            error.starts_with("durable_state.binding_token: "),
            "{error}"
        );
    }

    #[test]
    fn durable_snapshots_stop_at_the_budget_counting_a_resumed_runs_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path()).with_snapshot_budget(10);
        store.write_snapshot("rp-a", &[1; 6], 1, &[]).unwrap();
        let error = store
            .write_snapshot("rp-b", &[2; 6], 2, &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--max-durable-snapshots"), "{error}");
        assert!(!dir.path().join("replay-points/rp-b.wasm").exists());
        store.write_snapshot("rp-c", &[3; 4], 3, &[]).unwrap();
        // Exported states do not count.
        store.write_state("rp-d", &[4; 64], &[]).unwrap();

        // A resumed run starts from what is already there.
        let again = ReplayStore::new(dir.path()).with_snapshot_budget(12);
        assert!(again.write_snapshot("rp-e", &[5; 3], 5, &[]).is_err());
        again.write_snapshot("rp-e", &[5; 2], 5, &[]).unwrap();
    }

    #[test]
    fn resume_drops_the_points_of_epochs_that_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        for (id, epoch) in [("rp-a", 1), ("rp-b", 2), ("rp-c", 3)] {
            let mut point = line(id, Lifecycle::Released);
            point.epoch = epoch;
            point.durable_state = Some(if epoch == 3 {
                store.write_snapshot(id, b"\0asm", 7, &[]).unwrap()
            } else {
                store.write_state(id, b"x", &[]).unwrap()
            });
            store.append_point(&point);
        }
        assert!(dir.path().join("replay-points/rp-c.wasm").exists());
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 2);
        let points = load_points(dir.path()).unwrap();
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].point.replay_point_id, "rp-a");
        assert!(dir.path().join("replay-points/rp-a.bin").exists());
        assert!(!dir.path().join("replay-points/rp-b.bin").exists());
        assert!(!dir.path().join("replay-points/rp-c.wasm").exists());
        assert!(!dir.path().join("replay-points/rp-c.items.json").exists());
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 0);
    }

    #[test]
    fn resume_refuses_a_damaged_line_that_may_be_a_checkpointed_point() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        for (id, epoch) in [("rp-a", 1), ("rp-b", 1), ("rp-c", 2)] {
            let mut point = line(id, Lifecycle::Released);
            point.epoch = epoch;
            point.durable_state = Some(store.write_state(id, b"x", &[]).unwrap());
            store.append_point(&point);
        }
        let path = dir.path().join(POINTS_FILE);
        let whole = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = whole.lines().collect();
        // The first point of epoch 1, cut in half, before other points.
        let cut = format!(
            "{}\n{}\n{}\n",
            &lines[0][..lines[0].len() / 2],
            lines[1],
            lines[2]
        );
        std::fs::write(&path, &cut).unwrap();
        let error = cut_back_points(dir.path(), 2).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("replay-points.jsonl:1: this line is damaged"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            cut,
            "nothing changed"
        );
        assert!(dir.path().join("replay-points/rp-c.bin").exists());
        // The last point of epoch 1 cut in half at the end, its epoch still
        // legible: refused too.
        let cut = format!("{}\n{}\n", lines[0], &lines[1][..lines[1].len() - 3]);
        std::fs::write(&path, &cut).unwrap();
        assert!(
            cut_back_points(dir.path(), 2)
                .unwrap_err()
                .to_string()
                .contains(":2:")
        );
        // A torn tail of the epoch that runs again is dropped.
        let cut = format!(
            "{}\n{}\n{}",
            lines[0],
            lines[1],
            &lines[2][..lines[2].len() - 3]
        );
        std::fs::write(&path, &cut).unwrap();
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 1);
        assert_eq!(load_points(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn missing_and_malformed_point_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = load_points(dir.path()).unwrap_err().to_string();
        assert!(error.contains("has no replay-points.jsonl"), "{error}");
        std::fs::write(
            dir.path().join(POINTS_FILE),
            "{\"replay_point_id\": \"x\"}\n",
        )
        .unwrap();
        let error = load_points(dir.path()).unwrap_err().to_string();
        assert!(error.contains("replay-points.jsonl:1:"), "{error}");
        assert!(error.contains("trace_id"), "{error}");
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut record = line("rp-1", Lifecycle::Ready).to_record();
        record["trace_id"] = serde_json::json!(5);
        let text = format!(
            "{}\n{}\n",
            serde_json::to_string(&line("rp-0", Lifecycle::Ready).to_record()).unwrap(),
            serde_json::to_string(&record).unwrap()
        );
        std::fs::write(dir.path().join(POINTS_FILE), text).unwrap();
        let error = load_points(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("replay-points.jsonl:2: trace_id: "),
            "{error}"
        );
    }

    #[test]
    fn invalid_utf8_in_a_point_line_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = serde_json::to_vec(&line("rp-0", Lifecycle::Ready).to_record()).unwrap();
        text.extend_from_slice(b"\n{\"replay_point_id\": \"\xff\"}\n");
        std::fs::write(dir.path().join(POINTS_FILE), text).unwrap();
        let error = load_points(dir.path()).unwrap_err().to_string();
        assert!(error.contains("replay-points.jsonl:2: "), "{error}");
    }

    mod props {
        use super::*;
        use crate::hostile_inputs::{
            config, hostile_string, json_value, mutate_bytes, read_temp_file,
            with_a_leaf_of_another_type,
        };
        use proptest::prelude::*;

        fn durable_line(n: usize) -> Map<String, Value> {
            let mut point = line(&format!("rp-{n}"), Lifecycle::Released);
            point.durable_state = Some(DurableState {
                kind: DurableKind::Snapshot,
                file: format!("{STATES_DIR}/rp-{n}.wasm"),
                sha256: "00".into(),
                size_bytes: 4,
                items_file: format!("{STATES_DIR}/rp-{n}.items.json"),
                items_sha256: "00".into(),
                binding_token: Some(7),
            });
            point.snapshot = Some(serde_json::json!({"bytes": 4}));
            point.to_record()
        }

        /// Lines `0..before` valid, then `bad`, then `after` valid lines.
        fn around(before: usize, bad: &[u8], after: usize) -> Vec<u8> {
            let mut text = Vec::new();
            for n in 0..before {
                text.extend(serde_json::to_vec(&durable_line(n)).unwrap());
                text.push(b'\n');
            }
            text.extend_from_slice(bad);
            text.push(b'\n');
            for n in 0..after {
                text.extend(serde_json::to_vec(&durable_line(100 + n)).unwrap());
                text.push(b'\n');
            }
            text
        }

        fn load_bytes(bytes: &[u8]) -> (tempfile::TempDir, Result<Vec<PointLine>, DurableError>) {
            let (dir, _, result) = read_temp_file(POINTS_FILE, bytes, |path| {
                load_points(path.parent().expect("in a directory"))
            });
            (dir, result)
        }

        proptest! {
            #![proptest_config(config(128))]

            #[test]
            fn prop_replay_points_any_bytes_never_panic_and_errors_name_file_and_line(
                bytes in prop::collection::vec(any::<u8>(), 0..512),
                next_epoch in any::<u32>(),
            ) {
                let (dir, result) = load_bytes(&bytes);
                if let Err(error) = result {
                    let shown = dir.path().join(POINTS_FILE).display().to_string();
                    let text = error.to_string();
                    prop_assert!(text.starts_with(&shown), "{}", text);
                    let DurableError::Malformed { line, .. } = error else {
                        return Err(TestCaseError::fail(format!("no line in {text}")));
                    };
                    prop_assert!(line >= 1 && line <= bytes.split(|b| *b == b'\n').count());
                }
                // Resume's cut-back reads the same file leniently.
                let _ = cut_back_points(dir.path(), next_epoch);
            }

            #[test]
            fn prop_replay_points_a_damaged_line_is_named_by_number(
                before in 0usize..3,
                after in 0usize..3,
                bad in (0usize..50).prop_flat_map(|n| {
                    mutate_bytes(serde_json::to_vec(&durable_line(n)).unwrap(), true)
                }),
            ) {
                let (dir, result) = load_bytes(&around(before, &bad, after));
                if let Err(error) = result {
                    let shown = format!("{}:{}: ", dir.path().join(POINTS_FILE).display(), before + 1);
                    let text = error.to_string();
                    prop_assert!(text.starts_with(&shown), "{}", text);
                }
            }

            #[test]
            fn prop_replay_points_a_field_of_another_type_names_line_and_field(
                before in 0usize..3,
                (record, key) in with_a_leaf_of_another_type(
                    Value::Object(durable_line(0)),
                    // `snapshot` holds any JSON.
                    |pointer| !pointer.starts_with("/snapshot"),
                ),
            ) {
                let (dir, result) = load_bytes(&around(before, &serde_json::to_vec(&record).unwrap(), 1));
                let text = result.unwrap_err().to_string();
                let shown = format!("{}:{}: ", dir.path().join(POINTS_FILE).display(), before + 1);
                prop_assert!(text.starts_with(&shown), "{}", text);
                prop_assert!(text[shown.len()..].contains(&key), "{} not named in {}", key, text);
            }

            #[test]
            fn prop_durable_state_files_stay_under_the_points_folder(
                file in prop_oneof![hostile_string(), hostile_string().prop_map(|s| format!("{STATES_DIR}/{s}"))],
                items_file in prop_oneof![hostile_string(), hostile_string().prop_map(|s| format!("{STATES_DIR}/{s}"))],
                size_bytes in any::<u64>(),
                snapshot in any::<bool>(),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let durable = DurableState {
                    kind: if snapshot { DurableKind::Snapshot } else { DurableKind::State },
                    file,
                    sha256: String::new(),
                    size_bytes,
                    items_file,
                    items_sha256: String::new(),
                    binding_token: Some(1),
                };
                match read_durable_state(dir.path(), &durable) {
                    Ok(_) => prop_assert!(false, "nothing was written, nothing can be read"),
                    Err(DurableError::Tampered { .. }) => {}
                    Err(error) => {
                        prop_assert!(is_state_file_name(&durable.file), "{}", error);
                        prop_assert!(is_state_file_name(&durable.items_file), "{}", error);
                        prop_assert!(error.to_string().contains(&dir.path().display().to_string()));
                    }
                }
            }

            #[test]
            fn prop_durable_items_a_damaged_file_is_named_with_its_line(
                items in prop::collection::vec(json_value(), 0..4).prop_flat_map(|items| {
                    mutate_bytes(serde_json::to_vec_pretty(&items).unwrap(), false)
                }),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let store = ReplayStore::new(dir.path());
                let mut durable = store.write_state("rp-1", b"state", &[]).unwrap();
                let items_path = dir.path().join(&durable.items_file);
                std::fs::write(&items_path, &items).unwrap();
                // A tamperer who also rewrites the recorded digest.
                durable.items_sha256 = crate::digest::sha256_hex(&items);
                if let Err(error) = read_durable_state(dir.path(), &durable) {
                    let text = error.to_string();
                    prop_assert!(text.contains(&items_path.display().to_string()), "{}", text);
                    if let DurableError::Malformed { line, .. } = error {
                        prop_assert!(line >= 1 && line <= items.split(|b| *b == b'\n').count());
                    }
                }
            }
        }
    }
}
