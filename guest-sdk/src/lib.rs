//! # sandloop-guest: write sandloop adapters in Rust
//!
//! An *adapter* is a WebAssembly component that the sandloop host runs in a
//! sandbox: it executes work items and reports observation records. This
//! crate gives a Rust author the contract of `wit/adapter.wit`
//! (`sandloop:adapter@0.2.0`) as plain traits over JSON objects, and one
//! macro that exports an adapter type as a component.
//!
//! ## A complete minimal adapter
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! sandloop-guest = { path = "../../guest-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```no_run
//! use sandloop_guest::{Context, Episode, Error, Item, Record};
//!
//! #[derive(Default)]
//! struct Hello;
//!
//! impl Episode for Hello {
//!     fn execute(&self, item: Item, _ctx: &Context) -> Result<Record, Error> {
//!         if item.text().is_empty() {
//!             return Err(Error::invalid_item("item has no text"));
//!         }
//!         let mut record = Record::new(); // accepted: true, no keys yet
//!         for word in item.text().split_whitespace() {
//!             record.observe(format!("len:{}", word.len().min(8)));
//!         }
//!         Ok(record)
//!     }
//! }
//!
//! sandloop_guest::export_adapter!(Hello, world = plain);
//! # fn main() {}
//! ```
//!
//! Build and run it:
//!
//! ```text
//! rustup target add wasm32-wasip2
//! cargo build --release --target wasm32-wasip2
//! sandloop run --adapter target/wasm32-wasip2/release/YOUR_CRATE.wasm \
//!     --items items.jsonl --out runs/first
//! ```
//!
//! (`YOUR_CRATE` is the crate name with `-` turned into `_`; inside this
//! workspace, `-p hello-adapter` builds the example.)
//!
//! ## Worlds: which interfaces the component exports
//!
//! The host detects an adapter's protocols from the component's exports, so
//! a component must export exactly what it implements. Pick the world, and
//! implement its traits on one `Default` type:
//!
//! | `world =` | exports | implement |
//! |---|---|---|
//! | `plain` | `episode` | [`Episode`] |
//! | `grouped` | `episode`, `episode-groups` | [`Episode`], [`EpisodeGroups`] |
//! | `grouped_only` | `episode-groups` | [`EpisodeGroups`] |
//! | `explorer` | `episode`, `seeds`, `variants`, `episode-groups` | all four |
//! | `replayable` | `explorer`'s four and `replay` | all four and [`Replay`] |
//! | `isolated` | `replayable`'s five, `replay-children` and `child-risk` | all five, [`ReplayChildren`] and [`ChildRisk`] |
//! | `counterfactual_fixes` (or `full`) | `isolated`'s seven and `counterfactual` | all seven and [`Counterfactual`] |
//!
//! ```ignore
//! sandloop_guest::export_adapter!(MyAdapter, world = explorer);
//! ```
//!
//! A missing trait is a compile error naming it (e.g. "the trait bound
//! `MyAdapter: Seeds` is not satisfied"). Without `seeds`, the host reads
//! seed items from a file (`--items`).
//!
//! ## What each call must return
//!
//! - [`Episode::execute`]: an observation [`Record`]: `observation_keys`
//!   (strings; the novelty ledger credits each unseen key),
//!   `weighted_flags` (`{name: weight}` for rarer facts, credited per family),
//!   `accepted` (bool), plus any private fields. The host fills `item_id`,
//!   `family`, `is_variant`, `variant_spec_id`, measures `duration_minutes`
//!   itself, and annotates group records (`execution_group_id`,
//!   `record_kind`, `seed_item_id`, `prefix_reused`, `checkpoint_ref`).
//! - [`Seeds::list_seed_items`]: the epoch's seed [`Item`]s, each with
//!   `item_id`, `family`, `text`, optional `payload`; an empty list ends the
//!   run.
//! - [`Variants::compile_variant`]: a variant [`Item`] with `is_variant:
//!   true`, `variant_spec`, `seed_item_id`, `family` and an `item_id` of its
//!   own.
//! - [`EpisodeGroups::prepare`]: `Some(Prepared { group, prefix_record,
//!   checkpoint_ref })`, or `None` to fall back to plain `execute` for every
//!   item of the group; then [`EpisodeGroups::execute_episode`] once per
//!   item (seed first) and [`EpisodeGroups::release`] exactly once.
//! - [`Replay`] (world `replayable`): right after a prepare,
//!   [`Replay::capture`] turns the group's prefix state into a replay point,
//!   a [`StateLease`] holding your `Binding`, a [`Fidelity`] and a
//!   projection digest (the sdk finds the group by the request's
//!   `execution_group_id`, which is the prepare's `ctx.execution_group_id`).
//!   Then, instead of `execute_episode`, each item runs as
//!   [`Replay::restore`] (a [`RestoreReceipt`]), [`Replay::validate`] (an
//!   [`EquivalenceReport`]), [`Replay::run_suffix`] (a [`Record`]) and
//!   [`Replay::finalize_suffix`]; [`Replay::release_state`] closes the point.
//!   [`Replay::export_state`] / [`Replay::import_state`] carry it to another
//!   instance. The host checks every receipt and report against the
//!   reference contract ([`EquivalenceReport::check_contract`]).
//! - [`ReplayChildren`] (world `isolated`): the host forks each task of a
//!   point into a fresh instance, where [`ReplayChildren::fork_child`] is
//!   the first call (with the bytes [`Replay::export_state`] produced in
//!   the parent) and returns a [`ChildLease`] (your `Child`, a
//!   [`RestoreReceipt`] and a [`ChildConcurrency`]); then
//!   [`ReplayChildren::validate_child`] (an [`EquivalenceReport`]),
//!   [`ReplayChildren::run_child`] (a [`Record`]) and
//!   [`ReplayChildren::release_child`]. [`ChildRisk`] assesses the task's
//!   intent before the run and its record after it, each a
//!   [`RiskAssessment::allow`] or [`RiskAssessment::deny`] naming a policy;
//!   the sdk finds the child by the call's `child-id` (else the error kind
//!   `unknown-child`).
//!
//! The replay and child-group types ([`Fidelity`], [`StateLease`],
//! [`EquivalenceReport`], [`RiskAssessment`], ...) are defined once, in the
//! `sandloop-contract` crate the host uses too, and re-exported here (and
//! from [`types`]); [`contract`] has the rest of it.
//!
//! Records and items are JSON objects ([`Object`]) wrapped in thin
//! newtypes that deref to the map and add accessors and builders.
//!
//! ## Errors
//!
//! Return [`Error`] (`kind`, `message`, `retryable`) for failures you
//! declare; `?` converts `std::io::Error`, `serde_json::Error`, parse errors
//! and strings, and [`ResultExt::or_kind`] tags any other error. The host
//! turns a declared error into a structured error record with
//! `adapter_error.type = "adapter_error"`, your `kind` and message (first 240
//! characters), and `retryable_infra_error` from `retryable`. Everything
//! else is classified by the host: a panic (a trap), a deadline, memory or
//! fuel exhaustion, and output that is not one JSON object. An incoming item
//! or spec that is not a JSON object never reaches your code: the sdk
//! answers with kind `invalid-item` / `invalid-spec`.
//!
//! ## Imports
//!
//! [`log`] (`log::info("..")`, `log::info!("{}", x)`) and [`trace`]
//! (`trace::emit(EventKind::Lifecycle, json!({..}))`) call the host. Trace
//! payloads must be public-safe: no keys like `path`/`token`/`handle`, no
//! absolute paths; a refused event returns the host's reason.
//!
//! ## The sandbox
//!
//! WASI has no ambient authority: no preopened directories, no environment
//! variables, no sockets, unless the operator grants them (`--dir
//! HOST::/guest[:ro]`, `--env NAME`). Each call has a deadline and the
//! instance a memory limit. An instance runs one call at a time; the host
//! may replace it with a fresh one whenever it likes, so state kept in
//! `&self` (behind `Cell`/`RefCell`) is only a cache.
//!
//! ## Lower level
//!
//! [`worlds`] has the generated `Guest` traits per world and an `export!`
//! macro for types that implement them directly (full control of the JSON
//! text); [`wit`] has the generated import bindings.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod bindings;
mod glue;
pub mod log;
mod protocol;
pub mod trace;
pub mod types;
pub mod worlds;

pub use glue::{Adapter, BindingBox, ChildBox, GroupBox};
pub use protocol::{
    ChildRisk, Counterfactual, Episode, EpisodeGroups, Replay, ReplayChildren, Seeds, Variants,
};
pub use types::{
    CaptureRequest, ChildConcurrency, ChildLease, Context, CounterfactualRequest, Disposition,
    EquivalenceCheck, EquivalenceReport, Error, Fidelity, ForkRequest, Item, Object, Prepared,
    Record, RestoreReceipt, RestoreRequest, ResultExt, RiskAssessment, StateLease,
    ValidationOutcome, VariantSpec,
};

/// The protocol types and names shared with the host (`sandloop-contract`):
/// the replay and child-group types above are its types, re-exported; the
/// protocol names and the WIT version are here.
pub use sandloop_contract as contract;

/// Re-exported so adapters need no direct dependency to build JSON values.
pub use serde_json;
pub use serde_json::{Value, json};

/// Generated bindings of the imported interfaces, shared by every world:
/// `types` (`Context`, `AdapterError`, `Json`), `log` and `trace`.
pub mod wit {
    pub use crate::bindings::imports::sandloop::adapter::{log, trace, types};
}

/// Export an adapter type as a component of the given world.
///
/// ```ignore
/// sandloop_guest::export_adapter!(MyAdapter, world = explorer);
/// ```
///
/// `world` is one of `plain`, `grouped`, `grouped_only`, `explorer`,
/// `replayable`, `isolated`, `counterfactual_fixes`, `full` (see
/// [`worlds`]). The type must
/// implement `Default` (it is built once per instance, on the first call)
/// and the protocol traits of the world. The macro implements the
/// generated `Guest` traits on [`Adapter<MyAdapter>`], parsing and
/// serialising JSON at the boundary, and emits the component's exports and
/// type information. Use it once per component.
#[macro_export]
macro_rules! export_adapter {
    ($ty:ty, world = $world:ident $(,)?) => {
        const _: () = {
            type __SandloopExportedAdapter = $crate::Adapter<$ty>;
            $crate::worlds::$world::export!(__SandloopExportedAdapter);
        };
    };
}
