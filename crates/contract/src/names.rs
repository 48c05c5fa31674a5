//! Names both sides rely on: protocol modes, the WIT package and version,
//! and the record fields the host owns.

/// Protocol name of an adapter exporting `replay` (reference
/// `REPLAYABLE_EPISODE_V2_MODE` in `replay_runtime.py`).
pub const REPLAYABLE_EPISODE_MODE: &str = "replayable-v2";
/// Protocol name of an adapter exporting `replay-children` (reference
/// `isolated_replay_child_mode` in `child_replay_runtime.py`).
pub const ISOLATED_CHILD_MODE: &str = "isolated-child-v0";
/// Protocol name of an adapter exporting `child-risk` (reference
/// `replay_child_risk_mode` in `child_replay_runtime.py`).
pub const CHILD_RISK_MODE: &str = "child-risk-v0";
/// Protocol name of an adapter exporting `counterfactual` (the reference's
/// `counterfactual_runtime.py` has no mode name; sandloop's own).
pub const COUNTERFACTUAL_MODE: &str = "counterfactual-v0";

/// The WIT package every interface name is qualified with
/// (`wit/adapter.wit`).
pub const WIT_PACKAGE: &str = "sandloop:adapter";
/// The WIT package version this contract describes; an export of another
/// version is refused by the host.
pub const WIT_VERSION: &str = "0.2.0";

/// Fields only the host may set on a record: an adapter that returns them
/// on a successful record would forge an error (or hide one). The host
/// moves them under `adapter_claimed`, where they are visible but carry no
/// weight.
pub const HOST_OWNED_FIELDS: &[&str] =
    &["adapter_error", "execution_status", "episode_release_error"];
