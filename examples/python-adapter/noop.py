"""noop: the cheapest Python adapter, for measuring host overhead.

The same logic as examples/bench-adapter, in world `grouped` (`episode` +
`episode-groups`): `execute` and `execute_episode` return a fixed record,
`prepare_episode_group` returns an empty group with a fixed prefix record,
`release_episode_group` does nothing. Items are never parsed.
"""

from wit_world import exports
from wit_world.exports import episode_groups

# Observation record of every item.
RECORD = '{"observation_keys":["k"],"accepted":true}'
# Observation record of every shared prefix.
PREFIX = '{"observation_keys":["prefix"],"accepted":true}'


class NoopGroup:
    """The group state: nothing. (No `__slots__`: componentize-py stores the
    resource handle as an attribute of the object.)"""


class Episode(exports.Episode):
    def execute(self, item, ctx):
        return RECORD


class EpisodeGroups(exports.EpisodeGroups):
    def prepare_episode_group(self, seed, items, ctx):
        return episode_groups.Prepared(group=NoopGroup(), prefix_record=PREFIX, checkpoint_ref=None)

    def execute_episode(self, group, item, ctx):
        return RECORD

    def release_episode_group(self, group, ctx):
        return None
