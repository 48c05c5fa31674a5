use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar};

use serde_json::json;

use super::*;
use crate::episode::adapter::{EpisodeAdapter, ErrorType, Item};
use crate::episode::clock::ManualClock;
use crate::episode::policy::FailurePolicy;
use crate::episode::testing::{Call, PrepareScript, Script, ScriptedAdapter, obj, seed};
use crate::harness::catalog::VariantCatalog;
use crate::harness::checkpoint::CheckpointError;
use crate::harness::run_dir::{OutputOffsets, RunDir};
use crate::harness::testing::{ScriptedSeeds, spec};

/// Seeds `e{epoch}-s{k}` in families `fam{k}` for each epoch.
fn seeds_per_epoch(epochs: u32, per_epoch: usize) -> Vec<Vec<Item>> {
    (1..=epochs)
        .map(|e| {
            (0..per_epoch)
                .map(|k| seed(&format!("e{e}-s{k}"), &format!("fam{k}")))
                .collect()
        })
        .collect()
}

fn read_jsonl(path: &Path) -> Vec<Record> {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "no torn last line");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("every line is a JSON object"))
        .collect()
}

struct Harness {
    adapter: ScriptedAdapter,
    factory_calls: AtomicUsize,
}

impl Harness {
    fn new(script: Script) -> Self {
        Self {
            adapter: ScriptedAdapter::new(script),
            factory_calls: AtomicUsize::new(0),
        }
    }

    fn factory(&self) -> impl Fn(usize) -> Result<ScriptedAdapter, AdapterError> + Sync + '_ {
        move |lane| {
            self.factory_calls.fetch_add(1, Ordering::SeqCst);
            Ok(self.adapter.sibling(lane))
        }
    }

    fn run(
        &self,
        config: &ArmConfig,
        seeds: &mut dyn SeedSource,
        output: &mut impl ArmOutput,
        catalog: Option<&mut VariantCatalog>,
        clock: &dyn Clock,
    ) -> Result<ArmSummary, ArmError> {
        let factory = self.factory();
        run_arm(
            config,
            self.adapter.protocols(),
            seeds,
            &factory,
            output,
            ArmOptions {
                catalog,
                observer: &NoObserver,
                clock,
            },
        )
    }
}

fn config(max_epochs: u32) -> ArmConfig {
    ArmConfig {
        max_epochs,
        checkpoint: true,
        adapter_type: "native:test".into(),
        ..ArmConfig::default()
    }
}

#[test]
fn a_fresh_run_writes_records_epochs_checkpoint_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path().join("run"));
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(2, 2));
    let mut catalog =
        VariantCatalog::from_specs(vec![spec("a1", "fam0", 1.0), spec("a2", "fam0", 0.0)]);
    let clock = ManualClock::new();
    let summary = harness
        .run(
            &ArmConfig {
                worker_count: 2,
                ..config(2)
            },
            &mut seeds,
            &mut run_dir,
            Some(&mut catalog),
            &clock,
        )
        .unwrap();

    let records = read_jsonl(&run_dir.records_path());
    // Epoch 1: two groups; fam0's seed gets both variants (two passes):
    // prefix + 3 suffixes, and prefix + 1 suffix. Epoch 2: 2 + 2.
    assert_eq!(records.len(), 10);
    assert_eq!(summary.record_count, 10);
    assert_eq!(summary.epoch_count, 2);
    assert_eq!(summary.stop_reason, StopReason::MaxEpochs);
    assert_eq!(summary.variant_records_total, 2);
    assert_eq!(summary.coverage_count, 2);
    assert_eq!(summary.execution_metrics.episode_group_count, 4);
    assert_eq!(summary.execution_metrics.episode_count, 6);
    assert_eq!(
        summary.runtime_policy.episode_execution.mode,
        "recoverable-v0"
    );
    assert_eq!(summary.runtime_policy.item_failure_policy, "record");
    assert_eq!(summary.runtime_policy.duration_source, "host");
    assert!(summary.resume.enabled && !summary.resume.resumed);
    assert_eq!(summary.budget_minutes, None);
    assert_eq!(summary.checkpoints.len(), 2);

    let group_ids: HashSet<&str> = records
        .iter()
        .map(|r| r["execution_group_id"].as_str().unwrap())
        .collect();
    let mut group_ids: Vec<&str> = group_ids.into_iter().collect();
    group_ids.sort_unstable();
    assert_eq!(
        group_ids,
        vec![
            "main:epoch-1:group-0001",
            "main:epoch-1:group-0002",
            "main:epoch-2:group-0001",
            "main:epoch-2:group-0002"
        ]
    );
    // Every key is unique here, so every record's keys are novel.
    let mut novel = 0.0;
    for record in &records {
        assert_eq!(record["novel_value"], record["raw_value"]);
        novel += record["novel_value"].as_f64().unwrap();
    }
    assert_eq!(summary.novel_value_total, novel);
    assert_eq!(summary.raw_value_total, novel);

    let epochs = read_jsonl(&run_dir.epochs_path());
    assert_eq!(epochs.len(), 2);
    assert_eq!(epochs[0]["epoch"], json!(1));
    assert_eq!(epochs[0]["queue_size"], json!(4));
    assert_eq!(epochs[0]["execution_unit_count"], json!(2));
    assert_eq!(epochs[0]["frontier"]["admitted"], json!(2));
    assert_eq!(epochs[0]["frontier"]["passes"], json!(2));
    let lane_ids: usize = epochs[0]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l.get("item_ids")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(lane_ids, 6, "epochs.jsonl keeps the lanes' item ids");
    assert_eq!(epochs[1]["frontier"]["admitted"], json!(0));

    let checkpoint: Value =
        serde_json::from_str(&fs::read_to_string(run_dir.checkpoint_path()).unwrap()).unwrap();
    assert_eq!(checkpoint["state"]["next_epoch"], json!(3));
    assert_eq!(checkpoint["state"]["catalog_consumed"], json!(["a1", "a2"]));
    assert!(
        checkpoint["state"]["epochs"][0]["lanes"][0]
            .get("item_ids")
            .is_none(),
        "the checkpoint keeps compact lanes"
    );
    let written: Value =
        serde_json::from_str(&fs::read_to_string(run_dir.summary_path()).unwrap()).unwrap();
    assert_eq!(written, serde_json::to_value(&summary).unwrap());
    assert_eq!(written["stop_reason"], json!("max_epochs"));
    assert_eq!(*harness.adapter.open_handles.lock().unwrap(), 0);
}

