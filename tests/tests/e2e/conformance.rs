//! Adapters in any language: one conformance suite run against every
//! example adapter — Rust (`hello-adapter`, `markdown-explorer`), Python
//! (`examples/python-adapter`, componentize-py) and JavaScript
//! (`examples/js-adapter`, componentize-js) — through the real binary.
//!
//! The Python and JavaScript adapters export `replay` (world `replayable`)
//! through their generic replay modules (`sandloop_replay.py`,
//! `sandloop-replay.js`), so their suffixes run from replay points and their
//! variants can be forked from snapshots of the live instance; their
//! records, digests included, agree value for value.
//!
//! The Python and JavaScript components are built by the tests' build
//! script when their toolchains are installed (`bash
//! .ci/guest-toolchains.sh`). Without them these tests fail and say so;
//! `SANDLOOP_SKIP_GUEST_LANGS=1` turns that into a printed skip for a
//! machine that cannot install them (CI always installs them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, MARKDOWN_EXPLORER, c_replay, js_adapter, python_adapter};

/// Every `adapter_error.type` the host writes (see `docs/src/error-records.md`).
const ERROR_TYPES: &[&str] = &[
    "adapter_error",
    "invalid_item",
    "invalid_output",
    "output_too_large",
    "deadline",
    "memory_limit",
    "fuel_exhausted",
    "stack_overflow",
    "trap",
    "missing_export",
    "instance_lost",
    "instantiation",
    "replay_contract",
    "replay_risk_denied",
];

/// The other-language components, or `None` (after printing why) when the
/// toolchains are missing and skipping was asked for.
fn other_languages() -> Option<[(&'static str, &'static str); 2]> {
    guest_langs("adapters", python_adapter(), js_adapter())
}

/// A finished run: its records and summary.
struct Run {
    records: Vec<Value>,
    summary: Value,
}

fn run_adapter(adapter: &str, out: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["run", "--adapter", adapter, "--out", s(out)];
    args.extend_from_slice(extra);
    let output = run(&args);
    assert_eq!(code(&output), 0, "{adapter}: {}", stderr(&output));
    Run {
        records: records(out),
        summary: json_file(&out.join("summary.json")),
    }
}

/// The rules every adapter's run must keep, whatever its language: record
/// shape, one record per item id, the error classes, the totals of the
/// summary, and every suffix tied to a prefix of its group.
fn check_conformance(name: &str, run: &Run) {
    assert!(!run.records.is_empty(), "{name}: no records");
    assert_eq!(
        run.summary["record_count"].as_u64(),
        Some(run.records.len() as u64),
        "{name}: record_count"
    );
    let mut ids = BTreeSet::new();
    let (mut raw, mut novel) = (0.0, 0.0);
    let mut prefixes = BTreeSet::new();
    for record in &run.records {
        let id = record["item_id"].as_str().expect("item_id is a string");
        assert!(ids.insert(id.to_string()), "{name}: {id} recorded twice");
        let keys = record["observation_keys"].as_array();
        assert!(
            keys.is_some_and(|keys| keys.iter().all(Value::is_string)),
            "{name}: {id}: observation_keys must be a list of strings: {record}"
        );
        assert!(record["accepted"].is_boolean(), "{name}: {id}: accepted");
        raw += record["raw_value"].as_f64().expect("raw_value");
        novel += record["novel_value"].as_f64().expect("novel_value");
        if let Some(error) = record.get("adapter_error") {
            let kind = error["type"].as_str().unwrap_or("");
            assert!(
                ERROR_TYPES.contains(&kind),
                "{name}: {id}: unknown error type {kind:?}"
            );
            assert_eq!(
                record["accepted"], false,
                "{name}: {id}: a failure is not accepted"
            );
        }
        if record["record_kind"] == "shared_prefix" {
            prefixes.insert(record["execution_group_id"].to_string());
        }
    }
    for record in &run.records {
        if record["record_kind"] == "episode_suffix" {
            assert!(
                prefixes.contains(&record["execution_group_id"].to_string()),
                "{name}: suffix {} has no prefix record in its group",
                record["item_id"]
            );
        }
    }
    let total = |key: &str| run.summary[key].as_f64().unwrap();
    assert!(
        (total("raw_value_total") - raw).abs() < 1e-9,
        "{name}: raw_value_total"
    );
    assert!(
        (total("novel_value_total") - novel).abs() < 1e-9,
        "{name}: novel_value_total"
    );
}

