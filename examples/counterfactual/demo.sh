#!/bin/sh
# demo.sh OUT_DIR: a ledger import fails, and three candidate fixes are
# replayed from the replay point before the failure, each in its own
# sandbox. Their decisions: promoted, rejected, observed_only.
#
# Uses `sandloop` from PATH and the ledger-import component at
# $LEDGER_IMPORT_WASM (default: this repository's release build, built
# here when missing). Writes OUT_DIR/run (the run directory, with
# counterfactuals.jsonl) and OUT_DIR/hypothesis.json.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
out=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v sandloop >/dev/null 2>&1 || {
    echo "demo.sh: sandloop is not on PATH (cargo build --release -p sandloop; PATH=\$PWD/target/release:\$PATH)" >&2
    exit 2
}
wasm=${LEDGER_IMPORT_WASM:-$root/target/wasm32-wasip2/release/ledger_import.wasm}
if [ ! -f "$wasm" ]; then
    echo "building $wasm"
    (cd "$root" && cargo build --quiet --release --target wasm32-wasip2 -p ledger-import)
fi
if [ -e "$out/run" ]; then
    echo "demo.sh: $out/run exists; give a new OUT_DIR" >&2
    exit 2
fi
mkdir -p "$out"

echo "== 1. the run: three quarterly ledgers; 2024-q2 fails to import"
sandloop run --adapter "$wasm" --epochs 1 --out "$out/run"

# The failed item's first affected event: its amounts-parse validation,
# the fourth event of its branch (sequence 5, after the prefix's two).
group=$(grep '"item_id":"2024-q2"' "$out/run/records.jsonl" \
    | grep -o '"execution_group_id":"[^"]*"' | head -n 1 | cut -d '"' -f 4)
if [ -z "$group" ]; then
    echo "demo.sh: no record of 2024-q2 in $out/run/records.jsonl" >&2
    exit 1
fi

cat > "$out/hypothesis.json" <<JSON
{
  "hypothesis_id": "q2-thousands-separator",
  "item_id": "2024-q2",
  "first_affected_event_id": "$group/2024-q2/5",
  "first_affected_sequence": 5,
  "fix_set": [{"validation_id": "amounts-parse", "baseline_passed": false}],
  "guard_set": [
    {"validation_id": "header-valid", "baseline_passed": true},
    {"validation_id": "dates-valid", "baseline_passed": true},
    {"validation_id": "rows-kept", "baseline_passed": true}
  ],
  "candidates": [
    {"candidate_id": "read-thousands-separators",
     "public_change_set": {"amount_format": "thousands-separator"}},
    {"candidate_id": "drop-unreadable-rows",
     "public_change_set": {"on_bad_amount": "drop-row"}},
    {"candidate_id": "reparse-with-separators",
     "target_branch_id": "rebuild/reparse-with-separators",
     "public_change_set": {"amount_format": "thousands-separator"}}
  ]
}
JSON

echo
echo "== 2. would a change have fixed it? (hypothesis: $out/hypothesis.json)"
sandloop counterfactual --run "$out/run" --hypothesis "$out/hypothesis.json"
