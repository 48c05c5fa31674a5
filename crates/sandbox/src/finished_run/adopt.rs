//! A durable replay point adopted into a fresh instance of the run's
//! component.

use std::sync::Arc;

use sandloop_core::compile_cost::SnapshotCompileCost;
use sandloop_core::finished_run::OfflineError;
use sandloop_core::finished_run::offline::ReplayPlan;
use sandloop_core::replay::durable::DurableKind;
use sandloop_core::replay::{
    MemoryAgentStateStore, ReplayError, ReplayMetricLedger, ReplayPoint, ReplayPointRegistry,
};

use crate::adapter::{
    BindingHandle, WasmAdapter, adopt_durable_point, adopt_snapshot_point, snapshot_replay_adapter,
};
use crate::component::LoadedAdapter;
use crate::snapshot::CompiledSnapshot;

/// The registry a finished-run command adopts its one point into.
pub type OfflineRegistry = ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>;

/// A durable point adopted into a fresh instance, with the registry that
/// holds it and the metric ledger both count into.
pub struct AdoptedPoint {
    /// The instance holding the point's binding.
    pub adapter: WasmAdapter,
    /// For a snapshot point: what loading the snapshot cost, and the
    /// compiled snapshot (its children are instances of it).
    pub snapshot: Option<(SnapshotCompileCost, CompiledSnapshot)>,
    /// The adopted point, or why adoption failed (the command's result,
    /// not its error).
    pub point: Result<ReplayPoint, ReplayError>,
    /// The registry the point is registered in (release it through here).
    pub registry: OfflineRegistry,
    /// The command's replay metrics, the plan's selection already counted.
    pub metrics: Arc<ReplayMetricLedger>,
}

/// Adopt the durable point `plan` names into a fresh adapter of `loaded`,
/// registered in a new registry whose metrics count the plan's selection:
/// by importing its exported `state`, or, for a snapshot point, by
/// resuming its binding in an instance of the snapshot (`state` is then the
/// snapshot component).
///
/// # Errors
/// [`OfflineError::Failed`]: the snapshot cannot be compiled.
pub fn adopt_point(
    loaded: &Arc<LoadedAdapter>,
    plan: &ReplayPlan,
    state: &[u8],
) -> Result<AdoptedPoint, OfflineError> {
    let line = &plan.line;
    let state_file = plan.state_file();
    let metrics = Arc::new(ReplayMetricLedger::new());
    plan.selection.count(&metrics);
    let mut registry = ReplayPointRegistry::new(MemoryAgentStateStore::new(), Arc::clone(&metrics));
    if let (DurableKind::Snapshot, Some(token)) = (state_file.kind, state_file.binding_token) {
        let (mut adapter, cost, compiled) =
            snapshot_replay_adapter(loaded, state, &state_file.sha256).map_err(|error| {
                OfflineError::Failed(format!("cannot load the replay point's snapshot: {error}"))
            })?;
        let point = adopt_snapshot_point(&mut adapter, &mut registry, &line.point, token);
        return Ok(AdoptedPoint {
            adapter,
            snapshot: Some((cost, compiled)),
            point,
            registry,
            metrics,
        });
    }
    let mut adapter = WasmAdapter::new(Arc::clone(loaded), "replay", None);
    let point = adopt_durable_point(
        &mut adapter,
        &mut registry,
        &line.point,
        &line.execution_group_id,
        state,
    );
    Ok(AdoptedPoint {
        adapter,
        snapshot: None,
        point,
        registry,
        metrics,
    })
}
