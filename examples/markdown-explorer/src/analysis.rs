//! One pass of a real markdown parser (pulldown-cmark) over a document,
//! folded into owned statistics: element counts, code-fence languages,
//! heading levels and anomalies. Observation keys and weighted flags are
//! derived from it.

use std::collections::{BTreeMap, BTreeSet};

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use sandloop_guest::{Value, json};

/// Anomalies and the weight of their flag (rarer = heavier).
const ANOMALY_WEIGHTS: &[(&str, f64)] = &[
    ("raw_html", 2.0),
    ("unclosed_fence", 2.0),
    ("heading_jump", 1.0),
    ("empty_link", 1.0),
    ("deep_list_nesting", 1.0),
    ("duplicate_heading", 0.5),
    ("no_heading", 0.5),
    ("empty_document", 0.5),
];

/// Rare elements that also earn a flag.
const RARE_ELEMENTS: &[(&str, f64)] = &[("footnote", 1.0), ("task_list", 0.5), ("image", 0.5)];

/// List nesting deeper than this is an anomaly.
const DEEP_LIST: usize = 3;

/// Statistics of one parse.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Analysis {
    /// Document size in bytes.
    pub bytes: usize,
    /// Element name -> occurrences.
    pub elements: BTreeMap<&'static str, usize>,
    /// Heading levels present (1..=6).
    pub heading_levels: BTreeSet<u8>,
    /// Code fence languages (first word of the info string, sanitised;
    /// `none` for a fence without one).
    pub langs: BTreeSet<String>,
    /// Deepest list nesting (0 without lists).
    pub max_list_depth: usize,
    /// Anomaly names.
    pub anomalies: BTreeSet<&'static str>,
}

fn sanitize_lang(info: &str) -> String {
    let word = info.split_whitespace().next().unwrap_or("");
    let word = word.trim_start_matches('{').trim_end_matches('}');
    let lang: String = word
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '#' | '_' | '-' | '.'))
        .take(32)
        .collect::<String>()
        .to_ascii_lowercase();
    if lang.is_empty() {
        "none".to_owned()
    } else {
        lang
    }
}

/// Does this fenced code block's source end with a closing fence?
fn fence_closed(block: &str) -> bool {
    let strip = |line: &str| -> String {
        line.trim_start_matches([' ', '\t', '>'])
            .trim_end()
            .to_owned()
    };
    let mut lines = block.lines();
    let opener = strip(lines.next().unwrap_or(""));
    let Some(fence) = opener.chars().next().filter(|c| *c == '`' || *c == '~') else {
        return true;
    };
    let width = opener.chars().take_while(|c| *c == fence).count();
    match lines.map(strip).rfind(|line| !line.is_empty()) {
        Some(last) => last.chars().count() >= width && last.chars().all(|c| c == fence),
        None => false,
    }
}

/// Inline text: part of the open heading's text; gives open links a text.
fn note_text(text: &str, heading: &mut Option<String>, open_links: &mut [bool]) {
    if let Some(heading) = heading.as_mut() {
        heading.push_str(text);
    }
    if !text.trim().is_empty()
        && let Some(has_text) = open_links.last_mut()
    {
        *has_text = true;
    }
}

