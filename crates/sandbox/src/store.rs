//! The one place a `Store` for an instance is made and given a call's
//! budget, so that every instance — an adapter lane, a child, a snapshot
//! parent, a workflow step — starts under the same limits.
//!
//! Instantiation counts as a call: the component's start function
//! (`_initialize`, static constructors) runs under the same epoch deadline,
//! WASI clock deadline, fuel and memory limit as any export, so a start
//! function that spins or sleeps is stopped as `deadline`.

use std::time::Instant;

use wasmtime::Store;

use super::config::SandboxConfig;
use super::engine::SandboxEngine;
use super::host_state::HostState;

/// wasmtime's own default for [`Store::set_hostcall_fuel`]: roughly the
/// bytes one guest-to-host transfer may carry (128 MiB).
pub const DEFAULT_HOSTCALL_FUEL: usize = 128 << 20;

/// Room above `--max-output` for the rest of a returned value (the result
/// wrapper, other fields), bytes.
const HOSTCALL_FUEL_HEADROOM: usize = 1 << 20;

/// The host-call copy budget for `config`: wasmtime's default, raised to
/// cover `--max-output` (plus `HOSTCALL_FUEL_HEADROOM`, 1 MiB) when that is
/// larger, so an output the operator allowed is never cut off by the copy
/// budget before the host can measure it.
pub fn hostcall_fuel(config: &SandboxConfig) -> usize {
    DEFAULT_HOSTCALL_FUEL.max(
        config
            .limits
            .max_output_bytes
            .saturating_add(HOSTCALL_FUEL_HEADROOM),
    )
}

/// A store holding `state`, with its memory limiter installed, an epoch
/// deadline that traps, the host-call budget of [`hostcall_fuel`], and one
/// call's budget already given ([`arm_call`]), so that instantiating in it
/// is bounded like a call.
///
/// Errors: only when fuel cannot be set (fuel metering off in the engine
/// while the config asks for it).
pub fn new_store(
    engine: &SandboxEngine,
    config: &SandboxConfig,
    state: HostState,
) -> wasmtime::Result<Store<HostState>> {
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.epoch_deadline_trap();
    store.set_hostcall_fuel(hostcall_fuel(config));
    arm_call(&mut store, config)?;
    Ok(store)
}

/// Give `store` one call's budget: an epoch deadline of `--call-timeout`,
/// the same deadline for WASI clock waits ([`HostState::call_deadline`]),
/// `--fuel` when metered, and a clean slate for memory-growth denials.
///
/// Errors: only when fuel cannot be set.
pub fn arm_call(store: &mut Store<HostState>, config: &SandboxConfig) -> wasmtime::Result<()> {
    let timeout = config.limits.call_timeout;
    store.set_epoch_deadline(SandboxEngine::deadline_ticks(timeout.as_secs_f64()));
    let state = store.data_mut();
    state.call_deadline = Some(Instant::now() + timeout);
    state.limiter.take_denial();
    if let Some(fuel) = config.limits.fuel {
        store.set_fuel(fuel)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostcall_budget_covers_max_output() {
        let mut config = SandboxConfig::default();
        assert_eq!(hostcall_fuel(&config), DEFAULT_HOSTCALL_FUEL);
        config.limits.max_output_bytes = 1 << 30;
        assert_eq!(hostcall_fuel(&config), (1 << 30) + (1 << 20));
        config.limits.max_output_bytes = usize::MAX;
        assert_eq!(hostcall_fuel(&config), usize::MAX);
    }
}
