// ledger: examples/counterfactual (ledger-import) in JavaScript.
//
// World `counterfactual-fixes` of `wit/adapter.wit`: exports `episode`,
// `seeds`, `variants`, `episode-groups`, `replay`, `replay-children`,
// `child-risk` and `counterfactual`; imports `log` and `trace`. Built into a
// component with componentize-js (see build.sh), with the ledgers of
// examples/counterfactual/data/ as the generated module `ledger-data.js`.
//
// Each seed is a small CSV ledger; preparing its episode group parses it
// once (the shared prefix, captured as an exact replay point by
// sandloop-replay.js), and the suffix imports it, checking `header-valid`,
// `dates-valid`, `rows-kept`, `amounts-parse` and `totals-balance` in that
// order, with one `validation` trace event each. The default importer does
// not read `1,250.00`, so the run's `2024-q2` import fails at
// `amounts-parse`.
//
// `sandloop counterfactual` then runs each candidate as an isolated child of
// the point before the failure (`runChange`) with its `public_change_set`
// applied (`amount_format`, `on_bad_amount`). A candidate whose
// `target_branch_id` starts with `rebuild/` has its prefix rebuilt from the
// source text instead of restored from the captured rows (the `rebuild`
// option): best effort and not compared, so the host only observes it. The
// change-scope risk policy denies a change set of more than two settings.
//
// The Rust example (examples/counterfactual/src/) and
// examples/python-adapter/ledger.py are the same adapter: keep the three in
// step.

import { log } from 'sandloop:adapter/log@0.2.0';
import { emit as traceEmit } from 'sandloop:adapter/trace@0.2.0';
import { DATASETS } from './ledger-data.js';
import {
  allow,
  childRiskExport,
  counterfactualExport,
  declared,
  deny,
  guard,
  outcome,
  registerGroup,
  replayChildrenExport,
  replayExport,
} from './sandloop-replay.js';

const CHANGE_SCOPE_POLICY = 'change-scope';
const MAX_CHANGES = 2;
const REBUILD_PREFIX = 'rebuild/';

const toJson = (value) => JSON.stringify(value);

/** Append a public trace event; a refusal is not fatal. */
function emit(kind, payload) {
  try {
    traceEmit({ kind, publicPayload: toJson(payload), actionId: undefined, causationId: undefined });
  } catch (refused) {
    log('debug', `trace event refused: ${refused.payload ?? refused}`);
  }
}

function parseItem(text) {
  let item;
  try {
    item = JSON.parse(text);
  } catch {
    throw declared('invalid-item', 'item is not JSON');
  }
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    throw declared('invalid-item', 'item must be a JSON object');
  }
  return item;
}

function itemText(item) {
  if (typeof item.text !== 'string') throw declared('invalid-item', 'item has no text');
  return item.text;
}

// ------------------------------------------------------------------ ledger

/** Split one CSV line into fields; `"..."` quotes a field with commas. */
function fields(line) {
  const out = [];
  let field = '';
  let quoted = false;
  for (const c of line) {
    if (c === '"') quoted = !quoted;
    else if (c === ',' && !quoted) {
      out.push(field);
      field = '';
    } else field += c;
  }
  out.push(field);
  return out;
}

/**
 * The ledger state of `source`: a header line, data rows (date, account,
 * amount, as written), an optional final `TOTAL,,AMOUNT` line, and the
 * source itself (kept so a prefix can be rebuilt). JSON data: it is the
 * group's replay state.
 */
function parseLedger(source) {
  const lines = source
    .split('\n')
    .map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line))
    .filter((line) => line.trim() !== '');
  if (lines.length === 0) throw declared('invalid-item', 'empty ledger');
  const rows = [];
  let total = null;
  lines.slice(1).forEach((line, index) => {
    const cells = fields(line);
    if (cells.length !== 3) {
      throw declared(
        'invalid-item',
        `line ${index + 2}: expected 3 fields, found ${cells.length}`,
      );
    }
    if (cells[0] === 'TOTAL') total = cells[2];
    else rows.push(cells);
  });
  return { header: fields(lines[0]), rows, total, source };
}

