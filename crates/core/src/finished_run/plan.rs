//! `sandloop plan`: rank trace positions where new replay points would
//! save the most replay time, with the reference's adaptive planner
//! (`plan_adaptive_replay_points`), from a finished run's evidence
//! ([`super::evidence`]) or from explicit JSON inputs.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::OfflineError;
use super::evidence::{RunCosts, run_evidence};
use crate::replay::Fidelity;
use crate::replay::planner::{
    AdaptiveReplayPointProposal, FailureReplayObservation, ReplayPositionCost, TraceBoundaries,
    plan_adaptive_replay_points, rank_order,
};

/// `schema_version` of [`PlanReport`].
pub const PLAN_SCHEMA: &str = "sandloop_replay_plan_v0";

/// How many proposals to keep, and the least net saving worth one.
#[derive(Clone, Copy, Debug)]
pub struct PlanLimits {
    /// The proposals kept, best first (at least 1).
    pub max_proposals: usize,
    /// The least `score_minutes` a proposal needs (finite).
    pub min_score: f64,
}

/// What `sandloop plan --json` prints: the inputs weighed and the
/// proposals, best first. Printed with its keys sorted.
#[derive(Clone, Debug, Serialize)]
pub struct PlanReport {
    /// [`PLAN_SCHEMA`].
    pub schema_version: &'static str,
    /// What was weighed.
    pub inputs: PlanInputs,
    /// The proposals, best first ([`rank_order`], then by trace).
    pub proposals: Vec<RankedProposal>,
}

/// A proposal and the trace it is for.
#[derive(Clone, Debug, Serialize)]
pub struct RankedProposal {
    /// The trace the point would be captured in.
    pub trace_id: String,
    /// The trace's branch.
    pub branch_id: String,
    /// The planner's proposal.
    #[serde(flatten)]
    pub proposal: AdaptiveReplayPointProposal,
}

/// The inputs a plan weighed.
#[derive(Clone, Debug, Serialize)]
pub struct PlanInputs {
    /// The run directory or the trace file.
    pub source: String,
    /// The traces weighed.
    pub trace_count: usize,
    /// The failure observations weighed.
    pub observation_count: usize,
    /// What only a run, or only explicit files, give.
    #[serde(flatten)]
    pub origin: PlanOrigin,
}

/// Where a plan's inputs came from.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum PlanOrigin {
    /// A run directory.
    Run {
        /// What the run measured.
        measured: RunCosts,
        /// The least fidelity a point must restore with.
        minimum_fidelity: &'static str,
        /// Why there are no proposals, when the run explains it (`null`
        /// otherwise).
        note: Option<&'static str>,
    },
    /// `--trace`, `--candidates` and `--observations`.
    Files {
        /// The candidate positions read.
        candidate_count: usize,
    },
}

impl PlanInputs {
    /// Why there are no proposals, when the run explains it.
    pub fn note(&self) -> Option<&'static str> {
        match self.origin {
            PlanOrigin::Run { note, .. } => note,
            PlanOrigin::Files { .. } => None,
        }
    }
}

/// The plan of the finished run in `run`: each trace's evidence weighed
/// with points that restore with at least `minimum`.
///
/// # Errors
/// [`OfflineError::Input`] for a `run` that is not a run directory or
/// holds damaged evidence; [`OfflineError::Failed`] when the planner
/// refuses a trace's evidence (naming the trace).
pub fn plan_run(
    run: &Path,
    minimum: Fidelity,
    limits: PlanLimits,
) -> Result<PlanReport, OfflineError> {
    if !run.is_dir() {
        return Err(OfflineError::Input(format!(
            "{} is not a directory",
            run.display()
        )));
    }
    let (evidence, costs) =
        run_evidence(run, minimum).map_err(|error| OfflineError::Input(error.to_string()))?;
    let mut ranked = Vec::new();
    let mut observations = 0;
    for trace in &evidence {
        observations += trace.observations.len();
        let proposals = plan_adaptive_replay_points(
            &trace.boundaries,
            &trace.candidates,
            &trace.observations,
            limits.max_proposals,
            limits.min_score,
        )
        .map_err(|error| OfflineError::Failed(format!("trace {}: {error}", trace.trace_id)))?;
        ranked.extend(proposals.into_iter().map(|proposal| RankedProposal {
            trace_id: trace.trace_id.clone(),
            branch_id: trace.branch_id.clone(),
            proposal,
        }));
    }
    ranked.sort_by(|a, b| {
        rank_order(&a.proposal, &b.proposal).then_with(|| a.trace_id.cmp(&b.trace_id))
    });
    ranked.truncate(limits.max_proposals);
    let note = (costs.failed_records == 0)
        .then_some("the run has no failed suffixes, so no replay point would save anything");
    Ok(PlanReport {
        schema_version: PLAN_SCHEMA,
        inputs: PlanInputs {
            source: run.display().to_string(),
            trace_count: evidence.len(),
            observation_count: observations,
            origin: PlanOrigin::Run {
                measured: costs,
                minimum_fidelity: minimum.as_str(),
                note,
            },
        },
        proposals: ranked,
    })
}

