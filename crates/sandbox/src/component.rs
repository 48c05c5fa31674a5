//! Adapter components, in one module per job:
//!
//! - `loader`: read and validate the bytes, compile them through the cache,
//!   link the imports the sandbox provides, bind the exported interfaces
//!   ([`load`], [`examine`], [`LoadedAdapter`], [`LoadError`]);
//! - `twin`: the same loaded component in an engine of its own per crew
//!   helper thread, for the children a parallel group forks there;
//! - `contract`: check the exports against the contract of
//!   `wit/adapter.wit` — the protocols offered, every [`Problem`] — over
//!   what `exports` finds in the component and `typecheck` checks against
//!   the host's bindings;
//! - `wit`: the contract itself ([`WIT_SOURCE`]), parsed with `wit-parser`;
//!   `wit_render` writes types out as WIT for the messages and `sandloop
//!   inspect`.

mod contract;
mod exports;
mod loader;
mod twin;
mod typecheck;
mod wit;
mod wit_render;

pub use contract::Problem;
pub use loader::{ComponentInfo, Examined, LoadError, LoadedAdapter, examine, load};
pub use wit::WIT_SOURCE;

pub(crate) use loader::{ExportIndices, compile_error, linker};
pub(crate) use twin::Twins;
#[cfg(test)]
pub(crate) use wit::{HOST_WORLD, wit_functions, wit_world_exports};

/// The WIT package every interface name is qualified with, and the version
/// this host speaks (defined in `sandloop-contract`).
pub use sandloop_contract::{WIT_PACKAGE, WIT_VERSION};
