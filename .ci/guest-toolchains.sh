#!/usr/bin/env bash
# Install the pinned guest toolchains that build the Python and JavaScript
# adapters (examples/python-adapter, examples/js-adapter):
#
# - componentize-py, the version pinned in examples/python-adapter/requirements.txt,
#   from PyPI into the virtualenv target/guest-toolchains/venv;
# - componentize-js, jco and preview2-shim, from the npm registry into
#   examples/js-adapter/node_modules, exactly as package-lock.json says (npm ci).
#
# Idempotent: a toolchain already installed at the pinned version is left
# alone, so a second call takes well under a second. Needs python3 (with
# venv) and node 20+ with npm; uses no network but the two registries.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ---- Python: componentize-py ------------------------------------------------
requirements="$repo/examples/python-adapter/requirements.txt"
venv="$repo/target/guest-toolchains/venv"
pinned="$(sed -n 's/^componentize-py==//p' "$requirements")"
installed=""
if [ -x "$venv/bin/componentize-py" ]; then
    installed="$("$venv/bin/componentize-py" --version 2>/dev/null | awk '{print $2}' || true)"
fi
if [ "$installed" = "$pinned" ]; then
    echo "guest-toolchains: componentize-py $pinned already in $venv"
else
    if ! command -v python3 >/dev/null; then
        echo "guest-toolchains: python3 is missing (needed for componentize-py)" >&2
        exit 1
    fi
    echo "guest-toolchains: installing componentize-py $pinned into $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --requirement "$requirements"
    "$venv/bin/componentize-py" --version
fi

# ---- JavaScript: componentize-js + jco --------------------------------------
js="$repo/examples/js-adapter"
stamp="$js/node_modules/.sandloop-lock.sha256"
want="$(sha256sum "$js/package-lock.json" | awk '{print $1}')"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
    && [ -x "$js/node_modules/.bin/componentize-js" ]; then
    echo "guest-toolchains: $js/node_modules already matches package-lock.json"
else
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        echo "guest-toolchains: node and npm are missing (needed for componentize-js)" >&2
        exit 1
    fi
    major="$(node -p 'process.versions.node.split(".")[0]')"
    if [ "$major" -lt 20 ]; then
        echo "guest-toolchains: node $(node --version) is too old; componentize-js needs 20+" >&2
        exit 1
    fi
    echo "guest-toolchains: npm ci in $js"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi
