//! `sandloop run`: the flags as a [`RunRequest`], the run made by
//! [`launch::run`] with progress on stderr (`Progress`, the terminal's
//! [`RunObserver`]), then the closing summary.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use super::args::{RunArgs, SandboxArgs};
use super::compile_notice::while_compiling;
use super::{CliError, run_distributed, say};
use crate::distributed::Dispatcher;
use crate::harness::arm::ArmEvent;
use crate::harness::error_tally::ErrorTally;
use crate::harness::run_output::{
    NatsOptions, RunAdapter, RunFailed, RunFinished, RunOptions, sorted_pretty_json,
};
use crate::launch::{
    self, LaunchError, NatsRequest, OpenedRun, RunObserver, RunOutcome, RunRequest, RunStopped,
};
use crate::replay::ReplayMetricLedger;
use crate::replay::metrics::{ReplayCount, ReplayMinutes};
use crate::replay::snapshot_totals::SnapshotTotals;
use crate::sandbox::{DirGrant, SandboxConfig};
use sandloop_core::limits::{LimitError, SandboxLimits};

/// Build the sandbox configuration from the flags (exit 2 on bad values).
fn sandbox_config(args: &SandboxArgs) -> Result<SandboxConfig, CliError> {
    let limits = limits_from_flags(args)?;
    let env = checked_env_names(&args.env, |name| {
        tracing::warn!(
            "--env {name}: not set here, so the instances this process runs will not see it"
        );
    })?;
    let dirs = DirGrant::parse_all(&args.dirs).map_err(CliError::Input)?;
    let mut config = SandboxConfig {
        limits,
        dirs,
        env,
        ..SandboxConfig::default()
    };
    if args.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &args.cache_dir {
        super::check_cache_flag(Some(dir))?;
        config.cache_dir = Some(dir.clone());
    }
    Ok(config)
}

/// The limits `--max-memory`, `--call-timeout`, `--fuel`, `--max-output`
/// and `--max-open-files` give, checked by [`SandboxLimits::validate`];
/// an error names the flag and its bound.
fn limits_from_flags(args: &SandboxArgs) -> Result<SandboxLimits, CliError> {
    let flag = |error: LimitError| {
        let flag = match error.key {
            "max_memory_mib" => "--max-memory",
            "call_timeout_secs" => "--call-timeout",
            "fuel" => "--fuel",
            "max_output_bytes" => "--max-output",
            "max_open_files" => "--max-open-files",
            other => other,
        };
        CliError::Input(format!("{flag} {}", error.problem))
    };
    let limits = SandboxLimits {
        max_memory_mib: args.max_memory,
        call_timeout: SandboxLimits::call_timeout_from_secs(args.call_timeout).map_err(flag)?,
        fuel: args.fuel,
        max_output_bytes: args.max_output,
        max_open_files: args.max_open_files,
        ..SandboxLimits::default()
    };
    limits.validate().map_err(flag)?;
    Ok(limits)
}

/// Run the `run` command: make the run ([`launch::run`]) with progress on
/// stderr, then print the closing summary (with `--json`, the summary as
/// JSON).
pub fn run(args: RunArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let request = run_request(&args)?;
    let progress = Progress::new(args.epochs, !args.json, !args.json);
    let result = launch::run(&request, &progress);
    progress.finish();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(LaunchError::Refused(message)) => return Err(CliError::Input(message)),
        Err(LaunchError::Failed(message)) => return Err(CliError::Failed(message)),
        Err(LaunchError::Stopped(stopped)) => {
            let RunStopped {
                message,
                failure,
                errors,
            } = *stopped;
            if args.json {
                say(&sorted_pretty_json(&RunFailed {
                    failure: &failure,
                    out: &args.out,
                    errors: &errors,
                }));
            }
            return Err(CliError::Failed(format!(
                "{message}\nwhat the finished epochs wrote is kept: once the cause is fixed, \
                 continue with the same command and --resume"
            )));
        }
    };
    if args.json {
        say(&sorted_pretty_json(&RunFinished {
            summary: &outcome.summary,
            errors: &outcome.errors,
            adapter: RunAdapter {
                path: &outcome.adapter.path,
                sha256: &outcome.adapter.sha256,
                protocols: &outcome.adapter.protocols,
            },
        }));
        return Ok(());
    }
    print_summary(&outcome, started.elapsed().as_secs_f64());
    if let Some(metrics) = &outcome.replay {
        print_replay_summary(metrics, args.resume);
    }
    if let Some(totals) = &outcome.snapshots {
        print_snapshot_summary(totals);
    }
    if let Some(distributed) = &outcome.distributed {
        say(&run_distributed::summary_line(distributed));
    }
    say(&report_line(&args.out));
    Ok(())
}

