"""The reference child runtime's own per-child cost, for `--bench children`.

Usage: python3 children.py REFERENCE_DIR CHILDREN BATCHES

REFERENCE_DIR is the reference's `loopx_explore/` directory (its parent
goes on `sys.path`, so the package's relative imports resolve). Captures one
replay point with an in-process no-op adapter (fixed digest, one passing
check, thread-safe leases, allow-everything risk policy; no isolation, no
copies) and an in-memory agent-state store, then runs BATCHES child groups
of CHILDREN tasks each through `run_child_group_settled_from`, serially and
with `parallel=True, max_workers=2` (interleaved, after one warm-up group
each), each group timed with `time.perf_counter`. Prints one JSON line:
{"children": N, "batches": B, "serial_us": [...], "parallel_us": [...]},
the per-child microseconds (group wall / children) of every timed group.
"""

import json
import sys
import time
from pathlib import Path

from noop_replay import noop_replay



def main() -> None:
    reference_dir = Path(sys.argv[1]).resolve()
    children, batches = int(sys.argv[2]), int(sys.argv[3])
    sys.path.insert(0, str(reference_dir.parent))
    package = reference_dir.name
    replay = __import__(f"{package}.replay_runtime", fromlist=["*"])
    trace = __import__(f"{package}.trace_runtime", fromlist=["*"])
    NoopAdapter, AgentStates, fidelity = noop_replay(replay)

    registry = replay.ReplayPointRegistry()
    log = trace.TraceLog("bench-trace", "main")
    cursor = trace.AgentCursor(history_index=0, history_digest="h", context_digest="c")
    point = registry.capture_at_head(
        log, cursor, agent_state_store=AgentStates(), adapter=NoopAdapter()
    )

    def record(context):
        return {"observation_keys": ["k"], "accepted": True}

    tasks = [
        replay.ReplayChildTask(
            child_id=f"v{k:02}",
            target_branch_id=f"v{k:02}",
            minimum_fidelity=fidelity,
            execute=record,
            intent={"spec_id": f"v{k:02}"},
        )
        for k in range(children)
    ]

    def group(parallel: bool) -> float:
        started = time.perf_counter()
        results = registry.run_child_group_settled_from(
            point.replay_point_id, tasks, parallel=parallel, max_workers=2
        )
        seconds = time.perf_counter() - started
        assert len(results) == children
        assert all(r.outcome is not None for r in results)
        return seconds * 1e6 / children

    group(False)
    group(True)
    serial, parallel = [], []
    for _ in range(batches):
        serial.append(group(False))
        parallel.append(group(True))
    print(
        json.dumps(
            {
                "children": children,
                "batches": batches,
                "serial_us": serial,
                "parallel_us": parallel,
            }
        )
    )


if __name__ == "__main__":
    main()
