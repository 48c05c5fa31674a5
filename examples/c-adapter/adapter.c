/*
 * c-adapter: hello-adapter (examples/hello-adapter) in C, world `plain`.
 *
 * The host hands `execute` one work item at a time (JSON text with
 * `item_id`, `family` and `text`) and takes an observation record back:
 * which word lengths occur in the text. Its records are those of the Rust
 * original, byte for byte (the e2e tests compare them).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plain.h"    /* the generated bindings of world `plain` */
#include "sandloop.h" /* guest-sdk/c: items, records, errors */

/* Word-length buckets: 1, 2, 3, 4-5, 6-8, 9+. */
static const char *bucket(size_t chars) {
    if (chars <= 1) return "1";
    if (chars == 2) return "2";
    if (chars == 3) return "3";
    if (chars <= 5) return "4-5";
    if (chars <= 8) return "6-8";
    return "9+";
}

/* A log line, captured per item into the run directory. */
static void log_debug(const char *message) {
    plain_string_t text;
    plain_string_set(&text, message);
    sandloop_adapter_log_log(SANDLOOP_ADAPTER_LOG_LEVEL_DEBUG, &text);
}

/* Hands `error` to the host as the call's declared error. */
static bool fail(sl_error error, sandloop_adapter_types_adapter_error_t *err) {
    plain_string_dup(&err->kind, error.kind);
    plain_string_dup(&err->message, error.message);
    err->retryable_infra_error = error.retryable;
    sl_error_free(&error);
    return false;
}

bool exports_sandloop_adapter_episode_execute(sandloop_adapter_types_json_t *item,
                                              sandloop_adapter_types_context_t *ctx,
                                              sandloop_adapter_types_json_t *ret,
                                              sandloop_adapter_types_adapter_error_t *err) {
    char *text = sl_get_string((const char *)item->ptr, item->len, "text");
    uint32_t epoch = ctx->epoch;
    plain_string_free(item);
    sandloop_adapter_types_context_free(ctx);
    if (text == NULL) text = calloc(1, 1);

    /* A declared error: the host records it with
     * `adapter_error.type = "adapter_error"` and our kind `invalid-item`,
     * and the run goes on with the next item. */
    const char *p = text;
    while (*p && isspace((unsigned char)*p)) p++;
    if (*p == '\0') {
        free(text);
        return fail(sl_invalid_item("item has no text"), err);
    }

    char line[64];
    snprintf(line, sizeof line, "epoch %u: %zu bytes of text", (unsigned)epoch, strlen(text));
    log_debug(line);

    /* {"observation_keys": [], "weighted_flags": {}, "accepted": true} */
    sl_record *record = sl_record_new();
    long long words = 0;
    for (p = text; *p;) {
        while (*p && isspace((unsigned char)*p)) p++;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (p == start) break;
        words++;
        /* Observation keys are the novelty currency; each is kept once. */
        char key[32];
        snprintf(key, sizeof key, "word_len:%s", bucket(sl_utf8_chars(start, (size_t)(p - start))));
        sl_record_observe(record, key);
    }
    /* A rarer fact can carry a weight: credited once per family. */
    if (words > 50) sl_record_flag(record, "long_text", 2.0);
    /* Any other field is private to the adapter and kept in the record. */
    sl_record_set_int(record, "word_count", words);
    /* A deliberate crash, to show what the host reports. */
    if (strcmp(text, "crash") == 0) SL_PANIC("asked to crash on '%s'", text);
    free(text);

    size_t len;
    char *json = sl_record_finish(record, &len);
    ret->ptr = (uint8_t *)json;
    ret->len = len;
    return true;
}
