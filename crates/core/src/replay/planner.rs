//! Adaptive replay-point placement: given what each trace boundary would
//! cost to capture and restore, and where observed failures first went
//! wrong, rank the boundaries where a replay point would save the most
//! replay time. Nothing is captured here; the planner only proposes.
//!
//! Mirrors `adaptive_replay_planner.py` in the reference, with the same
//! field names and JSON keys. Every `*_minutes` value is wall-clock minutes;
//! every `*_sequence` value is a trace sequence number, where a boundary's
//! `next_sequence` is the sequence the first replayed event would get
//! (0 is the origin, before any event).

use std::cmp::Ordering;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::fidelity::{Fidelity, UnknownFidelity};
use crate::trace::{TraceEvent, TraceLog};

/// How many proposals the reference returns unless told otherwise
/// (`max_proposals=3` in `plan_adaptive_replay_points`).
pub const DEFAULT_MAX_PROPOSALS: usize = 3;

/// The reference's default score threshold in minutes
/// (`minimum_score_minutes=0.0`): proposals that cost more than they save
/// are dropped.
pub const DEFAULT_MINIMUM_SCORE_MINUTES: f64 = 0.0;

/// The weight an observation record gets when it names none (the
/// reference's `weight: float = 1.0`).
pub const DEFAULT_OBSERVATION_WEIGHT: f64 = 1.0;

