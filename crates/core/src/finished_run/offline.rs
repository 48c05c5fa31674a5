//! Planning the replay of one item of a finished run, from its files
//! alone: where the item ran ([`find_record`]), what the run was started
//! with ([`run_source`]), which durable point to restore ([`plan_replay`],
//! the reference's `select_before` over the points a later process can
//! restore, with a child's lineage through its parent point's branch), and
//! the `replays.jsonl` log each replay appends to. `sandloop replay` runs
//! the plan in a sandbox; nothing here runs anything.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::OfflineError;
use crate::episode::adapter::Record;
use crate::episode::units::GroupId;
use crate::harness::RunManifest;
use crate::harness::run_files::{MANIFEST_FILE, RECORDS_FILE, RunFileError, read_run_file};
use crate::replay::durable::{DurableState, PointLine};
use crate::replay::fidelity::Fidelity;
use crate::replay::point::Lifecycle;
use crate::replay::registry::{Selection, select_before};

/// `replays.jsonl`: one line per `sandloop replay` of the run.
pub const REPLAYS_FILE: &str = "replays.jsonl";

/// Where in its trace an item of the run ran.
pub struct ItemPosition {
    /// The group the item ran in (a [`GroupId`]'s text).
    pub execution_group_id: String,
    /// Its trace (the group's, unless the record's `replay` block names
    /// another).
    pub trace_id: String,
    /// Its branch on that trace (`main` unless the record names one; a
    /// child's is moved to its parent point's by [`plan_replay`]).
    pub branch_id: String,
    /// The first sequence of its suffix on the trace, when recorded.
    pub first_sequence: Option<u64>,
    /// The record itself.
    pub record: Record,
}

impl ItemPosition {
    /// Whether the item failed: its record is an error record, or one the
    /// adapter refused (`accepted: false`).
    pub fn failed(&self) -> bool {
        self.record
            .get("adapter_error")
            .is_some_and(|error| !error.is_null())
            || self.record.get("accepted") == Some(&Value::Bool(false))
    }
}

/// The epoch of a record, from its `execution_group_id` (a [`GroupId`],
/// `ARM:epoch-N:group-M`); `None` for a record outside a group.
fn record_epoch(record: &Record) -> Option<u32> {
    let group = record.get("execution_group_id")?.as_str()?;
    group.parse::<GroupId>().ok().map(|id| id.epoch)
}

/// What [`find_record`] reads of every line of `records.jsonl` before it
/// decides to read the whole record: the line is still parsed in full
/// (so a damaged line is named wherever it is), but every other field is
/// skipped, and the id is compared once JSON's escapes are undone.
#[derive(serde::Deserialize)]
struct RecordHead {
    #[serde(default)]
    item_id: Value,
}

