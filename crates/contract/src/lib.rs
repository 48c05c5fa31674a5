//! # sandloop-contract: what the host and its guests agree on
//!
//! The protocol types both sides of `wit/adapter.wit` speak, defined once:
//! the sandloop host (`sandloop`) and the Rust guest sdk (`sandloop-guest`)
//! use these definitions instead of keeping copies. The crate depends on
//! serde only, so it builds for the host and for `wasm32-wasip2` guests
//! alike; nothing here knows about wasmtime or wit-bindgen.
//!
//! - [`Fidelity`]: how faithfully a restore reproduces a replay point;
//! - replay shapes ([`CaptureRequest`], [`StateLease`], [`RestoreRequest`],
//!   [`RestoreReceipt`], [`EquivalenceCheck`], [`EquivalenceReport`]);
//! - child-group shapes ([`ForkRequest`], [`ChildConcurrency`],
//!   [`Disposition`], [`RiskAssessment`]);
//! - counterfactual shapes ([`CounterfactualRequest`],
//!   [`ValidationOutcome`]);
//! - names: the protocol modes ([`REPLAYABLE_EPISODE_MODE`], ...), the WIT
//!   package and version ([`WIT_PACKAGE`], [`WIT_VERSION`]) and the record
//!   fields only the host may set ([`HOST_OWNED_FIELDS`]).
//!
//! Every type serialises with the reference's spellings (JSON keys and
//! enum values), byte for byte as the run directory's files carry them.
//!
//! The reference these shapes mirror is the Python package `loopx_explore`
//! of loopx 0.4.8: `replay_runtime.py` (fidelity, capture, restore,
//! equivalence), `child_replay_runtime.py` (forks, concurrency, risk) and
//! `counterfactual_runtime.py` (counterfactual requests and outcomes).

#![forbid(unsafe_code)]

mod children;
mod counterfactual;
mod fidelity;
mod names;
mod replay;

pub use children::{ChildConcurrency, Disposition, ForkRequest, RiskAssessment};
pub use counterfactual::{CounterfactualRequest, ValidationOutcome};
pub use fidelity::{Fidelity, UnknownFidelity, parse_minimum};
pub use names::{
    CHILD_RISK_MODE, COUNTERFACTUAL_MODE, HOST_OWNED_FIELDS, ISOLATED_CHILD_MODE,
    REPLAYABLE_EPISODE_MODE, WIT_PACKAGE, WIT_VERSION,
};
pub use replay::{
    CaptureRequest, EquivalenceCheck, EquivalenceReport, RestoreReceipt, RestoreRequest,
    StateLease, check_digest,
};

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
