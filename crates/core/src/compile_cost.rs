//! What compiling a component cost and where its code came from, as the
//! run's files record it: [`CacheOutcome`] (the compile cache's answer)
//! and [`SnapshotCompileCost`] (a snapshot replay point loaded again, the
//! `snapshot_compile` block of a `replays.jsonl` or
//! `counterfactuals.jsonl` line). The sandbox fills them in; core only
//! names their shape.

use serde::Serialize;

/// Where a compiled component came from, for reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Loaded from the cache.
    Hit,
    /// Compiled and written to the cache.
    Miss,
    /// Compiled; caching is off or the cache could not be written.
    Uncached,
}

impl CacheOutcome {
    /// The outcome as the run's files write it: `hit`, `miss`, `uncached`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Uncached => "uncached",
        }
    }
}

/// What loading a replay point's snapshot cost: instrumenting the run's
/// component (compile plus instrumentation, ms), whether the instrumented
/// component came from the cache, and compiling the snapshot beside it
/// (ms). Serialised in key order, as the logs hold it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotCompileCost {
    /// Milliseconds to compile the snapshot and build its image.
    pub compile_ms: f64,
    /// Milliseconds to compile and instrument the run's component.
    pub instrument_ms: f64,
    /// Whether the instrumented component came from the cache.
    pub instrumented_cache: CacheOutcome,
}
