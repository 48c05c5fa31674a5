//! What a guest may open through a granted directory, and how many.
//!
//! `wasi:filesystem`'s `open-at` is replaced (after WASI p2 is linked) by
//! [`link_guarded_open`]'s version, which differs from wasmtime-wasi's in
//! two rules:
//!
//! 1. **Only regular files and directories open.** A FIFO, a device node or
//!    a socket file could block the host thread in `open(2)` or in a later
//!    read, where the epoch deadline cannot interrupt it. Every open is made
//!    non-blocking (`O_NONBLOCK`), so the open itself never waits; what was
//!    opened is then checked with `fstat` on the same descriptor (no race
//!    with a guest that swaps the path), and anything but a regular file or
//!    directory is closed again and refused with `not-permitted`.
//! 2. **An instance holds at most `--max-open-files` descriptors** opened
//!    this way (default
//!    [`DEFAULT_MAX_OPEN_FILES`](sandloop_core::limits::DEFAULT_MAX_OPEN_FILES)).
//!    One more open gets `insufficient-memory` from WASI; the host's own
//!    descriptors are never the guest's to spend. The instance's resource
//!    table (descriptors, streams, pollables together) is capped too
//!    ([`resource_table_capacity`](crate::open_files::resource_table_capacity));
//!    a guest past that cap traps.
//!
//! Everything else — beneath-resolution of the path, symlink following,
//! the grant's read-only permission — is as in wasmtime-wasi, through the
//! same `cap-primitives` calls it uses.

use std::fs::File;
use std::io;
use std::path::Path;

use cap_primitives::fs::{FollowSymlinks, OpenOptions};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::OpenMode;
use wasmtime_wasi::filesystem::{Descriptor, Dir as WasiDir, File as WasiFile};
use wasmtime_wasi::p2::FsError;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
};

use super::host_state::HostState;