/// Records keyed by item id, without what legitimately differs between
/// languages (and between two runs): durations (the record's and the
/// `replay` block's `*_minutes`) and what the guest's runtime said in an
/// error ([`without_guest_words`], the record's and the `replay` block's).
fn comparable(run: &Run) -> BTreeMap<String, Value> {
    run.records
        .iter()
        .map(|record| {
            let mut record = record.clone();
            let map = record.as_object_mut().unwrap();
            map.remove("duration_minutes");
            if let Some(Value::Object(error)) = map.get_mut("adapter_error") {
                without_guest_words(error);
            }
            if let Some(Value::Object(replay)) = map.get_mut("replay") {
                replay.retain(|key, _| !key.ends_with("_minutes"));
                if let Some(Value::Object(error)) = replay.get_mut("error") {
                    without_guest_words(error);
                }
            }
            (map["item_id"].as_str().unwrap().to_string(), record)
        })
        .collect()
}

/// Drop what the guest's own runtime said from an error: a trap's whole
/// message, and the trap a `memory_limit` error quotes after the host's
/// words.
fn without_guest_words(error: &mut serde_json::Map<String, Value>) {
    if error["type"] == "trap" {
        error.remove("message");
    } else if error["type"] == "memory_limit"
        && let Some(Value::String(message)) = error.get_mut("message")
        && let Some(at) = message.find("; the guest trapped")
    {
        message.truncate(at);
    }
}

/// [`comparable`] records without what only a forked child's `replay`
/// block says: how it was forked (`fork`, `isolated`, `child_id`,
/// `parallel`) and the risk screens (none for a snapshot child).
fn without_fork(run: &Run) -> BTreeMap<String, Value> {
    let mut records = comparable(run);
    for record in records.values_mut() {
        if let Some(Value::Object(replay)) = record.get_mut("replay") {
            for key in [
                "fork",
                "isolated",
                "child_id",
                "parallel",
                "intent_assessment",
                "outcome_assessment",
            ] {
                replay.remove(key);
            }
        }
    }
    records
}

#[test]
fn rust_example_adapters_keep_the_conformance_rules() {
    let dir = tempfile::tempdir().unwrap();
    let items = workspace_file("examples/python-adapter/items.jsonl");
    let hello = run_adapter(
        HELLO_ADAPTER,
        &dir.path().join("hello"),
        &["--items", s(&items)],
    );
    check_conformance("hello-adapter", &hello);

    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
    let explorer = run_adapter(
        MARKDOWN_EXPLORER,
        &dir.path().join("markdown"),
        &["--dir", &grant, "--variants", s(&catalog), "--epochs", "2"],
    );
    check_conformance("markdown-explorer", &explorer);
}

