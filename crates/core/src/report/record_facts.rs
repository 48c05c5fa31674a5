//! The host-owned facts of one line of `records.jsonl` that the report's
//! figures read ([`RecordFacts`]), as `load.rs` reads them.

/// How a record ran, from its `record_kind` and `replay` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordKind {
    /// `record_kind: shared_prefix`: a group's prepared prefix.
    Prefix,
    /// `record_kind: episode_suffix` run in the group's own instance.
    Suffix,
    /// An `episode_suffix` forked as an isolated child (`replay.isolated`).
    Child,
    /// Anything else (`standalone`, or no `record_kind`).
    Standalone,
}

impl RecordKind {
    /// The label the report shows.
    pub fn label(self) -> &'static str {
        match self {
            RecordKind::Prefix => "prefix",
            RecordKind::Suffix => "suffix",
            RecordKind::Child => "child",
            RecordKind::Standalone => "standalone",
        }
    }
}

/// `adapter_error` of a failed record.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorFacts {
    /// `adapter_error.type` (`deadline`, `memory_limit`, `trap`, ...).
    pub error_type: String,
    /// `adapter_error.kind`, the adapter's own class, when declared.
    pub kind: Option<String>,
    /// `adapter_error.message` (already folded to 240 characters).
    pub message: String,
}

/// How an isolated child ended (a record whose `replay.isolated` is true).
#[derive(Clone, Debug, PartialEq)]
pub enum ChildEnd {
    /// It ran and its outcome was allowed.
    Succeeded,
    /// A risk assessment denied it: `stage` is `intent` or `outcome`,
    /// `policy` the assessment's `policy_id`.
    Denied {
        /// `intent` or `outcome`.
        stage: String,
        /// The denying policy (`""` when not named).
        policy: String,
    },
    /// It failed at `stage` (`fork`, `restore`, `suffix`, ...).
    Failed {
        /// The stage that failed.
        stage: String,
    },
}

/// The host-owned facts of one line of `records.jsonl`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordFacts {
    /// The epoch the record belongs to (by its position in the file
    /// against the epochs' `record_count`s).
    pub epoch: u32,
    /// `item_id` as text.
    pub item_id: String,
    /// `family` as text (`""` when absent).
    pub family: String,
    /// `is_variant`, truthy.
    pub is_variant: bool,
    /// `variant_spec_id` as text, for a variant.
    pub variant_spec_id: Option<String>,
    /// `raw_value` (0 when absent).
    pub raw_value: f64,
    /// `novel_value` (0 when absent).
    pub novel_value: f64,
    /// `duration_minutes` (0 when absent).
    pub duration_minutes: f64,
    /// How it ran.
    pub kind: RecordKind,
    /// The error, when `execution_status` is `adapter_error`.
    pub error: Option<ErrorFacts>,
    /// How the child ended, for an isolated child.
    pub child: Option<ChildEnd>,
    /// `replay.replay_point_id`, when the record ran from a point.
    pub replay_point_id: Option<String>,
    /// `replay.error.message` when that error quarantined the point.
    pub quarantine_reason: Option<String>,
}
