use serde_json::json;

use super::*;
use crate::episode::adapter::AdapterError;
use crate::episode::clock::ManualClock;
use crate::episode::testing::{obj, seed};
use crate::harness::testing::{ScriptedSeeds, spec};

fn ids(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["item_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn gain_and_tie_break_match_the_reference_numbers() {
    assert_eq!(frontier_gain(1), 2.25);
    assert_eq!(frontier_gain(2), 2.28);
    assert_eq!(frontier_gain(4), 2.34);
    assert_eq!(frontier_gain(30), 2.75, "the age bonus is capped at 0.5");
    // Values computed with the reference's hashlib expression.
    let families = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let epoch1: Vec<u64> = families.iter().map(|f| frontier_tie_break(f, 1)).collect();
    assert_eq!(epoch1, vec![223355, 169618, 739745, 101254, 140424]);
    let epoch7: Vec<u64> = families.iter().map(|f| frontier_tie_break(f, 7)).collect();
    assert_eq!(epoch7, vec![116772, 848090, 698716, 506270, 702120]);
}

#[test]
fn families_rank_by_the_epoch_rotating_tie_break() {
    let families = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let seeds: Vec<Item> = families
        .iter()
        .map(|f| seed(&format!("s-{f}"), f))
        .collect();
    let expected = [
        (1, ["delta", "epsilon", "beta", "alpha", "gamma"]),
        (2, ["alpha", "epsilon", "delta", "beta", "gamma"]),
        (3, ["gamma", "beta", "epsilon", "alpha", "delta"]),
    ];
    for (epoch, order) in expected {
        let mut catalog = VariantCatalog::from_specs(
            families
                .iter()
                .map(|f| spec(&format!("x-{f}"), f, 0.0))
                .collect(),
        );
        let mut source = ScriptedSeeds::new(vec![]);
        let selection = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            epoch,
            0,
            FailurePolicy::Record,
            &ManualClock::new(),
        )
        .unwrap();
        let chosen: Vec<&str> = selection
            .audit
            .specs
            .iter()
            .map(|s| s.seed_family.as_str())
            .collect();
        assert_eq!(chosen, order, "epoch {epoch}");
        assert!(
            selection
                .audit
                .specs
                .iter()
                .all(|s| s.gain == frontier_gain(epoch))
        );
    }
}

#[test]
fn passes_give_a_seed_several_variants_until_max_lanes() {
    // Epoch 1 ranks delta before alpha.
    let seeds = vec![
        seed("sa", "alpha"),
        seed("sd", "delta"),
        seed("sa2", "alpha"),
    ];
    let specs = vec![
        spec("a-low", "alpha", 0.0),
        spec("a-high", "alpha", 5.0),
        spec("a-mid", "alpha", 1.0),
        spec("d-1", "delta", 0.0),
        spec("z-orphan", "zeta", 9.0), // no seed of that family this epoch
    ];
    let mut catalog = VariantCatalog::from_specs(specs.clone());
    let mut source = ScriptedSeeds::new(vec![]);
    let clock = ManualClock::new();
    let selection = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        0,
        FailurePolicy::Record,
        &clock,
    )
    .unwrap();
    // Pass 1: delta then alpha's best; pass 2 and 3: alpha's others.
    assert_eq!(
        source.compiled(),
        vec![
            "compile:d-1@sd",
            "compile:a-high@sa",
            "compile:a-mid@sa",
            "compile:a-low@sa"
        ]
    );
    assert_eq!(selection.audit.admitted, 4);
    assert_eq!(selection.audit.passes, 3);
    assert_eq!(selection.audit.catalog_pending_after, 1);
    assert_eq!(selection.audit.requested_lanes, 0);

    // max_lanes = 3 stops inside the second pass.
    let mut catalog = VariantCatalog::from_specs(specs);
    let mut source = ScriptedSeeds::new(vec![]);
    let selection = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        3,
        FailurePolicy::Record,
        &clock,
    )
    .unwrap();
    assert_eq!(
        ids(&selection.items),
        vec!["sd~d-1", "sa~a-high", "sa~a-mid"]
    );
    assert_eq!(selection.audit.catalog_pending_after, 2);
    assert!(!catalog.is_consumed("a-low"));
}

