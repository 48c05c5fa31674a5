#!/usr/bin/env bash
# Build the Zig adapter into a WebAssembly component:
#
#   examples/zig-adapter/build.sh OUT_DIR
#
# writes OUT_DIR/zig_adapter.wasm (adapter.zig with guest-sdk/c/sandloop.c
# and the generated C bindings of world `plain`, against the repository's
# wit/adapter.wit). Works from any directory.
#
# Needs Zig (PyPI `ziglang`, pinned in guest-sdk/c/requirements.txt),
# wasm-tools and the WASI preview-1 reactor adapter, which
# .ci/guest-toolchains.sh installs under target/guest-toolchains/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
sdk="$repo/guest-sdk/c"
tools="$repo/target/guest-toolchains"

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
python="${ZIG_PYTHON:-$tools/venv/bin/python}"
wasm_tools="${WASM_TOOLS:-$tools/venv/bin/wasm-tools}"
reactor="${WASI_REACTOR:-$tools/wasi_snapshot_preview1.reactor.wasm}"
if ! "$python" -c 'import ziglang' 2>/dev/null || [ ! -x "$wasm_tools" ] || [ ! -f "$reactor" ]; then
    echo "error: zig, wasm-tools or the WASI reactor adapter is missing; run bash $repo/.ci/guest-toolchains.sh" >&2
    exit 1
fi
zig() { "$python" -m ziglang "$@"; }

world=plain
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# The C declarations as a Zig module (`@import("c")`).
printf '#include <stdlib.h>\n#include "%s.h"\n#include "sandloop.h"\n' "$world" >"$scratch/c.h"
zig translate-c "$scratch/c.h" -I "$sdk" -I "$sdk/bindings/$world" -target wasm32-wasi -lc \
    >"$scratch/c.zig"
zig build-exe -target wasm32-wasi -fno-entry -rdynamic -mexec-model=reactor -O ReleaseSmall -lc \
    --cache-dir "$scratch/cache" --global-cache-dir "$tools/zig-cache" \
    -femit-bin="$scratch/core.wasm" -I "$sdk" -I "$sdk/bindings/$world" \
    "$sdk/sandloop.c" "$sdk/bindings/$world/$world.c" "$sdk/bindings/$world/${world}_component_type.c" \
    --dep c -Mroot="$here/adapter.zig" -Mc="$scratch/c.zig"
"$wasm_tools" component embed "$repo/wit/adapter.wit" --world "$world" \
    "$scratch/core.wasm" -o "$scratch/embedded.wasm"
"$wasm_tools" component new "$scratch/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$reactor" -o "$out/zig_adapter.wasm"
echo "built $out/zig_adapter.wasm (world $world, zig $(zig version))"