/// Seeds from an items file stay on disk until their group runs; the
/// run they make is the one the same items make held in memory.
#[test]
fn seeds_kept_on_disk_run_exactly_as_held_seeds() {
    let mut items = Vec::new();
    for s in 0..4 {
        items.push(seed(&format!("s{s}"), &format!("fam{}", s % 2)));
        for v in 0..3 {
            items.push(obj(json!({
                "item_id": format!("s{s}~v{v}"), "family": format!("fam{}", s % 2),
                "is_variant": true, "seed_item_id": format!("s{s}"),
                "variant_spec": {"spec_id": format!("v{v}")},
            })));
        }
    }
    // Invalid items are recorded the same way too.
    items.push(obj(
        json!({"item_id": "orphan", "is_variant": true, "seed_item_id": "gone"}),
    ));
    items.push(seed("s0", "dup"));
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for item in &items {
        writeln!(file, "{}", Value::Object(item.to_map())).unwrap();
    }

    // One directory, emptied between the runs: the summary names it.
    let dir = tempfile::tempdir().unwrap();
    let run = |seeds: &mut dyn SeedSource| {
        let _ = fs::remove_dir_all(dir.path().join("run"));
        let mut run_dir = RunDir::new(dir.path().join("run"));
        let summary = Harness::new(Script::episode())
            .run(&config(2), seeds, &mut run_dir, None, &ManualClock::new())
            .unwrap();
        (
            fs::read_to_string(run_dir.records_path()).unwrap(),
            fs::read_to_string(run_dir.epochs_path()).unwrap(),
            serde_json::to_value(&summary).unwrap(),
        )
    };
    let stored = crate::harness::items_file::load_items_file(file.path()).unwrap();
    let mut on_disk = crate::harness::items_file::FileSeeds::new(stored, 2, None);
    assert!(on_disk.stored_seed_items("main", 1).is_some());
    let (records, epochs, summary) = run(&mut on_disk);
    let mut held = ScriptedSeeds::new(vec![items.clone(), items, Vec::new()]);
    let expected = run(&mut held);
    assert_eq!(records, expected.0);
    assert_eq!(epochs, expected.1);
    assert_eq!(summary, expected.2);
    // Per epoch: three groups of a prefix and four items; the seed
    // `s0` given twice makes both copies and its three variants
    // invalid, and the orphan is invalid: 15 + 6.
    assert_eq!(records.lines().count(), 2 * (3 * 5 + 6));
    assert!(records.contains("variant requires seed_item_id matching an epoch seed"));
}

#[test]
fn a_standalone_adapter_runs_plain_execute_per_item() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let harness = Harness::new(Script::standalone());
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(1, 3));
    let mut catalog = VariantCatalog::from_specs(vec![spec("v", "fam1", 0.0)]);
    let summary = harness
        .run(
            &ArmConfig {
                checkpoint: false,
                ..config(1)
            },
            &mut seeds,
            &mut run_dir,
            Some(&mut catalog),
            &ManualClock::new(),
        )
        .unwrap();
    let records = read_jsonl(&run_dir.records_path());
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r["via"] == json!("execute")));
    assert!(records.iter().all(|r| r.get("record_kind").is_none()));
    let variant = records
        .iter()
        .find(|r| r["is_variant"] == json!(true))
        .unwrap();
    assert_eq!(variant["variant_spec_id"], json!("v"));
    assert_eq!(summary.runtime_policy.episode_execution.mode, "standalone");
    assert!(
        !summary
            .runtime_policy
            .episode_execution
            .adapter_owned_restore
    );
    assert_eq!(summary.execution_metrics.episode_group_count, 0);
    assert_eq!(summary.variant_records_total, 1);
    assert!(!run_dir.checkpoint_path().exists(), "checkpointing was off");
    assert!(!summary.resume.enabled);
    assert_eq!(summary.resume.checkpoint_path, None);
}

#[test]
fn fatal_preflight_rejects_malformed_seeds_before_any_lifecycle_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("s", "fam"), seed("s", "fam")]]);
    let mut catalog = VariantCatalog::from_specs(vec![spec("v", "fam", 0.0)]);
    let error = harness
        .run(
            &ArmConfig {
                item_failure_policy: FailurePolicy::Fatal,
                ..config(3)
            },
            &mut seeds,
            &mut run_dir,
            Some(&mut catalog),
            &ManualClock::new(),
        )
        .unwrap_err();
    let ArmError::Fatal(fatal) = &error else {
        panic!("expected a fatal error, got {error}");
    };
    assert_eq!(fatal.error.error_type, ErrorType::InvalidItem);
    assert_eq!(
        fatal.error.message,
        "recoverable episode seed item_id is duplicated: 's'"
    );
    assert_eq!(
        seeds.calls(),
        vec!["list_seed_items:1"],
        "no variant was compiled"
    );
    assert_eq!(harness.factory_calls.load(Ordering::SeqCst), 0);
    assert!(harness.adapter.ops().is_empty());
    assert!(!catalog.is_consumed("v"));
    assert!(read_jsonl(&run_dir.records_path()).is_empty());
    assert!(!run_dir.checkpoint_path().exists());
}

