//! The `child-risk` screen of `sandloop replay`: before a replayed suffix
//! runs, the adapter's policy judges its intent as it judged the item's
//! child in the run (reference `RiskAwareReplayChildAdapter`: a denied
//! intent never runs). The policy finds the child it judges by id, so a
//! fresh instance of the component adopts the point's exported state as
//! that child (`fork-replay-child` under the item's id), is asked
//! `assess-replay-child-intent`, releases the child and is dropped.

use std::sync::Arc;

use serde_json::Value;

use super::child_instance::ChildInstance;
use super::{BindingHandle, Live, WasmAdapter};
use crate::LoadedAdapter;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Item};
use sandloop_core::replay::Fidelity;
use sandloop_core::replay::{
    ForkAt, ForkRequest, MemoryAgentStateStore, ReplayCause, ReplayError, ReplayPoint,
    ReplayPointRegistry, ReplayStage, RiskAssessment, RiskAssessmentRules, intent_of,
};

/// Whether `loaded`'s policy screens replayed intents: it exports
/// `child-risk` (and `replay-children`, which the policy's child needs).
pub fn screens_replay_intent(loaded: &LoadedAdapter) -> bool {
    loaded.indices.child_risk.is_some() && loaded.indices.replay_children.is_some()
}

/// The adapter's verdict on replaying `item` from `point`, whose exported
/// state is `state`: `request` names the child (the item's id), `ctx` is
/// the group's context. Runs in a fresh instance of `loaded` in this
/// process's sandbox; the caller refuses a [`Disposition::Deny`](sandloop_core::replay::Disposition::Deny).
///
/// Errors: the component does not screen ([`screens_replay_intent`]), the
/// fork or the assessment failed or trapped, or the assessment is malformed
/// (a blank `policy_id`, a reason that is not public-safe).
pub fn screen_replay_intent(
    loaded: &Arc<LoadedAdapter>,
    point: &ReplayPoint,
    state: &[u8],
    request: &ForkRequest,
    ctx: &CallContext,
    item: &Item,
) -> Result<RiskAssessment, AdapterError> {
    if !screens_replay_intent(loaded) {
        return Err(WasmAdapter::missing(
            "child-risk.assess-replay-child-intent",
        ));
    }
    let parent = WasmAdapter::new(Arc::clone(loaded), "replay", None);
    let fork_at = ForkAt {
        trace_id: point.cursor.trace_id.clone(),
        created_event_id: point.created_event_id.clone(),
        next_sequence: point.cursor.next_sequence + 1,
    };
    let mut screen = ChildInstance::new(&parent, loaded, ctx, request, &fork_at);
    let child = screen.adapter.fork_replay_child(state, request)?.child;
    let assessment = screen.assess(&intent_of(item), None)?;
    // Best effort: the instance, child included, is dropped right after.
    let _ = screen.call(
        "release-replay-child",
        false,
        Live::replay_children,
        |children, store| children.call_release_replay_child(store, child),
    );
    assessment
        .check()
        .map_err(|message| AdapterError::new(ErrorType::ReplayContract, message))?;
    Ok(assessment)
}

/// The adapter's `child-risk` verdict on replaying `item` from the adopted
/// `point` (at the replay's `minimum` fidelity), `None` when the component
/// does not export the policy. The point's state is exported from its
/// adopted binding in `adapter` (an imported state or a resumed snapshot
/// alike), and the policy judges in a fresh instance of `loaded` that
/// adopts it as the item's child. Errors (stage `intent`): the state
/// cannot be exported, or the screen failed; the replay is then refused,
/// never run unscreened.
pub fn screen_adopted_intent(
    loaded: &Arc<LoadedAdapter>,
    adapter: &mut WasmAdapter,
    registry: &ReplayPointRegistry<BindingHandle, MemoryAgentStateStore>,
    point: &ReplayPoint,
    item: &Item,
    ctx: &CallContext,
    minimum: Fidelity,
) -> Result<Option<RiskAssessment>, ReplayError> {
    if !screens_replay_intent(loaded) {
        return Ok(None);
    }
    let failed = |error| ReplayError::adapter(ReplayStage::Intent, error);
    let refused = |why: &str| {
        ReplayError::new(
            ReplayStage::Intent,
            ReplayCause::Unavailable(format!(
                "the adapter's child-risk policy cannot screen this replay: {why}"
            )),
        )
    };
    let binding = *registry
        .binding(&point.replay_point_id)
        .ok_or_else(|| refused("the point has no binding"))?;
    let state = adapter
        .export_replay_state(&binding)
        .map_err(failed)?
        .ok_or_else(|| refused("export-replay-state gave none"))?;
    let item_id = item
        .get("item_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let request = ForkRequest {
        replay_point_id: point.replay_point_id.clone(),
        child_id: item_id.clone(),
        target_branch_id: item_id,
        minimum_fidelity: minimum,
    };
    screen_replay_intent(loaded, point, &state, &request, ctx, item)
        .map(Some)
        .map_err(failed)
}
