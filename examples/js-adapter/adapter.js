// js-adapter: a full exploration adapter for sandloop, in JavaScript.
//
// World `replayable` of `wit/adapter.wit`: exports `episode`, `seeds`,
// `variants`, `episode-groups` and `replay`; imports `log` and `trace`.
// Built into a component with componentize-js (see build.sh).
//
// The same adapter as examples/python-adapter/app.py, line for line: the
// same input gives records with the same fields, values and observation
// keys. Keep the two in step. The domain is hello-adapter's: an item is a
// JSON object with `item_id`, `family` and `text`; its observation keys are
// the word-length buckets that occur in the text.
//
// - `execute(item)`: the record of one item, no group (`episode: standalone`).
// - `listSeedItems(arm, epoch)`: 4 generated seeds for epochs 1..=3
//   (families `short` and `long`), none afterwards (that ends the run).
// - `compileVariant(spec, seed)`: applies the spec's `ops` (or its top-level
//   `append`) to the seed's text; item id `{seed_item_id}~{spec_id}`, the
//   seed's family.
// - `prepareEpisodeGroup(seed, items)`: analyses the seed once (buckets,
//   vocabulary) and keeps it in the group; the prefix record reports it. A
//   seed with `"prepare": "none"` opts out (the host then calls `execute`).
// - `executeEpisode(group, item)`: the seed reports its text; a variant
//   reports its own text plus what changed against the prepared seed.
// - `replay` (sandloop-replay.js, generic): a replay point per prepared
//   group, and suffixes run on a copy of the group's state by the same code
//   as `executeEpisode`; the host can fork variants from a snapshot of the
//   instance. The group's state is JSON data for that, with app.py's field
//   names (`seed_id`, `word_count`), so both languages digest the same
//   state to the same text; the vocabulary is an array, not a Set.
//
// Faults, chosen by the item's `fault` field (hostile-adapter's `attack`
// names work too): `raise` (an uncaught exception: a trap), `error` (a
// declared adapter-error), `loop` (never returns: the per-call deadline),
// `memory` (allocates until the memory limit), `bad-json` (returns text
// that is not JSON); in `prepareEpisodeGroup` instead when the item also
// says `"fault_stage": "prepare"`.
//
// Conventions of componentize-js: an interface export is an object named
// after the interface in camelCase; a `result` export returns its ok value
// and throws its error value (here a plain `{kind, message,
// retryableInfraError}` object). Throwing anything else (an `Error`) makes
// the call trap.

import { log } from 'sandloop:adapter/log@0.2.0';
import { emit as traceEmit } from 'sandloop:adapter/trace@0.2.0';
import { registerGroup, replayExport } from './sandloop-replay.js';

const ADAPTER = 'js-adapter';

// Words are maximal runs of anything but ASCII whitespace, so Python and
// JavaScript split every text the same way.
const WHITESPACE = /[ \t\n\r\f\v]+/;

// Faults an item can ask for, with hostile-adapter's names as aliases.
const FAULTS = {
  raise: 'raise',
  error: 'error',
  loop: 'loop',
  memory: 'memory',
  'bad-json': 'bad-json',
  trap_execute: 'raise',
  declared_error: 'error',
  infinite_loop: 'loop',
  memory_bomb: 'memory',
  invalid_json: 'bad-json',
};

// Words the generated seeds are made of (lengths 1 to 13).
const VOCABULARY = [
  'a', 'an', 'the', 'of', 'sand', 'loop', 'seed', 'epoch', 'variant',
  'explorer', 'component', 'sandbox', 'deterministic', 'observation',
  'wasm', 'host', 'guest', 'trace', 'record', 'prefix', 'suffix',
  'novelty', 'ledger', 'queue',
];
const SEED_EPOCHS = 3;
const SEEDS_PER_EPOCH = 4;

// ------------------------------------------------------------------ helpers

/** A declared error: the host records it as `adapter_error` with `kind`. */
class AdapterError {
  constructor(kind, message, retryable = false) {
    this.kind = kind;
    this.message = message;
    this.retryableInfraError = retryable;
  }
}
const adapterError = (kind, message, retryable = false) =>
  new AdapterError(kind, message, retryable);

