"""python-adapter: a full exploration adapter for sandloop, in Python.

World `replayable` of `wit/adapter.wit`: exports `episode`, `seeds`,
`variants`, `episode-groups` and `replay`; imports `log` and `trace`. Built
into a component with componentize-py (see build.sh).

The domain is hello-adapter's: an item is a JSON object with `item_id`,
`family` and `text`; its observation keys are the word-length buckets that
occur in the text (`word_len:1`, `word_len:2`, `word_len:3`,
`word_len:4-5`, `word_len:6-8`, `word_len:9+`).

- `execute(item)`: the record of one item, no group (`episode: standalone`).
- `list_seed_items(arm, epoch)`: 4 generated seeds for epochs 1..=3
  (families `short` and `long`), none afterwards (that ends the run).
- `compile_variant(spec, seed)`: applies the spec's `ops` (or its top-level
  `append`) to the seed's text; item id `{seed_item_id}~{spec_id}`, the
  seed's family.
- `prepare_episode_group(seed, items)`: analyses the seed once (buckets,
  vocabulary) and keeps it in the group; the prefix record reports it. A
  seed with `"prepare": "none"` opts out (the host then calls `execute`).
- `execute_episode(group, item)`: the seed reports its text; a variant
  reports its own text plus what changed against the prepared seed
  (`{key_prefix}gained:word_len:*`, `{key_prefix}lost:word_len:*`,
  `new_words`).
- `replay` (sandloop_replay.py, generic): a replay point per prepared group,
  and suffixes run on a copy of the group's state by the same code as
  `execute_episode`; the host can fork variants from a snapshot of the
  instance. The group's state is JSON data for that (the vocabulary is a
  list, not a set).

Faults, chosen by the item's `fault` field (hostile-adapter's `attack`
names work too): `raise` (an uncaught exception: a trap), `error` (a
declared adapter-error), `loop` (never returns: the per-call deadline),
`memory` (allocates until the memory limit), `bad-json` (returns text that
is not JSON). They fire in `execute`/`execute-episode`, or in
`prepare-episode-group` when the item also says `"fault_stage": "prepare"`.

examples/js-adapter/adapter.js is the same adapter in JavaScript: the same
input gives records with the same fields, values and observation keys.
Keep the two in step.
"""

import json
import re

import sandloop_replay
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import episode_groups
from wit_world.imports import log as wit_log
from wit_world.imports import trace as wit_trace
from wit_world.imports.types import AdapterError

ADAPTER = "python-adapter"

# Words are maximal runs of anything but ASCII whitespace, so Python and
# JavaScript split every text the same way.
WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")

# Faults an item can ask for, with hostile-adapter's names as aliases.
FAULTS = {
    "raise": "raise",
    "error": "error",
    "loop": "loop",
    "memory": "memory",
    "bad-json": "bad-json",
    "trap_execute": "raise",
    "declared_error": "error",
    "infinite_loop": "loop",
    "memory_bomb": "memory",
    "invalid_json": "bad-json",
}

# Words the generated seeds are made of (lengths 1 to 13).
VOCABULARY = [
    "a", "an", "the", "of", "sand", "loop", "seed", "epoch", "variant",
    "explorer", "component", "sandbox", "deterministic", "observation",
    "wasm", "host", "guest", "trace", "record", "prefix", "suffix",
    "novelty", "ledger", "queue",
]
SEED_EPOCHS = 3
SEEDS_PER_EPOCH = 4


# ---------------------------------------------------------------- helpers


def adapter_error(kind, message, retryable=False):
    """A declared error: the host records it as `adapter_error` with `kind`."""
    return Err(AdapterError(kind=kind, message=message, retryable_infra_error=retryable))


def to_json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text_of(value):
    """A value as text: strings as they are, null as "", else its JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else to_json(value)


def parse_object(text, what, kind):
    try:
        value = json.loads(text)
    except ValueError:
        raise adapter_error(kind, f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise adapter_error(kind, f"{what} must be a JSON object")
    return value


def parse_item(text):
    return parse_object(text, "item", "invalid-item")


def item_text(item):
    """The item's `text`: a string that is not blank, else `invalid-item`."""
    text = item.get("text")
    if not isinstance(text, str):
        raise adapter_error("invalid-item", "item has no text")
    if not text.strip(" \t\n\r\f\v"):
        raise adapter_error("invalid-item", "item text is blank")
    return text


def words_of(text):
    return [word for word in WHITESPACE.split(text) if word]


def bucket(length):
    """Word-length buckets: 1, 2, 3, 4-5, 6-8, 9+ (hello-adapter's)."""
    if length <= 1:
        return "1"
    if length == 2:
        return "2"
    if length == 3:
        return "3"
    if length <= 5:
        return "4-5"
    if length <= 8:
        return "6-8"
    return "9+"


