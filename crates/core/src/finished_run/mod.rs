//! What the commands that work on a run after it ended read from its
//! directory: the replay points, records and manifest `sandloop replay`
//! and `sandloop counterfactual` plan from ([`offline`]), and the evidence
//! `sandloop plan` weighs ([`evidence`]). Above `harness` (the run's files)
//! and `replay` (points, children, the planner), which never name it.

mod error;
pub mod evidence;
pub mod offline;

pub use error::OfflineError;
