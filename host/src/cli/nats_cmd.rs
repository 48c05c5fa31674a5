//! `sandloop nats status` and `sandloop nats purge`: what distributed runs
//! keep on a NATS server, and removing it
//! ([`crate::distributed::storage`]).

use std::time::Duration;

use super::args::{NatsCommand, NatsPurgeArgs, NatsServerArgs, NatsStatusArgs};
use super::{CliError, say};
use crate::distributed::storage::{self, StoreFigures};
use crate::distributed::transport::{Connection, NatsTarget, Runtime, check_url, connect};

/// Run a `nats` command (exit 2 on bad flags, 1 when the server cannot be
/// used).
pub fn run(command: NatsCommand) -> Result<(), CliError> {
    match command {
        NatsCommand::Status(args) => status(&args),
        NatsCommand::Purge(args) => purge(&args),
    }
}

fn status(args: &NatsStatusArgs) -> Result<(), CliError> {
    let (runtime, connection) = open(&args.server)?;
    let figures = runtime
        .block_on(storage::status(&connection))
        .map_err(|error| CliError::Failed(error.to_string()))?;
    if args.json {
        let stores: Vec<serde_json::Value> = figures.iter().map(figures_json).collect();
        let text = serde_json::json!({"nats": connection.url, "stores": stores});
        say(&serde_json::to_string_pretty(&text).expect("figures serialise"));
        return Ok(());
    }
    say(&format!("NATS server {}", connection.url));
    for store in &figures {
        for line in figures_lines(store) {
            say(&line);
        }
    }
    Ok(())
}

/// `store` as lines for people: name, messages, bytes, limits, then one
/// line per run.
fn figures_lines(store: &StoreFigures) -> Vec<String> {
    if !store.exists {
        return vec![format!("  {} {}: not created yet", store.kind, store.name)];
    }
    let limit = store.max_bytes.map_or("no byte limit".to_owned(), |bytes| {
        format!("at most {}", shown_bytes(bytes))
    });
    let age = store
        .max_age
        .map_or("kept until removed".to_owned(), |age| {
            format!("kept {}", shown_duration(age))
        });
    let mut lines = vec![format!(
        "  {} {}: {} message(s), {} ({limit}; {age})",
        store.kind,
        store.name,
        store.messages,
        shown_bytes(store.bytes)
    )];
    let what = if store.kind == "stream" {
        "message(s)"
    } else {
        "object(s)"
    };
    for (run, count) in &store.runs {
        lines.push(format!("    run {run}: {count} {what}"));
    }
    lines
}

fn figures_json(store: &StoreFigures) -> serde_json::Value {
    serde_json::json!({
        "name": store.name,
        "kind": store.kind,
        "exists": store.exists,
        "messages": store.messages,
        "bytes": store.bytes,
        "max_bytes": store.max_bytes,
        "max_age_secs": store.max_age.map(|age| age.as_secs()),
        "runs": store.runs,
    })
}

fn purge(args: &NatsPurgeArgs) -> Result<(), CliError> {
    let age = match &args.older_than {
        Some(text) => Some(parse_duration(text).map_err(CliError::Input)?),
        None => None,
    };
    if let Some(run) = &args.run {
        storage::check_run_id(run).map_err(CliError::Input)?;
    }
    let (runtime, connection) = open(&args.server)?;
    let removed = runtime
        .block_on(async {
            match (&args.run, age) {
                (Some(run), _) => storage::purge_run(&connection, run).await,
                (None, Some(age)) => storage::purge_older_than(&connection, age).await,
                (None, None) => unreachable!("clap requires --run or --older-than"),
            }
        })
        .map_err(|error| CliError::Failed(error.to_string()))?;
    let runs = if removed.runs.is_empty() {
        "no run".to_owned()
    } else {
        format!("run(s) {}", removed.runs.join(", "))
    };
    say(&format!(
        "removed {} on {} ({runs})",
        removed.shown(),
        connection.url
    ));
    Ok(())
}

/// Connects to the server of `args` (once, without waiting for it).
fn open(args: &NatsServerArgs) -> Result<(std::sync::Arc<Runtime>, Connection), CliError> {
    check_url(&args.nats).map_err(CliError::Input)?;
    let runtime = Runtime::start()
        .map_err(|error| CliError::Failed(format!("starting the NATS client: {error}")))?;
    let target = NatsTarget {
        url: args.nats.clone(),
        creds: args.nats_creds.clone(),
    };
    let connection = runtime
        .block_on(connect(&target, "sandloop nats"))
        .map_err(|error| CliError::Failed(error.to_string()))?;
    Ok((runtime, connection))
}

/// `90s`, `30m`, `2h`, `7d` as a duration.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let refuse =
        || format!("--older-than {text:?}: give a whole number with s, m, h or d (`90m`, `2d`)");
    let text = text.trim();
    let split = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| refuse())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(refuse()),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(refuse)
}

/// `bytes` as B, KiB, MiB or GiB.
fn shown_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `age` in whole days, hours, minutes or seconds.
fn shown_duration(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        for bad in ["", "5", "m", "1.5h", "-1d", "3w"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("s, m, h or d"), "{bad}: {error}");
        }
    }

    #[test]
    fn figures_name_their_limits() {
        assert_eq!(shown_bytes(512), "512 B");
        assert_eq!(shown_bytes(4 << 30), "4.0 GiB");
        assert_eq!(shown_duration(Duration::from_secs(86_400)), "1 d");
        let store = StoreFigures {
            name: "SANDLOOP_RESULTS".into(),
            kind: "stream",
            exists: true,
            messages: 3,
            bytes: 2048,
            max_bytes: Some(4 << 30),
            max_age: Some(Duration::from_secs(86_400)),
            runs: [("abc".to_owned(), 3)].into(),
        };
        assert_eq!(
            figures_lines(&store),
            [
                "  stream SANDLOOP_RESULTS: 3 message(s), 2.0 KiB (at most 4.0 GiB; kept 1 d)",
                "    run abc: 3 message(s)"
            ]
        );
    }
}
