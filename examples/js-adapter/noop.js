// noop: the cheapest JavaScript adapter, for measuring host overhead.
//
// The same logic as examples/bench-adapter, in world `grouped` (`episode` +
// `episode-groups`): `execute` and `executeEpisode` return a fixed record,
// `prepareEpisodeGroup` returns an empty group with a fixed prefix record,
// `releaseEpisodeGroup` does nothing. Items are never parsed.

import { log } from 'sandloop:adapter/log@0.2.0';

// Observation record of every item.
const RECORD = '{"observation_keys":["k"],"accepted":true}';
// Observation record of every shared prefix.
const PREFIX = '{"observation_keys":["prefix"],"accepted":true}';

/** The group state: nothing. */
class EpisodeGroup {}

// componentize-js 0.23 (issue ComponentizeJS#221) looks a method-less
// resource up as a global of the bindings' realm; see adapter.js.
const bindingsGlobal = log.constructor('return globalThis')();
if (bindingsGlobal.EpisodeGroup === undefined) bindingsGlobal.EpisodeGroup = EpisodeGroup;

export const episode = {
  execute(item, ctx) {
    return RECORD;
  },
};

export const episodeGroups = {
  EpisodeGroup,
  prepareEpisodeGroup(seed, items, ctx) {
    return { group: new EpisodeGroup(), prefixRecord: PREFIX, checkpointRef: undefined };
  },
  executeEpisode(group, item, ctx) {
    return RECORD;
  },
  releaseEpisodeGroup(group, ctx) {},
};
