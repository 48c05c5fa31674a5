//! Why one adapter call failed: [`AdapterError`], the `adapter_error`
//! object of an error record, and its documented [`ErrorType`]s.

use super::item::Record;

/// Why one adapter call failed. Becomes the `adapter_error` object of an
/// error record (`type`, `message`, and `kind` for adapter-declared errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterError {
    /// The class of failure, decided by the host; see [`ErrorType`].
    pub error_type: ErrorType,
    /// Adapter-chosen class for [`ErrorType::AdapterError`]; empty otherwise.
    pub kind: String,
    /// Human-readable message; error records keep its first 240 characters
    /// with whitespace folded, as the reference does.
    pub message: String,
    /// True when a retry could succeed (`retryable_infra_error`).
    pub retryable_infra_error: bool,
    /// Fields the host attaches to the error record besides the error
    /// itself (e.g. the `replay` block of a failed replayed suffix). They
    /// never replace the record's own fields.
    pub record_fields: Option<Box<Record>>,
}

impl AdapterError {
    /// An error of `error_type` with `message`, not retryable.
    pub fn new(error_type: ErrorType, message: impl Into<String>) -> Self {
        Self {
            error_type,
            kind: String::new(),
            message: message.into(),
            retryable_infra_error: false,
            record_fields: None,
        }
    }

    /// An error the adapter reported on purpose, with its own `kind`.
    pub fn declared(kind: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            error_type: ErrorType::AdapterError,
            kind: kind.into(),
            message: message.into(),
            retryable_infra_error: retryable,
            record_fields: None,
        }
    }
}

impl std::fmt::Display for AdapterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind.is_empty() {
            write!(f, "{}: {}", self.error_type.as_str(), self.message)
        } else {
            write!(
                f,
                "{} ({}): {}",
                self.error_type.as_str(),
                self.kind,
                self.message
            )
        }
    }
}

impl std::error::Error for AdapterError {}

/// The documented set of `adapter_error.type` values. The host decides the
/// type; an adapter can only ever produce `adapter_error` on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// The adapter returned an `adapter-error` (its `kind` is kept).
    AdapterError,
    /// The item or grouping is malformed (reference `ValueError` from
    /// `build_episode_execution_units`): empty or duplicate ids, unknown seed.
    InvalidItem,
    /// The adapter returned something that is not what the contract asks:
    /// JSON that does not parse or is not an object, a prepare result without
    /// a valid prefix record (reference `TypeError`).
    InvalidOutput,
    /// A returned value exceeded the host's output size bound.
    OutputTooLarge,
    /// The call ran past its deadline (`--call-timeout`, epoch interruption).
    Deadline,
    /// The instance hit its linear-memory limit (`--max-memory`).
    MemoryLimit,
    /// The call ran out of fuel (`--fuel`).
    FuelExhausted,
    /// The guest overflowed its stack.
    StackOverflow,
    /// Any other trap (unreachable, out-of-bounds access, ...).
    Trap,
    /// The adapter lacks the export this call needs (e.g. plain `execute`
    /// after an episode-groups-only adapter's prepare returned none).
    MissingExport,
    /// The episode group lived in an instance that was dropped after an
    /// earlier failure, and preparing its prefix again on a fresh instance
    /// failed too.
    InstanceLost,
    /// A fresh instance could not be created.
    Instantiation,
    /// The adapter broke the replay contract (a restore claiming more
    /// fidelity than was captured, digests that disagree, ...) or the
    /// replay point could not be used.
    ReplayContract,
    /// The adapter's risk policy denied an isolated child's intent (it
    /// never ran) or outcome.
    RiskDenied,
}

impl ErrorType {
    /// The snake_case name written to `adapter_error.type`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorType::AdapterError => "adapter_error",
            ErrorType::InvalidItem => "invalid_item",
            ErrorType::InvalidOutput => "invalid_output",
            ErrorType::OutputTooLarge => "output_too_large",
            ErrorType::Deadline => "deadline",
            ErrorType::MemoryLimit => "memory_limit",
            ErrorType::FuelExhausted => "fuel_exhausted",
            ErrorType::StackOverflow => "stack_overflow",
            ErrorType::Trap => "trap",
            ErrorType::MissingExport => "missing_export",
            ErrorType::InstanceLost => "instance_lost",
            ErrorType::Instantiation => "instantiation",
            ErrorType::ReplayContract => "replay_contract",
            ErrorType::RiskDenied => "replay_risk_denied",
        }
    }
}
