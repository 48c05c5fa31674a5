//! The data of one instance's `Store`: its WASI context (no ambient
//! authority), resource table, memory limiter, output capture and the trace
//! branch the `trace` import appends to.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::sandloop::adapter::{log, trace as trace_wit, types};
use super::config::SandboxConfig;
use super::http_grant::HttpGrant;
use super::open_files::{OpenFiles, resource_table_capacity};
use super::output::Capture;
use sandloop_core::dir_grant::descriptor_path;
use sandloop_core::trace::{TraceEventKind, TraceLog};

/// Error raised inside the guest when it asks for more linear memory than
/// `--max-memory` allows; classified as `memory_limit`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("linear memory limit of {limit_mib} MiB exceeded (asked for {desired_mib} MiB)")]
pub struct MemoryLimitExceeded {
    /// The limit, MiB.
    pub limit_mib: u64,
    /// What the guest asked for, MiB (rounded up).
    pub desired_mib: u64,
}

/// Per-instance memory and table limits.
///
/// A linear memory may not grow past `--max-memory`. A growth past it is
/// *denied*, not trapped: `memory.grow` returns -1 to the guest, which may
/// handle the failed allocation and go on (`Vec::try_reserve`, Python's
/// `MemoryError`). The denial is remembered for the current call, so that a
/// guest which then traps (Rust's allocation-failure abort) is reported as
/// `memory_limit` rather than as a bare trap. A memory whose *initial* size
/// is above the limit fails instantiation with [`MemoryLimitExceeded`].
#[derive(Debug)]
pub struct Limiter {
    memory_bytes: usize,
    /// The largest size, bytes, any linear memory of the instance has been
    /// granted (its initial size not counted until it first grows).
    largest: usize,
    /// The first growth denied since [`Limiter::take_denial`] was last
    /// called (once per call).
    denied: Option<MemoryLimitExceeded>,
}

impl Limiter {
    /// A limiter allowing each linear memory `memory_bytes` bytes.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            memory_bytes,
            largest: 0,
            denied: None,
        }
    }

    /// The per-memory limit, bytes (`--max-memory`).
    pub fn limit_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// The largest size, bytes, a linear memory of the instance has grown
    /// to; 0 while none has grown.
    pub fn largest_bytes(&self) -> usize {
        self.largest
    }

    /// The first growth denied since the last call of this method, if any
    /// (the host takes it at the start and end of every call).
    pub fn take_denial(&mut self) -> Option<MemoryLimitExceeded> {
        self.denied.take()
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            let exceeded = MemoryLimitExceeded {
                limit_mib: (self.memory_bytes >> 20) as u64,
                desired_mib: desired.div_ceil(1 << 20) as u64,
            };
            if current == 0 {
                // A memory created above the limit: the instance cannot start.
                return Err(wasmtime::Error::new(exceeded));
            }
            self.denied.get_or_insert(exceeded);
            return Ok(false);
        }
        self.largest = self.largest.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The signals of the workflow step running in a store: where they are
/// written (none outside a step), and how many child sessions it asked for.
#[derive(Default)]
pub struct SignalState {
    pub(crate) target: Option<sandloop_core::step::SignalTarget>,
    pub(crate) child_requests: u32,
}

/// Everything a `Store` of an adapter instance holds.
pub struct HostState {
    wasi: WasiCtx,
    /// WASI resources of the instance (descriptors, streams, pollables),
    /// capped by [`super::open_files::resource_table_capacity`].
    pub(super) table: ResourceTable,
    /// Memory limiter installed with `Store::limiter`.
    pub limiter: Limiter,
    /// Captured stdout, stderr and log lines of the current call.
    pub capture: Capture,
    /// The trace branch of the current call, if any.
    pub trace: Option<TraceLog>,
    /// Trace events refused during the current call.
    pub trace_refusals: u32,
    /// Trace events accepted during the current call.
    pub trace_emitted: u32,
    /// Where a workflow step's signals go (workflow plugins only).
    pub signals: SignalState,
    /// Which hosts outgoing HTTP may reach (workflow plugins only; adapters
    /// are not linked with `wasi:http`). Default: none.
    pub http: HttpGrant,
    /// When the current call's deadline passes: a WASI sleep or clock wait
    /// that would end later is stopped (see [`link_deadline_clocks`]).
    /// `None` until the first call.
    pub call_deadline: Option<std::time::Instant>,
    /// Descriptors the guest opened through its grants, bounded by
    /// `--max-open-files` ([`super::guarded_open`]).
    pub open_files: OpenFiles,
    http_ctx: WasiHttpCtx,
}

/// Most trace events one call may emit; later ones are refused.
pub const MAX_TRACE_EVENTS_PER_CALL: u32 = 1024;
/// Largest public payload of one trace event, bytes of JSON text.
pub const MAX_TRACE_PAYLOAD_BYTES: usize = 64 << 10;

