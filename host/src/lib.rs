//! sandloop: a WebAssembly plugin host for exploration experiments.
//!
//! This crate is the `sandloop` command line ([`cli`]): it parses, calls the
//! host crates and prints. The rules live below it:
//!
//! - [`sandloop_contract`]: the protocol types and names shared with guests;
//! - [`sandloop_core`] ([`episode`], [`harness`], [`replay`], [`trace`],
//!   [`report`]): the runtimes, written against small adapter traits, with no
//!   sandbox, and the run report's figures;
//! - [`sandloop_sandbox`] ([`sandbox`]): wasmtime, and the components'
//!   implementation of the core's traits;
//! - [`sandloop_loop`] ([`coordinator`]): the loop coordinator;
//! - [`sandloop_distributed`] ([`distributed`]): runs spread over
//!   `sandloop worker` processes through NATS JetStream.
//!
//! `ARCHITECTURE.md` at the repository's root draws the map.

// `unsafe` only for mimalloc's C option setters (`allocator`), allowed
// there with the reason.
#![deny(unsafe_code)]

pub mod allocator;
pub mod cli;
pub mod launch;
pub mod scaffold;

#[cfg(test)]
mod cli_docs_check;
#[cfg(test)]
mod code_map_check;
#[cfg(test)]
mod docs_check;
#[cfg(test)]
mod import_loop_check;

pub use sandloop_core::{
    atomic, digest, dir_grant, episode, finished_run, harness, replay, report, step, trace,
};
pub use sandloop_distributed as distributed;
pub use sandloop_loop as coordinator;
pub use sandloop_sandbox as sandbox;
