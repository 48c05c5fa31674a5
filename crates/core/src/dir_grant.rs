//! A directory granted to the guest, and how it is found again at every
//! instantiation without following a path the guest may have changed.
//!
//! A grant's directory is held as a handle opened once, when the grant is
//! made, plus a path beneath it:
//!
//! - `sandloop run --dir HOST::GUEST` opens HOST once; every instance gets
//!   that same directory, even if a guest with write access to a parent
//!   later swaps HOST's path for a symlink;
//! - a workflow's `dirs = ["work/sub::/sub"]` opens the repository once and
//!   resolves `work/sub` *beneath* it at every instantiation (no `..`, no
//!   symlink, absolute or relative, that leaves the repository): a grant
//!   that no longer resolves beneath the repository fails that step with a
//!   message that says so, instead of granting what the link points at.
//!
//! The resolved directory is handed to WASI by its descriptor
//! (`/proc/self/fd/N`, `/dev/fd/N` off Linux), never by its path again.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory a grant is resolved beneath: a handle opened once.
#[derive(Clone, Debug)]
pub struct GrantRoot {
    dir: Arc<File>,
    /// The root's path as the operator gave it, for messages.
    shown: PathBuf,
}

impl GrantRoot {
    /// Open the directory at `path` (following symlinks once, now, as the
    /// operator named it).
    ///
    /// Errors: `path` cannot be opened or is not a directory.
    pub fn open(path: &Path) -> io::Result<Self> {
        let dir = cap_primitives::fs::open_ambient_dir(path, cap_primitives::ambient_authority())?;
        Ok(Self {
            dir: Arc::new(dir),
            shown: path.to_path_buf(),
        })
    }

    /// The root's path as given.
    pub fn path(&self) -> &Path {
        &self.shown
    }
}

/// One directory granted to the guest (`--dir HOST::GUEST[:ro]`, or a
/// workflow's `dirs` entry).
#[derive(Clone, Debug, serde::Serialize)]
pub struct DirGrant {
    /// Directory on the host, as shown to the operator (for a workflow
    /// grant, the repository joined with the relative path).
    pub host: PathBuf,
    /// Path the guest sees it at, e.g. `/docs`.
    pub guest: String,
    /// True for read-only access.
    pub read_only: bool,
    /// What the grant is resolved beneath, and the path below it (`.` for
    /// `--dir`).
    #[serde(skip)]
    anchor: (GrantRoot, PathBuf),
}

impl PartialEq for DirGrant {
    fn eq(&self, other: &Self) -> bool {
        (&self.host, &self.guest, self.read_only) == (&other.host, &other.guest, other.read_only)
    }
}

impl Eq for DirGrant {}

/// `GUEST[:ro|:rw]` split into a plain absolute guest path and the mode.
fn parse_guest(spec: &str, rest: &str) -> Result<(String, bool), String> {
    let (guest, read_only) = match rest.rsplit_once(':') {
        Some((guest, mode)) if mode.eq_ignore_ascii_case("ro") => (guest, true),
        Some((guest, mode)) if mode.eq_ignore_ascii_case("rw") => (guest, false),
        Some(_) => {
            return Err(format!(
                "--dir {spec:?}: the part after GUEST must be `:ro` or `:rw`"
            ));
        }
        None => (rest, false),
    };
    if guest.is_empty() {
        return Err(format!("--dir {spec:?}: HOST and GUEST must be non-empty"));
    }
    if !guest.starts_with('/') || guest.contains(':') {
        return Err(format!(
            "--dir {spec:?}: GUEST must be an absolute guest path such as /docs, without `:`"
        ));
    }
    // One spelling per directory, so a second grant cannot hide behind
    // `/docs/` or `/docs/.`.
    let trimmed = guest.trim_end_matches('/');
    if trimmed
        .split('/')
        .skip(1)
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!(
            "--dir {spec:?}: GUEST must be a plain absolute path (no `//`, `.` or `..`)"
        ));
    }
    let guest = if trimmed.is_empty() { "/" } else { trimmed };
    Ok((guest.to_string(), read_only))
}