/// The last record of `item_id` in the run's `records.jsonl`, or its last
/// one in `epoch` when given. Every line is parsed: an id with characters
/// JSON escapes (`"`, `\`, control characters) is found as any other, and
/// a damaged line fails the search wherever it is, as the run's other
/// readers do.
///
/// Errors: [`OfflineError::Input`] naming the file and line of a damaged
/// record, or saying why the item cannot be replayed (no `records.jsonl`,
/// no record, another epoch, a shared prefix, outside any group);
/// [`OfflineError::Io`] when `records.jsonl` cannot be read.
pub fn find_record(
    run: &Path,
    item_id: &str,
    epoch: Option<u32>,
) -> Result<ItemPosition, OfflineError> {
    let path = run.join(RECORDS_FILE);
    let cannot_read = |error: &std::io::Error| {
        OfflineError::reading(&path, error, || {
            format!(
                "{} does not exist: the run has not finished a record yet",
                path.display()
            )
        })
    };
    let file = crate::input_file::open_regular_input(&path).map_err(|error| cannot_read(&error))?;
    let mut found: Option<Record> = None;
    let mut epochs: Vec<u32> = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|error| match error.kind() {
            std::io::ErrorKind::InvalidData => {
                OfflineError::Input(format!("{}:{}: not valid UTF-8", path.display(), index + 1))
            }
            _ => cannot_read(&error),
        })?;
        let not_a_record = |error: serde_json::Error| {
            OfflineError::Input(format!(
                "{}:{}: not a JSON record: {error}",
                path.display(),
                index + 1
            ))
        };
        let head: RecordHead = serde_json::from_str(&line).map_err(not_a_record)?;
        if head.item_id.as_str() != Some(item_id) {
            continue;
        }
        let record: Record = serde_json::from_str(&line).map_err(not_a_record)?;
        if record.get("record_kind").and_then(Value::as_str) != Some("shared_prefix") {
            let ran_in = record_epoch(&record);
            if let Some(ran_in) = ran_in
                && !epochs.contains(&ran_in)
            {
                epochs.push(ran_in);
            }
            if epoch.is_none() || ran_in == epoch {
                found = Some(record);
            }
        }
    }
    if let Some(epoch) = epoch
        && found.is_none()
        && !epochs.is_empty()
    {
        let list: Vec<String> = epochs.iter().map(u32::to_string).collect();
        return Err(OfflineError::Input(format!(
            "item {item_id:?} has no record in epoch {epoch}; it ran in epoch {}",
            list.join(", ")
        )));
    }
    if item_id.ends_with(":shared-prefix") {
        return Err(OfflineError::Input(format!(
            "{item_id:?} is a shared-prefix record; a replay point starts after the prefix, so replay one of the group's items instead"
        )));
    }
    let record = found.ok_or_else(|| {
        OfflineError::Input(format!(
            "{} has no record of item {item_id:?}; give the item_id of a seed or variant the run executed",
            path.display()
        ))
    })?;
    let execution_group_id = record
        .get("execution_group_id")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            OfflineError::Input(format!(
                "item {item_id:?} ran outside an episode group (no execution_group_id), so no replay point covers it"
            ))
        })?
        .to_string();
    let replay = record.get("replay").and_then(Value::as_object);
    let text = |key: &str| replay.and_then(|r| r.get(key)).and_then(Value::as_str);
    Ok(ItemPosition {
        trace_id: text("trace_id")
            .filter(|id| !id.is_empty())
            .unwrap_or(&execution_group_id)
            .to_string(),
        branch_id: text("branch_id")
            .filter(|id| !id.is_empty())
            .unwrap_or("main")
            .to_string(),
        first_sequence: replay
            .and_then(|r| r.get("first_sequence"))
            .and_then(Value::as_u64),
        execution_group_id,
        record,
    })
}

/// What `sandloop replay` needs from a run's `manifest.json`.
pub struct RunSource {
    /// The last invocation's options.
    pub options: Map<String, Value>,
    /// The directory the last invocation started in, when recorded.
    pub cwd: Option<PathBuf>,
    /// sha256 of the run's adapter.
    pub sha256: String,
}

/// The run's last invocation options from `manifest.json` (a
/// [`RunManifest`]).
///
/// Errors: [`OfflineError::Input`] for a missing or damaged manifest,
/// naming the file and the field at fault; [`OfflineError::Io`] when it
/// cannot be read.
pub fn run_source(run: &Path) -> Result<RunSource, OfflineError> {
    let path = run.join(MANIFEST_FILE);
    let manifest: RunManifest = read_run_file(&path).map_err(|error| match error {
        RunFileError::Read { source, .. } => OfflineError::reading(&path, &source, || {
            format!(
                "{} is not a sandloop run directory (cannot read {MANIFEST_FILE}: {source})",
                run.display()
            )
        }),
        other => OfflineError::Input(other.to_string()),
    })?;
    let sha256 = manifest.adapter.sha256;
    let last =
        manifest.invocations.into_iter().last().ok_or_else(|| {
            OfflineError::Input(format!("{}: no invocation options", path.display()))
        })?;
    Ok(RunSource {
        options: last.options,
        cwd: last.cwd,
        sha256,
    })
}

/// `path` as the run saw it: relative paths are taken from the directory
/// the run was started in (`cwd` of its invocation), when recorded.
pub fn as_run_saw_it(path: &str, cwd: Option<&Path>) -> PathBuf {
    match cwd {
        Some(cwd) if Path::new(path).is_relative() => cwd.join(path),
        _ => PathBuf::from(path),
    }
}

