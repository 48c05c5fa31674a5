//! The hostile adapter's attacks are contained: every attack is reported,
//! the run finishes, and every well-behaved item's record is intact.

use serde_json::Value;

use crate::support::*;
use sandloop_tests::HOSTILE_ADAPTER;

/// Runs the hostile adapter over `items` into `out` with `extra` flags;
/// the run must finish (exit 0) whatever its items do.
fn run_hostile(items: &std::path::Path, out: &std::path::Path, extra: &[&str]) {
    let output = run(&run_args(HOSTILE_ADAPTER, items, out, extra));
    assert_eq!(code(&output), 0, "the run finishes: {}", stderr(&output));
}

fn error_type(record: &Value) -> &str {
    record["adapter_error"]["type"].as_str().unwrap_or("")
}

#[test]
fn a_mix_of_attacks_is_contained_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let items = workspace_file("examples/hostile-adapter/attacks.jsonl");
    let out = dir.path().join("out");
    run_hostile(
        &items,
        &out,
        &[
            "--workers",
            "2",
            "--call-timeout",
            "1",
            "--max-memory",
            "128",
        ],
    );
    let records = records(&out);

    let suffix = |id: &str| find(&records, id, "episode_suffix");
    assert_eq!(error_type(suffix("attack-infinite-loop")), "deadline");
    // A guest blocked in a WASI sleep is not running wasm, where the epoch
    // deadline fires: the host's clocks wake it at the deadline.
    assert_eq!(error_type(suffix("attack-sleep")), "deadline");
    assert_eq!(error_type(suffix("attack-memory-bomb")), "memory_limit");
    let stack = error_type(suffix("attack-stack-overflow"));
    assert!(stack == "stack_overflow" || stack == "trap", "{stack}");
    assert_eq!(error_type(suffix("attack-trap-execute")), "trap");
    assert_eq!(error_type(suffix("attack-huge-output")), "output_too_large");
    assert_eq!(error_type(suffix("attack-invalid-json")), "invalid_output");
    assert_eq!(error_type(suffix("attack-declared-error")), "adapter_error");
    assert_eq!(
        suffix("attack-declared-error")["adapter_error"]["kind"],
        "hostile-declared"
    );

    let prepare = find(&records, "attack-trap-prepare", "shared_prefix");
    assert_eq!(prepare["episode_stage"], "prepare");
    assert_eq!(error_type(prepare), "trap");

    let release = find(
        &records,
        "attack-trap-release:shared-prefix",
        "shared_prefix",
    );
    assert_eq!(release["episode_stage"], "release");
    assert_eq!(
        release["episode_release_error"]["adapter_error"]["type"],
        "trap"
    );
    assert_eq!(
        suffix("attack-trap-release")["accepted"],
        true,
        "the suffix ran before release"
    );

    let file = suffix("attack-read-host-file");
    assert_eq!(file["leaked"], false, "no preopened directory: {file}");
    let env = suffix("attack-read-env");
    assert_eq!(env["var_count"], 0, "no environment: {env}");
    assert_eq!(env["leaked"], false);
    assert_eq!(
        suffix("attack-bad-trace")["refused"],
        true,
        "forbidden trace payloads are refused"
    );

    let none: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["item_id"].as_str().unwrap().starts_with("none-")
                && r["record_kind"] == "episode_suffix"
        })
        .collect();
    assert_eq!(none.len(), 15);
    for record in none {
        assert_eq!(record["accepted"], true, "{record}");
        assert!(record.get("adapter_error").is_none(), "{record}");
        assert_eq!(
            record["observation_keys"],
            serde_json::json!(["attack:none", "stage:execute_episode"]),
            "{record}"
        );
    }
    let summary = json_file(&out.join("summary.json"));
    assert_eq!(
        summary["record_count"].as_u64().unwrap() as usize,
        records.len()
    );
}

#[test]
fn fuel_bounds_a_busy_loop() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "loop.jsonl",
        &[
            serde_json::json!({"item_id": "spin", "family": "a", "attack": "infinite_loop"}),
            serde_json::json!({"item_id": "calm", "family": "b", "attack": "none"}),
        ],
    );
    let out = dir.path().join("out");
    run_hostile(&items, &out, &["--fuel", "50000000"]);
    let records = records(&out);
    assert_eq!(
        error_type(find(&records, "spin", "episode_suffix")),
        "fuel_exhausted"
    );
    assert_eq!(find(&records, "calm", "episode_suffix")["accepted"], true);
}

#[test]
fn a_granted_directory_is_readable_and_only_that() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "read.jsonl",
        &[serde_json::json!({"item_id": "peek", "family": "a", "attack": "read_host_file"})],
    );
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("note.txt"), "hello").unwrap();
    let out = dir.path().join("out");
    let grant = format!("{}::/etc:ro", s(shared.path()));
    run_hostile(&items, &out, &["--dir", &grant]);
    // /etc is now the granted directory, which has no passwd file.
    let record = find(&records(&out), "peek", "episode_suffix").clone();
    assert_eq!(record["leaked"], false, "{record}");
}

#[test]
fn a_trap_in_one_suffix_costs_its_siblings_nothing_but_a_fresh_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let variant = |id: &str, attack: &str| serde_json::json!({"item_id": id, "family": "g", "is_variant": true, "seed_item_id": "grp", "attack": attack});
    let items = write_items(
        dir.path(),
        "group.jsonl",
        &[
            serde_json::json!({"item_id": "grp", "family": "g", "attack": "none"}),
            variant("grp~a", "none"),
            variant("grp~b", "trap_execute"),
            variant("grp~c", "none"),
            variant("grp~d", "none"),
        ],
    );
    let out = dir.path().join("out");
    run_hostile(&items, &out, &[]);
    let records = records(&out);
    let suffix = |id: &str| find(&records, id, "episode_suffix");
    assert_eq!(error_type(suffix("grp~b")), "trap");
    let message = suffix("grp~b")["adapter_error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("examples/hostile-adapter/src/lib.rs:")
            && message.contains(": panic: hostile-adapter: trap in ")
            && message.contains("; wasm trap:"),
        "the panic's place and text lead the message: {message}"
    );
    for id in ["grp", "grp~a"] {
        assert_eq!(suffix(id)["accepted"], true);
        assert!(
            suffix(id).get("prefix_reprepared").is_none(),
            "{id} ran on the first prefix"
        );
    }
    for id in ["grp~c", "grp~d"] {
        assert_eq!(suffix(id)["accepted"], true, "{}", suffix(id));
        assert_eq!(
            suffix(id)["prefix_reprepared"],
            true,
            "{id} ran on a prefix prepared again"
        );
    }
}

/// An item from the items file reaches the component as its line, byte for
/// byte (surrounding whitespace removed): its key order, spacing and
/// number spelling.
#[test]
fn an_items_file_line_reaches_the_component_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let seed = r#"{"family": "f",  "item_id": "s", "attack": "echo_item", "z": 1.50, "a": [1e2], "t": "caf\u00e9 \/"}"#;
    let variant = r#"{"seed_item_id":"s","item_id":"v","is_variant":true,"family":"f","attack":"echo_item","n":10}"#;
    let items = dir.path().join("items.jsonl");
    std::fs::write(&items, format!("  {seed}\t\n{variant}\n")).unwrap();
    let out = dir.path().join("out");
    run_hostile(&items, &out, &[]);
    let records = records(&out);
    assert_eq!(
        find(&records, "s", "episode_suffix")["item_text"],
        Value::from(seed)
    );
    assert_eq!(
        find(&records, "v", "episode_suffix")["item_text"],
        Value::from(variant)
    );
}
