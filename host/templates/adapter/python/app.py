"""{{name}}: a sandloop adapter in Python.

World `plain` of `wit/adapter.wit`: the component exports one interface,
`sandloop:adapter/episode@0.2.0`, with one function, `execute`. The host
calls it once per work item -- a JSON object such as
`{"item_id": "a", "text": "some words"}`, one line of items.jsonl -- and
expects an observation record back (a JSON object).

componentize-py generates the `wit_world` package from the WIT while it
builds (`build.sh`); each exported interface is a class of this module
named after it (`Episode`), and a declared error is raised as
`Err(AdapterError(...))`. Any other exception makes the call trap: the
host records a `trap` error record that names the exception and the line
it came from (`app.py:42: KeyError: 'text'`, read from the traceback
componentize-py prints) and goes on with a fresh instance.
"""

import json
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.log import Level, log
from wit_world.imports.types import AdapterError, Context


class Episode(exports.Episode):
    """The adapter. It holds no state; every call gets one item."""

    def execute(self, item: str, ctx: Context) -> str:
        """Observe one item: which distinct words its `text` holds."""
        try:
            item = json.loads(item)
        except ValueError as error:
            raise invalid_item(f"item is not JSON: {error}") from None
        if not isinstance(item, dict):
            raise invalid_item("item is not a JSON object")
        item_id = item.get("item_id") if isinstance(item.get("item_id"), str) else "?"

        # A declared error: the host records it as an error record with
        # `adapter_error.type = "adapter_error"` and our `kind`, and the run
        # goes on with the next item.
        text = item.get("text")
        if not isinstance(text, str):
            raise invalid_item(f"item {item_id} has no `text`")

        # Log lines are captured per item into the run directory
        # (adapter-output/epoch-NNNN.jsonl). print() goes there too.
        log(Level.DEBUG, f"epoch {ctx.epoch}: item {item_id}, {len(text.encode())} bytes")

        # Observation keys are the novelty currency: the host credits every
        # key the run has not seen before.
        words = [word for word in re.split(r"[\W_]+", text) if word]
        keys = sorted({f"word:{word.lower()}" for word in words})

        # Any other field is the adapter's own and is kept in the record.
        record = {
            "observation_keys": keys,
            "accepted": True,
            "word_count": len(text.split()),
        }
        return json.dumps(record)


def invalid_item(message: str) -> Err:
    """An `adapter-error` for an item this adapter cannot run."""
    return Err(AdapterError(kind="invalid-item", message=message, retryable_infra_error=False))


# More protocols: other worlds of wit/adapter.wit export more interfaces.
# Set WORLD in build.sh to the world, then add one class per interface it
# exports, named after the interface. World `grouped` adds `episode-groups`
# (a seed's shared prefix prepared once, its variants run on it); world
# `explorer` adds `seeds` and `variants` on top (the adapter lists the seeds
# of each epoch and compiles catalog specs into variant items):
#
# from wit_world.exports import episode_groups
#
# class Seeds(exports.Seeds):
#     def list_seed_items(self, arm: str, epoch: int) -> list[str]:
#         # An empty list ends the run (stop_reason seed_queue_empty).
#         if epoch > 3:
#             return []
#         return [json.dumps({"item_id": f"e{epoch}-s1", "family": "f", "text": "a seed"})]
#
# class Variants(exports.Variants):
#     def compile_variant(self, spec: str, seed: str) -> str:
#         spec, seed = json.loads(spec), json.loads(seed)
#         return json.dumps({
#             "item_id": f"{seed['item_id']}~{spec['spec_id']}",
#             "family": seed["family"],
#             "text": seed["text"] + " " + spec.get("append", ""),
#             "is_variant": True,
#             "seed_item_id": seed["item_id"],
#             "variant_spec": spec,
#         })
#
# class Group:  # any Python object can be the `episode-group` resource
#     def __init__(self, seed):
#         self.seed = seed
#
# class EpisodeGroups(exports.EpisodeGroups):
#     def prepare_episode_group(self, seed: str, items: list[str], ctx):
#         # Do the expensive shared work once; return None to opt out.
#         prefix = json.dumps({"observation_keys": ["prefix"], "accepted": True})
#         return episode_groups.Prepared(group=Group(json.loads(seed)), prefix_record=prefix, checkpoint_ref=None)
#
#     def execute_episode(self, group: Group, item: str, ctx) -> str:
#         return Episode().execute(item, ctx)
#
#     def release_episode_group(self, group: Group, ctx) -> None:
#         pass
