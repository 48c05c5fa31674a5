//! Turning a failed call into an [`AdapterError`] whose `type` says what
//! happened: deadline, memory limit, fuel, stack overflow, other trap.

use wasmtime::Trap;

use super::host_state::{HostState, MemoryLimitExceeded, WaitPastDeadline};
use sandloop_core::episode::adapter::{AdapterError, ErrorType};

/// Classify a wasmtime call error. Every such error leaves the instance
/// unusable; the caller drops it.
pub fn classify(error: &wasmtime::Error, call_timeout_secs: f64) -> AdapterError {
    if let Some(limit) = error.downcast_ref::<MemoryLimitExceeded>() {
        return AdapterError::new(ErrorType::MemoryLimit, limit.to_string());
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return AdapterError::new(
            ErrorType::Trap,
            format!(
                "the guest exited with status {} (std::process::exit, sys.exit) instead of returning",
                exit.0
            ),
        );
    }
    if let Some(wait) = error.downcast_ref::<WaitPastDeadline>() {
        return AdapterError::new(
            ErrorType::Deadline,
            format!("call stopped before its deadline of {call_timeout_secs} s: {wait}"),
        );
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

/// Classify a failed call after which the memory limiter reports `denial`,
/// a growth past `--max-memory` it denied during the call: a guest that
/// then trapped (Rust aborts when an allocation fails) is reported as
/// `memory_limit`, with the trap kept in the message.
pub fn classify_after(
    error: &wasmtime::Error,
    denial: Option<MemoryLimitExceeded>,
    call_timeout_secs: f64,
) -> AdapterError {
    let classified = classify(error, call_timeout_secs);
    match denial {
        Some(denial) if classified.error_type == ErrorType::Trap => AdapterError::new(
            ErrorType::MemoryLimit,
            format!(
                "{denial}; the guest trapped after its memory growth was denied: {}",
                classified.message
            ),
        ),
        _ => classified,
    }
}

/// [`classify_after`] with the denial taken from `store`'s limiter.
pub fn classify_call(
    error: &wasmtime::Error,
    store: &mut wasmtime::Store<HostState>,
    call_timeout_secs: f64,
) -> AdapterError {
    let denial = store.data_mut().limiter.take_denial();
    classify_after(error, denial, call_timeout_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_after_a_denied_growth_is_a_memory_limit() {
        let denial = MemoryLimitExceeded {
            limit_mib: 64,
            desired_mib: 320,
        };
        let trap = wasmtime::Error::new(Trap::UnreachableCodeReached);
        let classified = classify_after(&trap, Some(denial.clone()), 1.0);
        assert_eq!(classified.error_type, ErrorType::MemoryLimit);
        assert!(
            classified
                .message
                .starts_with("linear memory limit of 64 MiB exceeded (asked for 320 MiB)"),
            "{}",
            classified.message
        );
        assert!(
            classified.message.contains("unreachable"),
            "{}",
            classified.message
        );
        assert_eq!(classify_after(&trap, None, 1.0).error_type, ErrorType::Trap);
        let exited = classify(&wasmtime::Error::new(wasmtime_wasi::I32Exit(3)), 1.0);
        assert_eq!(exited.error_type, ErrorType::Trap);
        assert!(
            exited.message.starts_with("the guest exited with status 3"),
            "{}",
            exited.message
        );
        let deadline = wasmtime::Error::new(Trap::Interrupt);
        assert_eq!(
            classify_after(&deadline, Some(denial), 1.0).error_type,
            ErrorType::Deadline,
            "a deadline stays a deadline"
        );
    }
}
