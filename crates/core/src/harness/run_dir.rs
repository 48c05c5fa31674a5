//! Where an arm's output goes: the [`ArmOutput`] trait and the on-disk
//! [`RunDir`].
//!
//! A run directory holds `records.jsonl` (one record per line, as units
//! complete), `epochs.jsonl` (one epoch summary per line), `checkpoint.json`
//! and `summary.json` (both replaced atomically). On resume, both JSONL
//! files are cut back to the byte lengths the checkpoint recorded, so an
//! epoch interrupted by a crash leaves no duplicates.
//!
//! Records are written behind a small buffer with bounded latency: one
//! `write(2)` per unit costs about as much as the rest of the host's work on
//! an item, so [`RunDir`] collects serialised records and writes them at
//! least every [`DEFAULT_FLUSH_INTERVAL`] (the arm flushes on a timer while
//! units run), whenever 256 KiB are pending, at the end of every epoch,
//! before a checkpoint, before an error is returned, and on drop. A reader
//! tailing `records.jsonl` sees each record within that interval;
//! [`RunDir::with_flush_interval`]`(Duration::ZERO)` writes every unit's
//! records at once instead. A full buffer is handed to the lane that filled
//! it ([`ArmOutput::take_write`]), which writes it after letting go of the
//! arm's lock, so the other lanes do not wait for the write. Resume is
//! unaffected either way: a crash can only lose records the checkpoint
//! does not cover, which a resume cuts back anyway.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::episode::adapter::Record;
use crate::episode::unit_record::UnitRecord;

use super::checkpoint::{
    ArmCheckpoint, CheckpointState, RuntimeSignature, load_arm_checkpoint, write_arm_checkpoint,
};
use super::error::ArmError;
use super::summary::{ArmSummary, EpochSummary, SummaryHost};
use super::writeback::Writeback;
use crate::atomic::write_json_atomic;

pub use super::run_files::{CHECKPOINT_FILE, EPOCHS_FILE, RECORDS_FILE, SUMMARY_FILE};
/// Longest time a completed unit's records stay buffered before they are
/// written to `records.jsonl`.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Pending record bytes that force a write regardless of the interval.
const FLUSH_THRESHOLD_BYTES: usize = 256 * 1024;
/// Room a fresh buffer is made with: a full one and the unit that filled it.
const BUFFER_BYTES: usize = FLUSH_THRESHOLD_BYTES + (64 << 10);
/// Pending record bytes written at once by the appending call itself: a
/// caller that never takes the writes handed out at
/// [`FLUSH_THRESHOLD_BYTES`] ([`ArmOutput::take_write`]) still writes.
const WRITE_NOW_BYTES: usize = 4 * FLUSH_THRESHOLD_BYTES;

/// How much of each append-only file has been written (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputOffsets {
    /// Length of `records.jsonl`.
    pub records_jsonl_bytes: u64,
    /// Length of `epochs.jsonl`.
    pub epochs_jsonl_bytes: u64,
}

