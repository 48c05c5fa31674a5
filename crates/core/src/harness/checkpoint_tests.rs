use serde_json::json;

use super::*;
use crate::episode::metrics::ExecutionMetrics;

fn signature() -> RuntimeSignature {
    RuntimeSignature {
        arm_key: "main".into(),
        adapter_type: "component:sha256:abc".into(),
        worker_count: 2,
        frontier_max_lanes: 0,
        variant_catalog_enabled: true,
        item_failure_policy: FailurePolicy::Record,
        episode_mode: Some("recoverable-v0".into()),
    }
}

fn epoch_summary(epoch: u32) -> EpochSummary {
    EpochSummary {
        schema_version: "loopx_explore_harness_arm_v0".into(),
        epoch,
        epoch_wall_minutes: 0.5,
        queue_size: 2,
        execution_unit_count: 1,
        record_count: 3,
        raw_value: 2.0,
        novel_value: 1.0,
        execution_metrics: ExecutionMetrics::default(),
        frontier: None,
        lanes: Vec::new(),
    }
}

fn anytime(epoch: u32) -> AnytimeCheckpoint {
    AnytimeCheckpoint {
        epoch,
        elapsed_minutes: f64::from(epoch),
        raw_value_cum: 1.0,
        novel_value_cum: 1.0,
        coverage_count_cum: 1,
        variant_records_cum: 0,
        requested_worker_minutes_cum: 2.0,
        execution_metrics_cum: ExecutionMetrics::default(),
    }
}

fn state(epochs: u32) -> CheckpointState {
    let mut coverage = Map::new();
    coverage.insert("fam".into(), json!(0.5));
    CheckpointState {
        next_epoch: epochs + 1,
        elapsed_minutes: 1.25,
        epochs: (1..=epochs).map(epoch_summary).collect(),
        checkpoints: (1..=epochs).map(anytime).collect(),
        novelty_seen: vec!["a".into(), "flag:fam:x".into()],
        catalog_consumed: vec!["spec-1".into()],
        coverage_first_seen: coverage,
        raw_value_total: 4.0,
        novel_value_total: 3.0,
        variant_records_total: 1,
        record_count: 6,
        records_jsonl_bytes: 600,
        epochs_jsonl_bytes: 400,
    }
}

fn payload(epochs: u32) -> Value {
    serde_json::to_value(ArmCheckpoint::new(&signature(), state(epochs))).unwrap()
}

fn message_for(mutate: impl FnOnce(&mut Value)) -> String {
    let mut value = payload(2);
    mutate(&mut value);
    validate_checkpoint(value, &signature())
        .unwrap_err()
        .to_string()
}

/// `golden/checkpoint.json` was written by `sandloop run` (markdown
/// explorer, 2 workers, a variant catalog, one epoch) before the
/// checkpoint was read through types.
const GOLDEN: &[u8] = include_bytes!("golden/checkpoint.json");

fn golden_signature() -> RuntimeSignature {
    RuntimeSignature {
        arm_key: "main".into(),
        adapter_type: "component:sha256:\
                           edc9f48be494de4c773c07c269c36c4a730457a5a2a4c297b942f0dcf17384e1"
            .into(),
        worker_count: 2,
        frontier_max_lanes: 0,
        variant_catalog_enabled: true,
        item_failure_policy: FailurePolicy::Record,
        episode_mode: Some("recoverable-v0".into()),
    }
}

