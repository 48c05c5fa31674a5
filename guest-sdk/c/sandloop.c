/* sandloop.c: see sandloop.h. Plain C99 over libc. */
#include "sandloop.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- A growable text buffer ---------------------------------------------- */

typedef struct {
    char *ptr;
    size_t len, cap;
} buf;

static void *checked(void *ptr) {
    if (ptr == NULL) {
        fputs("sandloop.c: out of memory\n", stderr);
        abort();
    }
    return ptr;
}

/* `ptr` (an allocation of `*cap` bytes) grown, by doubling, to hold at
 * least `need` bytes; `*cap` updated. */
static void *grown(void *ptr, size_t *cap, size_t need) {
    if (need <= *cap) return ptr;
    size_t next = *cap ? *cap * 2 : 64;
    while (next < need) next *= 2;
    *cap = next;
    return checked(realloc(ptr, next));
}

static void buf_reserve(buf *b, size_t more) { b->ptr = grown(b->ptr, &b->cap, b->len + more + 1); }

static void buf_put(buf *b, const char *text, size_t len) {
    buf_reserve(b, len);
    memcpy(b->ptr + b->len, text, len);
    b->len += len;
    b->ptr[b->len] = '\0';
}

static void buf_puts(buf *b, const char *text) { buf_put(b, text, strlen(text)); }

static void buf_putc(buf *b, char c) { buf_put(b, &c, 1); }

static char *copy_text(const char *text, size_t len) {
    char *out = checked(malloc(len + 1));
    memcpy(out, text, len);
    out[len] = '\0';
    return out;
}

/* ---- JSON text ------------------------------------------------------------ */

static void put_quoted(buf *b, const char *text) {
    buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\r': buf_puts(b, "\\r"); break;
        case '\t': buf_puts(b, "\\t"); break;
        default:
            if (*p < 0x20) {
                char escaped[8];
                snprintf(escaped, sizeof escaped, "\\u%04x", *p);
                buf_puts(b, escaped);
            } else {
                buf_putc(b, (char)*p);
            }
        }
    }
    buf_putc(b, '"');
}

char *sl_json_quote(const char *text) {
    buf b = {0};
    put_quoted(&b, text);
    return b.ptr;
}

/* A double as JSON, spelled as serde_json (ryu) spells an f64, so C and
 * Rust adapters write the same bytes: the fewest digits that read back the
 * same value, in decimal (`.0` after a whole number) when the exponent is
 * from -5 to 15, else as `1.5e-7`, `1e+20`; NaN and the infinities, which
 * JSON lacks, as null. */
static void put_number(buf *b, double value) {
    if (!isfinite(value)) {
        buf_puts(b, "null");
        return;
    }
    char sci[40];
    int precision = 1;
    for (; precision <= 17; precision++) {
        snprintf(sci, sizeof sci, "%.*e", precision - 1, value);
        if (strtod(sci, NULL) == value) break;
    }
    /* sci is [-]d[.ddd]e±XX: split it into sign, digits and exponent. */
    const char *p = sci;
    bool negative = *p == '-';
    if (negative) p++;
    char digits[24];
    size_t count = 0;
    for (; *p != 'e'; p++)
        if (*p != '.') digits[count++] = *p;
    while (count > 1 && digits[count - 1] == '0') count--;
    int exponent = atoi(p + 1);
    if (value == 0.0) exponent = 0;

    char out[64];
    size_t n = 0;
    if (negative) out[n++] = '-';
    if (exponent >= 0 && exponent <= 15) {
        for (int i = 0; i <= exponent; i++) out[n++] = (size_t)i < count ? digits[i] : '0';
        out[n++] = '.';
        if ((size_t)exponent + 1 < count) {
            for (size_t i = (size_t)exponent + 1; i < count; i++) out[n++] = digits[i];
        } else {
            out[n++] = '0';
        }
    } else if (exponent < 0 && exponent >= -5) {
        out[n++] = '0';
        out[n++] = '.';
        for (int i = -1; i > exponent; i--) out[n++] = '0';
        for (size_t i = 0; i < count; i++) out[n++] = digits[i];
    } else {
        out[n++] = digits[0];
        if (count > 1) {
            out[n++] = '.';
            for (size_t i = 1; i < count; i++) out[n++] = digits[i];
        }
        n += (size_t)snprintf(out + n, sizeof out - n, exponent > 0 ? "e+%d" : "e%d", exponent);
    }
    out[n] = '\0';
    buf_puts(b, out);
}

