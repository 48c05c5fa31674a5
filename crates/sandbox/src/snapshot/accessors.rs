//! wizer's view of a parent instance: its accessor functions called as
//! ordinary synchronous wasmtime calls.

use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Instance, Lift, WasmList};
use wasmtime_wizer::ComponentInstanceState;

use crate::host_state::HostState;

/// wizer's view of the parent: calls the accessor functions of
/// [`WIZER_INSTANCE`](super::WIZER_INSTANCE) synchronously and returns
/// ready futures. wizer's trait has no error channel, so the first failure is kept (the failing
/// accessor and wasmtime's error) and every later accessor returns a
/// placeholder (zero, an empty memory) without calling the guest; the
/// caller reports the failure and throws the rewritten bytes away.
pub(super) struct Accessors<'a> {
    pub(super) store: &'a mut Store<HostState>,
    pub(super) instance: Instance,
    pub(super) failure: Option<(String, wasmtime::Error)>,
    pub(super) calls: u32,
    pub(super) memory_calls: u32,
    pub(super) elapsed: Duration,
    pub(super) memory_bytes: u64,
}

impl Accessors<'_> {
    /// Call `instance#func: func() -> R` on the parent and hand its result
    /// to `use_ret`; on failure record it and return `fallback()`.
    fn call<R, O>(
        &mut self,
        instance: &str,
        func: &str,
        use_ret: impl FnOnce(&Store<HostState>, R) -> O,
        fallback: impl FnOnce() -> O,
    ) -> O
    where
        R: Lift + 'static,
    {
        if self.failure.is_some() {
            return fallback();
        }
        let started = Instant::now();
        self.calls += 1;
        let result = (|| -> wasmtime::Result<R> {
            let store = &mut *self.store;
            let parent = self
                .instance
                .get_export_index(&mut *store, None, instance)
                .ok_or_else(|| {
                    wasmtime::format_err!("the instance exports no `{instance}` instance")
                })?;
            let index = self
                .instance
                .get_export_index(&mut *store, Some(&parent), func)
                .ok_or_else(|| {
                    wasmtime::format_err!("`{instance}` exports no function `{func}`")
                })?;
            let typed = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *store, &index)?;
            // No `post_return`: wasmtime 48 runs it inside `call`.
            let (value,) = typed.call(&mut *store, ())?;
            Ok(value)
        })();
        let out = match result {
            Ok(value) => use_ret(self.store, value),
            Err(error) => {
                self.failure = Some((format!("{instance}#{func}"), error));
                fallback()
            }
        };
        self.elapsed += started.elapsed();
        out
    }
}

impl ComponentInstanceState for Accessors<'_> {
    fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) -> impl Future<Output = ()> + Send {
        // `contents` is called exactly once either way: wizer records the
        // memory's size from it.
        let contents = std::cell::Cell::new(Some(contents));
        let mut read = 0u64;
        self.call(
            instance,
            func,
            |store, list: WasmList<u8>| {
                let bytes = list.as_le_slice(store);
                read = bytes.len() as u64;
                if let Some(contents) = contents.take() {
                    contents(bytes);
                }
            },
            || (),
        );
        if let Some(contents) = contents.take() {
            contents(&[]);
        }
        self.memory_bytes += read;
        self.memory_calls += 1;
        std::future::ready(())
    }

    fn call_func_ret_s32(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = i32> + Send {
        std::future::ready(self.call(instance, func, |_, value: i32| value, || 0))
    }

    fn call_func_ret_s64(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = i64> + Send {
        std::future::ready(self.call(instance, func, |_, value: i64| value, || 0))
    }

    fn call_func_ret_f32(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = u32> + Send {
        std::future::ready(self.call(instance, func, |_, value: f32| value.to_bits(), || 0))
    }

    fn call_func_ret_f64(
        &mut self,
        instance: &str,
        func: &str,
    ) -> impl Future<Output = u64> + Send {
        std::future::ready(self.call(instance, func, |_, value: f64| value.to_bits(), || 0))
    }
}
