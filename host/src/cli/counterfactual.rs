//! `sandloop counterfactual`: would this change have fixed the failure?
//! Every candidate of a hypothesis runs as an isolated child of the
//! nearest trusted durable replay point before the failure's first
//! affected event — its own instance, forked by state or from the point's
//! snapshot, screened by the adapter's risk policy — with its change
//! applied; each is promoted only when every fix target passes and no guard
//! regresses on a restore eligible for promotion (reference
//! `run_counterfactual_child_group`). The result is appended to the run's
//! `counterfactuals.jsonl`.

use std::path::Path;

use serde_json::Value;

use super::args::CounterfactualArgs;
use super::finished_run::load_component;
use super::{CliError, say};
use crate::episode::units::GroupId;
use crate::finished_run::offline::ItemPosition;
use crate::finished_run::{CounterfactualReport, FinishedRun, OfflineError};
use crate::replay::counterfactual::{
    AddressableTrace, COUNTERFACTUALS_FILE, CandidateResult, CounterfactualHypothesis,
    read_addressable_trace,
};
use crate::replay::durable::{DurableKind, PointLine};
use crate::sandbox::finished_run::{CounterfactualRequest, run_counterfactual};

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// Run `sandloop counterfactual` (exit 0: a candidate was promoted; 1:
/// none was, or the group failed — the result is still written; 2: bad
/// input, nothing run).
pub fn counterfactual(args: CounterfactualArgs) -> Result<(), CliError> {
    let hypothesis = CounterfactualHypothesis::read(&args.hypothesis)
        .map_err(|error| input(error.to_string()))?;
    let named = |field: &str, message: String| {
        input(format!("{}: {field}: {message}", args.hypothesis.display()))
    };
    // Held throughout: no run writes the directory meanwhile, and two
    // commands never interleave their lines.
    let run = FinishedRun::open(&args.run, "counterfactual")?;
    let mut position =
        run.find(&hypothesis.item_id, hypothesis.epoch)
            .map_err(|error| match error {
                OfflineError::Input(message) => named("item_id", message),
                other => CliError::from(other),
            })?;
    if !failed(&position.record) {
        return Err(named(
            "item_id",
            format!(
                "item {:?} did not fail in {} (its record has no adapter_error and was not \
                 refused: accepted is not false); a counterfactual asks what would have fixed a failure",
                hypothesis.item_id, position.execution_group_id
            ),
        ));
    }

    // The trace the hypothesis addresses: the item's branch and, for an
    // item that ran as a child, the branch of the point it forked from.
    let trace = addressable_trace(run.dir(), &position, run.points())?;
    trace
        .check_addressed(&hypothesis)
        .map_err(|message| input(format!("{}: {message}", args.hypothesis.display())))?;
    let plan = run
        .plan(
            &mut position,
            Some(hypothesis.first_affected_sequence),
            hypothesis.minimum_fidelity,
        )
        .map_err(|message| named("first_affected_sequence", message))?;
    let (state, item) = run
        .point_state(&plan, &hypothesis.item_id)?
        .map_err(|message| named("item_id", message))?;
    let kind = plan.state_file().kind;
    // The point's instance, and every candidate's child (all forked before
    // any runs), with one to spare for a re-instantiation.
    let instances = hypothesis.candidates.len() as u32 + 2;
    let loaded = load_component(&run, &args.component, instances, kind)?;
    if !loaded.protocols.counterfactual {
        return Err(input(format!(
            "the run's component ({}…) does not export `sandloop:adapter/counterfactual@0.2.0`, \
             which runs a candidate with its change applied (world `counterfactual-fixes`)",
            &loaded.info.sha256[..12]
        )));
    }

    // Everything is checked; the result must have somewhere to go.
    let mut log = run.open_log(COUNTERFACTUALS_FILE)?;
    let request = CounterfactualRequest {
        hypothesis: &hypothesis,
        trace: &trace,
        workers: args.child_workers as usize,
    };
    let report = run_counterfactual(&loaded, &plan, &item, state, &request)?;
    log.append(&report)?;
    if args.json {
        say(&serde_json::to_string_pretty(&report).expect("a report serialises"));
    } else {
        print_table(&report, &plan.line, kind, log.path());
    }
    match &report.error {
        Some(error) => Err(CliError::Failed(format!(
            "the candidates of hypothesis {:?} could not be run: {}",
            hypothesis.hypothesis_id, error.message
        ))),
        None if report.promoted.is_empty() => Err(CliError::Failed(format!(
            "no candidate of hypothesis {:?} was promoted",
            hypothesis.hypothesis_id
        ))),
        None => Ok(()),
    }
}

/// Whether a record is a failure: an error record, or one the adapter
/// refused (`accepted: false`).
fn failed(record: &crate::episode::adapter::Record) -> bool {
    record
        .get("adapter_error")
        .is_some_and(|error| !error.is_null())
        || record.get("accepted") == Some(&Value::Bool(false))
}

