//! The reference child runtime's own per-child cost, measured in the same
//! bench run: `reference/children.py` runs the reference's
//! `run_child_group_settled_from` (`child_replay_runtime.py` of
//! `loopx_explore`, found through `SANDLOOP_REFERENCE_DIR` or beside the
//! repository; python3 only) with an in-process no-op child adapter, serial
//! and with its thread-pool "parallel" mode, over groups as large as the
//! bench's.

/// The reference's per-child cost, µs (group wall / children, p50 over
/// its groups).
pub struct Reference {
    /// Serial groups.
    pub serial_us: f64,
    /// `parallel=True, max_workers=2` groups.
    pub parallel_us: f64,
}

/// The median of the numbers in `values` (a JSON array).
fn median_of(values: &serde_json::Value) -> Option<f64> {
    let mut values: Vec<f64> = values
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Run the reference over `batches` groups of `children` per mode, or say
/// why it could not be measured.
pub fn measure(children: usize, batches: usize) -> Result<Reference, String> {
    let (children, batches) = (children.to_string(), batches.to_string());
    let line = super::common_reference::run_script(
        "children.py",
        "child_replay_runtime.py",
        &[children.as_ref(), batches.as_ref()],
    )?;
    match (
        median_of(&line["serial_us"]),
        median_of(&line["parallel_us"]),
    ) {
        (Some(serial_us), Some(parallel_us)) => Ok(Reference {
            serial_us,
            parallel_us,
        }),
        _ => Err("no serial_us / parallel_us in its output".into()),
    }
}
