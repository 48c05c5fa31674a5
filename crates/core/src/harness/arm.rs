//! The epoch loop of one arm. Mirrors `run_budget_arm` in
//! `harness_runtime.py` without the router: no router state, no
//! router-ordered planning (seeds run in the order listed), and variants
//! come from the catalog whenever one is given.
//!
//! Differences from the reference, by design:
//! - records are credited with novelty as each unit completes, under the
//!   output's lock, in completion order (the reference credits after the
//!   epoch in lane order). Totals are the same; which of two records that
//!   saw the same key first in one epoch gets the credit can differ;
//! - records stream to `records.jsonl` as produced; the arm keeps only
//!   running totals, so memory does not grow with the number of records;
//! - the summary carries no `epochs` (they are in `epochs.jsonl`) and the
//!   checkpoint keeps compact epochs (see `super::checkpoint`);
//! - `duration_minutes` is host-measured (see `crate::episode::group`).

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::episode::adapter::{AdapterError, CallContext, Item, Protocols, Record, SeedSource};
use crate::episode::clock::{Clock, SystemClock};
use crate::episode::metrics::{ExecutionMetrics, MetricsAccumulator, combine_execution_metrics};
use crate::episode::policy::{FailurePolicy, FatalError};
use crate::episode::stored::{StoredItems, StoredUnit, StoredUnitsError};
use crate::episode::unit_record::UnitRecord;
use crate::episode::units::{
    ExecutionUnit, build_episode_execution_units, build_episode_execution_units_checked,
    fatal_preflight,
};
use crate::episode::value::{json_f64, round_to, str_or_empty, truthy};

use super::catalog::{FrontierAudit, VariantCatalog, select_frontier_work};
use super::checkpoint::{
    ArmCheckpoint, CheckpointState, HARNESS_CHECKPOINT_SCHEMA_VERSION, RuntimeSignature,
};
use super::config::ArmConfig;
use super::error::ArmError;
use super::novelty::NoveltyLedger;
use super::queue::{LaneSummary, QueueConfig, Ticker, UnitDone, run_queue_epoch};
use super::record_line::RecordLine;
use super::run_dir::ArmOutput;
use super::summary::{
    AnytimeCheckpoint, ArmSummary, EpisodeExecution, EpochSummary, HARNESS_ARM_SCHEMA_VERSION,
    HARNESS_RESUME_SCHEMA_VERSION, HARNESS_RUNTIME_POLICY_SCHEMA_VERSION, ResumeInfo,
    RuntimePolicy, StopReason,
};
use super::work::{StandaloneItem, UnitRunner, WorkUnit};

/// The `branch_id` reported for records produced on the control instance
/// (variant compile errors), which belong to no queue lane.
pub const CONTROL_BRANCH_ID: &str = "control";

/// Progress of an arm, for a caller that draws it (the CLI's progress bar).
#[derive(Debug)]
pub enum ArmEvent<'a> {
    /// The loop is about to start at `next_epoch`.
    Started {
        /// Continuing a checkpoint.
        resumed: bool,
        /// First epoch this run will attempt.
        next_epoch: u32,
        /// Records already in `records.jsonl` from before the resume.
        restored_record_count: u64,
        /// The configured last epoch.
        max_epochs: u32,
    },
    /// An epoch's queue is built and about to run.
    EpochStarted {
        /// 1-based epoch.
        epoch: u32,
        /// Seeds plus variants.
        queue_size: usize,
        /// Units the queue will run.
        unit_count: usize,
    },
    /// Records were written (one unit completed, or variant compile errors
    /// on the [`CONTROL_BRANCH_ID`] branch). Called from lane threads.
    UnitDone {
        /// 1-based epoch.
        epoch: u32,
        /// The lane's branch id.
        branch_id: &'a str,
        /// The records as written (with `novel_value`, `raw_value`); read a
        /// field with [`UnitRecord::get`], or take the map with
        /// [`UnitRecord::to_map`].
        records: &'a [UnitRecord],
    },
    /// An epoch finished and its summary (and checkpoint) were written.
    EpochDone {
        /// The full epoch summary.
        summary: &'a EpochSummary,
        /// The anytime point after the epoch.
        anytime: &'a AnytimeCheckpoint,
    },
    /// Something worth telling the operator that does not stop the arm
    /// (e.g. the catalog file became unreadable; the last good specs stay).
    Warning {
        /// What happened.
        message: String,
    },
    /// The arm finished and `summary.json` was written.
    Finished {
        /// The arm summary.
        summary: &'a ArmSummary,
    },
}

