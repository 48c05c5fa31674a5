//! Host bindings for the `sandloop:adapter` WIT package, world `full`.
//!
//! The host binds every interface separately (`GuestIndices` per export), so a
//! component that exports only some interfaces still loads; which ones it
//! exports is decided in [`super::component::load`].

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "full",
});