impl DirGrant {
    /// Parse `HOST::GUEST` or `HOST::GUEST:ro` / `:rw` and open HOST once.
    /// The `::` separator lets host paths contain single colons.
    ///
    /// Errors: a malformed spec, or HOST that is not a directory.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (host, rest) = spec
            .split_once("::")
            .ok_or_else(|| format!("--dir {spec:?}: expected HOST::GUEST[:ro]"))?;
        if host.is_empty() {
            return Err(format!("--dir {spec:?}: HOST and GUEST must be non-empty"));
        }
        let (guest, read_only) = parse_guest(spec, rest)?;
        let host = PathBuf::from(host);
        let not_dir = || format!("--dir {spec:?}: {} is not a directory", host.display());
        if !host.is_dir() {
            return Err(not_dir());
        }
        let root = GrantRoot::open(&host).map_err(|_| not_dir())?;
        Ok(Self {
            host,
            guest,
            read_only,
            anchor: (root, PathBuf::from(".")),
        })
    }

    /// Parse `RELATIVE::GUEST[:ro|:rw]` as a grant of `RELATIVE` beneath
    /// `root` (a workflow's repository), checking now that it resolves
    /// beneath it to a directory.
    ///
    /// Errors: a malformed spec, an absolute or `..` path, or one that does
    /// not resolve beneath `root` to a directory (through a symlink that
    /// leaves it, say).
    pub fn parse_beneath(root: &GrantRoot, spec: &str) -> Result<Self, String> {
        let (relative, rest) = spec
            .split_once("::")
            .ok_or_else(|| format!("--dir {spec:?}: expected HOST::GUEST[:ro]"))?;
        let (guest, read_only) = parse_guest(spec, rest)?;
        let grant = Self {
            host: root.path().join(relative),
            guest,
            read_only,
            anchor: (root.clone(), PathBuf::from(relative)),
        };
        grant.resolve().map_err(|error| {
            format!(
                "--dir {spec:?}: {relative} is not a directory inside the repository {} ({error})",
                root.path().display()
            )
        })?;
        Ok(grant)
    }

    /// Parse every spec and refuse two grants at one guest path.
    pub fn parse_all(specs: &[String]) -> Result<Vec<Self>, String> {
        Self::check_unique(
            specs
                .iter()
                .map(|spec| Self::parse(spec).map(|g| (spec, g))),
        )
    }

    /// [`DirGrant::parse_beneath`] for every spec, refusing two grants at
    /// one guest path.
    pub fn parse_all_beneath(root: &GrantRoot, specs: &[String]) -> Result<Vec<Self>, String> {
        Self::check_unique(
            specs
                .iter()
                .map(|spec| Self::parse_beneath(root, spec).map(|g| (spec, g))),
        )
    }

    fn check_unique<'a>(
        parsed: impl Iterator<Item = Result<(&'a String, Self), String>>,
    ) -> Result<Vec<Self>, String> {
        let mut grants: Vec<Self> = Vec::new();
        for next in parsed {
            let (spec, grant) = next?;
            if grants.iter().any(|other| other.guest == grant.guest) {
                return Err(format!("--dir {spec:?}: {} is granted twice", grant.guest));
            }
            grants.push(grant);
        }
        Ok(grants)
    }

    /// Open the granted directory now, resolving its path beneath the
    /// grant's root (never leaving it, whatever symlinks are on the way).
    ///
    /// Errors: the path no longer resolves beneath the root to a
    /// directory; the message names both.
    pub fn open(&self) -> io::Result<File> {
        let (root, beneath) = &self.anchor;
        self.resolve().map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{} no longer resolves to a directory beneath {}: {error}",
                    beneath.display(),
                    root.path().display()
                ),
            )
        })
    }
}

/// Which directory a grant is, on this machine: its device and inode.
/// A run records it for each `--dir` in `manifest.json`, and a resume or a
/// replay refuses a grant that is now another directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirIdentity {
    /// `st_dev`.
    pub device: u64,
    /// `st_ino`.
    pub inode: u64,
}

