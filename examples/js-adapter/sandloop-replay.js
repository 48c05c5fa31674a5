// sandloop-replay: the `replay` interface for a JavaScript adapter,
// generically.
//
// An adapter of world `replayable` gets replay points, and snapshot forks of
// its variants, from this module without writing any serialisation or fork
// code. It wires the module in with two things:
//
// 1. In `prepareEpisodeGroup`, register the prepared group under the call's
//    execution group:
//
//        registerGroup(ctx.executionGroupId, group);
//
// 2. Export the `replay` interface, saying how a suffix runs on a group's
//    state (the same logic as `executeEpisode`):
//
//        export const replay = replayExport(
//          (state, itemJson, ctx) => episodeRecord(parseItem(itemJson), state.analysis));
//
// What the module does, function by function (the guest sdk's behaviour for
// Rust adapters, and examples/python-adapter/sandloop_replay.py's):
//
// - The group's state is its own enumerable properties, without the names
//   starting with `_`, read at capture time (a registered plain object or
//   array is the state itself). It must be JSON data: plain objects, arrays,
//   strings, finite numbers, booleans, null (a property set to `undefined`
//   is left out, as JSON.stringify does). Anything else (a Set, a Map, a
//   class instance, a BigInt) is the declared error `unserialisable-state`,
//   naming where it sits.
// - `captureReplayState` finds the group registered under the request's
//   `executionGroupId` (`unknown-group` otherwise) and keeps a deep copy of
//   its state in the binding, with fidelity `exact` and the projection
//   digest `sha256:<hex>` of the state's canonical JSON: keys sorted by code
//   point, no whitespace, non-ASCII characters as they are — the same text,
//   so the same digest, as sandloop_replay.py gives for the same state.
//   componentize-js has no synchronous crypto, so SHA-256 is written out
//   below.
// - `restoreReplayState` makes a working copy (a deep copy) for one suffix:
//   `exact`, the copy's digest, prefix reused. `validateReplayEquivalence`
//   digests the working copy again and compares it with the captured digest
//   (one `state-digest` check). `runReplaySuffix` runs `runSuffix(working
//   copy, itemJson, ctx)`; `finalizeReplaySuffix` drops the working copy;
//   `releaseReplayState` drops the captured state.
// - `exportReplayState` gives the canonical JSON as UTF-8 bytes;
//   `importReplayState` rebuilds a binding from them, recomputing the digest.
// - `bindingToken` names the binding with a number kept in a module-level
//   map, and `resumeBinding` gives a new handle on that binding: in a child
//   instance made from a snapshot of this one, module globals are still
//   there, resource handles are not.
//
// Groups are held strongly, by execution group id: componentize-js 0.23
// keeps a released group in its handle map anyway (so an adapter empties a
// group at release), and a lane's instance lives for one epoch.
//
// An adapter of world `isolated` or `counterfactual-fixes` also exports
// `replayChildren = replayChildrenExport(runChild, {rebuild})`,
// `childRisk = childRiskExport({assessIntent, assessOutcome})` and
// `counterfactual = counterfactualExport(runChange)`, which behave as
// sandloop_replay.py's `ReplayChildren`, `ChildRisk` and `Counterfactual`:
// a child adopts the exported JSON state under its `childId` and is
// validated by digest; `rebuild(state, targetBranchId)` (also an option of
// `replayExport`) returns undefined for an exact copy or a state rebuilt
// another way, restored `best-effort` and reported unverified; the risk
// hooks return `allow(policyId)` or `deny(policyId, reason)` and allow by
// default (policy `allow-all`); `runChange(state, item, change, request,
// ctx)` returns one `outcome(validationId, passed, summary)` per target.

import { log } from 'sandloop:adapter/log@0.2.0';

/** execution group id -> the registered group. */
const groups = new Map();
/** binding token (as a string) -> point, for resumeBinding in snapshot children. */
const bindings = new Map();
let nextToken = 1;
/** child id -> child, for the calls that name a child by id (child-risk, counterfactual). */
const children = new Map();

/** Deeper than this, a state is taken for a cycle. */
const MAX_DEPTH = 256;

/** A declared error: the host records it as `adapter_error` with `kind`. */
class ReplayError {
  constructor(kind, message) {
    this.kind = kind;
    this.message = message;
    this.retryableInfraError = false;
  }
}
/** A declared error of `kind` (throw it): the call's `adapter-error`. */
export const declared = (kind, message) => new ReplayError(kind, message);

// ------------------------------------------------------------------ groups

