//! One process at a time per directory: an exclusive advisory OS lock
//! (`flock` on Unix) on the file `.sandloop.lock` in it, held for the
//! process's lifetime and released when it exits or is killed. The holder
//! writes its pid into the file, so a refused process can name it.
//!
//! `sandloop run` and `sandloop replay` lock a run directory with it;
//! `sandloop loop run` and `sandloop loop serve` lock a repository's
//! `.sandloop/` directory, so one coordinator drives a loop at a time.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the locked directory.
pub const LOCK_FILENAME: &str = ".sandloop.lock";

/// A held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    /// Another process holds the lock. `holder` is the pid it wrote, when
    /// readable (a holder that has just taken the lock may not have written
    /// it yet).
    #[error("{} is held by {}", path.display(), Holder(*holder))]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid.
        holder: Option<u32>,
    },
    /// The lock file could not be created, opened or locked.
    #[error("cannot lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// Shows a holder as `process 1234`, or `another process` when its pid is
/// unknown.
pub struct Holder(pub Option<u32>);

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(pid) => write!(f, "process {pid}"),
            None => f.write_str("another process"),
        }
    }
}

/// Take the exclusive lock on `dir/.sandloop.lock` without waiting, and
/// write this process's pid into it. The directory must exist; the lock
/// file is created when missing, and nothing else in `dir` is touched.
///
/// # Errors
/// [`DirLockError::Held`] naming the holder's pid when another process holds
/// it (or another handle in this process); [`DirLockError::Io`] otherwise.
pub fn lock_dir(dir: &Path) -> Result<DirLock, DirLockError> {
    let path = dir.join(LOCK_FILENAME);
    let io_error = |source| DirLockError::Io {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_error)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let holder = written_pid(&mut file);
            return Err(DirLockError::Held { path, holder });
        }
        Err(TryLockError::Error(source)) => return Err(io_error(source)),
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.flush())
        .map_err(io_error)?;
    Ok(DirLock { _file: file })
}

/// Who holds the lock of `dir`, without taking it or creating anything:
/// `None` when no process holds it (or there is no lock file).
pub fn holder_of(dir: &Path) -> Option<Holder> {
    let mut file = File::open(dir.join(LOCK_FILENAME)).ok()?;
    match file.try_lock_shared() {
        Ok(()) => None,
        Err(TryLockError::WouldBlock) => Some(Holder(written_pid(&mut file))),
        Err(TryLockError::Error(_)) => None,
    }
}

/// The pid the lock's holder wrote into the lock file, when readable.
fn written_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_dir(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILENAME)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        match lock_dir(dir.path()) {
            Err(DirLockError::Held { path, holder }) => {
                assert_eq!(path, dir.path().join(LOCK_FILENAME));
                assert_eq!(holder, Some(std::process::id()));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        let error = lock_dir(dir.path()).unwrap_err().to_string();
        assert!(
            error.ends_with(&format!("is held by process {}", std::process::id())),
            "{error}"
        );
        assert!(matches!(
            holder_of(dir.path()),
            Some(Holder(Some(pid))) if pid == std::process::id()
        ));
        drop(first);
        assert!(holder_of(dir.path()).is_none());
        lock_dir(dir.path()).unwrap();
        assert!(matches!(
            lock_dir(&dir.path().join("missing")),
            Err(DirLockError::Io { .. })
        ));
    }
}
