//! Atomic replacement of files: nothing is ever written half. Files at
//! paths given to sandloop (a report, man pages, a scaffolded project) are
//! written by [`write_output_file`], which never writes through a symbolic
//! link and never opens anything but a regular file.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tempfile::NamedTempFile;

/// Writes `value` as pretty JSON (plus a newline) to `path` atomically: a
/// temporary file in the same directory is written and fsynced, renamed over
/// `path`, and the directory is fsynced. Readers see the old file or the
/// new one, never a mix; a crash leaves at most a stray `.{name}.*.tmp`.
pub fn write_json_atomic<T: Serialize + ?Sized>(path: &Path, value: &T) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let mut temporary = temporary_beside(path, 0o600)?;
    {
        let mut writer = BufWriter::new(temporary.as_file_mut());
        serde_json::to_writer_pretty(&mut writer, value)?;
        writer.write_all(b"\n")?;
        writer.flush()?;
    }
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|error| error.error)?;
    sync_dir(directory_of(path))
}

/// Why [`write_output_file`] or [`open_regular`] refused `path`, or could
/// not write it. Each message names the path.
#[derive(Debug, thiserror::Error)]
pub enum OutputFileError {
    /// The path is a symbolic link (wherever it points).
    #[error("{} is a symbolic link; sandloop writes no file through a link", path.display())]
    Link {
        /// The path refused.
        path: PathBuf,
    },
    /// The path exists and is not a regular file.
    #[error("{} is not a regular file ({kind}); sandloop writes regular files only", path.display())]
    NotRegular {
        /// The path refused.
        path: PathBuf,
        /// What it is: `a FIFO`, `a directory`, `a socket`, …
        kind: &'static str,
    },
    /// Opening, writing or renaming failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The path that could not be written.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

impl OutputFileError {
    /// Whether `path` was refused for what it is (a link, not a regular
    /// file) — bad input — rather than failing to be written.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, OutputFileError::Io { .. })
    }
}

/// Opens `path` with `options` plus `O_NOFOLLOW | O_NONBLOCK`, and checks
/// that what it opened is a regular file: a symbolic link (wherever it
/// points) and anything else — a FIFO, which a plain open would wait on for
/// ever, a directory, a socket, a device — is refused. The descriptor keeps
/// `O_NONBLOCK`, which a regular file ignores.
///
/// # Errors
/// [`OutputFileError::Link`] or [`OutputFileError::NotRegular`] for what
/// `path` is, [`OutputFileError::Io`] when it cannot be opened (its
/// `source` is `NotFound` when nothing is there).
pub fn open_regular(options: &mut OpenOptions, path: &Path) -> Result<File, OutputFileError> {
    let failed = |source| OutputFileError::Io {
        path: path.to_owned(),
        source,
    };
    match options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => {
            check_regular(path, file.metadata().map_err(failed)?.file_type())?;
            Ok(file)
        }
        Err(error) => {
            // ELOOP, ENXIO (a FIFO without a reader), EISDIR, …: say what
            // the path is when it is not a regular file.
            if let Ok(metadata) = fs::symlink_metadata(path) {
                check_regular(path, metadata.file_type())?;
            }
            Err(failed(error))
        }
    }
}

/// Replaces the file at `path` (a path given to sandloop) with `bytes`: a
/// temporary `.{name}.*.tmp` in the same directory, renamed over `path`,
/// so readers never see half a file and nothing is written through what
/// `path` holds. What exists at `path` must be a regular file
/// ([`open_regular`]); the directory must exist. The file gets `mode` when
/// given, else the mode of the file it replaces, else `0o666` less the
/// umask (as a newly created file). Nothing is fsynced.
///
/// # Errors
/// [`OutputFileError`], naming `path`; nothing is changed at `path`.
pub fn write_output_file(
    path: &Path,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<(), OutputFileError> {
    let failed = |source| OutputFileError::Io {
        path: path.to_owned(),
        source,
    };
    let existing = match open_regular(OpenOptions::new().read(true), path) {
        Ok(file) => Some(file.metadata().map_err(failed)?.permissions()),
        Err(OutputFileError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    let mut temporary = temporary_beside(path, 0o666).map_err(failed)?;
    if let Some(permissions) = mode.map(Permissions::from_mode).or(existing) {
        temporary
            .as_file()
            .set_permissions(permissions)
            .map_err(failed)?;
    }
    temporary.write_all(bytes).map_err(failed)?;
    // A rename replaces the directory entry: whatever was swapped in at
    // `path` since the check, a link included, is replaced, not followed.
    temporary
        .persist(path)
        .map_err(|error| failed(error.error))?;
    Ok(())
}

/// Refuses a `file_type` of `path` that is not a regular file.
fn check_regular(path: &Path, file_type: fs::FileType) -> Result<(), OutputFileError> {
    if file_type.is_symlink() {
        return Err(OutputFileError::Link {
            path: path.to_owned(),
        });
    }
    match crate::input_file::irregular_kind(file_type) {
        None => Ok(()),
        Some(kind) => Err(OutputFileError::NotRegular {
            path: path.to_owned(),
            kind,
        }),
    }
}

/// The directory `path` is in: its parent, `.` for a bare name.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A new temporary file `.{name}.*.tmp` beside `path`, created with
/// `mode` less the umask, to be renamed over `path`.
fn temporary_beside(path: &Path, mode: u32) -> io::Result<NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(directory_of(path))
}

/// Replaces `path` with `bytes` through a sibling `*.partial` file renamed
/// over it, creating the parent directory: readers never see half a file,
/// but nothing is fsynced (cheap enough for many small files; use
/// [`write_json_atomic`] where a power loss must not lose the write).
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    fs::write(&partial, bytes)?;
    fs::rename(&partial, path)
}

/// Writes `bytes` to `path`, a file that usually does not exist yet:
/// created exclusively (`O_CREAT | O_EXCL`, which never follows a symbolic
/// link) and written in place — one open, one write, no temporary and no
/// rename; the parent directory is created only when the open finds it
/// missing, so a folder of many such files costs one `mkdir`. When `path`
/// exists (a resumed run writing the same file again) it is replaced as
/// [`replace_file`] does. A crash can leave the file half written, so use
/// it only for files whose reader checks a digest recorded after the write
/// (a durable snapshot point's component and items: `replay-points.jsonl`
/// names their sha256 and is appended once both are written).
pub fn write_new_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let create = || OpenOptions::new().write(true).create_new(true).open(path);
    let created = match create() {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(directory_of(path))?;
            create()
        }
        other => other,
    };
    match created {
        Ok(mut file) => file.write_all(bytes),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => replace_file(path, bytes),
        Err(error) => Err(error),
    }
}