/**
 * Wrap an export: a declared error goes back to the host as the call's
 * `adapter-error`; anything else thrown is printed to stderr (the host keeps
 * it with the item) and rethrown, which makes the call trap.
 */
function guard(fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (err) {
      if (!(err instanceof AdapterError)) {
        console.error(`uncaught exception: ${err && err.stack ? `${err}\n${err.stack}` : err}`);
      }
      throw err;
    }
  };
}

const toJson = (value) => JSON.stringify(value);
const isObject = (value) =>
  value !== null && typeof value === 'object' && !Array.isArray(value);
const has = (object, key) => Object.prototype.hasOwnProperty.call(object, key);
/** A value as text: strings as they are, null as "", else its JSON. */
const str = (value) => {
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
};

function parseObject(text, what, kind) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw adapterError(kind, `${what} is not JSON`);
  }
  if (!isObject(value)) throw adapterError(kind, `${what} must be a JSON object`);
  return value;
}

const parseItem = (text) => parseObject(text, 'item', 'invalid-item');

/** The item's `text`: a string that is not blank, else `invalid-item`. */
function itemText(item) {
  const text = item.text;
  if (typeof text !== 'string') throw adapterError('invalid-item', 'item has no text');
  if (text.replace(/[ \t\n\r\f\v]/g, '') === '') {
    throw adapterError('invalid-item', 'item text is blank');
  }
  return text;
}

const wordsOf = (text) => text.split(WHITESPACE).filter((word) => word !== '');

/** Word-length buckets: 1, 2, 3, 4-5, 6-8, 9+ (hello-adapter's). */
function bucket(length) {
  if (length <= 1) return '1';
  if (length === 2) return '2';
  if (length === 3) return '3';
  if (length <= 5) return '4-5';
  if (length <= 8) return '6-8';
  return '9+';
}

/**
 * Observation keys, word count, vocabulary (distinct words); both arrays in
 * first occurrence order, so the analysis is JSON data that reads the same
 * in both languages (a replay point's state).
 */
function analyse(text) {
  const words = wordsOf(text);
  const keys = [];
  for (const word of words) {
    // Length in code points, as Python's len().
    const key = 'word_len:' + bucket([...word].length);
    if (!keys.includes(key)) keys.push(key);
  }
  return { keys, word_count: words.length, vocabulary: [...new Set(words)] };
}

function recordOf(analysis, episode) {
  const record = {
    observation_keys: [...analysis.keys],
    weighted_flags: {},
    accepted: true,
    word_count: analysis.word_count,
    episode,
  };
  // A rarer fact carries a weight (credited once per family).
  if (analysis.word_count > 50) record.weighted_flags.long_text = 2;
  return record;
}

/** Append a public trace event; a refusal is logged, never fatal. */
function emit(kind, payload) {
  const event = {
    kind,
    publicPayload: toJson({ ...payload, adapter: ADAPTER }),
    actionId: undefined,
    causationId: undefined,
  };
  try {
    traceEmit(event);
  } catch (refused) {
    log('debug', `trace event refused: ${refused.payload ?? refused}`);
  }
}