/// Receives [`ArmEvent`]s; must be callable from several threads.
pub trait ArmObserver: Sync {
    /// Called for every event, in order per thread.
    fn on_event(&self, event: &ArmEvent<'_>);
}

impl<F: Fn(&ArmEvent<'_>) + Sync> ArmObserver for F {
    fn on_event(&self, event: &ArmEvent<'_>) {
        self(event)
    }
}

/// An observer that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl ArmObserver for NoObserver {
    fn on_event(&self, _event: &ArmEvent<'_>) {}
}

/// Optional parts of an arm run.
pub struct ArmOptions<'a> {
    /// The variant catalog; `None` runs seeds only.
    pub catalog: Option<&'a mut VariantCatalog>,
    /// Progress observer.
    pub observer: &'a dyn ArmObserver,
    /// The clock every duration and the budget are measured with.
    pub clock: &'a dyn Clock,
}

impl Default for ArmOptions<'_> {
    fn default() -> Self {
        Self {
            catalog: None,
            observer: &NoObserver,
            clock: &SystemClock,
        }
    }
}

/// The checkpoint signature of an arm with `config`.
pub fn runtime_signature(
    config: &ArmConfig,
    protocols: Protocols,
    variant_catalog_enabled: bool,
) -> RuntimeSignature {
    RuntimeSignature {
        arm_key: config.arm_key.clone(),
        adapter_type: config.adapter_type.clone(),
        worker_count: config.worker_count.max(1),
        frontier_max_lanes: config.frontier_max_lanes,
        variant_catalog_enabled,
        item_failure_policy: config.item_failure_policy,
        episode_mode: protocols.episode_mode().map(str::to_owned),
    }
}

/// Per-epoch running totals, updated under one lock as records arrive.
struct EpochTally<'o, O> {
    output: &'o mut O,
    ledger: &'o mut NoveltyLedger,
    metrics: MetricsAccumulator,
    raw: f64,
    novel: f64,
    variant_records: u64,
    records: u64,
    families: Vec<String>,
    family_set: HashSet<String>,
    /// The lines of the records being absorbed (reused).
    line_buffer: Vec<u8>,
}

impl<O: ArmOutput> EpochTally<'_, O> {
    /// Credits `records` in order and writes them, each from its `lines`
    /// entry (serialized by the lane, outside this tally's lock).
    fn absorb(&mut self, records: &mut [UnitRecord], lines: &[RecordLine]) -> Result<(), ArmError> {
        self.line_buffer.clear();
        for (record, line) in records.iter_mut().zip(lines) {
            let credit = self.ledger.credit(record);
            let raw = credit.raw_value;
            let (novel_value, raw_value) = (json_f64(credit.novel_value), json_f64(raw));
            line.write(&novel_value, &raw_value, &mut self.line_buffer)
                .map_err(|error| ArmError::io("serialising a record", error))?;
            record.set_novelty(novel_value, raw_value);
            self.raw += raw;
            self.novel += credit.novel_value;
            if truthy(record.get("is_variant")) {
                self.variant_records += 1;
            }
            self.metrics.add(record);
            let family = str_or_empty(record.get("family"));
            if !family.is_empty() && !self.family_set.contains(family.as_ref()) {
                self.family_set.insert(family.to_string());
                self.families.push(family.into_owned());
            }
        }
        self.output.append_lines(&self.line_buffer, records)?;
        self.records += records.len() as u64;
        Ok(())
    }
}

