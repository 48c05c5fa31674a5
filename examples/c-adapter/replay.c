/*
 * c-replay: a C adapter of world `replayable` (episode, seeds, variants,
 * episode-groups, replay): hello-adapter's word-length buckets, with a
 * shared prefix per seed and replay points whose state leaves the instance
 * as bytes.
 *
 * - Items come from the items file (`list-seed-items` returns none); an item
 *   is {"item_id", "family", "text"}, and a seed with "prepare": "none" opts
 *   out of the shared prefix (the host then calls `execute`).
 * - `compile-variant(spec, seed)`: spec {"spec_id", "append"} makes the item
 *   `{seed_item_id}~{spec_id}`: the seed's family, its text with " " and
 *   `append` after it, `is_variant`, `seed_item_id`.
 * - `prepare-episode-group`: analyses the seed once: which buckets its
 *   words fall in, and how many words it has. That analysis is the group's
 *   state; the prefix record reports it (`episode: shared_prefix`).
 * - `execute-episode`: the seed reports its own keys (`episode: seed`); a
 *   variant reports its keys, `gained:word_len:*` and `lost:word_len:*`
 *   against the seed, `word_count_delta`, and the flag `gained_bucket` (1.5)
 *   when it gained one (`episode: variant`).
 * - `replay`: a point per prepared group holds the state's bytes
 *   (`encode_state`) with fidelity `exact` and the digest of those bytes.
 *   A suffix runs on a copy decoded from them, by the same code as
 *   `execute-episode`; `export-replay-state` hands the bytes out and
 *   `import-replay-state` decodes them in another instance or process;
 *   `binding-token` and `resume-binding` let the host fork a variant from a
 *   snapshot of this instance.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replayable.h" /* the generated bindings of world `replayable` */
#include "sandloop.h"   /* guest-sdk/c: items, records, errors, state bytes */

typedef sandloop_adapter_types_adapter_error_t adapter_error;
typedef sandloop_adapter_types_json_t json;
typedef sandloop_adapter_types_context_t context;

/* ---- The domain -------------------------------------------------------------- */

/* Word-length buckets, in key order: 1, 2, 3, 4-5, 6-8, 9+. */
static const char *const BUCKETS[] = {"1", "2", "3", "4-5", "6-8", "9+"};
enum { BUCKET_COUNT = 6 };

static unsigned bucket_of(size_t chars) {
    if (chars <= 3) return chars == 0 ? 0 : (unsigned)chars - 1;
    if (chars <= 5) return 3;
    if (chars <= 8) return 4;
    return 5;
}

/* What a text holds: its buckets in order of first occurrence (and as a
 * set), and its word count. */
typedef struct {
    unsigned order[BUCKET_COUNT];
    unsigned count;
    unsigned set; /* bit i: BUCKETS[i] occurs */
    long long words;
} analysis;

static analysis analyse(const char *text) {
    analysis a = {{0}, 0, 0, 0};
    for (const char *p = text; *p;) {
        while (*p && isspace((unsigned char)*p)) p++;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (p == start) break;
        a.words++;
        unsigned b = bucket_of(sl_utf8_chars(start, (size_t)(p - start)));
        if (!(a.set & (1u << b))) {
            a.set |= 1u << b;
            a.order[a.count++] = b;
        }
    }
    return a;
}

static void observe_bucket(sl_record *record, const char *prefix, unsigned b) {
    char key[48];
    snprintf(key, sizeof key, "%sword_len:%s", prefix, BUCKETS[b]);
    sl_record_observe(record, key);
}

/* A record of `a`'s keys, in order of first occurrence, with `episode` and
 * `word_count`. */
static sl_record *analysis_record(const analysis *a, const char *episode) {
    sl_record *record = sl_record_new();
    for (unsigned i = 0; i < a->count; i++) observe_bucket(record, "", a->order[i]);
    sl_record_set_string(record, "episode", episode);
    sl_record_set_int(record, "word_count", a->words);
    return record;
}