/// The run the flags ask for. Flags whose values do not parse (a
/// fidelity, a limit, an `--env` name, a `--dir` grant) are refused here,
/// before the request's own rules ([`RunRequest::check`], in
/// [`launch::run`]) are checked: exit 2 either way.
pub(super) fn run_request(args: &RunArgs) -> Result<RunRequest, CliError> {
    let replay_minimum = crate::replay::fidelity::parse_minimum(&args.replay_min_fidelity)
        .map_err(|error| CliError::Input(format!("--replay-min-fidelity: {error}")))?;
    Ok(RunRequest {
        options: invocation_options(args),
        sandbox: sandbox_config(&args.sandbox)?,
        replay_minimum,
        fork: args.fork.kind(),
        max_durable_snapshot_bytes: args.max_durable_snapshots.saturating_mul(1 << 20),
        resume: args.resume,
        nats: args.nats.as_ref().map(|url| NatsRequest {
            url: url.clone(),
            creds: args.nats_creds.clone(),
            wait_secs: args.nats_wait,
        }),
    })
}

/// The closing line naming the command that draws the run's report.
fn report_line(out: &std::path::Path) -> String {
    format!(
        "  report     sandloop report {}",
        super::shell_word(&out.display().to_string())
    )
}

fn print_snapshot_summary(totals: &SnapshotTotals) {
    let mut line = format!(
        "  snapshots  {} taken ({:.1} MB, {:.2} s to snapshot, {:.2} s to compile; {:.1} MB kept durable)",
        totals.taken,
        totals.bytes as f64 / 1e6,
        totals.snapshot_ms / 1000.0,
        totals.compile_ms / 1000.0,
        totals.durable_bytes as f64 / 1e6,
    );
    if totals.failed > 0 {
        line.push_str(&format!(
            ", {} failed (their groups forked by state, ran from the point in the parent, or \
             prepared their prefix again when the parent was lost; see snapshot_error in {}): {}",
            totals.failed,
            crate::replay::durable::POINTS_FILE,
            totals.first_error.as_deref().unwrap_or("")
        ));
    }
    say(&line);
}