/// The sink an arm writes through. [`RunDir`] is the real one; tests wrap it
/// to inject failures.
///
/// Call order: [`ArmOutput::begin_fresh`] or [`ArmOutput::begin_resume`]
/// once, then any number of appends, flushes, checkpoints and finally the
/// summary. `append_records` and `flush` are called from queue lanes and
/// the arm's thread, serialised by the arm.
pub trait ArmOutput: Send {
    /// Starts a fresh run. Must refuse (with [`ArmError::RunExists`]) when
    /// the output already holds a run.
    fn begin_fresh(&mut self) -> Result<(), ArmError>;
    /// Loads and validates the checkpoint against `expected`, cuts the
    /// append-only outputs back to what it covers, and returns its state.
    fn begin_resume(&mut self, expected: &RuntimeSignature) -> Result<CheckpointState, ArmError>;
    /// Appends records, one JSON object per line. May buffer: buffered
    /// records must be written by the next [`ArmOutput::flush`].
    fn append_records(&mut self, records: &[Record]) -> Result<(), ArmError>;
    /// Appends `records` given also as their serialized lines (`lines`:
    /// each record's JSON and a newline, in order). The default writes the
    /// records; [`RunDir`] copies the lines.
    fn append_lines(&mut self, lines: &[u8], records: &[UnitRecord]) -> Result<(), ArmError> {
        let _ = lines;
        let maps: Vec<Record> = records.iter().map(UnitRecord::to_map).collect();
        self.append_records(&maps)
    }
    /// Buffered records due to be written, handed to the caller to write
    /// once it lets go of the lock it holds this output under
    /// ([`RecordsWrite::write_after`]); `None` when nothing is due (the
    /// default: an output that does not buffer, or writes itself).
    fn take_write(&mut self) -> Option<RecordsWrite> {
        None
    }
    /// Writes buffered records out. The arm calls it every
    /// [`ArmOutput::flush_interval`] while units run, after every epoch's
    /// queue, and before returning an error from the queue.
    fn flush(&mut self) -> Result<(), ArmError> {
        Ok(())
    }
    /// How often the arm must call [`ArmOutput::flush`] while units run;
    /// `None` when `append_records` never buffers.
    fn flush_interval(&self) -> Option<Duration> {
        None
    }
    /// Appends one epoch summary line.
    fn append_epoch(&mut self, epoch: &EpochSummary) -> Result<(), ArmError>;
    /// Writes out buffered records, makes the appended outputs durable, then
    /// replaces the checkpoint atomically.
    fn write_checkpoint(&mut self, checkpoint: &ArmCheckpoint) -> Result<(), ArmError>;
    /// Replaces the arm summary atomically (after writing out buffered
    /// records).
    fn write_summary(&mut self, summary: &ArmSummary) -> Result<(), ArmError>;
    /// Current lengths of the append-only outputs, buffered bytes included.
    fn offsets(&self) -> OutputOffsets;
    /// Where the checkpoint lives, for the summary's `resume` block.
    fn checkpoint_location(&self) -> Option<String>;
}

/// Whether the run's other writers (traces, adapter output, replay points:
/// files written beside the arm's own) have lost anything: `Err` says what.
/// [`RunDir`] asks before every checkpoint and before the summary, so a
/// run never checkpoints past — or finishes after — a file it failed to
/// write.
pub struct SideWriteCheck(pub Box<dyn Fn() -> Result<(), String> + Send>);

impl std::fmt::Debug for SideWriteCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SideWriteCheck")
    }
}

/// An arm's run directory on disk.
#[derive(Debug)]
pub struct RunDir {
    root: PathBuf,
    /// `records.jsonl`, shared with the lanes writing a full buffer.
    records: Option<Arc<Mutex<RecordsFile>>>,
    epochs: Option<File>,
    offsets: OutputOffsets,
    /// Serialised records not yet written.
    pending: Vec<u8>,
    flush_interval: Duration,
    summary_extra: Map<String, Value>,
    summary_late: Option<SummaryLate>,
    side_writes: Option<SideWriteCheck>,
}

/// Fields of `summary.json` known only when it is written, after the last
/// epoch (see [`RunDir::with_summary_late`]).
struct SummaryLate(Box<dyn Fn() -> Map<String, Value> + Send>);

impl std::fmt::Debug for SummaryLate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SummaryLate")
    }
}

