//! The document corpus: `*.md` files under the granted directory, walked
//! recursively and sorted by relative path, and the family of each file.

use std::fs;
use std::path::{Path, PathBuf};

use sandloop_guest::Error;

/// One markdown file of the corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocFile {
    /// Path relative to the corpus root, `/`-separated, no leading slash.
    pub relative_path: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// Directories never descended into.
fn skipped_dir(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules" || name == "target"
}

fn is_markdown(name: &str) -> bool {
    name.len() > 3 && name.to_ascii_lowercase().ends_with(".md")
}

/// Every `*.md` file under `root` (recursively; symlinks and hidden
/// directories skipped), sorted by relative path.
pub fn walk(root: &Path) -> Result<Vec<DocFile>, Error> {
    let mut files = Vec::new();
    let mut pending: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let entries = fs::read_dir(&dir).map_err(|err| {
            let at = if prefix.is_empty() {
                "the documents directory"
            } else {
                prefix.as_str()
            };
            Error::new("docs-unavailable", format!("cannot list {at}: {err}"))
        })?;
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue; // not UTF-8: cannot be an item id
            };
            let file_type = entry.file_type()?;
            let relative = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            if file_type.is_dir() {
                if !skipped_dir(&name) {
                    pending.push((entry.path(), relative));
                }
            } else if file_type.is_file() && is_markdown(&name) {
                let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                files.push(DocFile {
                    relative_path: relative,
                    bytes,
                });
            }
        }
    }
    files.sort_by(|a, b| a.relative_path.cmp(&b.relative_path));
    Ok(files)
}

/// Document category from the file name: `readme`, `changelog`, `license`,
/// `contributing` or `docs`.
pub fn family_of(relative_path: &str) -> &'static str {
    let name = relative_path
        .rsplit('/')
        .next()
        .unwrap_or(relative_path)
        .to_ascii_lowercase()
        .replace('-', "_");
    let stem = name.split('.').next().unwrap_or("");
    if stem.starts_with("readme") {
        "readme"
    } else if stem.starts_with("changelog")
        || stem.starts_with("changes")
        || stem.starts_with("history")
        || stem.starts_with("release_notes")
        || stem == "releases"
        || stem == "news"
    {
        "changelog"
    } else if stem.starts_with("license")
        || stem.starts_with("licence")
        || stem.starts_with("copying")
        || stem.starts_with("notice")
    {
        "license"
    } else if stem.starts_with("contributing") || stem.starts_with("code_of_conduct") {
        "contributing"
    } else {
        "docs"
    }
}

/// The item text of a document: its first non-empty line, heading markers
/// stripped, at most 120 characters.
pub fn title_of(text: &str) -> String {
    let line = text
        .trim_start_matches('\u{feff}')
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    let line = line.trim_start_matches('#').trim_end_matches('#').trim();
    line.chars().take(120).collect()
}

/// Check that `relative` stays inside the corpus root: not empty, no leading
/// slash, no backslash, no `.`/`..` component.
pub fn checked_relative(relative: &str) -> Result<&str, Error> {
    let bad = relative.is_empty()
        || relative.starts_with('/')
        || relative.contains('\\')
        || relative
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(Error::invalid_item(
            "relative_path must be a relative path inside the corpus",
        ));
    }
    Ok(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(family_of("README.md"), "readme");
        assert_eq!(family_of("sub/readme.zh-CN.md"), "readme");
        assert_eq!(family_of("CHANGELOG.md"), "changelog");
        assert_eq!(family_of("HISTORY.md"), "changelog");
        assert_eq!(family_of("LICENSE.md"), "license");
        assert_eq!(family_of("CONTRIBUTING.md"), "contributing");
        assert_eq!(family_of("CODE-OF-CONDUCT.md"), "contributing");
        assert_eq!(family_of("docs/guide.md"), "docs");
    }

    #[test]
    fn titles() {
        assert_eq!(title_of("\n\n# Hello world #\ntext"), "Hello world");
        assert_eq!(title_of("plain first line\n"), "plain first line");
        assert_eq!(title_of(""), "");
    }

    #[test]
    fn relative_paths_are_checked() {
        assert!(checked_relative("docs/a.md").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x.md",
            "a/../b.md",
            "a//b.md",
            "a\\b.md",
        ] {
            assert_eq!(checked_relative(bad).unwrap_err().kind, "invalid-item");
        }
    }

    #[test]
    fn walks_sample_docs_sorted() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-docs");
        let files = walk(&root).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.relative_path.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "CHANGELOG.md",
                "CONTRIBUTING.md",
                "README.md",
                "docs/guide.md"
            ]
        );
        assert!(files.iter().all(|f| f.bytes > 0));
    }
}
