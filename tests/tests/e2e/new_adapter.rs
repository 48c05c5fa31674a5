//! `sandloop new adapter`: a scaffolded project builds on its own, outside
//! this workspace, and runs; bad names and existing directories are refused;
//! and `sandloop inspect` explains a component that does not fit the
//! contract in words an author can act on.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, HOSTILE_ADAPTER, MARKDOWN_EXPLORER, REPLAY_PROBE};

/// A target directory shared by every scaffold build, inside the
/// workspace's, so repeated runs only rebuild the project itself.
fn scaffold_target_dir() -> PathBuf {
    workspace_file("target/scaffold-test")
}

/// `cargo build --release --target wasm32-wasip2 --manifest-path MANIFEST`
/// into [`scaffold_target_dir`], without the outer build's flags; returns
/// the component `CRATE.wasm`.
fn build_component(manifest: &Path, crate_name: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--release", "--target", "wasm32-wasip2", "--quiet"])
        .arg("--manifest-path")
        .arg(manifest)
        .env("CARGO_TARGET_DIR", scaffold_target_dir());
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
    ] {
        command.env_remove(var);
    }
    let output = command.output().expect("run cargo");
    assert!(
        output.status.success(),
        "building {} failed (is the wasm32-wasip2 target installed?):\n{}",
        manifest.display(),
        stderr(&output)
    );
    let component = scaffold_target_dir()
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{crate_name}.wasm"));
    assert!(component.is_file(), "missing {}", component.display());
    component
}

fn inspect_json(component: &str) -> (i32, Value) {
    let output = run(&["inspect", component, "--json"]);
    let value = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|error| panic!("inspect --json prints JSON ({error}): {output:?}"));
    (code(&output), value)
}