#[test]
fn python_and_javascript_adapters_keep_the_rules_and_agree_record_for_record() {
    let Some(languages) = other_languages() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let example = |file: &str| workspace_file(&format!("examples/python-adapter/{file}"));
    let (items, faults, catalog) = (
        example("items.jsonl"),
        example("faults.jsonl"),
        example("catalog.json"),
    );
    let mut by_language = Vec::new();
    for (language, adapter) in languages {
        let out = |name: &str| dir.path().join(format!("{language}-{name}"));
        let info = inspect_info(adapter);
        let protocols = info["protocols"].to_string();
        for protocol in ["seeds", "variants", "recoverable-v0", "replayable-v2"] {
            assert!(protocols.contains(protocol), "{language}: {protocols}");
        }

        let plain = run_adapter(adapter, &out("items"), &["--items", s(&items)]);
        check_conformance(language, &plain);

        // Suffixes run from each group's replay point in place: forking the
        // variants from snapshots would compile a snapshot of the
        // interpreter per group with variants (seconds each, up to 15 s for
        // the first of a run); snapshot forks have their own test below.
        let seeded = run_adapter(
            adapter,
            &out("seeds"),
            &[
                "--variants",
                s(&catalog),
                "--epochs",
                "5",
                "--child-workers",
                "0",
            ],
        );
        check_conformance(language, &seeded);
        assert_eq!(
            seeded.summary["stop_reason"], "seed_queue_empty",
            "{language}: the adapter's seeds run out after epoch 3"
        );
        assert!(
            seeded.summary["variant_records_total"].as_u64().unwrap() > 0,
            "{language}: variants ran"
        );

        let hostile = run_adapter(
            adapter,
            &out("faults"),
            &[
                "--items",
                s(&faults),
                "--call-timeout",
                "2",
                "--max-memory",
                "128",
            ],
        );
        check_conformance(language, &hostile);
        let error_of = |id: &str| {
            let record = hostile
                .records
                .iter()
                .find(|record| record["item_id"] == id)
                .unwrap_or_else(|| panic!("{language}: no record for {id}"));
            record["adapter_error"]["type"].as_str().map(str::to_string)
        };
        for (id, expected) in [
            ("fault-raise", "trap"),
            ("fault-error", "adapter_error"),
            ("fault-loop", "deadline"),
            ("fault-memory", "memory_limit"),
            ("fault-bad-json", "invalid_output"),
            ("fault-raise-prepare", "trap"),
            ("no-text", "adapter_error"),
            ("attack-infinite-loop", "deadline"),
        ] {
            assert_eq!(error_of(id).as_deref(), Some(expected), "{language}: {id}");
        }
        // The exception and the adapter's own line lead the trap's
        // message: Python's traceback, JavaScript's `guard` output.
        let (file, raised) = match language {
            "python" => ("app.py:", "RuntimeError: fault: raise; wasm trap:"),
            _ => ("adapter.js:", "Error: fault: raise; wasm trap:"),
        };
        for id in ["fault-raise", "fault-raise-prepare"] {
            let record = hostile.records.iter().find(|r| r["item_id"] == id).unwrap();
            let message = record["adapter_error"]["message"].as_str().unwrap();
            let (place, rest) = message.split_once(": ").unwrap();
            assert!(
                place.starts_with(file) && place[file.len()..].parse::<u32>().is_ok(),
                "{language}: {id}: {message}"
            );
            assert!(rest.starts_with(raised), "{language}: {id}: {message}");
        }
        for index in 1..=9 {
            let id = format!("ok-{index:02}");
            assert_eq!(
                error_of(&id),
                None,
                "{language}: {id} is untouched by its neighbours"
            );
        }
        by_language.push((language, plain, seeded, hostile));
    }
    let [
        (_, py_plain, py_seeded, py_hostile),
        (_, js_plain, js_seeded, js_hostile),
    ] = <[_; 2]>::try_from(by_language).ok().unwrap();
    for (what, python, js) in [
        ("items", py_plain, js_plain),
        ("seeds and variants", py_seeded, js_seeded),
        ("faults", py_hostile, js_hostile),
    ] {
        assert_same_records(
            &comparable(&python),
            &comparable(&js),
            &format!("{what}, Python against JavaScript"),
        );
    }
}

/// One seed of family `short` and a catalog of three variants of it: one
/// episode group of four items.
fn one_seed_group(dir: &Path) -> (PathBuf, PathBuf) {
    let items = write_items(
        dir,
        "seed.jsonl",
        &[json!({
            "item_id": "s1",
            "family": "short",
            "text": "sandboxed components explore every seed twice"
        })],
    );
    let catalog = write_catalog(
        dir,
        json!([
            {"spec_id": "long-word", "seed_family": "short",
             "ops": [{"op": "append", "text": "extraordinarily"}]},
            {"spec_id": "upper", "seed_family": "short", "ops": ["upper"], "key_prefix": "upper:"},
            {"spec_id": "tiny-words", "seed_family": "short", "append": "a b of"}
        ]),
    );
    (items, catalog)
}