fn print_replay_summary(metrics: &ReplayMetricLedger, resumed: bool) {
    use ReplayCount::*;
    let snapshot = metrics.snapshot();
    let n = |field: ReplayCount| metrics.count(field);
    let minutes = |field: ReplayMinutes| {
        snapshot
            .get(field.as_str())
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    say(&format!(
        "  replay     {} captured ({} failed), {} replayed ({} verified equivalent, {} failed), \
         {} children ({} failed; {} groups failed as a whole), {} quarantined; capture {:.4} min, \
         restore {:.4} min{}",
        count(n(CaptureSuccess), "point", "points"),
        n(CaptureFailure),
        count(n(ReplayAttempt), "suffix", "suffixes"),
        n(EquivalenceVerified),
        n(ReplayFailure),
        n(ChildSessionForkAttempt),
        n(ChildCandidateFailure),
        n(ChildGroupFailure),
        n(ReplayPointQuarantine),
        minutes(ReplayMinutes::Capture),
        minutes(ReplayMinutes::Restore),
        if resumed { " (this invocation)" } else { "" },
    ));
}

/// Every flag of this invocation by its long name ([`Invocation::options`]).
fn invocation_options(args: &RunArgs) -> RunOptions {
    RunOptions {
        adapter: args.adapter.clone(),
        out: args.out.clone(),
        items: args.items.clone(),
        variants: args.variants.clone(),
        variant_lanes: args.variant_lanes,
        epochs: args.epochs,
        budget_minutes: args.budget_minutes,
        workers: args.workers,
        failure_policy: args.failure_policy.into(),
        arm: args.arm.clone(),
        max_memory_mib: args.sandbox.max_memory,
        call_timeout_secs: args.sandbox.call_timeout,
        fuel: args.sandbox.fuel,
        dirs: args.sandbox.dirs.clone(),
        env: args.sandbox.env.clone(),
        max_output_bytes: args.sandbox.max_output,
        max_open_files: args.sandbox.max_open_files,
        cache: !args.sandbox.no_cache,
        no_replay: args.no_replay,
        replay_min_fidelity: args.replay_min_fidelity.clone(),
        child_workers: args.child_workers,
        fork: args.fork.as_str(),
        // Recorded only when given, so a local run's options stay as they
        // always were.
        nats: args.nats.as_ref().map(|url| NatsOptions {
            nats: crate::distributed::transport::shown_url(url),
            nats_creds: args.nats_creds.clone(),
            nats_wait_secs: args.nats_wait,
        }),
    }
}

/// A rate for the spinner: `1234 records/s`, `3.5 records/s` below 10,
/// `0.12 records/s` below 1; never the raw float.
fn records_per_sec(rate: f64) -> String {
    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
    if rate >= 10.0 {
        format!("{rate:.0} records/s")
    } else if rate >= 1.0 {
        format!("{rate:.1} records/s")
    } else {
        format!("{rate:.2} records/s")
    }
}

/// `1 record`, `2 records`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The closing lines of a run that took `seconds`.
fn print_summary(outcome: &RunOutcome, seconds: f64) {
    let RunOutcome {
        summary,
        adapter: info,
        errors,
        charged_minutes,
        ..
    } = outcome;
    let metrics = &summary.execution_metrics;
    let compile = info.compile_ms / 1000.0;
    let timing = if compile >= 0.1 {
        format!("{seconds:.2} s ({compile:.2} s loading the component)")
    } else {
        format!("{seconds:.2} s")
    };
    say(&format!(
        "sandloop run: {} in {}, stop: {}, {timing}",
        count(summary.record_count, "record", "records"),
        count(summary.epoch_count as u64, "epoch", "epochs"),
        summary.stop_reason.as_str(),
    ));
    say(&format!(
        "  adapter    {} (sha256 {}…), protocols: {}",
        info.path,
        &info.sha256[..12],
        info.protocols.join(", ")
    ));
    say(&format!(
        "  value      raw {:.1}, novel {:.1}, {}, {}",
        summary.raw_value_total,
        summary.novel_value_total,
        count(
            summary.variant_records_total,
            "variant record",
            "variant records"
        ),
        count(summary.coverage_count as u64, "family", "families"),
    ));
    let charge = if errors.error_count > 0 {
        format!(
            "; {charged_minutes:.4} of it the error charge of the failed calls (at least 0.05 min each)"
        )
    } else {
        String::new()
    };
    say(&format!(
        "  compute    {:.4} min effective ({:.4} shared prefix, {:.4} suffix, {:.4} standalone{charge})",
        metrics.effective_compute_minutes,
        metrics.shared_prefix_compute_minutes,
        metrics.episode_suffix_compute_minutes,
        metrics.standalone_compute_minutes
    ));
    say(&format!(
        "  avoided    {:.4} min of prefix recomputation ({:.4} by successful suffixes) over {}",
        metrics.avoided_recompute_minutes,
        metrics.successful_avoided_recompute_minutes,
        count(metrics.episode_group_count, "group", "groups"),
    ));
    if errors.error_count > 0 {
        let by_type: Vec<String> = errors
            .errors_by_type
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        say(&format!(
            "  errors     {}: {}",
            count(errors.error_count, "failure", "failures"),
            by_type.join(", ")
        ));
    } else {
        say("  errors     none");
    }
}

/// Progress on stderr: a compile notice when a component takes long to
/// compile; then, once the run is open, a spinner on a terminal (epoch,
/// records, rate, errors, time left for `--epochs`) or one line per
/// finished epoch otherwise. Warnings are said once each.
pub(super) struct Progress {
    /// Whether compile notices are shown (not with `--json`).
    notices: bool,
    /// Whether the run's progress is shown (not with `--json`, nor in
    /// `sandloop try`).
    shown: bool,
    max_epochs: u32,
    /// What is known once the run directory is open.
    live: OnceLock<Live>,
    /// Epochs finished by this invocation, and its first epoch.
    epochs_done: Mutex<(u32, u32)>,
    /// When the current epoch started (`epochs.jsonl` keeps its wall time
    /// to 0.001 min, too coarse for a line per epoch).
    epoch_started: Mutex<Instant>,
    warned: Mutex<std::collections::BTreeSet<String>>,
    /// The current epoch's units, and how many are done.
    units: Mutex<(usize, usize)>,
}

/// The run [`Progress`] shows, from [`RunObserver::opened`] on.
struct Live {
    /// The spinner, on a terminal.
    bar: Option<ProgressBar>,
    /// One line per epoch on a stderr that is not a terminal.
    epoch_lines: bool,
    started: Instant,
    errors: Arc<ErrorTally>,
    /// A distributed run's dispatcher: the message then shows its units.
    distributed: Option<Arc<Dispatcher>>,
}

impl Progress {
    /// Progress of a run of `max_epochs`; `notices`: compile notices
    /// shown; `shown`: the run's progress shown.
    pub(super) fn new(max_epochs: u32, notices: bool, shown: bool) -> Self {
        Self {
            notices,
            shown,
            max_epochs,
            live: OnceLock::new(),
            epochs_done: Mutex::new((0, 0)),
            epoch_started: Mutex::new(Instant::now()),
            warned: Mutex::new(Default::default()),
            units: Mutex::new((0, 0)),
        }
    }

    /// `N errors`, and the time left if the run goes on to `--epochs`
    /// at this invocation's pace so far.
    fn status(&self, live: &Live, epoch: u32) -> String {
        let errors = live.errors.counts().error_count;
        let mut status = count(errors, "error", "errors");
        let (done, _) = *self.epochs_done.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.max_epochs.saturating_sub(epoch.saturating_sub(1));
        if done > 0 && left > 0 {
            let per_epoch = live.started.elapsed().as_secs_f64() / f64::from(done);
            status.push_str(&format!(
                " · at most ~{} left",
                short_duration(per_epoch * f64::from(left))
            ));
        }
        status
    }

    fn finish(&self) {
        if let Some(bar) = self.live.get().and_then(|live| live.bar.as_ref()) {
            bar.finish_and_clear();
        }
    }
}

impl RunObserver for Progress {
    fn compiling(&self, component: &Path, what: &str, cached: bool, work: &mut dyn FnMut()) {
        while_compiling(component, what, cached, !self.notices, work);
    }

    fn warning(&self, message: &str) {
        super::complain("warning: ", message);
    }

    fn opened(&self, run: &OpenedRun<'_>) {
        interrupt_message(run.out, run.dispatcher);
        let terminal = std::io::stderr().is_terminal();
        let bar = (self.shown && terminal).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} · {pos} records · {rate} · {elapsed} · {msg}",
                )
                .expect("static template")
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                        let _ = out.write_str(&records_per_sec(state.per_sec()));
                    },
                ),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        let _ = self.live.set(Live {
            bar,
            epoch_lines: self.shown && !terminal,
            started: Instant::now(),
            errors: Arc::clone(run.errors),
            distributed: run.dispatcher.cloned(),
        });
    }

    fn event(&self, event: &ArmEvent<'_>) {
        let Some(live) = self.live.get() else {
            return;
        };
        match event {
            ArmEvent::UnitDone {
                records, branch_id, ..
            } => {
                if let Some(bar) = &live.bar {
                    bar.inc(records.len() as u64);
                    if let Some(dispatcher) = &live.distributed
                        && *branch_id != crate::harness::arm::CONTROL_BRANCH_ID
                    {
                        let mut units = self.units.lock().unwrap_or_else(|p| p.into_inner());
                        units.1 += 1;
                        let remaining = units.0.saturating_sub(units.1);
                        bar.set_message(run_distributed::progress_message(dispatcher, remaining));
                    }
                }
            }
            ArmEvent::EpochStarted {
                epoch, unit_count, ..
            } => {
                {
                    let mut done = self.epochs_done.lock().unwrap_or_else(|p| p.into_inner());
                    if done.1 == 0 {
                        done.1 = *epoch;
                    }
                }
                *self.epoch_started.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                if let Some(bar) = &live.bar {
                    bar.set_prefix(format!("epoch {epoch}/{}", self.max_epochs));
                    *self.units.lock().unwrap_or_else(|p| p.into_inner()) = (*unit_count, 0);
                    bar.set_message(match &live.distributed {
                        Some(dispatcher) => {
                            run_distributed::progress_message(dispatcher, *unit_count)
                        }
                        None => format!(
                            "{unit_count} unit(s) queued · {}",
                            self.status(live, *epoch)
                        ),
                    });
                }
            }
            ArmEvent::EpochDone { summary, anytime } => {
                self.epochs_done.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
                if live.epoch_lines {
                    let seconds = self
                        .epoch_started
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .elapsed()
                        .as_secs_f64();
                    let rate = if seconds > 0.0 {
                        format!("{:.0} records/s", summary.record_count as f64 / seconds)
                    } else {
                        "-".into()
                    };
                    eprintln!(
                        "epoch {}/{}: {} in {seconds:.2} s ({rate}), novel value {:.1} (run {:.1}), {} in the run",
                        summary.epoch,
                        self.max_epochs,
                        count(summary.record_count, "record", "records"),
                        summary.novel_value,
                        anytime.novel_value_cum,
                        count(live.errors.counts().error_count, "error", "errors"),
                    );
                }
            }
            ArmEvent::Warning { message } => {
                // Say each distinct warning once (a broken catalog would
                // otherwise repeat it every epoch).
                let mut seen = self.warned.lock().unwrap_or_else(|p| p.into_inner());
                if seen.insert(message.clone()) {
                    match &live.bar {
                        Some(bar) => bar.println(format!(
                            "warning: {}",
                            sandloop_core::terminal::for_terminal(message)
                        )),
                        None => super::complain("warning: ", message),
                    }
                }
            }
            _ => {}
        }
    }
}