/**
 * Make `group` capturable under `executionGroupId` (a prepare's
 * `ctx.executionGroupId`; undefined registers nothing). A later group of
 * the same id replaces it.
 */
export function registerGroup(executionGroupId, group) {
  if (executionGroupId === undefined || executionGroupId === null) return;
  groups.set(executionGroupId, group);
}

function groupOf(executionGroupId) {
  if (!groups.has(executionGroupId)) {
    throw declared(
      'unknown-group',
      `no episode group ${JSON.stringify(executionGroupId)} is prepared in this instance; ` +
        'capture-replay-state needs the execution-group-id of an unreleased ' +
        'prepare-episode-group call',
    );
  }
  return groups.get(executionGroupId);
}

// -------------------------------------------------------------- JSON state

const isPlainObject = (value) => {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
};

function typeName(value) {
  if (value === undefined) return 'undefined';
  if (typeof value !== 'object') return typeof value;
  const ctor = Object.getPrototypeOf(value)?.constructor;
  return ctor && ctor.name ? ctor.name : 'object';
}

/** A deep copy of `value`, which must be JSON data. */
function copyJson(value, path, depth = 0) {
  if (depth > MAX_DEPTH) {
    throw declared('unserialisable-state', `${path} nests deeper than ${MAX_DEPTH} levels`);
  }
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return value;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) {
      throw declared('unserialisable-state', `${path} is ${value}, not a JSON number`);
    }
    return value;
  }
  if (Array.isArray(value)) {
    return value.map((item, index) => copyJson(item, `${path}[${index}]`, depth + 1));
  }
  if (typeof value === 'object' && isPlainObject(value)) {
    const copy = {};
    for (const key of Object.keys(value)) {
      if (value[key] !== undefined) copy[key] = copyJson(value[key], `${path}.${key}`, depth + 1);
    }
    return copy;
  }
  throw declared(
    'unserialisable-state',
    `${path} is a ${typeName(value)}; replay state must be JSON data ` +
      '(plain object, array, string, finite number, boolean, null)',
  );
}

/**
 * A deep copy of `group`'s state: its own enumerable properties not
 * starting with `_`, or the value itself when it is a plain object or an
 * array.
 */
export function stateOf(group) {
  if (group === null || typeof group !== 'object') {
    throw declared(
      'unserialisable-state',
      `the group is a ${typeName(group)}; register an object whose properties are its state`,
    );
  }
  if (Array.isArray(group) || isPlainObject(group)) return copyJson(group, 'state');
  const state = {};
  for (const key of Object.keys(group)) {
    if (!key.startsWith('_')) state[key] = group[key];
  }
  return copyJson(state, 'state');
}

/** Order strings by code point, as Python's sorted() does. */
function byCodePoint(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i += 1) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      // UTF-16 order differs from code point order only between surrogates
      // (code points above U+FFFF) and U+E000..U+FFFF.
      if (x >= 0xd800 && y >= 0xd800) {
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}

/**
 * The canonical JSON text of JSON data: keys sorted by code point, no
 * whitespace, non-ASCII as it is (JSON.stringify's strings and numbers).
 */
