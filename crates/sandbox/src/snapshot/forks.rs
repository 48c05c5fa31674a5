//! Which forks a component's replay points allow, checked as `sandloop
//! inspect` reports them.

use std::time::Instant;

use serde::Serialize;

use super::{ForkKind, auto_fork, instrument};
use sandloop_core::episode::adapter::Protocols;

/// How a component's replay points can fork children (`forks` in
/// `sandloop inspect --json`).
#[derive(Clone, Debug, Serialize)]
pub struct ForkSupport {
    /// By state transfer: the component exports `replay` and
    /// `replay-children`.
    pub state: bool,
    /// By snapshot: the component exports `replay` and wizer can
    /// instrument it.
    pub snapshot: bool,
    /// Why a component exporting `replay` cannot be snapshotted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_error: Option<String>,
    /// Wall milliseconds wizer took to instrument the component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instrument_ms: Option<f64>,
    /// What `sandloop run --fork auto` does ([`auto_fork`]); `None` when it
    /// forks nothing, or would snapshot a component wizer refuses.
    pub auto: Option<ForkKind>,
}

impl ForkSupport {
    /// Check the component at `path` (its `bytes`, `None` when they cannot
    /// be read) with `protocols`: a component that exports `replay` is
    /// instrumented with wizer to learn whether snapshot forks work.
    pub fn check(path: &str, bytes: Option<&[u8]>, protocols: &Protocols) -> Self {
        let mut forks = ForkSupport {
            state: protocols.replay && protocols.replay_children,
            snapshot: false,
            snapshot_error: None,
            instrument_ms: None,
            auto: auto_fork(protocols),
        };
        if protocols.replay {
            let started = Instant::now();
            match bytes.map(|bytes| instrument(path, bytes)) {
                Some(Ok(_)) => forks.snapshot = true,
                Some(Err(error)) => forks.snapshot_error = Some(error.to_string()),
                None => forks.snapshot_error = Some("the component file cannot be read".into()),
            }
            forks.instrument_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
        }
        if forks.auto == Some(ForkKind::Snapshot) && !forks.snapshot {
            forks.auto = None;
        }
        forks
    }
}
