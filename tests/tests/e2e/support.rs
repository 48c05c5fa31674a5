//! Helpers shared by the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// A compiled-component cache private to this test run: one directory
/// under cargo's target tmp dir, emptied when the run starts. (A `TempDir`
/// in a static is never dropped, so each run would leave its cache —
/// hundreds of MB — behind in the system's temp dir.)
fn cache_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-component-cache");
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => panic!("empty {}: {error}", dir.display()),
        }
        std::fs::create_dir_all(&dir).expect("create the component cache");
        dir
    })
}

/// The `sandloop` binary with a private cache and no inherited cache
/// settings. `SANDLOOP_E2E_BIN` points the tests at another build of it
/// (an older one, to see a test fail before its fix).
pub fn sandloop() -> Command {
    let binary = std::env::var_os("SANDLOOP_E2E_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandloop").into());
    let mut command = Command::new(binary);
    command
        .env("SANDLOOP_CACHE_DIR", cache_dir())
        .env_remove("XDG_CACHE_HOME");
    command
}

/// Run `sandloop ARGS` to completion.
pub fn run(args: &[&str]) -> Output {
    sandloop().args(args).output().expect("spawn sandloop")
}

/// Exit code, asserting the process was not killed by a signal.
pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A file under the workspace, e.g. `examples/hostile-adapter/attacks.jsonl`.
pub fn workspace_file(relative: &str) -> PathBuf {
    Path::new(sandloop_tests::WORKSPACE).join(relative)
}

/// Every line of `DIR/records.jsonl`, parsed.
pub fn records(dir: &Path) -> Vec<Value> {
    jsonl(&dir.join("records.jsonl"))
}

/// Every line of a JSONL file, parsed.
pub fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

/// A parsed JSON file.
pub fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

/// Write `lines` as a JSONL file in `dir`.
pub fn write_items(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(&path, text).expect("write items");
    path
}

/// The arguments of `sandloop run` of `adapter` over the items file
/// `items` into `out`, plus `extra` flags.
pub fn run_args<'a>(
    adapter: &'a str,
    items: &'a Path,
    out: &'a Path,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--adapter",
        adapter,
        "--items",
        s(items),
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    args
}

/// `sandloop run` of the hello adapter over the items file `items` into
/// `out`, plus `extra` flags.
pub fn run_hello(items: &Path, out: &Path, extra: &[&str]) -> Output {
    run(&run_args(sandloop_tests::HELLO_ADAPTER, items, out, extra))
}

/// `sandloop run` of the markdown-explorer example over its sample
/// documents (granted read-only at `/docs`) with its variant catalog, into
/// `out`, plus `extra` flags and the environment variables `env` (passed to
/// the adapter with `--env`).
pub fn run_markdown_explorer(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let docs = workspace_file("examples/markdown-explorer/sample-docs");
    let catalog = workspace_file("examples/markdown-explorer/catalog.json");
    let grant = format!("{}::/docs:ro", s(&docs));
    let mut args = vec![
        "run",
        "--adapter",
        sandloop_tests::MARKDOWN_EXPLORER,
        "--dir",
        &grant,
        "--variants",
        s(&catalog),
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    for (name, _) in env {
        args.extend(["--env", name]);
    }
    sandloop()
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("spawn sandloop")
}

/// `path` as &str.
pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The record whose `item_id` is `id` and `record_kind` is `kind`.
pub fn find<'a>(records: &'a [Value], id: &str, kind: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["item_id"] == id && r["record_kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} record for {id}"))
}

/// True when any string anywhere in `value` is an absolute POSIX path.
pub fn has_absolute_path(value: &Value) -> bool {
    match value {
        Value::String(text) => text.starts_with('/'),
        Value::Array(items) => items.iter().any(has_absolute_path),
        Value::Object(map) => map.values().any(has_absolute_path),
        _ => false,
    }
}

/// The bytes a replay point line's `durable_state` names under the run
/// directory `dir`: the state's (`file`, from `offset` for `size_bytes`
/// when it is in the run's pack) and the items' JSON (`items_file`, from
/// `items_offset` for `items_size_bytes`), each as the run wrote them.
pub fn durable_bytes(dir: &Path, durable: &Value) -> (Vec<u8>, Vec<u8>) {
    let part = |file: &str, offset: &str, size: &str| {
        let bytes = std::fs::read(dir.join(durable[file].as_str().expect("a file name")))
            .expect("a durable state's file");
        match durable[offset].as_u64() {
            None => bytes,
            Some(start) => {
                let end = start + durable[size].as_u64().expect("a size with the offset");
                bytes[start as usize..end as usize].to_vec()
            }
        }
    };
    (
        part("file", "offset", "size_bytes"),
        part("items_file", "items_offset", "items_size_bytes"),
    )
}

