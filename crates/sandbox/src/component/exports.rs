//! What a compiled component exports, as far as the contract check needs
//! it: every instance with its functions written out as WIT (each
//! type-checked against the host's bindings when the instance is a contract
//! interface), every top-level function, and what else there is.

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::contract::{FoundFunction, FoundItem};
use super::typecheck::checker;
use super::wit_render::wit_function;
use sandloop_contract::{WIT_PACKAGE, WIT_VERSION};

/// The contract interface `name` is (`episode` for
/// `sandloop:adapter/episode@0.2.0`), if it is one at this host's version.
pub(crate) fn contract_interface(name: &str) -> Option<&str> {
    let short = name
        .strip_prefix(WIT_PACKAGE)?
        .strip_prefix('/')?
        .strip_suffix(WIT_VERSION)?
        .strip_suffix('@')?;
    Some(short)
}

/// Walk the component's exports: every instance with its functions
/// (type-checked against the host's bindings when the instance is a
/// contract interface), every top-level function, and what else there is.
pub(crate) fn found_exports(
    engine: &wasmtime::Engine,
    component: &Component,
) -> Vec<(String, FoundItem)> {
    let ty = component.component_type();
    ty.exports(engine)
        .map(|(name, export)| {
            let item = match export.ty {
                ComponentItem::ComponentInstance(instance) => {
                    let interface = contract_interface(name);
                    FoundItem::Instance(
                        instance
                            .exports(engine)
                            .filter_map(|(function, export)| match export.ty {
                                ComponentItem::ComponentFunc(func) => Some(FoundFunction {
                                    name: function.to_string(),
                                    signature: wit_function(function, &func),
                                    mismatch: interface
                                        .and_then(|interface| checker(interface, function))
                                        .and_then(|check| check(&ty, &func).err()),
                                }),
                                _ => None,
                            })
                            .collect(),
                    )
                }
                ComponentItem::ComponentFunc(func) => {
                    FoundItem::Function(wit_function(name, &func))
                }
                ComponentItem::CoreFunc(_) => FoundItem::Other("core function"),
                ComponentItem::Module(_) => FoundItem::Other("core module"),
                ComponentItem::Component(_) => FoundItem::Other("component"),
                ComponentItem::Type(_) => FoundItem::Other("type"),
                ComponentItem::Resource(_) => FoundItem::Other("resource"),
            };
            (name.to_string(), item)
        })
        .collect()
}
