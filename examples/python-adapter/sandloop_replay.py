"""sandloop_replay: the `replay` interface for a Python adapter, generically.

An adapter of world `replayable` gets replay points, and snapshot forks of
its variants, from this module without writing any serialisation or fork
code. It wires the module in with two things:

1. In `prepare_episode_group`, register the prepared group under the
   call's execution group:

       sandloop_replay.register_group(ctx.execution_group_id, group)

2. Export the `replay` interface as a subclass of `sandloop_replay.Replay`
   that says how a suffix runs on a group's state (the same logic as
   `execute_episode`):

       class Replay(sandloop_replay.Replay):
           def run_suffix(self, state, item, ctx):
               return episode_record(parse_item(item), state["analysis"])

What the module does, function by function (the guest sdk's behaviour for
Rust adapters):

- The group's **state** is its public attributes: those it has when it is
  registered, without the names starting with `_` (componentize-py adds
  `handle` and `finalizer` to a resource object once it is returned to the
  host; they are not state), read at capture time. A registered dict or
  list is the state itself. It must be JSON data: dicts with string keys,
  lists, tuples, strings, ints, finite floats, booleans, None. Anything
  else (a set, an object) is the declared error `unserialisable-state`,
  naming where it sits.
- `capture-replay-state` finds the group registered under the request's
  `execution-group-id` (`unknown-group` otherwise) and keeps a deep copy
  of its state in the binding, with fidelity `exact` and the projection
  digest `sha256:<hex>` of the state's canonical JSON: keys sorted, no
  whitespace, non-ASCII characters as they are, numbers written as
  JavaScript writes them (`2.0` as `2`, `1e-05` as `0.00001`), so the
  same state has the same digest in `sandloop-replay.js`.
- `restore-replay-state` makes a working copy (a deep copy) for one
  suffix: `exact`, the copy's digest, prefix reused.
  `validate-replay-equivalence` digests the working copy again and
  compares it with the captured digest (one `state-digest` check).
  `run-replay-suffix` runs `run_suffix(working copy, item, ctx)`;
  `finalize-replay-suffix` drops the working copy;
  `release-replay-state` drops the captured state.
- `export-replay-state` gives the canonical JSON bytes;
  `import-replay-state` rebuilds a binding from them (tuples come back as
  lists, integral floats as ints), recomputing the digest.
- `binding-token` names the binding with a number kept in a module-level
  dict, and `resume-binding` gives a new handle on that binding: in a child
  instance made from a snapshot of this one, module globals are still
  there, resource handles are not.

Groups are held weakly where Python allows it (the resource owns the
group), so a released group does not stay in the registry.
"""

import hashlib
import json
import re
import weakref

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import replay as wit_replay
from wit_world.imports.types import (
    AdapterError,
    EquivalenceCheck,
    EquivalenceReport,
    Fidelity,
    RestoreReceipt,
)

# execution_group_id -> (a callable giving the registered group, or None
# once a weakly held group is gone; its state's attribute names, or None
# for a dict or list).
_GROUPS = {}
# binding token -> _Point, for resume-binding in snapshot children.
_BINDINGS = {}
_NEXT_TOKEN = [1]

# Deeper than this, a state is taken for a cycle.
_MAX_DEPTH = 256


def _declared(kind, message):
    return Err(AdapterError(kind=kind, message=message, retryable_infra_error=False))


# ---------------------------------------------------------------- groups


def register_group(execution_group_id, group):
    """Make `group` capturable under `execution_group_id` (a prepare's
    `ctx.execution_group_id`; None registers nothing). A later group of the
    same id replaces it."""
    if execution_group_id is None:
        return
    names = None
    if not isinstance(group, (dict, list, tuple)):
        try:
            names = tuple(name for name in vars(group) if not name.startswith("_"))
        except TypeError:
            raise _declared(
                "unserialisable-state",
                f"the group is a {type(group).__name__} without attributes; register a dict or "
                "an object whose public attributes are its state",
            ) from None
    try:
        found = weakref.ref(group)
    except TypeError:  # dicts, lists: not weakly referenceable
        found = lambda: group  # noqa: E731
    _GROUPS[execution_group_id] = (found, names)


def _group(execution_group_id):
    """The group registered under `execution_group_id` and its state's
    attribute names."""
    found, names = _GROUPS.get(execution_group_id, (None, None))
    group = found() if found is not None else None
    if group is None:
        _GROUPS.pop(execution_group_id, None)
        raise _declared(
            "unknown-group",
            f"no episode group {json.dumps(execution_group_id, ensure_ascii=False)} is prepared "
            "in this instance; capture-replay-state needs the execution-group-id of an "
            "unreleased prepare-episode-group call",
        )
    return group, names


# ----------------------------------------------------------- JSON state