/// Why a planner input was refused. Each message names the offending field
/// and, where there is one, its value; candidate and observation errors
/// raised by [`plan_adaptive_replay_points`] also give the input's index.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A text field that may be absent was present but blank after
    /// trimming (reference `require_nonempty_text`).
    #[error("{field} must not be blank when present, got {value:?}")]
    BlankText {
        /// The field, e.g. `after_event_id`.
        field: &'static str,
        /// The value as given.
        value: String,
    },
    /// A sequence field in a JSON record was negative.
    #[error("{field} must be non-negative, got {value}")]
    NegativeSequence {
        /// The field, e.g. `next_sequence`.
        field: &'static str,
        /// The value as given.
        value: i64,
    },
    /// A number was NaN or infinite.
    #[error("{field} must be a finite number, got {value}")]
    NotFinite {
        /// The field, e.g. `capture_minutes`.
        field: &'static str,
        /// The value as given.
        value: f64,
    },
    /// A duration was negative.
    #[error("{field} must be non-negative minutes, got {value}")]
    NegativeMinutes {
        /// The field, e.g. `restore_minutes`.
        field: &'static str,
        /// The value as given.
        value: f64,
    },
    /// A fidelity name in a JSON record does not exist.
    #[error("{field}: {source}")]
    UnknownFidelity {
        /// The field, e.g. `minimum_fidelity`.
        field: &'static str,
        /// The parse failure, naming the value.
        #[source]
        source: UnknownFidelity,
    },
    /// A fidelity field was `non_replayable`, which can never be restored.
    #[error("{field} must be replayable, got non_replayable")]
    NonReplayable {
        /// `achievable_fidelity` or `minimum_fidelity`.
        field: &'static str,
    },
    /// An observation's failure ended at or before its first effect.
    #[error(
        "terminal_sequence must come after first_effect_sequence, got terminal_sequence {terminal_sequence} with first_effect_sequence {first_effect_sequence}"
    )]
    TerminalNotAfterFirstEffect {
        /// The observation's first effect.
        first_effect_sequence: u64,
        /// The observation's terminal sequence.
        terminal_sequence: u64,
    },
    /// An observation's weight was zero or negative.
    #[error("weight must be positive, got {value}")]
    NonPositiveWeight {
        /// The value as given.
        value: f64,
    },
    /// `max_proposals` was 0.
    #[error("max_proposals must be positive, got 0")]
    ZeroMaxProposals,
    /// `minimum_score_minutes` was NaN, which no score can be compared to.
    #[error("minimum_score_minutes must be a number, got NaN")]
    NanThreshold,
    /// A candidate boundary lies beyond the end of the trace.
    #[error("candidates[{index}]: next_sequence {next_sequence} lies past the trace head {head}")]
    CandidatePastHead {
        /// Position in the candidate list.
        index: usize,
        /// The candidate's boundary.
        next_sequence: u64,
        /// The trace head (last sequence + 1).
        head: u64,
    },
    /// The origin candidate (`next_sequence` 0) names an event.
    #[error(
        "candidates[{index}]: the origin (next_sequence 0) must not name an event, got after_event_id {after_event_id:?}"
    )]
    OriginNamesEvent {
        /// Position in the candidate list.
        index: usize,
        /// The id it named.
        after_event_id: String,
    },
    /// A non-origin candidate names no event.
    #[error(
        "candidates[{index}]: next_sequence {next_sequence} is not the origin, so after_event_id is required"
    )]
    MissingAfterEventId {
        /// Position in the candidate list.
        index: usize,
        /// The candidate's boundary.
        next_sequence: u64,
    },
    /// A candidate names an event the trace does not have.
    #[error("candidates[{index}]: after_event_id {after_event_id:?} is not an event of the trace")]
    UnknownEvent {
        /// Position in the candidate list.
        index: usize,
        /// The id it named.
        after_event_id: String,
    },
    /// A candidate's event is not the one just before its boundary.
    #[error(
        "candidates[{index}]: after_event_id {after_event_id:?} has sequence {event_sequence}, which does not end at next_sequence {next_sequence} (expected event sequence + 1)"
    )]
    BoundaryMismatch {
        /// Position in the candidate list.
        index: usize,
        /// The id it named.
        after_event_id: String,
        /// That event's sequence in the trace.
        event_sequence: u64,
        /// The candidate's boundary.
        next_sequence: u64,
    },
    /// An observed failure ended beyond the end of the trace.
    #[error(
        "observations[{index}]: terminal_sequence {terminal_sequence} lies past the trace head {head}"
    )]
    TerminalPastHead {
        /// Position in the observation list.
        index: usize,
        /// The observation's terminal sequence.
        terminal_sequence: u64,
        /// The trace head (last sequence + 1).
        head: u64,
    },
    /// Two trace events share an id, so boundaries cannot be looked up.
    #[error("trace event_id {event_id:?} appears more than once")]
    DuplicateEventId {
        /// The repeated id.
        event_id: String,
    },
    /// Trace events are not in consecutive sequence order.
    #[error(
        "trace event {event_id:?} has sequence {got}, expected {expected} (sequences must be consecutive)"
    )]
    NonConsecutiveSequence {
        /// The out-of-place event.
        event_id: String,
        /// The sequence that should have followed its predecessor.
        expected: u64,
        /// The sequence it has.
        got: u64,
    },
}

/// What the planner needs of a trace branch: its head and where each event
/// sits. Sequences come from the events themselves, so a branch may start
/// at a sequence other than 0; the head is the last event's sequence + 1,
/// or 0 for an empty branch. Stands in for the reference's `TraceLog`
/// (`len(trace.events)` and `trace.event(id)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceBoundaries {
    head: u64,
    sequences: HashMap<String, u64>,
}

impl TraceBoundaries {
    /// The boundaries of a live branch. Infallible: a [`TraceLog`] already
    /// guarantees unique ids and consecutive sequences.
    pub fn from_log(log: &TraceLog) -> Self {
        let events = log.events();
        Self {
            head: events
                .last()
                .map_or(0, |event| event.sequence.saturating_add(1)),
            sequences: events
                .iter()
                .map(|event| (event.event_id.clone(), event.sequence))
                .collect(),
        }
    }

