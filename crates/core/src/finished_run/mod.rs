//! What the commands that work on a run after it ended read from its
//! directory and write to it: a locked [`FinishedRun`] (its manifest, its
//! replay points, an item's record, the point to restore and its state,
//! the log a command appends to), the planning behind it ([`offline`]),
//! the lines `sandloop replay` and `sandloop counterfactual` append
//! ([`ReplayReport`], [`CounterfactualReport`]), the evidence `sandloop
//! plan` weighs ([`evidence`]) and the plan it makes of it ([`plan`]).
//! Above `harness` (the run's files) and `replay` (points, children, the
//! planner), which never name it.

mod error;
pub mod evidence;
pub mod offline;
pub mod plan;
mod reports;
mod run;

pub use error::OfflineError;
pub use reports::{
    COUNTERFACTUAL_SCHEMA, CounterfactualReport, ErrorFields, OriginalOutcome, REPLAY_SCHEMA,
    ReplayOutcome, ReplayReport, SelectionFields,
};
pub use run::{FinishedRun, RunLog};