#[test]
fn fatal_grouping_errors_after_variants_stop_before_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("s", "fam")]]);
    let mut orphan = spec("o", "fam", 0.0);
    orphan.insert("compiled".into(), json!({"seed_item_id": "ghost"}));
    let mut catalog = VariantCatalog::from_specs(vec![orphan]);
    let error = harness
        .run(
            &ArmConfig {
                item_failure_policy: FailurePolicy::Fatal,
                ..config(1)
            },
            &mut seeds,
            &mut run_dir,
            Some(&mut catalog),
            &ManualClock::new(),
        )
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("requires seed_item_id matching an epoch seed: 's~o'"),
        "{error}"
    );
    assert_eq!(seeds.compiled(), vec!["compile:o@s"]);
    assert_eq!(
        harness.factory_calls.load(Ordering::SeqCst),
        0,
        "nothing dispatched"
    );
}

#[test]
fn orphan_variants_are_recorded_and_consumed_once_across_resume() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let mut orphan = spec("o", "fam0", 5.0);
    orphan.insert("compiled".into(), json!({"seed_item_id": "ghost"}));
    let specs = vec![orphan, spec("later", "fam0", 0.0)];
    let clock = ManualClock::new();

    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(3, 1));
    let mut catalog = VariantCatalog::from_specs(specs.clone());
    harness
        .run(
            &ArmConfig {
                frontier_max_lanes: 1,
                ..config(1)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            Some(&mut catalog),
            &clock,
        )
        .unwrap();
    assert_eq!(seeds.compiled(), vec!["compile:o@e1-s0"]);

    // Resume with a fresh catalog object: consumption comes from the
    // checkpoint.
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(3, 1));
    let mut catalog = VariantCatalog::from_specs(specs);
    let summary = harness
        .run(
            &ArmConfig {
                frontier_max_lanes: 1,
                resume: true,
                ..config(3)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            Some(&mut catalog),
            &clock,
        )
        .unwrap();
    assert_eq!(
        seeds.compiled(),
        vec!["compile:later@e2-s0"],
        "o is never compiled again"
    );
    let records = read_jsonl(&dir.path().join("records.jsonl"));
    let orphans: Vec<&Record> = records
        .iter()
        .filter(|r| r["item_id"] == json!("e1-s0~o"))
        .collect();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0]["episode_stage"], json!("group_validation"));
    assert_eq!(orphans[0]["variant_spec_id"], json!("o"));
    assert_eq!(
        orphans[0]["adapter_error"]["message"],
        json!(
            "recoverable episode variant requires seed_item_id matching an epoch seed: 'e1-s0~o'"
        )
    );
    assert_eq!(summary.epoch_count, 3);
    assert_eq!(summary.resume.restored_epoch_count, 1);
}

#[test]
fn duplicate_variant_ids_become_invalid_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("s", "fam")]]);
    let mut a = spec("a", "fam", 1.0);
    a.insert("compiled".into(), json!({"item_id": "same"}));
    let mut b = spec("b", "fam", 0.0);
    b.insert("compiled".into(), json!({"item_id": "same"}));
    let mut catalog = VariantCatalog::from_specs(vec![a, b]);
    harness
        .run(
            &config(1),
            &mut seeds,
            &mut run_dir,
            Some(&mut catalog),
            &ManualClock::new(),
        )
        .unwrap();
    let records = read_jsonl(&run_dir.records_path());
    let invalid: Vec<&Record> = records
        .iter()
        .filter(|r| r.get("episode_stage") == Some(&json!("group_validation")))
        .collect();
    assert_eq!(invalid.len(), 1);
    assert_eq!(
        invalid[0]["adapter_error"]["message"],
        json!("recoverable episode variant item_id is duplicated: 'same'")
    );
    assert_eq!(invalid[0]["variant_spec_id"], json!("b"));
    let suffixes = records
        .iter()
        .filter(|r| r.get("record_kind") == Some(&json!("episode_suffix")))
        .count();
    assert_eq!(suffixes, 2, "the seed and the first variant run");
}

/// A rendezvous that gives up after a generous timeout (failure signal
/// only; nothing asserts on timing).
struct Rendezvous {
    count: Mutex<usize>,
    cv: Condvar,
    n: usize,
}

impl Rendezvous {
    fn arrive(&self) -> bool {
        let mut count = self.count.lock().unwrap();
        *count += 1;
        self.cv.notify_all();
        let (_count, timeout) = self
            .cv
            .wait_timeout_while(count, Duration::from_secs(20), |c| *c < self.n)
            .unwrap();
        !timeout.timed_out()
    }
}