    /// The boundaries of events read back from a file, oldest first.
    ///
    /// Errors: [`PlanError::DuplicateEventId`] when an id repeats;
    /// [`PlanError::NonConsecutiveSequence`] when a sequence is not its
    /// predecessor's + 1 (the first event may start anywhere).
    pub fn from_events(events: &[TraceEvent]) -> Result<Self, PlanError> {
        Self::from_sequences(
            events
                .iter()
                .map(|event| (event.event_id.as_str(), event.sequence)),
        )
    }

    /// The boundaries of `(event_id, sequence)` pairs, oldest first; for
    /// callers holding lighter records than [`TraceEvent`]. Same rules and
    /// errors as [`TraceBoundaries::from_events`].
    pub fn from_sequences<I, S>(pairs: I) -> Result<Self, PlanError>
    where
        I: IntoIterator<Item = (S, u64)>,
        S: Into<String>,
    {
        let mut sequences = HashMap::new();
        let mut last: Option<u64> = None;
        for (event_id, sequence) in pairs {
            let event_id = event_id.into();
            if let Some(previous) = last {
                let expected = previous.saturating_add(1);
                if previous == u64::MAX || sequence != expected {
                    return Err(PlanError::NonConsecutiveSequence {
                        event_id,
                        expected,
                        got: sequence,
                    });
                }
            }
            if sequences.contains_key(&event_id) {
                return Err(PlanError::DuplicateEventId { event_id });
            }
            sequences.insert(event_id, sequence);
            last = Some(sequence);
        }
        Ok(Self {
            head: last.map_or(0, |sequence| sequence.saturating_add(1)),
            sequences,
        })
    }

    /// The branch head: the sequence the next appended event would get.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The sequence of the event with id `event_id`, if the branch has it.
    pub fn sequence_of(&self, event_id: &str) -> Option<u64> {
        self.sequences.get(event_id).copied()
    }
}

impl From<&TraceLog> for TraceBoundaries {
    fn from(log: &TraceLog) -> Self {
        Self::from_log(log)
    }
}

/// An adapter's estimate for capturing a replay point at one trace boundary
/// (reference `ReplayPositionCost`). JSON shape:
/// `{"after_event_id": str | null, "next_sequence": int,
/// "achievable_fidelity": str, "capture_minutes": float,
/// "restore_minutes": float}`; `after_event_id` may be omitted (null) and
/// unknown keys are refused. Loading JSON runs the same checks as
/// [`ReplayPositionCost::new`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ReplayPositionCostRecord")]
pub struct ReplayPositionCost {
    after_event_id: Option<String>,
    next_sequence: u64,
    achievable_fidelity: Fidelity,
    capture_minutes: f64,
    restore_minutes: f64,
}

impl ReplayPositionCost {
    /// A checked cost estimate for the boundary before `next_sequence`,
    /// just after event `after_event_id` (`None` at the origin). The id is
    /// trimmed. `capture_minutes` is the one-off cost of capturing the
    /// point; `restore_minutes` is paid on every replay from it.
    ///
    /// Errors: [`PlanError::BlankText`] for a blank `after_event_id`;
    /// [`PlanError::NonReplayable`] when `achievable_fidelity` is
    /// `non_replayable`; [`PlanError::NotFinite`] or
    /// [`PlanError::NegativeMinutes`] for either duration. Whether the
    /// boundary exists in a trace is checked later, by
    /// [`plan_adaptive_replay_points`].
    pub fn new(
        after_event_id: Option<&str>,
        next_sequence: u64,
        achievable_fidelity: Fidelity,
        capture_minutes: f64,
        restore_minutes: f64,
    ) -> Result<Self, PlanError> {
        let after_event_id = after_event_id
            .map(|id| nonblank("after_event_id", id))
            .transpose()?;
        if achievable_fidelity == Fidelity::NonReplayable {
            return Err(PlanError::NonReplayable {
                field: "achievable_fidelity",
            });
        }
        Ok(Self {
            after_event_id,
            next_sequence,
            achievable_fidelity,
            capture_minutes: minutes("capture_minutes", capture_minutes)?,
            restore_minutes: minutes("restore_minutes", restore_minutes)?,
        })
    }