impl RunDir {
    /// A run directory at `root` (nothing is touched until the arm begins),
    /// writing records behind a buffer flushed at least every
    /// [`DEFAULT_FLUSH_INTERVAL`].
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            records: None,
            epochs: None,
            offsets: OutputOffsets::default(),
            pending: Vec::with_capacity(64 * 1024),
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            summary_extra: Map::new(),
            summary_late: None,
            side_writes: None,
        }
    }

    /// Ask `check` before every checkpoint and before the summary; an
    /// `Err` fails the arm there (an [`ArmError::Io`]), so the checkpoint
    /// is not written and a resume runs the epoch again.
    pub fn with_side_write_check(mut self, check: SideWriteCheck) -> Self {
        self.side_writes = Some(check);
        self
    }

    fn check_side_writes(&self) -> Result<(), ArmError> {
        match &self.side_writes {
            Some(SideWriteCheck(check)) => check()
                .map_err(|lost| ArmError::io("writing the run directory", io::Error::other(lost))),
            None => Ok(()),
        }
    }

    /// Extra top-level fields for `summary.json` (e.g. the adapter's sha256
    /// and the host version). A non-object `extra` is ignored; on a name
    /// clash the arm summary's own field wins.
    pub fn with_summary_extra(mut self, extra: Value) -> Self {
        if let Value::Object(extra) = extra {
            self.summary_extra = extra;
        }
        self
    }

    /// Adds the adapter and host version to `summary.json`, making it a
    /// [`super::summary::RunSummary`] (what `sandloop run` writes).
    pub fn with_summary_host(self, host: &SummaryHost) -> Self {
        let extra = serde_json::to_value(host).unwrap_or(Value::Null);
        self.with_summary_extra(extra)
    }

    /// Adds the fields `late` returns when `summary.json` is written, after
    /// every epoch (what `sandloop run` knows only then: the replay metric
    /// ledger, the snapshot totals), beside the arm summary's and the
    /// [`RunDir::with_summary_extra`] fields; on a name clash those win.
    pub fn with_summary_late(
        mut self,
        late: impl Fn() -> Map<String, Value> + Send + 'static,
    ) -> Self {
        self.summary_late = Some(SummaryLate(Box::new(late)));
        self
    }

    /// Sets the longest time records stay buffered; `Duration::ZERO` writes
    /// every completed unit's records immediately (one `write(2)` per unit).
    pub fn with_flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `records.jsonl` in this directory.
    pub fn records_path(&self) -> PathBuf {
        self.root.join(RECORDS_FILE)
    }

    /// `epochs.jsonl` in this directory.
    pub fn epochs_path(&self) -> PathBuf {
        self.root.join(EPOCHS_FILE)
    }

    /// `checkpoint.json` in this directory.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.root.join(CHECKPOINT_FILE)
    }

    /// `summary.json` in this directory.
    pub fn summary_path(&self) -> PathBuf {
        self.root.join(SUMMARY_FILE)
    }

    /// Atomically writes another JSON file (e.g. a manifest) into the
    /// directory.
    pub fn write_json<T: Serialize + ?Sized>(&self, name: &str, value: &T) -> Result<(), ArmError> {
        let path = self.root.join(name);
        write_json_atomic(&path, value)
            .map_err(|e| ArmError::io(format!("writing {}", path.display()), e))
    }

    fn open_append(path: &Path, create_new: bool) -> Result<File, ArmError> {
        let mut options = OpenOptions::new();
        options.append(true);
        if create_new {
            options.create_new(true);
        }
        options
            .open(path)
            .map_err(|e| ArmError::io(format!("opening {}", path.display()), e))
    }

    /// Cuts `path` back to `length` bytes and opens it for appending.
    fn cut_back(path: &Path, length: u64) -> Result<File, ArmError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = match OpenOptions::new().write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound && length == 0 => {
                return OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .map_err(|e| ArmError::io(format!("opening {}", path.display()), e));
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(ArmError::Damaged(format!(
                    "{name} is missing but the checkpoint covers {length} bytes of it"
                )));
            }
            Err(error) => return Err(ArmError::io(format!("opening {}", path.display()), error)),
        };
        let actual = file
            .metadata()
            .map_err(|e| ArmError::io(format!("reading {}", path.display()), e))?
            .len();
        if actual < length {
            return Err(ArmError::Damaged(format!(
                "{name} holds {actual} bytes but the checkpoint covers {length}"
            )));
        }
        if actual > length {
            file.set_len(length)
                .and_then(|()| file.sync_all())
                .map_err(|e| ArmError::io(format!("truncating {}", path.display()), e))?;
        }
        drop(file);
        Self::open_append(path, false)
    }

    /// Writes records to `file` from now on, synced in the background as
    /// it grows ([`Writeback`]).
    fn open_records(&mut self, file: File) -> Result<(), ArmError> {
        // The old thread (if any) ends before the new one starts.
        self.records = None;
        let path = self.records_path();
        let writeback = Writeback::start(&path)
            .map_err(|e| ArmError::io(format!("starting the writeback of {RECORDS_FILE}"), e))?;
        self.records = Some(Arc::new(Mutex::new(RecordsFile {
            file,
            writeback,
            path,
            spare: Vec::new(),
        })));
        Ok(())
    }

    /// What a background sync of `records.jsonl` reported, as the error of
    /// the checkpoint or summary about to rely on it.
    fn check_writeback(&self) -> Result<(), ArmError> {
        match self
            .records
            .as_ref()
            .and_then(|records| lock(records).writeback.take_error())
        {
            Some(error) => Err(ArmError::io(format!("syncing {RECORDS_FILE}"), error)),
            None => Ok(()),
        }
    }

    /// Counts what `pending` gained since `before` and writes it out when
    /// the run does not buffer or the buffer is full.
    fn appended(&mut self, before: usize) -> Result<(), ArmError> {
        self.offsets.records_jsonl_bytes += (self.pending.len() - before) as u64;
        if self.flush_interval.is_zero() || self.pending.len() >= WRITE_NOW_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// `records.jsonl`, or the error of writing before the run began.
    fn records_file(&self) -> Result<&Arc<Mutex<RecordsFile>>, ArmError> {
        self.records.as_ref().ok_or_else(|| {
            ArmError::io(
                format!("writing {}", self.records_path().display()),
                io::Error::other("the run was not begun"),
            )
        })
    }
}

