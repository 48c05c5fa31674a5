//! The hypothesis file of `sandloop counterfactual` (reference
//! `CounterfactualHypothesis`, `ValidationTarget` and
//! `CounterfactualCandidate`, plus the failed item they are about), read
//! and held to the reference's `__post_init__` rules.
//!
//! ```json
//! {"hypothesis_id": "h1", "item_id": "doc-7", "epoch": 2,
//!  "first_affected_event_id": "main:epoch-2:group-0003/doc-7/2", "first_affected_sequence": 2,
//!  "minimum_fidelity": "semantic_equivalent",
//!  "fix_set": [{"validation_id": "parses", "baseline_passed": false}],
//!  "guard_set": [{"validation_id": "links-kept", "baseline_passed": true}],
//!  "candidates": [{"candidate_id": "escape-html", "public_change_set": {"escape": "html"}}]}
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::fidelity::Fidelity;
use crate::trace::validate_public_object;

/// Most candidates one hypothesis may hold: they are forked as one child
/// group, every child alive at once (the size of a run's child group,
/// [`MAX_CHILDREN_PER_FORK`](crate::replay::MAX_CHILDREN_PER_FORK)).
pub const MAX_CANDIDATES: usize = crate::replay::MAX_CHILDREN_PER_FORK;

/// A validation target and how it did in the failed run (reference
/// `ValidationTarget`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationTarget {
    /// Non-blank; unique across `fix_set` and `guard_set`.
    pub validation_id: String,
    /// Whether it passed in the baseline: false for every fix target, true
    /// for every guard target.
    pub baseline_passed: bool,
}

/// One candidate change (reference `CounterfactualCandidate`, with the
/// `target_branch_id` and `intent` of `CounterfactualChildCandidate`).
#[derive(Clone, Debug, PartialEq)]
pub struct CounterfactualCandidate {
    /// Non-blank, unique within the hypothesis; the child's id.
    pub candidate_id: String,
    /// The change the adapter applies before the suffix: a public-safe
    /// JSON object.
    pub public_change_set: Map<String, Value>,
    /// The branch the child runs on (default `counterfactual-ID`, as the
    /// reference's serial replay names it).
    pub target_branch_id: String,
    /// The public intent the adapter's risk policy screens: the file's
    /// `intent` (if any) with `hypothesis_id`, `candidate_id` and
    /// `public_change_set` set by the host, so the policy always sees the
    /// change.
    pub intent: Map<String, Value>,
}

/// A counterfactual hypothesis about one failed item (reference
/// `CounterfactualHypothesis`, plus `item_id`, `epoch` and `candidates`).
#[derive(Clone, Debug, PartialEq)]
pub struct CounterfactualHypothesis {
    /// Non-blank.
    pub hypothesis_id: String,
    /// The failed item, as its record in `records.jsonl` names it.
    pub item_id: String,
    /// The epoch of that record; its last one when absent.
    pub epoch: Option<u32>,
    /// The first trace event the failure affected (non-blank).
    pub first_affected_event_id: String,
    /// Its sequence on the item's trace.
    pub first_affected_sequence: u64,
    /// Targets that failed in the baseline and must pass (at least one).
    pub fix_set: Vec<ValidationTarget>,
    /// Targets that passed in the baseline and must keep passing (at least
    /// one).
    pub guard_set: Vec<ValidationTarget>,
    /// The weakest fidelity a promotion may rest on (default
    /// `semantic_equivalent`; never `non_replayable`).
    pub minimum_fidelity: Fidelity,
    /// The candidates (at least one, at most `MAX_CANDIDATES`).
    pub candidates: Vec<CounterfactualCandidate>,
}

/// Why a hypothesis file cannot be used: its path, the field at fault
/// (`fix_set[0].baseline_passed`, or empty for the file as a whole) and
/// what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HypothesisError {
    /// The hypothesis file.
    pub path: PathBuf,
    /// The field at fault, as a path into the document.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for HypothesisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.path.display(),
                self.field,
                self.message
            )
        }
    }
}

impl std::error::Error for HypothesisError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateFile {
    candidate_id: String,
    public_change_set: Map<String, Value>,
    #[serde(default)]
    target_branch_id: Option<String>,
    #[serde(default)]
    intent: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HypothesisFile {
    hypothesis_id: String,
    item_id: String,
    #[serde(default)]
    epoch: Option<u32>,
    first_affected_event_id: String,
    first_affected_sequence: i64,
    #[serde(default)]
    minimum_fidelity: Option<String>,
    fix_set: Vec<ValidationTarget>,
    guard_set: Vec<ValidationTarget>,
    candidates: Vec<CandidateFile>,
}

/// Largest hypothesis file read, bytes.
pub const MAX_HYPOTHESIS_BYTES: u64 = 1 << 20;

/// Longest id (hypothesis, item, event, candidate, validation target,
/// branch), bytes.
pub const MAX_ID_BYTES: usize = 1024;

/// A non-blank text, trimmed (reference `_required_text`), of at most
/// [`MAX_ID_BYTES`] and without control characters.
fn required(value: &str, field: &str) -> Result<String, (String, String)> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err((field.to_string(), format!("{field} must be non-empty")));
    }
    if trimmed.len() > MAX_ID_BYTES {
        return Err((
            field.to_string(),
            format!(
                "{} bytes; an id is at most {MAX_ID_BYTES} bytes",
                trimmed.len()
            ),
        ));
    }
    if trimmed.chars().any(char::is_control) {
        return Err((
            field.to_string(),
            "an id may not hold control characters (newlines, escapes, NUL)".to_string(),
        ));
    }
    Ok(trimmed.to_string())
}