    /// The event the boundary follows; `None` at the origin.
    pub fn after_event_id(&self) -> Option<&str> {
        self.after_event_id.as_deref()
    }

    /// The sequence of the first event after the boundary.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// The best fidelity a point here can be restored with.
    pub fn achievable_fidelity(&self) -> Fidelity {
        self.achievable_fidelity
    }

    /// Minutes to capture a point here, paid once.
    pub fn capture_minutes(&self) -> f64 {
        self.capture_minutes
    }

    /// Minutes to restore a point here, paid per replay.
    pub fn restore_minutes(&self) -> f64 {
        self.restore_minutes
    }
}

/// The JSON form of [`ReplayPositionCost`] before validation. Sequences are
/// signed so a negative one is reported by name rather than as a type error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayPositionCostRecord {
    #[serde(default)]
    after_event_id: Option<String>,
    next_sequence: i64,
    achievable_fidelity: String,
    capture_minutes: f64,
    restore_minutes: f64,
}

impl TryFrom<ReplayPositionCostRecord> for ReplayPositionCost {
    type Error = PlanError;

    fn try_from(record: ReplayPositionCostRecord) -> Result<Self, PlanError> {
        // Same order of checks as the reference's `__post_init__`.
        if let Some(id) = &record.after_event_id {
            nonblank("after_event_id", id)?;
        }
        let next_sequence = sequence("next_sequence", record.next_sequence)?;
        let fidelity = fidelity("achievable_fidelity", &record.achievable_fidelity)?;
        Self::new(
            record.after_event_id.as_deref(),
            next_sequence,
            fidelity,
            record.capture_minutes,
            record.restore_minutes,
        )
    }
}

/// One observed failure: where it first had an effect, where it ended, what
/// replaying it from the origin cost, and the fidelity a replay of it needs
/// (reference `FailureReplayObservation`). JSON shape:
/// `{"first_effect_sequence": int, "terminal_sequence": int,
/// "full_replay_minutes": float, "minimum_fidelity": str, "weight": float}`;
/// `weight` defaults to [`DEFAULT_OBSERVATION_WEIGHT`] and unknown keys are
/// refused. Loading JSON runs the same checks as
/// [`FailureReplayObservation::new`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FailureReplayObservationRecord")]
pub struct FailureReplayObservation {
    first_effect_sequence: u64,
    terminal_sequence: u64,
    full_replay_minutes: f64,
    minimum_fidelity: Fidelity,
    weight: f64,
}

impl FailureReplayObservation {
    /// A checked observation. A replay point helps it only if it sits at
    /// or before `first_effect_sequence`; `terminal_sequence` is where the
    /// failure ended and `full_replay_minutes` what replaying
    /// `0..terminal_sequence` cost. `weight` scales its say in the ranking
    /// (e.g. how often the failure recurs).
    ///
    /// Errors: [`PlanError::TerminalNotAfterFirstEffect`] unless
    /// `terminal_sequence > first_effect_sequence`; [`PlanError::NotFinite`]
    /// or [`PlanError::NegativeMinutes`] for `full_replay_minutes`;
    /// [`PlanError::NonReplayable`] when `minimum_fidelity` is
    /// `non_replayable`; [`PlanError::NotFinite`] or
    /// [`PlanError::NonPositiveWeight`] for `weight`.
    pub fn new(
        first_effect_sequence: u64,
        terminal_sequence: u64,
        full_replay_minutes: f64,
        minimum_fidelity: Fidelity,
        weight: f64,
    ) -> Result<Self, PlanError> {
        if terminal_sequence <= first_effect_sequence {
            return Err(PlanError::TerminalNotAfterFirstEffect {
                first_effect_sequence,
                terminal_sequence,
            });
        }
        let full_replay_minutes = minutes("full_replay_minutes", full_replay_minutes)?;
        if minimum_fidelity == Fidelity::NonReplayable {
            return Err(PlanError::NonReplayable {
                field: "minimum_fidelity",
            });
        }
        let weight = finite("weight", weight)?;
        if weight <= 0.0 {
            return Err(PlanError::NonPositiveWeight { value: weight });
        }
        Ok(Self {
            first_effect_sequence,
            terminal_sequence,
            full_replay_minutes,
            minimum_fidelity,
            weight,
        })
    }

