//! Why a registry operation failed: the stage it came from
//! ([`ReplayStage`]), the cause ([`ReplayCause`]), and any failure of the
//! cleanup that followed ([`ReplayError`]). The reference raises Python
//! exceptions from `replay_runtime.py` (`ReplayRiskRejectedError` among
//! them); here they are one error with a cause.

use super::RISK_DENIED;
use super::point::ReplayRestoreResult;
use crate::episode::adapter::AdapterError;

/// The registry operation an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStage {
    /// Finding the point or checking it is usable.
    Lookup,
    /// Capturing a point.
    Capture,
    /// Rebuilding a point from its durable state in another instance.
    Import,
    /// `restore-replay-state` and the agent-state restore.
    Restore,
    /// `validate-replay-equivalence` and the contract.
    Equivalence,
    /// The suffix itself.
    Suffix,
    /// `finalize-replay-suffix`.
    Finalize,
    /// Releasing the point.
    Release,
    /// The adapter's risk policy on the intent of a replayed suffix
    /// (`sandloop replay`), before anything is restored.
    Intent,
}

impl ReplayStage {
    /// Lower-case name, used in records (`replay_error.stage`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayStage::Lookup => "lookup",
            ReplayStage::Capture => "capture",
            ReplayStage::Import => "import",
            ReplayStage::Restore => "restore",
            ReplayStage::Equivalence => "equivalence",
            ReplayStage::Suffix => "suffix",
            ReplayStage::Finalize => "finalize",
            ReplayStage::Release => "release",
            ReplayStage::Intent => "intent",
        }
    }
}

/// Why a stage failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplayCause {
    /// The adapter returned an error, trapped or hit a limit.
    Adapter(AdapterError),
    /// The adapter broke the replay contract (a lie about fidelity or
    /// digests, a malformed lease).
    Contract(String),
    /// The point cannot be used (unknown, not ready, non-replayable...).
    Unavailable(String),
    /// The host's agent-state store failed.
    AgentState(String),
    /// The adapter's risk policy denied a child's intent or outcome.
    RiskDenied(String),
}

impl ReplayCause {
    /// The error type written beside a failure (`type` of a record's
    /// `replay.error`): the adapter's own error type, else what broke.
    pub fn error_type(&self) -> &str {
        match self {
            ReplayCause::Adapter(adapter) => adapter.error_type.as_str(),
            ReplayCause::Contract(_) => "replay_contract",
            ReplayCause::Unavailable(_) => "replay_unavailable",
            ReplayCause::AgentState(_) => "agent_state",
            ReplayCause::RiskDenied(_) => RISK_DENIED,
        }
    }
}

impl std::fmt::Display for ReplayCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayCause::Adapter(error) => write!(f, "{error}"),
            ReplayCause::Contract(message) => write!(f, "replay contract violated: {message}"),
            ReplayCause::Unavailable(message) => f.write_str(message),
            ReplayCause::AgentState(message) => write!(f, "agent state: {message}"),
            ReplayCause::RiskDenied(message) => f.write_str(message),
        }
    }
}

/// A failed registry operation.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayError {
    /// Where it failed.
    pub stage: ReplayStage,
    /// Why.
    pub cause: ReplayCause,
    /// A second failure on the way out (a finalisation after a failed
    /// suffix, a compensation after a failed capture, the agent release
    /// after a failed adapter release).
    pub also: Option<Box<ReplayError>>,
    /// Whether the point was quarantined (`lifecycle = failed`).
    pub quarantined: bool,
    /// The restore result, when the restore passed before the failure.
    pub restore: Option<Box<ReplayRestoreResult>>,
}

impl ReplayError {
    /// A failure of `stage` for `cause`, with nothing else attached.
    pub fn new(stage: ReplayStage, cause: ReplayCause) -> Self {
        Self {
            stage,
            cause,
            also: None,
            quarantined: false,
            restore: None,
        }
    }

    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            ReplayStage::Lookup,
            ReplayCause::Unavailable(message.into()),
        )
    }

    pub(super) fn contract(stage: ReplayStage, message: impl Into<String>) -> Self {
        Self::new(stage, ReplayCause::Contract(message.into()))
    }

    /// A failure of `stage` because the adapter failed.
    pub fn adapter(stage: ReplayStage, error: AdapterError) -> Self {
        Self::new(stage, ReplayCause::Adapter(error))
    }

    pub(super) fn also(mut self, other: Option<ReplayError>) -> Self {
        self.also = other.map(Box::new);
        self
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.stage.as_str(), self.cause)?;
        if let Some(also) = &self.also {
            write!(f, " (and {also})")?;
        }
        if self.quarantined {
            f.write_str("; the replay point is quarantined")?;
        }
        Ok(())
    }
}

impl std::error::Error for ReplayError {}
