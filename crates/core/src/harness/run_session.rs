//! A run directory taken for one invocation of a run: the rules that decide
//! whether `--out` may be used, and what happens to it before the arm runs.
//!
//! In order, as `sandloop run` applies them:
//!
//! 1. [`check_out_dir`], before anything is loaded: a fresh run refuses a
//!    directory that holds one, a resume requires one.
//! 2. [`check_resume`], before anything is written: the grants are the same
//!    directories as before ([`super::grant_check`]), the checkpoint fits
//!    this run's runtime signature, and the JSONL files still hold every
//!    byte it covers.
//! 3. [`RunSession::open`]: create the directory, take its lock
//!    ([`crate::dir_lock`]), check again under the lock, start over a
//!    resumed run that never checkpointed, cut back the replay points of the
//!    epochs that run again, and drop a stale `failure.json`.
//! 4. [`RunSession::record_invocation`] (`manifest.json`) and, when the run
//!    fails, [`RunSession::record_failure`] (`failure.json`).

use std::io;
use std::path::{Path, PathBuf};

use super::checkpoint::{RuntimeSignature, load_arm_checkpoint};
use super::grant_check;
use super::items_file::scan_newlines;
use super::manifest::{
    HostInfo, Invocation, ManifestAdapter, RUN_MANIFEST_SCHEMA_VERSION, RunManifest,
};
use super::run_files::{
    ADAPTER_OUTPUT_DIR, CHECKPOINT_FILE, EPOCHS_FILE, FAILURE_FILE, MANIFEST_FILE, RECORDS_FILE,
    RunFailure, SUMMARY_FILE, TRACES_DIR, read_run_file, write_run_file,
};
use crate::dir_grant::DirGrant;
use crate::dir_lock::{DirLock, DirLockError, Holder, LOCK_FILENAME, holder_of, lock_dir};
use crate::replay::durable::{DurableError, POINTS_FILE, STATES_DIR, cut_back_points};

/// Files whose presence means a directory already holds a run.
const RUN_FILES: &[&str] = &[MANIFEST_FILE, RECORDS_FILE, CHECKPOINT_FILE, SUMMARY_FILE];

/// Folders a run writes besides its files.
const RUN_FOLDERS: &[&str] = &[TRACES_DIR, ADAPTER_OUTPUT_DIR, STATES_DIR];

/// Why a run directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The directory is not fit for this invocation (exists, missing,
    /// damaged, in use, another grant): nothing was written. The CLI's
    /// exit 2.
    #[error("{0}")]
    Refused(String),
    /// The directory could not be written. The CLI's exit 1.
    #[error("{0}")]
    Io(String),
}

/// Refuse a fresh run into `out` when it holds one, or when it holds files
/// no run writes (a run never mixes its files with others); require a run
/// to resume. `out` must be a directory or missing, never a symbolic link,
/// and nothing in it a symbolic link either.
///
/// # Errors
/// [`SessionError::Refused`] naming the directory and the files found, the
/// first foreign entry, or the link and its target.
pub fn check_out_dir(out: &Path, resume: bool) -> Result<(), SessionError> {
    check_out_entry(out)?;
    let (names, link) = entry_names(out)?;
    // Every name in a run directory is sandloop's own file or folder: a
    // link there would have the run write (or a resume cut back) where it
    // points.
    if let Some(link) = link {
        return Err(SessionError::Refused(format!(
            "{} is a symbolic link: a run writes no file through a link; put the file or \
             folder it points to in its place",
            out.join(link).display()
        )));
    }
    let found: Vec<&str> = RUN_FILES
        .iter()
        .copied()
        .filter(|run_file| names.iter().any(|name| name == run_file))
        .collect();
    if resume {
        if found.is_empty() {
            return Err(SessionError::Refused(format!(
                "--resume: {} holds no run to continue (no manifest.json or checkpoint.json)",
                out.display()
            )));
        }
    } else if !found.is_empty() {
        return Err(SessionError::Refused(format!(
            "{} already holds a run ({}); continue it with --resume or choose another --out",
            out.display(),
            found.join(", ")
        )));
    } else if let Some(foreign) = names
        .iter()
        .find(|name| !RUN_LEFTOVERS.contains(&name.as_str()))
    {
        return Err(SessionError::Refused(format!(
            "{} is not empty and holds no run ({} is not a file sandloop writes): a run never \
             writes among other files; choose an empty or new --out",
            out.display(),
            foreign
        )));
    }
    Ok(())
}