#[test]
fn a_checkpoint_written_by_the_host_loads_and_is_written_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    fs::write(&path, GOLDEN).unwrap();
    let state = load_arm_checkpoint(&path, &golden_signature()).unwrap();
    assert_eq!(state.next_epoch, 2);
    assert_eq!(state.epochs.len(), 1);
    assert_eq!(state.epochs[0].lanes.len(), 1);
    let frontier = state.epochs[0].frontier.as_ref().expect("a catalog ran");
    assert_eq!(frontier.admitted, 4);
    assert_eq!(state.checkpoints[0].variant_records_cum, 4);
    assert_eq!(state.record_count, 6);
    assert_eq!(state.records_jsonl_bytes, 13512);
    assert_eq!(state.epochs_jsonl_bytes, 1540);
    assert_eq!(state.coverage_first_seen.len(), 1);
    // Written back through the same types and writer: the same bytes
    // (struct fields in declaration order, the signature's keys sorted).
    let again = dir.path().join("again.json");
    write_arm_checkpoint(&again, &ArmCheckpoint::new(&golden_signature(), state)).unwrap();
    assert_eq!(
        String::from_utf8(fs::read(&again).unwrap()).unwrap(),
        String::from_utf8(GOLDEN.to_vec()).unwrap()
    );
}

#[test]
fn a_written_checkpoint_loads_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let checkpoint = ArmCheckpoint::new(&signature(), state(2));
    assert_eq!(checkpoint.completed_epochs, 2);
    assert_eq!(checkpoint.schema_version, HARNESS_CHECKPOINT_SCHEMA_VERSION);
    write_arm_checkpoint(&path, &checkpoint).unwrap();
    assert_eq!(load_arm_checkpoint(&path, &signature()).unwrap(), state(2));
    let empty = ArmCheckpoint::new(&signature(), state(0));
    write_arm_checkpoint(&path, &empty).unwrap();
    assert_eq!(
        load_arm_checkpoint(&path, &signature()).unwrap().next_epoch,
        1
    );
}

