//! No import loops between the files of a crate, checked by `cargo test -p
//! sandloop --lib layering_`: when file `a.rs` names an item of `b.rs`
//! (`use super::b::…`, `crate::x::b::…`, in code, not in comments or test
//! modules), `b.rs` and whatever it names must not name `a.rs` back. A name
//! both sides need lives in a third file, where it belongs.
//!
//! A path is resolved to the longest module it names: `super::b::Item`
//! from `x/a.rs` is module `x/b`; `crate::x` alone is `x` (a folder's
//! `mod.rs`). A module naming its own parent (`super::Item`) counts as an
//! edge to the parent, so a parent that names a child's items back forms a
//! loop too. The same holds between a crate's top-level modules (a
//! folder and everything in it counted as one): `harness/` names
//! `replay/`, so nothing in `replay/` names `harness/`. Names reached
//! through the crate root (`crate::Item`, a
//! re-export of `lib.rs`) are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::code_map_check::{is_test_module, rust_files};

/// The source folders checked: one crate each.
const CRATES: &[&str] = &[
    "crates/contract/src",
    "crates/core/src",
    "crates/sandbox/src",
    "crates/loop/src",
    "crates/distributed/src",
    "host/src",
    "guest-sdk/src",
];

/// Loops kept on purpose, with the reason: each is one recursive type
/// whose parts are split over two files, not a name in the wrong place.
const KEPT: &[(&str, &[&str], &str)] = &[(
    "crates/sandbox/src",
    &["component/loader", "component/twin"],
    "a LoadedAdapter holds its Twins, which are LoadedAdapters in engines of their own",
)];

/// Module path of a file under its crate's source folder, `/`-separated:
/// `x/a.rs` → `x/a`, `x/mod.rs` → `x`, `lib.rs`/`main.rs` → `` (the root).
fn module_of(relative: &str) -> String {
    let stem = relative.strip_suffix(".rs").unwrap_or(relative);
    match stem {
        "lib" | "main" => String::new(),
        _ => stem.strip_suffix("/mod").unwrap_or(stem).to_owned(),
    }
}

/// The code of a file: up to its inline `#[cfg(test)] mod tests`, without
/// comment lines.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]" && lines.peek().is_some_and(|l| l.starts_with("mod tests {")) {
            break;
        }
        if !trimmed.starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// Every `crate::…`, `super::…` or `self::…` path in `code`, its segments
/// split; a braced group (`super::{a::X, b}`) gives one path per member.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"]
        .iter()
        .flat_map(|head| code.match_indices(head).map(|(at, _)| at))
    {
        if start > 0 && (ident(bytes[start - 1] as char) || bytes[start - 1] == b':') {
            continue;
        }
        let rest = &code[start..];
        let end = rest
            .find(|c: char| !(ident(c) || c == ':'))
            .unwrap_or(rest.len());
        let head: Vec<String> = rest[..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if rest[end..].starts_with('{') && rest[..end].ends_with("::") {
            let group = &rest[end + 1..rest[end..].find('}').map_or(rest.len(), |c| end + c)];
            for member in group.split(',') {
                let mut path = head.clone();
                path.extend(
                    member
                        .trim()
                        .split("::")
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty() && s.chars().all(ident)),
                );
                paths.push(path);
            }
        } else {
            paths.push(head);
        }
    }
    paths
}

/// The module `path` (written in `from`) names: the longest prefix of it
/// that is one of `modules`.
fn resolve(from: &str, path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut base: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split('/').collect()
    };
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("super") | Some("self") => {
            while let Some(head) = rest.first().map(String::as_str) {
                match head {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut found = None;
    let mut candidate: Vec<&str> = base.clone();
    if modules.contains(&candidate.join("/")) {
        found = Some(candidate.join("/"));
    }
    for segment in rest {
        candidate.push(segment);
        let name = candidate.join("/");
        if modules.contains(&name) {
            found = Some(name);
        } else {
            break;
        }
    }
    found
}

/// The import edges between the files under `src`: module → the modules
/// it names (itself left out).
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = rust_files(src)
        .into_iter()
        .filter_map(|path| {
            let relative = path
                .strip_prefix(src)
                .ok()?
                .to_string_lossy()
                .replace('\\', "/");
            if is_test_module(&relative) {
                return None;
            }
            let text = fs::read_to_string(&path).unwrap();
            Some((relative, text))
        })
        .collect();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|(relative, _)| module_of(relative))
        .collect();
    let mut graph = BTreeMap::new();
    for (relative, text) in &files {
        let from = module_of(relative);
        let names: BTreeSet<String> = paths_in(&code_of(text))
            .iter()
            .filter_map(|path| resolve(&from, path, &modules))
            .filter(|to| *to != from && !to.is_empty())
            .collect();
        graph.insert(from, names);
    }
    graph
}

