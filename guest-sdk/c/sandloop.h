/*
 * sandloop.h: what every C adapter needs around the generated bindings.
 *
 * The host hands an adapter JSON text (an item, a seed) and takes JSON text
 * back (a record). This helper reads fields of the item, builds a record
 * (observation keys, weighted flags, `accepted`, private fields) and makes
 * the adapter's declared errors. It depends on libc alone, knows nothing of
 * the WIT world, and is plain C99, so Zig (`@cImport`), C++ and anything
 * else with a C ABI can use it as it is.
 *
 * Memory: every `char *` returned is allocated with malloc and is the
 * caller's to free; every `const char *` argument is copied.
 */
#ifndef SANDLOOP_H
#define SANDLOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Reading an item --------------------------------------------------- */

/*
 * The string at top-level key `key` of the JSON object `json` (`len`
 * bytes, not necessarily NUL-terminated), unescaped to UTF-8 and
 * NUL-terminated, or NULL when the key is missing, is not a string, or the
 * text is not a JSON object.
 */
char *sl_get_string(const char *json, size_t len, const char *key);

/* The number at `key` into `*out`; false when missing or not a number. */
bool sl_get_number(const char *json, size_t len, const char *key, double *out);

/* The boolean at `key` into `*out`; false when missing or not a boolean. */
bool sl_get_bool(const char *json, size_t len, const char *key, bool *out);

/*
 * The raw JSON text of the value at `key` (an object, an array, anything),
 * NUL-terminated, or NULL when missing.
 */
char *sl_get_json(const char *json, size_t len, const char *key);

/* ---- Building a record -------------------------------------------------- */

/*
 * A record under construction. `sl_record_new` starts it as
 * {"observation_keys": [], "weighted_flags": {}, "accepted": true}.
 */
typedef struct sl_record sl_record;

sl_record *sl_record_new(void);

/* Adds observation key `key` (the novelty currency), once: a key already
 * observed is not added again. */
void sl_record_observe(sl_record *record, const char *key);

/* Sets weighted flag `name` to `weight` (credited once per family). */
void sl_record_flag(sl_record *record, const char *name, double weight);

/* Sets `accepted`. */
void sl_record_accept(sl_record *record, bool accepted);

/* Sets a private field (kept in the record, unread by the host); a second
 * call with the same key replaces the value. `sl_record_set_json` takes
 * JSON text as it is. */
void sl_record_set_int(sl_record *record, const char *key, long long value);
void sl_record_set_number(sl_record *record, const char *key, double value);
void sl_record_set_string(sl_record *record, const char *key, const char *value);
void sl_record_set_json(sl_record *record, const char *key, const char *json);

/* The record as JSON text (NUL-terminated; its length in `*len` when
 * `len` is not NULL), and the record freed. */
char *sl_record_finish(sl_record *record, size_t *len);

/* Frees a record that will not be finished. */
void sl_record_free(sl_record *record);

/* ---- Errors --------------------------------------------------------------- */

/*
 * An error the adapter reports on purpose: the host records it as
 * `adapter_error.type = "adapter_error"` with this `kind` and message (its
 * first 240 characters), and the run goes on. A crash (`abort`, a failed
 * `assert`, `SL_PANIC`) is a trap instead, classified by the host.
 */
typedef struct sl_error {
    char *kind;
    char *message;
    bool retryable;
} sl_error;

/* An error of `kind` with a printf-style message. */
sl_error sl_error_new(const char *kind, bool retryable, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* The usual kinds. */
#define sl_invalid_item(...) sl_error_new("invalid-item", false, __VA_ARGS__)
#define sl_retryable(...) sl_error_new("retryable", true, __VA_ARGS__)

/* Frees an error's strings. */
void sl_error_free(sl_error *error);

/*
 * Stops the call with a message naming this file and line on stderr
 * (`adapter.c:42: panic: ...`), then traps: the host puts that line in the
 * record's `adapter_error.message`.
 */
#define SL_PANIC(...) sl_panic_at(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void sl_panic_at(const char *file, int line, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- State as bytes (replay points) --------------------------------------- */

/*
 * A replay point's state leaves the instance as bytes
 * (`export-replay-state`) and comes back in another instance or process
 * (`import-replay-state`). These write and read a simple encoding: unsigned
 * integers as 8 bytes little-endian, strings as their length (8 bytes) then
 * their UTF-8 bytes. The adapter chooses the fields and their order.
 */
typedef struct sl_bytes {
    uint8_t *ptr;
    size_t len, cap;
} sl_bytes;

/* Appends `value` as 8 bytes, little-endian. */
void sl_bytes_put_u64(sl_bytes *out, uint64_t value);

/* Appends `text`'s length (as `sl_bytes_put_u64`) and its bytes. */
void sl_bytes_put_string(sl_bytes *out, const char *text);

/* Frees the bytes (the struct itself is the caller's). */
void sl_bytes_free(sl_bytes *bytes);

/*
 * Reads what `sl_bytes_put_*` wrote, in the same order. A read past the
 * end, or a string holding a NUL byte, sets `failed` and returns 0 or NULL;
 * every later read fails too, so a decoder checks once, at the end, with
 * `sl_reader_done`.
 */
typedef struct sl_reader {
    const uint8_t *ptr;
    size_t len, at;
    bool failed;
} sl_reader;

sl_reader sl_reader_new(const uint8_t *ptr, size_t len);
uint64_t sl_read_u64(sl_reader *in);
/* A malloc'd NUL-terminated copy, or NULL (and `failed`). */
char *sl_read_string(sl_reader *in);
/* True when every read succeeded and every byte was read. */
bool sl_reader_done(const sl_reader *in);

/*
 * The projection digest of state bytes: "fnv1a64:" and 16 lowercase hex
 * digits of their FNV-1a 64-bit hash. It tells a faithful copy from a
 * corrupted one; it is not a cryptographic hash.
 */
char *sl_state_digest(const uint8_t *ptr, size_t len);

/* ---- Text ------------------------------------------------------------------ */

/* `text` as a JSON string literal, quotes included. */
char *sl_json_quote(const char *text);

/* The number of Unicode characters (code points) in UTF-8 `text` of `len`
 * bytes. */
size_t sl_utf8_chars(const char *text, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SANDLOOP_H */