/** Misbehave as the item asks, if it asks for it at `stage`. */
function checkFault(item, stage) {
  const name = has(item, 'fault') ? item.fault : item.attack;
  if (name === undefined || name === null || name === 'none') return null;
  const fault = typeof name === 'string' && has(FAULTS, name) ? FAULTS[name] : undefined;
  if (fault === undefined) throw adapterError('invalid-item', `unknown fault ${JSON.stringify(name)}`);
  if ((has(item, 'fault_stage') ? item.fault_stage : 'execute') !== stage) return null;
  log('warn', `fault ${fault} at ${stage}`);
  switch (fault) {
    case 'raise':
      // An Error, not an adapter-error: the call traps.
      throw new Error('fault: raise');
    case 'error':
      throw adapterError('fault-declared', 'declared on purpose');
    case 'loop': {
      let spins = 0;
      for (;;) spins += 1;
    }
    case 'memory': {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
    case 'bad-json':
      return 'this is {not JSON';
  }
  return null;
}

/** Run `item`, on the seed `prepared` by a group when given. */
function episodeRecord(item, prepared = null) {
  const bad = checkFault(item, 'execute');
  if (bad !== null) return bad;
  const analysis = analyse(itemText(item));
  let record;
  let stage;
  if (prepared === null) {
    record = recordOf(analysis, 'standalone');
    stage = 'executed';
  } else if (item.is_variant) {
    record = variantRecord(analysis, item, prepared);
    stage = 'variant_executed';
  } else {
    record = recordOf(analysis, 'seed');
    stage = 'seed_executed';
  }
  log(
    'info',
    `${str(item.item_id)}: ${analysis.word_count} words, ${record.observation_keys.length} keys`,
  );
  emit('action-outcome', {
    stage,
    family: str(item.family),
    word_count: analysis.word_count,
    keys: record.observation_keys.length,
  });
  return toJson(record);
}

/** A variant's record: its own keys plus its delta against the seed. */
function variantRecord(analysis, item, prepared) {
  const spec = isObject(item.variant_spec) ? item.variant_spec : {};
  const specId = str(spec.spec_id);
  let prefix = spec.key_prefix;
  if (typeof prefix !== 'string' || prefix === '') prefix = `variant:${specId}:`;
  const record = recordOf(analysis, 'variant');
  const base = prepared.keys;
  const gained = analysis.keys.filter((key) => !base.includes(key));
  const lost = base.filter((key) => !analysis.keys.includes(key));
  for (const key of gained) record.observation_keys.push(`${prefix}gained:${key}`);
  for (const key of lost) record.observation_keys.push(`${prefix}lost:${key}`);
  let newWords = 0;
  const seedVocabulary = new Set(prepared.vocabulary);
  for (const word of analysis.vocabulary) if (!seedVocabulary.has(word)) newWords += 1;
  record.spec_id = specId;
  record.new_words = newWords;
  record.word_count_delta = analysis.word_count - prepared.word_count;
  if (gained.length > 0) record.weighted_flags.gained_bucket = 1.5;
  return record;
}

/** Apply a spec's ops to `text`; an unknown or malformed op is `invalid-spec`. */
function applyOps(ops, text) {
  for (let op of ops) {
    if (typeof op === 'string') op = { op };
    if (!isObject(op) || typeof op.op !== 'string') {
      throw adapterError('invalid-spec', 'an op must be a name or {"op": NAME, ...}');
    }
    const name = op.op;
    if (name === 'append' || name === 'prepend') {
      if (typeof op.text !== 'string') {
        throw adapterError('invalid-spec', `op ${name} needs a string text`);
      }
      text = name === 'append' ? `${text} ${op.text}` : `${op.text} ${text}`;
    } else if (name === 'upper') {
      // ASCII only, so both languages agree on every text.
      text = text.replace(/[a-z]/g, (c) => String.fromCharCode(c.charCodeAt(0) - 32));
    } else if (name === 'repeat') {
      const times = has(op, 'times') ? op.times : 2;
      if (!Number.isInteger(times) || times < 1 || times > 10) {
        throw adapterError('invalid-spec', 'op repeat needs times in 1..=10');
      }
      text = Array(times).fill(text).join(' ');
    } else {
      throw adapterError('invalid-spec', `unknown op ${JSON.stringify(name)}`);
    }
  }
  return text;
}

/** Seed `index` (1-based) of `epoch`: deterministic generated text. */
function seedItem(epoch, index) {
  const family = index % 2 === 0 ? 'long' : 'short';
  let state = epoch * 1000 + index;
  const count = family === 'long' ? 55 + (state % 16) : 6 + (state % 7);
  const words = [];
  for (let i = 0; i < count; i += 1) {
    state = (state * 48271) % 2147483647; // Park-Miller: below 2^53, exact
    words.push(VOCABULARY[state % VOCABULARY.length]);
  }
  return { item_id: `e${epoch}-s${index}`, family, text: words.join(' ') };
}

// ------------------------------------------------------------------ exports

export const episode = {
  execute: guard((item, ctx) => episodeRecord(parseItem(item))),
};

export const seeds = {
  listSeedItems: guard((arm, epoch) => {
    if (epoch < 1) throw adapterError('invalid-epoch', 'epochs are 1-based');
    const items = [];
    if (epoch <= SEED_EPOCHS) {
      for (let index = 1; index <= SEEDS_PER_EPOCH; index += 1) items.push(seedItem(epoch, index));
    }
    emit('lifecycle', { stage: 'seeds_listed', epoch, count: items.length });
    return items.map(toJson);
  }),
};

export const variants = {
  compileVariant: guard((specText, seedText) => {
    const spec = parseObject(specText, 'variant spec', 'invalid-spec');
    const seed = parseItem(seedText);
    const specId = spec.spec_id;
    if (typeof specId !== 'string' || specId === '') {
      throw adapterError('invalid-spec', 'spec has no spec_id');
    }
    const seedId = seed.item_id;
    if (typeof seedId !== 'string' || seedId === '') {
      throw adapterError('invalid-item', 'seed has no item_id');
    }
    let ops = has(spec, 'ops') ? spec.ops : [];
    if (!Array.isArray(ops)) throw adapterError('invalid-spec', 'ops must be a list');
    if (typeof spec.append === 'string') ops = [...ops, { op: 'append', text: spec.append }];
    const text = applyOps(ops, itemText(seed));
    let family = seed.family;
    if (typeof family !== 'string' || family === '') family = str(spec.seed_family);
    const item = {
      item_id: `${seedId}~${specId}`,
      family,
      text,
      is_variant: true,
      seed_item_id: seedId,
      variant_spec: spec,
    };
    // A spec can ask for a faulty variant.
    for (const key of ['fault', 'fault_stage']) if (has(spec, key)) item[key] = spec[key];
    return toJson(item);
  }),
};

/**
 * The prepared prefix: the seed's analysis, kept for its variants. Its
 * properties are JSON data: they are the state of the group's replay point
 * (sandloop-replay.js), named as in app.py.
 */
class EpisodeGroup {
  constructor(seedId, family, analysis) {
    this.seed_id = seedId;
    this.family = family;
    this.analysis = analysis;
  }
}

// componentize-js 0.23 (issue ComponentizeJS#221): a resource without
// methods, like `episode-group`, is looked up as a global of the bindings'
// own realm instead of on the exported interface object. Functions imported
// from the bindings belong to that realm, so its globalThis is reachable
// through their Function constructor. Runs once, at build time (Wizer).
const bindingsGlobal = log.constructor('return globalThis')();
if (bindingsGlobal.EpisodeGroup === undefined) bindingsGlobal.EpisodeGroup = EpisodeGroup;

export const episodeGroups = {
  EpisodeGroup,

  prepareEpisodeGroup: guard((seedText, items, ctx) => {
    const seed = parseItem(seedText);
    // The explicit opt-out: the host runs every item through `execute`.
    if (seed.prepare === 'none') return undefined;
    const bad = checkFault(seed, 'prepare');
    if (bad !== null) {
      return { group: new EpisodeGroup('', '', null), prefixRecord: bad, checkpointRef: undefined };
    }
    const analysis = analyse(itemText(seed));
    const family = str(seed.family);
    const record = recordOf(analysis, 'shared_prefix');
    record.vocabulary_size = analysis.vocabulary.length;
    record.episodes = items.length;
    emit('lifecycle', {
      stage: 'prepared',
      family,
      word_count: analysis.word_count,
      episodes: items.length,
    });
    const group = new EpisodeGroup(str(seed.item_id), family, analysis);
    registerGroup(ctx.executionGroupId, group);
    return { group, prefixRecord: toJson(record), checkpointRef: undefined };
  }),

  executeEpisode: guard((group, item, ctx) => episodeRecord(parseItem(item), group.analysis)),

  releaseEpisodeGroup: guard((group, ctx) => {
    emit('lifecycle', { stage: 'released', family: group.family });
    // componentize-js 0.23 keeps released groups in its handle map; drop
    // what this one holds so only an empty shell stays behind.
    group.analysis = null;
  }),
};

// Replay points and snapshot forks (sandloop-replay.js): a suffix runs on a
// copy of the group's state exactly as `executeEpisode` runs on the group.
// (The module prints an uncaught exception itself, as `guard` does.)
export const replay = replayExport((state, item, ctx) =>
  episodeRecord(parseItem(item), state.analysis),
);
