//! Public-safe trace events through the host's `trace` import.
//!
//! The host validates every payload like the reference's
//! `trace_runtime.py`: a JSON object, no forbidden keys (`handle`, `path`,
//! `file_path`, `token`, `password`, `secret`, `credential(s)`,
//! `adapter_state`, ...), no absolute paths in any string. A refused event is
//! not appended and `emit` returns the host's reason.
//!
//! ```ignore
//! use sandloop_guest::trace::{self, EventKind};
//! let id = trace::emit(EventKind::Lifecycle, serde_json::json!({"stage": "prepared"}));
//! ```
//!
//! Outside a component (native unit tests) events are kept in a thread-local
//! buffer instead; read them with `take_recorded()`.

use serde_json::Value;

pub use crate::wit::trace::EventKind;

/// One trace event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Event kind.
    pub kind: EventKind,
    /// Public payload (should be a JSON object).
    pub payload: Value,
    /// Optional action id.
    pub action_id: Option<String>,
    /// Optional causation id (the event id this one follows from).
    pub causation_id: Option<String>,
}

impl Event {
    /// An event without action or causation ids.
    pub fn new(kind: EventKind, payload: Value) -> Self {
        Event {
            kind,
            payload,
            action_id: None,
            causation_id: None,
        }
    }
    /// Builder: set the action id.
    pub fn action_id(mut self, id: impl Into<String>) -> Self {
        self.action_id = Some(id.into());
        self
    }
    /// Builder: set the causation id.
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.causation_id = Some(id.into());
        self
    }
    /// Append the event; see [`emit_event`].
    pub fn emit(self) -> Result<String, String> {
        emit_event(self)
    }
}

/// Append an event of `kind` with `payload` after the branch head. Returns
/// the event id the host assigned, or why the host refused the event.
pub fn emit(kind: EventKind, payload: Value) -> Result<String, String> {
    emit_event(Event::new(kind, payload))
}

/// Append `event`; see [`emit`].
pub fn emit_event(event: Event) -> Result<String, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let payload = serde_json::to_string(&event.payload).map_err(|err| err.to_string())?;
        crate::wit::trace::emit(&crate::wit::trace::Event {
            kind: event.kind,
            public_payload: payload,
            action_id: event.action_id,
            causation_id: event.causation_id,
        })
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        native::record(event)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::Event;
    use std::cell::RefCell;

    thread_local! {
        static RECORDED: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn record(event: Event) -> Result<String, String> {
        RECORDED.with(|events| {
            let mut events = events.borrow_mut();
            events.push(event);
            Ok(format!("native-{}", events.len()))
        })
    }

    pub(super) fn take() -> Vec<Event> {
        RECORDED.with(|events| std::mem::take(&mut *events.borrow_mut()))
    }
}

/// Native targets only: the events emitted on this thread since the last
/// call (for unit tests of adapter logic).
#[cfg(not(target_arch = "wasm32"))]
pub fn take_recorded() -> Vec<Event> {
    native::take()
}