/* A cursor over JSON text. */
typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Past one string (at its opening quote); false when unterminated. */
static bool skip_string(cursor *c) {
    c->p++;
    while (c->p < c->end) {
        if (*c->p == '\\') {
            c->p += 2;
        } else if (*c->p == '"') {
            c->p++;
            return true;
        } else {
            c->p++;
        }
    }
    return false;
}

/* Past one value of any kind; false on malformed text. */
static bool skip_value(cursor *c) {
    skip_ws(c);
    if (c->p >= c->end) return false;
    if (*c->p == '"') return skip_string(c);
    if (*c->p == '{' || *c->p == '[') {
        int depth = 0;
        while (c->p < c->end) {
            char ch = *c->p;
            if (ch == '"') {
                if (!skip_string(c)) return false;
                continue;
            }
            if (ch == '{' || ch == '[') depth++;
            if (ch == '}' || ch == ']') {
                depth--;
                if (depth == 0) {
                    c->p++;
                    return true;
                }
            }
            c->p++;
        }
        return false;
    }
    const char *start = c->p;
    while (c->p < c->end && !strchr(",}] \t\r\n", *c->p)) c->p++;
    return c->p > start;
}

/* Appends code point `cp` as UTF-8. */
static void put_utf8(buf *b, uint32_t cp) {
    char out[4];
    size_t n;
    if (cp < 0x80) {
        out[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)), out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        out[0] = (char)(0xF0 | (cp >> 18)), out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    }
    buf_put(b, out, n);
}

static bool hex4(const char *p, const char *end, uint32_t *out) {
    if (end - p < 4) return false;
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        value <<= 4;
        if (ch >= '0' && ch <= '9') value |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') value |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') value |= (uint32_t)(ch - 'A' + 10);
        else return false;
    }
    *out = value;
    return true;
}

/* The string literal spanning [p, end) (quotes included), unescaped; NULL
 * when malformed. */
static char *unescape(const char *p, const char *end) {
    buf b = {0};
    buf_reserve(&b, (size_t)(end - p));
    b.ptr[0] = '\0';
    for (p++, end--; p < end; p++) {
        if (*p != '\\') {
            buf_putc(&b, *p);
            continue;
        }
        if (++p >= end) goto bad;
        switch (*p) {
        case '"': buf_putc(&b, '"'); break;
        case '\\': buf_putc(&b, '\\'); break;
        case '/': buf_putc(&b, '/'); break;
        case 'b': buf_putc(&b, '\b'); break;
        case 'f': buf_putc(&b, '\f'); break;
        case 'n': buf_putc(&b, '\n'); break;
        case 'r': buf_putc(&b, '\r'); break;
        case 't': buf_putc(&b, '\t'); break;
        case 'u': {
            uint32_t cp;
            if (!hex4(p + 1, end, &cp)) goto bad;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t low;
                if (end - p >= 7 && p[1] == '\\' && p[2] == 'u' && hex4(p + 3, end, &low) &&
                    low >= 0xDC00 && low < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            put_utf8(&b, cp);
            break;
        }
        default: goto bad;
        }
    }
    return b.ptr;
bad:
    free(b.ptr);
    return NULL;
}

/* The span of the value at top-level `key` of object `json`. */
static bool find_value(const char *json, size_t len, const char *key, const char **start,
                       const char **stop) {
    if (json == NULL || key == NULL) return false;
    cursor c = {json, json + len};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return false;
    c.p++;
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') return false;
        if (c.p >= c.end || *c.p != '"') return false;
        const char *key_start = c.p;
        if (!skip_string(&c)) return false;
        char *name = unescape(key_start, c.p);
        bool wanted = name != NULL && strcmp(name, key) == 0;
        free(name);
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return false;
        c.p++;
        skip_ws(&c);
        const char *value = c.p;
        if (!skip_value(&c)) return false;
        if (wanted) {
            *start = value;
            *stop = c.p;
            return true;
        }
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        return false;
    }
}

char *sl_get_string(const char *json, size_t len, const char *key) {
    const char *start, *stop;
    if (!find_value(json, len, key, &start, &stop) || *start != '"') return NULL;
    return unescape(start, stop);
}

