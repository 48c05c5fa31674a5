#!/usr/bin/env bash
# Build {{name}}.wasm, the adapter component, from app.py and wit/adapter.wit:
#
#   ./build.sh            # writes ./{{name}}.wasm
#   ./build.sh OUT_DIR    # writes OUT_DIR/{{name}}.wasm
#
# Needs componentize-py (pinned in requirements.txt), found as
# $COMPONENTIZE_PY, else .venv/bin/componentize-py, else on PATH. Install it
# once with:
#
#   python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
set -euo pipefail

# The world of wit/adapter.wit that app.py implements: `plain` exports
# `episode`; `grouped` adds `episode-groups`; `explorer` adds `seeds` and
# `variants` too (see the end of app.py).
WORLD=plain

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${1:-$here}"
out="$(cd "${1:-$here}" && pwd)"

pinned="$(sed -n 's/^componentize-py==//p' "$here/requirements.txt")"
tool="${COMPONENTIZE_PY:-}"
if [ -n "$tool" ] && ! command -v "$tool" >/dev/null; then
    echo "error: COMPONENTIZE_PY=$tool is not an executable" >&2
    exit 1
fi
if [ -z "$tool" ] && [ -x "$here/.venv/bin/componentize-py" ]; then
    tool="$here/.venv/bin/componentize-py"
fi
if [ -z "$tool" ]; then
    tool="$(command -v componentize-py || true)"
fi
if [ -z "$tool" ]; then
    cat >&2 <<MSG
error: componentize-py is not installed. Install it (from PyPI) with
    cd $here && python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
MSG
    exit 1
fi
version="$("$tool" --version | awk '{print $2}')"
if [ "$version" != "$pinned" ]; then
    echo "warning: $tool is componentize-py $version; requirements.txt pins $pinned" >&2
fi

# componentize-py bundles the modules of its Python path (this directory)
# into the component; an active virtualenv's packages are left out.
cd "$here"
unset VIRTUAL_ENV
"$tool" --quiet -d wit/adapter.wit -w "$WORLD" componentize app -p "$here" -o "$out/{{name}}.wasm"
echo "built $out/{{name}}.wasm (world $WORLD, componentize-py $version)"
