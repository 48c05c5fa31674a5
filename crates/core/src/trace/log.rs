//! One trace branch: an append-only list of events with contiguous
//! sequences, unique ids and each event's parent the previous head. Mirrors
//! `TraceEvent` and `TraceLog` in `trace_runtime.py`.

use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;

use super::payload::validate_public_payload;

/// The kind of a trace event (reference `TraceEventKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceEventKind {
    /// What the agent saw or decided from.
    AgentContext,
    /// An action about to be taken.
    ActionIntent,
    /// What an action did.
    ActionOutcome,
    /// An observation of the environment.
    EnvironmentObservation,
    /// A check and its verdict.
    Validation,
    /// Setup, teardown and other lifecycle marks.
    Lifecycle,
}

/// One addressable event; serialises to the reference's `to_record` shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    /// Unique within the branch; host-assigned `{trace}/{branch}/{sequence}`.
    pub event_id: String,
    /// The trace (an episode group id, or an item id).
    pub trace_id: String,
    /// The branch within the trace.
    pub branch_id: String,
    /// 0-based position in the branch.
    pub sequence: u64,
    /// The branch head when the event was appended; `None` for the first.
    pub parent_event_id: Option<String>,
    /// What kind of event.
    pub kind: TraceEventKind,
    /// Adapter-chosen id of the action the event belongs to.
    pub action_id: Option<String>,
    /// Adapter-chosen id of what caused the event.
    pub causation_id: Option<String>,
    /// Replay point the event is bound to, if any.
    pub replay_point_id: Option<String>,
    /// A public-safe JSON object (see [`validate_public_payload`]).
    pub public_payload: Value,
}