def analyse(text):
    """Observation keys, word count, vocabulary (distinct words); both
    lists in first occurrence order, so the analysis is JSON data that
    reads the same in both languages (a replay point's state)."""
    words = words_of(text)
    keys = []
    for word in words:
        key = "word_len:" + bucket(len(word))
        if key not in keys:
            keys.append(key)
    vocabulary = list(dict.fromkeys(words))
    return {"keys": keys, "word_count": len(words), "vocabulary": vocabulary}


def record_of(analysis, episode):
    record = {
        "observation_keys": list(analysis["keys"]),
        "weighted_flags": {},
        "accepted": True,
        "word_count": analysis["word_count"],
        "episode": episode,
    }
    # A rarer fact carries a weight (credited once per family).
    if analysis["word_count"] > 50:
        record["weighted_flags"]["long_text"] = 2
    return record


def emit(kind, payload):
    """Append a public trace event; a refusal is logged, never fatal."""
    payload = dict(payload, adapter=ADAPTER)
    event = wit_trace.Event(
        kind=kind, public_payload=to_json(payload), action_id=None, causation_id=None
    )
    try:
        wit_trace.emit(event)
    except Err as refused:
        wit_log.log(wit_log.Level.DEBUG, f"trace event refused: {refused.value}")


def check_fault(item, stage):
    """Misbehave as the item asks, if it asks for it at `stage`."""
    name = item.get("fault", item.get("attack"))
    if name is None or name == "none":
        return None
    fault = FAULTS.get(name) if isinstance(name, str) else None
    if fault is None:
        raise adapter_error("invalid-item", f"unknown fault {to_json(name)}")
    if item.get("fault_stage", "execute") != stage:
        return None
    wit_log.log(wit_log.Level.WARN, f"fault {fault} at {stage}")
    if fault == "raise":
        # Not an Err: componentize-py turns it into a trap.
        raise RuntimeError("fault: raise")
    if fault == "error":
        raise adapter_error("fault-declared", "declared on purpose")
    if fault == "loop":
        spins = 0
        while True:
            spins += 1
    if fault == "memory":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    if fault == "bad-json":
        return "this is {not JSON"
    return None


def episode_record(item, prepared=None):
    """Run `item`, on the seed `prepared` by a group when given."""
    bad = check_fault(item, "execute")
    if bad is not None:
        return bad
    text = item_text(item)
    analysis = analyse(text)
    if prepared is None:
        record = record_of(analysis, "standalone")
        stage = "executed"
    elif item.get("is_variant"):
        record = variant_record(analysis, item, prepared)
        stage = "variant_executed"
    else:
        record = record_of(analysis, "seed")
        stage = "seed_executed"
    wit_log.log(
        wit_log.Level.INFO,
        f"{text_of(item.get('item_id'))}: {analysis['word_count']} words, "
        f"{len(record['observation_keys'])} keys",
    )
    emit(
        wit_trace.EventKind.ACTION_OUTCOME,
        {
            "stage": stage,
            "family": text_of(item.get("family")),
            "word_count": analysis["word_count"],
            "keys": len(record["observation_keys"]),
        },
    )
    return to_json(record)


def variant_record(analysis, item, prepared):
    """A variant's record: its own keys plus its delta against the seed."""
    spec = item.get("variant_spec")
    if not isinstance(spec, dict):
        spec = {}
    spec_id = text_of(spec.get("spec_id"))
    prefix = spec.get("key_prefix")
    if not isinstance(prefix, str) or not prefix:
        prefix = f"variant:{spec_id}:"
    record = record_of(analysis, "variant")
    base = prepared["keys"]
    gained = [key for key in analysis["keys"] if key not in base]
    lost = [key for key in base if key not in analysis["keys"]]
    for key in gained:
        record["observation_keys"].append(f"{prefix}gained:{key}")
    for key in lost:
        record["observation_keys"].append(f"{prefix}lost:{key}")
    seed_vocabulary = set(prepared["vocabulary"])
    new_words = [word for word in analysis["vocabulary"] if word not in seed_vocabulary]
    record["spec_id"] = spec_id
    record["new_words"] = len(new_words)
    record["word_count_delta"] = analysis["word_count"] - prepared["word_count"]
    if gained:
        record["weighted_flags"]["gained_bucket"] = 1.5
    return record


def apply_ops(ops, text):
    """Apply a spec's ops to `text`; an unknown or malformed op is `invalid-spec`."""
    for op in ops:
        if isinstance(op, str):
            op = {"op": op}
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise adapter_error("invalid-spec", "an op must be a name or {\"op\": NAME, ...}")
        name = op["op"]
        if name in ("append", "prepend"):
            extra = op.get("text")
            if not isinstance(extra, str):
                raise adapter_error("invalid-spec", f"op {name} needs a string text")
            text = text + " " + extra if name == "append" else extra + " " + text
        elif name == "upper":
            # ASCII only, so both languages agree on every text.
            text = "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in text)
        elif name == "repeat":
            times = op.get("times", 2)
            if (
                isinstance(times, bool)
                or not isinstance(times, (int, float))
                or times != int(times)
                or not 1 <= times <= 10
            ):
                raise adapter_error("invalid-spec", "op repeat needs times in 1..=10")
            text = " ".join([text] * int(times))
        else:
            raise adapter_error("invalid-spec", f"unknown op {to_json(name)}")
    return text


