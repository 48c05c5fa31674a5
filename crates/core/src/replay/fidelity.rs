//! Replay fidelity: how faithfully a restore reproduces captured state.
//! The type, its parsing and [`parse_minimum`] are the
//! `sandloop-contract` crate's (mirroring `ReplayFidelity`,
//! `_FIDELITY_RANK` and `fidelity_meets` in the reference's
//! `replay_runtime.py`); re-exported here for the host's modules.

pub use sandloop_contract::{Fidelity, UnknownFidelity, parse_minimum};