#[test]
fn compiled_items_get_the_reference_defaults_without_overwriting() {
    let seeds = vec![seed("s1", "fam")];
    let mut custom = spec("c", "fam", 0.0);
    custom.insert(
        "compiled".into(),
        json!({"concurrency_key": "own-key", "family": "adapter-family"}),
    );
    let mut catalog = VariantCatalog::from_specs(vec![spec("p", "fam", 1.0), custom]);
    let mut source = ScriptedSeeds::new(vec![]);
    let selection = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        0,
        FailurePolicy::Record,
        &ManualClock::new(),
    )
    .unwrap();
    let plain = &selection.items[0];
    assert_eq!(plain["item_id"], json!("s1~p"));
    assert_eq!(plain["is_variant"], json!(true));
    assert_eq!(plain["variant_spec"]["spec_id"], json!("p"));
    assert_eq!(plain["family"], json!("fam"));
    assert_eq!(plain["seed_item_id"], json!("s1"));
    assert_eq!(plain["concurrency_key"], json!("fam:variant:p"));
    let custom = &selection.items[1];
    assert_eq!(custom["concurrency_key"], json!("own-key"));
    assert_eq!(custom["family"], json!("adapter-family"));
}

#[test]
fn compile_errors_are_recorded_and_consumed_or_fatal_and_kept() {
    let seeds = vec![seed("s1", "fam")];
    let mut source = ScriptedSeeds::new(vec![]);
    source.compile_errors.insert(
        "bad".into(),
        AdapterError::declared("unsupported_op", "op 'x' unknown", false),
    );
    let clock = ManualClock::new();
    let mut catalog =
        VariantCatalog::from_specs(vec![spec("bad", "fam", 2.0), spec("ok", "fam", 1.0)]);
    let selection = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        0,
        FailurePolicy::Record,
        &clock,
    )
    .unwrap();
    assert_eq!(ids(&selection.items), vec!["s1~ok"]);
    assert_eq!(selection.error_records.len(), 1);
    let record = &selection.error_records[0];
    assert_eq!(record["item_id"], json!("bad"));
    assert_eq!(record["family"], json!("fam"));
    assert_eq!(record["is_variant"], json!(true));
    assert_eq!(record["variant_spec_id"], json!("bad"));
    assert_eq!(record["episode_stage"], json!("compile_variant"));
    assert_eq!(record["adapter_error"]["kind"], json!("unsupported_op"));
    assert!(catalog.is_consumed("bad"), "a failed spec is not retried");
    assert_eq!(selection.audit.compile_error_count, 1);
    assert_eq!(selection.audit.admitted, 1);
    assert!(selection.audit.specs[0].compile_error);

    let mut catalog =
        VariantCatalog::from_specs(vec![spec("bad", "fam", 2.0), spec("ok", "fam", 1.0)]);
    let fatal = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        0,
        FailurePolicy::Fatal,
        &clock,
    )
    .unwrap_err();
    assert_eq!(fatal.error.message, "op 'x' unknown");
    assert!(!catalog.is_consumed("bad"));
    assert!(!catalog.is_consumed("ok"), "nothing after the failure ran");
}

#[test]
fn each_spec_is_consumed_once_including_duplicated_ids_and_restores() {
    let seeds = vec![seed("s1", "fam")];
    let mut catalog = VariantCatalog::from_specs(vec![
        spec("dup", "fam", 0.0),
        spec("dup", "fam", 0.0),
        obj(json!({"seed_family": "fam"})), // no spec_id: ignored
        obj(json!({"spec_id": "", "seed_family": "fam"})),
    ]);
    assert_eq!(catalog.specs().len(), 2);
    let mut source = ScriptedSeeds::new(vec![]);
    let clock = ManualClock::new();
    let first = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        1,
        0,
        FailurePolicy::Record,
        &clock,
    )
    .unwrap();
    assert_eq!(ids(&first.items), vec!["s1~dup"]);
    assert_eq!(first.audit.catalog_pending_after, 0);
    let second = select_frontier_work(
        &seeds,
        &mut catalog,
        &mut source,
        2,
        0,
        FailurePolicy::Record,
        &clock,
    )
    .unwrap();
    assert!(second.items.is_empty());
    assert_eq!(second.audit.passes, 0);
    assert_eq!(catalog.consumed().iter().collect::<Vec<_>>(), vec!["dup"]);

    catalog.restore_consumed(["", "  ", "other"]);
    assert_eq!(catalog.consumed().len(), 1);
    assert_eq!(catalog.pending_for("fam").len(), 2);
    catalog.restore_consumed(Vec::<String>::new());
    assert_eq!(catalog.pending_count(), 2);
}

