//! The loop state file of a session and the lock that guards it. Mirrors
//! `StateStore` in the reference's `state_store.py`.
//!
//! One `state.json` per session (see [`super::sessions::state_path`]). Every
//! read, write and read-modify-write holds an exclusive lock on the
//! `state.json.lock` file next to it, so the coordinator and CLI commands
//! (`sandloop status`, `sandloop stop`) in any process never interleave;
//! the lock is acquired with a timeout ([`DEFAULT_LOCK_TIMEOUT`]) and is an
//! advisory OS file lock (`flock` on Unix), released when the holder exits
//! or crashes. Writes are atomic: the state is serialised before any file is
//! touched, written to `state.json.tmp`, fsynced, renamed over `state.json`
//! and the directory fsynced, so readers see the old state or the new one,
//! never a mix.
//!
//! The store is generic over the state type; [`StoredState`] is what it
//! needs to know about a state, and [`super::models::LoopState`] implements
//! it.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::config::SANDLOOP_DIRNAME;
use super::models::{DEFAULT_LOCK_TIMEOUT_SECONDS, LoopState};
use super::sessions::{self, SessionError};
use sandloop_core::atomic::sync_dir;

/// Name of the state file in a session directory (reference
/// `STATE_FILENAME`; the same as [`sessions::STATE_FILENAME`]).
pub const STATE_FILENAME: &str = sessions::STATE_FILENAME;
/// Name of the lock file, next to the state file, or directly in
/// `.sandloop/` while a store has no state file yet (reference
/// `LOCK_FILENAME`).
pub const LOCK_FILENAME: &str = "state.json.lock";
/// Name of the temporary file a write goes through, next to the state file
/// (reference `TEMP_FILENAME`).
pub const TEMP_FILENAME: &str = "state.json.tmp";
/// Prefix of an archived state file, followed by a `YYYYmmddTHHMMSSZ` UTC
/// stamp and `.json` (reference `ARCHIVE_PREFIX`).
pub const ARCHIVE_PREFIX: &str = "state.json.archive_";
/// Statuses after which a loop never runs again (reference
/// `TERMINAL_STATUSES`); the state of a new start is archived when it has
/// one of these.
pub const TERMINAL_STATUSES: [&str; 4] = ["stopped", "goal_met", "failed", "max_turns"];
/// How long a store waits for the lock unless told otherwise:
/// [`DEFAULT_LOCK_TIMEOUT_SECONDS`] (30 s, as in the reference).
pub const DEFAULT_LOCK_TIMEOUT: Duration =
    Duration::from_millis((DEFAULT_LOCK_TIMEOUT_SECONDS * 1000.0) as u64);

/// Longest sleep between two attempts to take the lock (the reference's
/// `filelock` polls every 50 ms).
const MAX_LOCK_POLL: Duration = Duration::from_millis(50);

/// True when `status` is one of [`TERMINAL_STATUSES`].
pub fn is_terminal_status(status: &str) -> bool {
    TERMINAL_STATUSES.contains(&status)
}

/// What a [`StateStore`] needs to know about the state it keeps.
pub trait StoredState: Serialize + DeserializeOwned {
    /// The session the state belongs to; a store with no state file yet
    /// writes to that session's `state.json` (reference
    /// `LoopState.active_session_id`).
    fn active_session_id(&self) -> &str;
    /// True when the loop has ended for good (reference
    /// `StateStore.is_terminal_state`: the status is one of
    /// [`TERMINAL_STATUSES`]).
    fn is_terminal(&self) -> bool;
}

impl StoredState for LoopState {
    fn active_session_id(&self) -> &str {
        &self.active_session_id
    }

    fn is_terminal(&self) -> bool {
        is_terminal_status(self.status.as_str())
    }
}