#[test]
fn distinct_groups_are_prepared_concurrently_on_different_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let rendezvous = Arc::new(Rendezvous {
        count: Mutex::new(0),
        cv: Condvar::new(),
        n: 2,
    });
    let met = Arc::new(Mutex::new(Vec::<(usize, bool)>::new()));
    let hook = {
        let rendezvous = Arc::clone(&rendezvous);
        let met = Arc::clone(&met);
        Arc::new(move |call: &Call| {
            if call.op == "prepare" {
                let ok = rendezvous.arrive();
                met.lock().unwrap().push((call.lane, ok));
            }
        })
    };
    let harness = Harness {
        adapter: ScriptedAdapter::new(Script::episode()).with_hook(hook),
        factory_calls: AtomicUsize::new(0),
    };
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("a", "fa"), seed("b", "fb")]]);
    harness
        .run(
            &ArmConfig {
                worker_count: 2,
                ..config(1)
            },
            &mut seeds,
            &mut run_dir,
            None,
            &ManualClock::new(),
        )
        .unwrap();
    let met = met.lock().unwrap().clone();
    assert_eq!(met.len(), 2);
    assert!(
        met.iter().all(|(_, ok)| *ok),
        "both prepares were in flight together"
    );
    assert_ne!(met[0].0, met[1].0, "on different lanes");
    let log = harness.adapter.log.lock().unwrap().clone();
    for group in ["main:epoch-1:group-0001", "main:epoch-1:group-0002"] {
        let lanes: HashSet<usize> = log
            .iter()
            .filter(|c| c.group.as_deref() == Some(group))
            .map(|c| c.lane)
            .collect();
        assert_eq!(lanes.len(), 1, "a group's lifecycle stays on one lane");
    }
}

#[test]
fn compile_errors_are_streamed_as_records_on_the_control_branch() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dir = RunDir::new(dir.path());
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("s", "fam")]]);
    seeds.compile_errors.insert(
        "bad".into(),
        AdapterError::declared("unsupported", "cannot compile", false),
    );
    let mut catalog = VariantCatalog::from_specs(vec![spec("bad", "fam", 0.0)]);
    let branches = Mutex::new(Vec::new());
    let observer = |event: &ArmEvent<'_>| {
        if let ArmEvent::UnitDone {
            branch_id, records, ..
        } = event
        {
            branches
                .lock()
                .unwrap()
                .push((branch_id.to_string(), records.len()));
        }
    };
    let factory = harness.factory();
    let summary = run_arm(
        &config(1),
        harness.adapter.protocols(),
        &mut seeds,
        &factory,
        &mut run_dir,
        ArmOptions {
            catalog: Some(&mut catalog),
            observer: &observer,
            clock: &ManualClock::new(),
        },
    )
    .unwrap();
    let records = read_jsonl(&run_dir.records_path());
    assert_eq!(records[0]["episode_stage"], json!("compile_variant"));
    assert_eq!(records[0]["item_id"], json!("bad"));
    assert_eq!(records[0]["raw_value"], json!(0.0));
    assert_eq!(summary.record_count, 3);
    assert_eq!(
        summary.variant_records_total, 1,
        "the failed spec counts as a variant record"
    );
    let branches = branches.into_inner().unwrap();
    assert_eq!(branches[0], ("control".to_owned(), 1));
    assert_eq!(branches[1], ("queue_worker_01".to_owned(), 2));
}

/// Seeds whose items make the scripted adapter advance `clock` by one
/// minute per suffix.
fn timed_harness(clock: &Arc<ManualClock>) -> Harness {
    let mut script = Script::episode();
    script.execute_minutes = 1.0;
    Harness {
        adapter: ScriptedAdapter::new(script).with_clock(Arc::clone(clock)),
        factory_calls: AtomicUsize::new(0),
    }
}

fn stop_reason_for(config: ArmConfig, seeds: Vec<Vec<Item>>) -> (StopReason, usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new());
    let harness = timed_harness(&clock);
    let mut seeds = ScriptedSeeds::new(seeds);
    let summary = harness
        .run(
            &config,
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &*clock,
        )
        .unwrap();
    (summary.stop_reason, summary.epoch_count)
}

#[test]
fn budget_duration_guard_seed_queue_and_max_epochs_stop_reasons() {
    // Each epoch takes exactly one (manual) minute.
    let one_seed = seeds_per_epoch(1, 1);
    let no_guard = |budget: f64| ArmConfig {
        budget_minutes: budget,
        duration_guard_factor: 0.0,
        ..config(10)
    };
    assert_eq!(
        stop_reason_for(no_guard(2.0), one_seed.clone()),
        (StopReason::BudgetExhausted, 2)
    );
    // The first epoch always runs, even on an empty budget.
    assert_eq!(
        stop_reason_for(no_guard(0.0), one_seed.clone()),
        (StopReason::BudgetExhausted, 1)
    );
    // 1 minute left after epoch 1 < 1 minute * 1.15.
    assert_eq!(
        stop_reason_for(
            ArmConfig {
                budget_minutes: 2.0,
                ..config(10)
            },
            one_seed.clone()
        ),
        (StopReason::DurationGuard, 1)
    );
    // 1.2 minutes left >= 1.15: epoch 2 runs; then 0.2 < 1.15.
    assert_eq!(
        stop_reason_for(
            ArmConfig {
                budget_minutes: 2.2,
                ..config(10)
            },
            one_seed.clone()
        ),
        (StopReason::DurationGuard, 2)
    );
    assert_eq!(
        stop_reason_for(config(3), one_seed),
        (StopReason::MaxEpochs, 3)
    );
    assert_eq!(
        stop_reason_for(config(5), vec![vec![seed("s", "f")], vec![]]),
        (StopReason::SeedQueueEmpty, 1)
    );
    assert_eq!(
        stop_reason_for(config(0), vec![vec![seed("s", "f")]]),
        (StopReason::MaxEpochs, 0)
    );
}