    /// The first sequence the failure affected.
    pub fn first_effect_sequence(&self) -> u64 {
        self.first_effect_sequence
    }

    /// The sequence the failure ended at (exclusive end of its replay).
    pub fn terminal_sequence(&self) -> u64 {
        self.terminal_sequence
    }

    /// Minutes to replay the failure from the origin.
    pub fn full_replay_minutes(&self) -> f64 {
        self.full_replay_minutes
    }

    /// The weakest fidelity a replay of it can use.
    pub fn minimum_fidelity(&self) -> Fidelity {
        self.minimum_fidelity
    }

    /// Its weight in the ranking, positive.
    pub fn weight(&self) -> f64 {
        self.weight
    }
}

/// The JSON form of [`FailureReplayObservation`] before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureReplayObservationRecord {
    first_effect_sequence: i64,
    terminal_sequence: i64,
    full_replay_minutes: f64,
    minimum_fidelity: String,
    #[serde(default = "default_weight")]
    weight: f64,
}

fn default_weight() -> f64 {
    DEFAULT_OBSERVATION_WEIGHT
}

impl TryFrom<FailureReplayObservationRecord> for FailureReplayObservation {
    type Error = PlanError;

    fn try_from(record: FailureReplayObservationRecord) -> Result<Self, PlanError> {
        // Same order of checks as the reference's `__post_init__`.
        let first = sequence("first_effect_sequence", record.first_effect_sequence)?;
        let terminal = sequence("terminal_sequence", record.terminal_sequence)?;
        if terminal <= first {
            return Err(PlanError::TerminalNotAfterFirstEffect {
                first_effect_sequence: first,
                terminal_sequence: terminal,
            });
        }
        minutes("full_replay_minutes", record.full_replay_minutes)?;
        let fidelity = fidelity("minimum_fidelity", &record.minimum_fidelity)?;
        Self::new(
            first,
            terminal,
            record.full_replay_minutes,
            fidelity,
            record.weight,
        )
    }
}

/// One ranked boundary to capture a replay point at (reference
/// `AdaptiveReplayPointProposal`). Serialises to the reference's
/// `to_record` keys in its order, `achievable_fidelity` as its name and a
/// missing `after_event_id` as `null`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdaptiveReplayPointProposal {
    /// The event the boundary follows; `None` at the origin.
    pub after_event_id: Option<String>,
    /// The sequence of the first event after the boundary.
    pub next_sequence: u64,
    /// The fidelity a point here can be restored with.
    pub achievable_fidelity: Fidelity,
    /// `expected_saved_minutes - capture_minutes`: the net minutes the
    /// point is expected to save; the ranking key.
    pub score_minutes: f64,
    /// Weight-summed minutes saved over the eligible observations, each
    /// `max(0, full_replay_minutes * next_sequence / terminal_sequence -
    /// restore_minutes)`.
    pub expected_saved_minutes: f64,
    /// Weighted mean of `terminal_sequence - next_sequence` over the
    /// eligible observations: how many events a replay from here still runs.
    pub expected_suffix_events: f64,
    /// Summed weight of the observations this boundary can serve.
    pub eligible_observation_weight: f64,
    /// The candidate's capture cost in minutes.
    pub capture_minutes: f64,
    /// The candidate's restore cost in minutes.
    pub restore_minutes: f64,
}

