//! Build the example adapters as WebAssembly components, the way wasmtime's
//! test-programs do: a nested `cargo build --target wasm32-wasip2` into a
//! target directory of its own (so it never waits on the outer build's
//! lock), then export each component's path as a compile-time variable.

use std::path::PathBuf;
use std::process::Command;

const EXAMPLES: &[&str] = &[
    "hello-adapter",
    "markdown-explorer",
    "hostile-adapter",
    "bench-adapter",
    "replay-probe",
    "ledger-import",
    "loop-steps",
    "llm-steps",
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    for watched in ["examples", "guest-sdk", "wit"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let target_dir = workspace.join("target").join("e2e-components");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target_dir);
    for example in EXAMPLES {
        command.args(["-p", example]);
    }
    // The outer build's flags are for the host, not for the guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .expect("run cargo to build the example components");
    assert!(
        status.success(),
        "building the example components failed; is the target installed? \
         run `rustup target add wasm32-wasip2`"
    );
    for example in EXAMPLES {
        let file = target_dir
            .join("wasm32-wasip2")
            .join("release")
            .join(format!("{}.wasm", example.replace('-', "_")));
        assert!(file.is_file(), "missing component {}", file.display());
        let var = format!("{}_WASM", example.replace('-', "_").to_uppercase());
        println!("cargo:rustc-env={var}={}", file.display());
    }
    println!("cargo:rustc-env=SANDLOOP_WORKSPACE={}", workspace.display());
    build_other_languages(&workspace, &target_dir);
}

/// The Python, JavaScript, C and Zig example adapters, built by their own scripts
/// when their toolchains are installed (`.ci/guest-toolchains.sh`). Each
/// component's path is exported as `{NAME}_WASM`, empty when its toolchain
/// is missing: the tests that need it then fail and say how to install it
/// (or, with `SANDLOOP_SKIP_GUEST_LANGS=1`, report themselves skipped).
fn build_other_languages(workspace: &std::path::Path, target_dir: &std::path::Path) {
    // (example, the files its toolchain needs, the components it builds)
    let reactor = "target/guest-toolchains/wasi_snapshot_preview1.reactor.wasm";
    let wasm_tools = "target/guest-toolchains/venv/bin/wasm-tools";
    let languages: &[(&str, &[&str], &[&str])] = &[
        (
            "python-adapter",
            &["target/guest-toolchains/venv/bin/componentize-py"],
            &["python_adapter", "python_ledger", "python_noop"],
        ),
        (
            "js-adapter",
            &["examples/js-adapter/node_modules/.bin/componentize-js"],
            &["js_adapter", "js_ledger", "js_noop"],
        ),
        (
            "c-adapter",
            &[
                "/usr/bin/clang-19",
                "/usr/lib/wasm32-wasi/libc.a",
                wasm_tools,
                reactor,
            ],
            &["c_adapter", "c_noop", "c_replay"],
        ),
        (
            "zig-adapter",
            &[
                "target/guest-toolchains/venv/bin/python-zig",
                wasm_tools,
                reactor,
            ],
            &["zig_adapter"],
        ),
    ];
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("target/guest-toolchains").display()
    );
    for (example, tools, components) in languages {
        let out = target_dir.join("other-languages");
        let installed = tools.iter().all(|tool| workspace.join(tool).exists());
        let built = installed && {
            let script = workspace.join("examples").join(example).join("build.sh");
            let status = Command::new("bash")
                .arg(&script)
                .arg(&out)
                .status()
                .expect("run bash to build the example components");
            assert!(status.success(), "{} failed", script.display());
            true
        };
        if !installed {
            println!(
                "cargo:warning={example} not built: its toolchain is missing (bash .ci/guest-toolchains.sh installs it)"
            );
        }
        for component in *components {
            let file = out.join(format!("{component}.wasm"));
            let value = if built {
                assert!(file.is_file(), "missing component {}", file.display());
                file.display().to_string()
            } else {
                String::new()
            };
            println!("cargo:rustc-env={}_WASM={value}", component.to_uppercase());
        }
    }
}