/// The events of the item's trace on its lineage: its own branch and, when
/// it ran as a child, the branch of the point it was forked from.
fn addressable_trace(
    run: &Path,
    position: &ItemPosition,
    points: &[PointLine],
) -> Result<AddressableTrace, CliError> {
    let epoch = position
        .execution_group_id
        .parse::<GroupId>()
        .map(|id| id.epoch)
        .map_err(|_| {
            input(format!(
                "the item's execution_group_id {:?} names no epoch",
                position.execution_group_id
            ))
        })?;
    let mut branches = vec![position.branch_id.clone()];
    let parent = position
        .record
        .get("replay")
        .and_then(|replay| replay.get("replay_point_id"))
        .and_then(Value::as_str)
        .and_then(|id| points.iter().find(|line| line.point.replay_point_id == id));
    if let Some(parent) = parent
        && !branches.contains(&parent.point.cursor.branch_id)
    {
        branches.push(parent.point.cursor.branch_id.clone());
    }
    read_addressable_trace(run, epoch, &position.trace_id, branches).map_err(CliError::Input)
}

fn print_table(report: &CounterfactualReport, line: &PointLine, kind: DurableKind, path: &Path) {
    let hypothesis = &report.hypothesis;
    let point = &line.point;
    say(&format!(
        "sandloop counterfactual: {} on {}, from replay point {} ({}, {} fork, sequence {} of trace {})",
        shown(&hypothesis.hypothesis_id, ID_COLUMN),
        shown(&hypothesis.item_id, WHY_COLUMN),
        point.replay_point_id,
        point.fidelity,
        match kind {
            DurableKind::Snapshot => "snapshot",
            DurableKind::State => "state",
        },
        point.cursor.next_sequence,
        point.cursor.trace_id,
    ));
    match (&report.group, &report.error) {
        (_, Some(error)) => say(&format!(
            "  failed     {}",
            shown(&error.message, WHY_COLUMN)
        )),
        (None, None) => {}
        (Some(group), None) => {
            let width = group
                .candidates
                .iter()
                .map(|c| shown(c.candidate_id(), ID_COLUMN).chars().count())
                .max()
                .unwrap_or(0)
                .max("candidate".len());
            say(&format!("  {:width$}  {:16}  why", "candidate", "decision"));
            for candidate in &group.candidates {
                let (decision, why) = match candidate {
                    CandidateResult::Evaluated { replay, .. } => {
                        let mut why = replay.reason.to_string();
                        let listed = |label: &str, ids: &[String]| {
                            (!ids.is_empty()).then(|| format!("{label}: {}", ids.join(", ")))
                        };
                        let details: Vec<String> = [
                            listed("missing", &replay.missing_validations),
                            listed("still failing", &replay.failed_fixes),
                            listed("regressed", &replay.regressed_guards),
                        ]
                        .into_iter()
                        .flatten()
                        .collect();
                        if !details.is_empty() {
                            why.push_str(&format!(" ({})", details.join("; ")));
                        }
                        if !replay.restore.promotion_eligible {
                            why.push_str(&format!(
                                " ({} restore, {})",
                                replay.restore.achieved_fidelity,
                                if replay.restore.equivalent {
                                    "verified"
                                } else {
                                    "not verified"
                                }
                            ));
                        }
                        (replay.decision.as_str(), why)
                    }
                    CandidateResult::ExecutionFailed(failure) => {
                        let mut why = format!(
                            "{} at {}: {}",
                            failure.error_type,
                            failure.stage.as_str(),
                            failure.error.message
                        );
                        if let Some(reason) = failure
                            .risk_assessment
                            .as_ref()
                            .and_then(|assessment| assessment.sanitized_reason.as_deref())
                        {
                            why.push_str(&format!(" ({reason})"));
                        }
                        ("execution_failed", why)
                    }
                };
                say(&format!(
                    "  {:width$}  {decision:16}  {}",
                    shown(candidate.candidate_id(), ID_COLUMN),
                    shown(&why, WHY_COLUMN)
                ));
            }
        }
    }
    say(&format!("  written    {}", path.display()));
}

/// Widest candidate id the table shows, characters.
const ID_COLUMN: usize = 48;
/// Longest reason the table shows, characters (the line has them whole).
const WHY_COLUMN: usize = 240;

/// `text` for the terminal: control characters escaped, cut at `max`
/// characters with an ellipsis.
fn shown(text: &str, max: usize) -> String {
    sandloop_core::terminal::one_line(&sandloop_core::ellipsis::cut_chars(text, max)).into_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn terminal_text_is_escaped_and_cut() {
        assert_eq!(shown("a\nb\u{1b}[31m", 10), "a\\u000ab\\u001b[31m");
        assert_eq!(shown("abcdef", 3), "abc…");
        assert_eq!(shown("", 3), "");
        let long = "c".repeat(70_000);
        assert_eq!(shown(&long, ID_COLUMN).chars().count(), ID_COLUMN + 1);
    }

    #[test]
    fn a_failure_is_an_error_record_or_a_refused_one() {
        let record = |value: Value| value.as_object().unwrap().clone();
        assert!(failed(&record(json!({"adapter_error": {"type": "trap"}}))));
        assert!(failed(&record(json!({"accepted": false}))));
        assert!(!failed(&record(
            json!({"accepted": true, "adapter_error": null})
        )));
        assert!(!failed(&record(json!({}))));
    }
}
