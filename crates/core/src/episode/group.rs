//! Running one execution unit: prepare the shared prefix once, run every
//! sibling suffix on it, always release it.
//!
//! Mirrors `execute_episode_group` in `episode_runtime.py`.
//!
//! Deliberate deviation: `duration_minutes` of every record produced here is
//! the host's measurement of the adapter call that produced it (prepare for
//! the prefix, `execute_episode`/`execute` for an item), overwriting whatever
//! the adapter wrote. The reference trusts the adapter's number for
//! successful records; a sandboxed adapter's claims about its own cost are
//! not trusted here.

use std::time::Instant;

use serde_json::Value;

use super::adapter::{
    AdapterError, CallContext, EpisodeAdapter, ErrorType, Item, Prepared, Record,
};
use super::clock::Clock;
use super::policy::{FailurePolicy, FatalError};
use super::records::{
    GroupAnnotation, RECORD_KIND_EPISODE_SUFFIX, RECORD_KIND_SHARED_PREFIX, adapter_error_record,
    annotate_group_record, attach_release_error, normalize_item_record, quarantine_host_owned,
    set_field, standalone_record,
};
use super::unit_record::{GroupFields, UnitRecord};
use super::units::{EpisodeGroup, ExecutionUnit, InvalidUnit};
use super::value::json_f64;

/// `episode_fallback` of records run through plain `execute` because
/// prepare returned none.
pub const FALLBACK_PREPARE_RETURNED_NONE: &str = "prepare_returned_none";

/// Stage names written to `episode_stage` on error records.
pub(crate) mod stage {
    /// The unit was invalid; nothing ran.
    pub const GROUP_VALIDATION: &str = "group_validation";
    /// `prepare_episode_group` failed or returned no valid prefix record.
    pub const PREPARE: &str = "prepare";
    /// Plain `execute` after prepare returned none.
    pub const LEGACY_EXECUTE: &str = "legacy_execute";
    /// `execute_episode` on the prepared prefix.
    pub const EXECUTE: &str = "execute";
    /// `release_episode_group` failed (written on the prefix record).
    pub const RELEASE: &str = "release";
}

/// Runs one execution unit on `adapter` and returns its records in order
/// (reference `execute_episode_group`).
///
/// `base` is the lane's context (`execution_group_id` is ignored and set
/// from the group). Records:
/// - invalid unit: one standalone error record
///   ([`ErrorType::InvalidItem`], `episode_stage = "group_validation"`);
/// - prepare failed: one `shared_prefix` error record
///   (`episode_stage = "prepare"`); plain `execute` is never tried;
/// - prepare returned `None`: one standalone record per item from plain
///   `execute` (errors with `episode_stage = "legacy_execute"`), each with
///   `episode_fallback = "prepare_returned_none"`. An adapter whose
///   [`Protocols::execute`](super::adapter::Protocols::execute) is false is
///   not called: each item gets a [`ErrorType::MissingExport`] error;
/// - prepared with an invalid prefix record: the handle is released and one
///   `shared_prefix` error record is produced (`episode_stage = "prepare"`),
///   carrying the release's failure in `episode_release_error` if any;
/// - prepared: the prefix record then one `episode_suffix` record per item;
///   a failing suffix becomes an error record (`episode_stage = "execute"`).
///   The handle is always released; a failed release is attached to the
///   prefix record (`episode_release_error`, `episode_stage = "release"`),
///   which keeps its own status.
///
/// Under [`FailurePolicy::Fatal`] the first failure is returned instead of
/// recorded. When cleanup fails too, the first failure stays primary and the
/// release failure is its [`FatalError::cause`]. A failed release after
/// successful suffixes is itself the primary error.
pub fn execute_episode_group<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    unit: &ExecutionUnit,
    base: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Vec<UnitRecord>, FatalError> {
    match unit {
        ExecutionUnit::Invalid(invalid) => {
            record_invalid_unit(invalid, policy).map(|r| vec![r.into()])
        }
        ExecutionUnit::Group(group) => run_group(adapter, group, base, policy, clock),
    }
}

/// The record (or fatal error) for an invalid unit.
pub fn record_invalid_unit(
    invalid: &InvalidUnit,
    policy: FailurePolicy,
) -> Result<Record, FatalError> {
    let error = AdapterError::new(ErrorType::InvalidItem, invalid.reason.as_str());
    if policy.is_fatal() {
        return Err(FatalError::new(error));
    }
    let mut record = adapter_error_record(&invalid.item, &error, 0.0);
    set_field(
        &mut record,
        "episode_stage",
        Value::from(stage::GROUP_VALIDATION),
    );
    standalone_record(&mut record);
    Ok(record)
}

fn set_duration(record: &mut Record, minutes: f64) {
    set_field(record, "duration_minutes", json_f64(minutes));
}

