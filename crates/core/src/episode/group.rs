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
pub mod stage {
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
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::episode::adapter::Protocols;
    use crate::episode::clock::ManualClock;
    use crate::episode::metrics::summarize_execution_records;
    use crate::episode::testing::{PrepareScript, Script, ScriptedAdapter, seed, variant};
    use crate::episode::units::build_episode_execution_units;

    fn base() -> CallContext {
        CallContext {
            arm: "main".into(),
            epoch: 2,
            branch_id: "queue_worker_01".into(),
            execution_group_id: None,
        }
    }

    /// One group: seed `s` with variants `v1..vk`.
    fn group_unit(k: usize) -> ExecutionUnit {
        let mut items = vec![seed("s", "fam")];
        for i in 1..=k {
            items.push(variant(&format!("v{i}"), "s", "fam"));
        }
        let mut units = build_episode_execution_units(items, "main", 2);
        assert_eq!(units.len(), 1);
        units.pop().unwrap()
    }

    fn run(
        adapter: &mut ScriptedAdapter,
        unit: &ExecutionUnit,
        policy: FailurePolicy,
        clock: &ManualClock,
    ) -> Result<Vec<Record>, FatalError> {
        execute_episode_group(adapter, unit, &base(), policy, clock)
            .map(|records| records.into_iter().map(UnitRecord::into_map).collect())
    }

    fn timed_adapter(script: Script) -> (ScriptedAdapter, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (
            ScriptedAdapter::new(script).with_clock(Arc::clone(&clock)),
            clock,
        )
    }

    fn assert_close(actual: &Value, expected: f64) {
        let actual = actual.as_f64().expect("a number");
        assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
    }

    #[test]
    fn prepared_group_runs_prefix_then_every_suffix_then_releases() {
        let mut script = Script::episode();
        script.checkpoint_ref = Some("ckpt-1".into());
        script.prepare_minutes = 2.0;
        script.execute_minutes = 0.5;
        script.release_minutes = 0.25;
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(2);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();

        assert_eq!(
            adapter.ops(),
            vec![
                "prepare:s",
                "execute_episode:s",
                "execute_episode:v1",
                "execute_episode:v2",
                "release:s"
            ]
        );
        let log = adapter.log.lock().unwrap().clone();
        assert!(
            log.iter()
                .all(|c| c.group.as_deref() == Some("main:epoch-2:group-0001"))
        );
        assert!(log.iter().all(|c| c.branch == "queue_worker_01"));
        assert_eq!(*adapter.open_handles.lock().unwrap(), 0);

        assert_eq!(records.len(), 4);
        let prefix = &records[0];
        assert_eq!(prefix["item_id"], json!("s:shared-prefix"));
        assert_eq!(prefix["family"], json!("fam"));
        assert_eq!(prefix["is_variant"], json!(false));
        assert!(!prefix.contains_key("variant_spec_id"));
        assert_eq!(prefix["accepted"], json!(true));
        assert_eq!(prefix["record_kind"], json!("shared_prefix"));
        assert_eq!(
            prefix["execution_group_id"],
            json!("main:epoch-2:group-0001")
        );
        assert_eq!(prefix["seed_item_id"], json!("s"));
        assert_eq!(prefix["prefix_reused"], json!(true));
        assert_eq!(prefix["checkpoint_ref"], json!("ckpt-1"));
        // Host-measured: the adapter claimed 999 minutes.
        assert_close(&prefix["duration_minutes"], 2.0);
        assert!(!prefix.contains_key("episode_stage"));

        for (record, id) in records[1..].iter().zip(["s", "v1", "v2"]) {
            assert_eq!(record["item_id"], json!(id));
            assert_eq!(record["record_kind"], json!("episode_suffix"));
            assert_eq!(record["prefix_reused"], json!(true));
            assert_eq!(record["checkpoint_ref"], json!("ckpt-1"));
            assert_eq!(record["via"], json!("execute_episode"));
            assert_close(&record["duration_minutes"], 0.5);
        }
        assert_eq!(records[1]["is_variant"], json!(false));
        assert_eq!(records[2]["is_variant"], json!(true));
        assert_eq!(records[2]["variant_spec_id"], json!("spec-v1"));
    }

