//! Twins of a loaded component: the same compiled component, linked in an
//! engine of its own, one per helper thread of a lane's crew. A parallel
//! group's children are forked on the lane and on its helpers at once
//! (see [`ConcurrentForker`](sandloop_core::replay::ConcurrentForker)); a
//! child forked on helper `i` is an instance of twin `i`, so the
//! children of two threads share no engine — no instance pool and its
//! slot allocator's lock, no reference counts of the compiled code, no
//! epoch counter. Two serial lanes measured 1.50–1.55× one lane on two
//! cores in one engine, 1.69–1.78× with an engine each
//! (`SANDLOOP_BENCH_CHILDREN_PROFILE=lanes|engines`).
//!
//! A twin is made the first time a helper forks a child of the component:
//! the compiled code is serialized from the original's engine and
//! deserialized into the twin's (no compilation), under the same
//! [`SandboxConfig`] — the same limits, grants and pool size. Components
//! made in memory (a replay point's snapshot) have no twins: a twin per
//! point would cost more than it saves.

use std::sync::{Arc, OnceLock};

use wasmtime::component::Component;

use super::loader::{ExportIndices, LoadedAdapter, linker};
use crate::engine::SandboxEngine;

/// The twins of one loaded component, made on first use: slot `i` for
/// crew helper `i`; `None` once making it failed (that helper's children
/// are then instances of the original).
pub(crate) struct Twins {
    slots: Box<[OnceLock<Option<Arc<LoadedAdapter>>>]>,
}

impl Twins {
    /// Room for one twin per crew helper
    /// ([`most_helpers`](sandloop_core::replay::crew::most_helpers)).
    pub(crate) fn for_helpers() -> Twins {
        let helpers = sandloop_core::replay::crew::most_helpers();
        Twins {
            slots: (0..helpers).map(|_| OnceLock::new()).collect(),
        }
    }

    /// No twins: every child is an instance of the original.
    pub(crate) fn none() -> Twins {
        Twins {
            slots: Box::default(),
        }
    }
}

impl LoadedAdapter {
    /// What a child forked on the calling thread is an instance of: on
    /// helper `i` of a crew ([`helper_index`](sandloop_core::replay::crew::helper_index)),
    /// this component's twin `i`, made now if it is not yet; anywhere else,
    /// or when the component has no twins or its twin could not be made,
    /// the component itself.
    pub(crate) fn for_this_thread(self: &Arc<Self>) -> Arc<LoadedAdapter> {
        let twin = sandloop_core::replay::crew::helper_index()
            .and_then(|index| self.twins.slots.get(index))
            .and_then(|slot| {
                slot.get_or_init(|| self.in_engine_of_its_own().ok().map(Arc::new))
                    .clone()
            });
        twin.unwrap_or_else(|| Arc::clone(self))
    }

    /// This component in a new engine of the same configuration, as a
    /// helper's twin is made: its code serialized and deserialized (not
    /// compiled again), relinked, its interfaces bound again; the result
    /// has no twins of its own. Errors: what wasmtime says when the engine
    /// cannot be made (e.g. the pool's address space cannot be reserved)
    /// or the code not moved.
    pub fn in_engine_of_its_own(&self) -> wasmtime::Result<LoadedAdapter> {
        let engine = Arc::new(SandboxEngine::new(&self.config)?);
        let code = self.pre.component().serialize()?;
        // SAFETY: `code` was serialized just now, by this wasmtime, from an
        // engine of the same configuration; it is not read from anywhere
        // else.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine.engine(), &code)? };
        let pre = linker(engine.engine())?.instantiate_pre(&component)?;
        let indices = ExportIndices::bind(&pre, &self.protocols).map_err(|(_, error)| error)?;
        Ok(LoadedAdapter {
            engine,
            config: Arc::clone(&self.config),
            pre,
            indices,
            info: self.info.clone(),
            protocols: self.protocols,
            twins: Twins::none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sandloop_core::episode::adapter::Protocols;
    use sandloop_core::replay::crew::{helper_index, run_scoped};

    use super::*;
    use crate::cache::CacheOutcome;
    use crate::component::ComponentInfo;
    use crate::config::SandboxConfig;

    /// The smallest component: the preamble of a component, no sections.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn loaded(twins: Twins) -> Arc<LoadedAdapter> {
        let config = SandboxConfig {
            pool_instances: 4,
            ..SandboxConfig::default()
        };
        let engine = Arc::new(SandboxEngine::new(&config).unwrap());
        let component = Component::new(engine.engine(), EMPTY_COMPONENT).unwrap();
        let pre = linker(engine.engine())
            .unwrap()
            .instantiate_pre(&component)
            .unwrap();
        let protocols = Protocols::default();
        let indices = ExportIndices::bind(&pre, &protocols).unwrap();
        Arc::new(LoadedAdapter {
            engine,
            config: Arc::new(config),
            pre,
            indices,
            info: ComponentInfo {
                path: "empty.wasm".into(),
                sha256: String::new(),
                size_bytes: EMPTY_COMPONENT.len() as u64,
                exports: Vec::new(),
                imports: Vec::new(),
                protocols: Vec::new(),
                cache: CacheOutcome::Uncached,
                compile_ms: 0.0,
            },
            protocols,
            twins,
        })
    }

    /// What `loaded.for_this_thread()` gives on a crew helper, twice.
    fn on_a_helper(loaded: &Arc<LoadedAdapter>) -> Vec<Arc<LoadedAdapter>> {
        let seen = Mutex::new(Vec::new());
        run_scoped(1, &|| {
            if helper_index().is_some() {
                let mut seen = seen.lock().unwrap();
                seen.push(loaded.for_this_thread());
                seen.push(loaded.for_this_thread());
            }
        });
        seen.into_inner().unwrap()
    }

    #[test]
    fn a_helper_forks_from_its_own_twin_and_other_threads_from_the_original() {
        let original = loaded(Twins::for_helpers());
        assert!(Arc::ptr_eq(&original.for_this_thread(), &original));
        let twins = on_a_helper(&original);
        assert_eq!(twins.len(), 2, "the helper ran");
        assert!(Arc::ptr_eq(&twins[0], &twins[1]), "made once, then kept");
        assert!(!Arc::ptr_eq(&twins[0], &original));
        assert!(
            !wasmtime::Engine::same(twins[0].engine.engine(), original.engine.engine()),
            "the twin has an engine of its own"
        );
        assert_eq!(twins[0].config.pool_instances, 4, "under the same config");
        assert_eq!(twins[0].info.path, "empty.wasm");
        assert!(
            twins[0].twins.slots.is_empty(),
            "a twin has no twins of its own"
        );
        // The lane's own thread still forks from the original.
        assert!(Arc::ptr_eq(&original.for_this_thread(), &original));

        let without = loaded(Twins::none());
        let on_helper = on_a_helper(&without);
        assert!(on_helper.iter().all(|l| Arc::ptr_eq(l, &without)));
    }
}
