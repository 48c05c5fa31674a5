//! sandloop's runtimes, with no sandbox in them.
//!
//! The episode runtime ([`episode`]) and the arm harness ([`harness`]) are
//! written against the small traits in [`episode::adapter`]; replay points
//! ([`replay`]) bind adapter state to [`trace`] positions so a suffix can run
//! again from a point, and the planner and child groups build on them.
//! A loop step runs through the traits of [`step`]; [`report`] reads a
//! finished run directory into the figures of `sandloop report`.
//! `sandloop-sandbox` implements
//! all of these traits for WebAssembly components; the tests here implement
//! them natively.
//!
//! The rules mirror the reference packages `loopx_explore` and `loopy_loop`
//! (see `ARCHITECTURE.md`, "Where the reference lives"); a doc comment that
//! names a Python file or function names the rule it follows.

// One module needs `unsafe`, and says why beside it: `replay::crew`, whose
// helper threads run a borrowed closure (the proof is at `run_scoped`).
#![deny(unsafe_code)]

pub mod atomic;
pub mod compile_cost;
pub mod digest;
pub mod dir_grant;
pub mod dir_lock;
pub mod ellipsis;
pub mod episode;
pub mod finished_run;
pub mod harness;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod hostile_inputs;
pub mod input_file;
pub mod limits;
pub mod replay;
pub mod report;
pub mod step;
pub mod terminal;
pub mod trace;
