#!/usr/bin/env bash
# Install the pinned guest toolchains that build the Python, JavaScript, C
# and Zig adapters (examples/python-adapter, examples/js-adapter,
# examples/c-adapter, examples/zig-adapter):
#
# - componentize-py, the version pinned in examples/python-adapter/requirements.txt,
#   from PyPI into the virtualenv target/guest-toolchains/venv;
# - componentize-js, jco and preview2-shim, from the npm registry into
#   examples/js-adapter/node_modules, exactly as package-lock.json says (npm ci);
# - clang-19, lld-19, the wasm32 compiler runtime and wasi-libc from Debian
#   (apt-get, only when missing; it needs root);
# - wasm-tools and Zig, the versions pinned in guest-sdk/c/requirements.txt,
#   from PyPI into the same virtualenv;
# - the WASI preview-1 reactor adapter (wasi-preview1-component-adapter-provider
#   48.0.8 from crates.io, checked against its sha256) into
#   target/guest-toolchains/.
#
# Idempotent: a toolchain already installed at the pinned version is left
# alone, so a second call takes well under a second. Needs python3 (with
# venv), node 20+ with npm, and curl; uses no network but the registries
# (PyPI, npm, Debian's apt, crates.io).
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

# ---- C and Zig: clang-19 + wasi-libc (apt), wasm-tools + zig (PyPI) -----------
# libclang-rt-19-dev is the native sanitizer runtime: the e2e suite runs
# guest-sdk/c's own tests natively under ASan and UBSan (clang-19 only
# recommends it, and recommends are not installed here).
packages=(clang-19 lld-19 libclang-rt-19-dev-wasm32 libclang-rt-19-dev wasi-libc)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "guest-toolchains: ${packages[*]} already installed"
else
    echo "guest-toolchains: apt-get install ${missing[*]}"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
        || { $sudo apt-get update >/dev/null \
            && $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi

c_requirements="$repo/guest-sdk/c/requirements.txt"
c_stamp="$venv/.sandloop-c-requirements.sha256"
c_want="$(sha256sum "$c_requirements" | awk '{print $1}')"
if [ -f "$c_stamp" ] && [ "$(cat "$c_stamp")" = "$c_want" ] && [ -x "$venv/bin/wasm-tools" ]; then
    echo "guest-toolchains: wasm-tools and zig already in $venv"
else
    echo "guest-toolchains: installing wasm-tools and zig into $venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --requirement "$c_requirements"
    "$venv/bin/wasm-tools" --version
    echo "zig $("$venv/bin/python" -m ziglang version)"
    echo "$c_want" >"$c_stamp"
fi

reactor="$repo/target/guest-toolchains/wasi_snapshot_preview1.reactor.wasm"
reactor_sha256="134b86dc09c6b62077f2307b96fa8b83b94dc86737bc705ac3dbe27cb107b1f9"
if [ -f "$reactor" ] && [ "$(sha256sum "$reactor" | awk '{print $1}')" = "$reactor_sha256" ]; then
    echo "guest-toolchains: the WASI reactor adapter is already in $reactor"
else
    crate="wasi-preview1-component-adapter-provider-48.0.8"
    crate_sha256="d3a1674fffec103c1d4367d4417a3bd5423cde3cfd56ff3b326b5fc72c0a8ebd"
    scratch="$(mktemp -d)"
    echo "guest-toolchains: fetching $crate from crates.io"
    curl -sSfL -o "$scratch/$crate.crate" \
        "https://static.crates.io/crates/wasi-preview1-component-adapter-provider/$crate.crate"
    if [ "$(sha256sum "$scratch/$crate.crate" | awk '{print $1}')" != "$crate_sha256" ]; then
        echo "guest-toolchains: $crate.crate does not have the pinned sha256" >&2
        exit 1
    fi
    tar -xzf "$scratch/$crate.crate" -C "$scratch" "$crate/artefacts/wasi_snapshot_preview1.reactor.wasm"
    mkdir -p "$(dirname "$reactor")"
    mv "$scratch/$crate/artefacts/wasi_snapshot_preview1.reactor.wasm" "$reactor"
    rm -rf "$scratch"
fi
