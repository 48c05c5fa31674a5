//! Binding an instance's contract interfaces when they are first called.
//!
//! Binding an interface looks up each of its functions in the instance and
//! checks its type again (the bindings' `GuestIndices::load`): about a
//! fifth of what starting a child's instance costs when it is done for all
//! eight interfaces. An instance calls few of them — a lane the episode
//! interfaces, a state-forked child `replay-children` and `child-risk` — so
//! each is bound on its first call ([`WasmAdapter::call`]). The
//! component's exports were checked against the contract
//! when it was loaded, so a bind does not fail in practice; if it does,
//! the call reports it as an instantiation failure.
//!
//! [`WasmAdapter::call`]: super::WasmAdapter

use super::{Live, WasmAdapter};
use crate::component::ExportIndices;
use sandloop_core::episode::adapter::{AdapterError, ErrorType};

/// One interface of the contract an adapter may export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Export {
    Episode,
    Seeds,
    Variants,
    Groups,
    Replay,
    ReplayChildren,
    ChildRisk,
    Counterfactual,
}

impl Export {
    /// Every interface, in the contract's order.
    const ALL: [Export; 8] = [
        Export::Episode,
        Export::Seeds,
        Export::Variants,
        Export::Groups,
        Export::Replay,
        Export::ReplayChildren,
        Export::ChildRisk,
        Export::Counterfactual,
    ];

    /// The interface declaring the contract function `name`
    /// (`execute-episode` → `episode-groups`); `None` for a name the
    /// contract does not have.
    pub(super) fn of_function(name: &str) -> Option<Export> {
        Some(match name {
            "execute" => Export::Episode,
            "list-seed-items" => Export::Seeds,
            "compile-variant" => Export::Variants,
            "prepare-episode-group" | "execute-episode" | "release-episode-group" => Export::Groups,
            "capture-replay-state"
            | "restore-replay-state"
            | "validate-replay-equivalence"
            | "run-replay-suffix"
            | "finalize-replay-suffix"
            | "release-replay-state"
            | "export-replay-state"
            | "import-replay-state"
            | "binding-token"
            | "resume-binding" => Export::Replay,
            "fork-replay-child"
            | "validate-replay-child-equivalence"
            | "run-replay-child"
            | "release-replay-child" => Export::ReplayChildren,
            "assess-replay-child-intent" | "assess-replay-child-outcome" => Export::ChildRisk,
            "run-counterfactual" => Export::Counterfactual,
            _ => return None,
        })
    }

    /// The interface's name in `wit/adapter.wit`.
    #[cfg(test)]
    fn interface(self) -> &'static str {
        match self {
            Export::Episode => "episode",
            Export::Seeds => "seeds",
            Export::Variants => "variants",
            Export::Groups => "episode-groups",
            Export::Replay => "replay",
            Export::ReplayChildren => "replay-children",
            Export::ChildRisk => "child-risk",
            Export::Counterfactual => "counterfactual",
        }
    }
}

impl WasmAdapter {
    /// Bind the interface of `name` before calling it (see
    /// [`Live::bind_for`]); a failure drops the instance.
    ///
    /// Errors: an `instantiation` error with wasmtime's message.
    pub(super) fn bind_for(&mut self, name: &str) -> Result<(), AdapterError> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        live.bind_for(name, &self.loaded.indices).map_err(|error| {
            self.live = None;
            AdapterError::new(ErrorType::Instantiation, format!("{error:#}"))
        })
    }
}

impl Live {
    /// Bind the interface declaring the function `name`, unless it is
    /// bound already or the component does not export it (its call then
    /// finds it missing, as before). A resource's destructor (`drop …`)
    /// calls no export and binds nothing; any other name outside the
    /// contract binds every interface.
    ///
    /// Errors: wasmtime's, when an export does not match its binding.
    pub(super) fn bind_for(&mut self, name: &str, indices: &ExportIndices) -> wasmtime::Result<()> {
        if name.starts_with("drop ") {
            return Ok(());
        }
        match Export::of_function(name) {
            Some(export) => self.bind(&[export], indices),
            None => self.bind(&Export::ALL, indices),
        }
    }

    /// Bind each of `exports` the component has and this instance has not
    /// bound yet.
    ///
    /// Errors: wasmtime's, when an export does not match its binding.
    pub(super) fn bind(
        &mut self,
        exports: &[Export],
        indices: &ExportIndices,
    ) -> wasmtime::Result<()> {
        let (store, instance) = (&mut self.store, &self.instance);
        // One arm per interface: each has its own generated `Guest` type.
        macro_rules! bind {
            ($field:ident) => {
                if self.$field.is_none()
                    && let Some(index) = &indices.$field
                {
                    self.$field = Some(index.load(&mut *store, instance)?);
                }
            };
        }
        for export in exports {
            match export {
                Export::Episode => bind!(episode),
                Export::Seeds => bind!(seeds),
                Export::Variants => bind!(variants),
                Export::Groups => bind!(groups),
                Export::Replay => bind!(replay),
                Export::ReplayChildren => bind!(replay_children),
                Export::ChildRisk => bind!(child_risk),
                Export::Counterfactual => bind!(counterfactual),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::{HOST_WORLD, wit_functions, wit_world_exports};

    #[test]
    fn every_contract_function_belongs_to_the_interface_declaring_it() {
        let mut seen = Vec::new();
        for interface in wit_world_exports(HOST_WORLD) {
            let functions = wit_functions(interface);
            assert!(!functions.is_empty(), "{interface} declares no function");
            for function in functions {
                let export = Export::of_function(&function.name)
                    .unwrap_or_else(|| panic!("{} has no interface here", function.name));
                assert_eq!(export.interface(), interface, "{}", function.name);
                seen.push(export);
            }
        }
        for export in Export::ALL {
            assert!(
                seen.contains(&export),
                "{export:?} is not in the host world"
            );
        }
        assert_eq!(Export::of_function("no-such-function"), None);
    }
}