/* `record` finished into `ret`. */
static void finish_into(sl_record *record, json *ret) {
    size_t len;
    char *text = sl_record_finish(record, &len);
    ret->ptr = (uint8_t *)text;
    ret->len = len;
}

/* A group's state: the seed's id and its analysis. Plain data, so it
 * encodes to bytes and back. */
typedef struct {
    char *seed_id;
    unsigned set;
    long long words;
} group_state;

static void state_free(group_state *state) {
    free(state->seed_id);
    state->seed_id = NULL;
}

/* The state's bytes: "c-replay/1", the seed id, the bucket set, the word
 * count. */
static sl_bytes encode_state(const group_state *state) {
    sl_bytes out = {0};
    sl_bytes_put_string(&out, "c-replay/1");
    sl_bytes_put_string(&out, state->seed_id);
    sl_bytes_put_u64(&out, state->set);
    sl_bytes_put_u64(&out, (uint64_t)state->words);
    return out;
}

/* The projection digest of `state`: that of its bytes. */
static char *state_digest(const group_state *state) {
    sl_bytes bytes = encode_state(state);
    char *digest = sl_state_digest(bytes.ptr, bytes.len);
    sl_bytes_free(&bytes);
    return digest;
}

/* Decodes `encode_state`'s bytes; false when they are not such bytes. */
static bool decode_state(const uint8_t *ptr, size_t len, group_state *state) {
    sl_reader in = sl_reader_new(ptr, len);
    char *version = sl_read_string(&in);
    char *seed_id = sl_read_string(&in);
    uint64_t set = sl_read_u64(&in);
    uint64_t words = sl_read_u64(&in);
    bool ok = sl_reader_done(&in) && strcmp(version, "c-replay/1") == 0 &&
              set < (1u << BUCKET_COUNT) && words <= (uint64_t)1 << 53;
    free(version);
    if (!ok) {
        free(seed_id);
        return false;
    }
    state->seed_id = seed_id;
    state->set = (unsigned)set;
    state->words = (long long)words;
    return true;
}

/* ---- Glue -------------------------------------------------------------------- */

static bool fail(sl_error error, adapter_error *err) {
    replayable_string_dup(&err->kind, error.kind);
    replayable_string_dup(&err->message, error.message);
    err->retryable_infra_error = error.retryable;
    sl_error_free(&error);
    return false;
}

/* A copy of `text` (not NUL-terminated) as a C string. */
static char *c_string(const replayable_string_t *text) {
    char *out = malloc(text->len + 1);
    if (out == NULL) SL_PANIC("out of memory");
    memcpy(out, text->ptr, text->len);
    out[text->len] = '\0';
    return out;
}

/*
 * The record of `item` run on `state` (the seed's analysis), or false and
 * `err`. The one suffix rule: `execute-episode` and `run-replay-suffix` both
 * come here.
 */
static bool run_suffix(const group_state *state, json *item, json *ret, adapter_error *err) {
    char *id = sl_get_string((const char *)item->ptr, item->len, "item_id");
    char *text = sl_get_string((const char *)item->ptr, item->len, "text");
    if (text == NULL) {
        free(id);
        return fail(sl_invalid_item("item has no text"), err);
    }
    if (strcmp(text, "crash") == 0) SL_PANIC("asked to crash on '%s'", text);
    analysis a = analyse(text);
    bool seed = id != NULL && strcmp(id, state->seed_id) == 0;
    sl_record *record = analysis_record(&a, seed ? "seed" : "variant");
    if (!seed) {
        unsigned gained = a.set & ~state->set, lost = state->set & ~a.set;
        for (unsigned b = 0; b < BUCKET_COUNT; b++) {
            if (gained & (1u << b)) observe_bucket(record, "gained:", b);
        }
        for (unsigned b = 0; b < BUCKET_COUNT; b++) {
            if (lost & (1u << b)) observe_bucket(record, "lost:", b);
        }
        if (gained) sl_record_flag(record, "gained_bucket", 1.5);
        sl_record_set_int(record, "word_count_delta", a.words - state->words);
    }
    free(id);
    free(text);
    finish_into(record, ret);
    return true;
}

