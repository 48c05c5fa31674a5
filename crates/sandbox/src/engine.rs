//! The wasmtime [`Engine`]: component model, pooling allocator, epoch
//! interruption for per-call deadlines, optional fuel.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::config::SandboxConfig;
use super::function_cache::FunctionCache;

/// How often the epoch advances; a call's deadline is a number of ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// An engine plus the thread that advances its epoch every `EPOCH_TICK`.
/// Dropping it stops the ticker at once (it waits on a channel, not in a
/// sleep, so a process does not linger up to a tick at exit).
pub struct SandboxEngine {
    engine: Engine,
    /// The engine's Cranelift function cache, when incremental compilation
    /// is on.
    functions: Option<Arc<FunctionCache>>,
    /// Dropped to stop the ticker.
    stop: Option<mpsc::Sender<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl SandboxEngine {
    /// Build an engine for `config`. Errors when wasmtime refuses the
    /// configuration (e.g. the pooling allocator cannot reserve its slots).
    pub fn new(config: &SandboxConfig) -> wasmtime::Result<Self> {
        let memory_bytes = (config.limits.max_memory_mib as usize).saturating_mul(1 << 20);
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(config.limits.fuel.is_some())
            .max_wasm_stack(1 << 20);
        if config.pool_instances > 0 {
            let slots = config.pool_instances;
            let mut pool = PoolingAllocationConfig::default();
            // Every slot can hold a component of the per-component maximum
            // of core instances: a componentize-py component has 14, so
            // `slots * 8` ran out once three of them were live at once.
            pool.total_component_instances(slots)
                .total_core_instances(slots * 32)
                .total_memories(slots * 4)
                .total_tables(slots * 8)
                .max_memories_per_component(8)
                .max_core_instances_per_component(32)
                .max_tables_per_component(16)
                .max_memory_size(memory_bytes)
                .max_component_instance_size(1 << 20)
                .max_core_instance_size(1 << 20)
                .table_elements(100_000)
                .linear_memory_keep_resident(1 << 20)
                // Reset only the pages a dropped instance dirtied (Linux
                // 6.7+; ignored elsewhere) and keep small tables resident:
                // forking a child and dropping it stay cheap.
                .table_keep_resident(64 << 10)
                .pagemap_scan(wasmtime::Enabled::Auto)
                // Calls are synchronous and never run on a fiber: no stack
                // pool (its default of 1000 stacks costs a guard-page
                // `mprotect` each, ~5 ms, at every start).
                .total_stacks(0);
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
                .memory_reservation(memory_bytes.next_power_of_two() as u64);
        }
        let functions = config
            .incremental_compilation
            .then(|| Arc::new(FunctionCache::default()));
        if let Some(functions) = &functions {
            wasm.enable_incremental_compilation(
                Arc::clone(functions) as Arc<dyn wasmtime::CacheStore>
            )?;
        }
        let engine = Engine::new(&wasm)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let ticker = {
            let engine = engine.weak();
            std::thread::Builder::new()
                .name("sandloop-epoch".into())
                .spawn(move || {
                    // A tick each time the wait times out; the sender's drop
                    // ends the wait (and the thread) at once.
                    while let Err(mpsc::RecvTimeoutError::Timeout) =
                        stopped.recv_timeout(EPOCH_TICK)
                    {
                        match engine.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => break,
                        }
                    }
                })
                .map_err(wasmtime::Error::from)?
        };
        Ok(Self {
            engine,
            functions,
            stop: Some(stop),
            ticker: Some(ticker),
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine's Cranelift function cache, when the config turned on
    /// incremental compilation.
    pub fn function_cache(&self) -> Option<&Arc<FunctionCache>> {
        self.functions.as_ref()
    }

    /// Epoch ticks for a deadline of `seconds` (at least one tick).
    pub fn deadline_ticks(seconds: f64) -> u64 {
        let ticks = (seconds.max(0.0) * 1000.0 / EPOCH_TICK.as_millis() as f64).ceil();
        (ticks as u64).max(1)
    }
}

impl Drop for SandboxEngine {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}