impl Analysis {
    /// Parse `text` once and fold the events.
    pub fn of(text: &str) -> Analysis {
        let mut analysis = Analysis {
            bytes: text.len(),
            ..Analysis::default()
        };
        let options = Options::ENABLE_TABLES
            | Options::ENABLE_FOOTNOTES
            | Options::ENABLE_STRIKETHROUGH
            | Options::ENABLE_TASKLISTS;

        let mut last_heading: Option<u8> = None;
        let mut heading_text: Option<String> = None;
        let mut headings_seen: BTreeSet<String> = BTreeSet::new();
        // (has text or image) for each open link
        let mut open_links: Vec<bool> = Vec::new();
        let mut list_depth = 0usize;
        let mut any_event = false;

        for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
            any_event = true;
            match event {
                Event::Start(tag) => match tag {
                    Tag::Heading { level, .. } => {
                        let level = level as u8;
                        analysis.count("heading");
                        analysis.heading_levels.insert(level);
                        if let Some(previous) = last_heading
                            && level > previous + 1
                        {
                            analysis.anomalies.insert("heading_jump");
                        }
                        last_heading = Some(level);
                        heading_text = Some(String::new());
                    }
                    Tag::CodeBlock(CodeBlockKind::Fenced(info)) => {
                        analysis.count("code_block");
                        analysis.count("fenced_code");
                        analysis.langs.insert(sanitize_lang(&info));
                        if !fence_closed(&text[range]) {
                            analysis.anomalies.insert("unclosed_fence");
                        }
                    }
                    Tag::CodeBlock(CodeBlockKind::Indented) => {
                        analysis.count("code_block");
                        analysis.count("indented_code");
                    }
                    Tag::Table(_) => analysis.count("table"),
                    Tag::Link { dest_url, .. } => {
                        analysis.count("link");
                        if dest_url.trim().is_empty() {
                            analysis.anomalies.insert("empty_link");
                        }
                        open_links.push(false);
                    }
                    Tag::Image { .. } => {
                        analysis.count("image");
                        if let Some(has_text) = open_links.last_mut() {
                            *has_text = true;
                        }
                    }
                    Tag::List(start) => {
                        analysis.count(if start.is_some() {
                            "ordered_list"
                        } else {
                            "list"
                        });
                        list_depth += 1;
                        analysis.max_list_depth = analysis.max_list_depth.max(list_depth);
                    }
                    Tag::BlockQuote(_) => analysis.count("blockquote"),
                    Tag::HtmlBlock => {
                        analysis.count("html");
                        analysis.anomalies.insert("raw_html");
                    }
                    Tag::FootnoteDefinition(_) => analysis.count("footnote"),
                    Tag::Emphasis => analysis.count("emphasis"),
                    Tag::Strong => analysis.count("strong"),
                    Tag::Strikethrough => analysis.count("strikethrough"),
                    _ => {}
                },
                Event::End(end) => match end {
                    TagEnd::Heading(_) => {
                        if let Some(text) = heading_text.take() {
                            let text = text.trim().to_lowercase();
                            if !text.is_empty() && !headings_seen.insert(text) {
                                analysis.anomalies.insert("duplicate_heading");
                            }
                        }
                    }
                    TagEnd::Link if open_links.pop() == Some(false) => {
                        analysis.anomalies.insert("empty_link");
                    }
                    TagEnd::List(_) => list_depth = list_depth.saturating_sub(1),
                    _ => {}
                },
                Event::Text(text) => note_text(&text, &mut heading_text, &mut open_links),
                Event::Code(text) => {
                    analysis.count("inline_code");
                    note_text(&text, &mut heading_text, &mut open_links);
                }
                Event::Html(_) | Event::InlineHtml(_) => {
                    analysis.count("html");
                    analysis.anomalies.insert("raw_html");
                }
                Event::FootnoteReference(_) => analysis.count("footnote"),
                Event::Rule => analysis.count("rule"),
                Event::TaskListMarker(_) => analysis.count("task_list"),
                _ => {}
            }
        }