/// Refuse an `out` that is a symbolic link (a run's files would land where
/// the link points, which the operator did not name) or that exists as
/// anything but a directory.
fn check_out_entry(out: &Path) -> Result<(), SessionError> {
    match std::fs::symlink_metadata(out) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(SessionError::Refused(format!(
            "cannot read {}: {error}",
            out.display()
        ))),
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(out)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            Err(SessionError::Refused(format!(
                "{} is a symbolic link (to {target}): a run writes only into the directory it \
                 is given; pass the real path as --out",
                out.display()
            )))
        }
        Ok(meta) if !meta.is_dir() => Err(SessionError::Refused(format!(
            "{} exists and is not a directory; --out names the run's directory",
            out.display()
        ))),
        Ok(_) => Ok(()),
    }
}

/// Names a run writes in its directory (besides [`RUN_FILES`]): a
/// directory holding only these, left by a run that stopped before its
/// manifest, may take a new run.
const RUN_LEFTOVERS: &[&str] = &[
    EPOCHS_FILE,
    FAILURE_FILE,
    POINTS_FILE,
    LOCK_FILENAME,
    TRACES_DIR,
    ADAPTER_OUTPUT_DIR,
    STATES_DIR,
];

/// Refuses the run directory `out` while another process holds its lock
/// (a run still going, or a `sandloop replay` of it), before
/// [`check_out_dir`] would advise resuming it. The lock is not taken:
/// [`RunSession::open`] takes it.
///
/// # Errors
/// [`SessionError::Refused`] naming the directory and the holder's pid.
pub fn check_not_in_use(out: &Path) -> Result<(), SessionError> {
    match holder_of(out) {
        Some(holder) => Err(in_use(out, holder)),
        None => Ok(()),
    }
}

/// The refusal of a run directory another process holds.
fn in_use(out: &Path, holder: Holder) -> SessionError {
    SessionError::Refused(format!(
        "{} is in use by another sandloop run ({holder}); wait for it to end, or choose \
         another --out",
        out.display()
    ))
}

/// The names in the directory `out`, sorted, and the first of them that
/// is a symbolic link; none when it does not exist.
fn entry_names(out: &Path) -> Result<(Vec<String>, Option<String>), SessionError> {
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
        Err(error) => {
            return Err(SessionError::Refused(format!(
                "cannot list {}: {error}",
                out.display()
            )));
        }
    };
    let mut names = Vec::new();
    let mut link = None;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        // The listing's own type: no `stat` per name.
        if entry.file_type().is_ok_and(|kind| kind.is_symlink())
            && link.as_ref().is_none_or(|first| name < *first)
        {
            link = Some(name.clone());
        }
        names.push(name);
    }
    names.sort();
    Ok((names, link))
}

