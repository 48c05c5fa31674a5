#!/usr/bin/env bash
# Build the C adapter into a WebAssembly component:
#
#   examples/c-adapter/build.sh OUT_DIR
#
# writes OUT_DIR/c_adapter.wasm (adapter.c with guest-sdk/c/sandloop.c and
# the generated bindings of world `plain`), OUT_DIR/c_noop.wasm (noop.c,
# world `grouped`, for the languages bench) and OUT_DIR/c_replay.wasm
# (replay.c, world `replayable`: replay points whose state is exported as
# bytes), against the repository's wit/adapter.wit. Works from any
# directory.
#
# Needs clang-19 and lld-19 with Debian's wasi-libc (apt-get install -y
# clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc), wasm-tools, and the
# WASI preview-1 reactor adapter; .ci/guest-toolchains.sh installs the last
# two under target/guest-toolchains/.
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
cc="${CC_WASM:-clang-19}"
wasm_tools="${WASM_TOOLS:-$tools/venv/bin/wasm-tools}"
reactor="${WASI_REACTOR:-$tools/wasi_snapshot_preview1.reactor.wasm}"
for need in "$cc" "$wasm_tools" "$reactor"; do
    if ! command -v "$need" >/dev/null && [ ! -f "$need" ]; then
        echo "error: $need is missing; run bash $repo/.ci/guest-toolchains.sh" >&2
        exit 1
    fi
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
build() { # SOURCE WORLD OUTPUT
    local world="$2"
    "$cc" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -std=c99 \
        -ffile-prefix-map="$here/=" -ffile-prefix-map="$repo/=" \
        -Wall -Wextra -Werror -I "$sdk" -I "$sdk/bindings/$world" \
        "$here/$1" "$sdk/sandloop.c" "$sdk/bindings/$world/$world.c" \
        "$sdk/bindings/$world/${world}_component_type.c" \
        -o "$scratch/core.wasm"
    "$wasm_tools" component embed "$repo/wit/adapter.wit" --world "$world" \
        "$scratch/core.wasm" -o "$scratch/embedded.wasm"
    "$wasm_tools" component new "$scratch/embedded.wasm" \
        --adapt "wasi_snapshot_preview1=$reactor" -o "$out/$3"
    echo "built $out/$3 (world $world, $("$cc" --version | head -1))"
}
build adapter.c plain c_adapter.wasm
build noop.c grouped c_noop.wasm
build replay.c replayable c_replay.wasm
