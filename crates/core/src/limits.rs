//! The limits every adapter or plugin instance runs under, one type for
//! every door they come through: `sandloop run`'s flags, a run's
//! `manifest.json` read back by the finished-run commands, the units a
//! distributed run sends its workers, and a loop's `workflow.toml`.
//!
//! [`SandboxLimits::validate`] is the one bound check; each door names the
//! limit its own way ([`LimitError::key`] is the JSON and TOML key, e.g.
//! `call_timeout_secs`, which `sandloop run` shows as `--call-timeout`).
//! The JSON shape keeps the run manifest's keys: the deadline is
//! `call_timeout_secs`, a number of seconds.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How often the sandbox's epoch advances: a call's deadline is enforced
/// at this granularity, so no deadline may be shorter.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
/// The longest call deadline: one year.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
/// The largest linear-memory limit, MiB (64 GiB: beyond any 32-bit memory
/// and most machines).
pub const MAX_MEMORY_MIB: u64 = 64 * 1024;
/// The largest accepted JSON text of one call, or guest output kept per
/// call, bytes (1 GiB).
pub const MAX_TEXT_BYTES: usize = 1 << 30;
/// The most descriptors one instance may hold open.
pub const MAX_OPEN_FILES: usize = 65_536;
/// Descriptors one instance may hold open through its grants by default.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

/// Limits applied to every instance of an adapter or a plugin.
///
/// Serialises as the run manifest's keys (`max_memory_mib`,
/// `call_timeout_secs` in seconds, `fuel`, `max_output_bytes`,
/// `max_guest_output_bytes`, `max_open_files`); a key that is missing
/// takes its default. Deserialising checks nothing beyond the shapes (a
/// deadline that is no duration at all is refused there): call
/// [`SandboxLimits::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxLimits {
    /// Linear-memory limit of each linear memory of an instance, MiB
    /// (default 512; 1 to [`MAX_MEMORY_MIB`]).
    pub max_memory_mib: u64,
    /// Deadline of one call, enforced by epoch interruption (default 60 s;
    /// [`EPOCH_TICK`] to [`MAX_CALL_TIMEOUT`]). Key `call_timeout_secs`.
    #[serde(
        rename = "call_timeout_secs",
        serialize_with = "seconds_out",
        deserialize_with = "seconds_in"
    )]
    pub call_timeout: Duration,
    /// Fuel per call; `None` leaves fuel unmetered (at least 1 when given).
    pub fuel: Option<u64>,
    /// Largest JSON text accepted from one call, bytes (default 8 MiB; 2
    /// to [`MAX_TEXT_BYTES`]).
    pub max_output_bytes: usize,
    /// Guest stdout + stderr + log bytes kept per call; the rest is counted
    /// and dropped (default 64 KiB; 0 to [`MAX_TEXT_BYTES`]).
    pub max_guest_output_bytes: usize,
    /// Files and directories one instance may hold open through its grants
    /// (default [`DEFAULT_MAX_OPEN_FILES`]; 1 to [`MAX_OPEN_FILES`]).
    pub max_open_files: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            max_memory_mib: 512,
            call_timeout: Duration::from_secs(60),
            fuel: None,
            max_output_bytes: 8 << 20,
            max_guest_output_bytes: 64 << 10,
            max_open_files: DEFAULT_MAX_OPEN_FILES,
        }
    }
}

/// A limit out of its bounds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct LimitError {
    /// The limit's key (`call_timeout_secs`, `max_memory_mib`, ...).
    pub key: &'static str,
    /// What is wrong, with the bound (`must be at most 31536000 seconds
    /// (one year), got 1e20`).
    pub problem: String,
}

impl LimitError {
    fn new(key: &'static str, problem: String) -> Self {
        Self { key, problem }
    }
}

impl SandboxLimits {
    /// Checks every limit against its bounds (the first one out of them).
    ///
    /// # Errors
    /// [`LimitError`] naming the key and the bound.
    pub fn validate(&self) -> Result<(), LimitError> {
        in_range(
            "max_memory_mib",
            self.max_memory_mib,
            1,
            MAX_MEMORY_MIB,
            "MiB",
        )?;
        check_call_timeout(self.call_timeout)?;
        if self.fuel == Some(0) {
            return Err(LimitError::new(
                "fuel",
                "must be at least 1, got 0 (leave it out to run unmetered)".into(),
            ));
        }
        in_range(
            "max_output_bytes",
            self.max_output_bytes as u64,
            2,
            MAX_TEXT_BYTES as u64,
            "bytes",
        )?;
        in_range(
            "max_guest_output_bytes",
            self.max_guest_output_bytes as u64,
            0,
            MAX_TEXT_BYTES as u64,
            "bytes",
        )?;
        in_range(
            "max_open_files",
            self.max_open_files as u64,
            1,
            MAX_OPEN_FILES as u64,
            "",
        )
    }

