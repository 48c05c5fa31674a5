//! What a counterfactual candidate reports, checked before anything is
//! decided from it (reference `_normalize_validation_outcomes` and
//! `ValidationOutcome.__post_init__`).

use serde_json::{Map, Value, json};

use crate::episode::adapter::Record;
use crate::trace::validate_public_payload;
use sandloop_contract::ValidationOutcome;

/// Check a candidate's reported outcomes: every `validation_id` non-blank
/// (kept trimmed) and unique, every `public_summary` public-safe. Returns
/// them in the order reported.
///
/// Errors: the first broken rule, naming the outcome.
pub fn check_validation_outcomes(
    reported: Vec<ValidationOutcome>,
) -> Result<Vec<ValidationOutcome>, String> {
    let mut checked: Vec<ValidationOutcome> = Vec::with_capacity(reported.len());
    for (index, mut outcome) in reported.into_iter().enumerate() {
        let id = outcome.validation_id.trim();
        if id.is_empty() {
            return Err(format!(
                "validation outcome {index}: validation_id must be non-empty"
            ));
        }
        outcome.validation_id = id.to_string();
        if checked
            .iter()
            .any(|seen| seen.validation_id == outcome.validation_id)
        {
            return Err(format!(
                "validation outcome ids must be unique: {:?} is reported twice",
                outcome.validation_id
            ));
        }
        if let Some(summary) = &outcome.public_summary {
            validate_public_payload(&json!({ "public_summary": summary })).map_err(|error| {
                format!(
                    "validation outcome {:?}: public_summary is not public-safe: {error}",
                    outcome.validation_id
                )
            })?;
        }
        checked.push(outcome);
    }
    Ok(checked)
}

/// One outcome in the reference's record shape: `validation_id`, `passed`,
/// `public_summary`.
pub(super) fn outcome_record(outcome: &ValidationOutcome) -> Value {
    json!({
        "validation_id": outcome.validation_id,
        "passed": outcome.passed,
        "public_summary": outcome.public_summary,
    })
}

/// `{"outcomes": [...]}`: a candidate's outcomes as the record its risk
/// policy judges (`assess-replay-child-outcome`).
pub fn validation_outcomes_record(outcomes: &[ValidationOutcome]) -> Record {
    let mut record = Map::new();
    record.insert(
        "outcomes".into(),
        Value::Array(outcomes.iter().map(outcome_record).collect()),
    );
    record
}