#[test]
fn python_and_javascript_adapters_fork_children_from_snapshots() {
    let Some(languages) = other_languages() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (items, catalog) = one_seed_group(dir.path());
    let group = ["--items", s(&items), "--variants", s(&catalog)];
    let mut forked_by_language = Vec::new();
    for (language, adapter) in languages {
        let out = |name: &str| dir.path().join(format!("{language}-{name}"));
        let info = inspect_info(adapter);
        let protocols = info["protocols"].to_string();
        assert!(
            protocols.contains("replayable-v2"),
            "{language}: {protocols}"
        );
        assert!(
            !protocols.contains("isolated-child-v0"),
            "{language}: no replay-children, so `--fork auto` forks by snapshot: {protocols}"
        );
        assert_eq!(info["forks"]["snapshot"], true, "{language}: {info}");
        assert_eq!(info["forks"]["state"], false, "{language}: {info}");
        assert_eq!(info["forks"]["auto"], "snapshot", "{language}: {info}");

        // `--fork auto` with one child worker: the variants (and the seed)
        // are children of the group's replay point, forked from a snapshot.
        let forked = run_adapter(
            adapter,
            &out("snapshot"),
            &[&group[..], &["--fork", "auto", "--child-workers", "1"][..]].concat(),
        );
        check_conformance(language, &forked);
        // The same group with every suffix run from the point in place.
        let in_place = run_adapter(
            adapter,
            &out("in-place"),
            &[&group[..], &["--child-workers", "0"][..]].concat(),
        );
        check_conformance(language, &in_place);

        let points = jsonl(&out("snapshot").join("replay-points.jsonl"));
        assert_eq!(points.len(), 1, "{language}: one group, one point");
        let point = &points[0];
        assert_eq!(point["fidelity"], "exact", "{language}: {point}");
        assert_eq!(point["quarantined"], false, "{language}: {point}");
        assert!(
            point.get("snapshot_error").is_none(),
            "{language}: the instance was snapshotted: {point}"
        );
        let snapshot = &point["snapshot"];
        assert_eq!(
            snapshot["sha256"].as_str().map(str::len),
            Some(64),
            "{language}: {point}"
        );
        assert!(
            snapshot["bytes"].as_u64().unwrap_or(0) > 1 << 20,
            "{language}: the interpreter's whole heap: {snapshot}"
        );
        for key in ["snapshot_ms", "compile_ms"] {
            assert!(snapshot[key].is_number(), "{language}: {key}: {snapshot}");
        }
        let digest = point["captured_projection_digest"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            digest.starts_with("sha256:") && digest.len() == 7 + 64,
            "{language}: the digest of the state's canonical JSON: {digest:?}"
        );

        let suffixes: Vec<&Value> = forked
            .records
            .iter()
            .filter(|record| record["record_kind"] == "episode_suffix")
            .collect();
        assert_eq!(
            suffixes.len(),
            4,
            "{language}: the seed and its three variants"
        );
        assert_eq!(
            suffixes
                .iter()
                .filter(|record| record["is_variant"] == true)
                .count(),
            3,
            "{language}: three variants"
        );
        for record in &suffixes {
            let id = &record["item_id"];
            assert!(
                record.get("adapter_error").is_none(),
                "{language}: {id}: {record}"
            );
            let replay = &record["replay"];
            assert_eq!(replay["fork"], "snapshot", "{language}: {id}: {replay}");
            assert_eq!(replay["isolated"], true, "{language}: {id}");
            assert_eq!(replay["achieved_fidelity"], "exact", "{language}: {id}");
            assert_eq!(replay["equivalent"], true, "{language}: {id}");
            assert_eq!(replay["promotion_eligible"], true, "{language}: {id}");
            assert_eq!(replay["prefix_reused"], true, "{language}: {id}");
            assert_eq!(
                replay["expected_digest"],
                digest.as_str(),
                "{language}: {id}"
            );
            assert_eq!(
                replay["observed_digest"],
                digest.as_str(),
                "{language}: {id}: the child's copy digests as the parent's state did"
            );
        }
        let replay = &forked.summary["replay"];
        assert_eq!(
            replay["child_session_fork_success_count"], 4,
            "{language}: {replay}"
        );
        assert_eq!(
            replay["child_session_fork_failure_count"], 0,
            "{language}: {replay}"
        );

        for record in in_place
            .records
            .iter()
            .filter(|record| record["record_kind"] == "episode_suffix")
        {
            let replay = &record["replay"];
            assert!(
                replay.get("fork").is_none(),
                "{language}: run in place: {record}"
            );
            assert_eq!(replay["achieved_fidelity"], "exact", "{language}: {record}");
        }
        assert_same_records(
            &without_fork(&forked),
            &without_fork(&in_place),
            &format!("{language}, forked from a snapshot against run in place"),
        );

        // The snapshot is the point's durable form: a later process replays
        // a variant from it, with no export from the adapter.
        assert_eq!(
            point["durable_state"]["kind"], "snapshot",
            "{language}: {point}"
        );
        let variant = forked
            .records
            .iter()
            .find(|record| {
                record["record_kind"] == "episode_suffix" && record["is_variant"] == true
            })
            .unwrap();
        let report = replay_report(&out("snapshot"), variant["item_id"].as_str().unwrap());
        assert_eq!(report["restored_from"], "snapshot", "{language}: {report}");
        assert_eq!(
            report["restore"]["achieved_fidelity"], "exact",
            "{language}"
        );
        assert_eq!(report["restore"]["equivalent"], true, "{language}");
        assert_eq!(
            report["outcome"]["record"]["observation_keys"], variant["observation_keys"],
            "{language}: the replayed variant observes what its child did"
        );
        forked_by_language.push(forked);
    }
    let [python, js] = <[Run; 2]>::try_from(forked_by_language).ok().unwrap();
    assert_same_records(
        &comparable(&python),
        &comparable(&js),
        "forked from snapshots, Python against JavaScript",
    );
}

