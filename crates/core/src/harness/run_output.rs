//! The shapes `sandloop run` writes about itself besides the run's own
//! files: every option of an invocation as `manifest.json` records it, and
//! what `run --json` prints when the run ends or fails.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::error_tally::ErrorCounts;
use super::run_files::RunFailure;
use super::summary::ArmSummary;
use crate::episode::policy::FailurePolicy;

/// Every option of one `sandloop run` invocation by its long name, as
/// [`super::manifest::Invocation::options`] records it. Paths are as
/// given (relative to the invocation's `cwd`); limits are in the units of
/// [`crate::limits::SandboxLimits`]'s keys. `sandloop replay` and
/// `counterfactual` read the limits, grants and environment back from here.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunOptions {
    /// `--adapter`.
    pub adapter: PathBuf,
    /// `--out`.
    pub out: PathBuf,
    /// `--items`, when given.
    pub items: Option<PathBuf>,
    /// `--variants`, when given.
    pub variants: Option<PathBuf>,
    /// `--variant-lanes`.
    pub variant_lanes: usize,
    /// `--epochs`.
    pub epochs: u32,
    /// `--budget-minutes`, when given.
    pub budget_minutes: Option<f64>,
    /// `--workers`.
    pub workers: usize,
    /// `--failure-policy`.
    pub failure_policy: FailurePolicy,
    /// `--arm`.
    pub arm: String,
    /// `--max-memory`, MiB.
    pub max_memory_mib: u64,
    /// `--call-timeout`, seconds.
    pub call_timeout_secs: f64,
    /// `--fuel`, when given.
    pub fuel: Option<u64>,
    /// `--dir` grants, `HOST[::GUEST][:ro]` as given.
    pub dirs: Vec<String>,
    /// `--env` names, as given.
    pub env: Vec<String>,
    /// `--max-output`, bytes.
    pub max_output_bytes: usize,
    /// `--max-open-files`.
    pub max_open_files: usize,
    /// Whether compiled components were cached (no `--no-cache`).
    pub cache: bool,
    /// `--no-replay`.
    pub no_replay: bool,
    /// `--replay-min-fidelity`, as given.
    pub replay_min_fidelity: String,
    /// `--child-workers`.
    pub child_workers: usize,
    /// `--fork`: `auto`, `state` or `snapshot`.
    pub fork: &'static str,
    /// A distributed run's server; absent from a local run's options.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsOptions>,
}

/// The options only a `--nats` run records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NatsOptions {
    /// The server's URL, credentials in it removed.
    pub nats: String,
    /// `--nats-creds`, when given.
    pub nats_creds: Option<PathBuf>,
    /// `--nats-wait`, seconds.
    pub nats_wait_secs: u64,
}

impl RunOptions {
    /// The options as the manifest's JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self).expect("the options serialise") {
            Value::Object(map) => map,
            _ => unreachable!("a struct serialises to an object"),
        }
    }
}

/// The component a `run --json` output names.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RunAdapter<'a> {
    /// The path it was loaded from, as given.
    pub path: &'a str,
    /// sha256 of its bytes, lowercase hex.
    pub sha256: &'a str,
    /// The protocols it exports.
    pub protocols: &'a [&'static str],
}

/// What `run --json` prints when the run finished: the arm summary, the
/// run's `error_count` and `errors_by_type`, and the `adapter`.
#[derive(Debug, Serialize)]
pub struct RunFinished<'a> {
    /// The arm's summary, its fields at the top level.
    #[serde(flatten)]
    pub summary: &'a ArmSummary,
    /// The run's failures, at the top level.
    #[serde(flatten)]
    pub errors: &'a ErrorCounts,
    /// The component that ran.
    pub adapter: RunAdapter<'a>,
}

/// What `run --json` prints when the run fails after it began: the
/// `failure.json` it wrote, the run directory, and the failures counted
/// until then.
#[derive(Debug, Serialize)]
pub struct RunFailed<'a> {
    /// `failure.json`'s content.
    pub failure: &'a RunFailure,
    /// The run directory.
    pub out: &'a Path,
    /// The run's failures so far, at the top level.
    #[serde(flatten)]
    pub errors: &'a ErrorCounts,
}

/// `value` as indented JSON with every object's keys in name order (the
/// order `run --json` has always printed).
pub fn sorted_pretty_json(value: &impl Serialize) -> String {
    let value = serde_json::to_value(value).expect("the output serialises");
    serde_json::to_string_pretty(&value).expect("a JSON value prints")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> RunOptions {
        RunOptions {
            adapter: "a.wasm".into(),
            out: "run".into(),
            items: None,
            variants: Some("v.jsonl".into()),
            variant_lanes: 2,
            epochs: 3,
            budget_minutes: None,
            workers: 2,
            failure_policy: FailurePolicy::Record,
            arm: "main".into(),
            max_memory_mib: 256,
            call_timeout_secs: 10.0,
            fuel: None,
            dirs: vec!["data::/data:ro".into()],
            env: vec!["HOME".into()],
            max_output_bytes: 1 << 20,
            max_open_files: 64,
            cache: true,
            no_replay: false,
            replay_min_fidelity: "exact".into(),
            child_workers: 1,
            fork: "auto",
            nats: None,
        }
    }

    #[test]
    fn a_local_run_records_no_nats_keys_and_a_distributed_one_records_three() {
        let local = options().to_map();
        assert_eq!(local.len(), 22);
        assert!(!local.contains_key("nats"));
        assert_eq!(local["failure_policy"], "record");
        assert_eq!(local["items"], Value::Null);
        let distributed = RunOptions {
            nats: Some(NatsOptions {
                nats: "nats://host:4222".into(),
                nats_creds: None,
                nats_wait_secs: 30,
            }),
            ..options()
        }
        .to_map();
        assert_eq!(distributed.len(), 25);
        assert_eq!(distributed["nats"], "nats://host:4222");
        assert_eq!(distributed["nats_wait_secs"], 30);
    }

    #[test]
    fn a_failure_prints_with_its_counts_at_the_top_level_in_key_order() {
        let failure = RunFailure::new("disk full");
        let errors = ErrorCounts {
            error_count: 1,
            errors_by_type: [("trap".to_owned(), 1)].into(),
        };
        let text = sorted_pretty_json(&RunFailed {
            failure: &failure,
            out: Path::new("run"),
            errors: &errors,
        });
        let keys: Vec<usize> = [
            "\"error_count\"",
            "\"errors_by_type\"",
            "\"failure\"",
            "\"out\"",
        ]
        .iter()
        .map(|key| text.find(key).unwrap_or_else(|| panic!("{key} in {text}")))
        .collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
    }
}