/* ---- episode ----------------------------------------------------------------- */

bool exports_sandloop_adapter_episode_execute(json *item, context *ctx, json *ret,
                                              adapter_error *err) {
    sandloop_adapter_types_context_free(ctx);
    char *text = sl_get_string((const char *)item->ptr, item->len, "text");
    replayable_string_free(item);
    if (text == NULL) return fail(sl_invalid_item("item has no text"), err);
    analysis a = analyse(text);
    free(text);
    finish_into(analysis_record(&a, "standalone"), ret);
    return true;
}

/* ---- seeds and variants -------------------------------------------------------- */

bool exports_sandloop_adapter_seeds_list_seed_items(replayable_string_t *arm, uint32_t epoch,
                                                    replayable_list_json_t *ret,
                                                    adapter_error *err) {
    (void)epoch, (void)err;
    replayable_string_free(arm);
    ret->ptr = NULL; /* the items file holds the seeds */
    ret->len = 0;
    return true;
}

bool exports_sandloop_adapter_variants_compile_variant(json *spec, json *seed, json *ret,
                                                       adapter_error *err) {
    char *spec_id = sl_get_string((const char *)spec->ptr, spec->len, "spec_id");
    char *append = sl_get_string((const char *)spec->ptr, spec->len, "append");
    char *seed_id = sl_get_string((const char *)seed->ptr, seed->len, "item_id");
    char *family = sl_get_string((const char *)seed->ptr, seed->len, "family");
    char *text = sl_get_string((const char *)seed->ptr, seed->len, "text");
    replayable_string_free(spec);
    replayable_string_free(seed);
    bool ok = false;
    if (spec_id == NULL || append == NULL) {
        fail(sl_error_new("invalid-spec", false, "a spec needs a string spec_id and append"), err);
    } else if (seed_id == NULL || text == NULL) {
        fail(sl_invalid_item("the seed needs an item_id and a text"), err);
    } else {
        size_t id_len = strlen(seed_id) + 1 + strlen(spec_id) + 1;
        char *id = malloc(id_len);
        size_t text_len = strlen(text) + 1 + strlen(append) + 1;
        char *variant_text = malloc(text_len);
        if (id == NULL || variant_text == NULL) SL_PANIC("out of memory");
        snprintf(id, id_len, "%s~%s", seed_id, spec_id);
        snprintf(variant_text, text_len, "%s %s", text, append);
        char *q_id = sl_json_quote(id), *q_family = sl_json_quote(family ? family : "");
        char *q_text = sl_json_quote(variant_text), *q_seed = sl_json_quote(seed_id);
        size_t len = strlen(q_id) + strlen(q_family) + strlen(q_text) + strlen(q_seed) + 96;
        char *item = malloc(len);
        if (item == NULL) SL_PANIC("out of memory");
        int written = snprintf(item, len,
                               "{\"item_id\":%s,\"family\":%s,\"text\":%s,\"is_variant\":true,"
                               "\"seed_item_id\":%s}",
                               q_id, q_family, q_text, q_seed);
        ret->ptr = (uint8_t *)item;
        ret->len = (size_t)written;
        free(id), free(variant_text), free(q_id), free(q_family), free(q_text), free(q_seed);
        ok = true;
    }
    free(spec_id), free(append), free(seed_id), free(family), free(text);
    return ok;
}

/* ---- episode-groups ------------------------------------------------------------ */

struct exports_sandloop_adapter_episode_groups_episode_group_t {
    group_state state;
    char *execution_group_id; /* where `capture-replay-state` finds it */
    struct exports_sandloop_adapter_episode_groups_episode_group_t *next;
};
typedef struct exports_sandloop_adapter_episode_groups_episode_group_t episode_group;

