//! [`GroupId`]: the `execution_group_id` the host gives each episode group,
//! `{arm}:epoch-{epoch}:group-{NNNN}`.
//!
//! The host writes it into every record of a group (`records.jsonl`), call
//! contexts and traces; `sandloop replay` reads the epoch back from it.

use std::fmt;
use std::str::FromStr;

/// Separator between the arm and the epoch.
const EPOCH_SEPARATOR: &str = ":epoch-";
/// Separator between the epoch and the group number.
const GROUP_SEPARATOR: &str = ":group-";

/// An episode group's id: arm name, epoch, and the group's number in the
/// epoch's queue order (from 1).
///
/// Displayed as `{arm}:epoch-{epoch}:group-{group:04}` (the group number
/// zero-padded to four digits, more when larger). Parsed from the right, so
/// an arm name may itself contain `:epoch-` or `:group-`; the group number
/// is read with or without padding, so `main:epoch-2:group-1` parses to the
/// same id as `main:epoch-2:group-0001`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId {
    /// The arm name (`arm_key`); never empty.
    pub arm: String,
    /// The 1-based epoch the group ran in.
    pub epoch: u32,
    /// The group's number within the epoch, from 1 in queue order.
    pub group: u32,
}

impl GroupId {
    /// The id of group `group` of `epoch` in arm `arm`.
    pub fn new(arm: impl Into<String>, epoch: u32, group: u32) -> Self {
        Self {
            arm: arm.into(),
            epoch,
            group,
        }
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{EPOCH_SEPARATOR}{}{GROUP_SEPARATOR}{:04}",
            self.arm, self.epoch, self.group
        )
    }
}

/// Why a string is not a [`GroupId`]; the message quotes the string and
/// names the part at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupIdError {
    /// No `:group-` part.
    #[error("group id {0:?} has no \":group-NNNN\" part (expected ARM:epoch-N:group-NNNN)")]
    NoGroup(String),
    /// No `:epoch-` part before `:group-`.
    #[error("group id {0:?} has no \":epoch-N\" part (expected ARM:epoch-N:group-NNNN)")]
    NoEpoch(String),
    /// Nothing before `:epoch-`.
    #[error("group id {0:?} has an empty arm name")]
    EmptyArm(String),
    /// The epoch or group number is not a decimal integer that fits in 32
    /// bits.
    #[error("group id {id:?}: {part} {text:?} is not a non-negative decimal integer")]
    Number {
        /// The whole id.
        id: String,
        /// `epoch` or `group`.
        part: &'static str,
        /// The text found.
        text: String,
    },
}

/// `text` as a number: ASCII digits only (no sign, no spaces).
fn number(id: &str, part: &'static str, text: &str) -> Result<u32, GroupIdError> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse().ok())
        .flatten()
        .ok_or_else(|| GroupIdError::Number {
            id: id.to_owned(),
            part,
            text: text.to_owned(),
        })
}

impl FromStr for GroupId {
    type Err = GroupIdError;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        let (rest, group) = id
            .rsplit_once(GROUP_SEPARATOR)
            .ok_or_else(|| GroupIdError::NoGroup(id.to_owned()))?;
        let (arm, epoch) = rest
            .rsplit_once(EPOCH_SEPARATOR)
            .ok_or_else(|| GroupIdError::NoEpoch(id.to_owned()))?;
        if arm.is_empty() {
            return Err(GroupIdError::EmptyArm(id.to_owned()));
        }
        Ok(Self {
            arm: arm.to_owned(),
            epoch: number(id, "epoch", epoch)?,
            group: number(id, "group", group)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn displays_the_reference_layout_and_parses_it_back() {
        let id = GroupId::new("main", 3, 1);
        assert_eq!(id.to_string(), "main:epoch-3:group-0001");
        assert_eq!("main:epoch-3:group-0001".parse::<GroupId>(), Ok(id));
        assert_eq!(
            GroupId::new("a", 1, 12345).to_string(),
            "a:epoch-1:group-12345"
        );
        assert_eq!(
            "main:epoch-2:group-0".parse::<GroupId>(),
            Ok(GroupId::new("main", 2, 0)),
            "unpadded numbers parse"
        );
        assert_eq!(
            "x:epoch-9:group-2:epoch-4:group-0007".parse::<GroupId>(),
            Ok(GroupId::new("x:epoch-9:group-2", 4, 7)),
            "parsed from the right"
        );
    }

    #[test]
    fn errors_say_which_part_is_wrong() {
        let cases = [
            ("main:epoch-3", "has no \":group-NNNN\" part"),
            ("main:group-0001", "has no \":epoch-N\" part"),
            (":epoch-1:group-0001", "has an empty arm name"),
            ("main:epoch-x:group-0001", "epoch \"x\" is not"),
            ("main:epoch-:group-0001", "epoch \"\" is not"),
            ("main:epoch--1:group-0001", "epoch \"-1\" is not"),
            ("main:epoch-1:group-00a1", "group \"00a1\" is not"),
            (
                "main:epoch-1:group-99999999999",
                "group \"99999999999\" is not",
            ),
        ];
        for (text, expected) in cases {
            let error = text.parse::<GroupId>().unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.contains(&format!("{text:?}")), "{text}: {error}");
        }
    }

    proptest! {
        #[test]
        fn prop_group_id_display_then_parse_is_the_identity(
            arm in "[a-z:\\-0-9]{1,24}",
            epoch in any::<u32>(),
            group in any::<u32>(),
        ) {
            let id = GroupId::new(arm, epoch, group);
            prop_assert_eq!(id.to_string().parse::<GroupId>(), Ok(id));
        }

        #[test]
        fn prop_group_id_parse_never_panics_and_canonical_text_round_trips(
            text in "[a-z:\\-0-9]{0,40}",
        ) {
            if let Ok(id) = text.parse::<GroupId>() {
                prop_assert_eq!(id.to_string().parse::<GroupId>(), Ok(id));
            }
        }
    }
}