/// Why a [`StateStore`] operation failed. Nothing is written when any of
/// these is returned, except where [`StateStoreError::Io`] says so.
#[derive(Debug, thiserror::Error)]
pub enum StateStoreError {
    /// Another handle (this process or another) held the lock for the whole
    /// timeout.
    #[error(
        "timed out after {:.1}s waiting for the state lock {} (held by another sandloop coordinator or command)",
        timeout.as_secs_f64(),
        lock_path.display()
    )]
    LockTimeout {
        /// The lock file.
        lock_path: PathBuf,
        /// How long the store waited.
        timeout: Duration,
    },
    /// The lock file could not be created, opened or locked.
    #[error("cannot lock {}: {source}", lock_path.display())]
    Lock {
        /// The lock file.
        lock_path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The state file is not JSON or does not have the state's shape.
    #[error("corrupt state file {}: {source}", path.display())]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// 1-based line of the error in the file (serde's position).
        line: usize,
        /// 1-based column of the error in the line (0 when at a line's
        /// start, e.g. an empty file).
        column: usize,
        /// The parse error (its message repeats line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The state could not be serialised; no file was touched.
    #[error("cannot serialise the state for {}: {source}", path.display())]
    Serialize {
        /// The state file that would have been written.
        path: PathBuf,
        /// The serialisation error.
        #[source]
        source: serde_json::Error,
    },
    /// Reading, writing, renaming or removing a file failed. A failed write
    /// leaves the previous `state.json` in place (a stray `state.json.tmp`
    /// at most).
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. `"rename"`.
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Finding the latest session's state file failed.
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl StateStoreError {
    fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Reads and writes one session's state file under its lock (reference
/// `StateStore`).
///
/// A store made with [`StateStore::new`] has no state file of its own: it
/// follows the latest top-level session's `state.json`
/// ([`sessions::latest_top_level_state_path`]) and pins to it on the first
/// read that finds one, or to the state's session
/// ([`StoredState::active_session_id`]) on its first write, as the
/// reference does. [`StateStore::with_state_path`] pins from the start.
/// Methods take `&self`; a store can be shared between threads, and
/// separate stores on one file exclude each other through the lock.
///
/// Do not call a store from inside a [`StateStore::mutate`] closure: the
/// lock is not re-entrant, and the inner call waits for the timeout and
/// fails.
#[derive(Debug)]
pub struct StateStore<S> {
    repo_root: PathBuf,
    sandloop_dir: PathBuf,
    state_path: Mutex<Option<PathBuf>>,
    lock_timeout: Duration,
    state: PhantomData<fn() -> S>,
}

impl<S> StateStore<S> {
    /// A store for `repo_root` that follows the latest top-level session
    /// (see the type's docs); lock timeout [`DEFAULT_LOCK_TIMEOUT`].
    /// Touches nothing on disk.
    pub fn new(repo_root: impl Into<PathBuf>) -> Self {
        let repo_root = repo_root.into();
        Self {
            sandloop_dir: repo_root.join(SANDLOOP_DIRNAME),
            repo_root,
            state_path: Mutex::new(None),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            state: PhantomData,
        }
    }

    /// A store for the state file `state_path` (normally
    /// [`sessions::state_path`]); the lock, temporary and archive files sit
    /// next to it. Touches nothing on disk.
    pub fn with_state_path(repo_root: impl Into<PathBuf>, state_path: impl Into<PathBuf>) -> Self {
        let store = Self::new(repo_root);
        *store.pinned() = Some(state_path.into());
        store
    }

    /// The same store with a different lock timeout; zero tries the lock
    /// once.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The repository root the store was made for.
    pub fn repo_root(&self) -> &Path {
        &self.repo_root
    }

    /// The state file the store is pinned to, if any yet.
    pub fn state_path(&self) -> Option<PathBuf> {
        self.pinned().clone()
    }

    /// How long an operation waits for the lock.
    pub fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    fn pinned(&self) -> std::sync::MutexGuard<'_, Option<PathBuf>> {
        // No user code runs while this mutex is held, so poisoning is moot.
        self.state_path.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pinned state file, else the latest top-level session's (reference
    /// `_effective_state_path`).
    fn effective_state_path(&self) -> Result<Option<PathBuf>, StateStoreError> {
        if let Some(path) = self.pinned().clone() {
            return Ok(Some(path));
        }
        Ok(sessions::latest_top_level_state_path(&self.repo_root)?)
    }

    /// Takes the lock: `state.json.lock` next to the effective state file,
    /// or `.sandloop/state.json.lock` when there is none (reference
    /// `_lock`, which also creates `.sandloop/`).
    fn lock(&self) -> Result<LockGuard, StateStoreError> {
        fs::create_dir_all(&self.sandloop_dir)
            .map_err(|e| StateStoreError::io("create directory", &self.sandloop_dir, e))?;
        let lock_path = match self.effective_state_path()? {
            Some(path) => path.with_file_name(LOCK_FILENAME),
            None => self.sandloop_dir.join(LOCK_FILENAME),
        };
        LockGuard::acquire(lock_path, self.lock_timeout)
    }
}

impl<S: DeserializeOwned> StateStore<S> {
    /// The current state, or `None` when there is no state file (reference
    /// `read_state`). Pins the store to the file it read. Errors: lock
    /// timeout, unreadable or corrupt file.
    pub fn read_state(&self) -> Result<Option<S>, StateStoreError> {
        let _lock = self.lock()?;
        self.read_unlocked()
    }

    /// Moves the state file aside as
    /// `state.json.archive_<YYYYmmddTHHMMSSZ>.json` in the same directory
    /// and returns the archive's path; `None` when there is no state to
    /// archive (reference `archive_state`, used when a new start finds a
    /// terminal state). Unlike the reference, an archive of the same second
    /// is never overwritten: `_1`, `_2`, ... is appended to the stamp.
    /// Errors: lock timeout, unreadable or corrupt state (a corrupt file is
    /// not archived), rename failure.
    pub fn archive_state(&self) -> Result<Option<PathBuf>, StateStoreError> {
        let _lock = self.lock()?;
        if self.read_unlocked()?.is_none() {
            return Ok(None);
        }
        let Some(state_path) = self.state_path() else {
            return Ok(None);
        };
        let archive = archive_path(&state_path, &sessions::basic_utc_stamp());
        fs::rename(&state_path, &archive)
            .map_err(|e| StateStoreError::io("archive", &state_path, e))?;
        if let Some(dir) = state_path.parent() {
            sync_dir(dir).map_err(|e| StateStoreError::io("sync directory", dir, e))?;
        }
        Ok(Some(archive))
    }

    /// Deletes the pinned state file if it exists (reference `clear_state`:
    /// a store that is not pinned yet deletes nothing). Errors: lock
    /// timeout, removal failure.
    pub fn clear_state(&self) -> Result<(), StateStoreError> {
        let _lock = self.lock()?;
        if let Some(path) = self.state_path() {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StateStoreError::io("remove", &path, e)),
            }
        }
        Ok(())
    }

    /// Reference `_read_state_unlocked`: reads the effective state file,
    /// pinning the store to it.
    fn read_unlocked(&self) -> Result<Option<S>, StateStoreError> {
        let Some(path) = self.effective_state_path()? else {
            return Ok(None);
        };
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StateStoreError::io("read", &path, e)),
        };
        *self.pinned() = Some(path.clone());
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StateStoreError::Corrupt {
                line: source.line(),
                column: source.column(),
                path,
                source,
            })
    }
}