export function canonicalJson(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).filter((key) => value[key] !== undefined).sort(byCodePoint);
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(',')}}`;
}

/** UTF-8 bytes of `text` (lone surrogates, which canonical JSON escapes, as U+FFFD). */
export function utf8Encode(text) {
  const bytes = [];
  for (let i = 0; i < text.length; i += 1) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i += 1;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (c < 0x80) bytes.push(c);
    else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 0x3f));
    else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
    else {
      bytes.push(
        0xf0 | (c >> 18),
        0x80 | ((c >> 12) & 0x3f),
        0x80 | ((c >> 6) & 0x3f),
        0x80 | (c & 0x3f),
      );
    }
  }
  return Uint8Array.from(bytes);
}

/** Text of UTF-8 `bytes`; undefined when they are not valid UTF-8. */
export function utf8Decode(bytes) {
  let text = '';
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    let c;
    let extra;
    let min;
    if (b < 0x80) [c, extra, min] = [b, 0, 0];
    else if (b >= 0xc2 && b <= 0xdf) [c, extra, min] = [b & 0x1f, 1, 0x80];
    else if (b >= 0xe0 && b <= 0xef) [c, extra, min] = [b & 0x0f, 2, 0x800];
    else if (b >= 0xf0 && b <= 0xf4) [c, extra, min] = [b & 0x07, 3, 0x10000];
    else return undefined;
    if (i + extra >= bytes.length) return undefined;
    for (let k = 1; k <= extra; k += 1) {
      const next = bytes[i + k];
      if ((next & 0xc0) !== 0x80) return undefined;
      c = (c << 6) | (next & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return undefined;
    text += String.fromCodePoint(c);
    i += extra + 1;
  }
  return text;
}

// SHA-256 (FIPS 180-4), for the digest: componentize-js has no synchronous
// crypto.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const rotr = (x, n) => (x >>> n) | (x << (32 - n));

/** SHA-256 of `bytes` (a Uint8Array), as 64 lowercase hex digits. */
export function sha256Hex(bytes) {
  const blocks = Math.ceil((bytes.length + 9) / 64);
  const padded = new Uint8Array(blocks * 64);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  const view = new DataView(padded.buffer);
  const bits = bytes.length * 8;
  view.setUint32(padded.length - 8, Math.floor(bits / 0x100000000));
  view.setUint32(padded.length - 4, bits >>> 0);
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  for (let offset = 0; offset < padded.length; offset += 64) {
    for (let i = 0; i < 16; i += 1) w[i] = view.getUint32(offset + i * 4);
    for (let i = 16; i < 64; i += 1) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i += 1) {
      const s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + s1 + ch + K[i] + w[i]) | 0;
      const s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (s0 + maj) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  return Array.from(h, (word) => word.toString(16).padStart(8, '0')).join('');
}

/** `sha256:<hex>` of the canonical JSON of `value` (JSON data). */
export function digestOf(value) {
  return `sha256:${sha256Hex(utf8Encode(canonicalJson(value)))}`;
}

// ------------------------------------------------------------------ points

/**
 * A replay point's state: the captured copy, its canonical text and digest,
 * the working copy of the suffix in progress, its token.
 */
class Point {
  constructor(state) {
    this.state = state;
    this.canonical = canonicalJson(state);
    this.digest = `sha256:${sha256Hex(utf8Encode(this.canonical))}`;
    this.working = null;
    this.released = false;
    this.token = nextToken;
    nextToken += 1;
    bindings.set(String(this.token), this);
  }

  release() {
    bindings.delete(String(this.token));
    this.released = true;
    this.state = null;
    this.canonical = null;
    this.working = null;
  }
}

/**
 * The `replay-binding` resource: a handle on a point. A snapshot child gets
 * a new one on the same point (`resumeBinding`).
 */
export class ReplayBinding {
  constructor(point) {
    this.point = point;
  }
}

// componentize-js 0.23 (issue ComponentizeJS#221): a resource without
// methods, like `replay-binding`, is looked up as a global of the bindings'
// own realm instead of on the exported interface object. Functions imported
// from the bindings belong to that realm, so its globalThis is reachable
// through their Function constructor. Runs once, at build time (Wizer).
const bindingsGlobal = log.constructor('return globalThis')();
if (bindingsGlobal.ReplayBinding === undefined) bindingsGlobal.ReplayBinding = ReplayBinding;

/** The `replay-child` resource: a handle on a child. */
export class ReplayChild {
  constructor(child) {
    this.child = child;
  }
}
if (bindingsGlobal.ReplayChild === undefined) bindingsGlobal.ReplayChild = ReplayChild;

function livePoint(binding) {
  const { point } = binding;
  if (point.released) throw declared('released', 'the replay binding was released');
  return point;
}

function working(point) {
  if (point.working === null) {
    throw declared('not-restored', 'restore-replay-state must run before this call');
  }
  return point.working;
}

const lease = (point) => ({
  binding: new ReplayBinding(point),
  fidelity: 'exact',
  projectionDigest: point.digest,
});

/**
 * Wrap an export: a declared error (an object with string `kind` and
 * `message`) goes back to the host as the call's `adapter-error`; anything
 * else thrown is printed to stderr (the host keeps it with the call) and
 * rethrown, which makes the call trap.
 */
export function guard(fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (err) {
      const isDeclared =
        err !== null && typeof err === 'object' && typeof err.kind === 'string' &&
        typeof err.message === 'string';
      if (!isDeclared) {
        console.error(`uncaught exception: ${err && err.stack ? `${err}\n${err.stack}` : err}`);
      }
      throw err;
    }
  };
}

/** The JSON data of exported state bytes (`invalid-state` otherwise). */
function parseState(bytes) {
  const text = utf8Decode(bytes);
  if (text === undefined) throw declared('invalid-state', 'replay state is not UTF-8');
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw declared('invalid-state', `replay state is not JSON: ${error.message}`);
  }
  return copyJson(value, 'state');
}

/**
 * The working copy for a suffix or child on `targetBranchId`, as
 * `{state, rebuilt}`, and its receipt: an exact copy of `captured` (its
 * digest, prefix reused), or what `rebuild(copy, targetBranchId)` gives when
 * it gives a value (best effort, prefix not reused).
 */
function restore(rebuild, captured, targetBranchId) {
  const rebuilt = rebuild(copyJson(captured, 'state'), targetBranchId);
  if (rebuilt !== undefined && rebuilt !== null) {
    return [
      { state: copyJson(rebuilt, 'rebuilt state'), rebuilt: true },
      { achievedFidelity: 'best-effort', restoredProjectionDigest: undefined, prefixReused: false },
    ];
  }
  const state = copyJson(captured, 'state');
  return [
    { state, rebuilt: false },
    { achievedFidelity: 'exact', restoredProjectionDigest: digestOf(state), prefixReused: true },
  ];
}

/**
 * The equivalence report of `restored` against `capturedDigest`: one
 * `state-digest` check for a copy; best effort and unverified for a rebuilt
 * state (it is not compared).
 */
function equivalence(capturedDigest, restored) {
  if (restored.rebuilt) {
    return {
      achievedFidelity: 'best-effort',
      equivalent: false,
      expectedDigest: capturedDigest,
      observedDigest: undefined,
      checks: [],
      sanitizedReason: 'rebuilt by the adapter; not compared with the captured state',
    };
  }
  const observed = digestOf(restored.state);
  const equal = observed === capturedDigest;
  return {
    achievedFidelity: 'exact',
    equivalent: equal,
    expectedDigest: capturedDigest,
    observedDigest: observed,
    checks: [
      {
        checkId: 'state-digest',
        passed: equal,
        publicSummary: equal
          ? 'restored state digest equals the captured digest'
          : 'restored state digest differs from the captured digest',
      },
    ],
    sanitizedReason: undefined,
  };
}

/** By default a restore is an exact copy of the captured state. */
const noRebuild = () => undefined;

/**
 * The `replay` export. `runSuffix(state, itemJson, ctx)` runs an item (JSON
 * text) on `state` (a working copy of the group's state) and returns its
 * record (JSON text), as `executeEpisode` does on the group. The optional
 * `options.rebuild(state, targetBranchId)` returns undefined (an exact copy
 * of the captured `state` is restored) or a state rebuilt another way for
 * that branch (best effort, not compared).
 */
export function replayExport(runSuffix, { rebuild = noRebuild } = {}) {
  return {
    ReplayBinding,

    captureReplayState: guard((request) => {
      const group = groupOf(request.executionGroupId);
      return lease(new Point(stateOf(group)));
    }),

    restoreReplayState: guard((binding, request) => {
      const point = livePoint(binding);
      const [restored, receipt] = restore(rebuild, point.state, request.targetBranchId);
      point.working = restored;
      return receipt;
    }),

    validateReplayEquivalence: guard((binding, receipt) => {
      const point = livePoint(binding);
      return equivalence(point.digest, working(point));
    }),

    runReplaySuffix: guard((binding, itemJson, ctx) =>
      runSuffix(working(livePoint(binding)).state, itemJson, ctx),
    ),

    finalizeReplaySuffix: guard((binding, request, suffixSucceeded) => {
      binding.point.working = null;
    }),

    releaseReplayState: guard((binding) => {
      binding.point.release();
    }),

    exportReplayState: guard((binding) => utf8Encode(livePoint(binding).canonical)),

    importReplayState: guard((state, request) => lease(new Point(parseState(state)))),

    bindingToken: guard((binding) =>
      binding.point.released ? undefined : BigInt(binding.point.token),
    ),

    resumeBinding: guard((token) => {
      const point = bindings.get(String(token));
      if (point === undefined) {
        throw declared(
          'unknown-binding',
          `no replay binding has token ${token} in this instance; resume-binding needs ` +
            'a token binding-token gave before the snapshot',
        );
      }
      return new ReplayBinding(point);
    }),
  };
}

// ---------------------------------------------------------------- children

function liveChild(handle) {
  const { child } = handle;
  if (child.released) throw declared('released', 'the replay child was released');
  return child;
}

/** The working state of the child forked under `childId` in this instance. */
export function childState(childId) {
  const child = children.get(childId);
  if (child === undefined || child.released) {
    throw declared(
      'unknown-child',
      `no replay child ${JSON.stringify(childId)} was forked in this instance; child-risk and ` +
        "counterfactual calls need the child-id of the instance's fork-replay-child call",
    );
  }
  return child.restored.state;
}

function parseObject(text, what, kind) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw declared(kind, `${what} is not JSON: ${error.message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw declared(kind, `${what} must be a JSON object`);
  }
  return value;
}

