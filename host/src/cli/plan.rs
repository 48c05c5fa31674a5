//! `sandloop plan`: check the flags, make the plan
//! ([`crate::finished_run::plan`]) and print it.

use super::args::PlanArgs;
use super::{CliError, say};
use crate::finished_run::plan::{PlanLimits, PlanReport, plan_files, plan_run};
use crate::harness::run_output::sorted_pretty_json;

/// Run `sandloop plan` (exit 2 on bad input).
pub fn plan(args: PlanArgs) -> Result<(), CliError> {
    let input = |message: &str| Err(CliError::Input(message.to_owned()));
    if args.max_proposals == 0 {
        return input("--max-proposals must be at least 1");
    }
    if !args.min_score.is_finite() {
        return input("--min-score must be a finite number of minutes");
    }
    let limits = PlanLimits {
        max_proposals: args.max_proposals,
        min_score: args.min_score,
    };
    let report = match (&args.run, &args.trace) {
        (Some(run), _) => {
            let minimum = crate::replay::fidelity::parse_minimum(&args.min_fidelity)
                .map_err(|error| CliError::Input(format!("--min-fidelity: {error}")))?;
            plan_run(run, minimum, limits)?
        }
        (None, Some(trace)) => {
            let (Some(candidates), Some(observations)) = (&args.candidates, &args.observations)
            else {
                return input("--trace needs --candidates and --observations");
            };
            plan_files(trace, candidates, observations, limits)?
        }
        (None, None) => {
            return input("give --run DIR, or --trace with --candidates and --observations");
        }
    };
    if args.json {
        say(&sorted_pretty_json(&report));
    } else {
        print_plan(&report);
    }
    Ok(())
}

fn print_plan(report: &PlanReport) {
    let inputs = &report.inputs;
    say(&format!(
        "sandloop plan: {} from {} ({} traces, {} failure observations)",
        match report.proposals.len() {
            1 => "1 proposal".to_string(),
            n => format!("{n} proposals"),
        },
        inputs.source,
        inputs.trace_count,
        inputs.observation_count,
    ));
    if let Some(note) = inputs.note() {
        say(&format!("  {note}"));
    }
    for (rank, ranked) in report.proposals.iter().enumerate() {
        let p = &ranked.proposal;
        say(&format!(
            "  {}. trace {} before sequence {} (after {}): saves {:.6} min net ({:.6} expected, capture {:.6}, restore {:.6}), {} fidelity, {:.1} suffix events, weight {}",
            rank + 1,
            ranked.trace_id,
            p.next_sequence,
            p.after_event_id.as_deref().unwrap_or("the origin"),
            p.score_minutes,
            p.expected_saved_minutes,
            p.capture_minutes,
            p.restore_minutes,
            p.achievable_fidelity,
            p.expected_suffix_events,
            p.eligible_observation_weight,
        ));
    }
}