bool sl_get_number(const char *json, size_t len, const char *key, double *out) {
    const char *start, *stop;
    if (!find_value(json, len, key, &start, &stop)) return false;
    if (!(*start == '-' || (*start >= '0' && *start <= '9'))) return false;
    char *text = copy_text(start, (size_t)(stop - start));
    char *rest;
    double value = strtod(text, &rest);
    bool whole = *rest == '\0';
    free(text);
    if (whole) *out = value;
    return whole;
}

bool sl_get_bool(const char *json, size_t len, const char *key, bool *out) {
    const char *start, *stop;
    if (!find_value(json, len, key, &start, &stop)) return false;
    size_t n = (size_t)(stop - start);
    if (n == 4 && memcmp(start, "true", 4) == 0) return (*out = true), true;
    if (n == 5 && memcmp(start, "false", 5) == 0) return (*out = false), true;
    return false;
}

char *sl_get_json(const char *json, size_t len, const char *key) {
    const char *start, *stop;
    if (!find_value(json, len, key, &start, &stop)) return NULL;
    return copy_text(start, (size_t)(stop - start));
}

size_t sl_utf8_chars(const char *text, size_t len) {
    size_t chars = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)text[i] & 0xC0) != 0x80) chars++;
    return chars;
}

/* ---- Records ------------------------------------------------------------- */

typedef struct {
    char *key;
    char *json; /* the value as JSON text */
} field;

struct sl_record {
    char **keys;
    size_t key_count, key_cap;
    field *flags, *fields;
    size_t flag_count, flag_cap, field_count, field_cap;
    bool accepted;
};

sl_record *sl_record_new(void) {
    sl_record *record = checked(calloc(1, sizeof *record));
    record->accepted = true;
    return record;
}

void sl_record_observe(sl_record *record, const char *key) {
    for (size_t i = 0; i < record->key_count; i++)
        if (strcmp(record->keys[i], key) == 0) return;
    if (record->key_count == record->key_cap) {
        record->key_cap = record->key_cap ? record->key_cap * 2 : 8;
        record->keys = checked(realloc(record->keys, record->key_cap * sizeof *record->keys));
    }
    record->keys[record->key_count++] = copy_text(key, strlen(key));
}

/* Sets `key` to `json` in the list, replacing an earlier value. */
static void set_field(field **list, size_t *count, size_t *cap, const char *key, char *json) {
    for (size_t i = 0; i < *count; i++) {
        if (strcmp((*list)[i].key, key) == 0) {
            free((*list)[i].json);
            (*list)[i].json = json;
            return;
        }
    }
    if (*count == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        *list = checked(realloc(*list, *cap * sizeof **list));
    }
    (*list)[*count].key = copy_text(key, strlen(key));
    (*list)[*count].json = json;
    (*count)++;
}

static char *number_text(double value) {
    buf b = {0};
    put_number(&b, value);
    return b.ptr;
}

void sl_record_flag(sl_record *record, const char *name, double weight) {
    set_field(&record->flags, &record->flag_count, &record->flag_cap, name, number_text(weight));
}

void sl_record_accept(sl_record *record, bool accepted) { record->accepted = accepted; }

/* The three keys the builder writes itself are not private fields. */
static bool reserved(const char *key) {
    return strcmp(key, "observation_keys") == 0 || strcmp(key, "weighted_flags") == 0 ||
           strcmp(key, "accepted") == 0;
}

void sl_record_set_json(sl_record *record, const char *key, const char *json) {
    if (reserved(key)) return;
    set_field(&record->fields, &record->field_count, &record->field_cap, key,
              copy_text(json, strlen(json)));
}

void sl_record_set_int(sl_record *record, const char *key, long long value) {
    char text[32];
    snprintf(text, sizeof text, "%lld", value);
    sl_record_set_json(record, key, text);
}

void sl_record_set_number(sl_record *record, const char *key, double value) {
    char *text = number_text(value);
    sl_record_set_json(record, key, text);
    free(text);
}

void sl_record_set_string(sl_record *record, const char *key, const char *value) {
    char *text = sl_json_quote(value);
    sl_record_set_json(record, key, text);
    free(text);
}