/// What a resume may continue from: the first epoch to run, when the run
/// checkpointed at all (`None`: it never finished an epoch and starts
/// over). Checks, writing nothing, that `dirs` are the directories the run
/// was granted, that the checkpoint carries `signature`, and that
/// `records.jsonl` and `epochs.jsonl` hold at least the bytes it covers.
///
/// # Errors
/// [`SessionError::Refused`] naming the grant, the checkpoint's problem or
/// the damaged file.
pub fn check_resume(
    out: &Path,
    signature: &RuntimeSignature,
    dirs: &[DirGrant],
) -> Result<Option<u32>, SessionError> {
    grant_check::check_unchanged(&out.join(MANIFEST_FILE), dirs).map_err(SessionError::Refused)?;
    let checkpoint = out.join(CHECKPOINT_FILE);
    if !checkpoint.is_file() {
        refuse_lost_checkpoint(out)?;
        return Ok(None);
    }
    let state = load_arm_checkpoint(&checkpoint, signature)
        .map_err(|error| SessionError::Refused(error.to_string()))?;
    for (name, covered) in [
        (RECORDS_FILE, state.records_jsonl_bytes),
        (EPOCHS_FILE, state.epochs_jsonl_bytes),
    ] {
        let length = std::fs::metadata(out.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        if length < covered {
            return Err(SessionError::Refused(format!(
                "{} is damaged: {name} holds {length} bytes but the checkpoint covers {covered}; \
                 it is left as it is and the run is not resumed",
                out.display()
            )));
        }
    }
    Ok(Some(state.next_epoch))
}

/// Refuse to start over a run without `checkpoint.json` that finished an
/// epoch: its checkpoint was lost (deleted, or never written), and starting
/// over would discard every record it holds. A run without `summary.json`
/// and with at most one line in `epochs.jsonl` (its line may be written
/// before its checkpoint) may start over.
fn refuse_lost_checkpoint(out: &Path) -> Result<(), SessionError> {
    let finished_epochs = complete_lines(out, EPOCHS_FILE);
    let summarised = out.join(SUMMARY_FILE).exists();
    // The last epoch's line may precede its checkpoint (a run failing in
    // between): only a second line, or a summary, proves one was written.
    if finished_epochs < 2 && !summarised {
        return Ok(());
    }
    let what = if summarised {
        format!("a {SUMMARY_FILE}")
    } else {
        format!("{finished_epochs} finished epoch(s) in {EPOCHS_FILE}")
    };
    Err(SessionError::Refused(format!(
        "--resume: {} has no {CHECKPOINT_FILE} but holds {what}: its checkpoint is lost, and \
         starting over would discard its records; nothing was changed (restore {CHECKPOINT_FILE}, \
         or start a new run with another --out)",
        out.display()
    )))
}

/// How many records `out`'s `records.jsonl` holds (complete lines): what a
/// resume of a run that never finished an epoch discards.
pub fn unfinished_record_count(out: &Path) -> usize {
    complete_lines(out, RECORDS_FILE)
}

/// The complete (newline-ended) lines of `out`'s file `name`, read in
/// chunks; 0 when it cannot be read.
fn complete_lines(out: &Path, name: &str) -> usize {
    std::fs::File::open(out.join(name))
        .and_then(scan_newlines)
        .map_or(0, |(newlines, _)| newlines)
}

/// The `state.next_epoch` of `out`'s checkpoint, `None` without one: what
/// [`RunSession::open`] compares with what [`check_resume`] read.
fn checkpointed_next_epoch(out: &Path) -> Result<Option<u32>, SessionError> {
    let path = out.join(CHECKPOINT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(SessionError::Io(format!(
                "cannot read {}: {error}",
                path.display()
            )));
        }
    };
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|payload| payload.pointer("/state/next_epoch")?.as_u64())
        .and_then(|epoch| u32::try_from(epoch).ok())
        .map(Some)
        .ok_or_else(|| {
            SessionError::Refused(format!(
                "{}: state.next_epoch is missing or not an epoch number",
                path.display()
            ))
        })
}

/// A run directory held for one invocation: locked until dropped.
#[derive(Debug)]
pub struct RunSession {
    out: PathBuf,
    resume: bool,
    _lock: DirLock,
}

impl RunSession {
    /// Take `out` for a run. `resumed_at` is what [`check_resume`] returned
    /// (ignored for a fresh run). A resume without a checkpoint removes what
    /// the unfinished run left (keeping `manifest.json`) and runs fresh:
    /// [`RunSession::resumes`] then says false.
    ///
    /// # Errors
    /// [`SessionError::Refused`] when another process holds the directory
    /// (naming it), started a run in it meanwhile, or moved its checkpoint
    /// on since `resumed_at` was read (nothing is changed then: a resume
    /// never cuts back or clears with a stale checkpoint); [`SessionError::Io`]
    /// when it cannot be created, locked or cleared.
    pub fn open(out: &Path, resume: bool, resumed_at: Option<u32>) -> Result<Self, SessionError> {
        std::fs::create_dir_all(out).map_err(|error| {
            SessionError::Refused(format!("cannot create {}: {error}", out.display()))
        })?;
        let lock = lock_dir(out).map_err(|error| match error {
            DirLockError::Held { holder, .. } => in_use(out, Holder(holder)),
            other => SessionError::Io(other.to_string()),
        })?;
        if resume {
            // What this resume keeps or removes was decided from the
            // checkpoint read before the lock; the run may have moved on
            // since (its own process finishing), so decide only if the
            // checkpoint still says the same.
            let now = checkpointed_next_epoch(out)?;
            if now != resumed_at {
                let shown = |epoch: Option<u32>| {
                    epoch.map_or_else(
                        || "no checkpoint".to_string(),
                        |e| format!("next epoch {e}"),
                    )
                };
                return Err(SessionError::Refused(format!(
                    "{} moved on while this resume was starting (its checkpoint said {} when \
                     read, {} under the lock): nothing was changed; run the same command again",
                    out.display(),
                    shown(resumed_at),
                    shown(now)
                )));
            }
        }
        let mut resume = resume;
        if !resume {
            // Another process may have started this run between the first
            // check and the lock.
            check_out_dir(out, false)?;
            // What an attempt left before its manifest (no run to keep) is
            // not mixed into this run's files.
            clear_unfinished_run(out)?;
        } else if resumed_at.is_none() {
            // The run never finished an epoch: nothing is kept.
            clear_unfinished_run(out)?;
            resume = false;
        }
        if let Some(next_epoch) = resumed_at.filter(|_| resume) {
            // Points of the epochs that run again are captured again.
            cut_back_points(out, next_epoch).map_err(|error| match error {
                DurableError::Malformed { .. }
                | DurableError::PackTooShort { .. }
                | DurableError::Tampered { .. } => SessionError::Refused(error.to_string()),
                other => SessionError::Io(format!("cannot cut back {POINTS_FILE}: {other}")),
            })?;
        }
        let _ = std::fs::remove_file(out.join(FAILURE_FILE));
        Ok(Self {
            out: out.to_path_buf(),
            resume,
            _lock: lock,
        })
    }