/// `value` as a public-safe object (reference `freeze_public_mapping`):
/// the trace payload rule — no key in
/// [`FORBIDDEN_PUBLIC_KEYS`](crate::trace::FORBIDDEN_PUBLIC_KEYS), no
/// absolute path in any string — with the offending place named from
/// `field`.
fn public(value: &Map<String, Value>, field: &str) -> Result<(), (String, String)> {
    validate_public_object(value).map_err(|error| {
        (
            field.to_string(),
            format!(
                "not public-safe: {}",
                error.to_string().replace("public_payload", field)
            ),
        )
    })
}

impl CounterfactualHypothesis {
    /// Read and check the hypothesis file at `path`.
    ///
    /// Errors: the file cannot be read, is not JSON of the shape above
    /// (unknown fields included), or breaks a rule of
    /// [`CounterfactualHypothesis::parse`]; each names the field.
    pub fn read(path: &Path) -> Result<Self, HypothesisError> {
        let whole = |message: String| HypothesisError {
            path: path.to_path_buf(),
            field: String::new(),
            message,
        };
        let size = std::fs::metadata(path)
            .map_err(|error| whole(format!("cannot read the hypothesis: {error}")))?
            .len();
        if size > MAX_HYPOTHESIS_BYTES {
            return Err(whole(format!(
                "{size} bytes; a hypothesis is at most {MAX_HYPOTHESIS_BYTES} bytes"
            )));
        }
        let text = crate::input_file::read_regular_to_string(path)
            .map_err(|error| whole(format!("cannot read the hypothesis: {error}")))?;
        Self::parse(&text, path)
    }

