//! Reading `--items FILE.jsonl`: one JSON object per line. Errors name the
//! file, the 1-based line and the field.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::item_line::LineChecker;
use crate::episode::adapter::{AdapterError, ErrorType, Item, SeedSource};
use crate::episode::stored::StoredItems;

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

/// Read every non-blank line of `path` as one item (`-`: of standard
/// input, named `<stdin>` in errors). Blank lines are skipped. `item_id`, when present, must be a string or a number;
/// `is_variant` a boolean; `seed_item_id` a string; `concurrency_keys` an
/// array; no field may nest arrays and objects past
/// [`crate::episode::value::MAX_INPUT_NESTING`] levels (counting the
/// item's own). Text that is not UTF-8 is an error naming its line. Shape
/// rules beyond types (empty or duplicate ids, unknown seeds) are the
/// episode runtime's to judge under the failure policy.
///
/// The items are checked as they are read, a line at a time, and kept
/// compactly ([`StoredItems`]: where each line is, plus the fields grouping
/// reads); the first error found, by line, is the one reported.
pub fn load_items_file(path: &Path) -> Result<StoredItems, ItemsFileError> {
    let from_stdin = path == Path::new(STDIN_PATH);
    let path = if from_stdin {
        Path::new(STDIN_SHOWN)
    } else {
        path
    };
    let shown = path.display().to_string();
    let read_error = |source| ItemsFileError::Read {
        path: shown.clone(),
        source,
    };
    let mut file = if from_stdin {
        use std::os::fd::AsFd;
        File::from(
            io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(read_error)?,
        )
    } else {
        File::open(path).map_err(read_error)?
    };
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        // A pipe (`--items <(…)`, /dev/stdin) cannot be read again by
        // position: its items go to an unnamed temporary file first.
        let mut copy = tempfile::tempfile().map_err(read_error)?;
        io::copy(&mut file, &mut copy).map_err(read_error)?;
        file = copy;
    }
    let len = file.metadata().map_err(read_error)?.len();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let count = if len < PART_MIN_BYTES {
        1
    } else {
        cores as u64
    };
    load_in_parts(path, file, count)
}

/// The path that reads the items from standard input (`--items -`).
pub const STDIN_PATH: &str = "-";
/// How errors name standard input.
const STDIN_SHOWN: &str = "<stdin>";

/// [`load_items_file`] of the open `file`, read in `count` parts.
fn load_in_parts(path: &Path, file: File, count: u64) -> Result<StoredItems, ItemsFileError> {
    let shown = path.display().to_string();
    let read_error = |source| ItemsFileError::Read {
        path: shown.clone(),
        source,
    };
    let parts = file_parts(&file, count).map_err(read_error)?;
    // Each part is counted, then read and checked, on its own thread. The
    // first part's store is sized for every line, so the others join it
    // without growing it; the first error by line wins.
    let lines: Vec<usize> = in_parallel(&parts, |&(start, end)| {
        count_lines(FileRange::new(&file, start, end))
    })
    .into_iter()
    .collect::<io::Result<_>>()
    .map_err(read_error)?;
    let total: usize = lines.iter().sum();
    let jobs: Vec<(u64, u64, usize, usize)> = parts
        .iter()
        .zip(&lines)
        .enumerate()
        .map(|(k, (&(start, end), &lines))| (start, end, lines, if k == 0 { total } else { lines }))
        .collect();
    let scanned = in_parallel(&jobs, |&(start, end, lines, room)| {
        scan_part(path, &file, (start, end), lines, room)
    });
    let mut lines_before = 0;
    let mut stored: Option<StoredItems> = None;
    for part in scanned {
        let part = part?;
        if let Some(ScanError { line, message }) = part.error {
            return Err(ItemsFileError::Line {
                path: shown,
                line: lines_before + line,
                message,
            });
        }
        lines_before += part.lines;
        match stored.as_mut() {
            None => stored = Some(part.stored),
            Some(stored) => stored
                .append(part.stored)
                .map_err(|error| ItemsFileError::Line {
                    path: shown.clone(),
                    line: lines_before,
                    message: error.to_string(),
                })?,
        }
    }
    let Some(mut stored) = stored.filter(|stored| !stored.is_empty()) else {
        return Err(ItemsFileError::Empty { path: shown });
    };
    stored.shrink_to_fit();
    Ok(stored)
}