/// `records.jsonl` open for appending, and the thread syncing it as it
/// grows.
#[derive(Debug)]
struct RecordsFile {
    file: File,
    writeback: Writeback,
    path: PathBuf,
    /// A written buffer, emptied, for the next one to fill.
    spare: Vec<u8>,
}

impl RecordsFile {
    fn write(&mut self, bytes: &[u8]) -> Result<(), ArmError> {
        self.file
            .write_all(bytes)
            .map_err(|e| ArmError::io(format!("writing {}", self.path.display()), e))?;
        self.writeback.appended(bytes.len() as u64);
        Ok(())
    }
}

fn lock(records: &Mutex<RecordsFile>) -> MutexGuard<'_, RecordsFile> {
    records
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serialised records due to be written to `records.jsonl`, handed out by
/// [`ArmOutput::take_write`].
#[derive(Debug)]
pub struct RecordsWrite {
    bytes: Vec<u8>,
    records: Arc<Mutex<RecordsFile>>,
}

impl RecordsWrite {
    /// Takes the file's turn, runs `release` (which lets go of the lock the
    /// output is held under), then writes. The turn is taken first, so
    /// writes reach the file in the order they were handed out while the
    /// lanes go on appending to a fresh buffer meanwhile.
    ///
    /// Errors: the write's, naming the file.
    pub fn write_after(self, release: impl FnOnce()) -> Result<(), ArmError> {
        let mut records = lock(&self.records);
        release();
        let written = records.write(&self.bytes);
        let mut spare = self.bytes;
        spare.clear();
        records.spare = spare;
        written
    }
}

impl ArmOutput for RunDir {
    fn begin_fresh(&mut self) -> Result<(), ArmError> {
        fs::create_dir_all(&self.root)
            .map_err(|e| ArmError::io(format!("creating {}", self.root.display()), e))?;
        let found: Vec<String> = [RECORDS_FILE, EPOCHS_FILE, CHECKPOINT_FILE, SUMMARY_FILE]
            .into_iter()
            .filter(|name| self.root.join(name).exists())
            .map(str::to_owned)
            .collect();
        if !found.is_empty() {
            return Err(ArmError::RunExists {
                path: self.root.clone(),
                found,
            });
        }
        self.open_records(Self::open_append(&self.records_path(), true)?)?;
        self.epochs = Some(Self::open_append(&self.epochs_path(), true)?);
        self.offsets = OutputOffsets::default();
        self.pending.clear();
        Ok(())
    }

    fn begin_resume(&mut self, expected: &RuntimeSignature) -> Result<CheckpointState, ArmError> {
        let state = load_arm_checkpoint(&self.checkpoint_path(), expected)?;
        let records = Self::cut_back(&self.records_path(), state.records_jsonl_bytes)?;
        let epochs = Self::cut_back(&self.epochs_path(), state.epochs_jsonl_bytes)?;
        self.open_records(records)?;
        self.epochs = Some(epochs);
        self.offsets = OutputOffsets {
            records_jsonl_bytes: state.records_jsonl_bytes,
            epochs_jsonl_bytes: state.epochs_jsonl_bytes,
        };
        self.pending.clear();
        Ok(state)
    }

    fn append_records(&mut self, records: &[Record]) -> Result<(), ArmError> {
        let before = self.pending.len();
        for record in records {
            if let Err(error) = serde_json::to_writer(&mut self.pending, record) {
                self.pending.truncate(before);
                return Err(ArmError::io(
                    "serialising a record",
                    io::Error::other(error),
                ));
            }
            self.pending.push(b'\n');
        }
        self.appended(before)
    }

    fn append_lines(&mut self, lines: &[u8], _records: &[UnitRecord]) -> Result<(), ArmError> {
        let before = self.pending.len();
        self.pending.extend_from_slice(lines);
        self.appended(before)
    }