impl<S: StoredState> StateStore<S> {
    /// Replaces the state with `state` atomically (reference `write_state`).
    /// A store not yet pinned writes to the `state.json` of
    /// `state.active_session_id()` and pins to it. Errors: lock timeout,
    /// serialisation, I/O; on any error the previous file is intact.
    pub fn write_state(&self, state: &S) -> Result<(), StateStoreError> {
        let _lock = self.lock()?;
        self.write_unlocked(state)
    }

    /// Reads the state, hands it to `mutator` and writes the state it
    /// returns, all under one hold of the lock; returns the mutator's
    /// second value (reference `mutate`). Errors as [`Self::read_state`] and
    /// [`Self::write_state`]; nothing is written if reading fails or the
    /// mutator panics.
    pub fn mutate<T>(
        &self,
        mutator: impl FnOnce(Option<S>) -> (S, T),
    ) -> Result<T, StateStoreError> {
        self.try_mutate(|state| Ok::<_, StateStoreError>(mutator(state)))
    }

    /// [`Self::mutate`] with a fallible mutator: when it returns `Err`,
    /// nothing is written and the error is returned (the reference's
    /// mutators raise for the same effect).
    pub fn try_mutate<T, E>(
        &self,
        mutator: impl FnOnce(Option<S>) -> Result<(S, T), E>,
    ) -> Result<T, E>
    where
        E: From<StateStoreError>,
    {
        let _lock = self.lock()?;
        let current = self.read_unlocked()?;
        let (next, result) = mutator(current)?;
        self.write_unlocked(&next)?;
        Ok(result)
    }