fn deliver<O: ArmOutput>(
    tally: &Mutex<EpochTally<'_, O>>,
    mut records: Vec<UnitRecord>,
    observer: &dyn ArmObserver,
    epoch: u32,
    branch_id: &str,
) -> Result<(), ArmError> {
    let lines = records
        .iter()
        .map(RecordLine::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| ArmError::io("serialising a record", io::Error::other(error)))?;
    let mut absorbed = tally
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    absorbed.absorb(&mut records, &lines)?;
    // A full buffer is written once the lock is let go: the other lanes
    // deliver meanwhile.
    match absorbed.output.take_write() {
        Some(write) => write.write_after(|| drop(absorbed))?,
        None => drop(absorbed),
    }
    observer.on_event(&ArmEvent::UnitDone {
        epoch,
        branch_id,
        records: &records,
    });
    Ok(())
}

/// Runs one arm to its stop reason and writes its outputs (reference
/// `run_budget_arm`, without the router).
///
/// - `protocols`: what the lane adapters offer; episode groups decide the
///   mode (`recoverable-v0` groups, else standalone plain `execute`).
/// - `seeds`: the control instance: `list_seed_items` every epoch and
///   `compile_variant` for catalog specs (called on this thread only).
/// - `factory`: builds lane `i`'s adapter inside lane `i`'s thread, anew
///   each epoch (so an adapter need not be `Send`, and a lane's instance
///   lives for one epoch).
/// - `output`: where records, epochs, the checkpoint and the summary go;
///   see [`super::run_dir::RunDir`].
///
/// Per epoch: stop if the budget is spent (`budget_exhausted`) or the
/// remaining budget is below the longest of the recent epochs' wall
/// minutes times the guard factor (`duration_guard`), both only once an
/// epoch exists; list the seeds (none: `seed_queue_empty`); in episode mode
/// under the fatal policy, reject malformed seeds before any other adapter
/// call; append the catalog's variants; group into episode units (fatal
/// policy: reject the first invalid item before dispatch) or standalone
/// items; drain the queue, crediting novelty (`novel_value`, `raw_value`
/// set on each record) and writing each unit's records as it completes;
/// then write the epoch summary, the anytime point and (when enabled) the
/// checkpoint. Ends with `max_epochs` when every epoch ran, and writes the
/// summary.
///
/// Errors: [`ArmError::Seeds`] when `list_seed_items` fails;
/// [`ArmError::Fatal`] under the fatal policy or when a lane cannot be set
/// up; output, checkpoint and configuration errors. Records written before
/// an error stay in `records.jsonl`; a resume cuts them back to the last
/// checkpoint.
pub fn run_arm<A, S, F, O>(
    config: &ArmConfig,
    protocols: Protocols,
    seeds: &mut S,
    factory: &F,
    output: &mut O,
    options: ArmOptions<'_>,
) -> Result<ArmSummary, ArmError>
where
    A: UnitRunner,
    S: SeedSource + ?Sized,
    F: Fn(usize) -> Result<A, AdapterError> + Sync,
    O: ArmOutput,
{
    config.validate().map_err(ArmError::Config)?;
    let ArmOptions {
        mut catalog,
        observer,
        clock,
    } = options;
    let arm = config.arm_key.as_str();
    let policy = config.item_failure_policy;
    let episode_mode = protocols.episode_mode();
    let worker_count = config.worker_count.max(1);
    let signature = runtime_signature(config, protocols, catalog.is_some());

    let mut progress = ArmProgress::begin(config, &signature, output, catalog.as_deref_mut())?;
    let restored_epoch_count = progress.next_epoch - 1;
    observer.on_event(&ArmEvent::Started {
        resumed: config.resume,
        next_epoch: progress.next_epoch,
        restored_record_count: progress.record_count,
        max_epochs: config.max_epochs,
    });

    let started = clock.now();
    let mut stop_reason = StopReason::MaxEpochs;
    for epoch in progress.next_epoch..=config.max_epochs {
        let elapsed = progress.elapsed_offset + clock.minutes_since(started);
        if let Some(reason) = progress.stop_before_epoch(config, elapsed) {
            stop_reason = reason;
            break;
        }
        // Seeds kept on disk are grouped where they lie when nothing needs
        // them held: no catalog to select variants against them, and
        // episode groups to read them into.
        let stored = match seeds.stored_seed_items(arm, epoch) {
            Some(stored) if catalog.is_none() && episode_mode.is_some() => Some(stored),
            _ => None,
        };
        let (queue_size, units, work) = if let Some(stored) = stored {
            let units = stored_work_units(&stored, policy, arm, epoch)?;
            (stored.len(), units, EpochWork::default())
        } else {
            let seed_items = seeds.list_seed_items(arm, epoch).map_err(ArmError::Seeds)?;
            if seed_items.is_empty() {
                stop_reason = StopReason::SeedQueueEmpty;
                break;
            }
            if episode_mode.is_some() && policy.is_fatal() {
                // Variant compilation calls adapter code: malformed seeds
                // must be rejected before it can cause effects.
                fatal_preflight(&seed_items).map_err(|e| ArmError::Fatal(FatalError::new(e)))?;
            }
            let mut work = epoch_work(
                seed_items,
                catalog.as_deref_mut(),
                seeds,
                epoch,
                config,
                observer,
                clock,
            )?;
            let queue = std::mem::take(&mut work.queue);
            let queue_size = queue.len();
            let units = work_units(queue, episode_mode.is_some(), policy, arm, epoch)?;
            (queue_size, units, work)
        };

        let epoch_start = clock.now();
        let unit_count = units.len();
        observer.on_event(&ArmEvent::EpochStarted {
            epoch,
            queue_size,
            unit_count,
        });
        let queue_config = QueueConfig {
            arm,
            epoch,
            worker_count,
            stagger: Duration::from_secs_f64(config.stagger_seconds),
        };
        let lanes = EpochLanes {
            queue: &queue_config,
            factory,
            policy,
            clock,
            observer,
            standalone_only: episode_mode.is_none(),
        };
        let (totals, lanes) =
            lanes.drain(units, work.compile_errors, output, &mut progress.ledger)?;
        let epoch_wall = clock.minutes_since(epoch_start);
        let elapsed_after = progress.elapsed_offset + clock.minutes_since(started);
        let summary = progress.close_epoch(
            EpochFacts {
                epoch,
                epoch_wall,
                elapsed_after,
                queue_size,
                unit_count,
                worker_count,
                frontier: work.frontier,
                lanes,
            },
            totals,
        );
        output.append_epoch(&summary)?;
        progress.epochs.push(summary.compact());
        if config.checkpoint_enabled() {
            progress.write_checkpoint(
                output,
                &signature,
                epoch,
                elapsed_after,
                catalog.as_deref(),
            )?;
        }
        observer.on_event(&ArmEvent::EpochDone {
            summary: &summary,
            anytime: progress.checkpoints.last().expect("just pushed"),
        });
    }

    let elapsed = progress.elapsed_offset + clock.minutes_since(started);
    let summary = progress.into_summary(
        config,
        protocols,
        stop_reason,
        elapsed,
        restored_epoch_count,
        output,
    );
    output.write_summary(&summary)?;
    observer.on_event(&ArmEvent::Finished { summary: &summary });
    Ok(summary)
}

