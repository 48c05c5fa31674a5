#!/usr/bin/env bash
# Build {{name}}.wasm, the adapter component, from adapter.js and
# wit/adapter.wit:
#
#   ./build.sh            # writes ./{{name}}.wasm
#   ./build.sh OUT_DIR    # writes OUT_DIR/{{name}}.wasm
#
# Needs node 20+ and the pinned packages of package-lock.json
# (componentize-js, jco, preview2-shim). Install them once with:
#
#   npm ci
set -euo pipefail

# The world of wit/adapter.wit that adapter.js implements: `plain` exports
# `episode`; `grouped` adds `episode-groups`; `explorer` adds `seeds` and
# `variants` too (see the end of adapter.js).
WORLD=plain

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${1:-$here}"
out="$(cd "${1:-$here}" && pwd)"

if ! command -v node >/dev/null; then
    echo "error: node is not installed (componentize-js needs Node.js 20 or later)" >&2
    exit 1
fi
tool="$here/node_modules/.bin/componentize-js"
if [ ! -x "$tool" ]; then
    cat >&2 <<MSG
error: componentize-js is not installed. Install the pinned packages (from
the npm registry) with
    cd $here && npm ci
MSG
    exit 1
fi
version="$(node -p "require('$here/node_modules/@bytecodealliance/componentize-js/package.json').version")"

# `http` and `fetch-event` would make the component import wasi:http, which
# the sandbox does not provide.
cd "$here"
"$tool" adapter.js --wit wit/adapter.wit --world-name "$WORLD" \
    --disable http fetch-event -o "$out/{{name}}.wasm"
echo "built $out/{{name}}.wasm (world $WORLD, componentize-js $version)"