#[test]
fn the_duration_guard_looks_at_the_longest_of_the_recent_epochs() {
    // Epoch 1 has 3 items (3 minutes), later epochs 1 item (1 minute).
    let seeds = vec![
        vec![seed("a", "f1"), seed("b", "f2"), seed("c", "f3")],
        vec![seed("d", "f1")],
    ];
    let budget = |recent: usize| ArmConfig {
        budget_minutes: 7.0,
        duration_guard_factor: 1.0,
        duration_guard_recent: recent,
        ..config(10)
    };
    // recent = 1: after epochs of 3, 1, 1, 1 minutes (6 spent), 1 left
    // >= 1 -> a fifth epoch runs; then 0 left.
    assert_eq!(stop_reason_for(budget(1), seeds.clone()).1, 5);
    // recent = 3: the 3-minute epoch is still in the window after epoch
    // 3 (5 spent, 2 left < 3) -> stop after 3 epochs.
    assert_eq!(
        stop_reason_for(budget(3), seeds),
        (StopReason::DurationGuard, 3)
    );
}

#[test]
fn budget_includes_minutes_spent_before_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new());
    let harness = timed_harness(&clock);
    let no_guard = ArmConfig {
        budget_minutes: 3.0,
        duration_guard_factor: 0.0,
        ..config(2)
    };
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(1, 1));
    harness
        .run(
            &no_guard,
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &*clock,
        )
        .unwrap();
    let resumed = ArmConfig {
        resume: true,
        max_epochs: 10,
        ..no_guard
    };
    let fresh_clock = Arc::new(ManualClock::new());
    let harness = timed_harness(&fresh_clock);
    let summary = harness
        .run(
            &resumed,
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &*fresh_clock,
        )
        .unwrap();
    // Two minutes were spent before; one more epoch exhausts the budget.
    assert_eq!(summary.epoch_count, 3);
    assert_eq!(summary.stop_reason, StopReason::BudgetExhausted);
    assert_eq!(summary.elapsed_minutes, 3.0);
    assert_eq!(summary.checkpoints[2].elapsed_minutes, 3.0);
    assert_eq!(summary.checkpoints[2].requested_worker_minutes_cum, 3.0);
}

fn keyed_records(records: &[Record]) -> Vec<String> {
    let mut keys: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{}|{}|{}",
                r["execution_group_id"], r["item_id"], r["record_kind"]
            )
        })
        .collect();
    keys.sort();
    keys
}

#[test]
fn resume_cuts_back_an_interrupted_epoch_so_every_record_appears_once() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let clock = ManualClock::new();
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(4, 2));
    harness
        .run(
            &config(2),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap();
    let records_path = dir.path().join("records.jsonl");
    let epochs_path = dir.path().join("epochs.jsonl");
    let before = read_jsonl(&records_path);
    assert_eq!(before.len(), 8);

    // Simulate kill -9 during epoch 3: some records and half a line
    // were written, and even an epoch line, but no checkpoint.
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(&records_path)
        .unwrap();
    let mut stray = before[0].clone();
    stray.insert(
        "execution_group_id".into(),
        json!("main:epoch-3:group-0001"),
    );
    writeln!(file, "{}", serde_json::to_string(&stray).unwrap()).unwrap();
    write!(file, "{{\"item_id\": \"e3-s1\", \"observation_k").unwrap();
    drop(file);
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(&epochs_path)
        .unwrap();
    writeln!(file, "{{\"epoch\": 3, \"partial\": true}}").unwrap();
    drop(file);

    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(4, 2));
    let summary = harness
        .run(
            &ArmConfig {
                resume: true,
                ..config(4)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap();
    assert_eq!(
        seeds.calls(),
        vec!["list_seed_items:3", "list_seed_items:4"]
    );
    let records = read_jsonl(&records_path);
    assert_eq!(records.len(), 16);
    assert_eq!(summary.record_count, 16);
    let keys = keyed_records(&records);
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "no record appears twice");
    let epochs = read_jsonl(&epochs_path);
    let numbers: Vec<Value> = epochs.iter().map(|e| e["epoch"].clone()).collect();
    assert_eq!(numbers, vec![json!(1), json!(2), json!(3), json!(4)]);
    assert!(epochs.iter().all(|e| e.get("partial").is_none()));
    assert!(summary.resume.resumed);
    assert_eq!(summary.resume.restored_epoch_count, 2);
}

/// A run directory whose `n`-th `append_records` call writes one record
/// and half of the next, then fails like a dying process would.
struct TornOutput {
    inner: RunDir,
    fail_on_call: usize,
    calls: usize,
}

