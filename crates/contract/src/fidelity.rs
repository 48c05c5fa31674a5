//! Replay fidelity: how faithfully a restore reproduces captured state.
//! Mirrors `ReplayFidelity`, `_FIDELITY_RANK` and `fidelity_meets` in the
//! reference's `replay_runtime.py`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How faithfully a restore reproduces a captured replay point (WIT
/// `types.fidelity`, reference `ReplayFidelity`), strongest first.
///
/// Serialises as the reference's values: `"exact"`, `"semantic_equivalent"`,
/// `"best_effort"`, `"non_replayable"`. Compare strengths with
/// [`Fidelity::meets`], not with `==`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Byte-for-byte the captured state: the report's expected and observed
    /// digests must be present and equal.
    Exact,
    /// Equal by the adapter's explicit checks: the report must carry at
    /// least one [`EquivalenceCheck`](crate::EquivalenceCheck).
    SemanticEquivalent,
    /// A restore was attempted; nothing was verified. The host runs the
    /// suffix but never promotes its result as a verified replay.
    BestEffort,
    /// The state cannot be restored: a marker point without a binding.
    NonReplayable,
}

impl Fidelity {
    /// Every fidelity, strongest first.
    pub const ALL: [Fidelity; 4] = [
        Fidelity::Exact,
        Fidelity::SemanticEquivalent,
        Fidelity::BestEffort,
        Fidelity::NonReplayable,
    ];

    /// Trust rank of the reference's `_FIDELITY_RANK`: `NonReplayable` 0,
    /// `BestEffort` 1, `SemanticEquivalent` 2, `Exact` 3.
    pub fn rank(self) -> u8 {
        match self {
            Fidelity::NonReplayable => 0,
            Fidelity::BestEffort => 1,
            Fidelity::SemanticEquivalent => 2,
            Fidelity::Exact => 3,
        }
    }

    /// True when `self` is at least as trustworthy as `required` (reference
    /// `fidelity_meets`).
    pub fn meets(self, required: Fidelity) -> bool {
        self.rank() >= required.rank()
    }

    /// True for `Exact` and `SemanticEquivalent`: the fidelities whose
    /// report must verify equivalence (`equivalent: true`), and the only
    /// ones a restore counts as verified at.
    pub fn is_trusted(self) -> bool {
        self.meets(Fidelity::SemanticEquivalent)
    }

    /// The reference's spelling (`"semantic_equivalent"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::SemanticEquivalent => "semantic_equivalent",
            Fidelity::BestEffort => "best_effort",
            Fidelity::NonReplayable => "non_replayable",
        }
    }
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fidelity name that does not exist (the text as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFidelity(pub String);

impl fmt::Display for UnknownFidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown fidelity {:?}; expected one of exact, semantic_equivalent, best_effort, non_replayable",
            self.0
        )
    }
}

impl std::error::Error for UnknownFidelity {}

impl std::str::FromStr for Fidelity {
    type Err = UnknownFidelity;

    /// Accepts the reference's names, case-insensitively and trimmed; `-`
    /// may stand for `_` (`semantic-equivalent`, the WIT spelling).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let normalized = text.trim().to_ascii_lowercase().replace('-', "_");
        Fidelity::ALL
            .into_iter()
            .find(|fidelity| fidelity.as_str() == normalized)
            .ok_or_else(|| UnknownFidelity(text.to_string()))
    }
}

/// Parse a *minimum* fidelity a caller asks for: any name but
/// `non_replayable`, which no restore can be asked to meet (the reference
/// refuses it for child tasks and failure observations alike). Errors say
/// which names are accepted.
pub fn parse_minimum(text: &str) -> Result<Fidelity, String> {
    match text.parse::<Fidelity>() {
        Ok(Fidelity::NonReplayable) => Err(
            "non_replayable cannot be a minimum; use exact, semantic_equivalent or best_effort"
                .into(),
        ),
        Ok(fidelity) => Ok(fidelity),
        Err(UnknownFidelity(given)) => Err(format!(
            "unknown minimum fidelity {given:?}; expected one of exact, semantic_equivalent, best_effort"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_order_trust() {
        use Fidelity::*;
        assert!(Exact.meets(SemanticEquivalent) && Exact.meets(Exact));
        assert!(SemanticEquivalent.meets(SemanticEquivalent));
        assert!(!BestEffort.meets(SemanticEquivalent));
        assert!(BestEffort.meets(NonReplayable));
        assert!(NonReplayable.meets(NonReplayable) && !NonReplayable.meets(BestEffort));
        assert!(SemanticEquivalent.is_trusted() && !BestEffort.is_trusted());
    }

    #[test]
    fn names_serialise_as_the_reference_spells_them() {
        let names: Vec<_> = Fidelity::ALL.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            names,
            [
                "exact",
                "semantic_equivalent",
                "best_effort",
                "non_replayable"
            ]
        );
        for fidelity in Fidelity::ALL {
            let json = serde_json::to_string(&fidelity).unwrap();
            assert_eq!(json, format!("\"{fidelity}\""));
            assert_eq!(serde_json::from_str::<Fidelity>(&json).unwrap(), fidelity);
            assert_eq!(fidelity.as_str().parse::<Fidelity>(), Ok(fidelity));
        }
    }

    #[test]
    fn names_parse_leniently_and_unknown_names_are_refused() {
        assert_eq!(
            " Semantic-Equivalent ".parse(),
            Ok(Fidelity::SemanticEquivalent)
        );
        let error = "perfect".parse::<Fidelity>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown fidelity \"perfect\"; expected one of exact, semantic_equivalent, best_effort, non_replayable"
        );
        assert_eq!(parse_minimum("best-effort"), Ok(Fidelity::BestEffort));
        assert!(
            parse_minimum("non_replayable")
                .unwrap_err()
                .contains("cannot be a minimum")
        );
        assert_eq!(
            parse_minimum("perfect").unwrap_err(),
            "unknown minimum fidelity \"perfect\"; expected one of exact, semantic_equivalent, best_effort",
            "a minimum's error offers only the names a minimum accepts"
        );
    }
}
