"""The reference runtime's own per-item cost, for `--bench per_item`.

Usage: python3 per_item.py REFERENCE_DIR ITEMS.jsonl

REFERENCE_DIR holds the reference's `episode_runtime.py`
(`loopx_explore/`). Runs the reference's episode runtime in-process over
the items with a no-op adapter (the same records the bench's no-op
component returns) and no I/O: `build_episode_execution_units`, then
`execute_episode_group` per unit, then `summarize_execution_records`,
timed together with `time.perf_counter`. Prints one JSON line:
{"items": N, "records": M, "seconds": S}.
"""

import json
import sys
import time
from pathlib import Path


def main() -> None:
    reference_dir, items_path = sys.argv[1], sys.argv[2]
    sys.path.insert(0, reference_dir)
    import episode_runtime as runtime  # noqa: E402  (the reference module)

    items = [json.loads(line) for line in Path(items_path).read_text().splitlines() if line]

    class NoopAdapter:
        def execute(self, item, **context):
            return {"observation_keys": ["k"], "accepted": True}

        def prepare_episode_group(self, seed, items, **context):
            return {
                "handle": None,
                "prefix_record": {"observation_keys": ["k"], "accepted": True},
            }

        def execute_episode(self, handle, item, **context):
            return {"observation_keys": ["k"], "accepted": True}

        def release_episode_group(self, handle, **context):
            return None

    def error_record(item, error, *, duration_minutes):
        return {
            "item_id": item.get("item_id"),
            "adapter_error": {"type": type(error).__name__, "message": str(error)},
            "duration_minutes": duration_minutes,
        }

    adapter = NoopAdapter()
    started = time.perf_counter()
    units = runtime.build_episode_execution_units(items, arm="main", epoch=1)
    records = []
    for unit in units:
        records.extend(
            runtime.execute_episode_group(
                unit,
                adapter=adapter,
                failure_policy="record",
                fatal_failure_policy="fatal",
                error_record_factory=error_record,
                run_root=Path("."),
                arm="main",
                epoch=1,
                branch_id="lane-0",
            )
        )
    runtime.summarize_execution_records(records)
    seconds = time.perf_counter() - started
    print(json.dumps({"items": len(items), "records": len(records), "seconds": seconds}))


if __name__ == "__main__":
    main()