/// On Ctrl-C, say how to continue, withdraw the units a distributed run
/// left queued, then stop (exit 130). What the interrupted epoch wrote is
/// cut back when the run resumes.
fn interrupt_message(out: &Path, dispatcher: Option<&Arc<Dispatcher>>) {
    let out = out.display().to_string();
    // Weak: the run's own stop drops the dispatcher, which withdraws then.
    let dispatcher = dispatcher.map(Arc::downgrade);
    super::interrupt::on_interrupt(move || {
        super::complain(
            "\ninterrupted: ",
            &format!(
                "{out} keeps every finished epoch; continue with the same command and --resume"
            ),
        );
        if let Some(dispatcher) = dispatcher.as_ref().and_then(std::sync::Weak::upgrade) {
            dispatcher.withdraw_queued();
        }
        std::process::exit(130);
    });
}

/// `45 s`, `3 min`, `2.5 h`.
fn short_duration(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 5400.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// The `--env` names, each checked (exit 2 for one that is not a
/// variable's name) and given once; `unset` warns of each not set here.
pub(super) fn checked_env_names(
    names: &[String],
    unset: impl FnMut(&str),
) -> Result<Vec<String>, CliError> {
    crate::sandbox::config::env_names(names, unset).map_err(|name| {
        CliError::Input(format!(
            "--env {name:?}: give the NAME of a host variable to pass through, not NAME=VALUE"
        ))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_spinner_rate_is_rounded_to_what_a_reader_can_use() {
        assert_eq!(records_per_sec(12345.678), "12346 records/s");
        assert_eq!(records_per_sec(3.456), "3.5 records/s");
        assert_eq!(records_per_sec(0.1234), "0.12 records/s");
        assert_eq!(records_per_sec(f64::NAN), "0.00 records/s");
    }

    #[test]
    fn the_closing_line_names_the_report_command_quoting_odd_paths() {
        assert_eq!(
            report_line(std::path::Path::new("runs/markdown-1")),
            "  report     sandloop report runs/markdown-1"
        );
        assert_eq!(
            report_line(std::path::Path::new("my runs/it's")),
            r"  report     sandloop report 'my runs/it'\''s'"
        );
    }
    use crate::cli::args::{Cli, Command};

    /// The first invocation of `harness/golden/manifest.json` in
    /// sandloop-core, written by `sandloop run` before the manifest was
    /// typed.
    const GOLDEN_MANIFEST: &str =
        include_str!("../../../crates/core/src/harness/golden/manifest.json");

    #[test]
    fn options_are_recorded_as_the_host_always_recorded_them() {
        let golden: crate::harness::RunManifest = serde_json::from_str(GOLDEN_MANIFEST).unwrap();
        let cli = Cli::try_parse_from([
            "sandloop",
            "run",
            "--adapter",
            "/work/wt-typed/target/wasm32-wasip2/release/markdown_explorer.wasm",
            "--dir",
            "/tmp/gold/docs::/docs:ro",
            "--variants",
            "/work/wt-typed/examples/markdown-explorer/catalog.json",
            "--epochs",
            "2",
            "--workers",
            "2",
            "--out",
            "run",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("a run command");
        };
        assert_eq!(
            invocation_options(&args).to_map(),
            golden.invocations[0].options,
            "every flag, by the same name and in the same JSON form"
        );
    }
}