impl ArmOutput for TornOutput {
    fn begin_fresh(&mut self) -> Result<(), ArmError> {
        self.inner.begin_fresh()
    }
    fn begin_resume(&mut self, expected: &RuntimeSignature) -> Result<CheckpointState, ArmError> {
        self.inner.begin_resume(expected)
    }
    fn append_records(&mut self, records: &[Record]) -> Result<(), ArmError> {
        self.calls += 1;
        if self.calls < self.fail_on_call {
            return self.inner.append_records(records);
        }
        self.inner.append_records(&records[..1])?;
        self.inner.flush()?;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(self.inner.records_path())
            .unwrap();
        file.write_all(b"{\"item_id\": \"torn").unwrap();
        Err(ArmError::io(
            "writing records.jsonl",
            std::io::Error::other("simulated crash"),
        ))
    }
    fn flush(&mut self) -> Result<(), ArmError> {
        self.inner.flush()
    }
    fn flush_interval(&self) -> Option<Duration> {
        self.inner.flush_interval()
    }
    fn append_epoch(&mut self, epoch: &EpochSummary) -> Result<(), ArmError> {
        self.inner.append_epoch(epoch)
    }
    fn write_checkpoint(&mut self, checkpoint: &ArmCheckpoint) -> Result<(), ArmError> {
        self.inner.write_checkpoint(checkpoint)
    }
    fn write_summary(&mut self, summary: &ArmSummary) -> Result<(), ArmError> {
        self.inner.write_summary(summary)
    }
    fn offsets(&self) -> OutputOffsets {
        self.inner.offsets()
    }
    fn checkpoint_location(&self) -> Option<String> {
        self.inner.checkpoint_location()
    }
}

