//! The worlds of `wit/adapter.wit`, one module each.
//!
//! A world decides which interfaces the component exports, and the host
//! detects an adapter's protocols from those exports, so an adapter must
//! export exactly the interfaces it implements:
//!
//! | world | exports | protocol traits |
//! |---|---|---|
//! | [`plain`] | `episode` | [`Episode`](crate::Episode) |
//! | [`grouped`] | `episode`, `episode-groups` | [`Episode`](crate::Episode), [`EpisodeGroups`](crate::EpisodeGroups) |
//! | [`grouped_only`] | `episode-groups` | [`EpisodeGroups`](crate::EpisodeGroups) |
//! | [`explorer`] | `episode`, `seeds`, `variants`, `episode-groups` | all four |
//! | [`replayable`] | `explorer`'s four and `replay` | all four and [`Replay`](crate::Replay) |
//! | [`isolated`] | `replayable`'s five, `replay-children` and `child-risk` | all five, [`ReplayChildren`](crate::ReplayChildren) and [`ChildRisk`](crate::ChildRisk) |
//! | [`counterfactual_fixes`] | `isolated`'s seven and `counterfactual` | all seven and [`Counterfactual`](crate::Counterfactual) |
//! | [`full`] | same as `counterfactual_fixes` (the host's world) | all eight |
//!
//! Every world imports `log` and `trace` (see [`crate::log`],
//! [`crate::trace`]).
//!
//! Each module re-exports the generated bindings of its exported interfaces
//! (each with its `Guest` trait) and has an `export!` macro. Most authors use
//! [`crate::export_adapter!`] instead; `export!` is for hand-written
//! adapters that implement the generated `Guest` traits themselves, e.g. to
//! control the raw JSON text (see `examples/hostile-adapter`):
//!
//! ```ignore
//! use sandloop_guest::worlds::plain::episode::Guest;
//! use sandloop_guest::wit::types::{AdapterError, Context};
//!
//! struct Raw;
//! impl Guest for Raw {
//!     fn execute(item: String, ctx: Context) -> Result<String, AdapterError> {
//!         Ok(r#"{"observation_keys":[],"accepted":true}"#.into())
//!     }
//! }
//! sandloop_guest::worlds::plain::export!(Raw);
//! ```
//!
//! `export!` takes a type *name* (an identifier), like wit-bindgen's own
//! export macros.

/// Plain `execute` only.
pub mod plain {
    #[doc(inline)]
    pub use crate::__sandloop_world_plain as export;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
}

/// Plain `execute` with shared-prefix episode groups.
pub mod grouped {
    #[doc(inline)]
    pub use crate::__sandloop_world_grouped as export;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
}

/// Episode groups without plain `execute` (every prepare must succeed).
pub mod grouped_only {
    #[doc(inline)]
    pub use crate::__sandloop_world_grouped_only as export;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
}

/// Seeds, variants and episode groups: a full exploration adapter.
pub mod explorer {
    #[doc(inline)]
    pub use crate::__sandloop_world_explorer as export;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::seeds::exports::sandloop::adapter::seeds;
    pub use crate::bindings::variants::exports::sandloop::adapter::variants;
}

/// An explorer whose prefixes can be captured as replay points.
pub mod replayable {
    #[doc(inline)]
    pub use crate::__sandloop_world_replayable as export;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::replay::exports::sandloop::adapter::replay;
    pub use crate::bindings::seeds::exports::sandloop::adapter::seeds;
    pub use crate::bindings::variants::exports::sandloop::adapter::variants;
}

/// A replayable explorer whose variants run as isolated children, with a
/// risk policy over each child's intent and outcome.
pub mod isolated {
    #[doc(inline)]
    pub use crate::__sandloop_world_isolated as export;
    pub use crate::bindings::child_risk::exports::sandloop::adapter::child_risk;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::replay::exports::sandloop::adapter::replay;
    pub use crate::bindings::replay_children::exports::sandloop::adapter::replay_children;
    pub use crate::bindings::seeds::exports::sandloop::adapter::seeds;
    pub use crate::bindings::variants::exports::sandloop::adapter::variants;
}

/// An isolated explorer that can also replay counterfactual fixes.
pub mod counterfactual_fixes {
    #[doc(inline)]
    pub use crate::__sandloop_world_counterfactual_fixes as export;
    pub use crate::bindings::child_risk::exports::sandloop::adapter::child_risk;
    pub use crate::bindings::counterfactual::exports::sandloop::adapter::counterfactual;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::replay::exports::sandloop::adapter::replay;
    pub use crate::bindings::replay_children::exports::sandloop::adapter::replay_children;
    pub use crate::bindings::seeds::exports::sandloop::adapter::seeds;
    pub use crate::bindings::variants::exports::sandloop::adapter::variants;
}

