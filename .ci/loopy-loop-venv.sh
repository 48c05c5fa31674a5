#!/usr/bin/env bash
# Install pydantic, pinned, from PyPI into the virtualenv
# target/loopy-loop-venv, for the e2e test that validates `sandloop loop
# serve`'s answers with loopy-loop's own models
# (tests/fixtures/loopy_loop/; the test is in tests/tests/e2e/loops.rs).
#
# Idempotent: an installed pin is left alone. Needs python3 (3.11+, with
# venv); uses no network but PyPI.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/target/loopy-loop-venv"
pinned="2.11.7"
installed=""
if [ -x "$venv/bin/python" ]; then
    installed="$("$venv/bin/python" -c 'import pydantic; print(pydantic.VERSION)' 2>/dev/null || true)"
fi
if [ "$installed" = "$pinned" ]; then
    echo "loopy-loop-venv: pydantic $pinned already in $venv"
    exit 0
fi
if ! command -v python3 >/dev/null; then
    echo "loopy-loop-venv: python3 is missing (needed for the loopy-loop wire test)" >&2
    exit 1
fi
echo "loopy-loop-venv: installing pydantic $pinned into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pydantic==$pinned"
"$venv/bin/python" -c 'import pydantic; print("pydantic", pydantic.VERSION)'
