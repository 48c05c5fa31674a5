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
//! | [`full`] | same as `replayable` (the host's world) | all five |
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

/// Every export the host knows; the same exports as [`replayable`].
pub mod full {
    #[doc(inline)]
    pub use crate::__sandloop_world_replayable as export;
    pub use crate::bindings::episode::exports::sandloop::adapter::episode;
    pub use crate::bindings::episode_groups::exports::sandloop::adapter::episode_groups;
    pub use crate::bindings::replay::exports::sandloop::adapter::replay;
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
/// component (also the `full` world).
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