/// The point a replay restores, and how it was chosen.
pub struct ReplayPlan {
    /// The chosen point's line in `replay-points.jsonl` (lifecycle reset to
    /// ready: a later process adopts it afresh).
    pub line: PointLine,
    /// Whether the choice fell back to, or skipped, a weaker point.
    pub selection: Selection,
    /// The first affected sequence the point lies at or before
    /// (`u64::MAX`: the item's end).
    pub first_affected: u64,
}

impl ReplayPlan {
    /// The planned point's durable state file ([`plan_replay`] chooses
    /// only durable points).
    pub fn state_file(&self) -> &DurableState {
        self.line
            .durable_state
            .as_ref()
            .expect("a planned point is durable")
    }
}

/// Choose the point to replay `position` from, among `points` (the run's
/// `replay-points.jsonl`): only durable, unquarantined ones qualify; a
/// child's lineage runs through its parent point's branch (`position`'s
/// branch is moved there); the point must lie at or before
/// `from_sequence` (else the item's first sequence, else its end) and
/// meet `minimum` when one does.
///
/// Errors: why no point qualifies, naming each point of the trace and
/// what keeps it out.
pub fn plan_replay(
    points: &[PointLine],
    position: &mut ItemPosition,
    from_sequence: Option<u64>,
    minimum: Fidelity,
) -> Result<ReplayPlan, String> {
    // Points a later process can restore: durable and not quarantined.
    let durable: Vec<PointLine> = points
        .iter()
        .filter(|line| {
            line.durable_state.is_some()
                && !line.quarantined
                && line.point.lifecycle != Lifecycle::Failed
        })
        .cloned()
        .map(|mut line| {
            line.point.lifecycle = Lifecycle::Ready;
            line
        })
        .collect();
    // A child ran on its own branch, forked from a point on its parent's:
    // its lineage goes through that branch.
    let on_own_branch = durable.iter().any(|line| {
        line.point.cursor.trace_id == position.trace_id
            && line.point.cursor.branch_id == position.branch_id
    });
    if !on_own_branch
        && let Some(parent) = position
            .record
            .get("replay")
            .and_then(|replay| replay.get("replay_point_id"))
            .and_then(Value::as_str)
            .and_then(|id| durable.iter().find(|line| line.point.replay_point_id == id))
    {
        position.branch_id = parent.point.cursor.branch_id.clone();
    }
    let first_affected = from_sequence
        .or(position.first_sequence)
        .unwrap_or(u64::MAX);
    let (chosen, selection) = select_before(
        durable.iter().map(|line| &line.point),
        &position.trace_id,
        &position.branch_id,
        first_affected,
        minimum,
    )
    .ok_or_else(|| no_point_reason(points, position, first_affected))?;
    let line = durable
        .iter()
        .find(|line| line.point.replay_point_id == chosen.replay_point_id)
        .expect("chosen from these lines")
        .clone();
    Ok(ReplayPlan {
        line,
        selection,
        first_affected,
    })
}

/// Why no durable point qualifies, naming what was found.
fn no_point_reason(points: &[PointLine], position: &ItemPosition, first: u64) -> String {
    let on_trace: Vec<&PointLine> = points
        .iter()
        .filter(|line| line.point.cursor.trace_id == position.trace_id)
        .collect();
    let at = if first == u64::MAX {
        "its end".to_string()
    } else {
        format!("sequence {first}")
    };
    if on_trace.is_empty() {
        return format!(
            "no replay point was captured on trace {:?}, where the run's last record of the item ran \
             (that part of the run had replay off — --no-replay — or its prefix capture failed: \
             see the prefix record's replay_capture_error); an item that ran in several epochs \
             is replayed from its last one unless --epoch names another",
            position.trace_id
        );
    }
    let reasons: Vec<String> = on_trace
        .iter()
        .map(|line| {
            let point = &line.point;
            let why = if line.durable_state.is_none() {
                match &line.durable_error {
                    Some(error) => format!("its state was not saved ({error})"),
                    None if point.fidelity == Fidelity::NonReplayable => {
                        "it is a non_replayable marker".to_string()
                    }
                    None => "the adapter did not export its state".to_string(),
                }
            } else if line.quarantined || point.lifecycle == Lifecycle::Failed {
                "it was quarantined during the run".to_string()
            } else if point.cursor.next_sequence > first {
                format!(
                    "it sits at sequence {}, after {at}",
                    point.cursor.next_sequence
                )
            } else {
                format!("it is on branch {:?}", point.cursor.branch_id)
            };
            format!("{} ({why})", point.replay_point_id)
        })
        .collect();
    format!(
        "no durable replay point of trace {:?} lies at or before {at}: {}",
        position.trace_id,
        reasons.join("; ")
    )
}