    fn take_write(&mut self) -> Option<RecordsWrite> {
        if self.pending.len() < FLUSH_THRESHOLD_BYTES || self.flush_interval.is_zero() {
            return None;
        }
        let records = self.records.as_ref()?;
        // The last written buffer when no write holds the file right now.
        let spare = records
            .try_lock()
            .ok()
            .map(|mut file| std::mem::take(&mut file.spare))
            .filter(|spare| spare.capacity() > 0)
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES));
        Some(RecordsWrite {
            bytes: std::mem::replace(&mut self.pending, spare),
            records: Arc::clone(records),
        })
    }

    fn flush(&mut self) -> Result<(), ArmError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        lock(self.records_file()?).write(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    fn flush_interval(&self) -> Option<Duration> {
        (!self.flush_interval.is_zero()).then_some(self.flush_interval)
    }

    /// Streams the summary into `epochs.jsonl` rather than building its
    /// line first: an epoch of a million records lists a million item ids.
    fn append_epoch(&mut self, epoch: &EpochSummary) -> Result<(), ArmError> {
        let failed = |root: &Path, e| {
            ArmError::io(format!("writing {}", root.join(EPOCHS_FILE).display()), e)
        };
        let Some(file) = self.epochs.as_mut() else {
            return Err(failed(
                &self.root,
                io::Error::other("the run was not begun"),
            ));
        };
        let mut writer = CountingWriter {
            inner: io::BufWriter::with_capacity(1 << 16, file),
            written: 0,
        };
        let streamed = serde_json::to_writer(&mut writer, epoch)
            .map_err(io::Error::other)
            .and_then(|()| writer.write_all(b"\n"))
            .and_then(|()| writer.flush());
        let written = writer.written;
        streamed.map_err(|e| failed(&self.root, e))?;
        self.offsets.epochs_jsonl_bytes += written;
        Ok(())
    }

    fn write_checkpoint(&mut self, checkpoint: &ArmCheckpoint) -> Result<(), ArmError> {
        self.flush()?;
        self.check_side_writes()?;
        self.check_writeback()?;
        // Both files at once: each sync mostly waits for the disk.
        let sync = |file: Option<&File>, name: &str| match file {
            Some(file) => file
                .sync_data()
                .map_err(|e| ArmError::io(format!("syncing {name}"), e)),
            None => Ok(()),
        };
        let sync_records = || match &self.records {
            Some(records) => sync(Some(&lock(records).file), RECORDS_FILE),
            None => Ok(()),
        };
        let (records, epochs) = std::thread::scope(|scope| {
            let records = std::thread::Builder::new().spawn_scoped(scope, sync_records);
            let epochs = sync(self.epochs.as_ref(), EPOCHS_FILE);
            let records = match records {
                Ok(records) => records
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: one after the other.
                Err(_) => sync_records(),
            };
            (records, epochs)
        });
        records.and(epochs)?;
        write_arm_checkpoint(&self.checkpoint_path(), checkpoint)?;
        Ok(())
    }

    fn write_summary(&mut self, summary: &ArmSummary) -> Result<(), ArmError> {
        self.check_side_writes()?;
        self.flush()?;
        self.check_writeback()?;
        let late = self
            .summary_late
            .as_ref()
            .map(|late| (late.0)())
            .unwrap_or_default();
        if self.summary_extra.is_empty() && late.is_empty() {
            return self.write_json(SUMMARY_FILE, summary);
        }
        let mut value = match serde_json::to_value(summary) {
            Ok(Value::Object(map)) => map,
            Ok(_) => Map::new(),
            Err(error) => {
                return Err(ArmError::io(
                    "serialising the summary",
                    io::Error::other(error),
                ));
            }
        };
        for (key, extra) in self.summary_extra.iter().chain(&late) {
            if !value.contains_key(key) {
                value.insert(key.clone(), extra.clone());
            }
        }
        self.write_json(SUMMARY_FILE, &value)
    }

    fn offsets(&self) -> OutputOffsets {
        self.offsets
    }

    fn checkpoint_location(&self) -> Option<String> {
        Some(self.checkpoint_path().display().to_string())
    }
}

impl Drop for RunDir {
    /// Writes out buffered records (best effort).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A writer that counts the bytes it passed on.
struct CountingWriter<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::episode::testing::obj;

