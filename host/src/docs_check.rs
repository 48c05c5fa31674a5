//! The repository's Markdown links, checked by `cargo test -p sandloop
//! --lib docs_`: every relative link and image of README.md,
//! ARCHITECTURE.md, the book (`docs/src/`) and the examples' READMEs names
//! a file or directory that exists, every `#anchor` a heading of its target
//! page, no page of the book links to a Markdown file outside the book
//! (mdBook would render it as a missing `.html` page), and every page of the
//! book is listed in `docs/src/SUMMARY.md`.
//! mdBook 0.4 does not fail on a broken link by itself; this does.
//!
//! Headings become anchors as mdBook and GitHub make them: the heading's
//! text without its Markdown (backticks, link targets), lowercased, each
//! whitespace turned into `-`, everything but letters, digits, `-` and `_`
//! dropped; a repeated anchor gets `-1`, `-2`, …

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The book's sources: mdBook turns their links to `.md` files into links
/// to `.html` files, which exist only for pages of the book.
const BOOK_SRC: &str = "docs/src";

/// A link found in a Markdown file, with its 1-based line.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The links of a Markdown text: inline links and images
/// (`[text](target)`), reference definitions (`[label]: target`) and HTML
/// `src`/`href` attributes, outside fenced code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut fence: Option<String> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str()) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(trimmed[..3].to_string());
            continue;
        }
        let line = without_code_spans(raw);
        let mut push = |target: &str| {
            found.push(Link {
                line: index + 1,
                target: target.to_string(),
            });
        };
        if let Some(rest) = reference_definition(&line) {
            push(rest);
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find([')', ' ']).unwrap_or(after.len());
            push(after[..end].trim_matches(['<', '>']));
            rest = &after[end..];
        }
        for attribute in ["src=\"", "href=\""] {
            let mut rest = line.as_str();
            while let Some(at) = rest.find(attribute) {
                let after = &rest[at + attribute.len()..];
                let end = after.find('"').unwrap_or(after.len());
                push(&after[..end]);
                rest = &after[end..];
            }
        }
    }
    found
}

/// `target` of a `[label]: target` line.
fn reference_definition(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if !trimmed.starts_with('[') || trimmed.starts_with("[^") {
        return None;
    }
    let close = trimmed.find("]:")?;
    trimmed[close + 2..].split_whitespace().next()
}

/// `line` with every code span (`` `…` ``, any run of backticks) removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + run..];
        match after.find(&"`".repeat(run)) {
            Some(end) => rest = &after[end + run..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchors of a Markdown page's headings (outside fenced code), plus
/// every HTML `id`/`name` attribute.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut found = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for attribute in ["id=\"", "name=\""] {
            if let Some(at) = line.find(attribute) {
                let after = &line[at + attribute.len()..];
                found.push(after[..after.find('"').unwrap_or(after.len())].to_string());
            }
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if level == 0 || level > 6 || !line[level..].starts_with(' ') {
            continue;
        }
        let id = heading_id(&line[level..]);
        let count = seen.entry(id.clone()).or_insert(0);
        found.push(if *count == 0 {
            id
        } else {
            format!("{id}-{count}")
        });
        *count += 1;
    }
    found
}

/// A heading's anchor (see the module's doc).
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim();
    // `[text](target)` reads as `text`.
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        rest = &after[after.find(')').map_or(after.len(), |end| end + 1)..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// `path` with `.` and `..` folded, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Every broken link of `files` (paths relative to `root`), as
/// `FILE:LINE: message`.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut anchor_cache: HashMap<PathBuf, Vec<String>> = HashMap::new();
    for file in files {
        let Ok(text) = fs::read_to_string(root.join(file)) else {
            problems.push(format!("{}: cannot be read", file.display()));
            continue;
        };
        for link in links(&text) {
            let target = link.target.as_str();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path_part, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target, None),
            };
            let resolved = if path_part.is_empty() {
                file.clone()
            } else {
                normalize(&file.parent().unwrap_or(Path::new("")).join(path_part))
            };
            let at = format!("{}:{}", file.display(), link.line);
            if file.starts_with(BOOK_SRC)
                && !resolved.starts_with(BOOK_SRC)
                && resolved.extension().is_some_and(|ext| ext == "md")
            {
                problems.push(format!(
                    "{at}: `{target}`: mdBook renders a link to a page outside {BOOK_SRC} \
                     as a missing .html file; name the file without a link, or move the page \
                     into the book"
                ));
                continue;
            }
            if !root.join(&resolved).exists() {
                problems.push(format!(
                    "{at}: `{target}`: no such file {}",
                    resolved.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let known = anchor_cache.entry(resolved.clone()).or_insert_with(|| {
                anchors(&fs::read_to_string(root.join(&resolved)).unwrap_or_default())
            });
            if !known.iter().any(|a| a == anchor) {
                problems.push(format!(
                    "{at}: `{target}`: {} has no heading with anchor #{anchor}",
                    resolved.display()
                ));
            }
        }
    }
    problems
}

/// The Markdown files under `dir` (relative to `root`), at any depth, sorted.
fn markdown_under(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return found;
    };
    for entry in entries.flatten() {
        let relative = dir.join(entry.file_name());
        if entry.path().is_dir() {
            found.extend(markdown_under(root, &relative));
        } else if relative.extension().is_some_and(|ext| ext == "md") {
            found.push(relative);
        }
    }
    found.sort();
    found
}

