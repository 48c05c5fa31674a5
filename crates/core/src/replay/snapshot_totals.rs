//! What a run's snapshot forks cost, summed from `replay-points.jsonl`: the
//! `snapshots` block of `summary.json` and of `sandloop run`'s closing
//! lines.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::durable::{DurableKind, PointLine, load_points};

/// Snapshot totals of a run (`summary.json` `snapshots`). Points are
/// snapshotted when their children are first forked; groups of one item
/// are not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotTotals {
    /// Points snapshotted.
    pub taken: u64,
    /// Points whose snapshot failed.
    pub failed: u64,
    /// Milliseconds spent snapshotting, summed.
    pub snapshot_ms: f64,
    /// Milliseconds spent compiling the snapshot components, summed.
    pub compile_ms: f64,
    /// Bytes of the snapshot components, summed.
    pub bytes: u64,
    /// Bytes of those kept as durable points.
    pub durable_bytes: u64,
    /// The first snapshot error, when one failed.
    pub first_error: Option<String>,
}

impl SnapshotTotals {
    /// The totals of `lines` (a resumed run's earlier epochs included).
    /// A line's `snapshot` block contributes its `snapshot_ms`,
    /// `compile_ms` and `bytes` (a missing or non-numeric value counts 0).
    pub fn of_points(lines: &[PointLine]) -> Self {
        let mut totals = SnapshotTotals::default();
        let number = |block: &Value, key: &str| block.get(key).and_then(Value::as_f64);
        for line in lines {
            if let Some(snapshot) = &line.snapshot {
                totals.taken += 1;
                totals.snapshot_ms += number(snapshot, "snapshot_ms").unwrap_or(0.0);
                totals.compile_ms += number(snapshot, "compile_ms").unwrap_or(0.0);
                totals.bytes += snapshot.get("bytes").and_then(Value::as_u64).unwrap_or(0);
            }
            if let Some(durable) = &line.durable_state
                && durable.kind == DurableKind::Snapshot
            {
                totals.durable_bytes += durable.size_bytes;
            }
            if let Some(error) = &line.snapshot_error {
                totals.failed += 1;
                totals.first_error.get_or_insert_with(|| error.clone());
            }
        }
        totals
    }

    /// The totals of the run at `out` (none readable: all zero).
    pub fn of_run(out: &Path) -> Self {
        Self::of_points(&load_points(out).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::replay::durable::DurableState;
    use crate::replay::durable::tests::line;
    use crate::replay::point::Lifecycle;

    #[test]
    fn totals_sum_snapshots_durable_bytes_and_keep_the_first_error() {
        let mut taken = line("a", Lifecycle::Released);
        taken.snapshot = Some(json!({"snapshot_ms": 1.5, "compile_ms": 20.25, "bytes": 1000}));
        taken.durable_state = Some(DurableState {
            kind: DurableKind::Snapshot,
            file: "replay-points/a.wasm".into(),
            sha256: "ab".into(),
            size_bytes: 1000,
            offset: None,
            items_file: "replay-points/a.items.json".into(),
            items_sha256: "cd".into(),
            items_offset: None,
            items_size_bytes: None,
            binding_token: Some(1),
        });
        let mut also = line("b", Lifecycle::Released);
        also.snapshot = Some(json!({"snapshot_ms": 0.5, "compile_ms": 1.0, "bytes": 24}));
        let mut failed = line("c", Lifecycle::Released);
        failed.snapshot_error = Some("too big".into());
        let mut later = line("d", Lifecycle::Released);
        later.snapshot_error = Some("later".into());
        let totals = SnapshotTotals::of_points(&[
            taken,
            also,
            failed,
            later,
            line("e", Lifecycle::Released),
        ]);
        assert_eq!(
            totals,
            SnapshotTotals {
                taken: 2,
                failed: 2,
                snapshot_ms: 2.0,
                compile_ms: 21.25,
                bytes: 1024,
                durable_bytes: 1000,
                first_error: Some("too big".into()),
            }
        );
        // The keys and number kinds summary.json has always had.
        assert_eq!(
            serde_json::to_value(SnapshotTotals::default()).unwrap(),
            json!({"taken": 0, "failed": 0, "snapshot_ms": 0.0, "compile_ms": 0.0,
                   "bytes": 0, "durable_bytes": 0, "first_error": null})
        );
    }
}