    /// The deadline of `seconds`, checked against [`EPOCH_TICK`] and
    /// [`MAX_CALL_TIMEOUT`] before it becomes a [`Duration`] (so a huge,
    /// infinite or NaN number is an error, never a panic).
    ///
    /// # Errors
    /// [`LimitError`] for `call_timeout_secs`.
    pub fn call_timeout_from_secs(seconds: f64) -> Result<Duration, LimitError> {
        let min = EPOCH_TICK.as_secs_f64();
        let max = MAX_CALL_TIMEOUT.as_secs_f64();
        if !(seconds.is_finite() && (min..=max).contains(&seconds)) {
            return Err(LimitError::new(
                "call_timeout_secs",
                format!(
                    "must be between {min} seconds (one epoch tick) and {max} seconds \
                     (one year), got {}",
                    shown(seconds)
                ),
            ));
        }
        Ok(Duration::from_secs_f64(seconds))
    }
}

/// `seconds` as a person would write it: plain from 0.0001 to 10^15,
/// else in exponent form (`1e-300`, not three hundred zeros).
fn shown(seconds: f64) -> String {
    if seconds == 0.0 || (1e-4..1e15).contains(&seconds.abs()) || !seconds.is_finite() {
        seconds.to_string()
    } else {
        format!("{seconds:e}")
    }
}

fn check_call_timeout(deadline: Duration) -> Result<(), LimitError> {
    SandboxLimits::call_timeout_from_secs(deadline.as_secs_f64()).map(drop)
}

fn in_range(
    key: &'static str,
    value: u64,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<(), LimitError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    Err(LimitError::new(
        key,
        format!("must be between {min} and {max}{unit}, got {value}"),
    ))
}

fn seconds_out<S: Serializer>(deadline: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(deadline.as_secs_f64())
}

/// A number of seconds that is a duration at all (finite, not negative,
/// not past `Duration::MAX`); the bounds are [`SandboxLimits::validate`]'s.
fn seconds_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let seconds = f64::deserialize(deserializer)?;
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        serde::de::Error::custom(format!(
            "{} is not a number of seconds a deadline can be (at most {} seconds)",
            shown(seconds),
            MAX_CALL_TIMEOUT.as_secs()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_within_bounds_and_keep_the_manifest_keys() {
        let limits = SandboxLimits::default();
        limits.validate().unwrap();
        let json = serde_json::to_value(&limits).unwrap();
        assert_eq!(json["call_timeout_secs"], 60.0);
        assert_eq!(json["max_memory_mib"], 512);
        assert_eq!(json["max_open_files"], 256);
        let back: SandboxLimits = serde_json::from_value(json).unwrap();
        assert_eq!(back, limits);
    }

    #[test]
    fn missing_keys_take_their_defaults() {
        let limits: SandboxLimits =
            serde_json::from_str(r#"{"call_timeout_secs": 2.5, "fuel": 100}"#).unwrap();
        assert_eq!(limits.call_timeout, Duration::from_millis(2500));
        assert_eq!(limits.fuel, Some(100));
        assert_eq!(limits.max_memory_mib, 512);
    }

    #[test]
    fn a_deadline_is_checked_before_it_becomes_a_duration() {
        for bad in [1e20, 1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY, 0.009] {
            let error = SandboxLimits::call_timeout_from_secs(bad).unwrap_err();
            assert_eq!(error.key, "call_timeout_secs");
            assert!(error.problem.len() < 120, "{error}");
            assert!(
                error
                    .problem
                    .contains("between 0.01 seconds (one epoch tick)")
                    && error.problem.contains("31536000 seconds (one year)"),
                "{error}"
            );
        }
        assert_eq!(
            SandboxLimits::call_timeout_from_secs(0.01).unwrap(),
            EPOCH_TICK
        );
        assert_eq!(
            SandboxLimits::call_timeout_from_secs(31_536_000.0).unwrap(),
            MAX_CALL_TIMEOUT
        );
    }

    #[test]
    fn a_huge_deadline_in_json_is_an_error_not_a_panic() {
        let error =
            serde_json::from_str::<SandboxLimits>(r#"{"call_timeout_secs": 1e20}"#).unwrap_err();
        assert!(error.to_string().contains("1e20"), "{error}");
        let limits: SandboxLimits =
            serde_json::from_str(r#"{"call_timeout_secs": 1e-300}"#).unwrap();
        assert_eq!(limits.validate().unwrap_err().key, "call_timeout_secs");
    }

    #[test]
    fn every_limit_is_bounded() {
        type Spoil = fn(&mut SandboxLimits);
        let cases: [(&str, Spoil); 7] = [
            ("max_memory_mib", |l| l.max_memory_mib = 0),
            ("max_memory_mib", |l| l.max_memory_mib = MAX_MEMORY_MIB + 1),
            ("fuel", |l| l.fuel = Some(0)),
            ("max_output_bytes", |l| l.max_output_bytes = 1),
            ("max_guest_output_bytes", |l| {
                l.max_guest_output_bytes = MAX_TEXT_BYTES + 1;
            }),
            ("max_open_files", |l| l.max_open_files = 0),
            ("max_open_files", |l| l.max_open_files = MAX_OPEN_FILES + 1),
        ];
        for (key, spoil) in cases {
            let mut limits = SandboxLimits::default();
            spoil(&mut limits);
            let error = limits.validate().unwrap_err();
            assert_eq!(error.key, key, "{error}");
            assert!(error.problem.contains("got"), "{error}");
        }
    }
}
