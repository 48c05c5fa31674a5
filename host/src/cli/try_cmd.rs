//! `sandloop try`: an adapter author's quick check. A few items run through
//! exactly what `sandloop run` does ([`crate::launch::trial`]), and each
//! record is printed with what its calls printed — the traceback of a
//! crash included.

use std::path::Path;

use clap::Parser;

use super::args::{Cli, Command, TryArgs};
use super::run::{Progress, run_request};
use super::{CliError, say};
use crate::launch::RunRequest;
use crate::launch::trial::{self, Change, TriedRecord};
use sandloop_core::terminal::for_terminal;

/// Run `sandloop try`.
///
/// Errors: exit 2 for an `--item` that is not one JSON object (naming
/// which), an unreadable `--items`, or anything `sandloop run` refuses;
/// exit 1 when the run fails.
pub fn try_items(args: TryArgs) -> Result<(), CliError> {
    let lines = match &args.items {
        Some(path) => trial::read_item_lines(path, args.limit as usize),
        None => trial::item_texts(&args.item),
    }
    .map_err(CliError::Input)?;
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
    // Each round reads the flags and opens the grants afresh, as a new
    // `sandloop try` would.
    let try_once = || -> Result<Vec<TriedRecord>, CliError> {
        let request = request(&args)?;
        // Compile notices and warnings, never progress: the records are
        // the output.
        let observer = Progress::new(1, true, false);
        Ok(trial::run_items(
            &request,
            &lines,
            scratch.path(),
            &observer,
        )?)
    };
    if !args.watch {
        show(&try_once()?, args.json);
        return Ok(());
    }
    let mut before: Option<Vec<TriedRecord>> = None;
    loop {
        let stamp = component_stamp(&args.adapter);
        match try_once() {
            Ok(records) => {
                match &before {
                    None => show(&records, false),
                    Some(before) => say_changes(&trial::changes(before, &records), records.len()),
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

/// The run `sandloop run` would make of these items with one worker and
/// every other flag at its default, with `try`'s sandbox flags and
/// `--no-replay`; its items and run directory are the trial's scratch.
fn request(args: &TryArgs) -> Result<RunRequest, CliError> {
    let parsed = Cli::try_parse_from([
        "sandloop".as_ref(),
        "run".as_ref(),
        "--adapter".as_ref(),
        args.adapter.as_os_str(),
        "--out".as_ref(),
        "run".as_ref(),
        "--workers".as_ref(),
        "1".as_ref(),
    ]);
    let Ok(Cli {
        command: Command::Run(mut run_args),
        ..
    }) = parsed
    else {
        unreachable!("the run's arguments are sandloop's own")
    };
    run_args.sandbox = args.sandbox.clone();
    run_args.no_replay = args.no_replay;
    run_request(&run_args)
}

/// The component file's modification time and size; `None` when it cannot
/// be read (being replaced).
fn component_stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Print each record and what its item's calls printed; `json`: the
/// records alone, one a line.
fn show(records: &[TriedRecord], json: bool) {
    if json {
        for entry in records {
            say(&for_terminal(&entry.record.to_string()));
        }
        return;
    }
    for entry in records {
        let (id, kind, outcome) = entry.headline();
        say(&format!("── {} · {kind} · {outcome}", for_terminal(&id)));
        say(&for_terminal(
            &serde_json::to_string_pretty(&entry.record).expect("a record serialises"),
        ));
        if !entry.guest_output.is_empty() {
            say("   guest output:");
            for line in &entry.guest_output {
                say(&format!("   │ {}", for_terminal(line)));
            }
        }
    }
    let failed = records.iter().filter(|entry| entry.has_error()).count();
    say(&format!(
        "sandloop try: {} record(s), {failed} failed; nothing written (sandloop run \
         --out DIR keeps a run directory)",
        records.len()
    ));
}

/// Say which records changed since the last round, of `count` now.
fn say_changes(changes: &[Change], count: usize) {
    for change in changes {
        match change {
            Change::Changed {
                headline: (id, kind, outcome),
                fields,
                message,
            } => {
                say(&format!(
                    "changed {} · {kind} · {outcome}: {}",
                    for_terminal(id),
                    fields.join(", ")
                ));
                if let Some(message) = message {
                    say(&format!("   {}", for_terminal(message)));
                }
            }
            Change::Gone(id, kind) => say(&format!("gone {} · {kind}", for_terminal(id))),
        }
    }
    say(&format!(
        "sandloop try: {count} record(s), {} changed",
        changes.len()
    ));
}