/// The WASI interface whose `open-at` [`link_guarded_open`] replaces.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replace `open-at` of `wasi:filesystem/types` in `linker` (after WASI p2
/// was added) with the guarded version described in the module docs.
pub fn link_guarded_open(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, HostState>,
         (dir, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )|
         -> wasmtime::Result<(Result<Resource<Descriptor>, ErrorCode>,)> {
            let state = store.data_mut();
            Ok((state.guarded_open(dir, path_flags, path, open_flags, flags)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn code_of(error: io::Error) -> ErrorCode {
    FsError::from(error).downcast().unwrap_or(ErrorCode::Io)
}

/// What to ask the operating system for, and the mode the descriptor gets,
/// as wasmtime-wasi derives them from `open-at`'s flags.
fn open_options(
    path_flags: PathFlags,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> Result<(OpenOptions, OpenMode, bool), ErrorCode> {
    let mut options = OpenOptions::new();
    let mut mode = OpenMode::empty();
    let mut create = false;
    if open_flags.contains(OpenFlags::CREATE) {
        if open_flags.contains(OpenFlags::EXCLUSIVE) {
            options.create_new(true);
        } else {
            options.create(true);
        }
        create = true;
        options.write(true);
        mode |= OpenMode::WRITE;
    }
    if open_flags.contains(OpenFlags::TRUNCATE) {
        options.truncate(true).write(true);
        mode |= OpenMode::WRITE;
    }
    if flags.contains(DescriptorFlags::READ) {
        options.read(true);
        mode |= OpenMode::READ;
    }
    if flags.contains(DescriptorFlags::WRITE) {
        options.write(true);
        mode |= OpenMode::WRITE;
    } else {
        // Opened for reading when not for writing; permissions are checked
        // on use, as in wasmtime-wasi.
        options.read(true);
        mode |= OpenMode::READ;
    }
    // `follow` has no other public spelling in cap-primitives 4.
    options._cap_fs_ext_follow(if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
        FollowSymlinks::Yes
    } else {
        FollowSymlinks::No
    });
    // As `follow`: no other public spelling.
    options._cap_fs_ext_nonblock(true);
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Err(ErrorCode::Unsupported);
    }
    if open_flags.contains(OpenFlags::DIRECTORY)
        && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
    {
        return Err(ErrorCode::Invalid);
    }
    Ok((options, mode, create))
}

/// Clear `O_NONBLOCK` again on a regular file or directory, so reads and
/// writes behave exactly as on a descriptor opened without it.
fn make_blocking(file: &File) -> io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags.difference(OFlags::NONBLOCK))?;
    Ok(())
}

impl HostState {
    /// `open-at` under the rules of this module. `Ok(Err(code))` is an
    /// error the guest sees; `Err` traps (an unknown or foreign handle).
    fn guarded_open(
        &mut self,
        dir: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> wasmtime::Result<Result<Resource<Descriptor>, ErrorCode>> {
        let (options, mode, create) = match open_options(path_flags, open_flags, flags) {
            Ok(found) => found,
            Err(code) => return Ok(Err(code)),
        };
        let table = &mut self.table;
        let Descriptor::Dir(parent) = table.get(&dir)? else {
            return Ok(Err(ErrorCode::NotDirectory));
        };
        let (perms, parent_dir) = (parent.perms, parent.dir.clone());
        if perms.write_not_permitted() && (create || mode.contains(OpenMode::WRITE)) {
            return Ok(Err(ErrorCode::NotPermitted));
        }
        if !self.open_files.has_room(table) {
            let note = format!(
                "sandloop: open of {path:?} refused: the instance already holds \
                 {} open files (--max-open-files)",
                self.open_files.limit()
            );
            self.capture.push("log", Some("warn"), note.as_bytes());
            return Ok(Err(ErrorCode::InsufficientMemory));
        }
        let opened = match cap_primitives::fs::open(&parent_dir, Path::new(&path), &options) {
            Ok(file) => file,
            Err(error) => return Ok(Err(code_of(error))),
        };
        let file_type = match opened.metadata() {
            Ok(metadata) => metadata.file_type(),
            Err(error) => return Ok(Err(code_of(error))),
        };
        let descriptor = if file_type.is_dir() {
            if let Err(error) = make_blocking(&opened) {
                return Ok(Err(code_of(error)));
            }
            Descriptor::Dir(WasiDir::new(opened, perms, mode, false))
        } else if open_flags.contains(OpenFlags::DIRECTORY) {
            return Ok(Err(ErrorCode::NotDirectory));
        } else if file_type.is_file() {
            if let Err(error) = make_blocking(&opened) {
                return Ok(Err(code_of(error)));
            }
            Descriptor::File(WasiFile::new(opened, perms, mode, false))
        } else {
            drop(opened);
            let note = format!(
                "sandloop: open of {path:?} refused: not a regular file or directory \
                 (a FIFO, device or socket could block past the call deadline)"
            );
            self.capture.push("log", Some("warn"), note.as_bytes());
            return Ok(Err(ErrorCode::NotPermitted));
        };
        match self.table.push(descriptor) {
            Ok(resource) => {
                self.open_files.opened(resource.rep());
                Ok(Ok(resource))
            }
            Err(_) => Ok(Err(ErrorCode::InsufficientMemory)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_options_follow_wasmtime_wasi() {
        let (_, mode, create) = open_options(
            PathFlags::SYMLINK_FOLLOW,
            OpenFlags::CREATE,
            DescriptorFlags::empty(),
        )
        .unwrap();
        assert!(create);
        assert_eq!(mode, OpenMode::READ | OpenMode::WRITE);
        let (_, mode, create) = open_options(
            PathFlags::empty(),
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .unwrap();
        assert!(!create);
        assert_eq!(mode, OpenMode::READ);
        assert_eq!(
            open_options(
                PathFlags::empty(),
                OpenFlags::DIRECTORY | OpenFlags::TRUNCATE,
                DescriptorFlags::READ
            )
            .err(),
            Some(ErrorCode::Invalid)
        );
        assert_eq!(
            open_options(
                PathFlags::empty(),
                OpenFlags::empty(),
                DescriptorFlags::READ | DescriptorFlags::DATA_INTEGRITY_SYNC
            )
            .err(),
            Some(ErrorCode::Unsupported)
        );
    }
}