#[test]
fn a_run_that_dies_mid_epoch_resumes_to_the_same_result_as_an_uninterrupted_one() {
    // Reference: an uninterrupted 3-epoch run.
    let clock = ManualClock::new();
    let specs = vec![
        spec("x1", "fam0", 1.0),
        spec("x2", "fam1", 1.0),
        spec("x3", "fam0", 0.0),
    ];
    let mut seed_items = seeds_per_epoch(3, 2);
    // Repeated keys across epochs, so the restored ledger matters.
    for epoch in &mut seed_items {
        for item in epoch.iter_mut() {
            let obs = json!(["shared", format!("own:{}", item["item_id"])]);
            item.insert("obs".into(), obs);
            item.insert("flags".into(), json!({"hot": 0.5}));
        }
    }
    let whole_dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let whole = harness
        .run(
            &ArmConfig {
                frontier_max_lanes: 1,
                ..config(3)
            },
            &mut ScriptedSeeds::new(seed_items.clone()),
            &mut RunDir::new(whole_dir.path()),
            Some(&mut VariantCatalog::from_specs(specs.clone())),
            &clock,
        )
        .unwrap();

    // The same run, dying inside epoch 3's second unit.
    let dir = tempfile::tempdir().unwrap();
    let mut torn = TornOutput {
        inner: RunDir::new(dir.path()),
        fail_on_call: 6,
        calls: 0,
    };
    let mut seeds = ScriptedSeeds::new(seed_items.clone());
    let error = harness
        .run(
            &ArmConfig {
                frontier_max_lanes: 1,
                ..config(3)
            },
            &mut seeds,
            &mut torn,
            Some(&mut VariantCatalog::from_specs(specs.clone())),
            &clock,
        )
        .unwrap_err();
    assert!(matches!(error, ArmError::Io { .. }), "{error}");
    let checkpoint: Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(checkpoint["state"]["next_epoch"], json!(3));

    let mut seeds = ScriptedSeeds::new(seed_items);
    let resumed = harness
        .run(
            &ArmConfig {
                frontier_max_lanes: 1,
                resume: true,
                ..config(3)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            Some(&mut VariantCatalog::from_specs(specs)),
            &clock,
        )
        .unwrap();
    assert_eq!(seeds.calls()[0], "list_seed_items:3");

    let whole_records = read_jsonl(&whole_dir.path().join("records.jsonl"));
    let records = read_jsonl(&dir.path().join("records.jsonl"));
    assert_eq!(keyed_records(&records), keyed_records(&whole_records));
    assert_eq!(records, whole_records, "identical record by record");
    assert_eq!(resumed.record_count, whole.record_count);
    assert_eq!(resumed.raw_value_total, whole.raw_value_total);
    assert_eq!(resumed.novel_value_total, whole.novel_value_total);
    assert_eq!(resumed.variant_records_total, whole.variant_records_total);
    assert_eq!(resumed.execution_metrics, whole.execution_metrics);
    assert_eq!(
        resumed.coverage_first_seen_minutes,
        whole.coverage_first_seen_minutes
    );
    assert_eq!(resumed.checkpoints, whole.checkpoints);
    assert_eq!(
        fs::read_to_string(dir.path().join("epochs.jsonl")).unwrap(),
        fs::read_to_string(whole_dir.path().join("epochs.jsonl")).unwrap()
    );
    // The restored ledger: in epoch 3, "shared" and the family flags
    // were seen before the crash, so only each record's own key counts.
    let epoch3: Vec<&Record> = records
        .iter()
        .filter(|r| {
            r["execution_group_id"]
                .as_str()
                .unwrap()
                .contains(":epoch-3:")
        })
        .collect();
    assert_eq!(epoch3.len(), 5);
    assert!(
        epoch3.iter().all(|r| r["novel_value"] == json!(1.0)),
        "{epoch3:?}"
    );
}

#[test]
fn resume_refuses_a_changed_runtime_and_a_fresh_run_refuses_an_existing_run() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let clock = ManualClock::new();
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(1, 1));
    harness
        .run(
            &config(1),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap();

    let error = harness
        .run(
            &config(1),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap_err();
    let ArmError::RunExists { found, .. } = &error else {
        panic!("expected RunExists, got {error}");
    };
    assert_eq!(
        found,
        &vec![
            "records.jsonl",
            "epochs.jsonl",
            "checkpoint.json",
            "summary.json"
        ]
    );
    assert!(error.to_string().contains("already holds a run"), "{error}");

    let error = harness
        .run(
            &ArmConfig {
                resume: true,
                worker_count: 3,
                item_failure_policy: FailurePolicy::Fatal,
                ..config(2)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap_err();
    let ArmError::Checkpoint(CheckpointError::Incompatible(mismatches)) = &error else {
        panic!("expected a signature mismatch, got {error}");
    };
    let fields: Vec<&str> = mismatches.iter().map(|m| m.field.as_str()).collect();
    assert_eq!(fields, vec!["item_failure_policy", "worker_count"]);
    let text = error.to_string();
    assert!(
        text.contains("worker_count is 1 in the checkpoint but 3 in this run"),
        "{text}"
    );
    assert!(
        text.contains(
            "item_failure_policy is \"record\" in the checkpoint but \"fatal\" in this run"
        ),
        "{text}"
    );

    // A catalog now, none before.
    let error = harness
        .run(
            &ArmConfig {
                resume: true,
                ..config(2)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            Some(&mut VariantCatalog::default()),
            &clock,
        )
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("variant_catalog_enabled is false"),
        "{error}"
    );

    let empty = tempfile::tempdir().unwrap();
    let error = harness
        .run(
            &ArmConfig {
                resume: true,
                ..config(2)
            },
            &mut seeds,
            &mut RunDir::new(empty.path()),
            None,
            &clock,
        )
        .unwrap_err();
    assert!(
        matches!(error, ArmError::Checkpoint(CheckpointError::Missing { .. })),
        "{error}"
    );
}

#[test]
fn resume_refuses_outputs_shorter_than_the_checkpoint_says() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let clock = ManualClock::new();
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(2, 1));
    harness
        .run(
            &config(1),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap();
    let records = dir.path().join("records.jsonl");
    let length = fs::metadata(&records).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&records)
        .unwrap()
        .set_len(length - 3)
        .unwrap();
    let error = harness
        .run(
            &ArmConfig {
                resume: true,
                ..config(2)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap_err();
    let ArmError::Damaged(message) = &error else {
        panic!("expected Damaged, got {error}");
    };
    assert!(message.contains("records.jsonl holds"), "{message}");
}

#[test]
fn record_policy_keeps_going_and_fatal_policy_stops_the_arm() {
    let mut script = Script::episode();
    script.execute_errors.insert(
        "e1-s0".into(),
        AdapterError::declared("boom", "item failed", true),
    );
    script.prepare.insert(
        "e1-s1".into(),
        PrepareScript::Fail(AdapterError::new(ErrorType::Trap, "prepare trapped")),
    );
    let harness = Harness::new(script);
    let clock = ManualClock::new();

    let dir = tempfile::tempdir().unwrap();
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(2, 3));
    let summary = harness
        .run(
            &config(2),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap();
    let records = read_jsonl(&dir.path().join("records.jsonl"));
    let failed: Vec<&Record> = records
        .iter()
        .filter(|r| r.get("execution_status") == Some(&json!("adapter_error")))
        .collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(summary.epoch_count, 2);
    assert_eq!(summary.execution_metrics.episode_error_count, 1);
    assert!(
        !harness
            .adapter
            .ops()
            .iter()
            .any(|op| op.starts_with("execute:")),
        "a failed prepare never falls back to execute"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(2, 3));
    let error = harness
        .run(
            &ArmConfig {
                item_failure_policy: FailurePolicy::Fatal,
                ..config(2)
            },
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &clock,
        )
        .unwrap_err();
    let ArmError::Fatal(fatal) = &error else {
        panic!("expected a fatal error, got {error}");
    };
    assert!(
        fatal.error.message == "item failed" || fatal.error.message == "prepare trapped",
        "{fatal}"
    );
    assert!(
        !dir.path().join("checkpoint.json").exists(),
        "the epoch never completed"
    );
    assert!(!dir.path().join("summary.json").exists());
    assert_eq!(seeds.calls(), vec!["list_seed_items:1"]);
}

#[test]
fn a_failing_seed_listing_stops_the_arm_under_every_policy() {
    for policy in [FailurePolicy::Record, FailurePolicy::Fatal] {
        let dir = tempfile::tempdir().unwrap();
        let harness = Harness::new(Script::episode());
        let mut seeds = ScriptedSeeds::new(vec![]);
        seeds.list_error = Some(AdapterError::new(ErrorType::Deadline, "seeds timed out"));
        let error = harness
            .run(
                &ArmConfig {
                    item_failure_policy: policy,
                    ..config(2)
                },
                &mut seeds,
                &mut RunDir::new(dir.path()),
                None,
                &ManualClock::new(),
            )
            .unwrap_err();
        assert!(matches!(error, ArmError::Seeds(_)), "{error}");
        assert!(error.to_string().contains("seeds timed out"));
    }
}

#[test]
fn novelty_is_credited_in_write_order_and_totals_match_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::standalone());
    let mut items: Vec<Item> = vec![
        obj(json!({"item_id": "a", "family": "f", "obs": ["k1", "k2"], "flags": {"x": 2.0}})),
        obj(json!({"item_id": "b", "family": "f", "obs": ["k2", "k3"], "flags": {"x": 2.0}})),
        obj(json!({"item_id": "c", "family": "g", "obs": ["k1"], "flags": {"x": 2.0}})),
    ];
    items[0].insert("concurrency_key".into(), json!("one"));
    let mut seeds = ScriptedSeeds::new(vec![items]);
    let summary = harness
        .run(
            &config(1),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            None,
            &ManualClock::new(),
        )
        .unwrap();
    let records = read_jsonl(&dir.path().join("records.jsonl"));
    // The scripted adapter writes its own item_id (kept: plain execute
    // only fills missing fields), so identify records by their keys.
    let values: Vec<(Value, f64, f64)> = records
        .iter()
        .map(|r| {
            (
                r["observation_keys"].clone(),
                r["novel_value"].as_f64().unwrap(),
                r["raw_value"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        values,
        vec![
            (json!(["k1", "k2"]), 4.0, 4.0),
            (json!(["k2", "k3"]), 1.0, 4.0),
            (json!(["k1"]), 2.0, 3.0),
        ]
    );
    assert_eq!(summary.novel_value_total, 7.0);
    assert_eq!(summary.raw_value_total, 11.0);
    assert_eq!(summary.coverage_count, 2);
}

#[test]
fn a_seed_with_k_variants_avoids_k_prefix_recomputations() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new());
    let mut script = Script::episode();
    script.prepare_minutes = 2.0;
    script.execute_minutes = 0.5;
    let harness = Harness {
        adapter: ScriptedAdapter::new(script).with_clock(Arc::clone(&clock)),
        factory_calls: AtomicUsize::new(0),
    };
    let mut seeds = ScriptedSeeds::new(vec![vec![seed("s", "fam")]]);
    let mut catalog =
        VariantCatalog::from_specs((0..3).map(|i| spec(&format!("v{i}"), "fam", 0.0)).collect());
    let summary = harness
        .run(
            &config(1),
            &mut seeds,
            &mut RunDir::new(dir.path()),
            Some(&mut catalog),
            &*clock,
        )
        .unwrap();
    // One group: prefix 2.0 and 4 suffixes of 0.5.
    let metrics = &summary.execution_metrics;
    assert_eq!(metrics.shared_prefix_compute_minutes, 2.0);
    assert_eq!(metrics.episode_suffix_compute_minutes, 2.0);
    assert_eq!(metrics.avoided_recompute_minutes, 6.0);
    assert_eq!(metrics.episode_group_count, 1);
    assert_eq!(summary.checkpoints[0].execution_metrics_cum, *metrics);
}

#[test]
fn progress_events_arrive_in_order_and_count_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(2, 2));
    let events = Mutex::new(Vec::<String>::new());
    let streamed = AtomicUsize::new(0);
    let observer = |event: &ArmEvent<'_>| {
        let name = match event {
            ArmEvent::Started { next_epoch, .. } => format!("started@{next_epoch}"),
            ArmEvent::EpochStarted {
                epoch, unit_count, ..
            } => {
                format!("epoch{epoch}:{unit_count}units")
            }
            ArmEvent::UnitDone { records, .. } => {
                streamed.fetch_add(records.len(), Ordering::SeqCst);
                "unit".to_owned()
            }
            ArmEvent::EpochDone { summary, anytime } => {
                assert_eq!(summary.epoch, anytime.epoch);
                format!("done{}", summary.epoch)
            }
            ArmEvent::Warning { message } => format!("warning:{message}"),
            ArmEvent::Finished { summary } => format!("finished:{}", summary.record_count),
        };
        events.lock().unwrap().push(name);
    };
    let factory = harness.factory();
    run_arm(
        &config(2),
        harness.adapter.protocols(),
        &mut seeds,
        &factory,
        &mut RunDir::new(dir.path()),
        ArmOptions {
            catalog: None,
            observer: &observer,
            clock: &ManualClock::new(),
        },
    )
    .unwrap();
    assert_eq!(
        events.into_inner().unwrap(),
        vec![
            "started@1",
            "epoch1:2units",
            "unit",
            "unit",
            "done1",
            "epoch2:2units",
            "unit",
            "unit",
            "done2",
            "finished:8"
        ]
    );
    assert_eq!(streamed.load(Ordering::SeqCst), 8);
}

