#!/usr/bin/env bash
# Build the JavaScript adapters into WebAssembly components:
#
#   examples/js-adapter/build.sh OUT_DIR
#
# writes OUT_DIR/js_adapter.wasm (adapter.js, which imports
# sandloop-replay.js; world `replayable`) and OUT_DIR/js_noop.wasm (noop.js,
# world `grouped`), both against the repository's wit/adapter.wit. Works
# from any directory.
#
# Needs node (20 or later) and this directory's node_modules, installed from
# package-lock.json (componentize-js, jco, preview2-shim, all pinned) by
# .ci/guest-toolchains.sh or `npm ci` here.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
wit="$repo/wit/adapter.wit"

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"

tool="$here/node_modules/.bin/componentize-js"
if ! command -v node >/dev/null; then
    echo "error: node is not installed (componentize-js needs Node.js 20 or later)" >&2
    exit 1
fi
if [ ! -x "$tool" ]; then
    cat >&2 <<MSG
error: componentize-js is not installed in $here/node_modules.
  Install the pinned packages (from the npm registry) with
      bash $repo/.ci/guest-toolchains.sh
  or
      (cd $here && npm ci)
MSG
    exit 1
fi
version="$(node -p "require('$here/node_modules/@bytecodealliance/componentize-js/package.json').version")"

# `http` and `fetch-event` would make the component import wasi:http, which
# the sandbox does not provide; stdio, clocks and random stay (wasi:cli,
# wasi:clocks, wasi:random are linked; stderr reaches the run directory).
build() { # SOURCE WORLD OUTPUT
    echo "componentize-js $version: $1 (world $2) -> $out/$3"
    (cd "$here" && "$tool" "$1" --wit "$wit" --world-name "$2" \
        --disable http fetch-event -o "$out/$3")
}
build adapter.js replayable js_adapter.wasm
build noop.js grouped js_noop.wasm