fn run_group<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    group: &EpisodeGroup,
    base: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Vec<UnitRecord>, FatalError> {
    let seed = group.seed();
    let ctx = CallContext {
        arm: base.arm.clone(),
        epoch: base.epoch,
        branch_id: base.branch_id.clone(),
        execution_group_id: Some(group.execution_group_id.clone()),
    };
    let prefix_reused = group.items.len() > 1;
    let failed_prefix = GroupAnnotation {
        group_id: &group.execution_group_id,
        seed_item_id: &group.seed_item_id,
        record_kind: RECORD_KIND_SHARED_PREFIX,
        prefix_reused: false,
        checkpoint_ref: None,
    };

    let prepare_started = clock.now();
    let prepared = match adapter.prepare_episode_group(seed, &group.items, &ctx) {
        Ok(prepared) => prepared,
        Err(error) => {
            if policy.is_fatal() {
                return Err(FatalError::new(error));
            }
            let mut failed =
                adapter_error_record(seed, &error, clock.minutes_since(prepare_started));
            set_field(&mut failed, "episode_stage", Value::from(stage::PREPARE));
            annotate_group_record(&mut failed, &failed_prefix);
            return Ok(vec![failed.into()]);
        }
    };
    let prepare_minutes = clock.minutes_since(prepare_started);

    let Some(Prepared {
        handle,
        prefix_record,
        checkpoint_ref,
    }) = prepared
    else {
        return run_fallback(adapter, group, base, policy, clock)
            .map(|records| records.into_iter().map(UnitRecord::from).collect());
    };

    let mut prefix = match prefix_record {
        Ok(prefix) => prefix,
        Err(error) => {
            return reject_invalid_prefix(
                adapter,
                handle,
                error,
                seed,
                prepare_started,
                &ctx,
                policy,
                clock,
            )
            .map(|mut failed| {
                annotate_group_record(&mut failed, &failed_prefix);
                vec![failed.into()]
            });
        }
    };

    shape_prefix_record(&mut prefix, seed, &group.seed_item_id);
    set_duration(&mut prefix, prepare_minutes);
    let annotation = GroupAnnotation {
        group_id: &group.execution_group_id,
        seed_item_id: &group.seed_item_id,
        record_kind: RECORD_KIND_SHARED_PREFIX,
        prefix_reused,
        checkpoint_ref: checkpoint_ref.as_deref(),
    };
    annotate_group_record(&mut prefix, &annotation);
    let suffix_annotation = GroupAnnotation {
        record_kind: RECORD_KIND_EPISODE_SUFFIX,
        ..annotation
    };

    let mut suffixes = Vec::with_capacity(group.items.len());
    let fatal_error = run_suffixes(
        adapter,
        &handle,
        group,
        &ctx,
        policy,
        clock,
        &suffix_annotation,
        &mut suffixes,
    );

    let release_started = clock.now();
    if let Err(cleanup) = adapter.release_episode_group(handle, &ctx) {
        if let Some(primary) = fatal_error {
            return Err(FatalError::chained(primary, cleanup));
        }
        if policy.is_fatal() {
            return Err(FatalError::new(cleanup));
        }
        let release_record =
            adapter_error_record(seed, &cleanup, clock.minutes_since(release_started));
        // The prepare succeeded and its observations are real: the prefix
        // keeps its status; the cleanup failure rides in dedicated fields.
        attach_release_error(&mut prefix, &release_record);
        set_field(&mut prefix, "episode_stage", Value::from(stage::RELEASE));
    }
    match fatal_error {
        Some(primary) => Err(FatalError::new(primary)),
        None => {
            let mut records = Vec::with_capacity(1 + suffixes.len());
            records.push(UnitRecord::from(prefix));
            records.append(&mut suffixes);
            Ok(records)
        }
    }
}

/// The adapter prepared a prefix whose result is not valid: release what it
/// handed over, then resolve the error by `policy` — fatal, or the prefix's
/// error record (stage `prepare`, with the release's failure attached), whose
/// duration runs from `prepare_started` through the release.
#[allow(clippy::too_many_arguments)]
fn reject_invalid_prefix<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    handle: A::Handle,
    error: AdapterError,
    seed: &Item,
    prepare_started: Instant,
    ctx: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Record, FatalError> {
    let release_started = clock.now();
    let release_failure = adapter
        .release_episode_group(handle, ctx)
        .err()
        .map(|cleanup| {
            let record = adapter_error_record(seed, &cleanup, clock.minutes_since(release_started));
            (cleanup, record)
        });
    if policy.is_fatal() {
        return Err(match release_failure {
            Some((cleanup, _)) => FatalError::chained(error, cleanup),
            None => FatalError::new(error),
        });
    }
    let mut failed = adapter_error_record(seed, &error, clock.minutes_since(prepare_started));
    set_field(&mut failed, "episode_stage", Value::from(stage::PREPARE));
    if let Some((_, release_record)) = &release_failure {
        attach_release_error(&mut failed, release_record);
    }
    Ok(failed)
}

