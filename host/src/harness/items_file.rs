//! Reading `--items FILE.jsonl`: one JSON object per line. Errors name the
//! file, the 1-based line and the field.

use std::path::Path;

use crate::episode::adapter::{AdapterError, ErrorType, Item, SeedSource};

/// Why an items file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ItemsFileError {
    /// The file could not be read.
    #[error("cannot read items file {path}: {source}")]
    Read {
        /// The items file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a JSON object, or a field has the wrong type.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The items file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The file holds no items.
    #[error("items file {path} holds no items")]
    Empty {
        /// The items file.
        path: String,
    },
}

/// Read every non-blank line of `path` as one item. Blank lines are
/// skipped. `item_id`, when present, must be a string or a number;
/// `is_variant` a boolean; `seed_item_id` a string; `concurrency_keys` an
/// array. Shape rules beyond types (empty or duplicate ids, unknown seeds)
/// are the episode runtime's to judge under the failure policy.
pub fn read_items_file(path: &Path) -> Result<Vec<Item>, ItemsFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ItemsFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut items = Vec::new();
    // A UTF-8 byte-order mark some editors write is not part of the data.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let fail = |message: String| ItemsFileError::Line {
            path: shown.clone(),
            line: line_no,
            message,
        };
        let value: serde_json::Value = serde_json::from_str(trimmed)
            .map_err(|error| fail(format!("not valid JSON: {error}")))?;
        let serde_json::Value::Object(item) = value else {
            return Err(fail("each line must be one JSON object".to_string()));
        };
        check_field(
            &item,
            "item_id",
            |v| v.is_string() || v.is_number() || v.is_null(),
            "a string",
        )
        .map_err(&fail)?;
        check_field(
            &item,
            "is_variant",
            |v| v.is_boolean() || v.is_null(),
            "true or false",
        )
        .map_err(&fail)?;
        check_field(
            &item,
            "seed_item_id",
            |v| v.is_string() || v.is_null(),
            "a string",
        )
        .map_err(&fail)?;
        check_field(
            &item,
            "concurrency_keys",
            |v| v.is_array() || v.is_null(),
            "an array of strings",
        )
        .map_err(&fail)?;
        items.push(item);
    }
    if items.is_empty() {
        return Err(ItemsFileError::Empty { path: shown });
    }
    Ok(items)
}

fn check_field(
    item: &Item,
    field: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
    expected: &str,
) -> Result<(), String> {
    match item.get(field) {
        Some(value) if !ok(value) => {
            Err(format!("field `{field}` must be {expected}, got {value}"))
        }
        _ => Ok(()),
    }
}

/// A [`SeedSource`] whose seeds are an items file's items, offered again
/// every epoch up to `epochs` (after that, none: the run ends with
/// `seed_queue_empty`), and whose variants are compiled by another source
/// (the adapter's control instance), when there is one. The last epoch
/// takes the items without copying them.
pub struct FileSeeds<'a> {
    items: Vec<Item>,
    epochs: u32,
    compiler: Option<&'a mut dyn SeedSource>,
}

impl<'a> FileSeeds<'a> {
    /// Seeds `items` for epochs `1..=epochs`; `compiler` compiles catalog
    /// specs.
    pub fn new(items: Vec<Item>, epochs: u32, compiler: Option<&'a mut dyn SeedSource>) -> Self {
        Self {
            items,
            epochs,
            compiler,
        }
    }
}

impl SeedSource for FileSeeds<'_> {
    fn list_seed_items(&mut self, _arm: &str, epoch: u32) -> Result<Vec<Item>, AdapterError> {
        Ok(if epoch < self.epochs {
            self.items.clone()
        } else if epoch == self.epochs {
            std::mem::take(&mut self.items)
        } else {
            Vec::new()
        })
    }

    fn compile_variant(&mut self, spec: &Item, seed: &Item) -> Result<Item, AdapterError> {
        match self.compiler.as_deref_mut() {
            Some(compiler) => compiler.compile_variant(spec, seed),
            None => Err(AdapterError::new(
                ErrorType::MissingExport,
                "the adapter does not export `variants.compile-variant`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    #[test]
    fn reads_objects_and_skips_blank_lines() {
        let f = file(
            "{\"item_id\":\"a\"}\n\n{\"item_id\":\"b\",\"is_variant\":true,\"seed_item_id\":\"a\"}\n",
        );
        let items = read_items_file(f.path()).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1]["seed_item_id"], "a");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let f = file("{\"item_id\":\"a\"}\n{\"item_id\":\"b\",\"is_variant\":\"yes\"}\n");
        let message = read_items_file(f.path()).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{}:2:", f.path().display())),
            "{message}"
        );
        assert!(message.contains("`is_variant`"), "{message}");

        let f = file("{\"item_id\":\"a\"}\n[1,2]\n");
        let message = read_items_file(f.path()).unwrap_err().to_string();
        assert!(
            message.contains(":2: each line must be one JSON object"),
            "{message}"
        );

        let f = file("{\"item_id\":\n");
        let message = read_items_file(f.path()).unwrap_err().to_string();
        assert!(message.contains(":1: not valid JSON"), "{message}");
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        let f = file("\u{feff}{\"item_id\":\"a\"}\n");
        assert_eq!(read_items_file(f.path()).unwrap()[0]["item_id"], "a");
    }

    #[test]
    fn empty_and_missing_files_are_errors() {
        assert!(matches!(
            read_items_file(file("\n\n").path()),
            Err(ItemsFileError::Empty { .. })
        ));
        assert!(matches!(
            read_items_file(Path::new("/nonexistent/items.jsonl")),
            Err(ItemsFileError::Read { .. })
        ));
    }
}
