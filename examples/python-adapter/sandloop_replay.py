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

An adapter of world `isolated` or `counterfactual-fixes` also subclasses,
as `ReplayChildren`, `ChildRisk` and `Counterfactual`, the classes of the
same names here (defined only when the world has those interfaces):

- `ReplayChildren`: `fork-replay-child` adopts the exported JSON state as
  the instance's child, kept by its `child-id`;
  `validate-replay-child-equivalence` compares the child's digest with the
  point's (one `state-digest` check); `run-replay-child` runs
  `run_child(state, task, ctx)`, by default `run_suffix`. Children are
  `thread-safe`.
- `rebuild(state, target_branch_id)`, a hook of `Replay` and
  `ReplayChildren`: None (the default) restores an exact copy; a value is a
  state rebuilt another way for that branch, restored `best_effort`
  without the prefix and reported unverified (the host never promotes it).
- `ChildRisk`: `assess_intent(state, intent)` and
  `assess_outcome(state, intent, outcome)` return `allow(policy_id)` or
  `deny(policy_id, reason)`; both allow by default (policy `allow-all`).
- `Counterfactual`: `run_change(state, item, change, request, ctx)` gets
  the child's state, the failed item and the parsed change set and returns
  one `outcome(validation_id, passed, summary)` per target, ids unique.

A child id not forked in the instance is `unknown-child`; an intent,
outcome, item or change set that is not a JSON object is
`invalid-intent`, `invalid-record`, `invalid-item` or `invalid-change-set`.
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

# The interfaces past `replay` exist only in the worlds that export them
# (`isolated`, `counterfactual-fixes`); in world `replayable` the classes
# that need them are not defined.
try:
    from wit_world.exports import replay_children as wit_children
except ImportError:
    wit_children = None
try:
    from wit_world.exports import child_risk as wit_risk
except ImportError:
    wit_risk = None
try:
    from wit_world.exports import counterfactual as wit_counterfactual
except ImportError:
    wit_counterfactual = None

# execution_group_id -> (a callable giving the registered group, or None
# once a weakly held group is gone; its state's attribute names, or None
# for a dict or list).
_GROUPS = {}
# binding token -> _Point, for resume-binding in snapshot children.
_BINDINGS = {}
# child id -> _Child, for the calls that name a child by id (child-risk,
# counterfactual).
_CHILDREN = {}
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


class _Restored:
    """A working copy of a point's state, and whether the adapter's
    `rebuild` hook made it (instead of a copy of the captured state)."""

    def __init__(self, state, rebuilt):
        self.state = state
        self.rebuilt = rebuilt


def _restore(hooks, captured, target_branch_id):
    """The working copy for a suffix or child on `target_branch_id`, and
    its receipt: an exact copy of `captured` (its digest, prefix reused),
    or what `hooks.rebuild` gives (best effort, prefix not reused)."""
    rebuilt = hooks.rebuild(_copy(captured, "state"), target_branch_id)
    if rebuilt is not None:
        receipt = RestoreReceipt(
            achieved_fidelity=Fidelity.BEST_EFFORT,
            restored_projection_digest=None,
            prefix_reused=False,
        )
        return _Restored(_copy(rebuilt, "rebuilt state"), True), receipt
    state = _copy(captured, "state")
    receipt = RestoreReceipt(
        achieved_fidelity=Fidelity.EXACT,
        restored_projection_digest=digest(state),
        prefix_reused=True,
    )
    return _Restored(state, False), receipt


def _equivalence(captured_digest, restored):
    """The equivalence report of `restored` against `captured_digest`: one
    `state-digest` check for a copy; best effort and unverified for a
    rebuilt state (it is not compared)."""
    if restored.rebuilt:
        return EquivalenceReport(
            achieved_fidelity=Fidelity.BEST_EFFORT,
            equivalent=False,
            expected_digest=captured_digest,
            observed_digest=None,
            checks=[],
            sanitized_reason="rebuilt by the adapter; not compared with the captured state",
        )
    observed = digest(restored.state)
    equal = observed == captured_digest
    summary = (
        "restored state digest equals the captured digest"
        if equal
        else "restored state digest differs from the captured digest"
    )
    return EquivalenceReport(
        achieved_fidelity=Fidelity.EXACT,
        equivalent=equal,
        expected_digest=captured_digest,
        observed_digest=observed,
        checks=[EquivalenceCheck(check_id="state-digest", passed=equal, public_summary=summary)],
        sanitized_reason=None,
    )


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


