//! Turning a failed call into an [`AdapterError`] whose `type` says what
//! happened: deadline, memory limit, fuel, stack overflow, other trap.

use wasmtime::Trap;

use super::host_state::MemoryLimitExceeded;
use crate::episode::adapter::{AdapterError, ErrorType};

/// Classify a wasmtime call error. Every such error leaves the instance
/// unusable; the caller drops it.
pub fn classify(error: &wasmtime::Error, call_timeout_secs: f64) -> AdapterError {
    if let Some(limit) = error.downcast_ref::<MemoryLimitExceeded>() {
        return AdapterError::new(ErrorType::MemoryLimit, limit.to_string());
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match *trap {
            Trap::Interrupt => AdapterError::new(
                ErrorType::Deadline,
                format!("call exceeded its deadline of {call_timeout_secs} s"),
            ),
            Trap::OutOfFuel => AdapterError::new(ErrorType::FuelExhausted, "call ran out of fuel"),
            Trap::StackOverflow => {
                AdapterError::new(ErrorType::StackOverflow, "guest call stack exhausted")
            }
            other => AdapterError::new(ErrorType::Trap, other.to_string()),
        };
    }
    for cause in error.chain() {
        if let Some(limit) = cause.downcast_ref::<MemoryLimitExceeded>() {
            return AdapterError::new(ErrorType::MemoryLimit, limit.to_string());
        }
    }
    AdapterError::new(ErrorType::Trap, first_line(&format!("{error:#}")))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