char *sl_record_finish(sl_record *record, size_t *len) {
    buf b = {0};
    buf_puts(&b, "{\"observation_keys\":[");
    for (size_t i = 0; i < record->key_count; i++) {
        if (i) buf_putc(&b, ',');
        put_quoted(&b, record->keys[i]);
    }
    buf_puts(&b, "],\"weighted_flags\":{");
    for (size_t i = 0; i < record->flag_count; i++) {
        if (i) buf_putc(&b, ',');
        put_quoted(&b, record->flags[i].key);
        buf_putc(&b, ':');
        buf_puts(&b, record->flags[i].json);
    }
    buf_puts(&b, "},\"accepted\":");
    buf_puts(&b, record->accepted ? "true" : "false");
    for (size_t i = 0; i < record->field_count; i++) {
        buf_putc(&b, ',');
        put_quoted(&b, record->fields[i].key);
        buf_putc(&b, ':');
        buf_puts(&b, record->fields[i].json);
    }
    buf_putc(&b, '}');
    sl_record_free(record);
    if (len) *len = b.len;
    return b.ptr;
}

static void free_fields(field *list, size_t count) {
    for (size_t i = 0; i < count; i++) {
        free(list[i].key);
        free(list[i].json);
    }
    free(list);
}

void sl_record_free(sl_record *record) {
    if (record == NULL) return;
    for (size_t i = 0; i < record->key_count; i++) free(record->keys[i]);
    free(record->keys);
    free_fields(record->flags, record->flag_count);
    free_fields(record->fields, record->field_count);
    free(record);
}

/* ---- Errors ------------------------------------------------------------- */

static char *vformat(const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    char *text = checked(malloc(n < 0 ? 1 : (size_t)n + 1));
    if (n < 0) text[0] = '\0';
    else vsnprintf(text, (size_t)n + 1, format, again);
    va_end(again);
    return text;
}

sl_error sl_error_new(const char *kind, bool retryable, const char *format, ...) {
    va_list args;
    va_start(args, format);
    sl_error error = {copy_text(kind, strlen(kind)), vformat(format, args), retryable};
    va_end(args);
    return error;
}

void sl_error_free(sl_error *error) {
    free(error->kind);
    free(error->message);
    error->kind = error->message = NULL;
}

_Noreturn void sl_panic_at(const char *file, int line, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *message = vformat(format, args);
    va_end(args);
    const char *base = strrchr(file, '/');
    fprintf(stderr, "%s:%d: panic: %s\n", base ? base + 1 : file, line, message);
    fflush(stderr);
    abort();
}

/* ---- State as bytes ---------------------------------------------------------- */

static void bytes_put(sl_bytes *out, const void *data, size_t len) {
    out->ptr = grown(out->ptr, &out->cap, out->len + len);
    if (len) memcpy(out->ptr + out->len, data, len);
    out->len += len;
}

void sl_bytes_put_u64(sl_bytes *out, uint64_t value) {
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(value >> (8 * i));
    bytes_put(out, le, sizeof le);
}

void sl_bytes_put_string(sl_bytes *out, const char *text) {
    size_t len = strlen(text);
    sl_bytes_put_u64(out, len);
    bytes_put(out, text, len);
}

void sl_bytes_free(sl_bytes *bytes) {
    free(bytes->ptr);
    bytes->ptr = NULL;
    bytes->len = bytes->cap = 0;
}

sl_reader sl_reader_new(const uint8_t *ptr, size_t len) {
    sl_reader in = {ptr, len, 0, false};
    return in;
}

uint64_t sl_read_u64(sl_reader *in) {
    if (in->failed || in->len - in->at < 8) {
        in->failed = true;
        return 0;
    }
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) value |= (uint64_t)in->ptr[in->at + i] << (8 * i);
    in->at += 8;
    return value;
}

char *sl_read_string(sl_reader *in) {
    uint64_t len = sl_read_u64(in);
    if (in->failed || len > in->len - in->at ||
        (len > 0 && memchr(in->ptr + in->at, 0, (size_t)len) != NULL)) {
        in->failed = true;
        return NULL;
    }
    if (len == 0) return copy_text("", 0);
    char *text = copy_text((const char *)in->ptr + in->at, (size_t)len);
    in->at += (size_t)len;
    return text;
}

bool sl_reader_done(const sl_reader *in) { return !in->failed && in->at == in->len; }

char *sl_state_digest(const uint8_t *ptr, size_t len) {
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        hash ^= ptr[i];
        hash *= 0x100000001b3ULL;
    }
    char *text = checked(malloc(8 + 16 + 1));
    snprintf(text, 8 + 16 + 1, "fnv1a64:%016llx", (unsigned long long)hash);
    return text;
}