/// Every export the host knows; the same exports as
/// [`counterfactual_fixes`].
pub mod full {
    #[doc(inline)]
    pub use crate::__sandloop_world_full as export;
    pub use crate::bindings::child_risk::exports::sandloop::adapter::child_risk;
    pub use crate::bindings::counterfactual::exports::sandloop::adapter::counterfactual;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::replay::exports::sandloop::adapter::replay;
    pub use crate::bindings::replay_children::exports::sandloop::adapter::replay_children;
    pub use crate::bindings::seeds::exports::sandloop::adapter::seeds;
    pub use crate::bindings::variants::exports::sandloop::adapter::variants;
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_export_interface {
    (episode, $ty:ident) => {
        $crate::bindings::episode::__sandloop_export_episode!($ty with_types_in $crate::bindings::episode);
    };
    (seeds, $ty:ident) => {
        $crate::bindings::seeds::__sandloop_export_seeds!($ty with_types_in $crate::bindings::seeds);
    };
    (variants, $ty:ident) => {
        $crate::bindings::variants::__sandloop_export_variants!($ty with_types_in $crate::bindings::variants);
    };
    (episode_groups, $ty:ident) => {
        $crate::bindings::episode_groups::__sandloop_export_episode_groups!($ty with_types_in $crate::bindings::episode_groups);
    };
    (replay, $ty:ident) => {
        $crate::bindings::replay::__sandloop_export_replay!($ty with_types_in $crate::bindings::replay);
    };
    (replay_children, $ty:ident) => {
        $crate::bindings::replay_children::__sandloop_export_replay_children!($ty with_types_in $crate::bindings::replay_children);
    };
    (child_risk, $ty:ident) => {
        $crate::bindings::child_risk::__sandloop_export_child_risk!($ty with_types_in $crate::bindings::child_risk);
    };
    (counterfactual, $ty:ident) => {
        $crate::bindings::counterfactual::__sandloop_export_counterfactual!($ty with_types_in $crate::bindings::counterfactual);
    };
}

/// Export `$ty` (implementing `episode::Guest`) as a `plain` component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_plain {
    ($ty:ident) => {
        $crate::__sandloop_export_interface!(episode, $ty);
    };
}

/// Export `$ty` (implementing `episode::Guest` and `episode_groups::Guest`)
/// as a `grouped` component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_grouped {
    ($ty:ident) => {
        $crate::__sandloop_export_interface!(episode, $ty);
        $crate::__sandloop_export_interface!(episode_groups, $ty);
    };
}

/// Export `$ty` (implementing `episode_groups::Guest`) as a `grouped-only`
/// component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_grouped_only {
    ($ty:ident) => {
        $crate::__sandloop_export_interface!(episode_groups, $ty);
    };
}

/// Export `$ty` (implementing all four `Guest` traits) as an `explorer`
/// component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_explorer {
    ($ty:ident) => {
        $crate::__sandloop_export_interface!(episode, $ty);
        $crate::__sandloop_export_interface!(seeds, $ty);
        $crate::__sandloop_export_interface!(variants, $ty);
        $crate::__sandloop_export_interface!(episode_groups, $ty);
    };
}

/// Export `$ty` (implementing all five `Guest` traits) as a `replayable`
/// component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_replayable {
    ($ty:ident) => {
        $crate::__sandloop_export_interface!(episode, $ty);
        $crate::__sandloop_export_interface!(seeds, $ty);
        $crate::__sandloop_export_interface!(variants, $ty);
        $crate::__sandloop_export_interface!(episode_groups, $ty);
        $crate::__sandloop_export_interface!(replay, $ty);
    };
}

/// Export `$ty` (implementing all seven `Guest` traits) as an `isolated`
/// component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_isolated {
    ($ty:ident) => {
        $crate::__sandloop_world_replayable!($ty);
        $crate::__sandloop_export_interface!(replay_children, $ty);
        $crate::__sandloop_export_interface!(child_risk, $ty);
    };
}

/// Export `$ty` (implementing all eight `Guest` traits) as a
/// `counterfactual-fixes` component.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_counterfactual_fixes {
    ($ty:ident) => {
        $crate::__sandloop_world_isolated!($ty);
        $crate::__sandloop_export_interface!(counterfactual, $ty);
    };
}

/// Export `$ty` (implementing all eight `Guest` traits) as a `full`
/// component: the same exports as `counterfactual-fixes`.
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_world_full {
    ($ty:ident) => {
        $crate::__sandloop_world_counterfactual_fixes!($ty);
    };
}