        if !any_event || text.trim().is_empty() {
            analysis.anomalies.insert("empty_document");
        } else if analysis.heading_levels.is_empty() {
            analysis.anomalies.insert("no_heading");
        }
        if analysis.max_list_depth > DEEP_LIST {
            analysis.anomalies.insert("deep_list_nesting");
        }
        analysis
    }

    fn count(&mut self, element: &'static str) {
        *self.elements.entry(element).or_insert(0) += 1;
    }

    /// Observation keys: `element:*`, `heading:h*`, `lang:*`,
    /// `list_depth:*`, `anomaly:*`, in a stable order.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        keys.extend(self.elements.keys().map(|e| format!("element:{e}")));
        keys.extend(self.heading_levels.iter().map(|l| format!("heading:h{l}")));
        keys.extend(self.langs.iter().map(|l| format!("lang:{l}")));
        if self.max_list_depth > 0 {
            keys.push(format!("list_depth:{}", self.max_list_depth.min(8)));
        }
        keys.extend(self.anomalies.iter().map(|a| format!("anomaly:{a}")));
        keys
    }

    /// Weighted flags for anomalies and rare elements present.
    pub fn flags(&self) -> Vec<(&'static str, f64)> {
        let mut flags = Vec::new();
        for (name, weight) in ANOMALY_WEIGHTS {
            if self.anomalies.contains(name) {
                flags.push((*name, *weight));
            }
        }
        for (name, weight) in RARE_ELEMENTS {
            if self.elements.contains_key(name) {
                flags.push((*name, *weight));
            }
        }
        flags
    }

    /// Element counts as a JSON object.
    pub fn elements_json(&self) -> Value {
        Value::Object(
            self.elements
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect(),
        )
    }

    /// What changed from `base` to `self`: `delta:*` keys (without any
    /// prefix), `delta:unchanged` when nothing did.
    pub fn delta_keys(&self, base: &Analysis) -> Vec<String> {
        let mut keys = Vec::new();
        for (element, count) in &base.elements {
            match self.elements.get(element) {
                None => keys.push(format!("delta:lost_{element}")),
                Some(now) if now < count => keys.push(format!("delta:fewer_{element}")),
                Some(now) if now > count => keys.push(format!("delta:more_{element}")),
                Some(_) => {}
            }
        }
        for element in self.elements.keys() {
            if !base.elements.contains_key(element) {
                keys.push(format!("delta:gained_{element}"));
            }
        }
        for anomaly in self.anomalies.difference(&base.anomalies) {
            keys.push(format!("delta:new_anomaly:{anomaly}"));
        }
        for anomaly in base.anomalies.difference(&self.anomalies) {
            keys.push(format!("delta:resolved_anomaly:{anomaly}"));
        }
        for lang in self.langs.difference(&base.langs) {
            keys.push(format!("delta:new_lang:{lang}"));
        }
        for lang in base.langs.difference(&self.langs) {
            keys.push(format!("delta:lost_lang:{lang}"));
        }
        if self.max_list_depth > base.max_list_depth {
            keys.push("delta:deeper_lists".to_owned());
        }
        if keys.is_empty() {
            keys.push("delta:unchanged".to_owned());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_langs_and_clean_document() {
        let a = Analysis::of(
            "# T\n\n## S\n\n```rust\nfn x() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n- [y](http://e)\n",
        );
        for e in [
            "heading",
            "code_block",
            "fenced_code",
            "table",
            "list",
            "link",
        ] {
            assert!(a.elements.contains_key(e), "missing {e}: {a:?}");
        }
        assert_eq!(a.langs.iter().collect::<Vec<_>>(), vec!["rust"]);
        assert!(a.anomalies.is_empty(), "{:?}", a.anomalies);
        let keys = a.keys();
        assert!(keys.contains(&"element:heading".to_owned()));
        assert!(keys.contains(&"lang:rust".to_owned()));
        assert!(keys.contains(&"heading:h2".to_owned()));
        assert!(a.flags().is_empty());
    }

    #[test]
    fn anomalies() {
        let a =
            Analysis::of("# A\n\n### C\n\n[x]()\n\n[](http://e)\n\n<div>hi</div>\n\n```sh\necho\n");
        for anomaly in ["heading_jump", "empty_link", "raw_html", "unclosed_fence"] {
            assert!(a.anomalies.contains(anomaly), "missing {anomaly}: {a:?}");
        }
        assert!(a.flags().contains(&("raw_html", 2.0)));
        assert!(Analysis::of("").anomalies.contains("empty_document"));
        assert!(Analysis::of("just text").anomalies.contains("no_heading"));
        assert!(
            Analysis::of("# A\n\n# A\n")
                .anomalies
                .contains("duplicate_heading")
        );
    }

    #[test]
    fn closed_fences_in_lists_and_quotes() {
        let a =
            Analysis::of("# T\n\n1. x\n   ```rust\n   let a = 1;\n   ```\n\n> ```\n> q\n> ```\n");
        assert!(!a.anomalies.contains("unclosed_fence"), "{a:?}");
        assert!(a.langs.contains("none"));
    }

    #[test]
    fn deltas() {
        let base = Analysis::of("# T\n\n```rust\nx\n```\n");
        let variant = Analysis::of("T\n\n```rust\nx\n");
        let keys = variant.delta_keys(&base);
        assert!(keys.contains(&"delta:lost_heading".to_owned()), "{keys:?}");
        assert!(
            keys.contains(&"delta:new_anomaly:unclosed_fence".to_owned()),
            "{keys:?}"
        );
        assert_eq!(base.delta_keys(&base), vec!["delta:unchanged"]);
    }
}