/// The plan of one trace from explicit files: `trace` (JSON lines with
/// `event_id` and `sequence`, the first naming `trace_id` and
/// `branch_id`), `candidates` (a JSON list of [`ReplayPositionCost`]) and
/// `observations` (a JSON list of [`FailureReplayObservation`]).
///
/// # Errors
/// [`OfflineError::Input`] naming the file, and the line or the entry and
/// field, of what cannot be read; or the planner's refusal.
pub fn plan_files(
    trace: &Path,
    candidates: &Path,
    observations: &Path,
    limits: PlanLimits,
) -> Result<PlanReport, OfflineError> {
    let input = OfflineError::Input;
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
            let text = |key: &str| {
                event
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            trace_id = text("trace_id");
            branch_id = text("branch_id");
        }
        pairs.push((event_id.to_string(), sequence));
    }
    let boundaries = TraceBoundaries::from_sequences(pairs)
        .map_err(|error| input(format!("{}: {error}", trace.display())))?;
    let candidates: Vec<ReplayPositionCost> = read_json_list(candidates)?;
    let observations: Vec<FailureReplayObservation> = read_json_list(observations)?;
    let proposals = plan_adaptive_replay_points(
        &boundaries,
        &candidates,
        &observations,
        limits.max_proposals,
        limits.min_score,
    )
    .map_err(|error| input(error.to_string()))?;
    Ok(PlanReport {
        schema_version: PLAN_SCHEMA,
        inputs: PlanInputs {
            source: trace.display().to_string(),
            trace_count: 1,
            observation_count: observations.len(),
            origin: PlanOrigin::Files {
                candidate_count: candidates.len(),
            },
        },
        proposals: proposals
            .into_iter()
            .map(|proposal| RankedProposal {
                trace_id: trace_id.clone(),
                branch_id: branch_id.clone(),
                proposal,
            })
            .collect(),
    })
}

fn read_text(path: &Path) -> Result<String, OfflineError> {
    crate::input_file::read_regular_to_string(path)
        .map_err(|error| OfflineError::Input(format!("cannot read {}: {error}", path.display())))
}

/// The JSON list in the file at `path`; an error names the file, the
/// entry and field (`[2].capture_minutes`) and the line and column.
fn read_json_list<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, OfflineError> {
    let input = OfflineError::Input;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::hostile_inputs::{config, json_value, read_temp_file, with_a_leaf_of_another_type};
    use proptest::prelude::*;

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
        let Err(OfflineError::Input(message)) = result else {
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
            if let Err(OfflineError::Input(message)) = &candidates {
                prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
            }
            let (_dir, path, observations) = read_temp_file("observations.json", observations.to_string().as_bytes(), |path| {
                read_json_list::<FailureReplayObservation>(path)
            });
            if let Err(OfflineError::Input(message)) = &observations {
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
            let Err(OfflineError::Input(message)) = result else {
                return Err(TestCaseError::fail("a value of another type was accepted"));
            };
            prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
            prop_assert!(message.contains(&key), "{} not named in {}", key, message);
        }
    }
}
