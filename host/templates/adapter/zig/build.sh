#!/usr/bin/env bash
# Build {{name}}.wasm, the adapter component, from adapter.zig:
#
#   ./build.sh            # writes ./{{name}}.wasm
#   ./build.sh OUT_DIR    # writes OUT_DIR/{{name}}.wasm
#
# zig translates the C headers (bindings/, sandloop/) into the module `c`,
# compiles adapter.zig with sandloop/ and bindings/ into a WASI preview-1
# core module; wasm-tools embeds the world's types from wit/adapter.wit and
# turns the module into a component with the reactor adapter. Needs what
# ./setup.sh installs once. $ZIG_PYTHON (a python with the ziglang package),
# $WASM_TOOLS and $WASI_REACTOR override where they are found.
set -euo pipefail

# The world of wit/adapter.wit that adapter.zig implements: `plain` exports
# `episode`; `grouped` adds `episode-groups`, `replayable` adds `seeds`,
# `variants` and `replay` (bindings/ holds the C bindings of all three).
WORLD=plain

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${1:-$here}"
out="$(cd "${1:-$here}" && pwd)"
python="${ZIG_PYTHON:-$here/.venv/bin/python}"
wasm_tools="${WASM_TOOLS:-$here/.venv/bin/wasm-tools}"
reactor="${WASI_REACTOR:-$here/.tools/wasi_snapshot_preview1.reactor.wasm}"
if ! "$python" -c 'import ziglang' 2>/dev/null || [ ! -x "$wasm_tools" ] || [ ! -f "$reactor" ]; then
    echo "error: zig, wasm-tools or the WASI reactor adapter is missing: run ./setup.sh once" >&2
    exit 1
fi
zig() { "$python" -m ziglang "$@"; }

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
printf '#include <stdlib.h>\n#include "%s.h"\n#include "sandloop.h"\n' "$WORLD" >"$scratch/c.h"
zig translate-c "$scratch/c.h" -I "$here/sandloop" -I "$here/bindings" -target wasm32-wasi -lc \
    >"$scratch/c.zig"
zig build-exe -target wasm32-wasi -fno-entry -rdynamic -mexec-model=reactor -O ReleaseSmall -lc \
    --cache-dir "$scratch/cache" -femit-bin="$scratch/core.wasm" \
    -I "$here/sandloop" -I "$here/bindings" \
    "$here/sandloop/sandloop.c" "$here/bindings/$WORLD.c" "$here/bindings/${WORLD}_component_type.c" \
    --dep c -Mroot="$here/adapter.zig" -Mc="$scratch/c.zig"
"$wasm_tools" component embed "$here/wit/adapter.wit" --world "$WORLD" \
    "$scratch/core.wasm" -o "$scratch/embedded.wasm"
"$wasm_tools" component new "$scratch/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$reactor" -o "$out/{{name}}.wasm"
echo "built $out/{{name}}.wasm (world $WORLD, zig $(zig version))"
