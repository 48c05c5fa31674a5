//! That a resumed run, or a replay, is given the same directories the run
//! was started with.
//!
//! A `--dir` grant is opened once per process ([`crate::dir_grant`]),
//! so a guest that swaps a granted path for a symlink changes nothing while
//! the process lives — but a later process opens the path again. The first
//! invocation therefore records each grant's [`DirIdentity`](crate::dir_grant::DirIdentity) in
//! `manifest.json` (`grants`, keyed by guest path), every later one keeps
//! those records, and a resume or replay whose grant at the same guest path
//! is now another directory is refused before anything runs or is written.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::manifest::RecordedGrant;
use crate::dir_grant::DirGrant;

/// The manifest field holding the recorded identities.
pub const GRANTS_FIELD: &str = "grants";

/// The grants recorded in the manifest at `manifest` (none when the file,
/// or the field, is missing or unreadable: nothing to compare with).
pub fn recorded(manifest: &Path) -> BTreeMap<String, RecordedGrant> {
    std::fs::read_to_string(manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|manifest| manifest.get(GRANTS_FIELD).cloned())
        .and_then(|grants| serde_json::from_value(grants).ok())
        .unwrap_or_default()
}

/// Refuse `dirs` when one of them, at a guest path the run granted before,
/// is now another directory than the one recorded in `manifest`.
///
/// Errors: a message naming the grant, both identities and what to do (the
/// CLI's exit 2: nothing has run or been written).
pub fn check_unchanged(manifest: &Path, dirs: &[DirGrant]) -> Result<(), String> {
    let recorded = recorded(manifest);
    for grant in dirs {
        let Some(before) = recorded.get(&grant.guest) else {
            continue;
        };
        let now = grant
            .identity()
            .map_err(|error| format!("--dir {}::{}: {error}", grant.host.display(), grant.guest))?;
        if now != before.identity {
            return Err(format!(
                "--dir {}::{}: {} is not the directory this run was granted at {} \
                 (device {}, inode {}; now device {}, inode {}). A guest with write access \
                 to a parent may have replaced it with a symlink. Check it; to grant another \
                 directory, start a new run",
                grant.host.display(),
                grant.guest,
                grant.host.display(),
                grant.guest,
                before.identity.device,
                before.identity.inode,
                now.device,
                now.inode,
            ));
        }
    }
    Ok(())
}

/// The grants to record now: those recorded in `manifest` before, plus
/// `dirs` at guest paths not recorded yet.
pub fn to_record(manifest: &Path, dirs: &[DirGrant]) -> BTreeMap<String, RecordedGrant> {
    let mut grants = recorded(manifest);
    for grant in dirs {
        if grants.contains_key(&grant.guest) {
            continue;
        }
        if let Ok(identity) = grant.identity() {
            grants.insert(
                grant.guest.clone(),
                RecordedGrant {
                    host: grant.host.display().to_string(),
                    identity,
                },
            );
        }
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_replaced_by_a_symlink_is_refused_on_the_next_invocation() {
        let top = tempfile::tempdir().unwrap();
        let docs = top.path().join("data/docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::create_dir_all(top.path().join("outside")).unwrap();
        let spec = format!("{}::/docs:ro", docs.display());
        let manifest = top.path().join("manifest.json");
        let grants = vec![DirGrant::parse(&spec).unwrap()];
        std::fs::write(
            &manifest,
            serde_json::json!({ GRANTS_FIELD: to_record(&manifest, &grants) }).to_string(),
        )
        .unwrap();
        check_unchanged(&manifest, &grants).expect("the same directory");

        std::fs::remove_dir(&docs).unwrap();
        std::os::unix::fs::symlink("../outside", &docs).unwrap();
        let again = vec![DirGrant::parse(&spec).unwrap()];
        let Err(message) = check_unchanged(&manifest, &again) else {
            panic!("a swapped grant is refused");
        };
        assert!(
            message.contains("is not the directory this run was granted at /docs"),
            "{message}"
        );
        // What was recorded first stays recorded.
        assert_eq!(to_record(&manifest, &again), recorded(&manifest));
        // A new guest path is only added.
        let other = format!("{}::/other", top.path().join("outside").display());
        let more = vec![DirGrant::parse(&other).unwrap()];
        assert!(check_unchanged(&manifest, &more).is_ok());
        assert_eq!(to_record(&manifest, &more).len(), 2);
    }
}