    #[test]
    fn a_single_item_group_does_not_reuse_its_prefix_and_drops_a_null_checkpoint_ref() {
        let clock = ManualClock::new();
        let mut adapter = ScriptedAdapter::new(Script::episode());
        let records = run(&mut adapter, &group_unit(0), FailurePolicy::Record, &clock).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0]["prefix_reused"], json!(false));
        assert_eq!(records[1]["prefix_reused"], json!(false));
        assert!(!records[0].contains_key("checkpoint_ref"));
    }

    #[test]
    fn avoided_recompute_of_a_group_is_prefix_times_k_minus_one() {
        let mut script = Script::episode();
        script.prepare_minutes = 3.0;
        script.execute_minutes = 0.5;
        let (mut adapter, clock) = timed_adapter(script);
        // k = 4 suffixes: the seed and three variants.
        let records = run(&mut adapter, &group_unit(3), FailurePolicy::Record, &clock).unwrap();
        let metrics = summarize_execution_records(&records);
        assert_eq!(metrics.shared_prefix_compute_minutes, 3.0);
        assert_eq!(metrics.episode_suffix_compute_minutes, 2.0);
        assert_eq!(metrics.avoided_recompute_minutes, 9.0);
        assert_eq!(metrics.successful_avoided_recompute_minutes, 9.0);
        assert_eq!(metrics.episode_group_count, 1);
        assert_eq!(metrics.episode_count, 4);
    }

    #[test]
    fn failed_suffixes_are_recorded_and_excluded_from_successful_avoided() {
        let mut script = Script::episode();
        script.prepare_minutes = 1.0;
        script.execute_errors.insert(
            "v1".into(),
            AdapterError::declared("boom", "suffix\nfailed", true),
        );
        let (mut adapter, clock) = timed_adapter(script);
        let records = run(&mut adapter, &group_unit(2), FailurePolicy::Record, &clock).unwrap();
        assert_eq!(records.len(), 4, "the failure does not stop the siblings");
        let failed = &records[2];
        assert_eq!(failed["execution_status"], json!("adapter_error"));
        assert_eq!(failed["episode_stage"], json!("execute"));
        assert_eq!(failed["record_kind"], json!("episode_suffix"));
        assert_eq!(
            failed["execution_group_id"],
            json!("main:epoch-2:group-0001")
        );
        assert_eq!(failed["variant_spec_id"], json!("spec-v1"));
        assert_eq!(failed["retryable_infra_error"], json!(true));
        assert_eq!(failed["adapter_error"]["message"], json!("suffix failed"));
        assert_eq!(failed["adapter_error"]["kind"], json!("boom"));
        assert_eq!(adapter.ops().last().unwrap(), "release:s");
        let metrics = summarize_execution_records(&records);
        assert_eq!(metrics.avoided_recompute_minutes, 2.0);
        assert_eq!(metrics.successful_avoided_recompute_minutes, 1.0);
        assert_eq!(metrics.episode_error_count, 1);
    }

    #[test]
    fn invalid_units_are_recorded_or_fatal_without_any_adapter_call() {
        let units = build_episode_execution_units(
            vec![crate::episode::testing::obj(
                json!({"item_id": "", "family": "f"}),
            )],
            "main",
            2,
        );
        let clock = ManualClock::new();
        let mut adapter = ScriptedAdapter::new(Script::episode());
        let records = run(&mut adapter, &units[0], FailurePolicy::Record, &clock).unwrap();
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record["episode_stage"], json!("group_validation"));
        assert_eq!(record["record_kind"], json!("standalone"));
        assert_eq!(record["prefix_reused"], json!(false));
        assert_eq!(record["adapter_error"]["type"], json!("invalid_item"));
        assert_eq!(
            record["adapter_error"]["message"],
            json!("recoverable episode seed items require a non-empty item_id")
        );
        assert_eq!(record["duration_minutes"], json!(0.05));
        let fatal = run(&mut adapter, &units[0], FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.error_type, ErrorType::InvalidItem);
        assert!(fatal.cause.is_none());
        assert!(adapter.ops().is_empty());
    }

    #[test]
    fn prepare_failure_is_recorded_on_the_prefix_and_never_falls_back_to_execute() {
        let mut script = Script::episode();
        script.prepare_minutes = 0.5;
        script.prepare.insert(
            "s".into(),
            PrepareScript::Fail(AdapterError::new(ErrorType::Trap, "prepare trapped")),
        );
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(2);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert_eq!(
            adapter.ops(),
            vec!["prepare:s"],
            "no execute, no release: no handle"
        );
        assert_eq!(records.len(), 1);
        let failed = &records[0];
        assert_eq!(failed["item_id"], json!("s"));
        assert_eq!(failed["episode_stage"], json!("prepare"));
        assert_eq!(failed["record_kind"], json!("shared_prefix"));
        assert_eq!(failed["prefix_reused"], json!(false));
        assert_eq!(failed["adapter_error"]["type"], json!("trap"));
        assert_close(&failed["duration_minutes"], 0.5);

        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.message, "prepare trapped");
        assert_eq!(adapter.ops(), vec!["prepare:s", "prepare:s"]);
    }

    #[test]
    fn prepare_returning_none_falls_back_to_plain_execute_per_item() {
        let mut script = Script::episode();
        script.execute_minutes = 0.25;
        script.prepare.insert("s".into(), PrepareScript::ReturnNone);
        script.execute_errors.insert(
            "v2".into(),
            AdapterError::new(ErrorType::Deadline, "too slow"),
        );
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(2);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert_eq!(
            adapter.ops(),
            vec!["prepare:s", "execute:s", "execute:v1", "execute:v2"]
        );
        let log = adapter.log.lock().unwrap().clone();
        assert!(log[0].group.is_some());
        assert!(
            log[1..].iter().all(|c| c.group.is_none()),
            "plain execute gets the context without execution_group_id"
        );
        assert_eq!(records.len(), 3);
        for record in &records {
            assert_eq!(record["episode_fallback"], json!("prepare_returned_none"));
            assert_eq!(record["record_kind"], json!("standalone"));
            assert_eq!(record["prefix_reused"], json!(false));
            assert!(!record.contains_key("execution_group_id"));
            assert_close(&record["duration_minutes"], 0.25);
        }
        assert_eq!(records[0]["item_id"], json!("s"));
        assert_eq!(records[0]["via"], json!("execute"));
        assert_eq!(records[2]["episode_stage"], json!("legacy_execute"));
        assert_eq!(records[2]["adapter_error"]["type"], json!("deadline"));

        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.message, "too slow");
    }

    #[test]
    fn episode_groups_only_adapter_with_prepare_none_gets_missing_export_records() {
        let mut script = Script::episode();
        script.protocols = Protocols {
            execute: false,
            episode_groups: true,
            replay: false,
            replay_children: false,
            child_risk: false,
            counterfactual: false,
            ..Protocols::default()
        };
        script.prepare.insert("s".into(), PrepareScript::ReturnNone);
        let clock = ManualClock::new();
        let mut adapter = ScriptedAdapter::new(script);
        let unit = group_unit(1);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert_eq!(adapter.ops(), vec!["prepare:s"], "execute is never called");
        assert_eq!(records.len(), 2);
        for record in &records {
            assert_eq!(record["adapter_error"]["type"], json!("missing_export"));
            assert!(
                record["adapter_error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("no plain execute")
            );
            assert_eq!(record["episode_stage"], json!("legacy_execute"));
            assert_eq!(record["episode_fallback"], json!("prepare_returned_none"));
            assert_eq!(record["record_kind"], json!("standalone"));
        }
        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.error_type, ErrorType::MissingExport);
    }

    #[test]
    fn invalid_prefix_record_releases_the_handle_and_records_the_error() {
        let mut script = Script::episode();
        script.prepare_minutes = 1.0;
        script.release_minutes = 0.5;
        script.prepare.insert(
            "s".into(),
            PrepareScript::BadPrefix(AdapterError::new(
                ErrorType::InvalidOutput,
                "prefix_record is not an object",
            )),
        );
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(1);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert_eq!(adapter.ops(), vec!["prepare:s", "release:s"]);
        assert_eq!(*adapter.open_handles.lock().unwrap(), 0);
        assert_eq!(records.len(), 1);
        let failed = &records[0];
        assert_eq!(failed["episode_stage"], json!("prepare"));
        assert_eq!(failed["adapter_error"]["type"], json!("invalid_output"));
        assert_eq!(failed["record_kind"], json!("shared_prefix"));
        assert!(!failed.contains_key("episode_release_error"));
        // Measured from the start of prepare through the release.
        assert_close(&failed["duration_minutes"], 1.5);

        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.error_type, ErrorType::InvalidOutput);
        assert!(fatal.cause.is_none());
    }

    #[test]
    fn invalid_prefix_with_failing_release_attaches_or_chains_the_release_error() {
        let mut script = Script::episode();
        script.release_minutes = 0.5;
        script.prepare.insert(
            "s".into(),
            PrepareScript::BadPrefix(AdapterError::new(ErrorType::InvalidOutput, "no prefix")),
        );
        script.release_errors.insert(
            "s".into(),
            AdapterError {
                retryable_infra_error: true,
                ..AdapterError::new(ErrorType::Trap, "release trapped")
            },
        );
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(1);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert_eq!(
            adapter.ops(),
            vec!["prepare:s", "release:s"],
            "a failed cleanup never falls back to execute"
        );
        assert_eq!(records.len(), 1);
        let failed = &records[0];
        assert_eq!(failed["adapter_error"]["type"], json!("invalid_output"));
        assert_eq!(failed["episode_stage"], json!("prepare"));
        assert_eq!(
            failed["episode_release_error"]["adapter_error"]["message"],
            json!("release trapped")
        );
        assert_close(&failed["episode_release_error"]["duration_minutes"], 0.5);
        assert_eq!(failed["retryable_infra_error"], json!(true));

        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(
            fatal.error.message, "no prefix",
            "validation error stays primary"
        );
        assert_eq!(fatal.cause.unwrap().message, "release trapped");
    }

    #[test]
    fn release_failure_is_attached_to_the_prefix_which_keeps_its_status() {
        let mut script = Script::episode();
        script.release_minutes = 0.75;
        script.release_errors.insert(
            "s".into(),
            AdapterError::new(ErrorType::Trap, "release trapped"),
        );
        let (mut adapter, clock) = timed_adapter(script);
        let unit = group_unit(1);
        let records = run(&mut adapter, &unit, FailurePolicy::Record, &clock).unwrap();
        assert!(
            !adapter.ops().iter().any(|op| op.starts_with("execute:")),
            "a failed release never falls back to execute"
        );
        assert_eq!(records.len(), 3);
        let prefix = &records[0];
        assert_eq!(prefix["episode_stage"], json!("release"));
        assert_eq!(prefix["accepted"], json!(true));
        assert!(!prefix.contains_key("execution_status"));
        assert_eq!(
            prefix["episode_release_error"]["adapter_error"]["type"],
            json!("trap")
        );
        assert_close(&prefix["episode_release_error"]["duration_minutes"], 0.75);
        assert_eq!(prefix["retryable_infra_error"], json!(false));
        assert!(!records[1].contains_key("episode_release_error"));

        // Under fatal, a release failure after clean suffixes is primary.
        let fatal = run(&mut adapter, &unit, FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.message, "release trapped");
        assert!(fatal.cause.is_none());
    }

    #[test]
    fn fatal_suffix_error_stops_the_group_but_still_releases() {
        let mut script = Script::episode();
        script.execute_errors.insert(
            "v1".into(),
            AdapterError::declared("bad", "suffix failed", false),
        );
        let mut adapter = ScriptedAdapter::new(script);
        let clock = ManualClock::new();
        let fatal = run(&mut adapter, &group_unit(3), FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(
            adapter.ops(),
            vec![
                "prepare:s",
                "execute_episode:s",
                "execute_episode:v1",
                "release:s"
            ]
        );
        assert_eq!(fatal.error.message, "suffix failed");
        assert!(fatal.cause.is_none());
        assert_eq!(*adapter.open_handles.lock().unwrap(), 0);
    }

    #[test]
    fn fatal_suffix_and_release_errors_chain_with_the_suffix_primary() {
        let mut script = Script::episode();
        script.execute_errors.insert(
            "s".into(),
            AdapterError::declared("bad", "suffix failed", false),
        );
        script.release_errors.insert(
            "s".into(),
            AdapterError::new(ErrorType::Trap, "release trapped"),
        );
        let mut adapter = ScriptedAdapter::new(script);
        let clock = ManualClock::new();
        let fatal = run(&mut adapter, &group_unit(1), FailurePolicy::Fatal, &clock).unwrap_err();
        assert_eq!(fatal.error.message, "suffix failed");
        assert_eq!(fatal.cause.as_ref().unwrap().message, "release trapped");
        let text = fatal.to_string();
        assert!(
            text.contains("suffix failed") && text.contains("release trapped"),
            "{text}"
        );
        assert_eq!(
            adapter.ops(),
            vec!["prepare:s", "execute_episode:s", "release:s"]
        );
    }

    #[test]
    fn host_owned_fields_an_adapter_returns_are_quarantined_in_every_record() {
        // Every record the adapter returns claims the fields only the host
        // may set: the prefix (from the seed's claims) and every item's.
        let claims = json!({
            "adapter_error": {"type": "trap", "message": "not really"},
            "execution_status": "adapter_error",
            "episode_release_error": {"type": "trap"},
            "adapter_claimed": "the adapter's own"
        });
        let items: Vec<Item> = [
            seed("s", "fam"),
            variant("v1", "s", "fam"),
            variant("v2", "s", "fam"),
        ]
        .into_iter()
        .map(|item| {
            let mut map = item.to_map();
            map.insert("claims".into(), claims.clone());
            Item::from(map)
        })
        .collect();
        let unit = build_episode_execution_units(items, "main", 2)
            .pop()
            .unwrap();
        for prepare in [true, false] {
            let mut script = Script::episode();
            if !prepare {
                script.prepare.insert("s".into(), PrepareScript::ReturnNone);
            }
            let clock = ManualClock::new();
            let records = execute_episode_group(
                &mut ScriptedAdapter::new(script),
                &unit,
                &base(),
                FailurePolicy::Record,
                &clock,
            )
            .unwrap();
            let kinds: Vec<_> = records
                .iter()
                .map(|r| r.to_map()["record_kind"].clone())
                .collect();
            let expected = if prepare {
                vec![
                    "shared_prefix",
                    "episode_suffix",
                    "episode_suffix",
                    "episode_suffix",
                ]
            } else {
                vec!["standalone"; 3]
            };
            assert_eq!(kinds, expected, "prepare: {prepare}");
            for record in &records {
                let record = record.to_map();
                for field in sandloop_contract::HOST_OWNED_FIELDS {
                    assert!(!record.contains_key(*field), "{field}: {record:?}");
                    assert!(
                        record["adapter_claimed"].get(field).is_some(),
                        "{field}: {record:?}"
                    );
                }
                assert_eq!(
                    record["adapter_claimed"]["adapter_error"]["message"],
                    "not really"
                );
                assert_eq!(record["accepted"], json!(true));
            }
            let maps: Vec<Record> = records.iter().map(UnitRecord::to_map).collect();
            let summary = summarize_execution_records(&maps);
            assert_eq!(
                summary.episode_error_count, 0,
                "prepare: {prepare}: {summary:?}"
            );
        }
        // A record without them keeps its own `adapter_claimed`.
        let mut honest = crate::episode::testing::obj(json!({"adapter_claimed": 1, "a": 2}));
        quarantine_host_owned(&mut honest);
        assert_eq!(Value::Object(honest), json!({"adapter_claimed": 1, "a": 2}));
    }

    #[test]
    fn prefix_record_fields_the_adapter_set_are_kept_where_the_reference_keeps_them() {
        struct OwnPrefix(ScriptedAdapter);
        impl EpisodeAdapter for OwnPrefix {
            type Handle = ();
            fn protocols(&self) -> Protocols {
                self.0.protocols()
            }
            fn execute(
                &mut self,
                item: &crate::episode::adapter::Item,
                ctx: &CallContext,
            ) -> Result<Record, AdapterError> {
                self.0.execute(item, ctx)
            }
            fn prepare_episode_group(
                &mut self,
                _seed: &crate::episode::adapter::Item,
                _items: &[crate::episode::adapter::Item],
                _ctx: &CallContext,
            ) -> Result<Option<Prepared<()>>, AdapterError> {
                Ok(Some(Prepared {
                    handle: (),
                    prefix_record: Ok(crate::episode::testing::obj(json!({
                        "item_id": "custom-prefix", "accepted": false,
                        "family": "forged", "is_variant": true
                    }))),
                    checkpoint_ref: None,
                }))
            }
            fn execute_episode(
                &mut self,
                _h: &(),
                item: &crate::episode::adapter::Item,
                ctx: &CallContext,
            ) -> Result<Record, AdapterError> {
                self.0.execute(item, ctx)
            }
            fn release_episode_group(
                &mut self,
                _h: (),
                _ctx: &CallContext,
            ) -> Result<(), AdapterError> {
                Ok(())
            }
        }
        let mut adapter = OwnPrefix(ScriptedAdapter::new(Script::episode()));
        let clock = ManualClock::new();
        let records = execute_episode_group(
            &mut adapter,
            &group_unit(0),
            &base(),
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        let prefix = &records[0].to_map();
        assert_eq!(
            prefix["item_id"],
            json!("custom-prefix"),
            "setdefault keeps the adapter's id"
        );
        assert_eq!(
            prefix["accepted"],
            json!(false),
            "setdefault keeps the adapter's verdict"
        );
        assert_eq!(
            prefix["family"],
            json!("fam"),
            "family always comes from the seed"
        );
        assert_eq!(prefix["is_variant"], json!(false));
        assert_eq!(
            prefix["duration_minutes"],
            json!(0.0),
            "host-measured, even when absent"
        );
    }
}
