//! Duration distributions of a run's records (`duration_minutes`, measured
//! by the host): shared prefixes, suffixes, isolated children and
//! standalone records, each as a histogram.

use super::record_facts::{RecordFacts, RecordKind};

/// How many bins a histogram has.
pub const HISTOGRAM_BINS: usize = 16;

/// One bin: values in `[lo, hi)` (the last bin includes `hi`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bin {
    /// Lower edge, minutes.
    pub lo: f64,
    /// Upper edge, minutes.
    pub hi: f64,
    /// Values in the bin.
    pub count: u64,
}

/// A histogram of durations.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// What was measured (`prefix`, `suffix`, `child`, `standalone`).
    pub label: String,
    /// Values counted.
    pub count: u64,
    /// Smallest value, minutes.
    pub min: f64,
    /// Median (lower middle value), minutes.
    pub median: f64,
    /// Largest value, minutes.
    pub max: f64,
    /// Whether the bins are spaced logarithmically (the values span more
    /// than a factor of 20 and are all positive) rather than evenly.
    pub log_scale: bool,
    /// The bins, lowest first; empty without values.
    pub bins: Vec<Bin>,
}

/// A histogram of `values` (minutes, none negative) in `bins` bins.
/// Equal values make one bin.
pub fn histogram(label: &str, values: &[f64], bins: usize) -> Histogram {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let empty = Histogram {
        label: label.to_owned(),
        count: 0,
        min: 0.0,
        median: 0.0,
        max: 0.0,
        log_scale: false,
        bins: Vec::new(),
    };
    let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
        return empty;
    };
    let median = sorted[(sorted.len() - 1) / 2];
    let log_scale = min > 0.0 && max / min > 20.0;
    let bins = if max == min { 1 } else { bins.max(1) };
    let edge = |i: usize| {
        let f = i as f64 / bins as f64;
        if log_scale {
            (min.ln() + f * (max.ln() - min.ln())).exp()
        } else {
            min + f * (max - min)
        }
    };
    let mut out: Vec<Bin> = (0..bins)
        .map(|i| Bin {
            lo: if i == 0 { min } else { edge(i) },
            hi: if i + 1 == bins { max } else { edge(i + 1) },
            count: 0,
        })
        .collect();
    for &value in &sorted {
        let index = out
            .iter()
            .position(|bin| value < bin.hi)
            .unwrap_or(bins - 1);
        out[index].count += 1;
    }
    Histogram {
        count: sorted.len() as u64,
        min,
        median,
        max,
        log_scale,
        bins: out,
        ..empty
    }
}

/// One histogram per kind of record the run has (prefix, suffix, child,
/// standalone, in that order), of its records that succeeded: a failed
/// record's duration is the error charge (at least 0.05 minutes), not how
/// long the call took. Kinds without such records are left out.
pub fn duration_histograms(records: &[RecordFacts]) -> Vec<Histogram> {
    [
        RecordKind::Prefix,
        RecordKind::Suffix,
        RecordKind::Child,
        RecordKind::Standalone,
    ]
    .into_iter()
    .filter_map(|kind| {
        let values: Vec<f64> = records
            .iter()
            .filter(|record| record.kind == kind && record.error.is_none())
            .map(|record| record.duration_minutes)
            .collect();
        (!values.is_empty()).then(|| histogram(kind.label(), &values, HISTOGRAM_BINS))
    })
    .collect()
}
