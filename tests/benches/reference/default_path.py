"""The reference's cost per item on sandloop's default path, for `--bench per_item`.

Usage: python3 default_path.py REFERENCE_DIR ITEMS.jsonl

REFERENCE_DIR is the reference's `loopx_explore/` directory (its parent
goes on `sys.path`, so the package's relative imports resolve). Does with
the reference's own runtimes what `sandloop run` does by default for an
adapter that exports `replay` and `replay-children`: the items become
episode units (`build_episode_execution_units`); for each unit the group is
prepared (`prepare_episode_group`, the seed's record is its prefix record),
a replay point is captured at the head of the group's trace
(`ReplayPointRegistry.capture_at_head`), the variants run as one settled
child group from that point (`run_child_group_settled_from`, serial), the
point is released and the group too; each child's record is its outcome
with the item's id and the restore's figures; then
`summarize_execution_records` over every record. The adapter does no work:
every call returns a fixed value (the same records as the bench's no-op
component, one fixed digest, allow verdicts, thread-safe children); agent
state is an in-memory store of plain objects. No isolation, no copies, no
I/O: only the runtimes' own bookkeeping is timed, with
`time.perf_counter`. Prints one JSON line:
{"items": N, "records": M, "seconds": S}.
"""

import json
import sys
import time
from pathlib import Path

from noop_replay import noop_replay

RECORD = {"observation_keys": ["k"], "accepted": True}


def main() -> None:
    reference_dir = Path(sys.argv[1]).resolve()
    items_path = sys.argv[2]
    sys.path.insert(0, str(reference_dir.parent))
    package = reference_dir.name
    episode = __import__(f"{package}.episode_runtime", fromlist=["*"])
    replay = __import__(f"{package}.replay_runtime", fromlist=["*"])
    trace = __import__(f"{package}.trace_runtime", fromlist=["*"])
    NoopReplayAdapter, AgentStates, fidelity = noop_replay(replay)

    items = [json.loads(line) for line in Path(items_path).read_text().splitlines() if line]

    class NoopAdapter(NoopReplayAdapter):
        """The episode protocol too; every call returns a fixed value."""

        def prepare_episode_group(self, seed, items, **context):
            return {"handle": None, "prefix_record": dict(RECORD)}

        def release_episode_group(self, handle, **context):
            return None

    def run_child(context):
        return dict(RECORD)

    adapter = NoopAdapter()
    agent_states = AgentStates()
    registry = replay.ReplayPointRegistry()
    started = time.perf_counter()
    units = episode.build_episode_execution_units(items, arm="main", epoch=1)
    records = []
    for unit in units:
        seed, group_items = unit[episode._GROUP_SEED], unit[episode._GROUP_ITEMS]
        variants = group_items[1:]
        group = unit["execution_group_id"]
        prepared = adapter.prepare_episode_group(seed, group_items, arm="main", epoch=1)
        records.append({"item_id": seed["item_id"], **prepared["prefix_record"]})
        if not variants:
            adapter.release_episode_group(prepared["handle"])
            continue
        log = trace.TraceLog(group, "main")
        cursor = trace.AgentCursor(history_index=0, history_digest="h", context_digest="c")
        point = registry.capture_at_head(
            log, cursor, agent_state_store=agent_states, adapter=adapter
        )
        tasks = [
            replay.ReplayChildTask(
                child_id=variant["item_id"],
                target_branch_id=variant["item_id"],
                minimum_fidelity=fidelity,
                execute=run_child,
                intent=variant.get("variant_spec"),
            )
            for variant in variants
        ]
        results = registry.run_child_group_settled_from(point.replay_point_id, tasks)
        for variant, result in zip(variants, results):
            restore = result.restore
            records.append(
                {
                    "item_id": variant["item_id"],
                    **result.outcome,
                    "replay": {
                        "replay_point_id": restore.replay_point_id,
                        "achieved_fidelity": restore.achieved_fidelity.value,
                        "restore_minutes": restore.restore_minutes,
                        "equivalence_minutes": restore.equivalence_minutes,
                        "suffix_minutes": restore.suffix_minutes,
                        "isolated": result.isolated,
                    },
                }
            )
        registry.release(point.replay_point_id)
        adapter.release_episode_group(prepared["handle"])
    episode.summarize_execution_records(records)
    seconds = time.perf_counter() - started
    print(json.dumps({"items": len(items), "records": len(records), "seconds": seconds}))


if __name__ == "__main__":
    main()