#[test]
fn missing_and_unreadable_files_are_reported_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let error = load_arm_checkpoint(&path, &signature()).unwrap_err();
    assert!(matches!(error, CheckpointError::Missing { .. }));
    assert!(error.to_string().contains("checkpoint.json"), "{error}");
    fs::write(&path, "{not json").unwrap();
    let error = load_arm_checkpoint(&path, &signature()).unwrap_err();
    assert!(
        matches!(error, CheckpointError::Unreadable { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("invalid JSON"), "{error}");
}

#[test]
fn signature_mismatch_names_every_field_with_both_values() {
    let mut other = signature();
    other.worker_count = 4;
    other.adapter_type = "component:sha256:def".into();
    other.episode_mode = None;
    let error = validate_checkpoint(payload(1), &other).unwrap_err();
    let CheckpointError::Incompatible(mismatches) = &error else {
        panic!("expected a signature mismatch, got {error}");
    };
    let fields: Vec<&str> = mismatches.iter().map(|m| m.field.as_str()).collect();
    // Fields are compared in the signature's (sorted) key order.
    assert_eq!(fields, vec!["adapter_type", "episode_mode", "worker_count"]);
    assert_eq!(mismatches[2].found, json!(2));
    assert_eq!(mismatches[2].expected, json!(4));
    let text = error.to_string();
    assert!(
        text.starts_with("resume checkpoint runtime is incompatible: "),
        "{text}"
    );
    assert!(
        text.contains(
            "adapter_type is \"component:sha256:abc\" in the checkpoint but \
                 \"component:sha256:def\" in this run"
        ),
        "{text}"
    );
    assert!(
        text.contains("worker_count is 2 in the checkpoint but 4 in this run"),
        "{text}"
    );
    assert!(
        text.contains("episode_mode is \"recoverable-v0\" in the checkpoint but null in this run"),
        "{text}"
    );
    // A field missing from an older checkpoint reads as null.
    let error = validate_checkpoint(
        {
            let mut value = payload(1);
            value["runtime_signature"]
                .as_object_mut()
                .unwrap()
                .remove("frontier_max_lanes");
            value
        },
        &signature(),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("frontier_max_lanes is null in the checkpoint but 0 in this run"),
        "{error}"
    );
}

#[test]
fn every_structural_check_has_its_own_message() {
    type Mutation = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|v| *v = json!([1])),
            "resume checkpoint must be a JSON object",
        ),
        (
            Box::new(|v| v["schema_version"] = json!("other_v9")),
            "resume checkpoint schema_version is incompatible: expected \
                 \"loopx_explore_harness_checkpoint_v0\", got \"other_v9\"",
        ),
        (
            Box::new(|v| v["arm_key"] = json!("other")),
            "resume checkpoint arm_key is incompatible: expected \"main\", got \"other\"",
        ),
        (
            Box::new(|v| v["runtime_signature"] = json!(null)),
            "resume checkpoint is missing runtime_signature",
        ),
        (
            Box::new(|v| v["state"] = json!([])),
            "resume checkpoint is missing state",
        ),
        (
            Box::new(|v| v["state"]["novelty_seen"] = json!("a")),
            "resume checkpoint state.novelty_seen must be a list",
        ),
        (
            Box::new(|v| v["state"]["epochs"][0] = json!(1)),
            "resume checkpoint state.epochs must contain objects",
        ),
        (
            Box::new(|v| v["state"]["checkpoints"][1] = json!("x")),
            "resume checkpoint state.checkpoints must contain objects",
        ),
        (
            Box::new(|v| v["state"]["novelty_seen"][0] = json!(1)),
            "resume checkpoint state.novelty_seen must contain strings",
        ),
        (
            Box::new(|v| v["state"]["catalog_consumed"] = json!([null])),
            "resume checkpoint state.catalog_consumed must contain strings",
        ),
        (
            Box::new(|v| v["state"]["coverage_first_seen"] = json!([])),
            "resume checkpoint state.coverage_first_seen must be an object",
        ),
        (
            Box::new(|v| v["state"]["coverage_first_seen"]["fam"] = json!("soon")),
            "resume checkpoint state.coverage_first_seen.fam must be numeric",
        ),
        (
            Box::new(|v| v["completed_epochs"] = json!("two")),
            "resume checkpoint completed_epochs must be an integer",
        ),
        (
            Box::new(|v| v["completed_epochs"] = json!(3)),
            "resume checkpoint completed_epochs does not match epoch history",
        ),
        (
            Box::new(|v| {
                v["state"]["checkpoints"].as_array_mut().unwrap().pop();
            }),
            "resume checkpoint anytime history does not match completed_epochs",
        ),
        (
            Box::new(|v| v["state"]["epochs"][1]["epoch"] = json!("2")),
            "resume checkpoint epoch history must use integer epoch ids",
        ),
        (
            Box::new(|v| v["state"]["checkpoints"][0]["epoch"] = json!(2)),
            "resume checkpoint epoch history is not contiguous from epoch 1",
        ),
        (
            Box::new(|v| v["state"]["next_epoch"] = json!(-1)),
            "resume checkpoint state.next_epoch must be an integer",
        ),
        (
            Box::new(|v| v["state"]["next_epoch"] = json!(5)),
            "resume checkpoint next_epoch is inconsistent: expected 3, got 5",
        ),
        (
            Box::new(|v| v["state"]["raw_value_total"] = json!("lots")),
            "resume checkpoint state.raw_value_total must be numeric",
        ),
        (
            Box::new(|v| v["state"]["records_jsonl_bytes"] = json!(-5)),
            "resume checkpoint state.records_jsonl_bytes must be a non-negative integer",
        ),
    ];
    for (mutate, expected) in cases {
        assert_eq!(message_for(mutate), expected);
    }
    let text = message_for(|v| {
        v["state"]["epochs"][1]
            .as_object_mut()
            .unwrap()
            .remove("execution_metrics");
    });
    assert!(
        text.starts_with("resume checkpoint state.epochs[1] is malformed:"),
        "{text}"
    );
}

