//! The WIT contract this host speaks, `wit/adapter.wit`, embedded and
//! parsed with `wit-parser`: the interfaces each world exports and the
//! functions of each interface, their signatures written out as WIT for the
//! contract check's messages.

use std::collections::HashMap;
use std::sync::LazyLock;

use wit_parser::{Resolve, WorldKey};

use super::wit_render::declared_function;

/// The WIT contract this host speaks (`wit/adapter.wit`), embedded so the
/// expected signatures are quoted exactly as written and `sandloop new
/// adapter` can give every project its own copy.
pub const WIT_SOURCE: &str = include_str!("../../../../wit/adapter.wit");

/// The world whose exports are every interface the host knows.
pub(crate) const HOST_WORLD: &str = "full";

/// A function of an interface as `wit/adapter.wit` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WitFunction {
    /// `execute`.
    pub name: String,
    /// `execute: func(item: json, ctx: context) -> result<json, adapter-error>`.
    pub signature: String,
}

/// One WIT package, as far as the contract check reads it.
#[derive(Debug)]
pub(crate) struct ContractWit {
    /// The interfaces (or functions) each world exports, by world name;
    /// interfaces in declaration order.
    world_exports: HashMap<String, Vec<String>>,
    /// The functions of each interface, by interface name, in declaration
    /// order.
    functions: HashMap<String, Vec<WitFunction>>,
}

impl ContractWit {
    /// Parse and resolve the WIT package `source`; `path` only names it in
    /// errors.
    ///
    /// Errors: wit-parser's message, naming `path`, the line and the column
    /// (`adapter.wit:3:5`) of a syntax or resolution error.
    pub(crate) fn parse(path: &str, source: &str) -> Result<ContractWit, String> {
        let mut resolve = Resolve::default();
        let package = resolve
            .push_source(path, source)
            .map_err(|error| resolve.render_error(&error))?;
        let package = &resolve.packages[package];
        let functions = package
            .interfaces
            .iter()
            .map(|(name, id)| {
                let declared = resolve.interfaces[*id]
                    .functions
                    .values()
                    .map(|function| WitFunction {
                        name: function.name.clone(),
                        signature: declared_function(&resolve, function),
                    })
                    .collect();
                (name.clone(), declared)
            })
            .collect();
        let world_exports = package
            .worlds
            .iter()
            .map(|(name, id)| {
                let exports = resolve.worlds[*id]
                    .exports
                    .keys()
                    .filter_map(|key| match key {
                        WorldKey::Name(name) => Some(name.clone()),
                        WorldKey::Interface(id) => resolve.interfaces[*id].name.clone(),
                    })
                    .collect();
                (name.clone(), exports)
            })
            .collect();
        Ok(ContractWit {
            world_exports,
            functions,
        })
    }

    /// The interfaces `world` exports, in declaration order (and the
    /// functions it exports directly); empty for an unknown world.
    pub(crate) fn world_exports(&self, world: &str) -> &[String] {
        self.world_exports.get(world).map_or(&[], Vec::as_slice)
    }

    /// The functions `interface` declares, in declaration order; empty for
    /// an unknown interface.
    pub(crate) fn functions(&self, interface: &str) -> &[WitFunction] {
        self.functions.get(interface).map_or(&[], Vec::as_slice)
    }
}

/// [`WIT_SOURCE`], parsed once.
static CONTRACT: LazyLock<ContractWit> = LazyLock::new(|| {
    ContractWit::parse("wit/adapter.wit", WIT_SOURCE)
        .unwrap_or_else(|error| panic!("the embedded wit/adapter.wit does not parse: {error}"))
});

/// The functions contract interface `interface` declares, in declaration
/// order, each signature on one line as written.
pub(crate) fn wit_functions(interface: &str) -> &'static [WitFunction] {
    CONTRACT.functions(interface)
}

/// The interfaces contract world `world` exports, in declaration order.
pub(crate) fn wit_world_exports(world: &str) -> &'static [String] {
    CONTRACT.world_exports(world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_written_as_declared() {
        let wit = ContractWit::parse(
            "probe.wit",
            "package probe:x@1.0.0;
             interface a {
                 resource thing;
                 type json = string;
                 record r { f: u8 }
                 one: func(t: borrow<thing>, held: thing, l: list<list<u8>>, o: option<tuple<s64, f32>>) -> result<_, r>;
                 two: func(j: json);
                 three: func() -> result<option<r>>;
                 four: func(e: result, c: char) -> bool;
             }
             world w { export a; }
             world v { export f: func(); }",
        )
        .unwrap();
        let signatures: Vec<&str> = wit
            .functions("a")
            .iter()
            .map(|function| function.signature.as_str())
            .collect();
        assert_eq!(
            signatures,
            [
                "one: func(t: borrow<thing>, held: thing, l: list<list<u8>>, o: option<tuple<s64, f32>>) -> result<_, r>",
                "two: func(j: json)",
                "three: func() -> result<option<r>>",
                "four: func(e: result, c: char) -> bool",
            ]
        );
        assert_eq!(wit.world_exports("w"), ["a"]);
        assert_eq!(wit.world_exports("v"), ["f"]);
        assert!(wit.world_exports("none").is_empty());
        assert!(wit.functions("none").is_empty());
    }

    #[test]
    fn a_wit_error_names_the_file_and_line() {
        let error = ContractWit::parse(
            "broken.wit",
            "package p:q;\n\ninterface a {\n  f: func(x: nope);\n}",
        )
        .unwrap_err();
        assert!(error.contains("broken.wit:4:"), "{error}");
        assert!(error.contains("nope"), "{error}");
    }
}