/// `job` applied to each of `jobs` on its own thread; the results in
/// order.
fn in_parallel<J: Sync, R: Send>(jobs: &[J], job: impl Fn(&J) -> R + Sync) -> Vec<R> {
    std::thread::scope(|scope| {
        let job = &job;
        let handles: Vec<_> = jobs
            .iter()
            .map(|each| scope.spawn(move || job(each)))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Files smaller than this are read on one thread.
const PART_MIN_BYTES: u64 = 4 << 20;

/// `count` byte ranges of `file` to read in parallel (one per available
/// core, at most 8, for a file of 4 MiB or more), each but the last ending
/// after a newline; fewer when lines are long.
fn file_parts(file: &File, count: u64) -> io::Result<Vec<(u64, u64)>> {
    let len = file.metadata()?.len();
    let mut parts = Vec::new();
    let mut start = 0;
    for k in 1..=count {
        let end = if k == count {
            len
        } else {
            next_line_start(file, (len * k / count).max(start), len)?
        };
        if end > start {
            parts.push((start, end));
        }
        start = end;
    }
    if parts.is_empty() {
        parts.push((0, 0));
    }
    Ok(parts)
}

/// The offset just after the first newline at or after `from` (`len` when
/// there is none).
fn next_line_start(file: &File, from: u64, len: u64) -> io::Result<u64> {
    let mut reader = BufReader::with_capacity(1 << 16, FileRange::new(file, from, len));
    let mut skipped = Vec::new();
    let read = reader.read_until(b'\n', &mut skipped)?;
    Ok(from + read as u64)
}

/// Reads `[pos, end)` of a file with positioned reads, so that parts of
/// one file are read on several threads through one descriptor.
struct FileRange<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl<'f> FileRange<'f> {
    fn new(file: &'f File, pos: u64, end: u64) -> Self {
        Self { file, pos, end }
    }
}

impl io::Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += read as u64;
        Ok(read)
    }
}

/// What reading one part of the file found.
struct Part {
    stored: StoredItems,
    /// Lines in the part, blank ones included.
    lines: usize,
    /// The part's first bad line, if any.
    error: Option<ScanError>,
}

/// A bad line: 1-based within its part, and what is wrong with it.
struct ScanError {
    line: usize,
    message: String,
}

/// Reads and checks the `lines` lines of `[start, end)` into a store with
/// room for `room` items, stopping at the first bad line.
fn scan_part(
    path: &Path,
    file: &File,
    (start, end): (u64, u64),
    lines: usize,
    room: usize,
) -> Result<Part, ItemsFileError> {
    let read_error = |source| ItemsFileError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut stored = StoredItems::new(path, file.try_clone().map_err(read_error)?);
    // Sized once from the line count, so a large file is not copied as its
    // store grows.
    stored.reserve(room);
    let mut reader = BufReader::with_capacity(1 << 20, FileRange::new(file, start, end));
    let mut buffer = Vec::new();
    let mut checker = LineChecker::default();
    let mut offset = start;
    let mut line_no = 0usize;
    let error = loop {
        buffer.clear();
        let read = reader.read_until(b'\n', &mut buffer).map_err(read_error)?;
        if read == 0 {
            break None;
        }
        line_no += 1;
        let line_start = offset;
        offset += read as u64;
        let text = match std::str::from_utf8(&buffer) {
            Ok(text) => text,
            Err(error) => {
                let message = format!("not valid UTF-8 (byte {})", error.valid_up_to() + 1);
                break Some(message);
            }
        };
        // A UTF-8 byte-order mark some editors write is not part of the data.
        let text = if line_start == 0 {
            text.strip_prefix('\u{feff}').unwrap_or(text)
        } else {
            text
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            continue;
        }
        let at = line_start + (trimmed.as_ptr() as usize - buffer.as_ptr() as usize) as u64;
        let checked = checker.check(trimmed).and_then(|fields| {
            let pushed = stored.push(at, trimmed.as_bytes(), &fields, fields.identity().as_ref());
            checker.recycle(fields);
            pushed.map_err(|error| error.to_string())
        });
        if let Err(message) = checked {
            break Some(message);
        }
    };
    Ok(Part {
        stored,
        lines,
        error: error.map(|message| ScanError {
            line: line_no,
            message,
        }),
    })
}

/// The lines `reader` holds (a last line without a newline counts).
fn count_lines(reader: impl io::Read) -> io::Result<usize> {
    let (newlines, partial) = scan_newlines(reader)?;
    Ok(newlines + usize::from(partial))
}

/// The newlines `reader` holds, and whether it ends in a line without one;
/// read in 1 MiB chunks, never whole.
pub(crate) fn scan_newlines(reader: impl io::Read) -> io::Result<(usize, bool)> {
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut newlines = 0;
    let mut last = b'\n';
    loop {
        let chunk = reader.fill_buf()?;
        let Some(&end) = chunk.last() else { break };
        newlines += chunk.iter().filter(|&&b| b == b'\n').count();
        last = end;
        let consumed = chunk.len();
        reader.consume(consumed);
    }
    Ok((newlines, last != b'\n'))
}

/// [`load_items_file`], every item read back and parsed: for callers that
/// need the items themselves rather than a run's queue.
pub fn read_items_file(path: &Path) -> Result<Vec<Item>, ItemsFileError> {
    load_items_file(path)?
        .read_all()
        .map_err(|source| ItemsFileError::Read {
            path: path.display().to_string(),
            source,
        })
}

/// A [`SeedSource`] whose seeds are an items file's items, offered again
/// every epoch up to `epochs` (after that, none: the run ends with
/// `seed_queue_empty`), and whose variants are compiled by another source
/// (the adapter's control instance), when there is one. The items stay on
/// disk ([`SeedSource::stored_seed_items`]); [`SeedSource::list_seed_items`]
/// reads them back for callers that need them held.
pub struct FileSeeds<'a> {
    items: Arc<StoredItems>,
    epochs: u32,
    compiler: Option<&'a mut dyn SeedSource>,
}

