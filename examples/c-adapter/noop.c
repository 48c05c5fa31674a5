/*
 * noop: the cheapest C adapter, for measuring host overhead per item
 * (`cargo bench -p sandloop-tests --bench languages`).
 *
 * The same logic as examples/bench-adapter and examples/python-adapter/noop.py,
 * in world `grouped` (`episode` + `episode-groups`): `execute` and
 * `execute_episode` return a fixed record, `prepare_episode_group` returns an
 * empty group with a fixed prefix record, `release_episode_group` does
 * nothing. Items are never parsed.
 */
#include <stdlib.h>

#include "grouped.h"

/* Observation record of every item, and of every shared prefix. */
#define RECORD "{\"observation_keys\":[\"k\"],\"accepted\":true}"
#define PREFIX "{\"observation_keys\":[\"prefix\"],\"accepted\":true}"

/* The group state: nothing but a byte to point at. */
struct exports_sandloop_adapter_episode_groups_episode_group_t {
    char unused;
};

bool exports_sandloop_adapter_episode_execute(sandloop_adapter_types_json_t *item,
                                              sandloop_adapter_types_context_t *ctx,
                                              sandloop_adapter_types_json_t *ret,
                                              sandloop_adapter_types_adapter_error_t *err) {
    (void)err;
    grouped_string_free(item);
    sandloop_adapter_types_context_free(ctx);
    grouped_string_dup(ret, RECORD);
    return true;
}

bool exports_sandloop_adapter_episode_groups_prepare_episode_group(
    exports_sandloop_adapter_episode_groups_json_t *seed, grouped_list_json_t *items,
    exports_sandloop_adapter_episode_groups_context_t *ctx,
    exports_sandloop_adapter_episode_groups_option_prepared_t *ret,
    exports_sandloop_adapter_episode_groups_adapter_error_t *err) {
    (void)err;
    grouped_string_free(seed);
    grouped_list_json_free(items);
    sandloop_adapter_types_context_free(ctx);
    exports_sandloop_adapter_episode_groups_episode_group_t *group = calloc(1, sizeof *group);
    ret->is_some = true;
    ret->val.group = exports_sandloop_adapter_episode_groups_episode_group_new(group);
    grouped_string_dup(&ret->val.prefix_record, PREFIX);
    ret->val.checkpoint_ref.is_some = false;
    return true;
}

bool exports_sandloop_adapter_episode_groups_execute_episode(
    exports_sandloop_adapter_episode_groups_borrow_episode_group_t group,
    exports_sandloop_adapter_episode_groups_json_t *item,
    exports_sandloop_adapter_episode_groups_context_t *ctx,
    exports_sandloop_adapter_episode_groups_json_t *ret,
    exports_sandloop_adapter_episode_groups_adapter_error_t *err) {
    (void)group, (void)err;
    grouped_string_free(item);
    sandloop_adapter_types_context_free(ctx);
    grouped_string_dup(ret, RECORD);
    return true;
}

bool exports_sandloop_adapter_episode_groups_release_episode_group(
    exports_sandloop_adapter_episode_groups_own_episode_group_t group,
    exports_sandloop_adapter_episode_groups_context_t *ctx,
    exports_sandloop_adapter_episode_groups_adapter_error_t *err) {
    (void)err;
    exports_sandloop_adapter_episode_groups_episode_group_drop_own(group);
    sandloop_adapter_types_context_free(ctx);
    return true;
}

void exports_sandloop_adapter_episode_groups_episode_group_destructor(
    exports_sandloop_adapter_episode_groups_episode_group_t *rep) {
    free(rep);
}
