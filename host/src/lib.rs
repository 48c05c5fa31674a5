//! sandloop: a WebAssembly plugin host for exploration experiments.
//!
//! The runtimes ([`episode`], [`harness`]) are written against the small
//! traits in [`episode::adapter`]; [`sandbox`] implements those traits for
//! WebAssembly components on wasmtime, and [`cli`] wires them to the
//! `sandloop` command line. [`replay`] binds adapter state to [`trace`]
//! positions so a suffix can run again from a replay point.

#![warn(missing_docs)]

pub mod cli;
pub mod coordinator;
pub mod digest;
pub mod episode;
pub mod harness;
#[cfg(test)]
mod hostile_inputs;
pub mod replay;
pub mod sandbox;
pub mod trace;
