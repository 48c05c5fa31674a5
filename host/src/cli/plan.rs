//! `sandloop plan`: rank trace positions where new replay points would save
//! the most replay time, with the adaptive planner of the reference, from a
//! run directory or from explicit JSON inputs.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::args::PlanArgs;
use super::{CliError, say};
use crate::finished_run::evidence::run_evidence;
use crate::replay::planner::{
    AdaptiveReplayPointProposal, FailureReplayObservation, ReplayPositionCost, TraceBoundaries,
    plan_adaptive_replay_points, rank_order,
};

fn input(message: impl Into<String>) -> CliError {
    CliError::Input(message.into())
}

/// A proposal and the trace it is for.
struct Ranked {
    trace_id: String,
    branch_id: String,
    proposal: AdaptiveReplayPointProposal,
}

/// Run `sandloop plan` (exit 2 on bad input).
pub fn plan(args: PlanArgs) -> Result<(), CliError> {
    if args.max_proposals == 0 {
        return Err(input("--max-proposals must be at least 1"));
    }
    if !args.min_score.is_finite() {
        return Err(input("--min-score must be a finite number of minutes"));
    }
    let (ranked, inputs) = match (&args.run, &args.trace) {
        (Some(run), _) => from_run(run, &args)?,
        (None, Some(trace)) => from_files(trace, &args)?,
        (None, None) => {
            return Err(input(
                "give --run DIR, or --trace with --candidates and --observations",
            ));
        }
    };
    let proposals: Vec<Value> = ranked
        .iter()
        .map(|ranked| {
            let mut record = match serde_json::to_value(&ranked.proposal) {
                Ok(Value::Object(map)) => map,
                _ => Map::new(),
            };
            record.insert("trace_id".into(), Value::from(ranked.trace_id.clone()));
            record.insert("branch_id".into(), Value::from(ranked.branch_id.clone()));
            Value::Object(record)
        })
        .collect();
    if args.json {
        let report = json!({
            "schema_version": "sandloop_replay_plan_v0",
            "inputs": inputs,
            "proposals": proposals,
        });
        say(&serde_json::to_string_pretty(&report).expect("a JSON value serialises"));
        return Ok(());
    }
    say(&format!(
        "sandloop plan: {} from {} ({} traces, {} failure observations)",
        match ranked.len() {
            1 => "1 proposal".to_string(),
            n => format!("{n} proposals"),
        },
        inputs["source"].as_str().unwrap_or(""),
        inputs["trace_count"],
        inputs["observation_count"],
    ));
    if let Some(note) = inputs.get("note").and_then(Value::as_str) {
        say(&format!("  {note}"));
    }
    for (rank, ranked) in ranked.iter().enumerate() {
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
    Ok(())
}

fn keep_best(mut ranked: Vec<Ranked>, k: usize) -> Vec<Ranked> {
    ranked.sort_by(|a, b| {
        rank_order(&a.proposal, &b.proposal).then_with(|| a.trace_id.cmp(&b.trace_id))
    });
    ranked.truncate(k);
    ranked
}

fn from_run(run: &Path, args: &PlanArgs) -> Result<(Vec<Ranked>, Value), CliError> {
    let minimum = crate::replay::fidelity::parse_minimum(&args.min_fidelity)
        .map_err(|error| input(format!("--min-fidelity: {error}")))?;
    if !run.is_dir() {
        return Err(input(format!("{} is not a directory", run.display())));
    }
    let (evidence, costs) = run_evidence(run, minimum).map_err(|error| input(error.to_string()))?;
    let mut ranked = Vec::new();
    let mut observations = 0;
    for trace in &evidence {
        observations += trace.observations.len();
        let proposals = plan_adaptive_replay_points(
            &trace.boundaries,
            &trace.candidates,
            &trace.observations,
            args.max_proposals,
            args.min_score,
        )
        .map_err(|error| CliError::Failed(format!("trace {}: {error}", trace.trace_id)))?;
        ranked.extend(proposals.into_iter().map(|proposal| Ranked {
            trace_id: trace.trace_id.clone(),
            branch_id: trace.branch_id.clone(),
            proposal,
        }));
    }
    let note = (costs.failed_records == 0)
        .then_some("the run has no failed suffixes, so no replay point would save anything");
    let inputs = json!({
        "source": run.display().to_string(),
        "trace_count": evidence.len(),
        "observation_count": observations,
        "measured": costs,
        "minimum_fidelity": minimum.as_str(),
        "note": note,
    });
    Ok((keep_best(ranked, args.max_proposals), inputs))
}

fn read_text(path: &Path) -> Result<String, CliError> {
    sandloop_core::input_file::read_regular_to_string(path)
        .map_err(|error| input(format!("cannot read {}: {error}", path.display())))
}

/// The JSON list in the file at `path`; an error names the file, the
/// entry and field (`[2].capture_minutes`) and the line and column.
fn read_json_list<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, CliError> {
    let text = read_text(path)?;
    let mut parser = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut parser)
        .map_err(|error| {
            let field = error.path().to_string();
            let error = error.into_inner();
            match field.as_str() {
                "." => input(format!("{}: {error}", path.display())),
                _ => input(format!("{}: {field}: {error}", path.display())),
            }
        })
        .and_then(|list| {
            parser
                .end()
                .map(|()| list)
                .map_err(|error| input(format!("{}: {error}", path.display())))
        })
}

