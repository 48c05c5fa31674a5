//! Append-only, addressable execution traces with public-safe payloads.
//! Mirrors `trace_runtime.py` in the reference.

pub(crate) mod log;
pub(crate) mod payload;

pub use log::{TraceEvent, TraceEventKind, TraceLog};
pub use payload::{
    FORBIDDEN_PUBLIC_KEYS, PayloadError, validate_public_object, validate_public_payload,
};