impl<'a> FileSeeds<'a> {
    /// Seeds `items` for epochs `1..=epochs`; `compiler` compiles catalog
    /// specs.
    pub fn new(items: StoredItems, epochs: u32, compiler: Option<&'a mut dyn SeedSource>) -> Self {
        Self {
            items: Arc::new(items),
            epochs,
            compiler,
        }
    }
}

impl SeedSource for FileSeeds<'_> {
    fn list_seed_items(&mut self, _arm: &str, epoch: u32) -> Result<Vec<Item>, AdapterError> {
        if epoch > self.epochs {
            return Ok(Vec::new());
        }
        self.items.read_all().map_err(|error| {
            AdapterError::new(
                ErrorType::AdapterError,
                format!("cannot read {}: {error}", self.items.path().display()),
            )
        })
    }

    fn stored_seed_items(&mut self, _arm: &str, epoch: u32) -> Option<Arc<StoredItems>> {
        (epoch <= self.epochs).then(|| Arc::clone(&self.items))
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
    fn invalid_utf8_names_its_line() {
        let mut f = file("{\"item_id\":\"a\"}\n");
        f.write_all(b"{\"item_id\":\"b\xff\"}\n").unwrap();
        let message = read_items_file(f.path()).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{}:2: not valid UTF-8", f.path().display())),
            "{message}"
        );
    }

    #[test]
    fn a_line_nested_too_deeply_is_refused() {
        // serde_json reads up to 128 levels, but an item is written again
        // one level deeper (a durable point's items.json is a list of
        // items), where it could not be read back.
        let deep = crate::hostile_inputs::deep_json(120, false);
        let f = file(&format!(
            "{{\"item_id\":\"a\"}}\n{{\"item_id\":\"b\",\"x\":{deep}}}\n"
        ));
        let message = read_items_file(f.path()).unwrap_err().to_string();
        assert!(
            message.contains(":2: field `x` nests arrays and objects 121 levels deep"),
            "{message}"
        );
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

    /// Lines with an id each, blank lines and a byte-order mark among
    /// them, so that parts start mid-file, on blank lines and after them.
    fn many_lines(count: usize) -> String {
        let mut text = String::from("\u{feff}");
        for n in 0..count {
            text.push_str(&format!(
                "{{\"item_id\":\"i{n}\",\"family\":\"f{}\",\"variant_spec\":{{\"spec_id\":\"v{}\"}},\"is_variant\":{}}}\n",
                n % 7,
                n % 3,
                n % 2 == 1,
            ));
            if n % 5 == 0 {
                text.push_str("\n  \n");
            }
        }
        text
    }

    #[test]
    fn items_from_a_pipe_are_read_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("items.fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let text = many_lines(50);
        let writer = {
            let (fifo, text) = (fifo.clone(), text.clone());
            std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
        };
        let stored = load_items_file(&fifo).unwrap();
        writer.join().unwrap();
        let expected = load_items_file(file(&text).path()).unwrap();
        assert_eq!(stored.len(), 50);
        assert_eq!(stored.read_all().unwrap(), expected.read_all().unwrap());
    }

    #[test]
    fn a_file_read_in_parts_is_the_file_read_whole() {
        let f = file(&many_lines(500));
        let whole = load_in_parts(f.path(), File::open(f.path()).unwrap(), 1).unwrap();
        for count in [2, 3, 7, 64] {
            let parts = load_in_parts(f.path(), File::open(f.path()).unwrap(), count).unwrap();
            assert_eq!(parts.len(), whole.len(), "{count} parts");
            assert_eq!(parts.read_all().unwrap(), whole.read_all().unwrap());
            // The identities a lane reads back, kept per part, join alike.
            for index in 0..whole.len() {
                let identity =
                    |stored: &StoredItems| stored.read(index).unwrap().identity().into_owned();
                assert_eq!(identity(&parts), identity(&whole), "item {index}");
            }
            let units = |stored: StoredItems| {
                std::sync::Arc::new(stored)
                    .units("main", 1, false)
                    .unwrap()
                    .len()
            };
            assert_eq!(units(parts), 500);
        }
    }

    #[test]
    fn a_bad_line_in_a_later_part_is_named_by_its_line_in_the_file() {
        let mut text = many_lines(300);
        text.push_str("{\"item_id\": [1]}\n");
        text.push_str(&many_lines(10)[3..]);
        let bad_line = 1 + text
            .lines()
            .position(|line| line == "{\"item_id\": [1]}")
            .unwrap();
        let f = file(&text);
        for count in [1, 2, 5] {
            let error = load_in_parts(f.path(), File::open(f.path()).unwrap(), count)
                .err()
                .unwrap()
                .to_string();
            let expected = format!("{}:{bad_line}: field `item_id` must be", f.path().display());
            assert!(error.starts_with(&expected), "{count} parts: {error}");
        }
    }

    mod props {
        use super::*;
        use crate::hostile_inputs::{config, json_value, mutate_bytes, value_not_of};
        use proptest::prelude::*;
        use serde_json::{Value, json};

        fn bytes_file(bytes: &[u8]) -> tempfile::NamedTempFile {
            let mut file = tempfile::NamedTempFile::new().unwrap();
            file.write_all(bytes).unwrap();
            file
        }

        fn valid_line(n: usize) -> Vec<u8> {
            serde_json::to_vec(&json!({"item_id": format!("i{n}"), "family": "f",
                                       "is_variant": false, "concurrency_keys": ["k"]}))
            .unwrap()
        }

        /// Lines `0..before` valid, then `bad`, then `after` valid lines.
        fn around(before: usize, bad: &[u8], after: usize) -> Vec<u8> {
            let mut text = Vec::new();
            for n in 0..before {
                text.extend(valid_line(n));
                text.push(b'\n');
            }
            text.extend_from_slice(bad);
            text.push(b'\n');
            for n in 0..after {
                text.extend(valid_line(100 + n));
                text.push(b'\n');
            }
            text
        }

        proptest! {
            #![proptest_config(config(128))]

            #[test]
            fn prop_items_file_any_bytes_never_panic_and_errors_name_the_file(
                bytes in prop::collection::vec(any::<u8>(), 0..512),
            ) {
                let f = bytes_file(&bytes);
                if let Err(error) = read_items_file(f.path()) {
                    let shown = f.path().display().to_string();
                    prop_assert!(error.to_string().contains(&shown), "{}", error);
                    if let ItemsFileError::Line { line, .. } = error {
                        prop_assert!(line >= 1 && line <= bytes.split(|b| *b == b'\n').count());
                    }
                }
            }

            #[test]
            fn prop_items_file_a_damaged_line_is_named_by_number(
                before in 0usize..4,
                after in 0usize..3,
                bad in (0usize..100).prop_flat_map(|n| mutate_bytes(valid_line(n), true)),
            ) {
                let f = bytes_file(&around(before, &bad, after));
                match read_items_file(f.path()) {
                    Ok(items) => prop_assert!(items.len() >= before + after),
                    // The damaged line became blank and was the only one.
                    Err(ItemsFileError::Empty { .. }) if before + after == 0 => {}
                    Err(error) => {
                        let text = error.to_string();
                        let expected = format!("{}:{}: ", f.path().display(), before + 1);
                        prop_assert!(text.starts_with(&expected), "{} / {}", expected, text);
                    }
                }
            }

            #[test]
            fn prop_items_file_a_field_of_the_wrong_type_is_named(
                before in 0usize..3,
                (field, value) in prop_oneof![
                    value_not_of(&["string", "number", "null"]).prop_map(|v| ("item_id", v)),
                    value_not_of(&["boolean", "null"]).prop_map(|v| ("is_variant", v)),
                    value_not_of(&["string", "null"]).prop_map(|v| ("seed_item_id", v)),
                    value_not_of(&["array", "null"]).prop_map(|v| ("concurrency_keys", v)),
                ],
                duplicate in any::<bool>(),
            ) {
                let mut item = serde_json::from_slice::<Item>(&valid_line(9)).unwrap();
                let line = if duplicate {
                    // The last of two equal keys is the one read.
                    crate::hostile_inputs::with_duplicate_key(&item, field, &value)
                } else {
                    item.insert(field.into(), value);
                    serde_json::to_string(&item).unwrap()
                };
                let f = bytes_file(&around(before, line.as_bytes(), 1));
                let text = read_items_file(f.path()).unwrap_err().to_string();
                let expected = format!("{}:{}: field `{field}` must be", f.path().display(), before + 1);
                prop_assert!(text.starts_with(&expected), "{}", text);
            }

            #[test]
            fn prop_items_file_any_object_line_is_read_or_refused_by_field(
                value in json_value(),
            ) {
                let line = serde_json::to_vec(&value).unwrap();
                let f = bytes_file(&around(1, &line, 0));
                match read_items_file(f.path()) {
                    // Compared with what serde_json reads, whose float parsing
                    // may differ from the written value in the last digit.
                    Ok(items) => prop_assert_eq!(
                        Value::Object(items[1].to_map()),
                        serde_json::from_slice::<Value>(&line).unwrap()
                    ),
                    Err(error) => {
                        let text = error.to_string();
                        prop_assert!(text.contains(":2: "), "{}", text);
                        prop_assert!(
                            !value.is_object() || text.contains("field `"),
                            "{}", text
                        );
                    }
                }
            }
        }
    }
}