/// What an arm has accumulated across its epochs: restored from the
/// checkpoint on resume, carried from epoch to epoch, and summed up in the
/// arm's summary.
struct ArmProgress {
    ledger: NoveltyLedger,
    epochs: Vec<EpochSummary>,
    checkpoints: Vec<AnytimeCheckpoint>,
    coverage_first_seen: Map<String, Value>,
    raw_cum: f64,
    novel_cum: f64,
    variant_records_cum: u64,
    record_count: u64,
    next_epoch: u32,
    elapsed_offset: f64,
    metrics_cum: ExecutionMetrics,
}

/// What one epoch was, apart from its records' totals.
struct EpochFacts {
    epoch: u32,
    epoch_wall: f64,
    elapsed_after: f64,
    queue_size: usize,
    unit_count: usize,
    worker_count: usize,
    frontier: Option<FrontierAudit>,
    lanes: Vec<LaneSummary>,
}

/// The totals of an epoch's records, once its queue is drained.
struct EpochTotals {
    metrics: ExecutionMetrics,
    raw: f64,
    novel: f64,
    variant_records: u64,
    records: u64,
    /// Families seen this epoch, in first-seen order.
    families: Vec<String>,
}

/// The items of an epoch: its seeds, then the catalog's variants, with the
/// frontier's audit and the records of variants that failed to compile.
#[derive(Default)]
struct EpochWork {
    queue: Vec<Item>,
    frontier: Option<FrontierAudit>,
    compile_errors: Vec<Record>,
}

