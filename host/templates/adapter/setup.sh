#!/usr/bin/env bash
# Install what ./build.sh needs besides a C compiler, once (for a C project
# about 10 s; for a Zig one 10-60 s, Zig being a 100 MB wheel):
#
# - the tools pinned in requirements.txt (wasm-tools; Zig too in a Zig
#   project), from PyPI into .venv/;
# - the WASI preview-1 reactor adapter, which turns the core module the
#   build writes into a component: wasi-preview1-component-adapter-provider
#   48.0.8 from crates.io (Apache-2.0 WITH LLVM-exception), checked against
#   its sha256, into .tools/.
#
# A C project compiles with clang-19, lld-19, the wasm32 runtime and
# wasi-libc from Debian:
#   sudo apt-get install -y clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc (as root: without sudo)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ ! -x "$here/.venv/bin/wasm-tools" ]; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi
"$here/.venv/bin/wasm-tools" --version

reactor="$here/.tools/wasi_snapshot_preview1.reactor.wasm"
crate="wasi-preview1-component-adapter-provider-48.0.8"
crate_sha256="d3a1674fffec103c1d4367d4417a3bd5423cde3cfd56ff3b326b5fc72c0a8ebd"
if [ ! -f "$reactor" ]; then
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    curl -sSfL -o "$scratch/$crate.crate" \
        "https://static.crates.io/crates/wasi-preview1-component-adapter-provider/$crate.crate"
    if [ "$(sha256sum "$scratch/$crate.crate" | awk '{print $1}')" != "$crate_sha256" ]; then
        echo "error: $crate.crate does not have the pinned sha256" >&2
        exit 1
    fi
    tar -xzf "$scratch/$crate.crate" -C "$scratch" "$crate/artefacts/wasi_snapshot_preview1.reactor.wasm"
    mkdir -p "$here/.tools"
    mv "$scratch/$crate/artefacts/wasi_snapshot_preview1.reactor.wasm" "$reactor"
fi
echo "setup done: .venv/bin/wasm-tools and $reactor"
