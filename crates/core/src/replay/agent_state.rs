//! The host side of a replay point: the agent state bound to the trace
//! cursor. Mirrors the reference's `AgentStateStore` protocol; the
//! in-memory store keys state by the agent cursor it was captured at.

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::point::{AgentCursor, TraceCursor};
use crate::trace::TraceEvent;

/// Where the host keeps the agent state of each replay point (reference
/// `AgentStateStore`). Errors are plain messages; the registry reports them
/// as `agent_state` failures of the stage that called.
pub trait AgentStateStore {
    /// Opaque key of one captured state.
    type Key: Clone;
    /// Capture the agent state at `cursor`.
    fn capture_agent_state(&mut self, cursor: &TraceCursor) -> Result<Self::Key, String>;
    /// Make the state under `key` current again.
    fn restore_agent_state(&mut self, key: &Self::Key) -> Result<(), String>;
    /// Forget the state under `key`.
    fn release_agent_state(&mut self, key: &Self::Key) -> Result<(), String>;
    /// A child's own copy of the state under `key`, under a new key
    /// (reference `IsolatedAgentStateStore.fork_agent_state`).
    fn fork_agent_state(&mut self, key: &Self::Key, child_id: &str) -> Result<Self::Key, String>;
}

/// An in-memory [`AgentStateStore`]: each capture stores the cursor's
/// agent position under a fresh key; restore makes it the current one.
/// A fork or a restore shares the captured position instead of copying it.
#[derive(Debug, Default)]
pub struct MemoryAgentStateStore {
    next_key: u64,
    states: HashMap<u64, Arc<AgentCursor>>,
    current: Option<Arc<AgentCursor>>,
}

impl MemoryAgentStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// States captured and not yet released.
    pub fn live(&self) -> usize {
        self.states.len()
    }

    /// The agent position last restored, if any.
    pub fn current(&self) -> Option<&AgentCursor> {
        self.current.as_deref()
    }
}

impl AgentStateStore for MemoryAgentStateStore {
    type Key = u64;

    fn capture_agent_state(&mut self, cursor: &TraceCursor) -> Result<u64, String> {
        self.next_key += 1;
        self.states
            .insert(self.next_key, Arc::new(cursor.agent_cursor.clone()));
        Ok(self.next_key)
    }

    fn restore_agent_state(&mut self, key: &u64) -> Result<(), String> {
        let state = self
            .states
            .get(key)
            .ok_or_else(|| format!("no agent state under key {key}"))?;
        self.current = Some(Arc::clone(state));
        Ok(())
    }

    fn release_agent_state(&mut self, key: &u64) -> Result<(), String> {
        self.states
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| format!("no agent state under key {key}"))
    }

    fn fork_agent_state(&mut self, key: &u64, _child_id: &str) -> Result<u64, String> {
        let state = self
            .states
            .get(key)
            .cloned()
            .ok_or_else(|| format!("no agent state under key {key}"))?;
        self.next_key += 1;
        self.states.insert(self.next_key, state);
        Ok(self.next_key)
    }
}

/// The agent cursor of a branch: `history_index` is the number of events,
/// `history_digest` the sha256 of their JSON lines, `context_digest` the
/// sha256 of `context` (e.g. the arm and episode group the history was
/// produced in).
pub fn agent_cursor(events: &[TraceEvent], context: &str) -> AgentCursor {
    let mut history = Sha256::new();
    for event in events {
        if let Ok(line) = serde_json::to_vec(event) {
            history.update(&line);
        }
        history.update(b"\n");
    }
    AgentCursor {
        history_index: events.len() as u64,
        history_digest: hex::encode(history.finalize()),
        context_digest: crate::digest::sha256_hex(context.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceEventKind, TraceLog};

    #[test]
    fn the_memory_store_keys_state_by_capture() {
        let mut log = TraceLog::new("t", "main").unwrap();
        log.emit(TraceEventKind::Lifecycle, serde_json::json!({}), None, None)
            .unwrap();
        let cursor = TraceCursor {
            trace_id: "t".into(),
            branch_id: "main".into(),
            after_event_id: log.head().map(str::to_string),
            next_sequence: 1,
            agent_cursor: agent_cursor(log.events(), "ctx"),
        };
        let mut store = MemoryAgentStateStore::new();
        let key = store.capture_agent_state(&cursor).unwrap();
        assert_eq!(store.live(), 1);
        store.restore_agent_state(&key).unwrap();
        assert_eq!(store.current().unwrap().history_index, 1);
        store.release_agent_state(&key).unwrap();
        assert!(
            store.release_agent_state(&key).is_err(),
            "released once only"
        );
        assert!(store.restore_agent_state(&key).is_err());
    }

    #[test]
    fn cursor_digests_follow_the_history() {
        let mut log = TraceLog::new("t", "main").unwrap();
        let empty = agent_cursor(log.events(), "ctx");
        log.emit(
            TraceEventKind::Lifecycle,
            serde_json::json!({"a": 1}),
            None,
            None,
        )
        .unwrap();
        let one = agent_cursor(log.events(), "ctx");
        assert_eq!(empty.history_index, 0);
        assert_eq!(one.history_index, 1);
        assert_ne!(empty.history_digest, one.history_digest);
        assert_eq!(empty.context_digest, one.context_digest);
        assert_ne!(
            agent_cursor(log.events(), "other").context_digest,
            one.context_digest
        );
    }
}