/// `graph` with each module counted as its top-level module (`x/a` as
/// `x`); edges within one top-level module are left out.
fn top_level(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |module: &str| module.split('/').next().unwrap_or(module).to_owned();
    let mut collapsed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, names) in graph {
        let entry = collapsed.entry(top(from)).or_default();
        entry.extend(names.iter().map(|to| top(to)).filter(|to| *to != top(from)));
    }
    collapsed
}

/// The loops of `graph`: each set of two or more modules that all reach
/// one another (a strongly connected component), sorted.
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reaches = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|node| (node, reaches(node))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (node, from_node) in &reach {
        let component: Vec<String> = from_node
            .iter()
            .filter(|other| reach.get(other).is_some_and(|back| back.contains(*node)))
            .cloned()
            .collect();
        if component.len() > 1 {
            found.insert(component);
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
    }

    #[test]
    fn layering_no_import_loops_between_the_files_of_a_crate() {
        let mut problems = Vec::new();
        for src in CRATES {
            let graph = import_graph(&repository().join(src));
            for component in loops(&top_level(&graph)) {
                problems.push(format!(
                    "{src}, top-level modules: {}",
                    component.join(" ↔ ")
                ));
            }
            for component in loops(&graph) {
                let kept = KEPT.iter().any(|(crate_src, modules, _)| {
                    crate_src == src
                        && modules
                            .iter()
                            .copied()
                            .eq(component.iter().map(String::as_str))
                });
                if !kept {
                    problems.push(format!("{src}: {}", component.join(" ↔ ")));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "files that name each other's items (move the shared name to where it belongs):\n  {}",
            problems.join("\n  ")
        );
    }

    #[test]
    fn layering_a_loop_through_a_parent_or_a_group_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        fs::create_dir(src.join("x")).unwrap();
        fs::write(src.join("lib.rs"), "pub mod x;\npub mod c;\n").unwrap();
        fs::write(src.join("x/mod.rs"), "mod a;\nmod b;\nuse self::a::A;\n").unwrap();
        fs::write(
            src.join("x/a.rs"),
            "use super::{b::B, Shared};\n// super::c is a comment\n",
        )
        .unwrap();
        fs::write(src.join("x/b.rs"), "pub struct B;\n").unwrap();
        fs::write(
            src.join("c.rs"),
            "pub struct C;\n#[cfg(test)]\nmod tests {\n    use crate::x::a::A;\n}\n",
        )
        .unwrap();
        let graph = import_graph(src);
        assert_eq!(
            graph["x/a"],
            BTreeSet::from(["x".to_owned(), "x/b".to_owned()])
        );
        assert!(graph["c"].is_empty(), "a test module's names are not edges");
        assert_eq!(loops(&graph), vec![vec!["x".to_owned(), "x/a".to_owned()]]);
        assert!(loops(&top_level(&graph)).is_empty(), "x/ names only itself");
        // y/p names c, which names y/q: no file loop, but y/ and c name
        // each other.
        fs::create_dir(src.join("y")).unwrap();
        fs::write(src.join("y/mod.rs"), "pub mod p;\npub mod q;\n").unwrap();
        fs::write(src.join("y/p.rs"), "pub struct P(crate::c::C);\n").unwrap();
        fs::write(src.join("y/q.rs"), "pub struct Q;\n").unwrap();
        fs::write(src.join("c.rs"), "pub struct C(crate::y::q::Q);\n").unwrap();
        let graph = import_graph(src);
        assert_eq!(loops(&graph), vec![vec!["x".to_owned(), "x/a".to_owned()]]);
        assert_eq!(
            loops(&top_level(&graph)),
            vec![vec!["c".to_owned(), "y".to_owned()]]
        );
    }
}