#[test]
fn an_unreadable_catalog_warns_and_keeps_the_last_specs() {
    let dir = tempfile::tempdir().unwrap();
    let catalog_path = dir.path().join("catalog.json");
    fs::write(
        &catalog_path,
        serde_json::to_string(&json!({"specs": [spec("v", "fam0", 0.0)]})).unwrap(),
    )
    .unwrap();
    let mut catalog = VariantCatalog::open(&catalog_path).unwrap();
    fs::write(&catalog_path, "{ broken").unwrap();
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(1, 1));
    let warnings = Mutex::new(Vec::new());
    let observer = |event: &ArmEvent<'_>| {
        if let ArmEvent::Warning { message } = event {
            warnings.lock().unwrap().push(message.clone());
        }
    };
    let factory = harness.factory();
    let summary = run_arm(
        &config(1),
        harness.adapter.protocols(),
        &mut seeds,
        &factory,
        &mut RunDir::new(dir.path().join("run")),
        ArmOptions {
            catalog: Some(&mut catalog),
            observer: &observer,
            clock: &ManualClock::new(),
        },
    )
    .unwrap();
    assert_eq!(summary.variant_records_total, 1);
    let warnings = warnings.into_inner().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("is not valid JSON"), "{}", warnings[0]);
}

#[test]
fn invalid_configuration_is_rejected_before_touching_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::new(Script::episode());
    let mut seeds = ScriptedSeeds::new(seeds_per_epoch(1, 1));
    let error = harness
        .run(
            &ArmConfig {
                worker_count: 0,
                ..config(1)
            },
            &mut seeds,
            &mut RunDir::new(dir.path().join("run")),
            None,
            &ManualClock::new(),
        )
        .unwrap_err();
    assert!(matches!(error, ArmError::Config(_)), "{error}");
    assert!(!dir.path().join("run").exists());
}