/* The prepared groups of this instance, by execution group id. */
static episode_group *groups;

static episode_group *find_group(const char *execution_group_id) {
    for (episode_group *g = groups; g; g = g->next) {
        if (g->execution_group_id && strcmp(g->execution_group_id, execution_group_id) == 0) {
            return g;
        }
    }
    return NULL;
}

bool exports_sandloop_adapter_episode_groups_prepare_episode_group(
    json *seed, replayable_list_json_t *items, context *ctx,
    exports_sandloop_adapter_episode_groups_option_prepared_t *ret, adapter_error *err) {
    replayable_list_json_free(items);
    const char *s = (const char *)seed->ptr;
    char *prepare = sl_get_string(s, seed->len, "prepare");
    char *id = sl_get_string(s, seed->len, "item_id");
    char *text = sl_get_string(s, seed->len, "text");
    replayable_string_free(seed);
    bool opt_out = prepare != NULL && strcmp(prepare, "none") == 0;
    free(prepare);
    if (opt_out || text == NULL) {
        /* No prefix: the host runs each item with `execute`, which reports
         * a missing text as the item's own error. */
        free(id), free(text);
        sandloop_adapter_types_context_free(ctx);
        ret->is_some = false;
        return true;
    }
    (void)err;
    analysis a = analyse(text);
    free(text);
    episode_group *group = calloc(1, sizeof *group);
    if (group == NULL) SL_PANIC("out of memory");
    group->state.seed_id = id ? id : calloc(1, 1);
    group->state.set = a.set;
    group->state.words = a.words;
    if (ctx->execution_group_id.is_some) {
        group->execution_group_id = c_string(&ctx->execution_group_id.val);
    }
    sandloop_adapter_types_context_free(ctx);
    group->next = groups;
    groups = group;

    ret->is_some = true;
    ret->val.group = exports_sandloop_adapter_episode_groups_episode_group_new(group);
    finish_into(analysis_record(&a, "shared_prefix"), &ret->val.prefix_record);
    ret->val.checkpoint_ref.is_some = false;
    return true;
}

bool exports_sandloop_adapter_episode_groups_execute_episode(
    exports_sandloop_adapter_episode_groups_borrow_episode_group_t group, json *item,
    context *ctx, json *ret, adapter_error *err) {
    sandloop_adapter_types_context_free(ctx);
    bool ok = run_suffix(&group->state, item, ret, err);
    replayable_string_free(item);
    return ok;
}

bool exports_sandloop_adapter_episode_groups_release_episode_group(
    exports_sandloop_adapter_episode_groups_own_episode_group_t group, context *ctx,
    adapter_error *err) {
    (void)err;
    sandloop_adapter_types_context_free(ctx);
    exports_sandloop_adapter_episode_groups_episode_group_drop_own(group);
    return true;
}

void exports_sandloop_adapter_episode_groups_episode_group_destructor(episode_group *rep) {
    for (episode_group **at = &groups; *at; at = &(*at)->next) {
        if (*at == rep) {
            *at = rep->next;
            break;
        }
    }
    state_free(&rep->state);
    free(rep->execution_group_id);
    free(rep);
}

/* ---- replay ---------------------------------------------------------------------- */

/* One replay point: the captured state's bytes and digest, and the working
 * copy of the suffix now running from it. */
struct exports_sandloop_adapter_replay_replay_binding_t {
    sl_bytes bytes;
    char *digest;
    group_state working;
    bool has_working;
    uint64_t token; /* its slot in `bindings`, plus one */
};
typedef struct exports_sandloop_adapter_replay_replay_binding_t binding;

/* Live bindings by token, for `resume-binding` in a snapshot of this
 * instance (linear memory survives a snapshot; resource handles do not). */
enum { MAX_BINDINGS = 4096 };
static binding *bindings[MAX_BINDINGS];

