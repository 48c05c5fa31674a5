#!/usr/bin/env bash
# Install pydantic, httpx and PyYAML, pinned, from PyPI into the virtualenv
# target/loopy-loop-venv, for the e2e tests that validate `sandloop loop
# serve`'s answers with loopy-loop's own models and run loopy-loop's own
# worker against it (tests/fixtures/loopy_loop/; the tests are in
# tests/tests/e2e/loops.rs). pydantic is for models.py, httpx for worker.py,
# PyYAML for config.py.
#
# Idempotent: installed pins are left alone. Needs python3 (3.11+, with
# venv); uses no network but PyPI.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/target/loopy-loop-venv"
pins=("pydantic==2.11.7" "httpx==0.28.1" "PyYAML==6.0.3")
wanted="pydantic 2.11.7 httpx 0.28.1 yaml 6.0.3"
installed=""
if [ -x "$venv/bin/python" ]; then
    installed="$("$venv/bin/python" -c 'import pydantic, httpx, yaml; print("pydantic", pydantic.VERSION, "httpx", httpx.__version__, "yaml", yaml.__version__)' 2>/dev/null || true)"
fi
if [ "$installed" = "$wanted" ]; then
    echo "loopy-loop-venv: ${pins[*]} already in $venv"
    exit 0
fi
if ! command -v python3 >/dev/null; then
    echo "loopy-loop-venv: python3 is missing (needed for the loopy-loop wire tests)" >&2
    exit 1
fi
echo "loopy-loop-venv: installing ${pins[*]} into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -c 'import pydantic, httpx, yaml; print("pydantic", pydantic.VERSION, "httpx", httpx.__version__, "yaml", yaml.__version__)'