impl ArmProgress {
    /// Start fresh (`begin_fresh`, the catalog's consumption cleared) or
    /// resume from the checkpoint `output` holds, which must carry
    /// `signature`.
    fn begin<O: ArmOutput>(
        config: &ArmConfig,
        signature: &RuntimeSignature,
        output: &mut O,
        catalog: Option<&mut VariantCatalog>,
    ) -> Result<Self, ArmError> {
        if !config.resume {
            output.begin_fresh()?;
            if let Some(catalog) = catalog {
                // A fresh arm starts with fresh consumption.
                catalog.restore_consumed(Vec::<String>::new());
            }
            return Ok(Self {
                ledger: NoveltyLedger::new(),
                epochs: Vec::new(),
                checkpoints: Vec::new(),
                coverage_first_seen: Map::new(),
                raw_cum: 0.0,
                novel_cum: 0.0,
                variant_records_cum: 0,
                record_count: 0,
                next_epoch: 1,
                elapsed_offset: 0.0,
                metrics_cum: combine_execution_metrics([]),
            });
        }
        let state = output.begin_resume(signature)?;
        if let Some(catalog) = catalog {
            catalog.restore_consumed(&state.catalog_consumed);
        }
        let metrics_cum =
            combine_execution_metrics(state.epochs.iter().map(|e| &e.execution_metrics));
        Ok(Self {
            ledger: NoveltyLedger::from_seen(state.novelty_seen),
            epochs: state.epochs,
            checkpoints: state.checkpoints,
            coverage_first_seen: state.coverage_first_seen,
            raw_cum: state.raw_value_total,
            novel_cum: state.novel_value_total,
            variant_records_cum: state.variant_records_total,
            record_count: state.record_count,
            next_epoch: state.next_epoch,
            elapsed_offset: state.elapsed_minutes,
            metrics_cum,
        })
    }

    /// Why no further epoch may start after `elapsed` minutes: the budget is
    /// spent (`budget_exhausted`), or what remains is below the longest of
    /// the recent epochs times the guard factor (`duration_guard`); both
    /// only once an epoch exists.
    fn stop_before_epoch(&self, config: &ArmConfig, elapsed: f64) -> Option<StopReason> {
        if self.epochs.is_empty() {
            return None;
        }
        let remaining = config.budget_minutes - elapsed;
        if remaining <= 0.0 {
            return Some(StopReason::BudgetExhausted);
        }
        if config.duration_guard_factor > 0.0 {
            let recent = config.duration_guard_recent.max(1);
            let longest = self.epochs[self.epochs.len().saturating_sub(recent)..]
                .iter()
                .map(|e| e.epoch_wall_minutes)
                .fold(0.0, f64::max);
            if remaining < longest * config.duration_guard_factor {
                return Some(StopReason::DurationGuard);
            }
        }
        None
    }

