#!/usr/bin/env bash
# Build the Python adapters into WebAssembly components:
#
#   examples/python-adapter/build.sh OUT_DIR
#
# writes OUT_DIR/python_adapter.wasm (app.py with sandloop_replay.py, world
# `replayable`) and OUT_DIR/python_noop.wasm (noop.py, world `grouped`),
# both against the repository's wit/adapter.wit. Works from any directory.
#
# Needs componentize-py (the version pinned in requirements.txt), found as
# $COMPONENTIZE_PY, else target/guest-toolchains/venv/bin/componentize-py
# (what .ci/guest-toolchains.sh installs), else on PATH.
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

pinned="$(sed -n 's/^componentize-py==//p' "$here/requirements.txt")"
tool="${COMPONENTIZE_PY:-}"
if [ -n "$tool" ] && ! command -v "$tool" >/dev/null; then
    echo "error: COMPONENTIZE_PY=$tool is not an executable" >&2
    exit 1
fi
if [ -z "$tool" ] && [ -x "$repo/target/guest-toolchains/venv/bin/componentize-py" ]; then
    tool="$repo/target/guest-toolchains/venv/bin/componentize-py"
fi
if [ -z "$tool" ]; then
    tool="$(command -v componentize-py || true)"
fi
if [ -z "$tool" ]; then
    cat >&2 <<MSG
error: componentize-py is not installed.
  Install the pinned toolchain (componentize-py $pinned, from PyPI) with
      bash $repo/.ci/guest-toolchains.sh
  or put componentize-py $pinned on PATH, or set COMPONENTIZE_PY to it.
MSG
    exit 1
fi
version="$("$tool" --version | awk '{print $2}')"
if [ "$version" != "$pinned" ]; then
    echo "warning: $tool is componentize-py $version; requirements.txt pins $pinned" >&2
fi

# componentize-py bundles its Python path into the component: only this
# directory (not the caller's cwd, not an active virtualenv's packages).
cd "$here"
unset VIRTUAL_ENV
build() { # MODULE WORLD OUTPUT
    echo "componentize-py $version: $1.py (world $2) -> $out/$3"
    "$tool" --quiet -d "$wit" -w "$2" componentize "$1" -p "$here" -o "$out/$3"
}
build app replayable python_adapter.wasm
build noop grouped python_noop.wasm
