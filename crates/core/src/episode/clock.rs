//! The host's monotonic clock, injectable so tests never depend on timing.
//!
//! Every duration the runtimes record (`duration_minutes`, `wall_minutes`,
//! `epoch_wall_minutes`, `elapsed_minutes`) is measured through a [`Clock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic time source. Production code uses [`SystemClock`]; tests use
/// [`ManualClock`] and advance it explicitly.
pub trait Clock: Sync {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Minutes elapsed since `start` (never negative).
    fn minutes_since(&self, start: Instant) -> f64 {
        minutes(self.now().saturating_duration_since(start))
    }
}

/// A duration in minutes, as the records carry it.
pub fn minutes(duration: Duration) -> f64 {
    duration.as_secs_f64() / 60.0
}

/// The real monotonic clock ([`Instant::now`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to; shareable across threads.
#[derive(Debug)]
pub struct ManualClock {
    origin: Instant,
    offset_nanos: AtomicU64,
}

impl ManualClock {
    /// A clock standing at its origin.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            offset_nanos: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward by `duration`.
    pub fn advance(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.offset_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Moves the clock forward by `minutes` (fractional minutes allowed).
    pub fn advance_minutes(&self, minutes: f64) {
        self.advance(Duration::from_secs_f64(minutes.max(0.0) * 60.0));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + Duration::from_nanos(self.offset_nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let start = clock.now();
        assert_eq!(clock.minutes_since(start), 0.0);
        clock.advance_minutes(1.5);
        assert!((clock.minutes_since(start) - 1.5).abs() < 1e-9);
        // A start in the future reads as zero elapsed, never negative.
        let later = clock.now() + Duration::from_secs(60);
        assert_eq!(clock.minutes_since(later), 0.0);
    }
}
