//! Durable replay points in a run directory: `replay-points.jsonl` (one
//! public record per point, written when its group finished) and the
//! point's bytes: the adapter's exported state followed by the group's
//! items (so a suffix can run again in another process), appended to the
//! run's one pack file `replay-points/states.pack` at offsets the line
//! records; or, when the run forked its children by snapshot,
//! `replay-points/<id>.wasm` (a snapshot component of the live instance)
//! with `<id>.items.json`. One pack per run instead of two files per point
//! keeps file creation (an inode each, on the lanes' hot path) out of the
//! default path; lines written before packs existed name a
//! `replay-points/<id>.bin` of their own, and still read.
//!
//! Point ids are deterministic per arm, epoch and group, so a resumed run
//! that runs a group again writes the same ids; readers keep the last
//! line of each id.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
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
/// `replay-points/states.pack`, the run's exported states and their
/// groups' items, appended one point after another.
pub const STATES_PACK: &str = "replay-points/states.pack";

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
    /// Path relative to the run directory: [`STATES_PACK`] for a state
    /// (`replay-points/<id>.bin` in lines written before packs),
    /// `replay-points/<id>.wasm` for a snapshot.
    pub file: String,
    /// sha256 of the state's bytes, lowercase hex.
    pub sha256: String,
    /// Size of the state, bytes.
    pub size_bytes: u64,
    /// Where the state starts in `file`, bytes from its start; absent when
    /// the file holds this state alone (snapshots, lines written before
    /// packs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Where the group's items (a JSON array) are: [`STATES_PACK`] for a
    /// state, `replay-points/<id>.items.json` for a snapshot (and in lines
    /// written before packs).
    pub items_file: String,
    /// sha256 of the items' JSON, lowercase hex.
    pub items_sha256: String,
    /// Where the items start in `items_file`, bytes; absent when the file
    /// holds the items alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_offset: Option<u64>,
    /// Size of the items' JSON, bytes; written with `items_offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_size_bytes: Option<u64>,
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
    /// [`STATES_PACK`], opened on first use.
    pack: Mutex<Option<Pack>>,
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

use crate::atomic::{OutputFileError, open_regular, replace_file, write_new_file};
use crate::digest::sha256_hex;
use crate::input_file::{open_regular_input, read_regular, read_regular_to_string};

impl ReplayStore {
    /// A store writing under the run directory `root` (files are created on
    /// first use).
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            points: Mutex::new(None),
            pack: Mutex::new(None),
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

