//! Timing samples shared by the benches: wall times of one kind of call,
//! summarised as mean and quantiles in microseconds.

use std::time::{Duration, Instant};

/// Durations of one kind of measurement.
#[derive(Default)]
pub struct Samples(pub Vec<Duration>);

#[allow(dead_code)] // each bench uses part of it
impl Samples {
    /// Run `body`, recording how long it took.
    pub fn time<R>(&mut self, body: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let result = body();
        self.0.push(started.elapsed());
        result
    }

    /// Add every sample of `other`.
    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    /// Record a duration given in minutes (as the runtimes report them).
    pub fn push_minutes(&mut self, minutes: f64) {
        self.0.push(Duration::from_secs_f64(minutes * 60.0));
    }

    /// Mean, µs (NaN when empty).
    pub fn mean_us(&self) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.iter().map(Duration::as_secs_f64).sum::<f64>() / self.0.len() as f64 * 1e6
    }

    /// Median, µs.
    pub fn p50_us(&self) -> f64 {
        self.quantile_us(0.5)
    }

    /// Quantile `q` (0..=1), µs, nearest rank (NaN when empty).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.0.clone();
        sorted.sort();
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[index].as_secs_f64() * 1e6
    }
}

/// Print a section title.
pub fn header(title: &str) {
    println!("\n{title}");
}
