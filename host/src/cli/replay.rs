//! `sandloop replay`: run one item of a finished run again, in a fresh
//! sandbox, from the nearest trustworthy durable replay point before the
//! item's first affected trace event — instead of running its whole prefix
//! again — and report whether the restore was verified equivalent.

use super::args::ReplayArgs;
use super::finished_run::{compile_with_notice, run_component};
use super::{CliError, say};
use crate::finished_run::offline::REPLAYS_FILE;
use crate::finished_run::{FinishedRun, ReplayOutcome, ReplayReport};
use crate::sandbox::finished_run::{ReplayRequest, RunComponent, load_run_component, replay_item};

/// Run `sandloop replay` (exit 0: the suffix succeeded; 1: the restore or
/// the suffix failed, the result is still written; 2: bad input).
pub fn replay(args: ReplayArgs) -> Result<(), CliError> {
    let minimum = crate::replay::fidelity::parse_minimum(&args.min_fidelity)
        .map_err(|error| CliError::Input(format!("--min-fidelity: {error}")))?;
    // Held for the whole replay: no run writes the directory meanwhile, and
    // two replays of one run never interleave.
    let run = FinishedRun::open(&args.run, "replay")?;
    let mut position = run.find(&args.item, args.epoch)?;
    let plan = run
        .plan(&mut position, args.from_sequence, minimum)
        .map_err(CliError::Input)?;
    let (state, item) = run
        .point_state(&plan, &args.item)?
        .map_err(CliError::Input)?;
    // The point's instance, and the child that screens its intent.
    let component = RunComponent {
        instances: 2,
        ..run_component(&args.component)?
    };
    let loaded = load_run_component(
        &run,
        &component,
        plan.state_file().kind,
        compile_with_notice,
    )?;

    // Everything is checked; the result must have somewhere to go.
    let mut log = run.open_log(REPLAYS_FILE)?;
    let request = ReplayRequest {
        item_id: &args.item,
        minimum,
        number: log.earlier_lines() + 1,
    };
    let report = replay_item(&loaded, &plan, &position, &item, &state, &request)?;
    log.append(&report)?;
    if args.json {
        say(&serde_json::to_string_pretty(&report).expect("a report serialises"));
    } else {
        print_report(&args, &report, log.path());
    }
    match &report.outcome {
        ReplayOutcome::Record { .. } => Ok(()),
        ReplayOutcome::Error { error } => Err(CliError::Failed(format!(
            "the replay of {:?} failed: {}",
            args.item, error.message
        ))),
    }
}

fn print_report(args: &ReplayArgs, report: &ReplayReport, written: &std::path::Path) {
    let point = &report.replay_point.point;
    say(&format!(
        "sandloop replay: {} from replay point {} ({}, trace {} at sequence {})",
        args.item,
        point.replay_point_id,
        point.fidelity,
        point.cursor.trace_id,
        point.cursor.next_sequence,
    ));
    if report.selection.fidelity_fallback {
        say(&format!(
            "  selection  no point met {}; fell back to the nearest weaker one",
            args.min_fidelity
        ));
    }
    let verified = |equivalent: bool| {
        if equivalent {
            "verified equivalent"
        } else {
            "not verified equivalent"
        }
    };
    match (&report.outcome, &report.restore) {
        (ReplayOutcome::Record { record }, Some(restore)) => {
            say(&format!(
                "  restore    {}, {}, {}",
                restore.achieved_fidelity,
                verified(restore.equivalent),
                if restore.promotion_eligible {
                    "promotion eligible"
                } else {
                    "not promotion eligible"
                },
            ));
            let keys = record
                .get("observation_keys")
                .and_then(|keys| keys.as_array())
                .map_or(0, Vec::len);
            say(&format!(
                "  outcome    succeeded: {keys} observation {}, accepted {}",
                if keys == 1 { "key" } else { "keys" },
                record.get("accepted").unwrap_or(&serde_json::Value::Null)
            ));
        }
        (outcome, restore) => {
            if let Some(restore) = restore {
                say(&format!(
                    "  restore    {}, {}",
                    restore.achieved_fidelity,
                    verified(restore.equivalent)
                ));
            }
            if let ReplayOutcome::Error { error } = outcome {
                say(&format!("  outcome    failed: {}", error.message));
            }
        }
    }
    if let Some(assessment) = &report.intent_assessment {
        say(&format!(
            "  intent     {} by {}",
            if assessment.disposition == sandloop_contract::Disposition::Deny {
                "denied"
            } else {
                "allowed"
            },
            assessment.policy_id
        ));
    }
    if let Some(compile) = &report.snapshot_compile {
        say(&format!(
            "  snapshot   restored from the point's snapshot component: instrumented in {:.0} ms ({}), compiled in {:.0} ms",
            compile.instrument_ms,
            compile.instrumented_cache.as_str(),
            compile.compile_ms,
        ));
    }
    let ms = |minutes: f64| minutes * 60_000.0;
    let restore = report.restore.as_ref();
    say(&format!(
        "  time       import {:.2} ms, restore {:.2} ms, equivalence {:.2} ms, suffix {:.2} ms",
        ms(report.import_minutes),
        ms(restore.map_or(0.0, |r| r.restore_minutes)),
        ms(restore.map_or(0.0, |r| r.equivalence_minutes)),
        ms(restore.map_or(0.0, |r| r.suffix_minutes)),
    ));
    let was = match report.original.failure_type() {
        Some(kind) => format!("failed ({kind})"),
        None => "succeeded".to_string(),
    };
    say(&format!("  run        the item {was} in the run"));
    say(&format!("  written    {}", written.display()));
}
