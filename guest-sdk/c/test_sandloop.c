/* Native tests of sandloop.c: `cc -std=c99 sandloop.c test_sandloop.c -lm`
 * and run; prints "sandloop.c: N checks passed" or the first failure. */
#include "sandloop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;

#define CHECK(cond)                                                              \
    do {                                                                         \
        checks++;                                                                \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static bool is(char *got, const char *want) {
    bool same = got != NULL && strcmp(got, want) == 0;
    if (!same) fprintf(stderr, "got %s, want %s\n", got ? got : "(null)", want);
    free(got);
    return same;
}

int main(void) {
    const char *item =
        " { \"item_id\" : \"a\\\"b\", \"n\": -2.5e1, \"ok\": true, \"nested\": {\"text\": \"no\"},"
        " \"list\": [1, \"]\", {\"x\": [2]}], \"text\": \"caf\\u00e9 \\ud83d\\ude00\\n\\t\\/\" }";
    size_t len = strlen(item);
    CHECK(is(sl_get_string(item, len, "item_id"), "a\"b"));
    CHECK(is(sl_get_string(item, len, "text"), "caf\xc3\xa9 \xf0\x9f\x98\x80\n\t/"));
    CHECK(sl_get_string(item, len, "missing") == NULL);
    CHECK(sl_get_string(item, len, "n") == NULL);
    /* Only top-level keys are found. */
    CHECK(is(sl_get_string(item, len, "text"), "caf\xc3\xa9 \xf0\x9f\x98\x80\n\t/"));
    CHECK(is(sl_get_json(item, len, "nested"), "{\"text\": \"no\"}"));
    CHECK(is(sl_get_json(item, len, "list"), "[1, \"]\", {\"x\": [2]}]"));
    double n = 0;
    CHECK(sl_get_number(item, len, "n", &n) && n == -25.0);
    CHECK(!sl_get_number(item, len, "item_id", &n));
    bool ok = false;
    CHECK(sl_get_bool(item, len, "ok", &ok) && ok);
    CHECK(!sl_get_bool(item, len, "n", &ok));
    /* Not an object, torn text, a length that cuts the text. */
    CHECK(sl_get_string("[1]", 3, "a") == NULL);
    CHECK(sl_get_string("{\"a\": \"x", 8, "a") == NULL);
    CHECK(sl_get_string("{\"a\": \"x\"}", 6, "a") == NULL);
    CHECK(is(sl_get_string("{\"a\":\"x\"}trailing", 9, "a"), "x"));
    /* A lone surrogate becomes U+FFFD. */
    CHECK(is(sl_get_string("{\"a\":\"\\ud800x\"}", 15, "a"), "\xef\xbf\xbdx"));

    sl_record *record = sl_record_new();
    sl_record_observe(record, "word_len:2");
    sl_record_observe(record, "word_len:9+");
    sl_record_observe(record, "word_len:2");
    sl_record_flag(record, "long_text", 2.0);
    sl_record_flag(record, "odd", 0.1);
    sl_record_flag(record, "long_text", 3.0);
    sl_record_set_int(record, "word_count", 4);
    sl_record_set_string(record, "note", "a \"quote\"\n\x01");
    sl_record_set_number(record, "nan", 0.0 / 0.0);
    sl_record_set_json(record, "accepted", "false");
    sl_record_set_int(record, "word_count", 5);
    size_t out_len = 0;
    char *json = sl_record_finish(record, &out_len);
    CHECK(out_len == strlen(json));
    CHECK(is(json,
             "{\"observation_keys\":[\"word_len:2\",\"word_len:9+\"],"
             "\"weighted_flags\":{\"long_text\":3.0,\"odd\":0.1},\"accepted\":true,"
             "\"word_count\":5,\"note\":\"a \\\"quote\\\"\\n\\u0001\",\"nan\":null}"));
    record = sl_record_new();
    sl_record_accept(record, false);
    CHECK(is(sl_record_finish(record, NULL),
             "{\"observation_keys\":[],\"weighted_flags\":{},\"accepted\":false}"));

    sl_error error = sl_invalid_item("item %s has no text", "x");
    CHECK(strcmp(error.kind, "invalid-item") == 0 && !error.retryable);
    CHECK(strcmp(error.message, "item x has no text") == 0);
    sl_error_free(&error);
    CHECK(sl_utf8_chars("caf\xc3\xa9", 5) == 4);
    CHECK(is(sl_json_quote("\\"), "\"\\\\\""));
    /* Numbers as serde_json 1 writes an f64 (checked against it). */
    const double numbers[] = {2.0,   0.1,    -1.5,   1e20,        1.5e-7, 123456.789,
                              0.0,   100.0,  1e15,   1e16,        0.00001, 1e-6,
                              -0.25, 1.0 / 3};
    const char *spelled[] = {"2.0",   "0.1",     "-1.5",   "1e+20", "1.5e-7", "123456.789",
                             "0.0",   "100.0",   "1000000000000000.0", "1e+16", "0.00001",
                             "1e-6",  "-0.25",   "0.3333333333333333"};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
        sl_record *r = sl_record_new();
        sl_record_set_number(r, "x", numbers[i]);
        char want[96];
        snprintf(want, sizeof want,
                 "{\"observation_keys\":[],\"weighted_flags\":{},\"accepted\":true,\"x\":%s}",
                 spelled[i]);
        CHECK(is(sl_record_finish(r, NULL), want));
    }
    /* State as bytes: what is written reads back, in order; a short or
     * altered encoding fails once and for all. */
    sl_bytes state = {0};
    sl_bytes_put_u64(&state, 0x0102030405060708ULL);
    sl_bytes_put_string(&state, "seed \xc3\xa9");
    sl_bytes_put_string(&state, "");
    CHECK(state.len == 8 + 8 + 7 + 8);
    CHECK(state.ptr[0] == 0x08 && state.ptr[7] == 0x01);
    sl_reader in = sl_reader_new(state.ptr, state.len);
    CHECK(sl_read_u64(&in) == 0x0102030405060708ULL);
    CHECK(is(sl_read_string(&in), "seed \xc3\xa9"));
    CHECK(!sl_reader_done(&in));
    CHECK(is(sl_read_string(&in), ""));
    CHECK(sl_reader_done(&in));
    CHECK(sl_read_u64(&in) == 0 && in.failed && !sl_reader_done(&in));
    sl_reader cut = sl_reader_new(state.ptr, 8 + 8 + 3); /* the first string cut short */
    sl_read_u64(&cut);
    CHECK(sl_read_string(&cut) == NULL && cut.failed);
    CHECK(sl_read_string(&cut) == NULL);
    state.ptr[16] = 0; /* a NUL inside the first string */
    sl_reader nul = sl_reader_new(state.ptr, state.len);
    sl_read_u64(&nul);
    CHECK(sl_read_string(&nul) == NULL && !sl_reader_done(&nul));
    sl_reader empty = sl_reader_new(NULL, 0);
    CHECK(sl_reader_done(&empty) && sl_read_u64(&empty) == 0 && empty.failed);
    /* FNV-1a 64 of "a" is af63dc4c8601ec8c; of nothing, the offset basis. */
    CHECK(is(sl_state_digest((const uint8_t *)"a", 1), "fnv1a64:af63dc4c8601ec8c"));
    CHECK(is(sl_state_digest(NULL, 0), "fnv1a64:cbf29ce484222325"));
    sl_bytes_free(&state);
    CHECK(state.ptr == NULL && state.len == 0);

    printf("sandloop.c: %d checks passed\n", checks);
    return 0;
}