impl HostState {
    /// A fresh state for one instance under `config`. Errors when a granted
    /// directory cannot be opened.
    pub fn new(config: &SandboxConfig) -> wasmtime::Result<Self> {
        let capture = Capture::new(config.limits.max_guest_output_bytes);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(capture.stream("stdout"))
            .stderr(capture.stream("stderr"))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for grant in &config.dirs {
            let perms = if grant.read_only {
                FsPerms::ReadOnly
            } else {
                FsPerms::ReadWrite
            };
            // Resolved again now, beneath the root opened with the grant,
            // and handed over by descriptor: never by a path the guest may
            // have swapped for a symlink.
            let dir = grant.open().map_err(|error| {
                wasmtime::Error::msg(format!(
                    "the grant of {} at {}: {error}",
                    grant.host.display(),
                    grant.guest
                ))
            })?;
            wasi.preopened_dir(descriptor_path(&dir), &grant.guest, perms)?;
        }
        for name in &config.env {
            if let Ok(value) = std::env::var(name) {
                wasi.env(name, value);
            }
        }
        let mut table = ResourceTable::new();
        table.set_max_capacity(resource_table_capacity(config.limits.max_open_files));
        Ok(Self {
            wasi: wasi.build(),
            table,
            open_files: OpenFiles::new(config.limits.max_open_files),
            limiter: Limiter::new((config.limits.max_memory_mib as usize).saturating_mul(1 << 20)),
            capture,
            trace: None,
            trace_refusals: 0,
            trace_emitted: 0,
            signals: Default::default(),
            http: HttpGrant::default(),
            http_ctx: WasiHttpCtx::new(),
            call_deadline: None,
        })
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http_ctx,
            table: &mut self.table,
            hooks: &mut self.http,
        }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => "trace",
            log::Level::Debug => "debug",
            log::Level::Info => "info",
            log::Level::Warn => "warn",
            log::Level::Error => "error",
        };
        self.capture.push("log", Some(level), message.as_bytes());
    }
}

impl trace_wit::Host for HostState {
    fn emit(&mut self, event: trace_wit::Event) -> Result<String, String> {
        let result = self.append_trace(event);
        match result {
            Ok(_) => self.trace_emitted += 1,
            Err(_) => self.trace_refusals += 1,
        }
        result
    }
}

impl HostState {
    fn append_trace(&mut self, event: trace_wit::Event) -> Result<String, String> {
        if self.trace_emitted >= MAX_TRACE_EVENTS_PER_CALL {
            return Err(format!(
                "a call may emit at most {MAX_TRACE_EVENTS_PER_CALL} trace events"
            ));
        }
        if event.public_payload.len() > MAX_TRACE_PAYLOAD_BYTES {
            return Err(format!(
                "public_payload is {} bytes, over the limit of {MAX_TRACE_PAYLOAD_BYTES}",
                event.public_payload.len()
            ));
        }
        let Some(log) = self.trace.as_mut() else {
            return Err("no trace is open for this call".to_string());
        };
        let payload: serde_json::Value = serde_json::from_str(&event.public_payload)
            .map_err(|error| format!("public_payload is not JSON: {error}"))?;
        let kind = match event.kind {
            trace_wit::EventKind::AgentContext => TraceEventKind::AgentContext,
            trace_wit::EventKind::ActionIntent => TraceEventKind::ActionIntent,
            trace_wit::EventKind::ActionOutcome => TraceEventKind::ActionOutcome,
            trace_wit::EventKind::EnvironmentObservation => TraceEventKind::EnvironmentObservation,
            trace_wit::EventKind::Validation => TraceEventKind::Validation,
            trace_wit::EventKind::Lifecycle => TraceEventKind::Lifecycle,
        };
        log.emit(kind, payload, event.action_id, event.causation_id)
            .map_err(|error| error.to_string())
    }
}

/// A WASI clock wait refused because it would end after the call's
/// deadline (see [`link_deadline_clocks`]); classified as `deadline`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the guest asked to wait {:.3} s with {:.3} s left before the call's deadline; \
     a wait past the deadline is stopped when it is asked for",
    asked.as_secs_f64(),
    left.as_secs_f64()
)]
pub struct WaitPastDeadline {
    /// How long the guest asked to wait.
    pub asked: std::time::Duration,
    /// What was left of the call's deadline then.
    pub left: std::time::Duration,
}

/// The WASI clock import whose waits [`link_deadline_clocks`] bounds.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replace `subscribe-duration` and `subscribe-instant` of the monotonic
/// clock in `linker` (after WASI p2 was added) with versions that refuse
/// to wait past the current call's deadline.
///
/// A guest that sleeps or waits on a clock blocks inside the host, where
/// the epoch deadline cannot interrupt it. A wait that would end after the
/// deadline is therefore stopped when it is asked for, as the deadline
/// would stop it ([`WaitPastDeadline`], classified `deadline`); shorter
/// waits run as usual. Other waits are bounded elsewhere: outgoing HTTP by the
/// grant's timeouts; sockets and stdin are not granted.
pub fn link_deadline_clocks(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::clocks::WasiClocksView;
    use wasmtime_wasi::p2::DynPollable;
    use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host;

    fn within_deadline(state: &HostState, nanos: u64) -> wasmtime::Result<()> {
        let Some(deadline) = state.call_deadline else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if u128::from(nanos) > left.as_nanos() {
            return Err(wasmtime::Error::new(WaitPastDeadline {
                asked: std::time::Duration::from_nanos(nanos),
                left,
            }));
        }
        Ok(())
    }
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: wasmtime::StoreContextMut<'_, HostState>,
         (nanos,): (u64,)|
         -> wasmtime::Result<(Resource<DynPollable>,)> {
            within_deadline(store.data(), nanos)?;
            Ok((store.data_mut().clocks().subscribe_duration(nanos)?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: wasmtime::StoreContextMut<'_, HostState>,
         (when,): (u64,)|
         -> wasmtime::Result<(Resource<DynPollable>,)> {
            let now = store.data_mut().clocks().now()?;
            within_deadline(store.data(), when.saturating_sub(now))?;
            Ok((store.data_mut().clocks().subscribe_instant(when)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
