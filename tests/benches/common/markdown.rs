//! The markdown document the replay and snapshot benches prepare: the
//! markdown explorer's prefix cost grows with it.

use std::fmt::Write as _;

/// A deterministic markdown document of at least `bytes` bytes, with every
/// element the explorer counts (headings, lists, fences, tables, quotes,
/// links, footnotes, task lists, raw HTML).
pub fn markdown_document(bytes: usize) -> String {
    let mut text =
        String::from("# Widget Toolkit\n\nA generated README for the sandloop benchmarks.\n\n");
    let mut section = 0usize;
    while text.len() < bytes {
        let n = section;
        let _ = write!(
            text,
            "## Section {n}\n\n\
             Paragraph {n} with *emphasis*, **strong text**, `inline_{n}()`, \
             ~~struck~~ words and a [link to {n}](https://example.com/{n}).\n\
             It has a footnote[^f{n}] and runs over two lines.\n\n\
             - item {n}.a\n  - nested {n}.b\n    - deeper {n}.c\n- item {n}.d\n\n\
             1. first {n}\n2. second {n}\n\n\
             - [ ] open task {n}\n- [x] done task {n}\n\n\
             ```rust\nfn section_{n}() -> usize {{\n    {n}\n}}\n```\n\n\
             | key | value |\n|-----|-------|\n| a{n} | {n} |\n| b{n} | {m} |\n\n\
             > A quote in section {n}.\n\n\
             ### Details {n}\n\n\
             <details><summary>more {n}</summary>hidden {n}</details>\n\n\
             [^f{n}]: Footnote {n}.\n\n",
            m = n * 7
        );
        section += 1;
    }
    text
}
