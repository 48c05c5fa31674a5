//! A finished run's part run again in the sandbox: its component loaded
//! as the run loaded it ([`load_run_component`]: the recorded limits and
//! grants, the same sha256, `replay` exported), a durable point adopted
//! into a fresh instance (`adopt_point`), and the two commands built on
//! them, each returning its typed log line: one item replayed from the
//! point ([`replay_item`] → [`ReplayReport`]) and a hypothesis's
//! candidates run as children of it ([`run_counterfactual`] →
//! [`CounterfactualReport`]; [`ask_counterfactual`] is the whole command,
//! from the hypothesis file to the line appended). What to replay, from
//! which point, and the logs are core's [`FinishedRun`].
//!
//! [`ReplayReport`]: sandloop_core::finished_run::ReplayReport
//! [`CounterfactualReport`]: sandloop_core::finished_run::CounterfactualReport
//! [`FinishedRun`]: sandloop_core::finished_run::FinishedRun

mod adopt;
mod counterfactual;
mod load;
mod recorded;
mod replay_item;

pub use counterfactual::{
    CounterfactualAsk, CounterfactualDone, CounterfactualRequest, ask_counterfactual,
    run_counterfactual,
};
pub use load::{RunComponent, load_run_component};
pub use replay_item::{ReplayRequest, replay_item};