#[test]
fn a_catalog_file_is_reread_and_a_broken_rewrite_keeps_the_last_good_specs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    assert!(matches!(
        VariantCatalog::open(&path),
        Err(CatalogError::Read { .. })
    ));
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION,
                                           "specs": [spec("a", "fam", 0.0)]}))
        .unwrap(),
    )
    .unwrap();
    let mut catalog = VariantCatalog::open(&path).unwrap();
    assert_eq!(catalog.specs().len(), 1);
    assert_eq!(catalog.path(), Some(path.as_path()));
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0), spec("b", "fam", 0.0)]}))
            .unwrap(),
    )
    .unwrap();
    catalog.refresh().unwrap();
    assert_eq!(catalog.specs().len(), 2);
    std::fs::write(&path, "{\"specs\": [").unwrap();
    assert!(matches!(catalog.refresh(), Err(CatalogError::Parse { .. })));
    assert_eq!(catalog.specs().len(), 2, "the last good specs stay in use");
    std::fs::write(&path, "[1, 2]").unwrap();
    assert!(matches!(catalog.refresh(), Err(CatalogError::Shape { .. })));
}

/// Writes `payload` as the catalog file in a fresh directory and opens
/// it; returns the open error, checking that it names the file.
fn open_error(payload: Value) -> CatalogError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(&path, serde_json::to_string(&payload).unwrap()).unwrap();
    let error = VariantCatalog::open(&path).unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    error
}

/// The message of an [`CatalogError::Invalid`] error for `payload`.
fn invalid(payload: Value) -> String {
    match open_error(payload) {
        CatalogError::Invalid { message, .. } => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn a_catalog_file_without_a_specs_list_is_rejected() {
    for payload in [
        json!({}),
        json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION}),
        json!({"specs": null}),
        json!({"specs": {"a": spec("a", "fam", 0.0)}}),
        json!({"specs": "a"}),
        json!([spec("a", "fam", 0.0)]),
        json!(null),
    ] {
        assert!(
            matches!(open_error(payload.clone()), CatalogError::Shape { .. }),
            "{payload}"
        );
    }
    // An empty list is a valid (empty) catalog.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(&path, r#"{"specs": []}"#).unwrap();
    assert!(VariantCatalog::open(&path).unwrap().specs().is_empty());
}

#[test]
fn a_wrong_schema_version_is_rejected_and_an_absent_one_allowed() {
    let message = invalid(json!({"schema_version": "loopx_explore_variant_catalog_v1",
                                     "specs": []}));
    assert!(message.contains("schema_version"), "{message}");
    assert!(
        message.contains("\"loopx_explore_variant_catalog_v1\""),
        "{message}"
    );
    let message = invalid(json!({"schema_version": null, "specs": []}));
    assert!(message.contains("schema_version"), "{message}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0)]})).unwrap(),
    )
    .unwrap();
    assert_eq!(VariantCatalog::open(&path).unwrap().specs().len(), 1);
}

#[test]
fn a_spec_that_is_not_an_object_is_rejected() {
    let message = invalid(json!({"specs": [spec("a", "fam", 0.0), "b", [1]]}));
    assert!(
        message.contains("specs[1] must be a JSON object, got string \"b\""),
        "{message}"
    );
    assert!(
        message.contains("specs[2] must be a JSON object, got a list"),
        "{message}"
    );
    assert!(!message.contains("specs[0]"), "{message}");
}