static void set_digest(replayable_option_string_t *out, const char *digest) {
    out->is_some = true;
    replayable_string_dup(&out->val, digest);
}

/* A lease of `b` with fidelity exact, or false when the slots are full. */
static bool lease(binding *b, exports_sandloop_adapter_replay_state_lease_t *ret,
                  adapter_error *err) {
    for (uint64_t slot = 0; slot < MAX_BINDINGS; slot++) {
        if (bindings[slot] == NULL) {
            bindings[slot] = b;
            b->token = slot + 1;
            ret->binding.is_some = true;
            ret->binding.val = exports_sandloop_adapter_replay_replay_binding_new(b);
            ret->fidelity = SANDLOOP_ADAPTER_TYPES_FIDELITY_EXACT;
            set_digest(&ret->projection_digest, b->digest);
            return true;
        }
    }
    exports_sandloop_adapter_replay_replay_binding_destructor(b); /* never leased */
    return fail(sl_retryable("more than %d replay points are live in this instance", MAX_BINDINGS),
                err);
}

static binding *binding_of(sl_bytes bytes) {
    binding *b = calloc(1, sizeof *b);
    if (b == NULL) SL_PANIC("out of memory");
    b->bytes = bytes;
    b->digest = sl_state_digest(bytes.ptr, bytes.len);
    return b;
}

bool exports_sandloop_adapter_replay_capture_replay_state(
    exports_sandloop_adapter_replay_capture_request_t *request,
    exports_sandloop_adapter_replay_state_lease_t *ret, adapter_error *err) {
    char *group_id = c_string(&request->execution_group_id);
    exports_sandloop_adapter_replay_capture_request_free(request);
    episode_group *group = find_group(group_id);
    if (group == NULL) {
        sl_error error = sl_error_new("unknown-group", false,
                                      "no episode group %s is prepared in this instance", group_id);
        free(group_id);
        return fail(error, err);
    }
    free(group_id);
    return lease(binding_of(encode_state(&group->state)), ret, err);
}

static void drop_working(binding *b) {
    if (b->has_working) state_free(&b->working);
    b->has_working = false;
}

bool exports_sandloop_adapter_replay_restore_replay_state(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b,
    exports_sandloop_adapter_replay_restore_request_t *request,
    sandloop_adapter_types_restore_receipt_t *ret, adapter_error *err) {
    exports_sandloop_adapter_replay_restore_request_free(request);
    drop_working(b);
    if (!decode_state(b->bytes.ptr, b->bytes.len, &b->working)) {
        return fail(sl_error_new("corrupt-state", false, "the point's bytes do not decode"), err);
    }
    b->has_working = true;
    char *digest = state_digest(&b->working);
    ret->achieved_fidelity = SANDLOOP_ADAPTER_TYPES_FIDELITY_EXACT;
    set_digest(&ret->restored_projection_digest, digest);
    free(digest);
    ret->prefix_reused.is_some = true;
    ret->prefix_reused.val = true;
    return true;
}

bool exports_sandloop_adapter_replay_validate_replay_equivalence(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b,
    sandloop_adapter_types_restore_receipt_t *receipt,
    sandloop_adapter_types_equivalence_report_t *ret, adapter_error *err) {
    (void)err;
    ret->achieved_fidelity = receipt->achieved_fidelity;
    sandloop_adapter_types_restore_receipt_free(receipt);
    char *observed = b->has_working ? state_digest(&b->working) : NULL;
    bool equal = observed != NULL && strcmp(observed, b->digest) == 0;
    ret->equivalent = equal;
    set_digest(&ret->expected_digest, b->digest);
    ret->observed_digest.is_some = false;
    if (observed) set_digest(&ret->observed_digest, observed);
    free(observed);
    sandloop_adapter_types_equivalence_check_t *check = calloc(1, sizeof *check);
    if (check == NULL) SL_PANIC("out of memory");
    replayable_string_dup(&check->check_id, "state-digest");
    check->passed = equal;
    check->public_summary.is_some = true;
    replayable_string_dup(&check->public_summary.val, equal ? "the working copy encodes to the captured bytes"
                                                            : "the working copy differs from the captured state");
    ret->checks.ptr = check;
    ret->checks.len = 1;
    ret->sanitized_reason.is_some = !equal;
    if (!equal) replayable_string_dup(&ret->sanitized_reason.val, "state digest mismatch");
    return true;
}