/// Fsyncs a directory so a rename in it is durable (no-op where
/// directories cannot be opened).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir) {
        Ok(handle) => handle.sync_all(),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_file_is_written_in_place_and_an_existing_one_replaced_not_followed() {
        let root = tempfile::tempdir().unwrap();
        // The folder is made by the first write.
        let dir = root.path().join("replay-points");
        let path = dir.join("rp-1.bin");
        write_new_file(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_new_file(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        // A link planted where the file goes is replaced, never written through.
        let target = dir.join("elsewhere");
        fs::write(&target, b"untouched").unwrap();
        let linked = dir.join("rp-2.bin");
        std::os::unix::fs::symlink(&target, &linked).unwrap();
        write_new_file(&linked, b"state").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"untouched");
        assert!(
            !fs::symlink_metadata(&linked)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&linked).unwrap(), b"state");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "no temporary left: {names:?}");
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.json");
        write_json_atomic(&path, &json!({"a": 1})).unwrap();
        write_json_atomic(&path, &json!({"a": 2})).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            json!({"a": 2})
        );
        assert_eq!(names(dir.path()), vec!["summary.json"]);
    }

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn mkfifo(path: &Path) {
        use rustix::fs::{CWD, FileType, Mode, mknodat};
        mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    }

    #[test]
    fn an_output_file_replaces_a_regular_file_keeping_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        write_output_file(&path, b"first", None).unwrap();
        let created = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(created & 0o600, 0o600, "{created:o}: 0o666 less the umask");
        fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        write_output_file(&path, b"second", None).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        write_output_file(&path, b"third", Some(0o755)).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(names(dir.path()), ["report.html"]);
    }

    #[test]
    fn an_output_file_is_never_written_through_a_link_or_into_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        fs::write(&outside, "keep").unwrap();
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let dangling = dir.path().join("dangling.html");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let fifo = dir.path().join("fifo.html");
        mkfifo(&fifo);
        let subdir = dir.path().join("sub");
        fs::create_dir(&subdir).unwrap();
        for (path, says) in [
            (&link, "is a symbolic link"),
            (&dangling, "is a symbolic link"),
            (&fifo, "is not a regular file (a FIFO)"),
            (&subdir, "is not a regular file (a directory)"),
        ] {
            let error = write_output_file(path, b"page", None).unwrap_err();
            assert!(error.is_refusal(), "{error}");
            let message = error.to_string();
            assert!(
                message.starts_with(&path.display().to_string()),
                "{message}"
            );
            assert!(message.contains(says), "{message}");
        }
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
        assert!(!dir.path().join("nowhere").exists());
        assert_eq!(
            names(dir.path()),
            [
                "dangling.html",
                "fifo.html",
                "link.html",
                "outside.txt",
                "sub"
            ]
        );
        // A missing directory is a failure to write, naming the path.
        let missing = dir.path().join("no/such/report.html");
        let error = write_output_file(&missing, b"page", None).unwrap_err();
        assert!(!error.is_refusal());
        assert!(error.to_string().contains("cannot write"), "{error}");
    }

    #[test]
    fn open_regular_appends_to_a_file_and_refuses_a_link_or_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("replays.jsonl");
        let mut append = OpenOptions::new();
        append.create(true).append(true);
        writeln!(open_regular(&mut append, &log).unwrap(), "one").unwrap();
        writeln!(open_regular(&mut append, &log).unwrap(), "two").unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        mkfifo(&fifo);
        for (path, says) in [(&link, "symbolic link"), (&fifo, "(a FIFO)")] {
            let error = open_regular(&mut append, path).unwrap_err();
            assert!(
                error.is_refusal() && error.to_string().contains(says),
                "{error}"
            );
        }
        assert_eq!(fs::read_to_string(&log).unwrap(), "one\ntwo\n");
    }
}