#[test]
fn a_missing_blank_or_non_string_spec_id_is_rejected() {
    let message = invalid(json!({"specs": [
        spec("a", "fam", 0.0),
        {"seed_family": "fam"},
        {"spec_id": "  ", "seed_family": "fam"},
        {"spec_id": 7, "seed_family": "fam"},
        {"spec_id": null, "seed_family": "fam"},
    ]}));
    for expected in [
        "specs[1].spec_id is missing",
        "specs[2].spec_id is blank",
        "specs[3].spec_id must be a non-empty string, got number 7",
        "specs[4].spec_id must be a non-empty string, got null",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    assert!(!message.contains("specs[0]"), "{message}");
}

#[test]
fn a_duplicated_spec_id_names_both_indices() {
    let message = invalid(json!({"specs": [
        spec("a", "fam", 0.0),
        spec("b", "fam", 0.0),
        spec("a", "other", 1.0),
        spec("a", "fam", 0.0),
    ]}));
    assert!(
        message.contains("specs[2].spec_id \"a\" duplicates specs[0].spec_id"),
        "{message}"
    );
    assert!(
        message.contains("specs[3].spec_id \"a\" duplicates specs[0].spec_id"),
        "{message}"
    );
    assert!(!message.contains("specs[1]"), "{message}");
}

#[test]
fn a_missing_blank_or_non_string_seed_family_is_rejected() {
    let message = invalid(json!({"specs": [
        {"spec_id": "a"},
        {"spec_id": "b", "seed_family": ""},
        {"spec_id": "c", "seed_family": ["fam"]},
        spec("d", "fam", 0.0),
    ]}));
    for expected in [
        "specs[0].seed_family is missing",
        "specs[1].seed_family is blank",
        "specs[2].seed_family must be a non-empty string, got a list",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    assert!(!message.contains("specs[3]"), "{message}");
}

#[test]
fn a_non_numeric_priority_is_rejected_and_null_or_absent_allowed() {
    let message = invalid(json!({"specs": [
        {"spec_id": "a", "seed_family": "fam", "priority": "high"},
        {"spec_id": "b", "seed_family": "fam", "priority": true},
        {"spec_id": "c", "seed_family": "fam", "priority": null},
        {"spec_id": "d", "seed_family": "fam"},
        {"spec_id": "e", "seed_family": "fam", "priority": -2.5},
    ]}));
    assert_eq!(
        message,
        "specs[0].priority must be a number or null, got string \"high\"; \
             specs[1].priority must be a number or null, got boolean true"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(
        &path,
        r#"{"specs": [{"spec_id": "c", "seed_family": "fam", "priority": null},
                          {"spec_id": "d", "seed_family": "fam"},
                          {"spec_id": "e", "seed_family": "fam", "priority": -2.5}]}"#,
    )
    .unwrap();
    assert_eq!(VariantCatalog::open(&path).unwrap().specs().len(), 3);
}

#[test]
fn many_problems_are_capped_and_an_invalid_rewrite_keeps_the_last_good_specs() {
    let specs: Vec<Value> = (0..25)
        .map(|i| json!({"spec_id": format!("s{i}")}))
        .collect();
    let message = invalid(json!({"specs": specs}));
    assert!(message.contains("specs[19].seed_family"), "{message}");
    assert!(!message.contains("specs[20]"), "{message}");
    assert!(message.ends_with("; and 5 more problem(s)"), "{message}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0)]})).unwrap(),
    )
    .unwrap();
    let mut catalog = VariantCatalog::open(&path).unwrap();
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0), {"spec_id": "b"}]}))
            .unwrap(),
    )
    .unwrap();
    let error = catalog.refresh().unwrap_err();
    assert!(matches!(error, CatalogError::Invalid { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "variant catalog {} is invalid: specs[1].seed_family is missing",
            path.display()
        )
    );
    assert_eq!(catalog.specs().len(), 1, "the last good specs stay in use");
    std::fs::write(&path, "{}").unwrap();
    assert!(matches!(catalog.refresh(), Err(CatalogError::Shape { .. })));
    assert_eq!(catalog.specs().len(), 1);
}

#[test]
fn a_catalog_that_is_not_json_names_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant_catalog.json");
    std::fs::write(&path, "{\"specs\": [\n  {\"spec_id\": \"a\",}\n]}").unwrap();
    let error = VariantCatalog::open(&path).unwrap_err();
    assert!(matches!(error, CatalogError::Parse { .. }), "{error:?}");
    // The arm's mid-run warning shows the error's own message only.
    let shown = format!("{}:2:", path.display());
    assert!(error.to_string().contains(&shown), "{error}");

    std::fs::write(&path, b"{\"specs\": [\n  {\"spec_id\": \"a\xff\"}]}").unwrap();
    let error = VariantCatalog::open(&path).unwrap_err();
    assert!(matches!(error, CatalogError::Parse { .. }), "{error:?}");
    assert!(error.to_string().contains(&shown), "{error}");
}

