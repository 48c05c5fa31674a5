//! The C and Zig adapters: guest-sdk/c passes its own tests natively, and
//! the C and Zig ports of hello-adapter (examples/c-adapter,
//! examples/zig-adapter) write the records of the Rust original, are
//! inspected as what they are, and crash with a message naming their line.

use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{c_adapter, zig_adapter};

/// The C and Zig components (see [`guest_set`]).
fn ports() -> Option<[(&'static str, &'static str); 2]> {
    guest_set(
        "adapters",
        [("c", "C", c_adapter()), ("zig", "Zig", zig_adapter())],
    )
}

/// Records without the host's timing, in file order.
fn untimed(dir: &std::path::Path) -> Vec<Value> {
    records(dir)
        .into_iter()
        .map(|mut record| {
            record.as_object_mut().unwrap().remove("duration_minutes");
            record
        })
        .collect()
}

#[test]
fn the_c_sdk_passes_its_own_tests_natively() {
    if ports().is_none() {
        return;
    }
    let sdk = workspace_file("guest-sdk/c");
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("test_sandloop");
    let built = Command::new("clang-19")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsanitize=address,undefined",
        ])
        .arg(sdk.join("sandloop.c"))
        .arg(sdk.join("test_sandloop.c"))
        .args(["-lm", "-o"])
        .arg(&binary)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let ran = Command::new(&binary).output().unwrap();
    assert!(ran.status.success(), "{}{}", stdout(&ran), stderr(&ran));
    assert!(stdout(&ran).contains("checks passed"), "{}", stdout(&ran));
}

#[test]
fn c_and_zig_ports_write_the_records_of_the_rust_original() {
    let Some(ports) = ports() else { return };
    let dir = tempfile::tempdir().unwrap();
    let long: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            json!({"item_id": "a", "family": "greeting", "text": "hi there wonderful world"}),
            json!({"item_id": "blank", "family": "greeting", "text": " \t\n "}),
            json!({"item_id": "none", "family": "greeting"}),
            json!({"item_id": "long", "family": "long", "text": long.join(" ")}),
            json!({"item_id": "utf8", "family": "unicode", "text": "café naïve 日本語 ☃ \u{1F600}x"}),
            json!({"item_id": "esc", "family": "odd", "text": "tab\tquote\" back\\slash"}),
        ],
    );
    let rust_out = dir.path().join("rust");
    let output = run_hello(&items, &rust_out, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let original = untimed(&rust_out);
    assert_eq!(original.len(), 6);
    for (lang, component) in ports {
        let out = dir.path().join(lang);
        let output = run(&run_args(component, &items, &out, &[]));
        assert_eq!(code(&output), 0, "{lang}: {}", stderr(&output));
        assert_eq!(
            untimed(&out),
            original,
            "{lang}'s records differ from Rust's"
        );
        let info = inspect_info(component);
        assert_eq!(info["protocols"], json!(["legacy"]), "{lang}: {info}");
    }
}

#[test]
fn c_and_zig_crashes_name_their_file_and_line() {
    let Some(ports) = ports() else { return };
    let dir = tempfile::tempdir().unwrap();
    let items = write_items(
        dir.path(),
        "items.jsonl",
        &[
            json!({"item_id": "boom", "family": "f", "text": "crash"}),
            json!({"item_id": "after", "family": "f", "text": "still here"}),
        ],
    );
    for (lang, component) in ports {
        let out = dir.path().join(lang);
        let output = run(&run_args(component, &items, &out, &[]));
        assert_eq!(code(&output), 0, "{lang}: {}", stderr(&output));
        let records = records(&out);
        let by_id = |id: &str| records.iter().find(|r| r["item_id"] == id).unwrap();
        let boom = by_id("boom");
        let message = boom["adapter_error"]["message"].as_str().unwrap();
        assert_eq!(boom["adapter_error"]["type"], "trap", "{lang}: {boom}");
        let file = format!("adapter.{lang}:");
        assert!(
            message.starts_with(&file) && message.contains(": panic: asked to crash on 'crash'"),
            "{lang}: {message}"
        );
        // The next item runs on a fresh instance.
        let after = by_id("after");
        assert_eq!(after["accepted"], json!(true), "{lang}: {after}");
    }
}
