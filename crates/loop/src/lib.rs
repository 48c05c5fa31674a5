//! The loop coordinator: a long-running loop that picks the next workflow
//! plugin to run, records what it did and stops on a goal, a signal or a
//! turn limit. Ported from the reference `loopy_loop` package.
//!
//! - [`models`]: the records kept on disk and exchanged with workers and
//!   plugins (loop state, history, tasks, signals), with their JSON keys.
//! - [`config`]: `sandloop-loop.toml` and the workflow sets under
//!   `.sandloop/workflow_sets/`, with a preflight that reports every problem
//!   at once.
//! - [`events`]: a session's event log (late reports, refused child
//!   requests).
//! - `scheduler`: which workflow runs next.
//! - [`sessions`]: the session directories and the files in them.
//! - [`state_store`]: one state file per session, locked and written
//!   atomically.
//! - [`service`]: the coordinator's `register` / `finished` state machine.
//! - [`worker`]: running a task as one sandboxed workflow-plugin step.
//! - [`endpoints`]: `/register`, `/finished` and `/status` with task
//!   leases, free of any transport.
//! - [`http_server`]: the endpoints served over HTTP (timeouts, limits,
//!   bearer token, TLS, graceful shutdown).
//! - [`http_worker`]: the worker that pulls tasks from such a server.
//! - [`auth`]: the bearer token; `identity`: who a worker is, whether it
//!   still runs, and attempt ids.
//! - [`local`]: a loop driven from one process (the coordinator lock, the
//!   check before any state is written, the in-process worker, a stop
//!   request); [`scaffold`]: the loop templates of `loop init`.

#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod endpoints;
pub mod events;
pub mod http_server;
pub mod http_worker;
mod identity;
pub mod local;
pub mod models;
pub mod scaffold;
mod scheduler;
pub mod service;
pub mod sessions;
pub mod state_store;
pub mod worker;