    /// Add an epoch's totals to the arm's, note its anytime point, and
    /// return its summary (not yet written).
    fn close_epoch(&mut self, facts: EpochFacts, totals: EpochTotals) -> EpochSummary {
        self.raw_cum += totals.raw;
        self.novel_cum += totals.novel;
        self.variant_records_cum += totals.variant_records;
        self.record_count += totals.records;
        self.metrics_cum = combine_execution_metrics([&self.metrics_cum, &totals.metrics]);
        for family in totals.families {
            self.coverage_first_seen
                .entry(family)
                .or_insert_with(|| json_f64(round_to(facts.elapsed_after, 3)));
        }
        self.checkpoints.push(AnytimeCheckpoint {
            epoch: facts.epoch,
            elapsed_minutes: round_to(facts.elapsed_after, 3),
            raw_value_cum: round_to(self.raw_cum, 3),
            novel_value_cum: round_to(self.novel_cum, 3),
            coverage_count_cum: self.coverage_first_seen.len(),
            variant_records_cum: self.variant_records_cum,
            requested_worker_minutes_cum: round_to(
                facts.elapsed_after * facts.worker_count as f64,
                3,
            ),
            execution_metrics_cum: self.metrics_cum.clone(),
        });
        EpochSummary {
            schema_version: HARNESS_ARM_SCHEMA_VERSION.to_owned(),
            epoch: facts.epoch,
            epoch_wall_minutes: round_to(facts.epoch_wall, 3),
            queue_size: facts.queue_size,
            execution_unit_count: facts.unit_count,
            record_count: totals.records,
            raw_value: round_to(totals.raw, 3),
            novel_value: round_to(totals.novel, 3),
            execution_metrics: totals.metrics,
            frontier: facts.frontier,
            lanes: facts.lanes,
        }
    }

    /// Write the checkpoint after `epoch`. The history moves into the
    /// checkpoint and back: no copies.
    fn write_checkpoint<O: ArmOutput>(
        &mut self,
        output: &mut O,
        signature: &RuntimeSignature,
        epoch: u32,
        elapsed_after: f64,
        catalog: Option<&VariantCatalog>,
    ) -> Result<(), ArmError> {
        let offsets = output.offsets();
        let state = CheckpointState {
            next_epoch: epoch + 1,
            elapsed_minutes: round_to(elapsed_after, 6),
            epochs: std::mem::take(&mut self.epochs),
            checkpoints: std::mem::take(&mut self.checkpoints),
            novelty_seen: self.ledger.seen_sorted(),
            catalog_consumed: catalog
                .map(|c| c.consumed().iter().cloned().collect())
                .unwrap_or_default(),
            coverage_first_seen: self.coverage_first_seen.clone(),
            raw_value_total: round_to(self.raw_cum, 6),
            novel_value_total: round_to(self.novel_cum, 6),
            variant_records_total: self.variant_records_cum,
            record_count: self.record_count,
            records_jsonl_bytes: offsets.records_jsonl_bytes,
            epochs_jsonl_bytes: offsets.epochs_jsonl_bytes,
        };
        let checkpoint = ArmCheckpoint::new(signature, state);
        let written = output.write_checkpoint(&checkpoint);
        self.epochs = checkpoint.state.epochs;
        self.checkpoints = checkpoint.state.checkpoints;
        written
    }

