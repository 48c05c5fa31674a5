//! {{name}}: a sandloop adapter in Zig.
//!
//! World `plain` of wit/adapter.wit: the component exports one interface,
//! `sandloop:adapter/episode@0.2.0`, with one function, `execute`. The host
//! calls it once per work item (a JSON object such as
//! {"item_id": "a", "text": "some words"}, one line of items.jsonl) and
//! expects an observation record back (a JSON object).
//!
//! The C bindings of world `plain` (bindings/) and the C helper every
//! adapter uses (sandloop/: item fields, the record, declared errors) come
//! in as the module `c`, which build.sh makes from their headers with
//! `zig translate-c`. `execute` is exported under the name the bindings
//! give it. A panic makes the call trap: the host records a `trap` error
//! record with the line `c.sl_panic_at` printed (`adapter.zig:42: panic: ...`)
//! and goes on with a fresh instance.
const std = @import("std");
const c = @import("c");

const gpa = std.heap.c_allocator;

/// A log line, captured per item into the run directory.
fn logDebug(message: [*:0]const u8) void {
    var text: c.plain_string_t = undefined;
    c.plain_string_set(&text, message);
    c.sandloop_adapter_log_log(c.SANDLOOP_ADAPTER_LOG_LEVEL_DEBUG, &text);
}

/// Hands a declared error to the host: it records an error record with
/// `adapter_error.type = "adapter_error"` and our `kind`; the run goes on.
fn fail(failure: c.sl_error, err: *c.sandloop_adapter_types_adapter_error_t) bool {
    var owned = failure;
    c.plain_string_dup(&err.kind, owned.kind);
    c.plain_string_dup(&err.message, owned.message);
    err.retryable_infra_error = owned.retryable;
    c.sl_error_free(&owned);
    return false;
}

/// A word character: an ASCII letter or digit, or a byte of a non-ASCII
/// UTF-8 character.
fn wordChar(byte: u8) bool {
    return std.ascii.isAlphanumeric(byte) or byte >= 0x80;
}

fn lessThan(_: void, a: []u8, b: []u8) bool {
    return std.mem.order(u8, a, b) == .lt;
}

export fn exports_sandloop_adapter_episode_execute(
    item: *c.sandloop_adapter_types_json_t,
    ctx: *c.sandloop_adapter_types_context_t,
    ret: *c.sandloop_adapter_types_json_t,
    err: *c.sandloop_adapter_types_adapter_error_t,
) bool {
    const json: [*c]const u8 = @ptrCast(item.ptr);
    const item_id: [*c]u8 = c.sl_get_string(json, item.len, "item_id");
    defer c.free(item_id);
    const found: [*c]u8 = c.sl_get_string(json, item.len, "text");
    defer c.free(found);
    const epoch = ctx.epoch;
    c.plain_string_free(item);
    c.sandloop_adapter_types_context_free(ctx);

    const id: [*c]const u8 = if (item_id != null) item_id else "?";
    if (found == null) {
        return fail(c.sl_error_new("invalid-item", false, "item %s has no `text`", id), err);
    }
    const text = std.mem.span(@as([*:0]const u8, @ptrCast(found)));

    var line: [128]u8 = undefined;
    const said = std.mem.printSentinel(&line, "epoch {d}: item {s}, {d} bytes", .{ epoch, std.mem.span(@as([*:0]const u8, @ptrCast(id))), text.len }, 0) catch unreachable;
    logDebug(said.ptr);

    // Observation keys are the novelty currency: the host credits every key
    // the run has not seen before. One per distinct word, lowercased.
    var keys: std.ArrayList([]u8) = .empty;
    defer {
        for (keys.items) |key| gpa.free(key);
        keys.deinit(gpa);
    }
    var i: usize = 0;
    while (i < text.len) {
        while (i < text.len and !wordChar(text[i])) i += 1;
        const start = i;
        while (i < text.len and wordChar(text[i])) i += 1;
        if (i == start) break;
        const key = gpa.allocSentinel(u8, 5 + i - start, 0) catch @panic("out of memory");
        @memcpy(key[0..5], "word:");
        for (text[start..i], key[5..]) |from, *to| to.* = std.ascii.toLower(from);
        keys.append(gpa, key) catch @panic("out of memory");
    }
    std.mem.sort([]u8, keys.items, {}, lessThan);
    const record = c.sl_record_new();
    for (keys.items) |key| c.sl_record_observe(record, @ptrCast(key.ptr));

    // Any other field is the adapter's own and is kept in the record.
    var words: c_longlong = 0;
    var tokens = std.mem.tokenizeAny(u8, text, " \t\n\r\x0b\x0c");
    while (tokens.next()) |_| words += 1;
    c.sl_record_set_int(record, "word_count", words);

    var len: usize = 0;
    const out = c.sl_record_finish(record, &len);
    ret.ptr = @ptrCast(out);
    ret.len = len;
    return true;
}
