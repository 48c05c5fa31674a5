//! Bad usage and bad input: exit code 2, a message naming what is wrong,
//! and nothing written.

use serde_json::json;

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, HOSTILE_ADAPTER, MARKDOWN_EXPLORER};

#[test]
fn inspect_reports_protocols_from_exports() {
    for (component, protocols, forks) in [
        (
            HELLO_ADAPTER,
            json!(["legacy"]),
            json!({"state": false, "snapshot": false, "auto": null}),
        ),
        (
            HOSTILE_ADAPTER,
            json!(["legacy", "recoverable-v0"]),
            json!({"state": false, "snapshot": false, "auto": null}),
        ),
        (
            MARKDOWN_EXPLORER,
            json!([
                "legacy",
                "recoverable-v0",
                "replayable-v2",
                "isolated-child-v0",
                "child-risk-v0",
                "seeds",
                "variants"
            ]),
            json!({"state": true, "snapshot": true, "auto": "state"}),
        ),
    ] {
        let info = inspect_info(component);
        assert_eq!(info["protocols"], protocols, "{component}");
        for (key, expected) in forks.as_object().unwrap() {
            assert_eq!(&info["forks"][key], expected, "{component}: forks.{key}");
        }
        assert_eq!(
            info["size_bytes"],
            std::fs::metadata(component).unwrap().len()
        );
        assert_eq!(info["sha256"].as_str().unwrap().len(), 64);
    }
    let text = stdout(&run(&["inspect", MARKDOWN_EXPLORER]));
    assert!(
        text.contains("sandloop:adapter/episode-groups@0.2.0"),
        "{text}"
    );
    assert!(
        text.contains("forks      state, snapshot (wizer instruments it in ")
            && text.contains("; --fork auto forks by state"),
        "{text}"
    );
    let text = stdout(&run(&["inspect", HELLO_ADAPTER]));
    assert!(
        text.contains("forks      none (no `replay` export"),
        "{text}"
    );
}

#[test]
fn inspect_refuses_what_is_not_a_usable_component() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"definitely not wasm").unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    // The smallest valid component: a header and nothing else.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\0\x01\0").unwrap();
    let missing = dir.path().join("missing.wasm");
    for (path, expected, kind) in [
        (&garbage, "is not WebAssembly", "not_wasm"),
        (
            &core,
            "core WebAssembly module, not a component",
            "core_module",
        ),
        (
            &empty,
            "exports none of the sandloop episode interfaces",
            "nothing_to_run",
        ),
        (&missing, "cannot read adapter", "unreadable"),
    ] {
        let output = run(&["inspect", s(path)]);
        assert_eq!(code(&output), 2, "{}", s(path));
        let message = stderr(&output);
        assert!(message.contains(expected), "{message}");
        assert!(
            message.contains(s(path)),
            "the message names the file: {message}"
        );
        // --json describes it with a problems array all the same.
        let output = run(&["inspect", s(path), "--json"]);
        assert_eq!(code(&output), 2, "{}", s(path));
        let printed: serde_json::Value = serde_json::from_str(&stdout(&output))
            .unwrap_or_else(|error| panic!("{}: {error}: {}", s(path), stdout(&output)));
        let problem = &printed["problems"][0];
        assert_eq!(problem["kind"], kind, "{printed}");
        assert!(
            problem["message"].as_str().unwrap().contains(expected),
            "{printed}"
        );
    }
}

#[test]
fn unknown_flags_are_usage_errors() {
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--out",
        "x",
        "--no-such-flag",
    ]);
    assert_eq!(code(&output), 2);
    assert!(stderr(&output).contains("--no-such-flag"));
}

#[test]
fn malformed_items_files_name_file_line_and_field_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "bad-json.jsonl",
            "{\"item_id\":\"a\"}\n{\"item_id\":\n",
            ":2: not valid JSON",
        ),
        (
            "not-object.jsonl",
            "{\"item_id\":\"a\"}\n[1]\n",
            ":2: each line must be one JSON object",
        ),
        (
            "bad-field.jsonl",
            "{\"item_id\":\"a\",\"is_variant\":\"yes\"}\n",
            ":1: field `is_variant`",
        ),
        ("empty.jsonl", "\n", "holds no items"),
    ];
    for (name, text, expected) in cases {
        let items = dir.path().join(name);
        std::fs::write(&items, text).unwrap();
        let out = dir.path().join(format!("out-{name}"));
        let output = run(&[
            "run",
            "--adapter",
            HELLO_ADAPTER,
            "--items",
            s(&items),
            "--out",
            s(&out),
        ]);
        assert_eq!(code(&output), 2, "{name}");
        let message = stderr(&output);
        assert!(message.contains(expected), "{name}: {message}");
        assert!(
            message.contains(s(&items)),
            "{name}: names the file: {message}"
        );
        assert!(!out.exists(), "{name}: nothing is written for bad input");
    }
}

#[test]
fn a_bad_component_is_reported_before_a_bad_items_file() {
    // The items file is read while the component loads: the component's
    // error still comes first, and the items file's is not mixed in.
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"definitely not wasm").unwrap();
    let items = dir.path().join("items.jsonl");
    std::fs::write(&items, "{\"item_id\":\"a\"}\n{\"item_id\":\n").unwrap();
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        s(&garbage),
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 2);
    let message = stderr(&output);
    assert!(message.contains("is not WebAssembly"), "{message}");
    assert!(!message.contains("not valid JSON"), "{message}");
    assert!(!out.exists(), "nothing is written for bad input");
}