    /// The arm's summary (reference `run_budget_arm`'s result), after
    /// `elapsed` minutes of this invocation.
    fn into_summary<O: ArmOutput>(
        self,
        config: &ArmConfig,
        protocols: Protocols,
        stop_reason: StopReason,
        elapsed: f64,
        restored_epoch_count: u32,
        output: &O,
    ) -> ArmSummary {
        let policy = config.item_failure_policy;
        let episode_mode = protocols.episode_mode();
        let checkpoint_enabled = config.checkpoint_enabled();
        ArmSummary {
            schema_version: HARNESS_ARM_SCHEMA_VERSION.to_owned(),
            arm_key: config.arm_key.clone(),
            budget_minutes: config
                .budget_minutes
                .is_finite()
                .then_some(config.budget_minutes),
            worker_count: config.worker_count.max(1),
            elapsed_minutes: round_to(elapsed, 3),
            stop_reason,
            epoch_count: self.epochs.len(),
            record_count: self.record_count,
            raw_value_total: round_to(self.raw_cum, 3),
            novel_value_total: round_to(self.novel_cum, 3),
            variant_records_total: self.variant_records_cum,
            execution_metrics: self.metrics_cum,
            coverage_count: self.coverage_first_seen.len(),
            coverage_first_seen_minutes: self.coverage_first_seen,
            checkpoints: self.checkpoints,
            resume: ResumeInfo {
                schema_version: HARNESS_RESUME_SCHEMA_VERSION.to_owned(),
                enabled: checkpoint_enabled,
                resumed: config.resume,
                checkpoint_schema_version: HARNESS_CHECKPOINT_SCHEMA_VERSION.to_owned(),
                checkpoint_path: if checkpoint_enabled {
                    output.checkpoint_location()
                } else {
                    None
                },
                restored_epoch_count,
            },
            runtime_policy: RuntimePolicy {
                schema_version: HARNESS_RUNTIME_POLICY_SCHEMA_VERSION.to_owned(),
                item_failure_policy: policy.as_str().to_owned(),
                item_exception_isolation: !policy.is_fatal(),
                episode_execution: EpisodeExecution {
                    mode: episode_mode.unwrap_or("standalone").to_owned(),
                    adapter_owned_restore: episode_mode.is_some(),
                },
                duration_source: "host".to_owned(),
                planner_guidance: json!({
                    "retry_backoff": {"enforced": false, "owner": "external_runner"},
                    "infra_cooldown": {"enforced": false, "owner": "external_runner"},
                }),
            },
        }
    }
}

/// The items of `epoch`: `seed_items`, then the variants the catalog's
/// frontier selects (a catalog that cannot be re-read is a warning, and its
/// last readable specs are used).
fn epoch_work<S: SeedSource + ?Sized>(
    seed_items: Vec<Item>,
    catalog: Option<&mut VariantCatalog>,
    seeds: &mut S,
    epoch: u32,
    config: &ArmConfig,
    observer: &dyn ArmObserver,
    clock: &dyn Clock,
) -> Result<EpochWork, ArmError> {
    let Some(catalog) = catalog else {
        return Ok(EpochWork {
            queue: seed_items,
            frontier: None,
            compile_errors: Vec::new(),
        });
    };
    if let Err(error) = catalog.refresh() {
        observer.on_event(&ArmEvent::Warning {
            message: format!("{error}; using the last readable specs"),
        });
    }
    let selection = select_frontier_work(
        &seed_items,
        catalog,
        seeds,
        epoch,
        config.frontier_max_lanes,
        config.item_failure_policy,
        clock,
    )?;
    let mut queue = seed_items;
    queue.extend(selection.items);
    Ok(EpochWork {
        queue,
        frontier: Some(selection.audit),
        compile_errors: selection.error_records,
    })
}

/// The epoch's work units from seeds kept on disk: each group stays there
/// until a lane runs it (the fatal policy rejects the first invalid item
/// before dispatch, as [`work_units`] does).
fn stored_work_units(
    stored: &Arc<StoredItems>,
    policy: FailurePolicy,
    arm: &str,
    epoch: u32,
) -> Result<Vec<WorkUnit>, ArmError> {
    let units = stored
        .units(arm, epoch, policy.is_fatal())
        .map_err(|error| match error {
            StoredUnitsError::Invalid(error) => ArmError::Fatal(FatalError::new(error)),
            StoredUnitsError::Read(source) => {
                ArmError::io(format!("cannot read {}", stored.path().display()), source)
            }
        })?;
    Ok(units
        .into_iter()
        .map(|unit| match unit {
            StoredUnit::Group(group) => WorkUnit::Stored(group),
            StoredUnit::Invalid(invalid) => WorkUnit::Episode(ExecutionUnit::Invalid(invalid)),
        })
        .collect())
}

