#!/usr/bin/env bash
# Build {{name}}.wasm, the adapter component, from adapter.c:
#
#   ./build.sh            # writes ./{{name}}.wasm
#   ./build.sh OUT_DIR    # writes OUT_DIR/{{name}}.wasm
#
# clang compiles adapter.c, sandloop/ and bindings/ into a WASI preview-1
# core module; wasm-tools embeds the world's types from wit/adapter.wit and
# turns the module into a component with the reactor adapter. Needs clang-19
# with lld-19 and wasi-libc (apt), and what ./setup.sh installs once.
# $CC_WASM, $WASM_TOOLS and $WASI_REACTOR override where they are found.
set -euo pipefail

# The world of wit/adapter.wit that adapter.c implements: `plain` exports
# `episode`; `grouped` adds `episode-groups`, `replayable` adds `seeds`,
# `variants` and `replay` (bindings/ holds the C bindings of all three).
WORLD=plain

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${1:-$here}"
out="$(cd "${1:-$here}" && pwd)"
cc="${CC_WASM:-clang-19}"
wasm_tools="${WASM_TOOLS:-$here/.venv/bin/wasm-tools}"
reactor="${WASI_REACTOR:-$here/.tools/wasi_snapshot_preview1.reactor.wasm}"
if ! command -v "$cc" >/dev/null || [ ! -f /usr/lib/wasm32-wasi/libc.a ]; then
    echo "error: $cc or wasi-libc is missing: apt-get install -y clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc (as root, or with sudo)" >&2
    exit 1
fi
if [ ! -x "$wasm_tools" ] || [ ! -f "$reactor" ]; then
    echo "error: wasm-tools or the WASI reactor adapter is missing: run ./setup.sh once" >&2
    exit 1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# -ffile-prefix-map: __FILE__ (in an assert's message) is adapter.c, not
# this directory's absolute path.
"$cc" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -std=c99 -Wall -Wextra \
    -ffile-prefix-map="$here/=" \
    -I "$here/sandloop" -I "$here/bindings" \
    "$here/adapter.c" "$here/sandloop/sandloop.c" \
    "$here/bindings/$WORLD.c" "$here/bindings/${WORLD}_component_type.c" \
    -o "$scratch/core.wasm"
"$wasm_tools" component embed "$here/wit/adapter.wit" --world "$WORLD" \
    "$scratch/core.wasm" -o "$scratch/embedded.wasm"
"$wasm_tools" component new "$scratch/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$reactor" -o "$out/{{name}}.wasm"
echo "built $out/{{name}}.wasm (world $WORLD)"