/// The repository's root (this crate is `host/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The files whose links are checked.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    files.extend(markdown_under(root, Path::new(BOOK_SRC)));
    for dir in ["examples", "guest-sdk"] {
        files.extend(
            markdown_under(root, Path::new(dir))
                .into_iter()
                .filter(|path| path.file_name().is_some_and(|name| name == "README.md"))
                .filter(|path| !path.components().any(|c| c.as_os_str() == "node_modules"))
                .filter(|path| !path.to_string_lossy().contains("sample-docs")),
        );
    }
    files
}

#[test]
fn docs_links_resolve() {
    let root = repo_root();
    let problems = broken_links(&root, &checked_files(&root));
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn docs_every_book_page_is_in_the_summary() {
    let root = repo_root();
    let summary = fs::read_to_string(root.join("docs/src/SUMMARY.md")).unwrap();
    let listed: Vec<PathBuf> = links(&summary)
        .into_iter()
        .map(|link| normalize(&Path::new("docs/src").join(link.target)))
        .collect();
    for page in markdown_under(&root, Path::new("docs/src")) {
        if page.file_name().is_some_and(|name| name == "SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page),
            "{} is not in docs/src/SUMMARY.md",
            page.display()
        );
    }
}

#[test]
fn docs_check_finds_broken_files_and_anchors_and_skips_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("book")).unwrap();
    fs::write(
        root.join("book/a.md"),
        "# Title\n\n## `run` and *more*\n\n## Title\n\nSee [b](b.md#part-two), [self](#title-1),\n\
         [gone](missing.md), ![img](img.png), [bad](#nowhere) and [web](https://x.invalid/y).\n\
         `[not a link](nowhere.md)`\n```\n[in code](nowhere.md)\n```\n\
         [ref]: ../book/b.md#part-one\n<img src=\"there.png\">\n",
    )
    .unwrap();
    fs::write(root.join("book/b.md"), "# Part one\n## Part two\n").unwrap();
    fs::write(root.join("book/there.png"), b"png").unwrap();
    let problems = broken_links(root, &[PathBuf::from("book/a.md")]);
    assert_eq!(
        problems,
        vec![
            "book/a.md:8: `missing.md`: no such file book/missing.md".to_string(),
            "book/a.md:8: `img.png`: no such file book/img.png".to_string(),
            "book/a.md:8: `#nowhere`: book/a.md has no heading with anchor #nowhere".to_string(),
        ]
    );
    assert_eq!(
        anchors("# A\n## `run` and *more*\n## A\n"),
        vec!["a", "run-and-more", "a-1"]
    );
}

#[test]
fn docs_check_refuses_book_links_to_pages_outside_the_book() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("docs/src")).unwrap();
    fs::create_dir_all(root.join("examples/demo")).unwrap();
    fs::write(root.join("README.md"), "# Readme\n").unwrap();
    fs::write(root.join("examples/demo/lib.rs"), "").unwrap();
    fs::write(
        root.join("docs/src/page.md"),
        "[readme](../../README.md#readme), [demo](../../examples/demo/), \
         [code](../../examples/demo/lib.rs)\n",
    )
    .unwrap();
    let problems = broken_links(root, &[PathBuf::from("docs/src/page.md")]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("docs/src/page.md:1: `../../README.md#readme`: mdBook renders"),
        "{problems:?}"
    );
}
