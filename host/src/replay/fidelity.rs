//! Replay fidelity: how faithfully a restore reproduces captured state.
//! Mirrors `ReplayFidelity`, `_FIDELITY_RANK` and `fidelity_meets` in the
//! reference's `replay_runtime.py`.

use serde::{Deserialize, Serialize};

/// How faithfully a restore reproduces a replay point's captured state,
/// strongest first. Serialises as the reference's names (`exact`,
/// `semantic_equivalent`, `best_effort`, `non_replayable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Byte-for-byte the captured state: equal, non-empty digests.
    Exact,
    /// Equal by at least one explicit adapter check.
    SemanticEquivalent,
    /// Restored without verification; usable for observed-only replays.
    BestEffort,
    /// Cannot be restored: a marker point without an adapter binding.
    NonReplayable,
}

/// Every fidelity, strongest first.
pub const ALL_FIDELITIES: [Fidelity; 4] = [
    Fidelity::Exact,
    Fidelity::SemanticEquivalent,
    Fidelity::BestEffort,
    Fidelity::NonReplayable,
];

impl Fidelity {
    /// The reference's name, e.g. `semantic_equivalent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::SemanticEquivalent => "semantic_equivalent",
            Fidelity::BestEffort => "best_effort",
            Fidelity::NonReplayable => "non_replayable",
        }
    }

    /// Trust rank: `non_replayable` 0, `best_effort` 1,
    /// `semantic_equivalent` 2, `exact` 3 (reference `_FIDELITY_RANK`).
    pub fn rank(self) -> u8 {
        match self {
            Fidelity::NonReplayable => 0,
            Fidelity::BestEffort => 1,
            Fidelity::SemanticEquivalent => 2,
            Fidelity::Exact => 3,
        }
    }

    /// Whether `self` is at least as trustworthy as `required` (reference
    /// `fidelity_meets`).
    pub fn meets(self, required: Fidelity) -> bool {
        self.rank() >= required.rank()
    }

    /// Whether a restore at this fidelity counts as verified
    /// (`semantic_equivalent` or stronger).
    pub fn is_trusted(self) -> bool {
        self.meets(Fidelity::SemanticEquivalent)
    }
}

impl std::fmt::Display for Fidelity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fidelity name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown fidelity {0:?}; expected one of exact, semantic_equivalent, best_effort, non_replayable"
)]
pub struct UnknownFidelity(pub String);

impl std::str::FromStr for Fidelity {
    type Err = UnknownFidelity;

    /// Accepts the reference's names; `-` may stand for `_`
    /// (`semantic-equivalent`, the WIT spelling).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let normalized = text.trim().to_ascii_lowercase().replace('-', "_");
        ALL_FIDELITIES
            .into_iter()
            .find(|fidelity| fidelity.as_str() == normalized)
            .ok_or_else(|| UnknownFidelity(text.to_string()))
    }
}

/// Parse a *minimum* fidelity a caller asks for: any name but
/// `non_replayable`, which no restore can be asked to meet (the reference
/// refuses it for child tasks and failure observations alike).
pub fn parse_minimum(text: &str) -> Result<Fidelity, String> {
    match text.parse::<Fidelity>() {
        Ok(Fidelity::NonReplayable) => Err(
            "non_replayable cannot be a minimum; use exact, semantic_equivalent or best_effort"
                .into(),
        ),
        Ok(fidelity) => Ok(fidelity),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_order_trust() {
        assert!(Fidelity::Exact.meets(Fidelity::SemanticEquivalent));
        assert!(Fidelity::SemanticEquivalent.meets(Fidelity::SemanticEquivalent));
        assert!(!Fidelity::BestEffort.meets(Fidelity::SemanticEquivalent));
        assert!(Fidelity::BestEffort.meets(Fidelity::NonReplayable));
        assert!(!Fidelity::NonReplayable.meets(Fidelity::BestEffort));
        assert!(Fidelity::SemanticEquivalent.is_trusted());
        assert!(!Fidelity::BestEffort.is_trusted());
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for fidelity in ALL_FIDELITIES {
            assert_eq!(fidelity.as_str().parse::<Fidelity>(), Ok(fidelity));
            let json = serde_json::to_string(&fidelity).unwrap();
            assert_eq!(json, format!("\"{fidelity}\""));
        }
        assert_eq!(
            "semantic-equivalent".parse(),
            Ok(Fidelity::SemanticEquivalent)
        );
        let error = "perfect".parse::<Fidelity>().unwrap_err();
        assert!(error.to_string().contains("unknown fidelity \"perfect\""));
        assert_eq!(parse_minimum("best-effort"), Ok(Fidelity::BestEffort));
        assert!(
            parse_minimum("non_replayable")
                .unwrap_err()
                .contains("cannot be a minimum")
        );
        assert!(
            parse_minimum("perfect")
                .unwrap_err()
                .contains("unknown fidelity")
        );
    }
}
