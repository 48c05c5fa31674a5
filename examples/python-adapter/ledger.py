"""ledger: examples/counterfactual (ledger-import) in Python.

World `counterfactual-fixes` of `wit/adapter.wit`: exports `episode`,
`seeds`, `variants`, `episode-groups`, `replay`, `replay-children`,
`child-risk` and `counterfactual`; imports `log` and `trace`. Built into a
component with componentize-py (see build.sh), with the ledgers of
examples/counterfactual/data/ as the generated module `ledger_data`.

Each seed is a small CSV ledger; preparing its episode group parses it
once (the shared prefix, captured as an exact replay point by
sandloop_replay.py), and the suffix imports it, checking `header-valid`,
`dates-valid`, `rows-kept`, `amounts-parse` and `totals-balance` in that
order, with one `validation` trace event each. The default importer does
not read `1,250.00`, so the run's `2024-q2` import fails at
`amounts-parse`.

`sandloop counterfactual` then runs each candidate as an isolated child of
the point before the failure (`Counterfactual.run_change`) with its
`public_change_set` applied (`amount_format`, `on_bad_amount`). A
candidate whose `target_branch_id` starts with `rebuild/` has its prefix
rebuilt from the source text instead of restored from the captured rows
(the `rebuild` hook): best effort and not compared, so the host only
observes it. The change-scope risk policy denies a change set of more than
two settings.

The Rust example (examples/counterfactual/src/) and
examples/js-adapter/ledger.js are the same adapter: keep the three in step.
"""

import json

import sandloop_replay
from componentize_py_types import Err
from ledger_data import DATASETS
from wit_world import exports
from wit_world.exports import episode_groups
from wit_world.imports import trace as wit_trace
from wit_world.imports.types import AdapterError

ADAPTER = "python-ledger"
CHANGE_SCOPE_POLICY = "change-scope"
MAX_CHANGES = 2
REBUILD_PREFIX = "rebuild/"


def adapter_error(kind, message):
    return Err(AdapterError(kind=kind, message=message, retryable_infra_error=False))


def to_json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def emit(kind, payload):
    """Append a public trace event; a refusal is not fatal."""
    event = wit_trace.Event(kind=kind, public_payload=to_json(payload), action_id=None, causation_id=None)
    try:
        wit_trace.emit(event)
    except Err:
        pass


def parse_item(text):
    try:
        item = json.loads(text)
    except ValueError:
        raise adapter_error("invalid-item", "item is not JSON") from None
    if not isinstance(item, dict):
        raise adapter_error("invalid-item", "item must be a JSON object")
    return item


# ---------------------------------------------------------------- ledger


def fields(line):
    """Split one CSV line into fields; `"..."` quotes a field with commas."""
    out, field, quoted = [], [], False
    for c in line:
        if c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            out.append("".join(field))
            field = []
        else:
            field.append(c)
    out.append("".join(field))
    return out


def parse_ledger(source):
    """The ledger state of `source`: a header line, data rows (date,
    account, amount, as written), an optional final `TOTAL,,AMOUNT` line,
    and the source itself (kept so a prefix can be rebuilt). JSON data: it
    is the group's replay state."""
    lines = [line.removesuffix("\r") for line in source.split("\n")]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise adapter_error("invalid-item", "empty ledger")
    rows, total = [], None
    for index, line in enumerate(lines[1:]):
        cells = fields(line)
        if len(cells) != 3:
            raise adapter_error("invalid-item", f"line {index + 2}: expected 3 fields, found {len(cells)}")
        if cells[0] == "TOTAL":
            total = cells[2]
            continue
        rows.append(cells)
    return {"header": fields(lines[0]), "rows": rows, "total": total, "source": source}


def settings_of(change):
    """The importer settings a change set asks for; unknown keys or values
    are `invalid-change-set`."""
    settings = {"thousands_separator": False, "drop_bad_rows": False}
    for key, value in change.items():
        if key == "amount_format" and value in ("plain", "thousands-separator"):
            settings["thousands_separator"] = value == "thousands-separator"
        elif key == "on_bad_amount" and value in ("fail", "drop-row"):
            settings["drop_bad_rows"] = value == "drop-row"
        else:
            raise adapter_error(
                "invalid-change-set",
                f"unknown change {key}={to_json(value)}; known: amount_format "
                "plain|thousands-separator, on_bad_amount fail|drop-row",
            )
    return settings


DEFAULT_SETTINGS = settings_of({})


def cents(amount, settings):
    """An amount in cents, or None when it does not read."""
    text = amount.replace(",", "") if settings["thousands_separator"] else amount
    whole, dot, fraction = text.partition(".")
    if not dot:
        fraction = "00"
    digits = "0123456789"
    if (
        not whole
        or len(fraction) != 2
        or any(c not in digits for c in whole)
        or any(c not in digits for c in fraction)
    ):
        return None
    return int(whole) * 100 + int(fraction)


def is_date(text):
    return len(text) == 10 and all(
        c == "-" if i in (4, 7) else c in "0123456789" for i, c in enumerate(text)
    )