def seed_item(epoch, index):
    """Seed `index` (1-based) of `epoch`: deterministic generated text."""
    family = "long" if index % 2 == 0 else "short"
    state = epoch * 1000 + index
    count = 55 + state % 16 if family == "long" else 6 + state % 7
    words = []
    for _ in range(count):
        state = state * 48271 % 2147483647  # Park-Miller: exact in JS too
        words.append(VOCABULARY[state % len(VOCABULARY)])
    return {"item_id": f"e{epoch}-s{index}", "family": family, "text": " ".join(words)}


# ---------------------------------------------------------------- exports


class Episode(exports.Episode):
    def execute(self, item, ctx):
        return episode_record(parse_item(item))


class Seeds(exports.Seeds):
    def list_seed_items(self, arm, epoch):
        if epoch < 1:
            raise adapter_error("invalid-epoch", "epochs are 1-based")
        if epoch > SEED_EPOCHS:
            items = []
        else:
            items = [seed_item(epoch, index) for index in range(1, SEEDS_PER_EPOCH + 1)]
        emit(wit_trace.EventKind.LIFECYCLE, {"stage": "seeds_listed", "epoch": epoch, "count": len(items)})
        return [to_json(item) for item in items]


class Variants(exports.Variants):
    def compile_variant(self, spec, seed):
        spec = parse_object(spec, "variant spec", "invalid-spec")
        seed = parse_item(seed)
        spec_id = spec.get("spec_id")
        if not isinstance(spec_id, str) or not spec_id:
            raise adapter_error("invalid-spec", "spec has no spec_id")
        seed_id = seed.get("item_id")
        if not isinstance(seed_id, str) or not seed_id:
            raise adapter_error("invalid-item", "seed has no item_id")
        ops = spec.get("ops", [])
        if not isinstance(ops, list):
            raise adapter_error("invalid-spec", "ops must be a list")
        if isinstance(spec.get("append"), str):
            ops = ops + [{"op": "append", "text": spec["append"]}]
        text = apply_ops(ops, item_text(seed))
        family = seed.get("family")
        if not isinstance(family, str) or not family:
            family = text_of(spec.get("seed_family"))
        item = {
            "item_id": f"{seed_id}~{spec_id}",
            "family": family,
            "text": text,
            "is_variant": True,
            "seed_item_id": seed_id,
            "variant_spec": spec,
        }
        # A spec can ask for a faulty variant.
        for key in ("fault", "fault_stage"):
            if key in spec:
                item[key] = spec[key]
        return to_json(item)


class WordGroup:
    """The prepared prefix: the seed's analysis, kept for its variants. Its
    attributes are JSON data: they are the state of the group's replay
    point (sandloop_replay)."""

    def __init__(self, seed_id, family, analysis):
        self.seed_id = seed_id
        self.family = family
        self.analysis = analysis


class EpisodeGroups(exports.EpisodeGroups):
    def prepare_episode_group(self, seed, items, ctx):
        seed = parse_item(seed)
        if seed.get("prepare") == "none":
            # The explicit opt-out: the host runs every item through `execute`.
            return None
        bad = check_fault(seed, "prepare")
        if bad is not None:
            return episode_groups.Prepared(group=WordGroup("", "", None), prefix_record=bad, checkpoint_ref=None)
        analysis = analyse(item_text(seed))
        family = text_of(seed.get("family"))
        record = record_of(analysis, "shared_prefix")
        record["vocabulary_size"] = len(analysis["vocabulary"])
        record["episodes"] = len(items)
        emit(
            wit_trace.EventKind.LIFECYCLE,
            {"stage": "prepared", "family": family, "word_count": analysis["word_count"], "episodes": len(items)},
        )
        group = WordGroup(text_of(seed.get("item_id")), family, analysis)
        sandloop_replay.register_group(ctx.execution_group_id, group)
        return episode_groups.Prepared(group=group, prefix_record=to_json(record), checkpoint_ref=None)

    def execute_episode(self, group, item, ctx):
        return episode_record(parse_item(item), group.analysis)

    def release_episode_group(self, group, ctx):
        emit(wit_trace.EventKind.LIFECYCLE, {"stage": "released", "family": group.family})
        group.analysis = None


class Replay(sandloop_replay.Replay):
    """Replay points and snapshot forks (sandloop_replay.py): a suffix runs
    on a copy of the group's state exactly as `execute_episode` runs on
    the group."""

    def run_suffix(self, state, item, ctx):
        return episode_record(parse_item(item), state["analysis"])