/**
 * The `replay-children` export: a child adopts the point's exported state.
 * `runChild(state, taskJson, ctx)` runs the task on the child's working
 * state and returns its record (usually the `runSuffix` given to
 * `replayExport`); `options.rebuild` as for `replayExport`.
 */
export function replayChildrenExport(runChild, { rebuild = noRebuild } = {}) {
  return {
    ReplayChild,

    forkReplayChild: guard((state, request) => {
      const captured = parseState(state);
      const [restored, receipt] = restore(rebuild, captured, request.targetBranchId);
      const child = {
        childId: request.childId,
        restored,
        capturedDigest: digestOf(captured),
        released: false,
      };
      children.set(request.childId, child);
      return { child: new ReplayChild(child), receipt, concurrency: 'thread-safe' };
    }),

    validateReplayChildEquivalence: guard((handle, receipt) => {
      const child = liveChild(handle);
      return equivalence(child.capturedDigest, child.restored);
    }),

    runReplayChild: guard((handle, taskJson, ctx) =>
      runChild(liveChild(handle).restored.state, taskJson, ctx),
    ),

    releaseReplayChild: guard((handle) => {
      const { child } = handle;
      child.released = true;
      child.restored = null;
      if (children.get(child.childId) === child) children.delete(child.childId);
    }),
  };
}

