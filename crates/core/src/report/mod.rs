//! `sandloop report`'s model: a run directory read into typed figures
//! (the novelty curve, value by family and the catalog's yield, execution
//! economics, errors by class, replay, counterfactual fixes, duration
//! distributions, the manifest), and several runs compared as arms. Pure
//! functions over the run's files; [`html`] renders them as one
//! self-contained page.
//!
//! Every figure comes from the run directory's files alone
//! (`summary.json`, `manifest.json`, `epochs.jsonl`, `records.jsonl`,
//! `replay-points.jsonl`, `replays.jsonl`, `counterfactuals.jsonl`), so
//! the report of a resumed run is the report of the same run made in one
//! go.
//!
//! ```no_run
//! # use sandloop_core::report::*;
//! let run = RunReport::load(std::path::Path::new("runs/main"))?;
//! std::fs::write("runs/main/report.html", html::render_run(&run, &html::Drawing::now()))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod arms;
pub(crate) mod counterfactuals;
pub(crate) mod durations;
pub(crate) mod economics;
pub(crate) mod error;
pub(crate) mod errors;
pub(crate) mod escape;
pub(crate) mod families;
pub mod guest_output;
pub(crate) mod head;
pub mod html;
mod html_parts;
mod html_sections;
pub(crate) mod load;
pub(crate) mod novelty;
pub(crate) mod record_facts;
pub(crate) mod replay;
pub(crate) mod svg;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::harness::RunManifest;

pub use arms::{ArmRow, ArmsComparison, aggregate_arms};
pub use counterfactuals::CounterfactualFigures;
pub use durations::{Histogram, duration_histograms};
pub use economics::EpochEconomics;
pub use error::ReportError;
pub use errors::{ErrorClass, errors_by_class};
pub use families::{FamilyValue, SpecYield};
pub use head::{RunHead, RunState};
pub use load::{RunFiles, load_run};
pub use novelty::{NoveltyCurve, step_auc};
pub use replay::ReplayFigures;

/// Every figure of one run's report.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run directory.
    pub dir: PathBuf,
    /// The headline figures and how far the run got (a run without
    /// `summary.json` is partial).
    pub head: RunHead,
    /// `manifest.json`.
    pub manifest: RunManifest,
    /// Novel value and coverage per epoch.
    pub novelty: NoveltyCurve,
    /// Raw and novel value per family.
    pub families: Vec<FamilyValue>,
    /// The catalog's yield per seed family (empty without a catalog).
    pub spec_yield: Vec<SpecYield>,
    /// Execution economics per epoch.
    pub economics: Vec<EpochEconomics>,
    /// Failed records by error class.
    pub errors: Vec<ErrorClass>,
    /// Replay points, children and offline replays.
    pub replay: ReplayFigures,
    /// `sandloop counterfactual` outcomes; `None` when the run has no
    /// `counterfactuals.jsonl`.
    pub counterfactuals: Option<CounterfactualFigures>,
    /// Record durations per kind.
    pub durations: Vec<Histogram>,
    /// The summary's `distributed` block, when a distributed run wrote
    /// one (units per worker); `None` for every local run.
    pub distributed: Option<Map<String, Value>>,
}

/// Refuses an existing run directory given twice, under any spelling: a
/// run compared with itself is a slip, not two arms. A directory that
/// cannot be resolved is left to [`RunReport::load`], which names the file
/// it lacks.
///
/// # Errors
/// The two spellings of the same directory.
pub fn check_distinct_runs(dirs: &[PathBuf]) -> Result<(), String> {
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for dir in dirs {
        let Ok(same) = std::fs::canonicalize(dir) else {
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(seen, _)| *seen == same) {
            return Err(format!(
                "{} and {} are the same run directory; give each run once (arms are different runs)",
                first.display(),
                dir.display()
            ));
        }
        seen.push((same, dir));
    }
    Ok(())
}

impl RunReport {
    /// Reads the run directory `dir` and computes every figure.
    ///
    /// Errors: see [`load_run`].
    pub fn load(dir: &Path) -> Result<Self, ReportError> {
        Ok(Self::of_files(load_run(dir)?))
    }

    /// Computes every figure of a run already read.
    pub fn of_files(files: RunFiles) -> Self {
        Self {
            novelty: NoveltyCurve::of_run(&files.head.checkpoints, &files.epochs, &files.records),
            families: families::value_by_family(&files.records),
            spec_yield: families::spec_yield(&files.epochs, &files.records),
            economics: economics::per_epoch(&files.epochs, &files.records),
            errors: {
                let mut classes = errors_by_class(&files.records);
                guest_output::attach(&files.dir, &mut classes);
                classes
            },
            replay: replay::replay_figures(files.points.as_deref(), &files.records, &files.replays),
            counterfactuals: files.counterfactuals.map(CounterfactualFigures::of_lines),
            durations: duration_histograms(&files.records),
            distributed: files.head.distributed.clone(),
            dir: files.dir,
            head: files.head,
            manifest: files.manifest,
        }
    }

    /// The run directory's last path component (the whole path if none).
    pub fn dir_name(&self) -> String {
        self.dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.dir.display().to_string())
    }
}
