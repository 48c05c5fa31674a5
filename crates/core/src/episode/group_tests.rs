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
