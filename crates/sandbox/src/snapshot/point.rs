//! A replay point frozen as a compiled snapshot ([`SnapshotPoint`]): what
//! a group's children are instances of, and the `snapshot` block of the
//! point's line in `replay-points.jsonl`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::CompiledSnapshot;

/// A replay point frozen as a compiled snapshot, with the token its
/// binding answers to in every child.
pub struct SnapshotPoint {
    /// The compiled snapshot children are instantiated from.
    pub compiled: CompiledSnapshot,
    /// What `binding-token` named the point's binding.
    pub token: u64,
    /// Size of the snapshot component, bytes.
    pub bytes: usize,
    /// Wall milliseconds to take the snapshot (accessor calls and rewrite).
    pub snapshot_ms: f64,
    /// Wall milliseconds to compile it (cache lookup included).
    pub compile_ms: f64,
    /// The point's exported state, when the component's `child-risk`
    /// policy screens the children: each child adopts it as its replay
    /// child, which the policy finds by child id.
    pub risk_state: Option<Arc<Vec<u8>>>,
}

impl SnapshotPoint {
    /// The public `snapshot` block of the point's line in
    /// `replay-points.jsonl`.
    pub fn to_record(&self) -> Value {
        json!({
            "sha256": self.compiled.sha256,
            "bytes": self.bytes,
            "snapshot_ms": self.snapshot_ms,
            "compile_ms": self.compile_ms,
        })
    }
}