/// `sandloop replay --run RUN --item ITEM --json`, which must succeed: its
/// report.
pub fn replay_report(run_dir: &Path, item: &str) -> Value {
    let output = run(&["replay", "--run", s(run_dir), "--item", item, "--json"]);
    assert_eq!(code(&output), 0, "replay {item}: {}", stderr(&output));
    serde_json::from_str(&stdout(&output)).expect("the report is JSON")
}

/// Assert that two runs' records, keyed by item id, hold the same items
/// and the same record for each; `what` names the comparison.
pub fn assert_same_records(
    left: &std::collections::BTreeMap<String, Value>,
    right: &std::collections::BTreeMap<String, Value>,
    what: &str,
) {
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        right.keys().collect::<Vec<_>>(),
        "{what}: the same items"
    );
    for (id, record) in left {
        assert_eq!(record, &right[id], "{what}: {id} differs");
    }
}

/// `sandloop inspect COMPONENT --json`, which must succeed: its report.
pub fn inspect_info(component: &str) -> Value {
    let output = run(&["inspect", component, "--json"]);
    assert_eq!(code(&output), 0, "inspect {component}: {}", stderr(&output));
    serde_json::from_str(&stdout(&output)).expect("inspect --json prints JSON")
}

/// Write a variant catalog (schema `loopx_explore_variant_catalog_v0`)
/// holding `specs` (a JSON array) as `DIR/catalog.json`.
pub fn write_catalog(dir: &Path, specs: Value) -> PathBuf {
    let path = dir.join("catalog.json");
    let catalog =
        serde_json::json!({"schema_version": "loopx_explore_variant_catalog_v0", "specs": specs});
    std::fs::write(&path, catalog.to_string()).expect("write catalog");
    path
}

/// Assert that `output` exited with `expected` and that its stderr says
/// every one of `says`.
pub fn assert_exit(output: &Output, expected: i32, says: &[&str]) {
    let text = stderr(output);
    assert_eq!(code(output), expected, "{text}");
    for part in says {
        assert!(text.contains(part), "expected {part:?} in: {text}");
    }
}

/// A spawned process that is killed (SIGKILL, as `kill -9`) and reaped when
/// dropped, so a test that fails on the way leaves nothing running.
pub struct KillOnDrop(pub std::process::Child);

impl KillOnDrop {
    /// Wait for the process to exit on its own, at most `limit`; its exit
    /// code. Panics naming `what` when it is still running after `limit`
    /// (it is then killed by the drop) or was ended by a signal.
    pub fn wait_within(&mut self, limit: std::time::Duration, what: &str) -> i32 {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait for the process") {
                return status
                    .code()
                    .unwrap_or_else(|| panic!("{what} was ended by a signal"));
            }
            assert!(
                started.elapsed() < limit,
                "{what} did not end within {limit:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Python and JavaScript components `python` and `js` (built by the
/// tests' build script, `None` without their toolchain) labelled `python`
/// and `js`, or `None` (after printing why) when one is missing and
/// `SANDLOOP_SKIP_GUEST_LANGS` asks to skip; otherwise a missing one panics
/// and says how to install it. `what` names them in those messages.
pub fn guest_langs(
    what: &str,
    python: Option<&'static str>,
    js: Option<&'static str>,
) -> Option<[(&'static str, &'static str); 2]> {
    guest_set(
        what,
        [("python", "Python", python), ("js", "JavaScript", js)],
    )
}

/// [`guest_langs`] for any set of components: each `(label, name,
/// component)`; the components labelled, or `None` (after printing why) when
/// one is missing and `SANDLOOP_SKIP_GUEST_LANGS` asks to skip; otherwise a
/// missing one panics and says how to install it.
pub fn guest_set<const N: usize>(
    what: &str,
    set: [(&'static str, &str, Option<&'static str>); N],
) -> Option<[(&'static str, &'static str); N]> {
    let names = set
        .iter()
        .map(|(_, name, _)| *name)
        .collect::<Vec<_>>()
        .join("/");
    if set.iter().all(|(_, _, path)| path.is_some()) {
        return Some(set.map(|(label, _, path)| (label, path.unwrap())));
    }
    if std::env::var_os("SANDLOOP_SKIP_GUEST_LANGS").is_some() {
        eprintln!("SKIPPED: the {names} {what} were not built (SANDLOOP_SKIP_GUEST_LANGS is set)");
        return None;
    }
    panic!(
        "the {names} {what} were not built: their toolchains are \
         missing. Run `bash .ci/guest-toolchains.sh`, then the tests again \
         (or set SANDLOOP_SKIP_GUEST_LANGS=1 to skip them knowingly)"
    )
}

/// Copy the directory `from` into `to`, recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