/** A risk assessment that lets the child go on. */
export const allow = (policyId, reason) => ({
  disposition: 'allow',
  policyId,
  sanitizedReason: reason,
});

/** A risk assessment that stops the child (public-safe `reason`). */
export const deny = (policyId, reason) => ({
  disposition: 'deny',
  policyId,
  sanitizedReason: reason,
});

/**
 * The `child-risk` export. `assessIntent(state, intent)` and
 * `assessOutcome(state, intent, outcome)` get the child's working state and
 * the intent and outcome as objects, and return `allow(policyId)` or
 * `deny(policyId, reason)`; either left out allows (policy `allow-all`).
 */
export function childRiskExport({
  assessIntent = () => allow('allow-all'),
  assessOutcome = () => allow('allow-all'),
} = {}) {
  return {
    assessReplayChildIntent: guard((childId, intent) => {
      const state = childState(childId);
      return assessIntent(state, parseObject(intent, 'child intent', 'invalid-intent'));
    }),

    assessReplayChildOutcome: guard((childId, intent, outcome) => {
      const state = childState(childId);
      return assessOutcome(
        state,
        parseObject(intent, 'child intent', 'invalid-intent'),
        parseObject(outcome, 'child outcome', 'invalid-record'),
      );
    }),
  };
}

/** One validation target's result (public-safe `summary`). */
export const outcome = (validationId, passed, summary) => ({
  validationId,
  passed,
  publicSummary: summary,
});

/**
 * The `counterfactual` export. `runChange(state, item, change, request,
 * ctx)` applies `change` (the candidate's public change set, an object) and
 * runs `item` (the failed item, an object) on `state` (the child's working
 * state), returning one `outcome(...)` per validation target checked.
 */
export function counterfactualExport(runChange) {
  return {
    runCounterfactual: guard((childId, itemJson, request, ctx) => {
      const state = childState(childId);
      const item = parseObject(itemJson, 'item', 'invalid-item');
      const change = parseObject(
        request.publicChangeSet,
        'counterfactual change set',
        'invalid-change-set',
      );
      const outcomes = Array.from(runChange(state, item, change, request, ctx));
      const seen = new Set();
      outcomes.forEach((result, index) => {
        if (
          result === null || typeof result !== 'object' ||
          typeof result.validationId !== 'string' || typeof result.passed !== 'boolean'
        ) {
          throw declared(
            'invalid-outcome',
            `runChange result [${index}] is not an outcome(validationId, passed, summary)`,
          );
        }
        if (seen.has(result.validationId)) {
          throw declared(
            'invalid-outcome',
            `runChange result [${index}] repeats validationId ${JSON.stringify(result.validationId)}`,
          );
        }
        seen.add(result.validationId);
      });
      return outcomes;
    }),
  };
}
