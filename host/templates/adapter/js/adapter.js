// {{name}}: a sandloop adapter in JavaScript.
//
// World `plain` of `wit/adapter.wit`: the component exports one interface,
// `sandloop:adapter/episode@0.2.0`, with one function, `execute`. The host
// calls it once per work item -- a JSON object such as
// `{"item_id": "a", "text": "some words"}`, one line of items.jsonl -- and
// expects an observation record back (a JSON object).
//
// componentize-js (build.sh) turns this ES module into the component: each
// exported interface is an exported object named after it in camelCase
// (`episode`), imports are modules named after the interface
// (`sandloop:adapter/log@0.2.0`). A function whose WIT result is
// `result<T, adapter-error>` returns T, or throws a
// `{kind, message, retryableInfraError}` object: a declared error. Throwing
// anything else (an Error) makes the call trap: the host records a `trap`
// error record and goes on with a fresh instance. Wrap every export in
// `guard` (below) so that the record says what was thrown and where
// (`adapter.js:42: TypeError: ...`): the engine itself prints nothing.

import { log } from 'sandloop:adapter/log@0.2.0';

export const episode = {
  /** Observe one item: which distinct words its `text` holds. */
  execute: guard((itemJson, ctx) => {
    let item;
    try {
      item = JSON.parse(itemJson);
    } catch (error) {
      throw invalidItem(`item is not JSON: ${error.message}`);
    }
    if (item === null || typeof item !== 'object' || Array.isArray(item)) {
      throw invalidItem('item is not a JSON object');
    }
    const itemId = typeof item.item_id === 'string' ? item.item_id : '?';

    // A declared error: the host records it as an error record with
    // `adapter_error.type = "adapter_error"` and our `kind`, and the run
    // goes on with the next item.
    const text = item.text;
    if (typeof text !== 'string') throw invalidItem(`item ${itemId} has no \`text\``);

    // Log lines are captured per item into the run directory
    // (adapter-output/epoch-NNNN.jsonl). console.log/error go there too.
    const bytes = new TextEncoder().encode(text).length;
    log('debug', `epoch ${ctx.epoch}: item ${itemId}, ${bytes} bytes`);

    // Observation keys are the novelty currency: the host credits every key
    // the run has not seen before.
    const words = wordsOf(text);
    const keys = [...new Set(words.map((word) => `word:${word.toLowerCase()}`))].sort(byCodePoint);

    // Any other field is the adapter's own and is kept in the record.
    const record = {
      observation_keys: keys,
      accepted: true,
      word_count: text.split(/\s+/).filter((word) => word !== '').length,
    };
    return JSON.stringify(record);
  }),
};

/**
 * Wrap an export: a declared error (an object with string `kind` and
 * `message`) goes back to the host as the call's `adapter-error`; anything
 * else thrown is printed to stderr as `uncaught exception: ` and its stack,
 * which the host reads into the error record, then rethrown (a trap).
 */
function guard(fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (err) {
      const declared =
        err !== null && typeof err === 'object' && typeof err.kind === 'string' &&
        typeof err.message === 'string';
      if (!declared) {
        console.error(`uncaught exception: ${err && err.stack ? `${err}\n${err.stack}` : err}`);
      }
      throw err;
    }
  };
}

/** An `adapter-error` for an item this adapter cannot run. */
function invalidItem(message) {
  return { kind: 'invalid-item', message, retryableInfraError: false };
}

/**
 * Runs of letters and digits. The engine's regular expressions have no
 * `\p{...}` classes, so a letter is an ASCII one, or any character that
 * has case (Latin, Greek, Cyrillic, ...), or a CJK or Hangul one.
 */
function wordsOf(text) {
  const words = [];
  let word = '';
  for (const c of text) {
    const letter =
      /[0-9A-Za-z]/.test(c) ||
      (c > '\u007f' &&
        (c.toLowerCase() !== c.toUpperCase() ||
          (c >= '\u3040' && c <= '\u9fff') ||
          (c >= '\uac00' && c <= '\ud7af')));
    if (letter) {
      word += c;
    } else if (word !== '') {
      words.push(word);
      word = '';
    }
  }
  if (word !== '') words.push(word);
  return words;
}

/** Order strings by code point (as Rust and Python do), not UTF-16 unit. */
function byCodePoint(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

// More protocols: other worlds of wit/adapter.wit export more interfaces.
// Set WORLD in build.sh to the world, then export one object per interface
// it exports. World `grouped` adds `episodeGroups` (a seed's shared prefix
// prepared once, its variants run on it); world `explorer` adds `seeds` and
// `variants` on top (the adapter lists the seeds of each epoch and compiles
// catalog specs into variant items):
//
// export const seeds = {
//   listSeedItems: guard((arm, epoch) => {
//     // An empty list ends the run (stop_reason seed_queue_empty).
//     if (epoch > 3) return [];
//     return [JSON.stringify({ item_id: `e${epoch}-s1`, family: 'f', text: 'a seed' })];
//   }),
// };
//
// export const variants = {
//   compileVariant: guard((specJson, seedJson) => {
//     const spec = JSON.parse(specJson);
//     const seed = JSON.parse(seedJson);
//     return JSON.stringify({
//       item_id: `${seed.item_id}~${spec.spec_id}`,
//       family: seed.family,
//       text: `${seed.text} ${spec.append ?? ''}`,
//       is_variant: true,
//       seed_item_id: seed.item_id,
//       variant_spec: spec,
//     });
//   }),
// };
//
// // The `episode-group` resource: a class, exported on the interface object.
// class EpisodeGroup {
//   constructor(seed) { this.seed = seed; }
// }
// // componentize-js 0.23 (issue ComponentizeJS#221) looks a resource without
// // methods up as a global of its bindings' realm; this line puts it there.
// log.constructor('return globalThis')().EpisodeGroup = EpisodeGroup;
//
// export const episodeGroups = {
//   EpisodeGroup,
//   prepareEpisodeGroup: guard((seedJson, items, ctx) => {
//     // Do the expensive shared work once; return undefined to opt out.
//     const prefixRecord = JSON.stringify({ observation_keys: ['prefix'], accepted: true });
//     return { group: new EpisodeGroup(JSON.parse(seedJson)), prefixRecord, checkpointRef: undefined };
//   }),
//   executeEpisode: guard((group, itemJson, ctx) => episode.execute(itemJson, ctx)),
//   releaseEpisodeGroup(group, ctx) {},
// };
