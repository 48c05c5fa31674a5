//! The wasmtime sandbox: engine and limits, WASI capabilities, the
//! compiled-component cache, protocol detection, and [`WasmAdapter`], the
//! implementation of the runtimes' adapter traits for components.
//!
//! Every instance has its own `Store`, linear memory, WASI context (no
//! preopened directories, environment or sockets unless granted), memory
//! limit, per-call epoch deadline and optional fuel. A call that traps,
//! times out or exhausts a limit poisons only its own instance, which is
//! dropped; the next call gets a fresh one.

// `unsafe` only where wasmtime asks for it, each allowed at its one site
// with the reason: deserialising a compiled component (`cache`,
// `component::twin`).
#![deny(unsafe_code)]

pub mod adapter;
pub mod bindings;
pub mod cache;
mod call_log;
mod classify;
pub mod component;
pub mod config;
mod crash;
mod engine;
pub mod finished_run;
mod function_cache;
mod guarded_open;
mod host_state;
mod http_connect;
pub mod http_grant;
mod open_files;
mod output;
pub mod snapshot;
mod store;
pub mod workflow;

/// Directory grants are the core's ([`sandloop_core::dir_grant`]): the loop
/// coordinator resolves them too, without a sandbox.
pub use sandloop_core::dir_grant;

pub use adapter::{BindingHandle, CallObserver, CallReport, ReplayOptions, WasmAdapter};
pub use call_log::{CallLines, CallLog};
pub use component::{ComponentInfo, LoadError, LoadedAdapter, load};
pub use config::{DirGrant, SandboxConfig, SandboxLimits};
pub use engine::SandboxEngine;
