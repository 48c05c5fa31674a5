//! Reading an input file the operator named (an adapter, a variant catalog,
//! credentials, a plugin): only a regular file is read, so a named pipe, a
//! device or a directory given by mistake is refused at once instead of
//! blocking the command on a writer that never comes or reading forever.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The bytes of the regular file at `path` (symbolic links followed).
///
/// The file is opened without blocking (`O_NONBLOCK`: opening a FIFO with
/// no writer returns at once) and checked on the open descriptor, so what
/// is read is what was checked.
///
/// # Errors
/// The open or read error; for anything but a regular file an
/// [`io::ErrorKind::InvalidInput`] error saying what it is, e.g. "is a
/// FIFO, not a regular file" ([`irregular_kind`]). Callers name the path.
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_regular_input(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
///
/// # Errors
/// As [`read_regular`]; [`io::ErrorKind::InvalidData`] for bytes that are
/// not UTF-8.
pub fn read_regular_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_regular(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not valid UTF-8"))
}

/// The regular file at `path`, open for reading; see [`read_regular`].
///
/// # Errors
/// As [`read_regular`].
pub fn open_regular_input(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    match irregular_kind(file.metadata()?.file_type()) {
        None => Ok(file),
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {kind}, not a regular file"),
        )),
    }
}

/// What a file of `file_type` is when it is not a regular file, as
/// messages name it ("a directory", "a FIFO", "a socket", "a character
/// device", "a block device", "a symbolic link", "of an unknown kind");
/// `None` for a regular file.
pub fn irregular_kind(file_type: FileType) -> Option<&'static str> {
    Some(if file_type.is_file() {
        return None;
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "of an unknown kind"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_without_a_writer_and_a_directory_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("adapter.wasm");
        use rustix::fs::{CWD, FileType, Mode, mknodat};
        mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let error = read_regular(&fifo).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(error.to_string(), "is a FIFO, not a regular file");
        let error = read_regular(dir.path()).unwrap_err();
        assert_eq!(error.to_string(), "is a directory, not a regular file");
        let error = read_regular(Path::new("/dev/null")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "is a character device, not a regular file"
        );

        let file = dir.path().join("catalog.json");
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(read_regular_to_string(&file).unwrap(), "{}");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link).unwrap(), b"{}");
    }
}