def _copy(value, path, depth=0):
    """A deep copy of `value`, which must be JSON data."""
    if depth > _MAX_DEPTH:
        raise _declared("unserialisable-state", f"{path} nests deeper than {_MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _declared("unserialisable-state", f"{path} is {value!r}, not a JSON number")
        return value
    if isinstance(value, list):
        return [_copy(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(_copy(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    if isinstance(value, dict):
        copied = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise _declared("unserialisable-state", f"{path} has a key {key!r} that is not a string")
            copied[key] = _copy(v, f"{path}.{key}", depth + 1)
        return copied
    raise _declared(
        "unserialisable-state",
        f"{path} is a {type(value).__name__}; replay state must be JSON data "
        "(dict, list, tuple, str, int, float, bool, None)",
    )


def state_of(group, names):
    """A deep copy of `group`'s state: its attributes `names`, or the value
    itself when it is a dict or list (`names` None)."""
    if names is None:
        return _copy(group, "state")
    attributes = vars(group)
    return _copy({name: attributes[name] for name in names if name in attributes}, "state")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _string(text):
    # json.dumps escapes what JSON.stringify escapes; a lone surrogate is
    # written as \\udxxx, as JSON.stringify writes it.
    return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), json.dumps(text, ensure_ascii=False))


def _number(value):
    """`value` as ECMAScript's Number::toString writes it (a float's
    shortest round-trip digits, the same in both languages)."""
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    # value = 0.DIGITS x 10^point
    point = len(whole) - (len(all_digits) - len(digits)) + (int(exponent) if exponent else 0)
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        text = digits + "0" * (point - k)
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        e = point - 1
        text = (digits if k == 1 else digits[0] + "." + digits[1:]) + ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + text


def canonical_json(value):
    """The canonical JSON text of JSON data: keys sorted (by code point),
    no whitespace, non-ASCII as it is, numbers as JavaScript writes them."""
    parts = []

    def write(value):
        if value is None:
            parts.append("null")
        elif value is True:
            parts.append("true")
        elif value is False:
            parts.append("false")
        elif isinstance(value, str):
            parts.append(_string(value))
        elif isinstance(value, (int, float)):
            parts.append(_number(value))
        elif isinstance(value, (list, tuple)):
            parts.append("[")
            for index, item in enumerate(value):
                if index:
                    parts.append(",")
                write(item)
            parts.append("]")
        else:
            parts.append("{")
            for index, key in enumerate(sorted(value)):
                if index:
                    parts.append(",")
                parts.append(_string(key))
                parts.append(":")
                write(value[key])
            parts.append("}")

    write(value)
    return "".join(parts)


def digest(value):
    """`sha256:<hex>` of the canonical JSON of `value` (JSON data)."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


# --------------------------------------------------------------- points


class _Point:
    """A replay point's state: the captured copy, its canonical text and
    digest, the working copy of the suffix in progress, its token."""

    def __init__(self, state):
        self.state = state
        self.canonical = canonical_json(state)
        self.digest = "sha256:" + hashlib.sha256(self.canonical.encode("utf-8")).hexdigest()
        self.working = None
        self.released = False
        self.token = _NEXT_TOKEN[0]
        _NEXT_TOKEN[0] += 1
        _BINDINGS[self.token] = self

    def release(self):
        _BINDINGS.pop(self.token, None)
        self.released = True
        self.state = None
        self.canonical = None
        self.working = None


class ReplayBinding:
    """The `replay-binding` resource: a handle on a point. A snapshot child
    gets a new one on the same point (`resume-binding`)."""

    def __init__(self, point):
        self.point = point


def _point(binding):
    point = binding.point
    if point.released:
        raise _declared("released", "the replay binding was released")
    return point


def _working(point):
    if point.working is None:
        raise _declared("not-restored", "restore-replay-state must run before this call")
    return point.working


def _lease(point):
    return wit_replay.StateLease(
        binding=ReplayBinding(point), fidelity=Fidelity.EXACT, projection_digest=point.digest
    )


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


class Replay(exports.Replay):
    """The `replay` export. Subclass it in the app module as `Replay` and
    define `run_suffix(self, state, item, ctx)`: run `item` (JSON text) on
    `state` (a working copy of the group's state) and return its record
    (JSON text), as `execute_episode` does on the group."""

    def run_suffix(self, state, item, ctx):
        raise _declared("unsupported", "the adapter's Replay class defines no run_suffix(state, item, ctx)")

    def capture_replay_state(self, request):
        group, names = _group(request.execution_group_id)
        return _lease(_Point(state_of(group, names)))

    def restore_replay_state(self, binding, request):
        point = _point(binding)
        point.working = _copy(point.state, "state")
        return RestoreReceipt(
            achieved_fidelity=Fidelity.EXACT,
            restored_projection_digest=digest(point.working),
            prefix_reused=True,
        )

    def validate_replay_equivalence(self, binding, receipt):
        point = _point(binding)
        observed = digest(_working(point))
        equal = observed == point.digest
        summary = (
            "restored state digest equals the captured digest"
            if equal
            else "restored state digest differs from the captured digest"
        )
        return EquivalenceReport(
            achieved_fidelity=Fidelity.EXACT,
            equivalent=equal,
            expected_digest=point.digest,
            observed_digest=observed,
            checks=[EquivalenceCheck(check_id="state-digest", passed=equal, public_summary=summary)],
            sanitized_reason=None,
        )

    def run_replay_suffix(self, binding, item, ctx):
        return self.run_suffix(_working(_point(binding)), item, ctx)

    def finalize_replay_suffix(self, binding, request, suffix_succeeded):
        binding.point.working = None

    def release_replay_state(self, binding):
        binding.point.release()

    def export_replay_state(self, binding):
        return _point(binding).canonical.encode("utf-8")

    def import_replay_state(self, state, request):
        try:
            value = json.loads(bytes(state).decode("utf-8"), parse_constant=_no_constant)
        except ValueError as error:
            raise _declared("invalid-state", f"replay state is not JSON: {error}") from None
        return _lease(_Point(_copy(value, "state")))

    def binding_token(self, binding):
        point = binding.point
        return None if point.released else point.token

    def resume_binding(self, token):
        point = _BINDINGS.get(token)
        if point is None:
            raise _declared(
                "unknown-binding",
                f"no replay binding has token {token} in this instance; resume-binding needs "
                "a token binding-token gave before the snapshot",
            )
        return ReplayBinding(point)
