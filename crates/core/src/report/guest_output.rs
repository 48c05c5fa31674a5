//! The first lines a failing example printed: its calls' entries in
//! `adapter-output/epoch-NNNN.jsonl` (stderr, stdout and `log` lines, in
//! the order the guest wrote them), so the report shows a traceback or a
//! panic beside the error's message.
//!
//! `adapter-output/` is the guest's own text, kept for the author: a
//! missing file or a line that does not parse only leaves the example
//! without output, it never stops the report.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::errors::ErrorClass;
use crate::ellipsis::cut_chars;
use crate::harness::run_files::ADAPTER_OUTPUT_DIR;

/// How many lines of an example's output the report keeps.
pub const MAX_LINES: usize = 8;
/// How many characters of one line it keeps.
pub const MAX_LINE_CHARS: usize = 200;

/// One line of `adapter-output/epoch-NNNN.jsonl`: what one call printed.
#[derive(Clone, Debug, Deserialize)]
pub struct CallLine {
    /// The item the call ran, when it ran one.
    pub item_id: Option<String>,
    /// The call (`execute`, `prepare-episode-group`, …).
    #[serde(default)]
    pub call: String,
    /// What it printed, in order.
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// One chunk a call printed.
#[derive(Clone, Debug, Deserialize)]
pub struct Entry {
    /// `stdout`, `stderr` or `log`.
    pub stream: String,
    /// The level of a `log` entry.
    pub level: Option<String>,
    /// The text.
    pub text: String,
}

impl Entry {
    /// The entry's non-empty lines, a `log` line as `[level] text`.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.text
            .lines()
            .filter(|text| !text.trim().is_empty())
            .map(|text| match (&self.stream[..], &self.level) {
                ("log", Some(level)) => format!("[{level}] {text}"),
                _ => text.to_string(),
            })
    }
}

/// Every call line of one `adapter-output/epoch-NNNN.jsonl`, in order; a
/// missing file is none, a line that does not parse is passed over.
pub fn read_call_lines(path: &Path) -> Vec<CallLine> {
    let Ok(file) = crate::input_file::open_regular_input(path) else {
        return Vec::new();
    };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect()
}

/// Fills each example's `guest_output` from the run directory `dir`: the
/// first [`MAX_LINES`] non-empty lines its item's calls printed in the
/// example's epoch (a `log` line is shown as `[level] text`).
pub fn attach(dir: &Path, classes: &mut [ErrorClass]) {
    let mut wanted: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for example in classes.iter().flat_map(|class| &class.examples) {
        wanted
            .entry(example.epoch)
            .or_default()
            .insert(example.item_id.clone());
    }
    let mut found: BTreeMap<(u32, String), Vec<String>> = BTreeMap::new();
    for (epoch, ids) in wanted {
        let path = dir
            .join(ADAPTER_OUTPUT_DIR)
            .join(format!("epoch-{epoch:04}.jsonl"));
        for call in read_call_lines(&path) {
            let Some(id) = call.item_id.filter(|id| ids.contains(id)) else {
                continue;
            };
            let lines = found.entry((epoch, id)).or_default();
            for line in call.entries.iter().flat_map(Entry::lines) {
                if lines.len() == MAX_LINES {
                    break;
                }
                lines.push(cut_chars(&line, MAX_LINE_CHARS).into_owned());
            }
        }
    }
    for example in classes.iter_mut().flat_map(|class| &mut class.examples) {
        if let Some(lines) = found.get(&(example.epoch, example.item_id.clone())) {
            example.guest_output = lines.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::errors::ErrorExample;

    fn example(item_id: &str, epoch: u32) -> ErrorExample {
        ErrorExample {
            item_id: item_id.into(),
            epoch,
            kind: None,
            message: "m".into(),
            guest_output: Vec::new(),
        }
    }

    #[test]
    fn an_examples_first_lines_come_from_its_own_epoch_and_item() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join(ADAPTER_OUTPUT_DIR);
        std::fs::create_dir(&output).unwrap();
        let traceback = "Traceback (most recent call last):\n  File \"/0/app.py\", line 9, in execute\nKeyError: 'text'\n";
        let lines = [
            serde_json::json!({"item_id": "other", "entries": [{"stream": "stderr", "text": "not mine"}]}).to_string(),
            "{damaged".to_string(),
            serde_json::json!({"item_id": "bad", "call": "execute", "entries": [
                {"stream": "log", "level": "warn", "text": "about to fail"},
                {"stream": "stderr", "text": traceback},
            ]})
            .to_string(),
        ];
        std::fs::write(output.join("epoch-0002.jsonl"), lines.join("\n")).unwrap();
        let mut classes = vec![ErrorClass {
            class: "trap".into(),
            count: 3,
            examples: vec![example("bad", 2), example("bad", 1), example("quiet", 2)],
        }];
        attach(dir.path(), &mut classes);
        let examples = &classes[0].examples;
        assert_eq!(
            examples[0].guest_output,
            [
                "[warn] about to fail",
                "Traceback (most recent call last):",
                "  File \"/0/app.py\", line 9, in execute",
                "KeyError: 'text'",
            ]
        );
        assert!(examples[1].guest_output.is_empty(), "epoch 1 has no file");
        assert!(examples[2].guest_output.is_empty(), "it printed nothing");
    }

    #[test]
    fn output_is_cut_to_its_first_lines_and_their_first_characters() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join(ADAPTER_OUTPUT_DIR);
        std::fs::create_dir(&output).unwrap();
        let text: String = (0..20)
            .map(|n| format!("{n}{}\n", "x".repeat(300)))
            .collect();
        let line =
            serde_json::json!({"item_id": "bad", "entries": [{"stream": "stdout", "text": text}]});
        std::fs::write(output.join("epoch-0001.jsonl"), line.to_string()).unwrap();
        let mut classes = vec![ErrorClass {
            class: "trap".into(),
            count: 1,
            examples: vec![example("bad", 1)],
        }];
        attach(dir.path(), &mut classes);
        let shown = &classes[0].examples[0].guest_output;
        assert_eq!(shown.len(), MAX_LINES);
        assert!(shown[7].starts_with('7'));
        assert_eq!(shown[0].chars().count(), MAX_LINE_CHARS + 1);
    }
}