/// What `replays.jsonl` already holds, read once.
pub struct ReplaysFile {
    /// Non-blank lines: earlier replays.
    pub lines: usize,
    /// Whether it ends in a partial line (a crash mid-write).
    pub partial: bool,
}

impl ReplaysFile {
    /// What the log open as `file` (for reading, at `path`) holds.
    ///
    /// Errors: [`OfflineError::Io`] when it cannot be read: a log that was
    /// counted as empty could be appended to after a partial line.
    pub fn read(file: &mut std::fs::File, path: &Path) -> Result<Self, OfflineError> {
        use std::io::{Read, Seek};
        let mut bytes = Vec::new();
        file.seek(std::io::SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|error| OfflineError::cannot_read(path, &error))?;
        Ok(Self {
            lines: bytes
                .split(|byte| *byte == b'\n')
                .filter(|line| !line.trim_ascii().is_empty())
                .count(),
            partial: bytes.last().is_some_and(|last| *last != b'\n'),
        })
    }
}

/// Append `value` as one line, starting a new line first if the file ends
/// in a partial one (a crash mid-write must not swallow this record). A
/// write that fails part way (a full disk) is cut back to the file's length
/// before it: the log never keeps half a line this call wrote.
///
/// Errors: [`OfflineError::Io`]: the write failed, naming `path` (and the
/// cut back, if that failed too).
pub fn append_line(
    file: &mut std::fs::File,
    path: &Path,
    partial: bool,
    value: &Value,
) -> Result<(), OfflineError> {
    let mut text = Vec::new();
    if partial {
        text.push(b'\n');
    }
    text.extend(serde_json::to_vec(value).expect("a JSON value serialises"));
    text.push(b'\n');
    let before = file
        .metadata()
        .map_err(|error| OfflineError::cannot_read(path, &error))?
        .len();
    file.write_all(&text).map_err(|error| {
        let cut = file.set_len(before).err().map_or_else(String::new, |cut| {
            format!("; cutting it back to {before} bytes failed too: {cut}")
        });
        OfflineError::Io(format!("cannot write {}: {error}{cut}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::hostile_inputs::{config, mutate_bytes};

    #[test]
    fn a_failure_is_an_error_record_or_a_refused_one() {
        let position = |record: Value| ItemPosition {
            execution_group_id: "main:epoch-1:group-1".into(),
            trace_id: "t".into(),
            branch_id: "main".into(),
            first_sequence: None,
            record: record.as_object().unwrap().clone(),
        };
        assert!(position(json!({"adapter_error": {"type": "trap"}})).failed());
        assert!(position(json!({"accepted": false})).failed());
        assert!(!position(json!({"accepted": true, "adapter_error": null})).failed());
        assert!(!position(json!({})).failed());
    }

    #[test]
    fn invalid_utf8_in_records_jsonl_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("records.jsonl"),
            b"{\"item_id\":\"a\"}\n{\"item_id\":\"a\",\"x\":\"\xff\"}\n",
        )
        .unwrap();
        let Err(OfflineError::Input(message)) = find_record(dir.path(), "a", None) else {
            panic!("expected an input error");
        };
        assert!(message.contains("records.jsonl:2: "), "{message}");
    }

    #[test]
    fn an_id_that_json_escapes_is_found_and_a_damaged_line_elsewhere_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let ids = ["quo\"te", "back\\slash", "tab\there", "plain"];
        let mut text = String::new();
        for (n, id) in ids.iter().enumerate() {
            let line =
                json!({"item_id": id, "execution_group_id": format!("main:epoch-1:group-{n}")});
            text.push_str(&format!("{line}\n"));
        }
        std::fs::write(&path, &text).unwrap();
        for (n, id) in ids.iter().enumerate() {
            let position =
                find_record(dir.path(), id, None).unwrap_or_else(|e| panic!("{id:?}: {e}"));
            assert_eq!(
                position.execution_group_id,
                format!("main:epoch-1:group-{n}")
            );
        }
        // A damaged line that does not hold the id is still reported.
        std::fs::write(&path, format!("{{not json\n{text}")).unwrap();
        let Err(OfflineError::Input(message)) = find_record(dir.path(), "plain", None) else {
            panic!("a damaged line must fail the search as bad input");
        };
        assert!(
            message.starts_with(&format!("{}:1: not a JSON record", path.display())),
            "{message}"
        );
    }

    #[test]
    fn a_missing_run_file_is_bad_input_and_an_unreadable_one_a_failed_read() {
        let dir = tempfile::tempdir().unwrap();
        let Err(OfflineError::Input(message)) = find_record(dir.path(), "a", None) else {
            panic!("no records.jsonl is the request's fault");
        };
        assert!(
            message.contains("records.jsonl does not exist"),
            "{message}"
        );
        let Err(OfflineError::Input(message)) = run_source(dir.path()) else {
            panic!("no manifest.json is the request's fault");
        };
        assert!(
            message.contains("is not a sandloop run directory"),
            "{message}"
        );

        // A directory where the file belongs opens but cannot be read.
        std::fs::create_dir(dir.path().join(RECORDS_FILE)).unwrap();
        std::fs::create_dir(dir.path().join(MANIFEST_FILE)).unwrap();
        let Err(OfflineError::Io(message)) = find_record(dir.path(), "a", None) else {
            panic!("an unreadable records.jsonl is a failed read");
        };
        assert!(message.starts_with("cannot read "), "{message}");
        assert!(matches!(run_source(dir.path()), Err(OfflineError::Io(_))));
    }

    #[test]
    fn the_replays_log_is_counted_from_its_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(REPLAYS_FILE);
        std::fs::write(&path, "{\"a\":1}\n\n{\"b\":").unwrap();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        let log = ReplaysFile::read(&mut file, &path).unwrap();
        assert_eq!((log.lines, log.partial), (2, true));
        append_line(&mut file, &path, log.partial, &serde_json::json!({"c": 3})).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"a\":1}\n\n{\"b\":\n{\"c\":3}\n"
        );
    }

    #[test]
    fn the_epoch_is_read_from_the_group_id_even_when_the_arm_name_looks_like_one() {
        let record = |group: &str| -> Record {
            json!({"execution_group_id": group})
                .as_object()
                .cloned()
                .unwrap()
        };
        assert_eq!(record_epoch(&record("main:epoch-3:group-0001")), Some(3));
        assert_eq!(
            record_epoch(&record("a:epoch-9:x:epoch-2:group-0001")),
            Some(2)
        );
        assert_eq!(record_epoch(&record("main:epoch-x:group-0001")), None);
        assert_eq!(record_epoch(&Record::new()), None);
    }

    fn record_line(n: usize) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"item_id": "it", "execution_group_id": format!("main:epoch-{n}:group-0"),
                                   "replay": {"trace_id": "t", "first_sequence": n}}),
        )
        .unwrap()
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_replay_records_a_damaged_line_is_named_by_number(
            before in 0usize..3,
            bad in (0usize..9).prop_flat_map(|n| mutate_bytes(record_line(n), true)),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut text = Vec::new();
            for n in 0..before {
                text.extend(record_line(n));
                text.push(b'\n');
            }
            text.extend(&bad);
            text.extend(b"\n");
            std::fs::write(dir.path().join("records.jsonl"), &text).unwrap();
            let found = find_record(dir.path(), "it", None);
            prop_assert!(!matches!(found, Err(OfflineError::Io(_))), "a readable file is never an I/O error");
            if let Err(OfflineError::Input(message)) = found {
                let path = dir.path().join("records.jsonl").display().to_string();
                if message.starts_with(&path) && !message.contains(" has no record of item ") {
                    prop_assert!(message.starts_with(&format!("{path}:{}: ", before + 1)), "{}", message);
                }
            }
        }
    }
}