/// The host's fields of a shared-prefix record, its host-owned fields
/// quarantined first ([`quarantine_host_owned`]): its `item_id` (default
/// `<seed>:shared-prefix`), the seed's `family`, `is_variant` false, no
/// `variant_spec_id`, and `accepted` (default true).
fn shape_prefix_record(prefix: &mut Record, seed: &Item, seed_item_id: &str) {
    quarantine_host_owned(prefix);
    if !prefix.contains_key("item_id") {
        set_field(
            prefix,
            "item_id",
            Value::from(format!("{seed_item_id}:shared-prefix")),
        );
    }
    set_field(prefix, "family", seed.identity().family.clone());
    set_field(prefix, "is_variant", Value::Bool(false));
    prefix.remove("variant_spec_id");
    if !prefix.contains_key("accepted") {
        set_field(prefix, "accepted", Value::Bool(true));
    }
}

/// Run each item of `group` as a suffix of the prepared `handle` (one batch
/// call when the adapter offers one, else one call per item), appending its
/// record to `records`: the adapter's record with the host's fields beside
/// it ([`UnitRecord::suffix`]), or an error record annotated as a map.
/// Returns the error that policy made fatal, if any; the items after it are
/// not run.
#[allow(clippy::too_many_arguments)]
fn run_suffixes<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    handle: &A::Handle,
    group: &EpisodeGroup,
    ctx: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
    annotation: &GroupAnnotation<'_>,
    records: &mut Vec<UnitRecord>,
) -> Option<AdapterError> {
    let group_fields = GroupFields::new(annotation);
    let mut batch = adapter
        .execute_episode_batch(handle, &group.items, ctx)
        .map(Vec::into_iter);
    for item in &group.items {
        let started = clock.now();
        let (outcome, minutes) = match batch.as_mut() {
            Some(batch) => batch.next().unwrap_or_else(|| {
                let missing = AdapterError::new(
                    ErrorType::InvalidOutput,
                    "the batch returned fewer results than the group has items",
                );
                (Err(missing), 0.0)
            }),
            None => {
                let outcome = adapter.execute_episode(handle, item, ctx);
                (outcome, clock.minutes_since(started))
            }
        };
        match outcome {
            Ok(record) => records.push(UnitRecord::suffix(record, item, minutes, &group_fields)),
            Err(error) => match error_record(error, item, minutes, policy, stage::EXECUTE) {
                Ok(mut record) => {
                    annotate_group_record(&mut record, annotation);
                    records.push(record.into());
                }
                Err(error) => return Some(error),
            },
        }
    }
    None
}

/// Prepare returned `None`: every item runs through plain `execute`.
fn run_fallback<A: EpisodeAdapter + ?Sized>(
    adapter: &mut A,
    group: &EpisodeGroup,
    base: &CallContext,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<Vec<Record>, FatalError> {
    let has_execute = adapter.protocols().execute;
    let legacy_ctx;
    let ctx = if base.execution_group_id.is_some() {
        legacy_ctx = CallContext {
            execution_group_id: None,
            ..base.clone()
        };
        &legacy_ctx
    } else {
        base
    };
    let mut records = Vec::with_capacity(group.items.len());
    for item in &group.items {
        let started = clock.now();
        let outcome = if has_execute {
            adapter.execute(item, ctx)
        } else {
            Err(missing_execute_error(&group.execution_group_id))
        };
        let minutes = clock.minutes_since(started);
        let mut record = settle_item(outcome, item, minutes, policy, stage::LEGACY_EXECUTE)
            .map_err(FatalError::new)?;
        standalone_record(&mut record);
        set_field(
            &mut record,
            "episode_fallback",
            Value::from(FALLBACK_PREPARE_RETURNED_NONE),
        );
        records.push(record);
    }
    Ok(records)
}

/// One item's record from its call's outcome: the normalised record with
/// the host-measured duration, or an error record marked with `stage`.
/// `Err` only under the fatal policy.
fn settle_item(
    outcome: Result<Record, AdapterError>,
    item: &Item,
    minutes: f64,
    policy: FailurePolicy,
    stage: &'static str,
) -> Result<Record, AdapterError> {
    match outcome {
        Ok(mut record) => {
            quarantine_host_owned(&mut record);
            normalize_item_record(&mut record, item);
            set_duration(&mut record, minutes);
            Ok(record)
        }
        Err(error) => error_record(error, item, minutes, policy, stage),
    }
}

/// What a failed call for `item` becomes under `policy`: the error itself
/// when fatal, else its error record (`episode_stage = stage`).
fn error_record(
    error: AdapterError,
    item: &Item,
    minutes: f64,
    policy: FailurePolicy,
    stage: &'static str,
) -> Result<Record, AdapterError> {
    if policy.is_fatal() {
        return Err(error);
    }
    let mut record = adapter_error_record(item, &error, minutes);
    set_field(&mut record, "episode_stage", Value::from(stage));
    Ok(record)
}

fn missing_execute_error(group_id: &str) -> AdapterError {
    AdapterError::new(
        ErrorType::MissingExport,
        format!(
            "prepare_episode_group returned none for {group_id}, but the adapter has no plain \
             execute export to fall back to"
        ),
    )
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