    /// Parse and check hypothesis JSON `text` (read from `path`, which
    /// errors name). The rules are the reference's: non-blank ids, a
    /// non-negative sequence, a non-empty fix set of baseline failures and
    /// guard set of baseline passes with unique ids, a replayable minimum
    /// fidelity; and sandloop's for the candidates: at least one, unique
    /// non-blank ids and branches, public-safe change sets and intents.
    pub fn parse(text: &str, path: &Path) -> Result<Self, HypothesisError> {
        let error = |(field, message): (String, String)| HypothesisError {
            path: path.to_path_buf(),
            field,
            message,
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if !text.trim_start().starts_with('{') {
            return Err(error((
                String::new(),
                "a hypothesis is one JSON object ({\"hypothesis_id\": ..., \"candidates\": [...]})"
                    .to_string(),
            )));
        }
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let file: HypothesisFile = serde_path_to_error::deserialize(&mut deserializer)
            .map_err(|failure| {
                let field = failure.path().to_string();
                let inner = failure.into_inner();
                (
                    if field == "." { String::new() } else { field },
                    format!("{inner}"),
                )
            })
            .map_err(error)?;
        deserializer
            .end()
            .map_err(|trailing| error((String::new(), trailing.to_string())))?;
        Self::from_file(file).map_err(error)
    }

    fn from_file(file: HypothesisFile) -> Result<Self, (String, String)> {
        let hypothesis_id = required(&file.hypothesis_id, "hypothesis_id")?;
        let item_id = required(&file.item_id, "item_id")?;
        let first_affected_event_id =
            required(&file.first_affected_event_id, "first_affected_event_id")?;
        let first_affected_sequence =
            u64::try_from(file.first_affected_sequence).map_err(|_| {
                (
                    "first_affected_sequence".to_string(),
                    "first_affected_sequence must be non-negative".to_string(),
                )
            })?;
        let minimum_fidelity = match &file.minimum_fidelity {
            None => Fidelity::SemanticEquivalent,
            Some(text) => match text.parse::<Fidelity>() {
                Ok(Fidelity::NonReplayable) => {
                    return Err((
                        "minimum_fidelity".into(),
                        "counterfactual replay requires a replayable fidelity".into(),
                    ));
                }
                Ok(fidelity) => fidelity,
                Err(_) => {
                    return Err((
                        "minimum_fidelity".into(),
                        format!(
                            "unknown fidelity {text:?}; use exact, semantic_equivalent or best_effort"
                        ),
                    ));
                }
            },
        };
        let fix_set = targets(file.fix_set, "fix_set", false)?;
        let guard_set = targets(file.guard_set, "guard_set", true)?;
        let mut ids: Vec<&str> = Vec::new();
        for (set, targets) in [("fix_set", &fix_set), ("guard_set", &guard_set)] {
            for (index, target) in targets.iter().enumerate() {
                if ids.contains(&target.validation_id.as_str()) {
                    return Err((
                        format!("{set}[{index}].validation_id"),
                        format!(
                            "fix_set and guard_set validation ids must be unique: {:?} repeats",
                            target.validation_id
                        ),
                    ));
                }
                ids.push(&target.validation_id);
            }
        }
        if file.candidates.is_empty() {
            return Err((
                "candidates".into(),
                "a counterfactual needs at least one candidate".into(),
            ));
        }
        if file.candidates.len() > MAX_CANDIDATES {
            return Err((
                "candidates".into(),
                format!(
                    "{} candidates; at most {MAX_CANDIDATES} run as one group (every child is \
                     forked before any runs): split the hypothesis",
                    file.candidates.len()
                ),
            ));
        }
        let mut candidates: Vec<CounterfactualCandidate> = Vec::new();
        for (index, candidate) in file.candidates.into_iter().enumerate() {
            let at = |field: &str| format!("candidates[{index}].{field}");
            let candidate_id = required(&candidate.candidate_id, "candidate_id")
                .map_err(|(_, message)| (at("candidate_id"), message))?;
            if candidates.iter().any(|c| c.candidate_id == candidate_id) {
                return Err((
                    at("candidate_id"),
                    format!("candidate ids must be unique: {candidate_id:?} repeats"),
                ));
            }
            public(&candidate.public_change_set, &at("public_change_set"))?;
            let target_branch_id = match &candidate.target_branch_id {
                Some(branch) => {
                    let branch = required(branch, "target_branch_id")
                        .map_err(|(_, message)| (at("target_branch_id"), message))?;
                    let mut named = Map::new();
                    named.insert("target_branch_id".into(), Value::from(branch.as_str()));
                    public(&named, &at("target_branch_id"))?;
                    branch
                }
                None => format!("counterfactual-{candidate_id}"),
            };
            if candidates
                .iter()
                .any(|c| c.target_branch_id == target_branch_id)
            {
                return Err((
                    at("target_branch_id"),
                    format!("candidates need branches of their own: {target_branch_id:?} repeats"),
                ));
            }
            // The policy always sees the change it screens: the host's
            // keys are added to (and win over) an intent the file gives.
            let mut intent = candidate.intent.unwrap_or_default();
            public(&intent, &at("intent"))?;
            intent.insert("hypothesis_id".into(), json!(hypothesis_id));
            intent.insert("candidate_id".into(), json!(candidate_id));
            intent.insert(
                "public_change_set".into(),
                Value::Object(candidate.public_change_set.clone()),
            );
            candidates.push(CounterfactualCandidate {
                candidate_id,
                public_change_set: candidate.public_change_set,
                target_branch_id,
                intent,
            });
        }
        Ok(CounterfactualHypothesis {
            hypothesis_id,
            item_id,
            epoch: file.epoch,
            first_affected_event_id,
            first_affected_sequence,
            fix_set,
            guard_set,
            minimum_fidelity,
            candidates,
        })
    }

    /// The fix set's then the guard set's validation ids, in order.
    pub fn required_validation_ids(&self) -> impl Iterator<Item = &str> {
        self.fix_set
            .iter()
            .chain(&self.guard_set)
            .map(|target| target.validation_id.as_str())
    }
}

/// A fix or guard set, its ids trimmed and non-blank, non-empty, every
/// target's baseline as the set requires.
fn targets(
    set: Vec<ValidationTarget>,
    name: &str,
    baseline_passed: bool,
) -> Result<Vec<ValidationTarget>, (String, String)> {
    if set.is_empty() {
        return Err((
            name.to_string(),
            if baseline_passed {
                "guard_set must contain at least one passing baseline target".into()
            } else {
                "fix_set must contain at least one failed baseline target".into()
            },
        ));
    }
    set.into_iter()
        .enumerate()
        .map(|(index, target)| {
            let validation_id = required(&target.validation_id, "validation_id")
                .map_err(|(_, message)| (format!("{name}[{index}].validation_id"), message))?;
            if target.baseline_passed != baseline_passed {
                return Err((
                    format!("{name}[{index}].baseline_passed"),
                    if baseline_passed {
                        "guard_set targets must pass in the baseline".into()
                    } else {
                        "fix_set targets must fail in the baseline".into()
                    },
                ));
            }
            Ok(ValidationTarget {
                validation_id,
                baseline_passed,
            })
        })
        .collect()
}
