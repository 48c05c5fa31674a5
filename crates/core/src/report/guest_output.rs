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

#[derive(Deserialize)]
struct CallLine {
    item_id: Option<String>,
    #[serde(default)]
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    stream: String,
    level: Option<String>,
    text: String,
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
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        for line in std::io::BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            let Ok(call) = serde_json::from_str::<CallLine>(&line) else {
                continue;
            };
            let Some(id) = call.item_id.filter(|id| ids.contains(id)) else {
                continue;
            };
            let lines = found.entry((epoch, id)).or_default();
            for entry in call.entries {
                for text in entry.text.lines().filter(|text| !text.trim().is_empty()) {
                    if lines.len() == MAX_LINES {
                        break;
                    }
                    let text = cut_chars(text, MAX_LINE_CHARS);
                    lines.push(match (&entry.stream[..], &entry.level) {
                        ("log", Some(level)) => format!("[{level}] {text}"),
                        _ => text.into_owned(),
                    });
                }
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