#[test]
fn absent_totals_read_as_zero_like_the_reference() {
    let mut value = payload(1);
    let state = value["state"].as_object_mut().unwrap();
    state.remove("raw_value_total");
    state.insert("novel_value_total".into(), Value::Null);
    state.remove("records_jsonl_bytes");
    let restored = validate_checkpoint(value, &signature()).unwrap();
    assert_eq!(restored.raw_value_total, 0.0);
    assert_eq!(restored.novel_value_total, 0.0);
    assert_eq!(restored.records_jsonl_bytes, 0);
    assert_eq!(restored.epochs_jsonl_bytes, 400);
}

#[test]
fn missing_lists_and_fractional_totals_name_their_field() {
    let text = message_for(|v| {
        v["state"].as_object_mut().unwrap().remove("epochs");
    });
    assert_eq!(
        text,
        "resume checkpoint state is malformed: missing field `epochs`"
    );
    let text = message_for(|v| v["state"]["variant_records_total"] = json!(1.5));
    assert!(
        text.starts_with("resume checkpoint state.variant_records_total is malformed: "),
        "{text}"
    );
    let mut value = payload(2);
    value["state"]["variant_records_total"] = json!(3.0);
    value["completed_epochs"] = json!(2.0);
    let restored = validate_checkpoint(value, &signature()).unwrap();
    assert_eq!(restored.variant_records_total, 3);
}

#[test]
fn a_malformed_checkpoint_names_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let mut value = payload(2);
    value["state"]["epochs"][1]["record_count"] = json!("three");
    fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    let text = load_arm_checkpoint(&path, &signature())
        .unwrap_err()
        .to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("state.epochs[1].record_count"), "{text}");

    let mut value = payload(2);
    value["state"]["catalog_consumed"] = json!({"a": 1});
    fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    let text = load_arm_checkpoint(&path, &signature())
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(&format!(
            "{}: resume checkpoint state.catalog_consumed must be a list",
            path.display()
        )),
        "{text}"
    );
}

mod props {
    use super::*;
    use crate::hostile_inputs::{
        config, json_value, mutate_bytes, read_temp_file, with_a_leaf_of_another_type,
    };
    use proptest::prelude::*;

    fn load_bytes(
        bytes: &[u8],
    ) -> (
        tempfile::TempDir,
        PathBuf,
        Result<CheckpointState, CheckpointError>,
    ) {
        read_temp_file("checkpoint.json", bytes, |path| {
            load_arm_checkpoint(path, &signature())
        })
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_checkpoint_damaged_bytes_never_panic_and_errors_name_the_file(
            bytes in (0u32..3).prop_flat_map(|n| {
                mutate_bytes(serde_json::to_vec_pretty(&payload(n)).unwrap(), false)
            }),
        ) {
            let (_dir, path, result) = load_bytes(&bytes);
            if let Err(error) = result {
                let text = error.to_string();
                prop_assert!(
                    text.contains(&path.display().to_string())
                        || matches!(error, CheckpointError::Incompatible(_)),
                    "{}", text
                );
            }
        }

        #[test]
        fn prop_checkpoint_a_value_of_another_type_names_file_and_field(
            (checkpoint, key) in with_a_leaf_of_another_type(payload(2), |_| true),
        ) {
            let (_dir, path, result) = load_bytes(&serde_json::to_vec(&checkpoint).unwrap());
            let error = result.unwrap_err();
            let text = error.to_string();
            prop_assert!(
                text.contains(&path.display().to_string())
                    || matches!(error, CheckpointError::Incompatible(_)),
                "{}", text
            );
            prop_assert!(text.contains(&key), "{} not named in {}", key, text);
        }

        #[test]
        fn prop_checkpoint_any_json_never_panics(
            value in json_value(),
            state in json_value(),
        ) {
            let _ = validate_checkpoint(value, &signature());
            let mut checkpoint = payload(1);
            checkpoint["state"] = state;
            let _ = validate_checkpoint(checkpoint, &signature());
        }
    }
}
