//! Running wizer: instrumenting a component, and turning wizer's panics
//! into errors.

use std::panic::AssertUnwindSafe;

use wasmtime_wizer::Wizer;

use super::SnapshotError;

/// Instrument the component `bytes` with wizer, returning the instrumented
/// component (the original plus the [`WIZER_INSTANCE`](super::WIZER_INSTANCE)
/// export). Use it to check whether wizer accepts a component without
/// loading it; `component` only names it in the error.
///
/// Errors: [`SnapshotError::Instrument`] with wizer's reason.
pub fn instrument(component: &str, bytes: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    catch_panic(|| {
        Wizer::new()
            .instrument_component(bytes)
            .map(|(_, instrumented)| instrumented)
            .map_err(|error| format!("{error:#}"))
    })
    .map_err(|message| SnapshotError::Instrument {
        component: component.to_string(),
        message,
    })
}

thread_local! {
    /// Set while wizer runs on this thread: its panics become errors, so
    /// the process's panic hook keeps quiet about them.
    static IN_WIZER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `body`, turning a panic inside wizer into an error message (wizer
/// panics, e.g., when an accessor call failed and it gets no memory to
/// read); the panic is not printed.
pub(super) fn catch_panic<R>(body: impl FnOnce() -> Result<R, String>) -> Result<R, String> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_WIZER.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    IN_WIZER.with(|flag| flag.set(true));
    let caught = std::panic::catch_unwind(AssertUnwindSafe(body));
    IN_WIZER.with(|flag| flag.set(false));
    caught.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("wizer panicked: {what}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_wizer_becomes_an_error() {
        let caught = catch_panic::<()>(|| panic!("no accessor for {}", "memory0"));
        assert_eq!(
            caught,
            Err("wizer panicked: no accessor for memory0".into())
        );
        assert_eq!(catch_panic(|| Ok(3)), Ok(3));
    }

    #[test]
    fn wizer_refuses_what_is_not_a_component() {
        let error = instrument("core.wasm", b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("wizer cannot instrument core.wasm for snapshots: "),
            "{error}"
        );
    }
}