    /// Whether the run continues from a checkpoint.
    pub fn resumes(&self) -> bool {
        self.resume
    }

    /// The run directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Write `manifest.json` ([`RunManifest`]) for this invocation: `host`,
    /// the WIT `wit`, the `adapter`, the invocations the manifest already
    /// holds (a resume appends to them; an unreadable manifest keeps none)
    /// then `invocation`, and the grants' identities (those recorded before
    /// are kept).
    ///
    /// # Errors
    /// [`SessionError::Io`] when the file cannot be written.
    pub fn record_invocation(
        &self,
        host: HostInfo,
        wit: String,
        adapter: ManifestAdapter,
        invocation: Invocation,
        dirs: &[DirGrant],
    ) -> Result<(), SessionError> {
        let path = self.out.join(MANIFEST_FILE);
        let mut invocations: Vec<Invocation> = if invocation.resume {
            read_run_file::<RunManifest>(&path)
                .map(|manifest| manifest.invocations)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        invocations.push(invocation);
        let manifest = RunManifest {
            schema_version: RUN_MANIFEST_SCHEMA_VERSION.to_owned(),
            host,
            wit,
            adapter,
            invocations,
            // A fresh run has no manifest yet: every grant is recorded anew.
            grants: grant_check::to_record(&path, dirs),
        };
        write_run_file(&path, &manifest).map_err(|error| SessionError::Io(error.to_string()))
    }

    /// Write `failure.json` for a run that failed with `message`, and
    /// return what it holds. Best effort: the run is failing already, and
    /// its error is what the user sees.
    pub fn record_failure(&self, message: &str) -> RunFailure {
        let failure = RunFailure::new(message);
        let _ = write_run_file(&self.out.join(FAILURE_FILE), &failure);
        failure
    }
}

/// Remove what a run that never checkpointed left behind (its records are
/// not covered by any checkpoint), keeping `manifest.json`; for a fresh
/// run, what an attempt left before its manifest.
fn clear_unfinished_run(out: &Path) -> Result<(), SessionError> {
    for name in [RECORDS_FILE, EPOCHS_FILE, SUMMARY_FILE] {
        match std::fs::remove_file(out.join(name)) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(SessionError::Io(format!("cannot remove {name}: {error}"))),
        }
    }
    let _ = std::fs::remove_file(out.join(POINTS_FILE));
    for folder in RUN_FOLDERS {
        let _ = std::fs::remove_dir_all(out.join(folder));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::durable::STATES_PACK;

    #[test]
    fn a_fresh_run_refuses_a_used_directory_and_a_resume_requires_one() {
        let dir = tempfile::tempdir().unwrap();
        check_out_dir(dir.path(), false).unwrap();
        let error = check_out_dir(dir.path(), true).unwrap_err().to_string();
        assert!(error.contains("holds no run to continue"), "{error}");
        std::fs::write(dir.path().join(RECORDS_FILE), "").unwrap();
        let error = check_out_dir(dir.path(), false).unwrap_err().to_string();
        assert!(
            error.contains("already holds a run (records.jsonl)"),
            "{error}"
        );
        check_out_dir(dir.path(), true).unwrap();
        // While another process runs in it, neither is advised: it is in use.
        let lock = lock_dir(dir.path()).unwrap();
        let error = check_not_in_use(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("is in use by another sandloop run (process ")
                && !error.contains("--resume"),
            "{error}"
        );
        drop(lock);
        check_not_in_use(dir.path()).unwrap();
    }

    #[test]
    fn a_link_inside_the_run_directory_is_refused_before_anything_is_written() {
        let outside = tempfile::tempdir().unwrap();
        for (name, resume) in [(STATES_DIR, true), (TRACES_DIR, true), (STATES_DIR, false)] {
            let dir = tempfile::tempdir().unwrap();
            if resume {
                std::fs::write(dir.path().join(RECORDS_FILE), "").unwrap();
            }
            std::os::unix::fs::symlink(outside.path(), dir.path().join(name)).unwrap();
            let error = check_out_dir(dir.path(), resume).unwrap_err().to_string();
            assert!(
                error.contains(&format!("{name} is a symbolic link")),
                "{name}, resume {resume}: {error}"
            );
            assert!(
                error.ends_with("put the file or folder it points to in its place"),
                "{error}"
            );
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_fresh_run_clears_what_an_attempt_left_before_its_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("elsewhere");
        std::fs::write(&target, "kept").unwrap();
        std::fs::create_dir_all(dir.path().join(STATES_DIR)).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(STATES_PACK)).unwrap();
        std::fs::create_dir_all(dir.path().join(TRACES_DIR)).unwrap();
        std::fs::write(dir.path().join(TRACES_DIR).join("epoch-0001.jsonl"), "{}\n").unwrap();
        for name in [EPOCHS_FILE, POINTS_FILE] {
            std::fs::write(dir.path().join(name), "{}\n").unwrap();
        }
        let session = RunSession::open(dir.path(), false, None).unwrap();
        assert!(!session.resumes());
        for gone in [STATES_DIR, TRACES_DIR, EPOCHS_FILE, POINTS_FILE] {
            assert!(!dir.path().join(gone).exists(), "{gone} is removed");
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
    }

    #[test]
    fn a_resume_that_never_checkpointed_starts_over_keeping_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        for name in [MANIFEST_FILE, RECORDS_FILE, EPOCHS_FILE, POINTS_FILE] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("traces")).unwrap();
        std::fs::write(dir.path().join(FAILURE_FILE), "{}").unwrap();
        let session = RunSession::open(dir.path(), true, None).unwrap();
        assert!(!session.resumes());
        assert!(dir.path().join(MANIFEST_FILE).exists());
        for gone in [
            RECORDS_FILE,
            EPOCHS_FILE,
            POINTS_FILE,
            "traces",
            FAILURE_FILE,
        ] {
            assert!(!dir.path().join(gone).exists(), "{gone} is removed");
        }
    }

