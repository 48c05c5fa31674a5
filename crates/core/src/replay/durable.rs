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
use std::io::{self, BufRead, BufReader, Read, Write};
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
use crate::input_file::{open_regular_input, read_regular_to_string};

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
    let file = open_regular_input(path).map_err(|source| DurableError::Read {
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
                let mut bytes = Vec::new();
                open_regular_input(&self.path)
                    .and_then(|mut file| file.read_to_end(&mut bytes))
                    .map_err(unreadable)?;
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
                let end = offset.checked_add(size).filter(|&end| end <= length);
                let Some(end) = end else {
                    return Err(tampered(format!(
                        "{length} bytes, too short for the recorded {size} bytes at offset {offset}"
                    )));
                };
                let mut bytes = vec![0; (end - offset) as usize];
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
            .write_state(b"state", std::slice::from_ref(&item))
            .unwrap();
        let mut sent = line("rp-1", Lifecycle::Released);
        sent.durable_state = Some(durable.clone());
        capturing.append_point(&sent);
        capturing.append_point(&line("rp-2", Lifecycle::Released));
        assert!(
            !worker.path().join(POINTS_FILE).exists(),
            "lines stay in memory"
        );
        let captured = capturing.take_captured_with_states().unwrap();
        assert_eq!(captured.len(), 2);
        assert!(capturing.take_captured().is_empty(), "taken once");
        assert_eq!(
            std::fs::metadata(worker.path().join(STATES_PACK))
                .unwrap()
                .len(),
            0,
            "the worker's pack is emptied once its points are taken"
        );
        let (state, items) = captured[0].files.clone().unwrap();
        assert_eq!(state, b"state");
        assert_eq!(captured[1].files, None);
        let lines: Vec<PointLine> = captured.into_iter().map(|point| point.line).collect();
        // The next unit's points start the pack again.
        let next = capturing.write_state(b"next", &[]).unwrap();
        assert_eq!(next.offset, Some(0));

        // The coordinator's store writes them, checked, where its own
        // pack puts them: after what it already holds.
        let run = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(run.path());
        let own = store.write_state(b"earlier", &[]).unwrap();
        store
            .receive_point(&lines[0], Some((&state, &items)))
            .unwrap();
        store.receive_point(&lines[1], None).unwrap();
        let points = load_points(run.path()).unwrap();
        let written = points[0].durable_state.clone().unwrap();
        assert_eq!(
            written.offset,
            Some(own.size_bytes + own.items_size_bytes.unwrap())
        );
        assert_eq!(
            (&written.sha256, &written.items_sha256),
            (&durable.sha256, &durable.items_sha256)
        );
        let mut expected = lines.clone();
        expected[0].durable_state = Some(written.clone());
        assert_eq!(points, expected);
        let (bytes, read_items) = read_durable_state(run.path(), &written).unwrap();
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
        let mut snapshot = lines[0].clone();
        snapshot.durable_state.as_mut().unwrap().kind = DurableKind::Snapshot;
        assert!(refused(&snapshot, Some((&state, &items))).contains("Snapshot"));
        assert!(!other.path().join(POINTS_FILE).exists());
        assert!(!other.path().join(STATES_DIR).exists());
        // The sender's file names are not the receiver's: one naming a
        // path outside the run is written where the receiver writes.
        let mut escaping = lines[0].clone();
        escaping.durable_state.as_mut().unwrap().file = "../outside.bin".into();
        store
            .receive_point(&escaping, Some((&state, &items)))
            .unwrap();
        assert_eq!(
            load_points(other.path()).unwrap()[0]
                .durable_state
                .as_ref()
                .unwrap()
                .file,
            STATES_PACK
        );
        assert!(!other.path().join("../outside.bin").exists());
    }

    #[test]
    fn packed_states_follow_one_another_and_a_damaged_range_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
        let first = store
            .write_state(b"one", std::slice::from_ref(&item))
            .unwrap();
        let second = store.write_state(b"second", &[]).unwrap();
        assert_eq!((first.file.as_str(), first.offset), (STATES_PACK, Some(0)));
        assert_eq!(first.items_offset, Some(3));
        let first_end = 3 + first.items_size_bytes.unwrap();
        assert_eq!(second.offset, Some(first_end));
        assert_eq!(read_durable_state(dir.path(), &first).unwrap().0, b"one");
        assert_eq!(
            read_durable_state(dir.path(), &second).unwrap().0,
            b"second"
        );

        // A store opened later (a resumed run) appends after what is there.
        let later = ReplayStore::new(dir.path());
        let third = later.write_state(b"3", &[]).unwrap();
        assert_eq!(
            third.offset,
            Some(second.items_offset.unwrap() + second.items_size_bytes.unwrap())
        );

        // One flipped byte of the second state: the second is refused,
        // naming the pack and the offset; the first still reads.
        let pack = dir.path().join(STATES_PACK);
        let mut bytes = std::fs::read(&pack).unwrap();
        bytes[first_end as usize] ^= 1;
        std::fs::write(&pack, &bytes).unwrap();
        let error = read_durable_state(dir.path(), &second)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("states.pack was changed after the run wrote it"),
            "{error}"
        );
        assert!(error.contains(&format!("at offset {first_end}")), "{error}");
        assert_eq!(read_durable_state(dir.path(), &first).unwrap().0, b"one");

        // A range past the end, or one so large it would overflow, is
        // refused without reading (or allocating) it.
        for (offset, size) in [(bytes.len() as u64, 1), (1, u64::MAX), (u64::MAX, 2)] {
            let mut past = first.clone();
            past.offset = Some(offset);
            past.size_bytes = size;
            let error = read_durable_state(dir.path(), &past)
                .unwrap_err()
                .to_string();
            assert!(error.contains("too short for the recorded"), "{error}");
        }
        // A symbolic link where the pack would be is not written through.
        let linked = tempfile::tempdir().unwrap();
        std::fs::create_dir(linked.path().join(STATES_DIR)).unwrap();
        let target = linked.path().join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        std::os::unix::fs::symlink(&target, linked.path().join(STATES_PACK)).unwrap();
        let error = ReplayStore::new(linked.path())
            .write_state(b"x", &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert_eq!(std::fs::read(&target).unwrap(), b"");
    }

    #[test]
    fn the_last_line_of_each_point_wins_and_states_are_verified() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
        let durable = store.write_state(b"state", &[item]).unwrap();
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
        // The items of a line written before packs, in a file of their own.
        let items_path = dir.path().join("replay-points/rp-1.items.json");
        let (_, items_json) = read_durable_bytes(dir.path(), &durable).unwrap();
        let items_text = String::from_utf8(items_json).unwrap();
        std::fs::write(&items_path, &items_text).unwrap();
        let mut own_file = durable.clone();
        own_file.items_file = "replay-points/rp-1.items.json".into();
        (own_file.items_offset, own_file.items_size_bytes) = (None, None);
        assert_eq!(read_durable_state(dir.path(), &own_file).unwrap().1, items);
        std::fs::write(&items_path, items_text.replace("\"s\"", "\"t\"")).unwrap();
        let error = read_durable_state(dir.path(), &own_file)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("items.json was changed after the run wrote it"),
            "{error}"
        );
        std::fs::write(&items_path, items_text).unwrap();
        std::fs::write(dir.path().join("replay-points/rp-1.bin"), b"stale").unwrap();
        own_file.file = "replay-points/rp-1.bin".into();
        own_file.offset = None;
        let error = read_durable_state(dir.path(), &own_file)
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
        store.write_state(&[4; 64], &[]).unwrap();

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
                store.write_state(id.as_bytes(), &[]).unwrap()
            });
            store.append_point(&point);
        }
        assert!(dir.path().join("replay-points/rp-c.wasm").exists());
        let pack = dir.path().join(STATES_PACK);
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), 2 * (4 + 2));
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 2);
        let points = load_points(dir.path()).unwrap();
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].point.replay_point_id, "rp-a");
        let kept = points[0].durable_state.as_ref().unwrap();
        assert_eq!(read_durable_state(dir.path(), kept).unwrap().0, b"rp-a");
        assert_eq!(
            std::fs::metadata(&pack).unwrap().len(),
            4 + 2,
            "rp-b's bytes are cut off the pack"
        );
        assert!(!dir.path().join("replay-points/rp-c.wasm").exists());
        assert!(!dir.path().join("replay-points/rp-c.items.json").exists());
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 0);
    }

    #[test]
    fn resume_refuses_a_pack_too_short_for_its_kept_points_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        for (id, epoch) in [("rp-a", 1), ("rp-b", 2)] {
            let mut point = line(id, Lifecycle::Released);
            point.epoch = epoch;
            point.durable_state = Some(store.write_state(id.as_bytes(), &[]).unwrap());
            store.append_point(&point);
        }
        drop(store);
        let (pack, points) = (dir.path().join(STATES_PACK), dir.path().join(POINTS_FILE));
        let lines_before = std::fs::read_to_string(&points).unwrap();
        // A killed run's torn tail: bytes no line names.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&pack)
            .unwrap()
            .write_all(b"torn")
            .unwrap();
        assert_eq!(cut_back_points(dir.path(), 3).unwrap(), 0, "both kept");
        assert_eq!(
            std::fs::metadata(&pack).unwrap().len(),
            12,
            "the tail is cut"
        );
        assert_eq!(std::fs::read_to_string(&points).unwrap(), lines_before);

        // rp-b's bytes lost: a resume keeping it stops and changes nothing.
        let file = std::fs::OpenOptions::new().write(true).open(&pack).unwrap();
        file.set_len(8).unwrap();
        let error = cut_back_points(dir.path(), 3).unwrap_err().to_string();
        assert!(
            error.contains(
                "states.pack is 8 bytes, but the points of the epochs the checkpoint covers \
                 need its first 12 bytes: --resume stops here and changes nothing"
            ),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(&points).unwrap(), lines_before);
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), 8);
        // One that runs rp-b's epoch again drops it and keeps rp-a's bytes.
        assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 1);
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), 6);
        // A missing pack the kept points need is refused too.
        std::fs::remove_file(&pack).unwrap();
        let error = cut_back_points(dir.path(), 2).unwrap_err().to_string();
        assert!(error.contains("states.pack is missing, but"), "{error}");
    }

    #[test]
    fn a_fifo_or_a_directory_where_a_point_file_is_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        let durable = store.write_state(b"state", &[]).unwrap();
        let mut point = line("rp-1", Lifecycle::Released);
        point.durable_state = Some(durable.clone());
        store.append_point(&point);
        drop(store);
        let pack = dir.path().join(STATES_PACK);
        std::fs::remove_file(&pack).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&pack).status();
        assert!(made.unwrap().success());
        let error = read_durable_state(dir.path(), &durable)
            .unwrap_err()
            .to_string();
        assert!(error.contains("is a FIFO, not a regular file"), "{error}");
        let points = dir.path().join(POINTS_FILE);
        std::fs::remove_file(&points).unwrap();
        std::fs::create_dir(&points).unwrap();
        let error = load_points(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("is a directory, not a regular file"),
            "{error}"
        );
        // A line naming the pack without an offset is refused, not read whole.
        let mut whole = durable;
        whole.offset = None;
        let error = read_durable_state(dir.path(), &whole)
            .unwrap_err()
            .to_string();
        assert!(error.contains("without an offset"), "{error}");
    }

    #[test]
    fn resume_refuses_a_damaged_line_that_may_be_a_checkpointed_point() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::new(dir.path());
        for (id, epoch) in [("rp-a", 1), ("rp-b", 1), ("rp-c", 2)] {
            let mut point = line(id, Lifecycle::Released);
            point.epoch = epoch;
            point.durable_state = Some(store.write_state(b"x", &[]).unwrap());
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
        assert_eq!(
            std::fs::metadata(dir.path().join(STATES_PACK))
                .unwrap()
                .len(),
            3 * 3
        );
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
                offset: None,
                items_file: format!("{STATES_DIR}/rp-{n}.items.json"),
                items_sha256: "00".into(),
                items_offset: None,
                items_size_bytes: None,
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
                offset in any::<Option<u64>>(),
                items_range in any::<Option<(u64, u64)>>(),
                snapshot in any::<bool>(),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let durable = DurableState {
                    kind: if snapshot { DurableKind::Snapshot } else { DurableKind::State },
                    file,
                    sha256: String::new(),
                    size_bytes,
                    offset,
                    items_file,
                    items_sha256: String::new(),
                    items_offset: items_range.map(|(offset, _)| offset),
                    items_size_bytes: items_range.map(|(_, size)| size),
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
                let mut durable = store.write_state(b"state", &[]).unwrap();
                // Items in a file of their own (a line written before packs).
                durable.items_file = format!("{STATES_DIR}/rp-1.items.json");
                (durable.items_offset, durable.items_size_bytes) = (None, None);
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