bool exports_sandloop_adapter_replay_run_replay_suffix(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b, json *item, context *ctx,
    json *ret, adapter_error *err) {
    sandloop_adapter_types_context_free(ctx);
    bool ok = b->has_working
                  ? run_suffix(&b->working, item, ret, err)
                  : fail(sl_error_new("not-restored", false, "run-replay-suffix before a restore"), err);
    replayable_string_free(item);
    return ok;
}

bool exports_sandloop_adapter_replay_finalize_replay_suffix(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b,
    exports_sandloop_adapter_replay_restore_request_t *request, bool suffix_succeeded,
    adapter_error *err) {
    (void)suffix_succeeded, (void)err;
    exports_sandloop_adapter_replay_restore_request_free(request);
    drop_working(b);
    return true;
}

bool exports_sandloop_adapter_replay_release_replay_state(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b, adapter_error *err) {
    (void)err;
    drop_working(b);
    return true; /* the bytes go with the handle (the destructor) */
}

bool exports_sandloop_adapter_replay_export_replay_state(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b, replayable_option_list_u8_t *ret,
    adapter_error *err) {
    (void)err;
    ret->is_some = true;
    ret->val.ptr = malloc(b->bytes.len ? b->bytes.len : 1);
    if (ret->val.ptr == NULL) SL_PANIC("out of memory");
    if (b->bytes.len) memcpy(ret->val.ptr, b->bytes.ptr, b->bytes.len);
    ret->val.len = b->bytes.len;
    return true;
}

bool exports_sandloop_adapter_replay_import_replay_state(
    replayable_list_u8_t *state, exports_sandloop_adapter_replay_capture_request_t *request,
    exports_sandloop_adapter_replay_state_lease_t *ret, adapter_error *err) {
    exports_sandloop_adapter_replay_capture_request_free(request);
    group_state check;
    if (!decode_state(state->ptr, state->len, &check)) {
        replayable_list_u8_free(state);
        return fail(sl_error_new("corrupt-state", false, "the imported bytes are not a c-replay state"),
                    err);
    }
    state_free(&check);
    sl_bytes bytes = {0};
    bytes.ptr = state->ptr; /* take the list's buffer as it is */
    bytes.len = bytes.cap = state->len;
    return lease(binding_of(bytes), ret, err);
}

bool exports_sandloop_adapter_replay_binding_token(
    exports_sandloop_adapter_replay_borrow_replay_binding_t b, replayable_option_u64_t *ret,
    adapter_error *err) {
    (void)err;
    ret->is_some = true;
    ret->val = b->token;
    return true;
}

bool exports_sandloop_adapter_replay_resume_binding(
    uint64_t token, exports_sandloop_adapter_replay_own_replay_binding_t *ret, adapter_error *err) {
    if (token == 0 || token > MAX_BINDINGS || bindings[token - 1] == NULL) {
        return fail(sl_error_new("unknown-binding", false, "no replay point has token %llu",
                                 (unsigned long long)token),
                    err);
    }
    *ret = exports_sandloop_adapter_replay_replay_binding_new(bindings[token - 1]);
    return true;
}

void exports_sandloop_adapter_replay_replay_binding_destructor(binding *rep) {
    if (rep->token) bindings[rep->token - 1] = NULL;
    drop_working(rep);
    sl_bytes_free(&rep->bytes);
    free(rep->digest);
    free(rep);
}