def _parse_state(state):
    """The JSON data of exported state bytes (`invalid-state` otherwise)."""
    try:
        value = json.loads(bytes(state).decode("utf-8"), parse_constant=_no_constant)
    except ValueError as error:
        raise _declared("invalid-state", f"replay state is not JSON: {error}") from None
    return _copy(value, "state")


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

    def rebuild(self, state, target_branch_id):
        """A hook: None (the default) restores an exact copy of the
        captured `state`; a value is a state rebuilt another way for the
        branch `target_branch_id` (best effort, not compared)."""
        return None

    def restore_replay_state(self, binding, request):
        point = _point(binding)
        point.working, receipt = _restore(self, point.state, request.target_branch_id)
        return receipt

    def validate_replay_equivalence(self, binding, receipt):
        point = _point(binding)
        return _equivalence(point.digest, _working(point))

    def run_replay_suffix(self, binding, item, ctx):
        return self.run_suffix(_working(_point(binding)).state, item, ctx)

    def finalize_replay_suffix(self, binding, request, suffix_succeeded):
        binding.point.working = None

    def release_replay_state(self, binding):
        binding.point.release()

    def export_replay_state(self, binding):
        return _point(binding).canonical.encode("utf-8")

    def import_replay_state(self, state, request):
        return _lease(_Point(_parse_state(state)))

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


# --------------------------------------------------------------- children


class _Child:
    """An isolated child: its working state (a `_Restored`), the captured
    point's digest, its id."""

    def __init__(self, child_id, restored, captured_digest):
        self.child_id = child_id
        self.restored = restored
        self.captured_digest = captured_digest
        self.released = False


class ReplayChild:
    """The `replay-child` resource: a handle on a child."""

    def __init__(self, child):
        self.child = child


def _live_child(handle):
    child = handle.child
    if child.released:
        raise _declared("released", "the replay child was released")
    return child


def child_state(child_id):
    """The working state of the child forked under `child_id` in this
    instance (`unknown-child` otherwise)."""
    child = _CHILDREN.get(child_id)
    if child is None or child.released:
        raise _declared(
            "unknown-child",
            f"no replay child {json.dumps(child_id, ensure_ascii=False)} was forked in this "
            "instance; child-risk and counterfactual calls need the child-id of the instance's "
            "fork-replay-child call",
        )
    return child.restored.state