def import_ledger(ledger, settings):
    """Import `ledger` under `settings`: the outcome of each target, in the
    order checked, the rows imported and their total in cents."""
    outcomes = []
    header = ledger["header"]
    rows = ledger["rows"]
    outcomes.append(
        sandloop_replay.outcome("header-valid", header == ["date", "account", "amount"], f"header is {','.join(header)}")
    )
    bad_dates = sum(1 for row in rows if not is_date(row[0]))
    outcomes.append(sandloop_replay.outcome("dates-valid", bad_dates == 0, f"{bad_dates} of {len(rows)} dates do not read"))
    read = [cents(row[2], settings) for row in rows]
    unreadable = [row[2] for row, value in zip(rows, read) if value is None]
    kept = len(rows) - len(unreadable) if settings["drop_bad_rows"] else len(rows)
    outcomes.append(sandloop_replay.outcome("rows-kept", kept == len(rows), f"{kept} of {len(rows)} rows imported"))
    parse_ok = not unreadable or settings["drop_bad_rows"]
    if not unreadable:
        summary = "every amount reads"
    else:
        summary = f"amounts that do not read: {'; '.join(unreadable)}" + (
            " (dropped)" if settings["drop_bad_rows"] else ""
        )
    outcomes.append(sandloop_replay.outcome("amounts-parse", parse_ok, summary))
    total_cents = sum(value for value in read if value is not None)
    declared = cents(ledger["total"], settings) if ledger["total"] is not None else None
    if parse_ok:
        outcomes.append(
            sandloop_replay.outcome(
                "totals-balance",
                declared == total_cents,
                f"imported total {total_cents // 100}.{total_cents % 100:02d}, "
                f"declared {ledger['total'] if ledger['total'] is not None else 'none'}",
            )
        )
    return outcomes, kept, total_cents


def run_import(ledger, item):
    """Import `ledger` as the run does (default settings), emitting one
    `validation` event per target up to and including the first failure;
    a failure fails the item (`import-failed`)."""
    outcomes, kept, total_cents = import_ledger(ledger, DEFAULT_SETTINGS)
    for result in outcomes:
        emit(
            wit_trace.EventKind.VALIDATION,
            {"validation_id": result.validation_id, "passed": result.passed, "summary": result.public_summary},
        )
        if not result.passed:
            raise adapter_error("import-failed", f"{result.validation_id} failed: {result.public_summary}")
    keys = []
    for row in ledger["rows"]:
        key = f"account:{row[1]}"
        if key not in keys:
            keys.append(key)
    record = {
        "observation_keys": keys,
        "ledger": item.get("item_id"),
        "imported_rows": kept,
        "total_cents": total_cents,
    }
    return to_json(record)


# ---------------------------------------------------------------- exports


class Episode(exports.Episode):
    def execute(self, item, ctx):
        item = parse_item(item)
        return run_import(parse_ledger(item_text(item)), item)


def item_text(item):
    text = item.get("text")
    if not isinstance(text, str):
        raise adapter_error("invalid-item", "item has no text")
    return text


class Seeds(exports.Seeds):
    def list_seed_items(self, arm, epoch):
        if epoch != 1:
            return []
        return [to_json({"item_id": name, "family": "ledger", "text": text}) for name, text in DATASETS]


class Variants(exports.Variants):
    def compile_variant(self, spec, seed):
        raise adapter_error("unsupported", "ledger-import has no variants")


class LedgerGroup:
    """The prepared prefix: the parsed ledger. Its attributes are the
    group's replay state (sandloop_replay)."""

    def __init__(self, ledger):
        self.header = ledger["header"]
        self.rows = ledger["rows"]
        self.total = ledger["total"]
        self.source = ledger["source"]

    def ledger(self):
        return {"header": self.header, "rows": self.rows, "total": self.total, "source": self.source}


class EpisodeGroups(exports.EpisodeGroups):
    def prepare_episode_group(self, seed, items, ctx):
        seed = parse_item(seed)
        ledger = parse_ledger(item_text(seed))
        emit(wit_trace.EventKind.LIFECYCLE, {"stage": "parsed", "rows": len(ledger["rows"])})
        group = LedgerGroup(ledger)
        sandloop_replay.register_group(ctx.execution_group_id, group)
        record = {"observation_keys": [f"ledger:{seed.get('item_id')}"], "rows": len(ledger["rows"])}
        return episode_groups.Prepared(group=group, prefix_record=to_json(record), checkpoint_ref=None)

    def execute_episode(self, group, item, ctx):
        return run_import(group.ledger(), parse_item(item))

    def release_episode_group(self, group, ctx):
        pass


class LedgerState:
    """How a suffix or child runs on the group's state, and the `rebuild/`
    branch rule; shared by the `replay` and `replay-children` exports."""

    def run_suffix(self, state, item, ctx):
        return run_import(state, parse_item(item))

    def rebuild(self, state, target_branch_id):
        if target_branch_id.startswith(REBUILD_PREFIX):
            return parse_ledger(state["source"])
        return None


class Replay(LedgerState, sandloop_replay.Replay):
    pass


class ReplayChildren(LedgerState, sandloop_replay.ReplayChildren):
    pass


class ChildRisk(sandloop_replay.ChildRisk):
    def assess_intent(self, state, intent):
        """A change set may touch at most MAX_CHANGES settings; a plain task
        (no change set) is always allowed."""
        change = intent.get("public_change_set")
        changes = len(change) if isinstance(change, dict) else 0
        if changes > MAX_CHANGES:
            return sandloop_replay.deny(
                CHANGE_SCOPE_POLICY, f"the change touches {changes} settings; at most {MAX_CHANGES} at once"
            )
        return sandloop_replay.allow(CHANGE_SCOPE_POLICY)

    def assess_outcome(self, state, intent, outcome):
        return sandloop_replay.allow(CHANGE_SCOPE_POLICY)


class Counterfactual(sandloop_replay.Counterfactual):
    def run_change(self, state, item, change, request, ctx):
        outcomes, _, _ = import_ledger(state, settings_of(change))
        for result in outcomes:
            emit(wit_trace.EventKind.VALIDATION, {"validation_id": result.validation_id, "passed": result.passed})
        return outcomes