/// Why an event was not appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the messages say what each variant means
pub enum AppendError {
    #[error("trace event does not belong to this trace branch")]
    WrongBranch,
    #[error("trace event_id is duplicated: {0:?}")]
    DuplicateId(String),
    #[error("trace sequence must be contiguous: expected {expected}, got {got}")]
    Sequence { expected: u64, got: u64 },
    #[error(
        "trace parent_event_id must name the current branch head: expected {expected:?}, got {got:?}"
    )]
    Parent {
        expected: Option<String>,
        got: Option<String>,
    },
    #[error("{0} must be non-empty")]
    Empty(&'static str),
    #[error(transparent)]
    Payload(#[from] super::payload::PayloadError),
}

/// An append-only trace branch (reference `TraceLog`). Not internally
/// locked: the owner (one sandbox instance) serialises access.
#[derive(Debug)]
pub struct TraceLog {
    trace_id: String,
    branch_id: String,
    events: Vec<TraceEvent>,
    ids: HashSet<String>,
    /// Sequence of the first event (0, or where a forked branch starts).
    base_sequence: u64,
    /// Parent of the first event (`None`, or the event a fork starts after).
    base_parent: Option<String>,
}

impl TraceLog {
    /// An empty branch. Errors when either id is blank.
    pub fn new(trace_id: &str, branch_id: &str) -> Result<Self, AppendError> {
        let trace_id = trace_id.trim();
        let branch_id = branch_id.trim();
        if trace_id.is_empty() {
            return Err(AppendError::Empty("trace_id"));
        }
        if branch_id.is_empty() {
            return Err(AppendError::Empty("branch_id"));
        }
        Ok(Self {
            trace_id: trace_id.to_string(),
            branch_id: branch_id.to_string(),
            events: Vec::new(),
            ids: HashSet::new(),
            base_sequence: 0,
            base_parent: None,
        })
    }

    /// A branch forked from another branch of the same trace: its first
    /// event gets sequence `next_sequence` and names `after_event_id` as its
    /// parent, so the fork continues the history it was forked from (used
    /// for a suffix replayed from a replay point). Errors when an id is
    /// blank.
    pub fn fork(
        trace_id: &str,
        branch_id: &str,
        after_event_id: Option<&str>,
        next_sequence: u64,
    ) -> Result<Self, AppendError> {
        let mut log = Self::new(trace_id, branch_id)?;
        log.base_sequence = next_sequence;
        log.base_parent = after_event_id.map(str::to_string);
        Ok(log)
    }

    /// Sequence the next event will get.
    pub fn next_sequence(&self) -> u64 {
        self.base_sequence + self.events.len() as u64
    }

    /// The branch's events, oldest first.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// The trace id.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The branch id.
    pub fn branch_id(&self) -> &str {
        &self.branch_id
    }

    /// The id of the branch head, if any.
    pub fn head(&self) -> Option<&str> {
        match self.events.last() {
            Some(event) => Some(event.event_id.as_str()),
            None => self.base_parent.as_deref(),
        }
    }

    /// Append `event` after checking every rule of the reference's
    /// `_validate_append_unlocked` and the public payload.
    pub fn append(&mut self, event: TraceEvent) -> Result<(), AppendError> {
        if event.event_id.trim().is_empty() {
            return Err(AppendError::Empty("event_id"));
        }
        if event.trace_id != self.trace_id || event.branch_id != self.branch_id {
            return Err(AppendError::WrongBranch);
        }
        if self.ids.contains(&event.event_id) {
            return Err(AppendError::DuplicateId(event.event_id));
        }
        let expected = self.next_sequence();
        if event.sequence != expected {
            return Err(AppendError::Sequence {
                expected,
                got: event.sequence,
            });
        }
        let head = self.head().map(str::to_string);
        if event.parent_event_id != head {
            return Err(AppendError::Parent {
                expected: head,
                got: event.parent_event_id,
            });
        }
        validate_public_payload(&event.public_payload)?;
        self.ids.insert(event.event_id.clone());
        self.events.push(event);
        Ok(())
    }

    /// Build and append the next event at the head with a host-assigned id
    /// `{trace_id}/{branch_id}/{sequence}`; returns that id.
    pub fn emit(
        &mut self,
        kind: TraceEventKind,
        public_payload: Value,
        action_id: Option<String>,
        causation_id: Option<String>,
    ) -> Result<String, AppendError> {
        let sequence = self.next_sequence();
        let event_id = format!("{}/{}/{}", self.trace_id, self.branch_id, sequence);
        self.append(TraceEvent {
            event_id: event_id.clone(),
            trace_id: self.trace_id.clone(),
            branch_id: self.branch_id.clone(),
            sequence,
            parent_event_id: self.head().map(str::to_string),
            kind,
            action_id: non_empty(action_id),
            causation_id: non_empty(causation_id),
            replay_point_id: None,
            public_payload,
        })?;
        Ok(event_id)
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|text| !text.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(log: &TraceLog, id: &str, sequence: u64, parent: Option<&str>) -> TraceEvent {
        TraceEvent {
            event_id: id.into(),
            trace_id: log.trace_id().into(),
            branch_id: log.branch_id().into(),
            sequence,
            parent_event_id: parent.map(str::to_string),
            kind: TraceEventKind::Lifecycle,
            action_id: None,
            causation_id: None,
            replay_point_id: None,
            public_payload: json!({}),
        }
    }

    #[test]
    fn emit_chains_parents_and_sequences() {
        let mut log = TraceLog::new("t", "main").unwrap();
        let first = log
            .emit(TraceEventKind::Lifecycle, json!({"a": 1}), None, None)
            .unwrap();
        let second = log
            .emit(
                TraceEventKind::ActionIntent,
                json!({}),
                Some("act".into()),
                Some(" ".into()),
            )
            .unwrap();
        assert_eq!(first, "t/main/0");
        assert_eq!(
            log.events()[1].parent_event_id.as_deref(),
            Some(first.as_str())
        );
        assert_eq!(log.events()[1].sequence, 1);
        assert_eq!(log.events()[1].causation_id, None);
        assert_eq!(log.head(), Some(second.as_str()));
    }

    #[test]
    fn append_enforces_branch_rules() {
        let mut log = TraceLog::new("t", "main").unwrap();
        log.append(event(&log, "e0", 0, None)).unwrap();
        assert_eq!(
            log.append(event(&log, "e0", 1, Some("e0"))),
            Err(AppendError::DuplicateId("e0".into()))
        );
        assert_eq!(
            log.append(event(&log, "e2", 2, Some("e0"))),
            Err(AppendError::Sequence {
                expected: 1,
                got: 2
            })
        );
        assert!(matches!(
            log.append(event(&log, "e1", 1, None)),
            Err(AppendError::Parent { .. })
        ));
        let mut foreign = event(&log, "e1", 1, Some("e0"));
        foreign.branch_id = "other".into();
        assert_eq!(log.append(foreign), Err(AppendError::WrongBranch));
        let mut secret = event(&log, "e1", 1, Some("e0"));
        secret.public_payload = json!({"password": "x"});
        assert!(matches!(log.append(secret), Err(AppendError::Payload(_))));
        assert_eq!(log.events().len(), 1, "refused events leave nothing behind");
        log.append(event(&log, "e1", 1, Some("e0"))).unwrap();
    }

    #[test]
    fn a_fork_continues_the_history_it_was_forked_from() {
        let mut fork = TraceLog::fork("t", "replay-1", Some("t/main/4"), 5).unwrap();
        assert_eq!(fork.head(), Some("t/main/4"));
        let id = fork
            .emit(TraceEventKind::ActionIntent, json!({}), None, None)
            .unwrap();
        assert_eq!(id, "t/replay-1/5");
        assert_eq!(
            fork.events()[0].parent_event_id.as_deref(),
            Some("t/main/4")
        );
        assert_eq!(fork.next_sequence(), 6);
        assert!(matches!(
            fork.append(event(&fork, "x", 5, Some(&id))),
            Err(AppendError::Sequence {
                expected: 6,
                got: 5
            })
        ));
    }

    #[test]
    fn blank_ids_are_refused() {
        assert_eq!(
            TraceLog::new(" ", "b").unwrap_err(),
            AppendError::Empty("trace_id")
        );
        assert_eq!(
            TraceLog::new("t", "").unwrap_err(),
            AppendError::Empty("branch_id")
        );
    }
}