/// The epoch's work units: episode units (the fatal policy rejects the
/// first invalid item before dispatch), or one standalone unit per item.
fn work_units(
    queue: Vec<Item>,
    episode_mode: bool,
    policy: FailurePolicy,
    arm: &str,
    epoch: u32,
) -> Result<Vec<WorkUnit>, ArmError> {
    if !episode_mode {
        return Ok(queue
            .into_iter()
            .map(|item| WorkUnit::Standalone(StandaloneItem::new(item)))
            .collect());
    }
    let units = if policy.is_fatal() {
        build_episode_execution_units_checked(queue, arm, epoch)
            .map_err(|e| ArmError::Fatal(FatalError::new(e)))?
    } else {
        build_episode_execution_units(queue, arm, epoch)
    };
    Ok(units.into_iter().map(WorkUnit::Episode).collect())
}

/// How an epoch's units run: its queue, the lanes' adapters, the policy.
struct EpochLanes<'a, F> {
    queue: &'a QueueConfig<'a>,
    factory: &'a F,
    policy: FailurePolicy,
    clock: &'a dyn Clock,
    observer: &'a dyn ArmObserver,
    standalone_only: bool,
}

impl<F> EpochLanes<'_, F> {
    /// Run `units` on the lanes, crediting novelty and writing each unit's
    /// records as it completes (after `compile_errors`), flushing the output
    /// on its timer and at the end. Returns the records' totals and the
    /// lanes' summaries.
    fn drain<A, O>(
        &self,
        units: Vec<WorkUnit>,
        compile_errors: Vec<Record>,
        output: &mut O,
        ledger: &mut NoveltyLedger,
    ) -> Result<(EpochTotals, Vec<LaneSummary>), ArmError>
    where
        A: UnitRunner,
        F: Fn(usize) -> Result<A, AdapterError> + Sync,
        O: ArmOutput,
    {
        let (epoch, policy, clock, observer) =
            (self.queue.epoch, self.policy, self.clock, self.observer);
        let flush_every = output.flush_interval();
        let tally = Mutex::new(EpochTally {
            output,
            ledger,
            metrics: if self.standalone_only {
                MetricsAccumulator::standalone_only()
            } else {
                MetricsAccumulator::new()
            },
            raw: 0.0,
            novel: 0.0,
            variant_records: 0,
            records: 0,
            families: Vec::new(),
            family_set: HashSet::new(),
            line_buffer: Vec::new(),
        });
        if !compile_errors.is_empty() {
            let records = compile_errors.into_iter().map(UnitRecord::from).collect();
            deliver(&tally, records, observer, epoch, CONTROL_BRANCH_ID)?;
        }
        let execute = |adapter: &mut A, unit: WorkUnit, ctx: &CallContext| {
            adapter
                .run_unit(&unit, ctx, policy, clock)
                .map_err(ArmError::from)
        };
        let sink = |done: &UnitDone<'_>, records: Vec<UnitRecord>| {
            deliver(&tally, records, observer, epoch, done.branch_id)
        };
        let flush = || {
            tally
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .output
                .flush()
        };
        let ticker = flush_every.map(|every| Ticker {
            every,
            tick: &flush,
        });
        let outcome = run_queue_epoch(
            units,
            self.queue,
            clock,
            self.factory,
            &execute,
            &sink,
            ticker,
        );
        let flushed = flush();
        let lanes = outcome?;
        flushed?;
        let tally = tally
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let totals = EpochTotals {
            metrics: tally.metrics.finish(),
            raw: tally.raw,
            novel: tally.novel,
            variant_records: tally.variant_records,
            records: tally.records,
            families: tally.families,
        };
        Ok((totals, lanes))
    }
}

#[cfg(test)]
#[path = "arm_tests.rs"]
mod tests;