fn from_files(trace: &Path, args: &PlanArgs) -> Result<(Vec<Ranked>, Value), CliError> {
    let (Some(candidates_path), Some(observations_path)) = (&args.candidates, &args.observations)
    else {
        return Err(input("--trace needs --candidates and --observations"));
    };
    let mut pairs = Vec::new();
    let mut trace_id = String::new();
    let mut branch_id = String::new();
    for (index, line) in read_text(trace)?.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |message: String| input(format!("{}:{}: {message}", trace.display(), index + 1));
        let event: Map<String, Value> =
            serde_json::from_str(line).map_err(|error| at(error.to_string()))?;
        let event_id = event
            .get("event_id")
            .and_then(Value::as_str)
            .ok_or_else(|| at("field `event_id` must be a string".into()))?;
        let sequence = event
            .get("sequence")
            .and_then(Value::as_u64)
            .ok_or_else(|| at("field `sequence` must be a non-negative integer".into()))?;
        if trace_id.is_empty() {
            trace_id = event
                .get("trace_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            branch_id = event
                .get("branch_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        pairs.push((event_id.to_string(), sequence));
    }
    let boundaries = TraceBoundaries::from_sequences(pairs)
        .map_err(|error| input(format!("{}: {error}", trace.display())))?;
    let candidates: Vec<ReplayPositionCost> = read_json_list(candidates_path)?;
    let observations: Vec<FailureReplayObservation> = read_json_list(observations_path)?;
    let proposals = plan_adaptive_replay_points(
        &boundaries,
        &candidates,
        &observations,
        args.max_proposals,
        args.min_score,
    )
    .map_err(|error| input(error.to_string()))?;
    let ranked = proposals
        .into_iter()
        .map(|proposal| Ranked {
            trace_id: trace_id.clone(),
            branch_id: branch_id.clone(),
            proposal,
        })
        .collect();
    let inputs = json!({
        "source": trace.display().to_string(),
        "trace_count": 1,
        "observation_count": observations.len(),
        "candidate_count": candidates.len(),
    });
    Ok((ranked, inputs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sandloop_core::hostile_inputs::{
        config, json_value, read_temp_file, with_a_leaf_of_another_type,
    };

    fn candidate(sequence: u64) -> Value {
        json!({"after_event_id": format!("e{sequence}"), "next_sequence": sequence,
               "achievable_fidelity": "exact", "capture_minutes": 1.0, "restore_minutes": 0.5})
    }

    fn observation(first: u64) -> Value {
        json!({"first_effect_sequence": first, "terminal_sequence": first + 3,
               "full_replay_minutes": 2.0, "minimum_fidelity": "best_effort", "weight": 1.0})
    }

    #[test]
    fn a_candidate_of_the_wrong_type_is_named_by_index_and_field() {
        let text = json!([candidate(1), {"next_sequence": 2, "achievable_fidelity": "exact",
                                         "capture_minutes": "slow", "restore_minutes": 1}]);
        let (_dir, path, result) =
            read_temp_file("candidates.json", text.to_string().as_bytes(), |path| {
                read_json_list::<ReplayPositionCost>(path)
            });
        let Err(CliError::Input(message)) = result else {
            panic!("expected an input error");
        };
        assert!(
            message.starts_with(&format!(
                "{}: [1].capture_minutes: invalid type",
                path.display()
            )),
            "{message}"
        );
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_plan_inputs_any_json_never_panics_and_errors_name_the_file(
            candidates in json_value(),
            observations in json_value(),
            sequences in prop::collection::vec(0u64..20, 0..8),
        ) {
            let (_dir, path, candidates) = read_temp_file("candidates.json", candidates.to_string().as_bytes(), |path| {
                read_json_list::<ReplayPositionCost>(path)
            });
            if let Err(CliError::Input(message)) = &candidates {
                prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
            }
            let (_dir, path, observations) = read_temp_file("observations.json", observations.to_string().as_bytes(), |path| {
                read_json_list::<FailureReplayObservation>(path)
            });
            if let Err(CliError::Input(message)) = &observations {
                prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
            }
            let pairs = sequences.iter().map(|s| (format!("e{s}"), *s));
            if let (Ok(trace), Ok(candidates), Ok(observations)) =
                (TraceBoundaries::from_sequences(pairs), candidates, observations)
            {
                let _ = plan_adaptive_replay_points(&trace, &candidates, &observations, 3, 0.0);
            }
        }

        #[test]
        fn prop_plan_inputs_a_field_of_another_type_is_named(
            (list, key) in prop_oneof![
                with_a_leaf_of_another_type(json!([candidate(1), candidate(2), candidate(3)]), |_| true),
                with_a_leaf_of_another_type(json!([observation(0), observation(1)]), |_| true),
            ],
        ) {
            let is_candidates = list[0].get("next_sequence").is_some()
                || list[0].get("achievable_fidelity").is_some();
            let (_dir, path, result) = read_temp_file("inputs.json", list.to_string().as_bytes(), |path| {
                if is_candidates {
                    read_json_list::<ReplayPositionCost>(path).map(|_| ())
                } else {
                    read_json_list::<FailureReplayObservation>(path).map(|_| ())
                }
            });
            let Err(CliError::Input(message)) = result else {
                return Err(TestCaseError::fail("a value of another type was accepted"));
            };
            prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
            prop_assert!(message.contains(&key), "{} not named in {}", key, message);
        }
    }
}