/// The C adapter of world `replayable` (`examples/c-adapter/replay.c`),
/// whose replay state leaves the instance as bytes: a variant run from its
/// group's replay point (in place, or in a child forked from a snapshot)
/// gets the record it gets without replay, and a later process replays it
/// from the exported bytes, or from the snapshot, with an exact restore.
#[test]
fn the_c_replayable_adapter_replays_from_its_exported_bytes_and_from_snapshots() {
    let Some([(_, adapter)]) = guest_set("replayable C adapter", [("c", "C", c_replay())]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let info = inspect_info(adapter);
    let protocols = info["protocols"].to_string();
    for protocol in ["seeds", "variants", "recoverable-v0", "replayable-v2"] {
        assert!(protocols.contains(protocol), "{protocols}");
    }
    assert_eq!(info["forks"]["auto"], "snapshot", "{info}");

    // Seed s1 is prepared once; s2 opts out of the shared prefix; the spec
    // without `append` is the declared error `invalid-spec`.
    let items = workspace_file("examples/c-adapter/replay-items.jsonl");
    let catalog = workspace_file("examples/c-adapter/replay-catalog.json");
    let out = |name: &str| dir.path().join(name);
    let group = ["--items", s(&items), "--variants", s(&catalog)];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { group.iter().chain(extra).copied().collect() };
    let forked = run_adapter(
        adapter,
        &out("snapshot"),
        &with(&["--fork", "auto", "--child-workers", "1"]),
    );
    let in_place = run_adapter(adapter, &out("in-place"), &with(&["--child-workers", "0"]));
    let plain = run_adapter(adapter, &out("no-replay"), &with(&["--no-replay"]));
    for (name, run) in [
        ("snapshot", &forked),
        ("in place", &in_place),
        ("no replay", &plain),
    ] {
        check_conformance(name, run);
    }

    // The records say what the adapter computed, replay or not.
    let by_id = |run: &Run, id: &str| -> Value {
        run.records
            .iter()
            .find(|record| record["item_id"] == id)
            .unwrap_or_else(|| panic!("no record for {id}"))
            .clone()
    };
    let tiny = by_id(&forked, "s1~tiny");
    assert_eq!(
        tiny["observation_keys"],
        json!([
            "word_len:9+",
            "word_len:6-8",
            "word_len:4-5",
            "word_len:1",
            "word_len:2",
            "gained:word_len:1",
            "gained:word_len:2"
        ]),
        "{tiny}"
    );
    assert_eq!(
        tiny["weighted_flags"],
        json!({"gained_bucket": 1.5}),
        "{tiny}"
    );
    assert_eq!(
        (tiny["episode"].clone(), tiny["word_count_delta"].clone()),
        (json!("variant"), json!(3))
    );
    assert_eq!(by_id(&forked, "s1")["episode"], "seed");
    let opted_out = by_id(&forked, "s2~plain-tiny");
    assert_eq!(
        (&opted_out["episode"], &opted_out["record_kind"]),
        (&json!("standalone"), &json!("standalone")),
        "s2 opts out of the prefix: {opted_out}"
    );
    let no_append = by_id(&forked, "no-append");
    assert_eq!(
        no_append["adapter_error"]["kind"], "invalid-spec",
        "{no_append}"
    );

    let points = jsonl(&out("in-place").join("replay-points.jsonl"));
    assert_eq!(points.len(), 1, "one prepared group, one point: {points:?}");
    assert_eq!(points[0]["durable_state"]["kind"], "state", "{points:?}");
    let digest = points[0]["captured_projection_digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        digest.starts_with("fnv1a64:") && digest.len() == 8 + 16,
        "{digest}"
    );
    for run in [&forked, &in_place] {
        for id in ["s1", "s1~long-word", "s1~tiny"] {
            let replay = &by_id(run, id)["replay"];
            assert_eq!(replay["achieved_fidelity"], "exact", "{id}: {replay}");
            assert_eq!(replay["equivalent"], true, "{id}: {replay}");
            assert_eq!(replay["observed_digest"], digest.as_str(), "{id}: {replay}");
        }
    }
    assert_eq!(by_id(&forked, "s1~tiny")["replay"]["fork"], "snapshot");
    assert_same_records(
        &without_fork(&forked),
        &without_fork(&in_place),
        "forked from a snapshot against run in place",
    );
    let adapter_fields = |run: &Run| -> BTreeMap<String, Value> {
        comparable(run)
            .into_iter()
            .map(|(id, mut record)| {
                let record_map = record.as_object_mut().unwrap();
                for host_replay_field in ["replay", "replay_fidelity", "replay_point_id"] {
                    record_map.remove(host_replay_field);
                }
                (id, record)
            })
            .collect()
    };
    assert_same_records(
        &adapter_fields(&in_place),
        &adapter_fields(&plain),
        "run from the replay point against no replay",
    );

    // A later process: from the exported bytes (run in place) and from the
    // snapshot (forked).
    for (run_dir, from) in [(out("in-place"), "state"), (out("snapshot"), "snapshot")] {
        let report = replay_report(&run_dir, "s1~tiny");
        assert_eq!(report["restored_from"], from, "{report}");
        assert_eq!(report["restore"]["achieved_fidelity"], "exact", "{report}");
        assert_eq!(report["restore"]["equivalent"], true, "{report}");
        assert_eq!(
            report["outcome"]["record"]["observation_keys"],
            tiny["observation_keys"]
        );
    }
}