/**
 * The importer settings a change set asks for; unknown keys or values are
 * `invalid-change-set`.
 */
function settingsOf(change) {
  const settings = { thousandsSeparator: false, dropBadRows: false };
  for (const [key, value] of Object.entries(change)) {
    if (key === 'amount_format' && (value === 'plain' || value === 'thousands-separator')) {
      settings.thousandsSeparator = value === 'thousands-separator';
    } else if (key === 'on_bad_amount' && (value === 'fail' || value === 'drop-row')) {
      settings.dropBadRows = value === 'drop-row';
    } else {
      throw declared(
        'invalid-change-set',
        `unknown change ${key}=${toJson(value)}; known: amount_format ` +
          'plain|thousands-separator, on_bad_amount fail|drop-row',
      );
    }
  }
  return settings;
}

const DEFAULT_SETTINGS = settingsOf({});
const DIGITS = /^[0-9]+$/;

/** An amount in cents, or null when it does not read. */
function cents(amount, settings) {
  const text = settings.thousandsSeparator ? amount.split(',').join('') : amount;
  const dot = text.indexOf('.');
  const whole = dot < 0 ? text : text.slice(0, dot);
  const fraction = dot < 0 ? '00' : text.slice(dot + 1);
  if (!DIGITS.test(whole) || fraction.length !== 2 || !DIGITS.test(fraction)) return null;
  return Number(whole) * 100 + Number(fraction);
}

const isDate = (text) => /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(text);

/**
 * Import `ledger` under `settings`: the outcome of each target, in the order
 * checked, the rows imported and their total in cents.
 */
function importLedger(ledger, settings) {
  const { header, rows, total } = ledger;
  const outcomes = [];
  const headerOk = header.length === 3 && header[0] === 'date' && header[1] === 'account' &&
    header[2] === 'amount';
  outcomes.push(outcome('header-valid', headerOk, `header is ${header.join(',')}`));
  const badDates = rows.filter((row) => !isDate(row[0])).length;
  outcomes.push(
    outcome('dates-valid', badDates === 0, `${badDates} of ${rows.length} dates do not read`),
  );
  const read = rows.map((row) => cents(row[2], settings));
  const unreadable = rows.filter((row, index) => read[index] === null).map((row) => row[2]);
  const kept = settings.dropBadRows ? rows.length - unreadable.length : rows.length;
  outcomes.push(outcome('rows-kept', kept === rows.length, `${kept} of ${rows.length} rows imported`));
  const parseOk = unreadable.length === 0 || settings.dropBadRows;
  const summary =
    unreadable.length === 0
      ? 'every amount reads'
      : `amounts that do not read: ${unreadable.join('; ')}${settings.dropBadRows ? ' (dropped)' : ''}`;
  outcomes.push(outcome('amounts-parse', parseOk, summary));
  const totalCents = read.reduce((sum, value) => sum + (value ?? 0), 0);
  const declaredTotal = total === null ? null : cents(total, settings);
  if (parseOk) {
    const fraction = String(totalCents % 100).padStart(2, '0');
    outcomes.push(
      outcome(
        'totals-balance',
        declaredTotal === totalCents,
        `imported total ${Math.floor(totalCents / 100)}.${fraction}, declared ${total ?? 'none'}`,
      ),
    );
  }
  return { outcomes, kept, totalCents };
}

/**
 * Import `ledger` as the run does (default settings), emitting one
 * `validation` event per target up to and including the first failure; a
 * failure fails the item (`import-failed`).
 */
function runImport(ledger, item) {
  const { outcomes, kept, totalCents } = importLedger(ledger, DEFAULT_SETTINGS);
  for (const result of outcomes) {
    emit('validation', {
      validation_id: result.validationId,
      passed: result.passed,
      summary: result.publicSummary,
    });
    if (!result.passed) {
      throw declared('import-failed', `${result.validationId} failed: ${result.publicSummary}`);
    }
  }
  const keys = [...new Set(ledger.rows.map((row) => `account:${row[1]}`))];
  return toJson({
    observation_keys: keys,
    ledger: item.item_id,
    imported_rows: kept,
    total_cents: totalCents,
  });
}