/// Inspect `component` (world `plain`, no problems), run it on
/// `project/items.jsonl` into `out`, and check the records: one per item,
/// accepted, with the `word:` keys every template gives.
fn run_sample_items(component: &Path, project: &Path, out: &Path) {
    let (status, info) = inspect_json(s(component));
    assert_eq!(status, 0, "{info}");
    assert_eq!(info["protocols"], json!(["legacy"]));
    assert_eq!(info["problems"], json!([]));

    let items = project.join("items.jsonl");
    let output = run(&[
        "run",
        "--adapter",
        s(component),
        "--items",
        s(&items),
        "--out",
        s(out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let lines: Vec<Value> = jsonl(&items);
    let records = records(out);
    assert_eq!(records.len(), lines.len(), "{records:?}");
    for (record, item) in records.iter().zip(&lines) {
        assert_eq!(record["item_id"], item["item_id"], "{record}");
        assert_eq!(record["accepted"], true, "{record}");
        assert!(record.get("adapter_error").is_none(), "{record}");
        let keys = record["observation_keys"].as_array().expect("keys");
        assert!(!keys.is_empty(), "{record}");
        assert!(
            keys.iter()
                .all(|key| key.as_str().unwrap().starts_with("word:"))
        );
    }
    let greeting = records.iter().find(|r| r["item_id"] == "greeting").unwrap();
    assert_eq!(
        greeting["observation_keys"],
        json!(["word:hello", "word:sandboxed", "word:world"])
    );
}

/// An author's bug in the scaffold: an item whose text is `crash` reaches
/// a line that throws (Python `KeyError`, JavaScript `TypeError`) or panics
/// (C `SL_PANIC`, Zig `sl_panic_at`). Returns that line's `file:line`.
fn plant_a_bug(project: &Path, lang: &str) -> String {
    let (file, anchor, bug) = match lang {
        "python" => (
            "app.py",
            "        # Observation keys are the novelty currency",
            "        if text == \"crash\":\n            {}[\"missing\"]\n",
        ),
        "c" => (
            "adapter.c",
            "    /* Observation keys are the novelty currency",
            "    if (strcmp(text, \"crash\") == 0) SL_PANIC(\"planted bug\");\n",
        ),
        "zig" => (
            "adapter.zig",
            "    // Observation keys are the novelty currency",
            "    if (std.mem.eql(u8, text, \"crash\")) c.sl_panic_at(\"adapter.zig\", @intCast(@src().line), \"planted bug\");\n",
        ),
        _ => (
            "adapter.js",
            "    // Observation keys are the novelty currency",
            "    if (text === 'crash') undefined.missing;\n",
        ),
    };
    let path = project.join(file);
    let source = std::fs::read_to_string(&path).unwrap();
    let at = source
        .find(anchor)
        .unwrap_or_else(|| panic!("{file} has no line `{anchor}` to plant a bug before"));
    std::fs::write(&path, format!("{}{bug}{}", &source[..at], &source[at..])).unwrap();
    let throws = source[..at].lines().count() + bug.lines().count();
    format!("{file}:{throws}")
}

/// The planted bug's record names the exception and its line.
fn check_the_bug_is_named(component: &Path, dir: &Path, lang: &str, bug_line: &str) {
    let items = write_items(
        dir,
        &format!("crash-{lang}.jsonl"),
        &[json!({"item_id": "bug", "family": "samples", "text": "crash"})],
    );
    let out = dir.join(format!("crash-{lang}"));
    let output = run(&[
        "run",
        "--adapter",
        s(component),
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let record = &records(&out)[0];
    assert_eq!(record["adapter_error"]["type"], "trap", "{record}");
    let message = record["adapter_error"]["message"].as_str().unwrap();
    let exception = match lang {
        "python" => "KeyError: 'missing'",
        "c" | "zig" => "panic: planted bug",
        _ => "TypeError: ",
    };
    assert!(
        message.starts_with(&format!("{bug_line}: {exception}")),
        "{lang}: the record names the exception and the line it came from: {message}"
    );
}

#[test]
fn a_scaffolded_rust_adapter_builds_on_its_own_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&[
        "new",
        "adapter",
        "demo-adapter",
        "--lang",
        "rust",
        "--dir",
        s(dir.path()),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let said = stdout(&output);
    for expected in [
        "Cargo.toml",
        "src/lib.rs",
        "wit/adapter.wit",
        "items.jsonl",
        "README.md",
        "cargo build --release --target wasm32-wasip2",
        "run --adapter target/wasm32-wasip2/release/demo_adapter.wasm --items items.jsonl",
    ] {
        assert!(said.contains(expected), "{expected}: {said}");
    }
    let project = dir.path().join("demo-adapter");
    assert_eq!(
        std::fs::read_to_string(project.join("wit/adapter.wit")).unwrap(),
        std::fs::read_to_string(workspace_file("wit/adapter.wit")).unwrap(),
        "the project carries the host's WIT"
    );
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"demo-adapter\""), "{manifest}");

    let component = build_component(&project.join("Cargo.toml"), "demo_adapter");

    // The template's own items.
    let out = dir.path().join("out");
    run_sample_items(&component, &project, &out);

    // An item without text is the declared error the WIT's adapter-error
    // carries; the run goes on.
    let bad = write_items(
        dir.path(),
        "bad.jsonl",
        &[
            json!({"item_id": "no-text"}),
            json!({"item_id": "fine", "text": "still runs"}),
        ],
    );
    let out = dir.path().join("out-bad");
    let output = run(&[
        "run",
        "--adapter",
        s(&component),
        "--items",
        s(&bad),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let second = records(&out);
    let failed = second.iter().find(|r| r["item_id"] == "no-text").unwrap();
    assert_eq!(failed["adapter_error"]["type"], "adapter_error", "{failed}");
    assert_eq!(failed["adapter_error"]["kind"], "invalid-item", "{failed}");
    let fine = second.iter().find(|r| r["item_id"] == "fine").unwrap();
    assert_eq!(fine["accepted"], true, "{fine}");
}

#[test]
fn bad_names_and_existing_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["Demo", "1st", "my_adapter", "é-adapter", "a/b"] {
        let output = run(&["new", "adapter", name, "--dir", s(dir.path())]);
        assert_eq!(code(&output), 2, "{name}");
        let message = stderr(&output);
        assert!(
            message.contains(&format!("invalid NAME `{name}`")),
            "{name}: {message}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing is written for a bad name"
    );

    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let output = run(&["new", "adapter", "taken", "--dir", s(dir.path())]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("already exists and is not empty"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1, "untouched");
    assert_eq!(
        std::fs::read_to_string(taken.join("notes.txt")).unwrap(),
        "mine"
    );

    // An empty directory is fine; a missing parent is created.
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let output = run(&["new", "adapter", "empty", "--dir", s(dir.path())]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(dir.path().join("empty/Cargo.toml").is_file());
    let nested = dir.path().join("a/b");
    let output = run(&["new", "adapter", "nested", "--dir", s(&nested)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(nested.join("nested/wit/adapter.wit").is_file());
}

#[test]
fn inspect_names_the_missing_or_mistyped_export_and_the_expected_signature() {
    // A component built from tests/fixtures/mismatched-adapter: `execute`
    // takes one string and returns one, `variants` has `compile` instead of
    // `compile-variant`.
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("mismatched-adapter");
    copy_dir(
        &workspace_file("tests/fixtures/mismatched-adapter"),
        &fixture,
    );
    let component = build_component(&fixture.join("Cargo.toml"), "mismatched_adapter");

    let output = run(&["inspect", s(&component)]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let facts = stdout(&output);
    assert!(facts.contains("protocols  none"), "{facts}");
    assert!(facts.contains("sandloop:adapter/episode@0.2.0"), "{facts}");
    let message = stderr(&output);
    for expected in [
        s(&component),
        "exports `sandloop:adapter/episode@0.2.0`, but its function `execute` has the wrong signature",
        "expected  execute: func(item: json, ctx: context) -> result<json, adapter-error>",
        "found     execute: func(item: string) -> string",
        "exports `sandloop:adapter/variants@0.2.0` without its function `compile-variant`",
        "expected  compile-variant: func(spec: json, seed: json) -> result<json, adapter-error>",
        "compile: func(spec: string, seed: string) -> string",
    ] {
        assert!(message.contains(expected), "{expected}\n---\n{message}");
    }

    let (status, info) = inspect_json(s(&component));
    assert_eq!(status, 2);
    assert_eq!(info["protocols"], json!([]));
    let problems = info["problems"].as_array().unwrap();
    let kinds: Vec<&str> = problems
        .iter()
        .map(|problem| problem["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["wrong_signature", "missing_function"], "{info}");
    assert_eq!(problems[0]["interface"], "sandloop:adapter/episode@0.2.0");
    assert_eq!(problems[0]["function"], "execute");
    assert_eq!(
        problems[0]["found"],
        "execute: func(item: string) -> string"
    );

    // `run` refuses it with the same explanation, before writing anything.
    let out = dir.path().join("out");
    let items = write_items(dir.path(), "items.jsonl", &[json!({"item_id": "a"})]);
    let output = run(&[
        "run",
        "--adapter",
        s(&component),
        "--items",
        s(&items),
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("`execute` has the wrong signature"),
        "{}",
        stderr(&output)
    );
    assert!(!out.exists());

    // The same component built against another version of the package:
    // both versions are named, per interface.
    let old = dir.path().join("old-version");
    copy_dir(&fixture, &old);
    let wit = old.join("wit/mismatched.wit");
    let text = std::fs::read_to_string(&wit).unwrap().replace(
        "package sandloop:adapter@0.2.0;",
        "package sandloop:adapter@0.0.9;",
    );
    std::fs::write(&wit, text).unwrap();
    let component = build_component(&old.join("Cargo.toml"), "mismatched_adapter");
    let (status, info) = inspect_json(s(&component));
    assert_eq!(status, 2);
    let problems = info["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{info}");
    for (problem, interface) in problems.iter().zip(["episode", "variants"]) {
        assert_eq!(problem["kind"], "other_version", "{problem}");
        assert_eq!(
            problem["interface"],
            format!("sandloop:adapter/{interface}@0.2.0")
        );
        assert_eq!(problem["expected"], "sandloop:adapter@0.2.0");
        assert_eq!(problem["found"], "sandloop:adapter@0.0.9");
    }
    let message = stderr(&run(&["inspect", s(&component)]));
    assert!(
        message.contains(
            "exports `sandloop:adapter/episode@0.0.9`, but this host speaks sandloop:adapter@0.2.0"
        ),
        "{message}"
    );
}

#[test]
fn inspect_finds_no_problem_in_the_example_adapters() {
    for component in [
        HELLO_ADAPTER,
        HOSTILE_ADAPTER,
        MARKDOWN_EXPLORER,
        REPLAY_PROBE,
    ] {
        let (status, info) = inspect_json(component);
        assert_eq!(status, 0, "{component}: {info}");
        assert_eq!(info["problems"], json!([]), "{component}");
    }
}

/// componentize-py, as the Python template's build.sh would find it (or as
/// `.ci/guest-toolchains.sh` installs it), when it runs.
fn componentize_py() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("COMPONENTIZE_PY").map(PathBuf::from),
        Some(workspace_file(
            "target/guest-toolchains/venv/bin/componentize-py",
        )),
        Some(PathBuf::from("componentize-py")),
    ];
    candidates.into_iter().flatten().find(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    })
}

/// The pinned componentize-js packages `.ci/guest-toolchains.sh` installs
/// for examples/js-adapter (the JS template pins the same ones), when node
/// runs.
fn js_node_modules() -> Option<PathBuf> {
    let modules = workspace_file("examples/js-adapter/node_modules");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    (node && modules.join(".bin/componentize-js").exists()).then_some(modules)
}

#[test]
fn scaffolded_python_and_js_adapters_build_and_run() {
    let dir = tempfile::tempdir().unwrap();
    for lang in ["python", "js"] {
        let toolchain = match lang {
            "python" => componentize_py(),
            _ => js_node_modules(),
        };
        let Some(toolchain) = toolchain else {
            assert!(
                std::env::var_os("SANDLOOP_SKIP_GUEST_LANGS").is_some(),
                "--lang {lang}: its toolchain is not installed; run `bash .ci/guest-toolchains.sh` \
                 (or set SANDLOOP_SKIP_GUEST_LANGS=1 to skip it knowingly)"
            );
            eprintln!(
                "SKIPPED --lang {lang}: SANDLOOP_SKIP_GUEST_LANGS is set; not covered by this run"
            );
            continue;
        };
        scaffold_build_and_run(dir.path(), lang, &[], |project, build| {
            if lang == "python" {
                build.env("COMPONENTIZE_PY", &toolchain);
            } else {
                std::os::unix::fs::symlink(&toolchain, project.join("node_modules")).unwrap();
            }
        });
    }
}

#[test]
fn scaffolded_c_and_zig_adapters_build_and_run() {
    let tools = workspace_file("target/guest-toolchains");
    let wasm_tools = tools.join("venv/bin/wasm-tools");
    let reactor = tools.join("wasi_snapshot_preview1.reactor.wasm");
    let installed = wasm_tools.is_file()
        && reactor.is_file()
        && Path::new("/usr/bin/clang-19").is_file()
        && tools.join("venv/bin/python-zig").is_file();
    if !installed {
        assert!(
            std::env::var_os("SANDLOOP_SKIP_GUEST_LANGS").is_some(),
            "--lang c/zig: their toolchains are not installed; run `bash .ci/guest-toolchains.sh` \
             (or set SANDLOOP_SKIP_GUEST_LANGS=1 to skip them knowingly)"
        );
        eprintln!(
            "SKIPPED --lang c and zig: SANDLOOP_SKIP_GUEST_LANGS is set; not covered by this run"
        );
        return;
    }
    // The toolchains ./setup.sh would install, already here.
    let with_tools = |build: &mut Command| {
        build
            .env("WASM_TOOLS", &wasm_tools)
            .env("WASI_REACTOR", &reactor)
            .env("ZIG_PYTHON", tools.join("venv/bin/python"));
    };
    let dir = tempfile::tempdir().unwrap();
    for lang in ["c", "zig"] {
        let expected = ["sandloop/sandloop.c", "bindings/plain.h", "./setup.sh"];
        scaffold_build_and_run(dir.path(), lang, &expected, |_, build| {
            with_tools(build);
        });
    }
    // The C project builds world `replayable` as it is: its bindings are
    // there, so examples/c-adapter/replay.c as adapter.c and
    // `WORLD=replayable` are the whole change.
    let project = dir.path().join("demo-c");
    std::fs::copy(
        workspace_file("examples/c-adapter/replay.c"),
        project.join("adapter.c"),
    )
    .unwrap();
    let script = std::fs::read_to_string(project.join("build.sh")).unwrap();
    assert!(script.contains("\nWORLD=plain\n"), "{script}");
    std::fs::write(
        project.join("build.sh"),
        script.replace("\nWORLD=plain\n", "\nWORLD=replayable\n"),
    )
    .unwrap();
    let mut build = Command::new(project.join("build.sh"));
    with_tools(&mut build);
    let output = build.output().unwrap();
    assert!(
        output.status.success(),
        "world replayable: {}{}",
        stdout(&output),
        stderr(&output)
    );
    let info = inspect_info(s(&project.join("demo-c.wasm")));
    assert!(
        info["protocols"].to_string().contains("replayable-v2"),
        "{info}"
    );
}

/// `sandloop new adapter demo-LANG --lang LANG` in `dir`: the printed
/// steps name `expected` and every template's files and commands, build.sh
/// is executable; a bug is planted, `prepare` readies the project and its
/// build.sh command (the toolchain), the build succeeds, the sample items
/// run (see [`run_sample_items`]) and the planted bug's record names its
/// line.
fn scaffold_build_and_run(
    dir: &Path,
    lang: &str,
    expected: &[&str],
    prepare: impl FnOnce(&Path, &mut Command),
) {
    let name = format!("demo-{lang}");
    let output = run(&["new", "adapter", &name, "--lang", lang, "--dir", s(dir)]);
    assert_eq!(code(&output), 0, "{lang}: {}", stderr(&output));
    let said = stdout(&output);
    let run_line = format!("run --adapter {name}.wasm --items items.jsonl");
    let common = [
        "wit/adapter.wit",
        "items.jsonl",
        "./build.sh",
        run_line.as_str(),
    ];
    for expected in common.iter().chain(expected) {
        assert!(said.contains(expected), "{lang}: {expected}: {said}");
    }
    let project = dir.join(&name);
    let build = project.join("build.sh");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&build).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{lang}: build.sh is executable");
    }
    let bug_line = plant_a_bug(&project, lang);
    let mut command = Command::new(&build);
    prepare(&project, &mut command);
    let output = command.output().expect("run build.sh");
    assert!(
        output.status.success(),
        "{lang}: build.sh failed:\n{}{}",
        stdout(&output),
        stderr(&output)
    );
    let component = project.join(format!("{name}.wasm"));
    assert!(component.is_file(), "{lang}: {}", component.display());
    run_sample_items(&component, &project, &dir.join(format!("out-{lang}")));
    check_the_bug_is_named(&component, dir, lang, &bug_line);
    println!("covered --lang {lang}");
}
