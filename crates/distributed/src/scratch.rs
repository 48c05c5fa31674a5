//! A worker's scratch directory: where its lanes keep the durable states
//! of replay points until a unit's result ships them ([`crate::points`]).
//!
//! One directory per worker process, `sandloop-worker-PID-XXXXXX` in the
//! system's temporary directory (`TMPDIR`), each lane's points in a
//! directory of its own inside it. It is removed when the worker returns,
//! by the command line's stop handler on Ctrl-C or `SIGTERM` (through
//! [`Scratch::path`]), and — for a worker killed outright (`kill -9`, a
//! crash) — by the next worker started on the same machine, which removes
//! every such directory whose process is gone ([`Scratch::create`]).

use std::path::{Path, PathBuf};

/// The name every scratch directory starts with, followed by the owning
/// process's id and `-`.
const PREFIX: &str = "sandloop-worker-";

/// A worker process's scratch directory, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// Removes the scratch directories of workers that are no longer
    /// running (see the module doc), then makes this process's own.
    ///
    /// # Errors
    /// The directory cannot be made in the temporary directory.
    pub fn create() -> std::io::Result<Self> {
        let parent = std::env::temp_dir();
        for stale in stale_dirs(&parent) {
            match std::fs::remove_dir_all(&stale) {
                Ok(()) => tracing::info!(
                    "removed {}, left by a worker that was killed",
                    stale.display()
                ),
                Err(error) => tracing::warn!(
                    "could not remove {}, left by a worker that was killed: {error}",
                    stale.display()
                ),
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}{}-", std::process::id()))
            .tempdir_in(parent)?;
        Ok(Self { dir })
    }

    /// The directory; a stop handler removes it with
    /// `std::fs::remove_dir_all` before the process exits.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The scratch directories in `parent` whose worker is gone: named
/// `sandloop-worker-PID-…` with no process `PID` running. Only where
/// `/proc` lists processes (Linux); elsewhere none.
fn stale_dirs(parent: &Path) -> Vec<PathBuf> {
    if !Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid = owner_pid(name.to_str()?)?;
            let gone = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
            gone.then(|| entry.path())
        })
        .collect()
}

/// The process id in a scratch directory's name, `None` for any other name.
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, _) = name.strip_prefix(PREFIX)?.split_once('-')?;
    // Digits only: `parse` alone would also take a leading `+`.
    if !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scratch_names_carry_an_owner() {
        assert_eq!(owner_pid("sandloop-worker-4242-a1B2c3"), Some(4242));
        for other in [
            "sandloop-worker",
            "sandloop-worker-points-a1B2c3",
            "sandloop-worker--x",
            "sandloop-worker-12x-y",
            "sandloop-worker-4242",
            "other-4242-x",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn directories_of_gone_workers_are_stale_and_live_ones_are_kept() {
        let parent = tempfile::tempdir().unwrap();
        // Past the kernel's largest process id (4,194,304): never running.
        let gone = parent.path().join("sandloop-worker-99999999-abc");
        let mine = parent
            .path()
            .join(format!("sandloop-worker-{}-abc", std::process::id()));
        let cache = parent.path().join("sandloop-worker");
        for dir in [&gone, &mine, &cache] {
            std::fs::create_dir(dir).unwrap();
        }
        assert_eq!(stale_dirs(parent.path()), vec![gone]);
    }
}
