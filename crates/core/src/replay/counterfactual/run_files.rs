//! The run directory's side of a counterfactual: the failed item's
//! addressable trace, read from `traces/epoch-NNNN.jsonl`, and the
//! `counterfactuals.jsonl` log each `sandloop counterfactual` appends to.

use std::path::Path;

use serde_json::Value;

use super::evaluate::AddressableTrace;
use crate::replay::durable::read_jsonl;

/// `counterfactuals.jsonl`: one line per `sandloop counterfactual` of the
/// run.
pub const COUNTERFACTUALS_FILE: &str = "counterfactuals.jsonl";

/// The events of trace `trace_id` on `branches` (the failed item's branch
/// and the branch it forked from), from the run's `traces/` file of
/// `epoch`.
///
/// Errors: the file cannot be read, or a line of it is not a JSON object,
/// named by file and line. A missing file is an error saying the run kept
/// no trace for that epoch.
pub fn read_addressable_trace(
    run: &Path,
    epoch: u32,
    trace_id: &str,
    branches: Vec<String>,
) -> Result<AddressableTrace, String> {
    let path = run.join("traces").join(format!("epoch-{epoch:04}.jsonl"));
    if !path.is_file() {
        return Err(format!(
            "{} does not exist: the run kept no trace events for epoch {epoch}, so no event \
             can be addressed",
            path.display()
        ));
    }
    let mut events = Vec::new();
    read_jsonl(&path, |event| {
        let text = |key: &str| event.get(key).and_then(Value::as_str);
        if text("trace_id") != Some(trace_id) {
            return Ok(());
        }
        let on_lineage =
            text("branch_id").is_some_and(|branch| branches.iter().any(|b| b == branch));
        if !on_lineage {
            return Ok(());
        }
        let id = text("event_id").ok_or("event_id: missing or not a string")?;
        let sequence = event
            .get("sequence")
            .and_then(Value::as_u64)
            .ok_or("sequence: missing or not a non-negative integer")?;
        events.push((id.to_string(), sequence));
        Ok(())
    })
    .map_err(|error| error.to_string())?;
    Ok(AddressableTrace {
        trace_id: trace_id.to_string(),
        branches,
        events,
    })
}