    /// True when `state` is terminal (reference `is_terminal_state`; see
    /// [`StoredState::is_terminal`]).
    pub fn is_terminal_state(&self, state: &S) -> bool {
        state.is_terminal()
    }

    /// Reference `_write_state_unlocked`, made atomic and durable.
    fn write_unlocked(&self, state: &S) -> Result<(), StateStoreError> {
        let path = {
            let mut pinned = self.pinned();
            pinned
                .get_or_insert_with(|| {
                    sessions::state_path(&self.repo_root, state.active_session_id())
                })
                .clone()
        };
        // Serialise first: a state that cannot be serialised touches nothing.
        let payload =
            serde_json::to_vec_pretty(state).map_err(|source| StateStoreError::Serialize {
                path: path.clone(),
                source,
            })?;
        write_atomic(&path, &payload)
    }
}

/// `payload` to `path` via [`TEMP_FILENAME`] in the same directory: write,
/// fsync, rename, fsync the directory. On failure the temporary file is
/// removed (best effort) and `path` is untouched.
fn write_atomic(path: &Path, payload: &[u8]) -> Result<(), StateStoreError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(|e| StateStoreError::io("create directory", dir, e))?;
    let temp = path.with_file_name(TEMP_FILENAME);
    let written = File::create(&temp)
        .map_err(|e| StateStoreError::io("create", &temp, e))
        .and_then(|mut file| {
            file.write_all(payload)
                .and_then(|()| file.sync_all())
                .map_err(|e| StateStoreError::io("write", &temp, e))
        })
        .and_then(|()| {
            fs::rename(&temp, path).map_err(|e| StateStoreError::io("rename into place", path, e))
        });
    if let Err(error) = written {
        if temp.is_file() {
            let _ = fs::remove_file(&temp);
        }
        return Err(error);
    }
    sync_dir(dir).map_err(|e| StateStoreError::io("sync directory", dir, e))
}

/// `<dir of state_path>/state.json.archive_<stamp>.json`, or with `_1`,
/// `_2`, ... after the stamp when that exists.
fn archive_path(state_path: &Path, stamp: &str) -> PathBuf {
    let first = state_path.with_file_name(format!("{ARCHIVE_PREFIX}{stamp}.json"));
    if !first.exists() {
        return first;
    }
    (1u32..)
        .map(|n| state_path.with_file_name(format!("{ARCHIVE_PREFIX}{stamp}_{n}.json")))
        .find(|candidate| !candidate.exists())
        .expect("some archive suffix is free")
}

/// An exclusive lock on a lock file, released when dropped.
#[derive(Debug)]
struct LockGuard {
    file: File,
}

impl LockGuard {
    /// Opens (creating it and its directory) `lock_path` and takes an
    /// exclusive lock, retrying with short sleeps (1 ms doubling up to
    /// [`MAX_LOCK_POLL`]) until `timeout` has passed.
    fn acquire(lock_path: PathBuf, timeout: Duration) -> Result<Self, StateStoreError> {
        let lock_error = |source: io::Error, lock_path: &Path| StateStoreError::Lock {
            lock_path: lock_path.to_path_buf(),
            source,
        };
        if let Some(dir) = lock_path.parent() {
            fs::create_dir_all(dir).map_err(|e| lock_error(e, &lock_path))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| lock_error(e, &lock_path))?;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Self { file }),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(lock_error(e, &lock_path)),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StateStoreError::LockTimeout { lock_path, timeout });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(MAX_LOCK_POLL);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release immediate even if the descriptor were shared.
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
#[path = "state_store_tests.rs"]
mod tests;