    /// Writes a point another process captured: its state and items
    /// (`files`, when the line names a durable state) appended to this
    /// run's pack, then its line, with `durable_state` naming where this
    /// store put them (the sender's file names and offsets are its own).
    ///
    /// # Errors
    /// Nothing is written when the line's durable state is not a state
    /// (snapshots do not travel) or does not match `files` (sha256, size);
    /// or when `files` are given without a durable state, or missing for
    /// one. A write error is an error too.
    pub fn receive_point(
        &self,
        line: &PointLine,
        files: Option<(&[u8], &[u8])>,
    ) -> Result<(), String> {
        let id = &line.point.replay_point_id;
        let mut line = line.clone();
        match (&line.durable_state, files) {
            (None, None) => {}
            (Some(durable), Some((state, items))) => {
                if durable.kind != DurableKind::State {
                    return Err(format!(
                        "point {id}: only exported states travel between processes, not {:?}",
                        durable.kind
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
                let packed = self
                    .append_to_pack(state, items)
                    .map_err(|error| format!("point {id}: writing {STATES_PACK}: {error}"))?;
                line.durable_state = Some(packed);
            }
            (None, Some(_)) => {
                return Err(format!("point {id}: files sent without a durable_state"));
            }
            (Some(durable), None) => {
                return Err(format!("point {id}: {} was not sent", durable.file));
            }
        }
        self.append_point(&line);
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

    /// Append a point's `state` and its group's `items` to the run's
    /// pack, [`STATES_PACK`]: half a point after a crash is caught by the
    /// sha256 digests the point's line records, and that line is written
    /// only after its bytes.
    pub fn write_state(&self, state: &[u8], items: &[Item]) -> io::Result<DurableState> {
        let items_json = serde_json::to_vec(items).map_err(io::Error::other)?;
        self.append_to_pack(state, &items_json)
    }

    /// Appends `state`, then `items_json`, to [`STATES_PACK`] (opened on
    /// first use, never through a link; a resumed run's appends after what
    /// is there) and says where they are.
    fn append_to_pack(&self, state: &[u8], items_json: &[u8]) -> io::Result<DurableState> {
        let mut guard = self.pack.lock().unwrap_or_else(|p| p.into_inner());
        let pack = match &mut *guard {
            Some(pack) => pack,
            empty => empty.insert(Pack::open(&self.root.join(STATES_PACK))?),
        };
        let offset = pack.end;
        let written = pack
            .file
            .write_all(state)
            .and_then(|()| pack.file.write_all(items_json));
        if let Err(error) = written {
            // Part of it may be there: the next point opens the pack again
            // and starts at its real end.
            *guard = None;
            return Err(error);
        }
        pack.end += (state.len() + items_json.len()) as u64;
        Ok(DurableState {
            kind: DurableKind::State,
            file: STATES_PACK.into(),
            sha256: sha256_hex(state),
            size_bytes: state.len() as u64,
            offset: Some(offset),
            items_file: STATES_PACK.into(),
            items_sha256: sha256_hex(items_json),
            items_offset: Some(offset + state.len() as u64),
            items_size_bytes: Some(items_json.len() as u64),
            binding_token: None,
        })
    }

    /// For a [`ReplayStore::capturing`] store: the lines kept since the
    /// last call, each with its state's and items' bytes when it has a
    /// durable state, read back and checked. The pack is emptied
    /// afterwards, whether or not every point could be read.
    ///
    /// # Errors
    /// A point's bytes cannot be read back or do not match its line.
    pub fn take_captured_with_states(&self) -> Result<Vec<CapturedPoint>, DurableError> {
        let lines = self.take_captured();
        let read = lines
            .into_iter()
            .map(|line| {
                let files = match &line.durable_state {
                    Some(durable) => Some(read_durable_bytes(&self.root, durable)?),
                    None => None,
                };
                Ok(CapturedPoint { line, files })
            })
            .collect();
        let mut guard = self.pack.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pack) = &mut *guard {
            if pack.file.set_len(0).is_ok() {
                pack.end = 0;
            } else {
                *guard = None;
            }
        }
        read
    }

    /// Write the snapshot component `component` of point `id`, whose
    /// binding answers to `binding_token`, and the group's `items`, as
    /// `replay-points/<id>.wasm` and `<id>.items.json` (snapshots are
    /// megabytes each, and kept within a budget: a file each).
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
        let written = self.write_snapshot_files(id, component, items, binding_token);
        if written.is_err() {
            self.snapshot_bytes.fetch_sub(size, Ordering::Relaxed);
        }
        written
    }

    /// Writes point `id`'s snapshot `component` and its group's `items`
    /// as `replay-points/<id>.wasm` and `<id>.items.json`, each created in
    /// place ([`write_new_file`]: exclusively, never through a link;
    /// replaced when it exists).
    fn write_snapshot_files(
        &self,
        id: &str,
        component: &[u8],
        items: &[Item],
        binding_token: u64,
    ) -> io::Result<DurableState> {
        let file = format!("{STATES_DIR}/{id}.wasm");
        let items_file = format!("{STATES_DIR}/{id}.items.json");
        write_new_file(&self.root.join(&file), component)?;
        let items_json = serde_json::to_vec(items).map_err(io::Error::other)?;
        write_new_file(&self.root.join(&items_file), &items_json)?;
        Ok(DurableState {
            kind: DurableKind::Snapshot,
            file,
            sha256: sha256_hex(component),
            size_bytes: component.len() as u64,
            offset: None,
            items_file,
            items_sha256: sha256_hex(&items_json),
            items_offset: None,
            items_size_bytes: None,
            binding_token: Some(binding_token),
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

/// A point a [`ReplayStore::capturing`] store kept, with its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedPoint {
    /// Its line, naming where the capturing store put its bytes.
    pub line: PointLine,
    /// Its state's bytes and its items' JSON, when it has a durable state.
    pub files: Option<(Vec<u8>, Vec<u8>)>,
}

/// The open [`STATES_PACK`] and where the next point starts in it.
struct Pack {
    file: File,
    end: u64,
}

impl Pack {
    /// Opens (creating it and its folder when missing) the pack at `path`
    /// for appending; a symbolic link or anything but a regular file there
    /// is refused.
    fn open(path: &Path) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_regular(OpenOptions::new().create(true).append(true), path)
            .map_err(io::Error::other)?;
        let end = file.metadata()?.len();
        Ok(Self { file, end })
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
    /// On resume: the pack of states lacks bytes of points the checkpoint
    /// covers.
    #[error(
        "{path} {what}, but the points of the epochs the checkpoint covers need its first \
         {needed} bytes: --resume stops here and changes nothing; restore the file, or start \
         the run again in a new directory"
    )]
    PackTooShort {
        /// The pack.
        path: String,
        /// What it is: `is N bytes`, `is missing`.
        what: String,
        /// Bytes the kept points need.
        needed: u64,
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
/// The pack of states is cut back to where the kept points' bytes end
/// (`cut_back_pack`), before the lines are rewritten.
///
/// # Errors
/// [`DurableError::Malformed`] naming the file and line of such a damaged
/// line; [`DurableError::PackTooShort`] when the pack lacks bytes of the
/// kept points; [`DurableError::Tampered`] when it is a link or not a
/// regular file; [`DurableError::Read`] when a file cannot be read or
/// rewritten. Nothing has changed after the first three.
pub fn cut_back_points(root: &Path, next_epoch: u32) -> Result<usize, DurableError> {
    let path = root.join(POINTS_FILE);
    let io_error = |source| DurableError::Read {
        path: path.display().to_string(),
        source,
    };
    let text = match read_regular_to_string(&path) {
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
    // Where the kept points' bytes in the pack end; `None` once a kept
    // line's durable state cannot be read (the pack is then left as it is).
    let mut pack_kept = Some(0u64);
    for (position, (number, line, record)) in lines.iter().enumerate() {
        let record = match record {
            Ok(record) if epoch_of(record).is_some_and(|epoch| epoch < next) => {
                kept.push_str(line);
                kept.push('\n');
                pack_kept = pack_kept.zip(packed_end(record)).map(|(a, b)| a.max(b));
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
    // The pack first: a resume that must stop here changes nothing.
    if let Some(end) = pack_kept {
        cut_back_pack(root, end)?;
    }
    if dropped > 0 {
        replace_file(&path, kept.as_bytes()).map_err(io_error)?;
    }
    Ok(dropped)
}

/// Cuts [`STATES_PACK`] back to `end`, where the bytes of the points a
/// resume keeps end: what follows is the epochs that run again (an epoch's
/// points are written before the next epoch runs) or a killed run's torn
/// tail, and the resumed run appends in its place.
///
/// # Errors
/// [`DurableError::PackTooShort`] when the pack is shorter than `end` (the
/// kept points' bytes are not all there, and appending would overwrite
/// their ranges); [`DurableError::Tampered`] when it is a link or not a
/// regular file; [`DurableError::Read`] when it cannot be cut.
fn cut_back_pack(root: &Path, end: u64) -> Result<(), DurableError> {
    let pack = root.join(STATES_PACK);
    let shown = pack.display().to_string();
    let too_short = |what: String| DurableError::PackTooShort {
        path: shown.clone(),
        what,
        needed: end,
    };
    let file = match open_regular(OpenOptions::new().write(true), &pack) {
        Ok(file) => file,
        Err(OutputFileError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return match end {
                0 => Ok(()),
                _ => Err(too_short("is missing".into())),
            };
        }
        Err(error) if error.is_refusal() => {
            return Err(DurableError::Tampered {
                path: shown,
                what: error.to_string(),
            });
        }
        Err(error) => {
            return Err(DurableError::Read {
                path: shown,
                source: io::Error::other(error),
            });
        }
    };
    let failed = |source| DurableError::Read {
        path: shown.clone(),
        source,
    };
    let length = file.metadata().map_err(failed)?.len();
    if length < end {
        return Err(too_short(format!("is {length} bytes")));
    }
    if length > end {
        file.set_len(end).map_err(failed)?;
    }
    Ok(())
}

/// Where the bytes a point line keeps in [`STATES_PACK`] end (0 when it
/// keeps none there); `None` when its `durable_state` cannot be read.
fn packed_end(record: &Map<String, Value>) -> Option<u64> {
    let durable = match record.get("durable_state") {
        None | Some(Value::Null) => return Some(0),
        Some(value) => DurableState::deserialize(value).ok()?,
    };
    let end = |file: &str, offset: Option<u64>, size: Option<u64>| match offset {
        Some(offset) if file == STATES_PACK => offset.checked_add(size?),
        _ => Some(0),
    };
    Some(
        end(&durable.file, durable.offset, Some(durable.size_bytes))?.max(end(
            &durable.items_file,
            durable.items_offset,
            durable.items_size_bytes,
        )?),
    )
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
    Ok(load_numbered_points(root)?
        .into_iter()
        .map(|(_, line)| line)
        .collect())
}

/// [`load_points`], each point with the 1-based line of
/// `replay-points.jsonl` its latest state was read from (for errors that
/// name it).
///
/// # Errors
/// As [`load_points`].
pub fn load_numbered_points(root: &Path) -> Result<Vec<(usize, PointLine)>, DurableError> {
    let path = root.join(POINTS_FILE);
    if !path.exists() {
        return Err(DurableError::NoPoints(root.display().to_string()));
    }
    let mut order: Vec<String> = Vec::new();
    let mut latest: BTreeMap<String, (usize, PointLine)> = BTreeMap::new();
    read_numbered_jsonl_file(&path, |number, record| {
        let point = PointLine::from_record(&record)?;
        let id = point.point.replay_point_id.clone();
        if !latest.contains_key(&id) {
            order.push(id.clone());
        }
        latest.insert(id, (number, point));
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
    mut each: impl FnMut(Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    read_numbered_jsonl_file(path, |_, record| each(record))
}

/// [`read_jsonl`], `each` given every line's 1-based number too.
fn read_numbered_jsonl_file(
    path: &Path,
    each: impl FnMut(usize, Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    let shown = path.display().to_string();
    let file = open_regular_input(path).map_err(|source| DurableError::Read {
        path: shown.clone(),
        source,
    })?;
    read_numbered_jsonl(BufReader::new(file), shown, each)
}

/// [`read_jsonl`] of the lines `reader` gives, errors naming the file
/// `shown`.
pub fn read_jsonl_from(
    reader: impl BufRead,
    shown: String,
    mut each: impl FnMut(Map<String, Value>) -> Result<(), String>,
) -> Result<(), DurableError> {
    read_numbered_jsonl(reader, shown, |_, record| each(record))
}

/// [`read_jsonl_from`], `each` given every line's 1-based number too.
fn read_numbered_jsonl(
    reader: impl BufRead,
    shown: String,
    mut each: impl FnMut(usize, Map<String, Value>) -> Result<(), String>,
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
        each(index + 1, record).map_err(malformed)?;
    }
    Ok(())
}

/// Read a durable state (or snapshot component) and the group's items,
/// checking their sizes and sha256 digests against the record, and that a
/// snapshot names its binding token.
///
/// # Errors
/// [`DurableError::Tampered`] when the record names a file outside
/// `replay-points/` or the bytes do not match it; [`DurableError::Read`]
/// when a file cannot be read; [`DurableError::Malformed`] when the items
/// are not a JSON array of items.
pub fn read_durable_state(
    root: &Path,
    durable: &DurableState,
) -> Result<(Vec<u8>, Vec<Item>), DurableError> {
    let (bytes, items_json) = read_durable_bytes(root, durable)?;
    let items: Vec<Item> =
        serde_json::from_slice(&items_json).map_err(|error| DurableError::Malformed {
            path: root.join(&durable.items_file).display().to_string(),
            line: error.line(),
            message: error.to_string(),
        })?;
    Ok((bytes, items))
}

/// [`read_durable_state`] without parsing the items: the state's bytes and
/// the items' JSON, both checked against the record.
///
/// # Errors
/// As [`read_durable_state`], but for the items' parse.
pub fn read_durable_bytes(
    root: &Path,
    durable: &DurableState,
) -> Result<(Vec<u8>, Vec<u8>), DurableError> {
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
    let state = Part {
        path: root.join(&durable.file),
        offset: durable.offset,
        size: Some(durable.size_bytes),
        sha256: &durable.sha256,
    }
    .read()?;
    let items = Part {
        path: root.join(&durable.items_file),
        offset: durable.items_offset,
        size: durable.items_size_bytes,
        sha256: &durable.items_sha256,
    }
    .read()?;
    Ok((state, items))
}

/// One recorded run of bytes: a whole file (`offset` absent) or `size`
/// bytes of it from `offset`, and the sha256 they must have.
struct Part<'a> {
    path: PathBuf,
    offset: Option<u64>,
    size: Option<u64>,
    sha256: &'a str,
}

impl Part<'_> {
    /// The bytes, checked against the recorded size and sha256.
    fn read(&self) -> Result<Vec<u8>, DurableError> {
        let shown = self.path.display().to_string();
        let tampered = |what: String| DurableError::Tampered {
            path: shown.clone(),
            what,
        };
        let unreadable = |source| DurableError::Read {
            path: shown.clone(),
            source,
        };
        let bytes = match self.offset {
            None if self.path.ends_with(STATES_PACK) => {
                return Err(tampered(
                    "its record names the run's pack without an offset into it".into(),
                ));
            }
            None => {
                let bytes = read_regular(&self.path).map_err(unreadable)?;
                if let Some(size) = self.size.filter(|&size| size != bytes.len() as u64) {
                    return Err(tampered(format!("{} bytes, recorded {size}", bytes.len())));
                }
                bytes
            }
            Some(offset) => {
                let Some(size) = self.size else {
                    return Err(tampered(format!(
                        "its record gives an offset ({offset}) without a size"
                    )));
                };
                let file = open_regular_input(&self.path).map_err(unreadable)?;
                let length = file.metadata().map_err(unreadable)?.len();
                if offset.checked_add(size).is_none_or(|end| end > length) {
                    return Err(tampered(format!(
                        "{length} bytes, too short for the recorded {size} bytes at offset {offset}"
                    )));
                }
                let mut bytes = vec![0; size as usize];
                file.read_exact_at(&mut bytes, offset).map_err(unreadable)?;
                bytes
            }
        };
        let digest = sha256_hex(&bytes);
        if digest != self.sha256 {
            let at = self.offset.map_or_else(String::new, |offset| {
                format!(" of the bytes at offset {offset}")
            });
            return Err(tampered(format!(
                "sha256{at} {digest}, recorded {}",
                self.sha256
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
pub(crate) mod tests;