impl DirGrant {
    /// The identity of the directory this grant gives (resolved now).
    ///
    /// Errors: the directory no longer resolves ([`DirGrant::open`]).
    pub fn identity(&self) -> io::Result<DirIdentity> {
        use std::os::unix::fs::MetadataExt;
        let metadata = self.open()?.metadata()?;
        Ok(DirIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }

    fn resolve(&self) -> io::Result<File> {
        let (root, beneath) = &self.anchor;
        cap_primitives::fs::open_dir(&root.dir, beneath)
    }
}

/// A path that opens the directory `dir` already open in this process —
/// the same directory, not whatever its old path names now.
pub fn descriptor_path(dir: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    let fd = dir.as_raw_fd();
    if cfg!(target_os = "linux") {
        PathBuf::from(format!("/proc/self/fd/{fd}"))
    } else {
        PathBuf::from(format!("/dev/fd/{fd}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dir_grants() {
        let tmp = std::env::temp_dir();
        let host = tmp.to_str().unwrap();
        let grant = DirGrant::parse(&format!("{host}::/docs:ro")).unwrap();
        assert_eq!(grant.guest, "/docs");
        assert!(grant.read_only);
        let grant = DirGrant::parse(&format!("{host}::/data")).unwrap();
        assert!(!grant.read_only);
        assert!(
            DirGrant::parse(&format!("{host}::/docs:RO"))
                .unwrap()
                .read_only
        );
        assert!(DirGrant::parse("/nonexistent-dir-xyz::/d").is_err());
        assert!(DirGrant::parse(host).is_err());
        for bad in ["::/docs:ro:ro", "::docs", "::/docs:maybe", "::/a b:x"] {
            assert!(DirGrant::parse(&format!("{host}{bad}")).is_err(), "{bad}");
        }
        for bad in ["::/docs/../etc", "::/docs/.", "::/a//b"] {
            assert!(DirGrant::parse(&format!("{host}{bad}")).is_err(), "{bad}");
        }
        assert_eq!(
            DirGrant::parse(&format!("{host}::/docs/:ro"))
                .unwrap()
                .guest,
            "/docs"
        );
        let twice = vec![format!("{host}::/d:ro"), format!("{host}::/d/")];
        assert!(
            DirGrant::parse_all(&twice)
                .unwrap_err()
                .contains("granted twice")
        );
        let twice = vec![format!("{host}::/d"), format!("{host}::/d:ro")];
        assert!(
            DirGrant::parse_all(&twice)
                .unwrap_err()
                .contains("granted twice")
        );
    }

    /// A repository with `work/sub/inside.txt` and, beside it,
    /// `outside/secret.txt`.
    fn repo_with_outside() -> (tempfile::TempDir, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let repo = top.path().join("repo");
        std::fs::create_dir_all(repo.join("work/sub")).unwrap();
        std::fs::write(repo.join("work/sub/inside.txt"), "inside").unwrap();
        std::fs::create_dir_all(top.path().join("outside")).unwrap();
        std::fs::write(top.path().join("outside/secret.txt"), "secret").unwrap();
        (top, repo)
    }

    fn names(dir: File) -> Vec<String> {
        let path = descriptor_path(&dir);
        let mut names: Vec<String> = std::fs::read_dir(path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_grant_swapped_for_a_symlink_out_of_the_repository_no_longer_opens() {
        let (_top, repo) = repo_with_outside();
        let root = GrantRoot::open(&repo).unwrap();
        let grant = DirGrant::parse_beneath(&root, "work/sub::/sub:ro").unwrap();
        assert_eq!(names(grant.open().unwrap()), ["inside.txt"]);
        std::fs::remove_dir_all(repo.join("work/sub")).unwrap();
        std::os::unix::fs::symlink("../../outside", repo.join("work/sub")).unwrap();
        let error = grant.open().unwrap_err().to_string();
        assert!(
            error.contains("work/sub no longer resolves to a directory beneath"),
            "{error}"
        );
        // A symlink that stays inside the repository still resolves.
        std::fs::remove_file(repo.join("work/sub")).unwrap();
        std::fs::create_dir_all(repo.join("work/real")).unwrap();
        std::os::unix::fs::symlink("real", repo.join("work/sub")).unwrap();
        assert!(names(grant.open().unwrap()).is_empty());
        // A grant made while the link already leaves is refused at once.
        std::fs::remove_file(repo.join("work/sub")).unwrap();
        std::os::unix::fs::symlink("../../outside", repo.join("work/sub")).unwrap();
        let error = DirGrant::parse_beneath(&root, "work/sub::/sub").unwrap_err();
        assert!(
            error.contains("work/sub is not a directory inside the repository"),
            "{error}"
        );
    }

    #[test]
    fn a_dir_grant_keeps_the_directory_it_opened_when_its_path_is_swapped() {
        let (top, repo) = repo_with_outside();
        let spec = format!("{}::/sub:ro", repo.join("work/sub").display());
        let grant = DirGrant::parse(&spec).unwrap();
        std::fs::rename(repo.join("work/sub"), repo.join("work/moved")).unwrap();
        std::os::unix::fs::symlink(top.path().join("outside"), repo.join("work/sub")).unwrap();
        assert_eq!(names(grant.open().unwrap()), ["inside.txt"]);
    }
}
