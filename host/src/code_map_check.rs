//! ARCHITECTURE.md's code map kept whole, checked by `cargo test -p
//! sandloop --lib docs_`: every Rust source file of the workspace's crates
//! (`crates/*/src`, `host/src`, `guest-sdk/src`, and the tests package's
//! `src`, `tests` and `benches`) is named in the section of the page that
//! describes its crate.
//!
//! A file is named when the section holds, in backticks, its path under the
//! crate's source folder or any shorter end of that path (`replay/crew.rs`,
//! `crew.rs`), or its full path from the repository's root. A `mod.rs` is
//! named by its folder (`` `counterfactual/` ``, or `` `host/src/cli/` `` from
//! the root). Test modules that sit
//! beside their module (`<module>_tests.rs`, or `tests.rs` in a module's
//! folder) are covered by the module they test.

use std::fs;
use std::path::{Path, PathBuf};

/// Each source folder, the folder its paths are counted from, and the
/// heading of its crate's section in ARCHITECTURE.md.
const SOURCES: &[(&str, &str, &str)] = &[
    (
        "crates/contract/src",
        "crates/contract/src",
        "### `sandloop-contract`",
    ),
    ("crates/core/src", "crates/core/src", "### `sandloop-core`"),
    (
        "crates/sandbox/src",
        "crates/sandbox/src",
        "### `sandloop-sandbox`",
    ),
    ("crates/loop/src", "crates/loop/src", "### `sandloop-loop`"),
    (
        "crates/distributed/src",
        "crates/distributed/src",
        "### `sandloop-distributed`",
    ),
    ("host/src", "host/src", "### `sandloop` (the CLI)"),
    ("guest-sdk/src", "guest-sdk/src", "### `sandloop-guest`"),
    ("tests/src", "tests", "### `sandloop-tests`"),
    ("tests/tests", "tests/tests/e2e", "### `sandloop-tests`"),
    ("tests/benches", "tests/benches", "### `sandloop-tests`"),
];

/// The section of `page` under `heading`: up to the next heading of level
/// two or three.
fn section<'a>(page: &'a str, heading: &str) -> Option<&'a str> {
    let start = page.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &page[start..];
    let end = rest
        .match_indices('\n')
        .map(|(at, _)| at + 1)
        .find(|&at| rest[at..].starts_with("## ") || rest[at..].starts_with("### "))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Every `.rs` file under `dir`, recursively.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Whether `relative` (a path under its source folder, `/`-separated) is a
/// test module beside the module it tests.
pub(crate) fn is_test_module(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    name.ends_with("_tests.rs") || (name == "tests.rs" && relative.contains('/'))
}

/// The spellings that name `relative` (under its source folder) in a
/// section: every end of its path, the folder for a `mod.rs`, and its path
/// from the repository's root, each in backticks.
fn spellings(relative: &str, from_root: &str) -> Vec<String> {
    let path = relative
        .strip_suffix("/mod.rs")
        .map_or(relative.to_string(), |folder| format!("{folder}/"));
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    let mut names: Vec<String> = (0..parts.len())
        .map(|first| {
            let end = parts[first..].join("/");
            if path.ends_with('/') {
                format!("`{end}/`")
            } else {
                format!("`{end}`")
            }
        })
        .collect();
    names.push(format!("`{from_root}`"));
    if let Some(folder) = from_root.strip_suffix("/mod.rs") {
        names.push(format!("`{folder}/`"));
    }
    names
}

/// The source files `page` leaves out, as `folder/path (section)` lines.
fn unmapped(root: &Path, page: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for (dir, base, heading) in SOURCES {
        let Some(text) = section(page, heading) else {
            missing.push(format!("{dir}: ARCHITECTURE.md has no section {heading}"));
            continue;
        };
        for file in rust_files(&root.join(dir)) {
            let from_root = file
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let relative = file
                .strip_prefix(root.join(base))
                .unwrap_or_else(|_| file.strip_prefix(root.join(dir)).unwrap())
                .to_string_lossy()
                .replace('\\', "/");
            if is_test_module(&relative) {
                continue;
            }
            if !spellings(&relative, &from_root)
                .iter()
                .any(|name| text.contains(name.as_str()))
            {
                missing.push(format!("{from_root} (section {heading})"));
            }
        }
    }
    missing
}

#[test]
fn docs_every_source_file_is_in_the_code_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let missing = unmapped(root, &page);
    assert!(
        missing.is_empty(),
        "source files ARCHITECTURE.md's code map does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn docs_code_map_check_finds_a_file_left_out_and_accepts_its_spellings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    // The page with one file's every mention taken out reports that file.
    let without = page
        .replace("`crew.rs`", "crew")
        .replace("`replay/crew.rs`", "crew");
    let missing = unmapped(root, &without);
    assert_eq!(
        missing,
        ["crates/core/src/replay/crew.rs (section ### `sandloop-core`)"]
    );
    assert_eq!(
        spellings(
            "replay/counterfactual/mod.rs",
            "crates/core/src/replay/counterfactual/mod.rs"
        ),
        [
            "`replay/counterfactual/`",
            "`counterfactual/`",
            "`crates/core/src/replay/counterfactual/mod.rs`",
            "`crates/core/src/replay/counterfactual/`"
        ]
    );
    assert!(
        is_test_module("replay/group_tests.rs") && is_test_module("replay/counterfactual/tests.rs")
    );
    assert!(!is_test_module("tests.rs") && !is_test_module("replay/group.rs"));
    let page = "# t\n\n### `a`\n\nx `one.rs`\n\n### `b`\n\ny\n## c\n";
    assert_eq!(section(page, "### `a`"), Some("\nx `one.rs`\n\n"));
    assert_eq!(section(page, "### `b`"), Some("\ny\n"));
    assert_eq!(section(page, "### `z`"), None);
}