/// Rank candidate replay-point boundaries by the replay minutes they are
/// expected to save on the observed failures, best first, at most
/// `max_proposals` of them. Mirrors `plan_adaptive_replay_points` in the
/// reference; pass [`DEFAULT_MAX_PROPOSALS`] and
/// [`DEFAULT_MINIMUM_SCORE_MINUTES`] for its defaults.
///
/// An observation is eligible for a candidate when the candidate's
/// `next_sequence <= first_effect_sequence` and its fidelity meets the
/// observation's `minimum_fidelity`. A candidate with no eligible
/// observation, or whose `score_minutes` is below `minimum_score_minutes`,
/// is left out. Proposals are ordered by score (highest first), then
/// eligible weight (highest first), then `next_sequence` (latest first),
/// then `after_event_id` (the origin first, then ascending).
///
/// Returns an empty list, before any other check, when `candidates` or
/// `observations` is empty.
///
/// Errors, in the order they are checked: [`PlanError::ZeroMaxProposals`];
/// [`PlanError::NanThreshold`]; for each candidate in turn
/// [`PlanError::CandidatePastHead`], [`PlanError::OriginNamesEvent`],
/// [`PlanError::MissingAfterEventId`], [`PlanError::UnknownEvent`],
/// [`PlanError::BoundaryMismatch`]; then for each observation
/// [`PlanError::TerminalPastHead`].
pub fn plan_adaptive_replay_points(
    trace: &TraceBoundaries,
    candidates: &[ReplayPositionCost],
    observations: &[FailureReplayObservation],
    max_proposals: usize,
    minimum_score_minutes: f64,
) -> Result<Vec<AdaptiveReplayPointProposal>, PlanError> {
    if candidates.is_empty() || observations.is_empty() {
        return Ok(Vec::new());
    }
    if max_proposals == 0 {
        return Err(PlanError::ZeroMaxProposals);
    }
    if minimum_score_minutes.is_nan() {
        return Err(PlanError::NanThreshold);
    }
    for (index, candidate) in candidates.iter().enumerate() {
        validate_position(trace, index, candidate)?;
    }
    for (index, observation) in observations.iter().enumerate() {
        if observation.terminal_sequence > trace.head() {
            return Err(PlanError::TerminalPastHead {
                index,
                terminal_sequence: observation.terminal_sequence,
                head: trace.head(),
            });
        }
    }

    let mut proposals: Vec<_> = candidates
        .iter()
        .filter_map(|candidate| propose(candidate, observations, minimum_score_minutes))
        .collect();
    // Stable, like Python's sort, so full ties keep their input order.
    proposals.sort_by(rank_order);
    proposals.truncate(max_proposals);
    Ok(proposals)
}

/// The reference's `_validate_position`: the boundary must exist in the
/// trace and `after_event_id` must be the event just before it.
fn validate_position(
    trace: &TraceBoundaries,
    index: usize,
    candidate: &ReplayPositionCost,
) -> Result<(), PlanError> {
    let next_sequence = candidate.next_sequence;
    if next_sequence > trace.head() {
        return Err(PlanError::CandidatePastHead {
            index,
            next_sequence,
            head: trace.head(),
        });
    }
    let after_event_id = candidate.after_event_id.as_deref();
    if next_sequence == 0 {
        return match after_event_id {
            None => Ok(()),
            Some(id) => Err(PlanError::OriginNamesEvent {
                index,
                after_event_id: id.to_string(),
            }),
        };
    }
    let Some(id) = after_event_id else {
        return Err(PlanError::MissingAfterEventId {
            index,
            next_sequence,
        });
    };
    let Some(event_sequence) = trace.sequence_of(id) else {
        return Err(PlanError::UnknownEvent {
            index,
            after_event_id: id.to_string(),
        });
    };
    if event_sequence.checked_add(1) != Some(next_sequence) {
        return Err(PlanError::BoundaryMismatch {
            index,
            after_event_id: id.to_string(),
            event_sequence,
            next_sequence,
        });
    }
    Ok(())
}