#[test]
fn an_adapter_without_seeds_needs_an_items_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = run(&["run", "--adapter", HELLO_ADAPTER, "--out", s(&out)]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("does not export `seeds`"),
        "{}",
        stderr(&output)
    );
    assert!(!out.exists());

    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "text": "x"})],
    );
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--variants",
        s(&catalog),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("does not export `variants`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_output_directory_holding_a_run_is_refused_unless_resuming() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "text": "one two"})],
    );
    let out = dir.path().join("out");
    let first = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let before = std::fs::read(out.join("records.jsonl")).unwrap();

    let again = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&again), 2);
    assert!(
        stderr(&again).contains("already holds a run"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        std::fs::read(out.join("records.jsonl")).unwrap(),
        before,
        "nothing lost"
    );

    let fresh = dir.path().join("fresh");
    let resume = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&fresh),
        "--resume",
    ]);
    assert_eq!(code(&resume), 2);
    assert!(
        stderr(&resume).contains("holds no run to continue"),
        "{}",
        stderr(&resume)
    );
}

#[test]
fn a_granted_directory_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        MARKDOWN_EXPLORER,
        "--dir",
        "/no/such/dir::/docs:ro",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("is not a directory"),
        "{}",
        stderr(&output)
    );
    assert!(!out.exists());
}

#[test]
fn a_memory_limit_below_the_components_own_memory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[serde_json::json!({"item_id": "a", "family": "f", "text": "hello"})],
    );
    let out = dir.path().join("out");
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--max-memory",
        "1",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let error = stderr(&output);
    assert!(
        error.contains("starts with 2 MiB of linear memory, above the limit of 1 MiB")
            && error.contains("raise --max-memory to at least 2"),
        "{error}"
    );
    assert!(!out.exists(), "nothing is written");
}

#[test]
fn limits_out_of_bounds_are_named_with_their_bound_at_every_flag() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "family": "f", "text": "hello"})],
    );
    for (flag, value, says) in [
        (
            "--call-timeout",
            "1e-300",
            "--call-timeout must be between 0.01 seconds (one epoch tick) and 31536000 seconds (one year), got 1e-300",
        ),
        (
            "--call-timeout",
            "1e20",
            "--call-timeout must be between 0.01 seconds",
        ),
        ("--call-timeout", "NaN", "got NaN"),
        (
            "--max-memory",
            "0",
            "--max-memory must be between 1 and 65536 MiB, got 0",
        ),
        (
            "--max-memory",
            "100000",
            "--max-memory must be between 1 and 65536 MiB, got 100000",
        ),
        ("--fuel", "0", "--fuel must be at least 1"),
        (
            "--max-output",
            "1",
            "--max-output must be between 2 and 1073741824 bytes, got 1",
        ),
        (
            "--max-open-files",
            "0",
            "--max-open-files must be between 1 and 65536, got 0",
        ),
    ] {
        let out = dir
            .path()
            .join(format!("run{}{value}", flag.trim_start_matches('-')));
        let output = run(&[
            "run",
            "--adapter",
            HELLO_ADAPTER,
            "--items",
            s(&items),
            "--out",
            s(&out),
            flag,
            value,
        ]);
        assert_exit(&output, 2, &[says]);
        assert!(
            stderr(&output).lines().count() <= 3,
            "{flag} {value}: one short message: {}",
            stderr(&output)
        );
        assert!(!out.exists(), "{flag} {value}: nothing written");
    }
}

#[test]
fn run_refuses_an_out_that_is_a_link_a_file_or_a_directory_of_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "text": "one two"})],
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
    let crowded = dir.path().join("crowded");
    std::fs::create_dir(&crowded).unwrap();
    std::fs::write(crowded.join("passwd"), "root:x:0:0").unwrap();
    for (out, says) in [
        (&link, "is a symbolic link (to "),
        (&items, "exists and is not a directory"),
        (
            &crowded,
            "is not empty and holds no run (passwd is not a file sandloop writes)",
        ),
    ] {
        assert_exit(&run_hello(&items, out, &[]), 2, &[says]);
    }
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing written through the link"
    );
    assert_eq!(
        std::fs::read_dir(&crowded).unwrap().count(),
        1,
        "nothing written among other files"
    );
}

#[test]
fn flags_that_cannot_work_are_named_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[json!({"item_id": "a", "text": "one two"})],
    );
    let out = dir.path().join("out");
    let not_a_dir = dir.path().join("cache-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let missing_repo = dir.path().join("no-repo");
    let cases: [(&[&str], &str); 5] = [
        // A negative number reaches sandloop's own check, not clap's "unexpected argument".
        (
            &["--call-timeout", "-1"],
            "--call-timeout must be between 0.01 seconds",
        ),
        (
            &["--max-memory", "-1"],
            "invalid value '-1' for '--max-memory <MIB>'",
        ),
        (
            &["--budget-minutes", "-2"],
            "--budget-minutes must be a positive number",
        ),
        (&["--nats-wait", "5"], "--nats <URL>"),
        (
            &["--cache-dir", s(&not_a_dir)],
            "not a directory (compiled components are kept in one)",
        ),
    ];
    for (extra, says) in cases {
        assert_exit(&run_hello(&items, &out, extra), 2, &[says]);
    }
    let output = run(&["loop", "run", "--repo", s(&missing_repo)]);
    assert_exit(&output, 2, &["--repo "]);
    assert!(!out.exists(), "nothing written");
    assert!(!missing_repo.exists(), "no repository made by loop run");
}