    #[test]
    fn a_checkpoint_written_between_the_check_and_the_lock_refuses_the_resume_and_keeps_all() {
        let dir = tempfile::tempdir().unwrap();
        for name in [MANIFEST_FILE, RECORDS_FILE, EPOCHS_FILE, POINTS_FILE] {
            std::fs::write(dir.path().join(name), "kept").unwrap();
        }
        // Read before the lock: no checkpoint yet. Meanwhile the run's own
        // process finishes its first epoch.
        let resumed_at = checkpointed_next_epoch(dir.path()).unwrap();
        assert_eq!(resumed_at, None);
        std::fs::write(
            dir.path().join(CHECKPOINT_FILE),
            r#"{"state": {"next_epoch": 2}}"#,
        )
        .unwrap();
        let error = RunSession::open(dir.path(), true, resumed_at).unwrap_err();
        assert!(
            matches!(&error, SessionError::Refused(message)
                if message.contains("moved on while this resume was starting")
                    && message.contains("said no checkpoint when read, next epoch 2 under the lock")),
            "{error}"
        );
        for name in [MANIFEST_FILE, RECORDS_FILE, EPOCHS_FILE, POINTS_FILE] {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(name)).unwrap(),
                "kept",
                "{name} is not cleared"
            );
        }
        // Read at epoch 2, then the run checkpoints epoch 2 and points of
        // epoch 2 are final: a stale cut back would drop them.
        std::fs::write(
            dir.path().join(CHECKPOINT_FILE),
            r#"{"state": {"next_epoch": 3}}"#,
        )
        .unwrap();
        let error = RunSession::open(dir.path(), true, Some(2)).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("said next epoch 2 when read, next epoch 3"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(POINTS_FILE)).unwrap(),
            "kept"
        );
        // The same command again reads the checkpoint as it is now.
        let now = checkpointed_next_epoch(dir.path()).unwrap();
        assert_eq!(now, Some(3));
    }

    #[test]
    fn a_held_directory_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunSession::open(dir.path(), false, None).unwrap();
        let error = RunSession::open(dir.path(), false, None).unwrap_err();
        assert!(
            matches!(&error, SessionError::Refused(message)
                if message.contains("in use by another sandloop run (process")),
            "{error}"
        );
        drop(first);
        RunSession::open(dir.path(), false, None).unwrap();
    }

    #[test]
    fn invocations_accumulate_across_resumes_and_a_failure_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let invocation = |resume| Invocation {
            resume,
            cwd: None,
            started_unix_secs: 1,
            options: serde_json::Map::new(),
        };
        let adapter = || ManifestAdapter {
            path: "a.wasm".into(),
            sha256: "ab".into(),
            size_bytes: 2,
            protocols: vec!["episode".into()],
            exports: Vec::new(),
        };
        let host = || HostInfo {
            name: "sandloop".into(),
            version: "0".into(),
        };
        let session = RunSession::open(dir.path(), false, None).unwrap();
        session
            .record_invocation(host(), "w".into(), adapter(), invocation(false), &[])
            .unwrap();
        session
            .record_invocation(host(), "w".into(), adapter(), invocation(true), &[])
            .unwrap();
        let manifest: RunManifest = read_run_file(&dir.path().join(MANIFEST_FILE)).unwrap();
        assert_eq!(manifest.invocations.len(), 2);
        session.record_failure("disk full");
        let failure: RunFailure = read_run_file(&dir.path().join(FAILURE_FILE)).unwrap();
        assert_eq!(failure, RunFailure::new("disk full"));
    }

    #[test]
    fn a_fresh_run_refuses_a_directory_of_other_files_a_link_and_a_file() {
        let dir = tempfile::tempdir().unwrap();
        // Leftovers of a run that stopped before its manifest are fine.
        std::fs::write(dir.path().join(LOCK_FILENAME), "").unwrap();
        std::fs::create_dir(dir.path().join("traces")).unwrap();
        check_out_dir(dir.path(), false).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let error = check_out_dir(dir.path(), false).unwrap_err().to_string();
        assert!(
            error.contains("is not empty and holds no run (notes.txt"),
            "{error}"
        );

        let target = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        for resume in [false, true] {
            let error = check_out_dir(&link, resume).unwrap_err().to_string();
            assert!(error.contains("is a symbolic link (to "), "{error}");
        }
        let file = dir.path().join("notes.txt");
        let error = check_out_dir(&file, false).unwrap_err().to_string();
        assert!(error.contains("exists and is not a directory"), "{error}");
    }

    #[test]
    fn a_resume_without_a_checkpoint_refuses_a_run_that_finished_an_epoch() {
        let signature = RuntimeSignature {
            arm_key: "main".into(),
            adapter_type: "component:sha256:abc".into(),
            worker_count: 1,
            frontier_max_lanes: 0,
            variant_catalog_enabled: false,
            item_failure_policy: crate::episode::policy::FailurePolicy::Record,
            episode_mode: None,
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECORDS_FILE), "{}\n{}\n").unwrap();
        std::fs::write(dir.path().join(EPOCHS_FILE), "").unwrap();
        assert_eq!(check_resume(dir.path(), &signature, &[]).unwrap(), None);
        assert_eq!(unfinished_record_count(dir.path()), 2);

        std::fs::write(dir.path().join(EPOCHS_FILE), "{}\n").unwrap();
        assert_eq!(check_resume(dir.path(), &signature, &[]).unwrap(), None);
        std::fs::write(dir.path().join(EPOCHS_FILE), "{}\n{}\n").unwrap();
        let error = check_resume(dir.path(), &signature, &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("has no checkpoint.json but holds 2 finished epoch(s)"),
            "{error}"
        );
        std::fs::write(dir.path().join(EPOCHS_FILE), "").unwrap();
        std::fs::write(dir.path().join(SUMMARY_FILE), "{}").unwrap();
        let error = check_resume(dir.path(), &signature, &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("holds a summary.json"), "{error}");
        // Refused: nothing was changed.
        assert_eq!(unfinished_record_count(dir.path()), 2);
    }
}
