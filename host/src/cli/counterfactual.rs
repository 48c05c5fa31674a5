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

use super::args::CounterfactualArgs;
use super::finished_run::{compile_with_notice, run_component};
use super::{CliError, say};
use crate::finished_run::CounterfactualReport;
use crate::replay::durable::{DurableKind, PointLine};
use crate::sandbox::finished_run::{CounterfactualAsk, CounterfactualDone, ask_counterfactual};

/// Run `sandloop counterfactual` (exit 0: a candidate was promoted; 1:
/// none was, or the group failed — the result is still written; 2: bad
/// input, nothing run).
pub fn counterfactual(args: CounterfactualArgs) -> Result<(), CliError> {
    let ask = CounterfactualAsk {
        run: &args.run,
        hypothesis: &args.hypothesis,
        component: run_component(&args.component)?,
        workers: args.child_workers as usize,
    };
    let CounterfactualDone {
        report,
        line,
        kind,
        written,
    } = ask_counterfactual(ask, compile_with_notice)?;
    if args.json {
        say(&serde_json::to_string_pretty(&report).expect("a report serialises"));
    } else {
        print_table(&report, &line, kind, &written);
    }
    let hypothesis = &report.hypothesis.hypothesis_id;
    match &report.error {
        Some(error) => Err(CliError::Failed(format!(
            "the candidates of hypothesis {hypothesis:?} could not be run: {}",
            error.message
        ))),
        None if report.promoted.is_empty() => Err(CliError::Failed(format!(
            "no candidate of hypothesis {hypothesis:?} was promoted"
        ))),
        None => Ok(()),
    }
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
                let (decision, why) = candidate.verdict();
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
    use super::*;

    #[test]
    fn terminal_text_is_escaped_and_cut() {
        assert_eq!(shown("a\nb\u{1b}[31m", 10), "a\\u000ab\\u001b[31m");
        assert_eq!(shown("abcdef", 3), "abc…");
        assert_eq!(shown("", 3), "");
        let long = "c".repeat(70_000);
        assert_eq!(shown(&long, ID_COLUMN).chars().count(), ID_COLUMN + 1);
    }
}
