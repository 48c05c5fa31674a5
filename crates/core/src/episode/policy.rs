//! The item failure policy and the error a `fatal` policy propagates.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::adapter::AdapterError;

/// What happens when one item, unit or lifecycle call fails (reference
/// `ItemFailurePolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailurePolicy {
    /// The failure becomes a structured error record and independent work
    /// keeps running (reference default).
    #[default]
    Record,
    /// The failure stops the arm and is returned as a [`FatalError`].
    Fatal,
}

impl FailurePolicy {
    /// The name written to `item_failure_policy` (`record` or `fatal`).
    pub fn as_str(&self) -> &'static str {
        match self {
            FailurePolicy::Record => "record",
            FailurePolicy::Fatal => "fatal",
        }
    }

    /// True for [`FailurePolicy::Fatal`].
    pub fn is_fatal(&self) -> bool {
        matches!(self, FailurePolicy::Fatal)
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a policy name the way the reference's
/// `_normalize_item_failure_policy` does: case-insensitive, surrounding
/// whitespace ignored, `_` read as `-`.
impl FromStr for FailurePolicy {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "record" => Ok(FailurePolicy::Record),
            "fatal" => Ok(FailurePolicy::Fatal),
            _ => Err(format!(
                "item_failure_policy must be one of: fatal, record (got {value:?})"
            )),
        }
    }
}

/// The failure that stopped work under the `fatal` policy.
///
/// `error` is the primary failure; `cause` is a second failure that happened
/// while cleaning up after it (a failed `release_episode_group`). The
/// reference expresses this as `raise primary from cleanup_error`: the
/// primary stays primary and the cleanup failure rides along as its cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FatalError {
    /// The primary failure (an adapter call, or an invalid unit as
    /// [`super::adapter::ErrorType::InvalidItem`]).
    pub error: AdapterError,
    /// A cleanup failure chained to the primary one, if any.
    pub cause: Option<Box<AdapterError>>,
    /// The unit the arm stopped in, when known: `item "b"`, `item 5`, `an
    /// item without an item_id` or `group "main:epoch-1:group-0003"` (set
    /// by [`crate::harness::execute_work_unit`]; shown before the error).
    pub place: Option<String>,
}

impl FatalError {
    /// A fatal error without a chained cause.
    pub fn new(error: AdapterError) -> Self {
        Self {
            error,
            cause: None,
            place: None,
        }
    }

    /// A fatal error whose cleanup also failed.
    pub fn chained(error: AdapterError, cause: AdapterError) -> Self {
        Self {
            error,
            cause: Some(Box::new(cause)),
            place: None,
        }
    }

    /// The same error, said to have stopped the arm in `place` unless a
    /// place is already known.
    pub fn at(mut self, place: impl FnOnce() -> String) -> Self {
        if self.place.is_none() {
            self.place = Some(place());
        }
        self
    }
}

impl From<AdapterError> for FatalError {
    fn from(error: AdapterError) -> Self {
        Self::new(error)
    }
}

impl fmt::Display for FatalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(place) = &self.place {
            write!(f, "{place}: ")?;
        }
        write!(f, "{}", self.error)?;
        if let Some(cause) = &self.cause {
            write!(f, "; cleanup also failed: {cause}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FatalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_ref()
            .map(|cause| &**cause as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::adapter::ErrorType;
    use std::error::Error;

    #[test]
    fn policy_parsing_normalises_like_the_reference() {
        assert_eq!(" Fatal ".parse::<FailurePolicy>(), Ok(FailurePolicy::Fatal));
        assert_eq!("RECORD".parse::<FailurePolicy>(), Ok(FailurePolicy::Record));
        let err = "retry".parse::<FailurePolicy>().unwrap_err();
        assert!(err.contains("fatal, record"), "{err}");
        assert_eq!(FailurePolicy::default(), FailurePolicy::Record);
        assert_eq!(
            serde_json::to_string(&FailurePolicy::Fatal).unwrap(),
            "\"fatal\""
        );
    }

    #[test]
    fn fatal_error_display_shows_primary_and_chained_cause() {
        let primary = AdapterError::declared("suffix_boom", "suffix failed", false);
        let cleanup = AdapterError::new(ErrorType::Trap, "release trapped");
        let fatal = FatalError::chained(primary.clone(), cleanup.clone());
        let text = fatal.to_string();
        assert!(
            text.starts_with("adapter_error (suffix_boom): suffix failed"),
            "{text}"
        );
        assert!(text.contains("trap: release trapped"), "{text}");
        assert_eq!(fatal.source().unwrap().to_string(), cleanup.to_string());
        let alone = FatalError::new(primary);
        assert!(alone.source().is_none());
        assert!(!alone.to_string().contains("cleanup"));
    }
}