    fn lines(path: &Path) -> usize {
        fs::read_to_string(path).unwrap().lines().count()
    }

    /// A fresh run begun in `dir`.
    fn begun(dir: &Path) -> RunDir {
        let mut run_dir = RunDir::new(dir);
        run_dir.begin_fresh().unwrap();
        run_dir
    }

    #[test]
    fn records_are_buffered_until_flushed_and_offsets_count_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = begun(dir.path());
        assert_eq!(run_dir.flush_interval(), Some(DEFAULT_FLUSH_INTERVAL));
        let record: Record = obj(json!({"item_id": "a"}));
        run_dir
            .append_records(&[record.clone(), record.clone()])
            .unwrap();
        let expected = 2 * (serde_json::to_string(&record).unwrap().len() as u64 + 1);
        assert_eq!(run_dir.offsets().records_jsonl_bytes, expected);
        assert_eq!(lines(&run_dir.records_path()), 0, "still buffered");
        run_dir.flush().unwrap();
        assert_eq!(lines(&run_dir.records_path()), 2);
        assert_eq!(
            fs::metadata(run_dir.records_path()).unwrap().len(),
            expected
        );
        run_dir
            .append_records(std::slice::from_ref(&record))
            .unwrap();
        let path = run_dir.records_path();
        drop(run_dir);
        assert_eq!(
            lines(&path),
            3,
            "dropping the run directory writes the rest"
        );
    }

    #[test]
    fn a_zero_interval_writes_every_append_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = RunDir::new(dir.path()).with_flush_interval(Duration::ZERO);
        run_dir.begin_fresh().unwrap();
        assert_eq!(run_dir.flush_interval(), None);
        run_dir
            .append_records(&[obj(json!({"item_id": "a"}))])
            .unwrap();
        assert_eq!(lines(&run_dir.records_path()), 1);
    }

    /// A line of `n`, padded with `pad` bytes.
    fn padded_line(n: usize, pad: usize) -> Vec<u8> {
        format!("{{\"n\":{n},\"pad\":\"{}\"}}\n", "x".repeat(pad)).into_bytes()
    }

    /// A line of `n`, padded so that a few hundred fill a buffer.
    fn numbered_line(n: usize) -> Vec<u8> {
        padded_line(n, 900)
    }

    #[test]
    fn a_full_buffer_is_handed_out_to_be_written_and_the_rest_stays_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = begun(dir.path());
        let mut appended = 0;
        let mut n = 0;
        while appended < FLUSH_THRESHOLD_BYTES {
            assert!(
                run_dir.take_write().is_none(),
                "not full at {appended} bytes"
            );
            let line = numbered_line(n);
            run_dir.append_lines(&line, &[]).unwrap();
            appended += line.len();
            n += 1;
        }
        assert_eq!(lines(&run_dir.records_path()), 0, "nothing written yet");
        let write = run_dir.take_write().expect("a full buffer is handed out");
        assert!(run_dir.take_write().is_none(), "handed out once");
        let mut released = false;
        write.write_after(|| released = true).unwrap();
        assert!(released);
        assert_eq!(lines(&run_dir.records_path()), n);
        run_dir.append_lines(&numbered_line(n), &[]).unwrap();
        assert_eq!(lines(&run_dir.records_path()), n, "the next line waits");
        run_dir.flush().unwrap();
        assert_eq!(lines(&run_dir.records_path()), n + 1);
        assert_eq!(
            fs::metadata(run_dir.records_path()).unwrap().len(),
            run_dir.offsets().records_jsonl_bytes
        );
    }

    #[test]
    fn a_caller_that_never_takes_the_writes_still_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = begun(dir.path());
        let mut n = 0;
        while lines(&run_dir.records_path()) == 0 {
            assert!(n * 900 < 2 * WRITE_NOW_BYTES, "never written");
            run_dir.append_lines(&numbered_line(n), &[]).unwrap();
            n += 1;
        }
        assert_eq!(lines(&run_dir.records_path()), n, "all of it at once");
    }

    #[test]
    fn writes_after_the_lock_keep_the_order_they_were_handed_out_in() {
        // Lanes number their lines under the lock and write full buffers
        // after letting it go, as the arm's lanes do: the file must hold
        // the numbers in order. Every line fills a buffer, so every append
        // hands out a write and the next lane races the one before it.
        let dir = tempfile::tempdir().unwrap();
        let shared = Mutex::new((begun(dir.path()), 0usize));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..25 {
                        let mut held = shared.lock().unwrap();
                        let (run_dir, next) = &mut *held;
                        let line = padded_line(*next, FLUSH_THRESHOLD_BYTES);
                        *next += 1;
                        run_dir.append_lines(&line, &[]).unwrap();
                        match run_dir.take_write() {
                            Some(write) => write.write_after(|| drop(held)).unwrap(),
                            None => drop(held),
                        }
                    }
                });
            }
        });
        let (mut run_dir, count) = shared.into_inner().unwrap();
        run_dir.flush().unwrap();
        let text = fs::read_to_string(run_dir.records_path()).unwrap();
        let numbers: Vec<usize> = text
            .lines()
            .map(|line| {
                serde_json::from_str::<Value>(line).unwrap()["n"]
                    .as_u64()
                    .unwrap() as usize
            })
            .collect();
        assert_eq!(numbers, (0..count).collect::<Vec<_>>());
    }

    #[test]
    fn summary_extra_fields_are_added_without_overriding_the_arm_summary() {
        let dir = tempfile::tempdir().unwrap();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&calls);
        let mut run_dir = RunDir::new(dir.path())
            .with_summary_extra(json!({
                "host_version": "1.2.3",
                "record_count": "must not win"
            }))
            .with_summary_late(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let late = json!({"replay": {"capture_success_count": 4}, "epoch_count": 9});
                late.as_object().cloned().unwrap()
            });
        run_dir.begin_fresh().unwrap();
        let summary: ArmSummary = serde_json::from_value(json!({
            "schema_version": "loopx_explore_harness_arm_v0", "arm_key": "main",
            "budget_minutes": null, "worker_count": 1, "elapsed_minutes": 0.0,
            "stop_reason": "max_epochs", "epoch_count": 0, "record_count": 0,
            "raw_value_total": 0.0, "novel_value_total": 0.0, "variant_records_total": 0,
            "execution_metrics": crate::episode::metrics::ExecutionMetrics::default(),
            "coverage_count": 0, "coverage_first_seen_minutes": {}, "checkpoints": [],
            "resume": {"schema_version": "x", "enabled": false, "resumed": false,
                       "checkpoint_schema_version": "y", "checkpoint_path": null,
                       "restored_epoch_count": 0},
            "runtime_policy": {"schema_version": "z", "item_failure_policy": "record",
                               "item_exception_isolation": true,
                               "episode_execution": {"mode": "standalone",
                                                     "adapter_owned_restore": false},
                               "duration_source": "host", "planner_guidance": {}}
        }))
        .unwrap();
        run_dir.write_summary(&summary).unwrap();
        let written: Value =
            serde_json::from_str(&fs::read_to_string(run_dir.summary_path()).unwrap()).unwrap();
        assert_eq!(written["host_version"], json!("1.2.3"));
        assert_eq!(written["record_count"], json!(0));
        assert_eq!(written["stop_reason"], json!("max_epochs"));
        // Late fields are asked for once, when the summary is written, and
        // never override the arm summary's.
        assert_eq!(written["replay"]["capture_success_count"], json!(4));
        assert_eq!(written["epoch_count"], json!(0));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_summary_with_the_host_block_reads_back_as_a_run_summary() {
        let golden: super::super::summary::RunSummary =
            serde_json::from_slice(include_bytes!("golden/summary.json")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = RunDir::new(dir.path()).with_summary_host(&golden.host);
        run_dir.begin_fresh().unwrap();
        run_dir.write_summary(&golden.arm).unwrap();
        let written: super::super::summary::RunSummary =
            super::super::run_files::read_run_file(&run_dir.summary_path()).unwrap();
        assert_eq!(written.arm, golden.arm);
        assert_eq!(written.host, golden.host);
        assert_eq!(written.replay, None, "added by the CLI after the arm");
    }

    #[test]
    fn appending_before_the_run_begins_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut run_dir = RunDir::new(dir.path()).with_flush_interval(Duration::ZERO);
        let error = run_dir
            .append_records(&[obj(json!({"item_id": "a"}))])
            .unwrap_err();
        assert!(matches!(error, ArmError::Io { .. }), "{error}");
        let written = RunDir::new(dir.path());
        written
            .write_json("manifest.json", &json!({"host": "sandloop"}))
            .unwrap();
        assert!(dir.path().join("manifest.json").exists());
    }
}