def _parse_object(text, what, kind):
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        raise _declared(kind, f"{what} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise _declared(kind, f"{what} must be a JSON object")
    return value


if wit_children is not None:

    class ReplayChildren(exports.ReplayChildren):
        """The `replay-children` export. Subclass it in the app module as
        `ReplayChildren`; define `run_child(self, state, task, ctx)` (by
        default it calls `self.run_suffix(state, task, ctx)`, so a mixin
        that defines `run_suffix` serves both exports) and, optionally,
        `rebuild(self, state, target_branch_id)` as for `Replay`."""

        def rebuild(self, state, target_branch_id):
            return None

        def run_suffix(self, state, item, ctx):
            raise _declared(
                "unsupported",
                "the adapter's ReplayChildren class defines no run_child(state, task, ctx) "
                "or run_suffix(state, item, ctx)",
            )

        def run_child(self, state, task, ctx):
            return self.run_suffix(state, task, ctx)

        def fork_replay_child(self, state, request):
            captured = _parse_state(state)
            restored, receipt = _restore(self, captured, request.target_branch_id)
            child = _Child(request.child_id, restored, digest(captured))
            _CHILDREN[request.child_id] = child
            return wit_children.ChildLease(
                child=ReplayChild(child),
                receipt=receipt,
                concurrency=wit_children.ChildConcurrency.THREAD_SAFE,
            )

        def validate_replay_child_equivalence(self, child, receipt):
            child = _live_child(child)
            return _equivalence(child.captured_digest, child.restored)

        def run_replay_child(self, child, task, ctx):
            return self.run_child(_live_child(child).restored.state, task, ctx)

        def release_replay_child(self, child):
            child = child.child
            child.released = True
            child.restored = None
            if _CHILDREN.get(child.child_id) is child:
                del _CHILDREN[child.child_id]


if wit_risk is not None:

    def allow(policy_id, reason=None):
        """A risk assessment that lets the child go on."""
        return wit_risk.RiskAssessment(
            disposition=wit_risk.Disposition.ALLOW, policy_id=policy_id, sanitized_reason=reason
        )

    def deny(policy_id, reason):
        """A risk assessment that stops the child (public-safe `reason`)."""
        return wit_risk.RiskAssessment(
            disposition=wit_risk.Disposition.DENY, policy_id=policy_id, sanitized_reason=reason
        )

    class ChildRisk(exports.ChildRisk):
        """The `child-risk` export. Subclass it in the app module as
        `ChildRisk` and override either hook; both allow by default (policy
        `allow-all`). `assess_intent(self, state, intent)` and
        `assess_outcome(self, state, intent, outcome)` get the child's
        working state and the intent and outcome as dicts, and return
        `allow(policy_id)` or `deny(policy_id, reason)`."""

        def assess_intent(self, state, intent):
            return allow("allow-all")

        def assess_outcome(self, state, intent, outcome):
            return allow("allow-all")

        def assess_replay_child_intent(self, child_id, intent):
            state = child_state(child_id)
            return self.assess_intent(state, _parse_object(intent, "child intent", "invalid-intent"))

        def assess_replay_child_outcome(self, child_id, intent, outcome):
            state = child_state(child_id)
            intent = _parse_object(intent, "child intent", "invalid-intent")
            outcome = _parse_object(outcome, "child outcome", "invalid-record")
            return self.assess_outcome(state, intent, outcome)


if wit_counterfactual is not None:

    def outcome(validation_id, passed, summary=None):
        """One validation target's result (public-safe `summary`)."""
        return wit_counterfactual.ValidationOutcome(
            validation_id=validation_id, passed=passed, public_summary=summary
        )

    class Counterfactual(exports.Counterfactual):
        """The `counterfactual` export. Subclass it in the app module as
        `Counterfactual` and define `run_change(self, state, item, change,
        request, ctx)`: apply `change` (the candidate's public change set, a
        dict) and run `item` (the failed item, a dict) on `state` (the
        child's working state), returning one `outcome(...)` per validation
        target checked."""

        def run_change(self, state, item, change, request, ctx):
            raise _declared(
                "unsupported",
                "the adapter's Counterfactual class defines no "
                "run_change(state, item, change, request, ctx)",
            )

        def run_counterfactual(self, child_id, item, request, ctx):
            state = child_state(child_id)
            item = _parse_object(item, "item", "invalid-item")
            change = _parse_object(request.public_change_set, "counterfactual change set", "invalid-change-set")
            outcomes = list(self.run_change(state, item, change, request, ctx))
            seen = set()
            for index, result in enumerate(outcomes):
                if not isinstance(result, wit_counterfactual.ValidationOutcome):
                    raise _declared(
                        "invalid-outcome",
                        f"run_change result [{index}] is a {type(result).__name__}; "
                        "return sandloop_replay.outcome(validation_id, passed, summary)",
                    )
                if result.validation_id in seen:
                    raise _declared(
                        "invalid-outcome",
                        f"run_change result [{index}] repeats validation_id "
                        f"{json.dumps(result.validation_id, ensure_ascii=False)}",
                    )
                seen.add(result.validation_id)
            return outcomes
