//! Arm configuration with the reference's defaults (`run_budget_arm`
//! keyword arguments).

use crate::episode::policy::FailurePolicy;

/// How one arm runs. `Default` gives the reference's defaults where it has
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmConfig {
    /// Arm name (`arm_key`). Appears in group ids
    /// (`{arm}:epoch-{epoch}:group-{NNNN}`), call contexts, checkpoints and
    /// summaries. Default `main`.
    pub arm_key: String,
    /// Adapter identity written to the checkpoint's runtime signature
    /// (reference `adapter_type`), e.g. `component:sha256:<hex>`; a resume
    /// with a different value is refused. Default empty.
    pub adapter_type: String,
    /// Queue worker lanes, each with its own adapter instance. Must be at
    /// least 1. Default 1.
    pub worker_count: usize,
    /// Last epoch to run (epochs are numbered from 1). Default 1000.
    pub max_epochs: u32,
    /// Wall-clock budget of the arm in minutes, including time spent before
    /// a resume; `f64::INFINITY` means unlimited. No epoch starts once it is
    /// spent. Must not be NaN or negative. Default unlimited.
    pub budget_minutes: f64,
    /// Maximum variant specs taken from the catalog per epoch; 0 means no
    /// limit. Only used with a variant catalog. Default 0.
    pub frontier_max_lanes: usize,
    /// Seconds lane `i` waits before pulling work (`min(30, i * stagger)`).
    /// Default 0.
    pub stagger_seconds: f64,
    /// Duration guard: no epoch starts when the remaining budget (minutes)
    /// is below the longest of the last `duration_guard_recent` epochs' wall
    /// minutes times this factor; 0 disables the guard. Default 1.15.
    pub duration_guard_factor: f64,
    /// Number of recent epochs the duration guard looks at (at least 1 is
    /// used). Default 3.
    pub duration_guard_recent: usize,
    /// Write a checkpoint after every epoch so the arm can be resumed.
    /// Implied by `resume`. Default false.
    pub checkpoint: bool,
    /// Continue from the output's checkpoint instead of starting fresh.
    /// Default false.
    pub resume: bool,
    /// What happens when an item fails. Default `record`.
    pub item_failure_policy: FailurePolicy,
}

impl Default for ArmConfig {
    fn default() -> Self {
        Self {
            arm_key: "main".to_owned(),
            adapter_type: String::new(),
            worker_count: 1,
            max_epochs: 1000,
            budget_minutes: f64::INFINITY,
            frontier_max_lanes: 0,
            stagger_seconds: 0.0,
            duration_guard_factor: 1.15,
            duration_guard_recent: 3,
            checkpoint: false,
            resume: false,
            item_failure_policy: FailurePolicy::Record,
        }
    }
}

impl ArmConfig {
    /// Whether a checkpoint is written after each epoch (`checkpoint` or
    /// `resume`).
    pub fn checkpoint_enabled(&self) -> bool {
        self.checkpoint || self.resume
    }

    /// Checks the values; `Err` names the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.arm_key.trim().is_empty() {
            return Err("arm_key must not be empty".to_owned());
        }
        if self.worker_count == 0 {
            return Err("worker_count must be at least 1".to_owned());
        }
        if self.budget_minutes.is_nan() || self.budget_minutes < 0.0 {
            return Err(format!(
                "budget_minutes must be a non-negative number of minutes (got {})",
                self.budget_minutes
            ));
        }
        if !self.stagger_seconds.is_finite() || self.stagger_seconds < 0.0 {
            return Err(format!(
                "stagger_seconds must be a finite non-negative number (got {})",
                self.stagger_seconds
            ));
        }
        if !self.duration_guard_factor.is_finite() || self.duration_guard_factor < 0.0 {
            return Err(format!(
                "duration_guard_factor must be a finite non-negative number (got {})",
                self.duration_guard_factor
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_reference_defaults_and_validation_names_the_field() {
        let config = ArmConfig::default();
        assert_eq!(config.max_epochs, 1000);
        assert_eq!(config.duration_guard_factor, 1.15);
        assert_eq!(config.duration_guard_recent, 3);
        assert_eq!(config.item_failure_policy, FailurePolicy::Record);
        assert!(config.budget_minutes.is_infinite());
        assert!(!config.checkpoint_enabled());
        assert!(config.validate().is_ok());
        let resume = ArmConfig {
            resume: true,
            ..ArmConfig::default()
        };
        assert!(resume.checkpoint_enabled());
        for (config, field) in [
            (
                ArmConfig {
                    worker_count: 0,
                    ..ArmConfig::default()
                },
                "worker_count",
            ),
            (
                ArmConfig {
                    budget_minutes: f64::NAN,
                    ..ArmConfig::default()
                },
                "budget_minutes",
            ),
            (
                ArmConfig {
                    budget_minutes: -1.0,
                    ..ArmConfig::default()
                },
                "budget_minutes",
            ),
            (
                ArmConfig {
                    arm_key: " ".into(),
                    ..ArmConfig::default()
                },
                "arm_key",
            ),
            (
                ArmConfig {
                    stagger_seconds: -1.0,
                    ..ArmConfig::default()
                },
                "stagger_seconds",
            ),
            (
                ArmConfig {
                    duration_guard_factor: f64::INFINITY,
                    ..ArmConfig::default()
                },
                "duration_guard_factor",
            ),
        ] {
            let error = config.validate().unwrap_err();
            assert!(error.starts_with(field), "{error}");
        }
    }
}