// ----------------------------------------------------------------- exports

export const episode = {
  execute: guard((itemJson, ctx) => {
    const item = parseItem(itemJson);
    return runImport(parseLedger(itemText(item)), item);
  }),
};

export const seeds = {
  listSeedItems: guard((arm, epoch) =>
    epoch !== 1
      ? []
      : DATASETS.map(([name, text]) => toJson({ item_id: name, family: 'ledger', text })),
  ),
};

export const variants = {
  compileVariant: guard((spec, seed) => {
    throw declared('unsupported', 'ledger-import has no variants');
  }),
};

/**
 * The prepared prefix: the parsed ledger. Its properties are the group's
 * replay state (sandloop-replay.js).
 */
class EpisodeGroup {
  constructor(ledger) {
    this.header = ledger.header;
    this.rows = ledger.rows;
    this.total = ledger.total;
    this.source = ledger.source;
  }
}

// componentize-js 0.23 (issue ComponentizeJS#221): a resource without
// methods is looked up as a global of the bindings' own realm (see
// adapter.js).
const bindingsGlobal = log.constructor('return globalThis')();
if (bindingsGlobal.EpisodeGroup === undefined) bindingsGlobal.EpisodeGroup = EpisodeGroup;

export const episodeGroups = {
  EpisodeGroup,

  prepareEpisodeGroup: guard((seedJson, items, ctx) => {
    const seed = parseItem(seedJson);
    const ledger = parseLedger(itemText(seed));
    emit('lifecycle', { stage: 'parsed', rows: ledger.rows.length });
    const group = new EpisodeGroup(ledger);
    registerGroup(ctx.executionGroupId, group);
    const record = { observation_keys: [`ledger:${seed.item_id}`], rows: ledger.rows.length };
    return { group, prefixRecord: toJson(record), checkpointRef: undefined };
  }),

  executeEpisode: guard((group, itemJson, ctx) => runImport(group, parseItem(itemJson))),

  releaseEpisodeGroup: guard((group, ctx) => {
    // componentize-js 0.23 keeps released groups in its handle map; drop
    // what this one holds.
    group.rows = null;
    group.source = null;
  }),
};

// How a suffix or child runs on the group's state, and the `rebuild/`
// branch rule; shared by the `replay` and `replay-children` exports.
const runSuffix = (state, itemJson, ctx) => runImport(state, parseItem(itemJson));
const rebuild = (state, targetBranchId) =>
  targetBranchId.startsWith(REBUILD_PREFIX) ? parseLedger(state.source) : undefined;

export const replay = replayExport(runSuffix, { rebuild });
export const replayChildren = replayChildrenExport(runSuffix, { rebuild });

export const childRisk = childRiskExport({
  // A change set may touch at most MAX_CHANGES settings; a plain task (no
  // change set) is always allowed.
  assessIntent: (state, intent) => {
    const change = intent.public_change_set;
    const changes =
      change !== null && typeof change === 'object' && !Array.isArray(change)
        ? Object.keys(change).length
        : 0;
    if (changes > MAX_CHANGES) {
      return deny(
        CHANGE_SCOPE_POLICY,
        `the change touches ${changes} settings; at most ${MAX_CHANGES} at once`,
      );
    }
    return allow(CHANGE_SCOPE_POLICY);
  },
  assessOutcome: () => allow(CHANGE_SCOPE_POLICY),
});

export const counterfactual = counterfactualExport((state, item, change, request, ctx) => {
  const { outcomes } = importLedger(state, settingsOf(change));
  for (const result of outcomes) {
    emit('validation', { validation_id: result.validationId, passed: result.passed });
  }
  return outcomes;
});