mod props {
    use super::*;
    use crate::hostile_inputs::{config, json_value, mutate_bytes, read_temp_file, value_not_of};
    use proptest::prelude::*;

    /// The error and its sources, as `sandloop run` prints them.
    fn chain(error: &CatalogError) -> String {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    fn open_bytes(
        bytes: &[u8],
    ) -> (
        tempfile::TempDir,
        PathBuf,
        Result<VariantCatalog, CatalogError>,
    ) {
        read_temp_file("variant_catalog.json", bytes, |path| {
            VariantCatalog::open(path)
        })
    }

    fn valid_catalog(specs: usize) -> Value {
        let specs: Vec<Value> = (0..specs)
            .map(|i| {
                json!({"spec_id": format!("s{i}"), "seed_family": "fam",
                                "intent": "x", "ops": [{"op": "append", "text": "t"}],
                                "priority": i})
            })
            .collect();
        json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION, "specs": specs})
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_catalog_any_bytes_never_panic_and_errors_name_the_file(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
        ) {
            let (_dir, path, result) = open_bytes(&bytes);
            if let Err(error) = result {
                let shown = path.display().to_string();
                prop_assert!(chain(&error).contains(&shown), "{}", chain(&error));
            }
        }

        #[test]
        fn prop_catalog_damaged_text_is_refused_with_file_line_and_column(
            bytes in (0usize..4).prop_flat_map(|n| {
                let text = serde_json::to_vec_pretty(&valid_catalog(n)).unwrap();
                mutate_bytes(text, false)
            }),
        ) {
            let (_dir, path, result) = open_bytes(&bytes);
            match result {
                Ok(catalog) => prop_assert!(catalog.specs().len() <= 3),
                Err(CatalogError::Parse { source, .. }) => {
                    let lines = bytes.split(|b| *b == b'\n').count();
                    prop_assert!(source.line() >= 1 && source.line() <= lines);
                    let error = VariantCatalog::open(&path).unwrap_err();
                    let shown = format!("{}:{}:{}", path.display(), source.line(), source.column());
                    prop_assert!(error.to_string().contains(&shown), "{}", error);
                }
                Err(error) => {
                    let shown = path.display().to_string();
                    prop_assert!(chain(&error).contains(&shown), "{}", chain(&error));
                }
            }
        }

        #[test]
        fn prop_catalog_a_spec_field_of_the_wrong_type_names_spec_and_field(
            count in 1usize..5,
            index in 0usize..5,
            (field, value) in prop_oneof![
                value_not_of(&["string"]).prop_map(|v| ("spec_id", v)),
                value_not_of(&["string"]).prop_map(|v| ("seed_family", v)),
                value_not_of(&["number", "null"]).prop_map(|v| ("priority", v)),
            ],
        ) {
            let index = index % count;
            let mut catalog = valid_catalog(count);
            catalog["specs"][index][field] = value;
            let (_dir, path, result) = open_bytes(&serde_json::to_vec(&catalog).unwrap());
            let error = result.unwrap_err();
            prop_assert!(matches!(error, CatalogError::Invalid { .. }), "{:?}", error);
            let text = error.to_string();
            prop_assert!(text.contains(&path.display().to_string()), "{}", text);
            prop_assert!(text.contains(&format!("specs[{index}].{field} ")), "{}", text);
        }

        #[test]
        fn prop_catalog_any_json_is_read_or_refused_naming_what_is_wrong(
            specs in prop::collection::vec(json_value(), 0..6),
            schema in prop::option::of(json_value()),
        ) {
            let mut catalog = json!({"specs": specs});
            if let Some(schema) = schema {
                catalog["schema_version"] = schema;
            }
            let (_dir, _path, result) = open_bytes(&serde_json::to_vec(&catalog).unwrap());
            match result {
                Ok(opened) => prop_assert_eq!(opened.specs().len(), specs.len()),
                Err(CatalogError::Invalid { message, .. }) => {
                    // Each problem names `specs[i].field` or `schema_version`.
                    prop_assert!(
                        message.starts_with("specs[") || message.starts_with("schema_version "),
                        "{}", message
                    );
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
