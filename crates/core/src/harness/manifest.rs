//! `manifest.json`: which host and adapter made a run, every invocation's
//! options, and the identity of every granted directory.
//!
//! `sandloop run` writes it before the arm starts (a resume appends its own
//! invocation); `sandloop replay` reads the last invocation's options and
//! the adapter's sha256 from it; a resume or replay compares its `--dir`
//! grants with `grants`. Fields an older manifest may lack read as their
//! defaults, so only `adapter.sha256` and `invocations` are required.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dir_grant::DirIdentity;

/// `schema_version` of `manifest.json`.
pub const RUN_MANIFEST_SCHEMA_VERSION: &str = "sandloop_run_manifest_v0";

/// The whole `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    /// [`RUN_MANIFEST_SCHEMA_VERSION`].
    #[serde(default)]
    pub schema_version: String,
    /// The host that wrote it.
    #[serde(default)]
    pub host: HostInfo,
    /// The WIT package the host implements, `PACKAGE@VERSION`.
    #[serde(default)]
    pub wit: String,
    /// The adapter component.
    pub adapter: ManifestAdapter,
    /// One entry per `sandloop run` of this directory, oldest first.
    pub invocations: Vec<Invocation>,
    /// Guest path -> the directory first granted there.
    #[serde(default)]
    pub grants: BTreeMap<String, RecordedGrant>,
}

/// `host`: the program that wrote the manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// `sandloop`.
    pub name: String,
    /// Its version (`CARGO_PKG_VERSION`).
    pub version: String,
}

/// `adapter`: the component the run loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestAdapter {
    /// The path it was loaded from, as given.
    #[serde(default)]
    pub path: String,
    /// sha256 of the component bytes, lowercase hex.
    pub sha256: String,
    /// Size of the component, bytes.
    #[serde(default)]
    pub size_bytes: u64,
    /// Protocols detected from its exports.
    #[serde(default)]
    pub protocols: Vec<String>,
    /// Its exported interface names.
    #[serde(default)]
    pub exports: Vec<String>,
}

/// One `sandloop run` of the directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    /// Whether it was a `--resume`.
    #[serde(default)]
    pub resume: bool,
    /// The directory it started in (relative paths in `options` are
    /// relative to it); `null` when unknown.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// When it started, seconds since the Unix epoch.
    #[serde(default)]
    pub started_unix_secs: u64,
    /// Every flag of `sandloop run` by its long name (`adapter`, `workers`,
    /// `max_memory_mib`, ...), as the CLI recorded it. Kept open: the flag
    /// set grows, and a replay falls back to the default of a flag an older
    /// run did not record.
    pub options: Map<String, Value>,
}

/// One recorded directory grant: where it was on the host, and which
/// directory it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedGrant {
    /// HOST as given to `--dir`.
    pub host: String,
    /// The directory's identity when it was first granted.
    #[serde(flatten)]
    pub identity: DirIdentity,
}

impl RunManifest {
    /// The last invocation (the one whose options a replay uses).
    pub fn last_invocation(&self) -> Option<&Invocation> {
        self.invocations.last()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_files::tests::assert_golden_round_trip;
    use crate::harness::run_files::{RunFileError, read_run_file};

    #[test]
    fn a_manifest_written_by_the_host_reads_back_and_writes_the_same_bytes() {
        let manifest: RunManifest =
            assert_golden_round_trip(include_bytes!("golden/manifest.json"));
        assert_eq!(manifest.schema_version, RUN_MANIFEST_SCHEMA_VERSION);
        assert_eq!(manifest.host.name, "sandloop");
        assert_eq!(manifest.adapter.sha256.len(), 64);
        assert_eq!(manifest.invocations.len(), 2);
        assert!(manifest.invocations[1].resume);
        let last = manifest.last_invocation().unwrap();
        assert_eq!(last.options["workers"], Value::from(2));
        assert_eq!(manifest.grants["/docs"].host, "/tmp/gold/docs");
    }

    #[test]
    fn only_the_adapter_digest_and_the_invocations_are_required() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        std::fs::write(
            &path,
            r#"{"adapter": {"sha256": "ab"}, "invocations": [{"options": {}}]}"#,
        )
        .unwrap();
        let manifest: RunManifest = read_run_file(&path).unwrap();
        assert_eq!(manifest.invocations[0].cwd, None);
        assert!(manifest.grants.is_empty());
        std::fs::write(
            &path,
            r#"{"adapter": {}, "invocations": [{"options": {}}]}"#,
        )
        .unwrap();
        let error = read_run_file::<RunManifest>(&path).unwrap_err();
        assert!(matches!(error, RunFileError::Invalid { .. }));
        assert!(
            error
                .to_string()
                .contains("adapter: missing field `sha256` at line 1"),
            "{error}"
        );
        std::fs::write(
            &path,
            r#"{"adapter": {"sha256": "ab"}, "invocations": [{"options": 3}]}"#,
        )
        .unwrap();
        let error = read_run_file::<RunManifest>(&path).unwrap_err().to_string();
        assert!(
            error.contains("invocations[0].options: invalid type"),
            "{error}"
        );
    }
}
