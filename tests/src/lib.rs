//! Paths to the example components, built for `wasm32-wasip2` by this
//! package's build script the way wasmtime's own test-programs are built.

/// `hello-adapter`: plain `execute` only.
pub const HELLO_ADAPTER: &str = env!("HELLO_ADAPTER_WASM");
/// `markdown-explorer`: seeds, variants and episode groups.
pub const MARKDOWN_EXPLORER: &str = env!("MARKDOWN_EXPLORER_WASM");
/// `hostile-adapter`: one misbehaviour per item.
pub const HOSTILE_ADAPTER: &str = env!("HOSTILE_ADAPTER_WASM");
/// `bench-adapter`: the cheapest possible adapter.
pub const BENCH_ADAPTER: &str = env!("BENCH_ADAPTER_WASM");
/// The workspace root, for sample inputs under `examples/`.
pub const WORKSPACE: &str = env!("SANDLOOP_WORKSPACE");
/// `replay-probe`: a replayable adapter that breaks one replay rule per
/// named fault.
pub const REPLAY_PROBE: &str = env!("REPLAY_PROBE_WASM");
/// `ledger-import` (`examples/counterfactual`): a ledger importer whose
/// run fails, with the `counterfactual` export.
pub const LEDGER_IMPORT: &str = env!("LEDGER_IMPORT_WASM");
/// `loop-steps`: a loop workflow plugin with `plan`, `work` and
/// `goal_check` steps.
pub const LOOP_STEPS: &str = env!("LOOP_STEPS_WASM");
/// `llm-steps`: a loop workflow plugin whose steps ask an
/// OpenAI-compatible chat-completions endpoint over `wasi:http`.
pub const LLM_STEPS: &str = env!("LLM_STEPS_WASM");

/// A component built from another language's example by its `build.sh`,
/// or `None` when that toolchain was not installed at build time
/// (`bash .ci/guest-toolchains.sh` installs both).
fn other_language(path: &'static str) -> Option<&'static str> {
    (!path.is_empty()).then_some(path)
}

/// `examples/python-adapter/app.py` (world `replayable`), built with
/// componentize-py.
pub fn python_adapter() -> Option<&'static str> {
    other_language(env!("PYTHON_ADAPTER_WASM"))
}

/// `examples/python-adapter/noop.py`: bench-adapter's no-op logic in Python.
pub fn python_noop() -> Option<&'static str> {
    other_language(env!("PYTHON_NOOP_WASM"))
}

/// `examples/python-adapter/ledger.py`: ledger-import
/// (`examples/counterfactual`) in Python, world `counterfactual-fixes`.
pub fn python_ledger() -> Option<&'static str> {
    other_language(env!("PYTHON_LEDGER_WASM"))
}

/// `examples/js-adapter/adapter.js` (world `replayable`), built with
/// componentize-js.
pub fn js_adapter() -> Option<&'static str> {
    other_language(env!("JS_ADAPTER_WASM"))
}

/// `examples/js-adapter/noop.js`: bench-adapter's no-op logic in JavaScript.
pub fn js_noop() -> Option<&'static str> {
    other_language(env!("JS_NOOP_WASM"))
}

/// `examples/js-adapter/ledger.js`: ledger-import (`examples/counterfactual`)
/// in JavaScript, world `counterfactual-fixes`.
pub fn js_ledger() -> Option<&'static str> {
    other_language(env!("JS_LEDGER_WASM"))
}

/// `examples/c-adapter/adapter.c`: hello-adapter in C (world `plain`), built
/// with clang-19, wasi-libc and wasm-tools.
pub fn c_adapter() -> Option<&'static str> {
    other_language(env!("C_ADAPTER_WASM"))
}

/// `examples/zig-adapter/adapter.zig`: hello-adapter in Zig (world `plain`).
pub fn zig_adapter() -> Option<&'static str> {
    other_language(env!("ZIG_ADAPTER_WASM"))
}

/// `examples/c-adapter/noop.c`: bench-adapter's no-op logic in C (world
/// `grouped`).
pub fn c_noop() -> Option<&'static str> {
    other_language(env!("C_NOOP_WASM"))
}

/// `examples/c-adapter/replay.c`: word-length buckets with a shared prefix
/// per seed and replay points whose state is exported as bytes (world
/// `replayable`).
pub fn c_replay() -> Option<&'static str> {
    other_language(env!("C_REPLAY_WASM"))
}
