//! `sandloop try`: an adapter author's quick check. A few items run through
//! exactly what `sandloop run` does (one epoch, one worker, in a scratch
//! run directory that is removed afterwards), and each record is printed
//! with what its calls printed — the traceback of a crash included.

use std::io::BufRead;
use std::path::Path;

use clap::Parser;
use serde_json::Value;

use super::args::{Cli, Command, TryArgs};
use super::run::{Closing, run_with};
use super::{CliError, say};
use sandloop_core::harness::items_file::STDIN_PATH;
use sandloop_core::harness::run_files::{ADAPTER_OUTPUT_DIR, RECORDS_FILE};
use sandloop_core::report::guest_output::{Entry, read_call_lines};
use sandloop_core::terminal::for_terminal;

/// Run `sandloop try`.
///
/// Errors: exit 2 for an `--item` that is not one JSON object (naming
/// which), an unreadable `--items`, or anything `sandloop run` refuses;
/// exit 1 when the run fails.
pub fn try_items(args: TryArgs) -> Result<(), CliError> {
    let lines = item_lines(&args)?;
    if lines.is_empty() {
        return Err(CliError::Input("no items to try".into()));
    }
    let scratch = tempfile::tempdir()
        .map_err(|error| CliError::Failed(format!("cannot make a scratch directory: {error}")))?;
    // Ctrl-C removes the scratch directory (and says nothing of resuming
    // a run the user never named).
    let root = scratch.path().to_path_buf();
    super::interrupt::on_interrupt(move || {
        let _ = std::fs::remove_dir_all(&root);
        std::process::exit(130);
    });
    if !args.watch {
        let records = try_once(&args, &lines, scratch.path())?;
        return show(&records, args.json);
    }
    let mut before: Option<Vec<Value>> = None;
    loop {
        let stamp = component_stamp(&args.adapter);
        match try_once(&args, &lines, scratch.path()) {
            Ok(records) => {
                match &before {
                    None => show(&records, false)?,
                    Some(before) => say_changes(before, &records),
                }
                before = Some(records);
            }
            // A component half written, or one that fails to load, is
            // said; the next change is tried again.
            Err(error) => super::complain("error: ", &error.to_string()),
        }
        say(&format!(
            "watching {} for changes (Ctrl-C ends)",
            args.adapter.display()
        ));
        while component_stamp(&args.adapter) == stamp {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        // Let the build finish writing it.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// The component file's modification time and size; `None` when it cannot
/// be read (being replaced).
fn component_stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Run `lines` once through the adapter in a scratch run directory under
/// `root` (removed afterwards); returns the records with what their
/// items' calls printed.
fn try_once(args: &TryArgs, lines: &[String], root: &Path) -> Result<Vec<Value>, CliError> {
    let scratch = tempfile::tempdir_in(root)
        .map_err(|error| CliError::Failed(format!("cannot make a scratch directory: {error}")))?;
    let items = scratch.path().join("items.jsonl");
    std::fs::write(&items, lines.join("\n") + "\n")
        .map_err(|error| CliError::Failed(format!("cannot write {}: {error}", items.display())))?;
    let out = scratch.path().join("run");
    let mut run_args = match Cli::try_parse_from([
        "sandloop".as_ref(),
        "run".as_ref(),
        "--adapter".as_ref(),
        args.adapter.as_os_str(),
        "--items".as_ref(),
        items.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--workers".as_ref(),
        "1".as_ref(),
    ]) {
        Ok(Cli {
            command: Command::Run(run_args),
            ..
        }) => run_args,
        _ => unreachable!("the run's arguments are sandloop's own"),
    };
    run_args.sandbox = args.sandbox.clone();
    run_args.no_replay = args.no_replay;
    run_with(*run_args, Closing::Silent)?;
    read_records(&out)
}

/// The items to run, one JSON text a line.
fn item_lines(args: &TryArgs) -> Result<Vec<String>, CliError> {
    if let Some(path) = &args.items {
        let shown = if path == Path::new(STDIN_PATH) {
            "<stdin>".to_string()
        } else {
            path.display().to_string()
        };
        let reader: Box<dyn BufRead> = if path == Path::new(STDIN_PATH) {
            Box::new(std::io::stdin().lock())
        } else {
            let file = sandloop_core::input_file::open_regular_input(path)
                .map_err(|error| CliError::Input(format!("--items {shown}: {error}")))?;
            Box::new(std::io::BufReader::new(file))
        };
        let mut lines = Vec::new();
        for line in reader.lines() {
            let line =
                line.map_err(|error| CliError::Input(format!("--items {shown}: {error}")))?;
            if !line.trim().is_empty() {
                lines.push(line);
            }
            if lines.len() == args.limit as usize {
                break;
            }
        }
        return Ok(lines);
    }
    args.item
        .iter()
        .enumerate()
        .map(|(index, text)| match serde_json::from_str::<Value>(text) {
            // An item reaches the adapter as written; only one that spans
            // lines is written on one.
            Ok(Value::Object(_)) if !text.contains('\n') => Ok(text.trim().to_string()),
            Ok(object @ Value::Object(_)) => Ok(object.to_string()),
            Ok(_) => Err(CliError::Input(format!(
                "--item {}: not a JSON object: {text}",
                index + 1
            ))),
            Err(error) => Err(CliError::Input(format!(
                "--item {}: not JSON ({error}): {text}",
                index + 1
            ))),
        })
        .collect()
}

/// The records of the run in `out`, each with its item's guest output
/// under `guest_output` (an item's calls under its first record).
fn read_records(out: &Path) -> Result<Vec<Value>, CliError> {
    let text = std::fs::read_to_string(out.join(RECORDS_FILE))
        .map_err(|error| CliError::Failed(format!("cannot read the records: {error}")))?;
    let calls = read_call_lines(&out.join(ADAPTER_OUTPUT_DIR).join("epoch-0001.jsonl"));
    let mut shown_output = std::collections::HashSet::new();
    let mut records = Vec::new();
    for line in text.lines() {
        let record: Value = serde_json::from_str(line)
            .map_err(|error| CliError::Failed(format!("a record is not JSON: {error}")))?;
        let id = record
            .get("item_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let printed: Vec<Value> = if shown_output.insert(id.clone()) {
            calls
                .iter()
                .filter(|call| call.item_id.as_deref() == Some(id.as_str()))
                .flat_map(|call| call.entries.iter().flat_map(Entry::lines))
                .map(Value::from)
                .collect()
        } else {
            Vec::new()
        };
        records.push(serde_json::json!({"record": record, "guest_output": printed}));
    }
    Ok(records)
}

/// Print each record and what its item's calls printed; `json`: the
/// records alone, one a line.
fn show(records: &[Value], json: bool) -> Result<(), CliError> {
    if json {
        for entry in records {
            say(&for_terminal(&entry["record"].to_string()));
        }
        return Ok(());
    }
    let mut failed = 0;
    for entry in records {
        let record = &entry["record"];
        let (id, kind, outcome) = headline(record);
        if record.get("adapter_error").is_some() {
            failed += 1;
        }
        say(&format!("── {} · {kind} · {outcome}", for_terminal(&id)));
        say(&for_terminal(
            &serde_json::to_string_pretty(record).expect("a record serialises"),
        ));
        let printed = entry["guest_output"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if !printed.is_empty() {
            say("   guest output:");
            for line in printed {
                say(&format!(
                    "   │ {}",
                    for_terminal(line.as_str().unwrap_or(""))
                ));
            }
        }
    }
    say(&format!(
        "sandloop try: {} record(s), {failed} failed; nothing written (sandloop run \
         --out DIR keeps a run directory)",
        records.len()
    ));
    Ok(())
}

/// A record's item id, kind and `ok` or `error: TYPE`.
fn headline(record: &Value) -> (String, String, String) {
    let id = record.get("item_id").and_then(Value::as_str).unwrap_or("");
    let kind = record
        .get("record_kind")
        .and_then(Value::as_str)
        .unwrap_or("standalone");
    let outcome = match record
        .pointer("/adapter_error/type")
        .and_then(Value::as_str)
    {
        Some(error_type) => format!("error: {error_type}"),
        None => "ok".to_string(),
    };
    (id.to_string(), kind.to_string(), outcome)
}

/// Say which records changed since the last round — their fields other
/// than timings (every `*_minutes`), and the error message of a failure —
/// which are new, and which are gone.
fn say_changes(before: &[Value], after: &[Value]) {
    let key = |entry: &Value| {
        let (id, kind, _) = headline(&entry["record"]);
        (id, kind)
    };
    let old: std::collections::HashMap<_, _> =
        before.iter().map(|entry| (key(entry), entry)).collect();
    let mut changed = 0;
    for entry in after {
        let (id, kind, outcome) = headline(&entry["record"]);
        let record = untimed(&entry["record"]);
        let fields: Vec<String> = match old.get(&(id.clone(), kind.clone())) {
            None => vec!["new record".into()],
            Some(previous) => {
                let previous = untimed(&previous["record"]);
                let keys: std::collections::BTreeSet<&String> = record
                    .as_object()
                    .into_iter()
                    .chain(previous.as_object())
                    .flat_map(|map| map.keys())
                    .collect();
                keys.into_iter()
                    .filter(|key| record.get(key.as_str()) != previous.get(key.as_str()))
                    .cloned()
                    .collect()
            }
        };
        if fields.is_empty() {
            continue;
        }
        changed += 1;
        say(&format!(
            "changed {} · {kind} · {outcome}: {}",
            for_terminal(&id),
            fields.join(", ")
        ));
        if let Some(message) = record
            .pointer("/adapter_error/message")
            .and_then(Value::as_str)
        {
            say(&format!("   {}", for_terminal(message)));
        }
    }
    let now: std::collections::HashSet<_> = after.iter().map(key).collect();
    for entry in before {
        let (id, kind) = key(entry);
        if !now.contains(&(id.clone(), kind.clone())) {
            changed += 1;
            say(&format!("gone {} · {kind}", for_terminal(&id)));
        }
    }
    say(&format!(
        "sandloop try: {} record(s), {changed} changed",
        after.len()
    ));
}

/// `value` without its timing fields (keys ending in `_minutes`), at
/// every depth.
fn untimed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !key.ends_with("_minutes"))
                .map(|(key, value)| (key.clone(), untimed(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(untimed).collect()),
        other => other.clone(),
    }
}