/// Score one validated candidate against every observation; `None` when no
/// observation is eligible or the score is below `threshold`. The
/// arithmetic follows the reference step by step so results agree to the
/// last bit.
fn propose(
    candidate: &ReplayPositionCost,
    observations: &[FailureReplayObservation],
    threshold: f64,
) -> Option<AdaptiveReplayPointProposal> {
    let mut eligible_weight = 0.0;
    let mut expected_saved = 0.0;
    let mut weighted_suffix_events = 0.0;
    for observation in observations {
        if candidate.next_sequence > observation.first_effect_sequence
            || !candidate
                .achievable_fidelity
                .meets(observation.minimum_fidelity)
        {
            continue;
        }
        eligible_weight += observation.weight;
        let reused_fraction = candidate.next_sequence as f64 / observation.terminal_sequence as f64;
        let saved_minutes = (observation.full_replay_minutes * reused_fraction
            - candidate.restore_minutes)
            .max(0.0);
        expected_saved += observation.weight * saved_minutes;
        // Eligibility gives next_sequence <= first_effect < terminal.
        let suffix_events = observation.terminal_sequence - candidate.next_sequence;
        weighted_suffix_events += observation.weight * suffix_events as f64;
    }
    // Weights are positive, so this is "no eligible observation".
    if eligible_weight == 0.0 {
        return None;
    }
    let score = expected_saved - candidate.capture_minutes;
    if score < threshold {
        return None;
    }
    Some(AdaptiveReplayPointProposal {
        after_event_id: candidate.after_event_id.clone(),
        next_sequence: candidate.next_sequence,
        achievable_fidelity: candidate.achievable_fidelity,
        score_minutes: score,
        expected_saved_minutes: expected_saved,
        expected_suffix_events: weighted_suffix_events / eligible_weight,
        eligible_observation_weight: eligible_weight,
        capture_minutes: candidate.capture_minutes,
        restore_minutes: candidate.restore_minutes,
    })
}

/// The reference's sort key `(-score, -eligible_weight, -next_sequence,
/// after_event_id or "")` as a comparator. Scores and weights here are
/// never NaN (inputs are finite, weights positive), so `total_cmp` orders
/// them as Python does.
pub fn rank_order(a: &AdaptiveReplayPointProposal, b: &AdaptiveReplayPointProposal) -> Ordering {
    b.score_minutes
        .total_cmp(&a.score_minutes)
        .then_with(|| {
            b.eligible_observation_weight
                .total_cmp(&a.eligible_observation_weight)
        })
        .then_with(|| b.next_sequence.cmp(&a.next_sequence))
        .then_with(|| {
            let a_id = a.after_event_id.as_deref().unwrap_or("");
            a_id.cmp(b.after_event_id.as_deref().unwrap_or(""))
        })
}

fn nonblank(field: &'static str, value: &str) -> Result<String, PlanError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(PlanError::BlankText {
            field,
            value: value.to_string(),
        });
    }
    Ok(trimmed.to_string())
}

fn sequence(field: &'static str, value: i64) -> Result<u64, PlanError> {
    u64::try_from(value).map_err(|_| PlanError::NegativeSequence { field, value })
}

fn finite(field: &'static str, value: f64) -> Result<f64, PlanError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PlanError::NotFinite { field, value })
    }
}

fn minutes(field: &'static str, value: f64) -> Result<f64, PlanError> {
    let value = finite(field, value)?;
    if value < 0.0 {
        return Err(PlanError::NegativeMinutes { field, value });
    }
    Ok(value)
}

fn fidelity(field: &'static str, name: &str) -> Result<Fidelity, PlanError> {
    name.parse()
        .map_err(|source| PlanError::UnknownFidelity { field, source })
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
