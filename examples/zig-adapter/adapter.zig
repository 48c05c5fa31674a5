//! zig-adapter: hello-adapter (examples/hello-adapter) in Zig, world `plain`.
//!
//! The generated C bindings of world `plain` and guest-sdk/c (items,
//! records, errors) come in as the module `c`, which build.sh makes from
//! their headers with `zig translate-c` (Zig 0.16 removed `@cImport`);
//! `execute` is exported under the name the bindings give it. Its records
//! are those of the Rust original, byte for byte (the e2e tests compare
//! them).
const std = @import("std");
const c = @import("c");

/// Word-length buckets: 1, 2, 3, 4-5, 6-8, 9+.
fn bucket(chars: usize) [*:0]const u8 {
    return switch (chars) {
        0, 1 => "1",
        2 => "2",
        3 => "3",
        4, 5 => "4-5",
        6, 7, 8 => "6-8",
        else => "9+",
    };
}

fn isSpace(byte: u8) bool {
    return byte == ' ' or byte == '\t' or byte == '\n' or byte == '\r' or byte == 0x0b or byte == 0x0c;
}

/// A log line, captured per item into the run directory.
fn logDebug(message: [*:0]const u8) void {
    var text: c.plain_string_t = undefined;
    c.plain_string_set(&text, message);
    c.sandloop_adapter_log_log(c.SANDLOOP_ADAPTER_LOG_LEVEL_DEBUG, &text);
}

/// Hands `failure` to the host as the call's declared error.
fn fail(failure: c.sl_error, err: *c.sandloop_adapter_types_adapter_error_t) bool {
    var owned = failure;
    c.plain_string_dup(&err.kind, owned.kind);
    c.plain_string_dup(&err.message, owned.message);
    err.retryable_infra_error = owned.retryable;
    c.sl_error_free(&owned);
    return false;
}

export fn exports_sandloop_adapter_episode_execute(
    item: *c.sandloop_adapter_types_json_t,
    ctx: *c.sandloop_adapter_types_context_t,
    ret: *c.sandloop_adapter_types_json_t,
    err: *c.sandloop_adapter_types_adapter_error_t,
) bool {
    const found: [*c]u8 = c.sl_get_string(@ptrCast(item.ptr), item.len, "text");
    const epoch = ctx.epoch;
    c.plain_string_free(item);
    c.sandloop_adapter_types_context_free(ctx);
    defer c.free(found);
    const text: []const u8 = if (found != null) std.mem.span(@as([*:0]const u8, @ptrCast(found))) else "";

    // A declared error: recorded with kind `invalid-item`; the run goes on.
    if (std.mem.trim(u8, text, " \t\n\r\x0b\x0c").len == 0) {
        return fail(c.sl_error_new("invalid-item", false, "item has no text"), err);
    }

    var line: [64]u8 = undefined;
    const said = std.mem.printSentinel(&line, "epoch {d}: {d} bytes of text", .{ epoch, text.len }, 0) catch unreachable;
    logDebug(said.ptr);

    // {"observation_keys": [], "weighted_flags": {}, "accepted": true}
    const record = c.sl_record_new();
    var words: c_longlong = 0;
    var i: usize = 0;
    while (i < text.len) {
        while (i < text.len and isSpace(text[i])) i += 1;
        const start = i;
        while (i < text.len and !isSpace(text[i])) i += 1;
        if (i == start) break;
        words += 1;
        var key: [32]u8 = undefined;
        const chars = c.sl_utf8_chars(@ptrCast(text[start..i].ptr), i - start);
        const name = std.mem.printSentinel(&key, "word_len:{s}", .{bucket(chars)}, 0) catch unreachable;
        c.sl_record_observe(record, name.ptr);
    }
    // A rarer fact can carry a weight: credited once per family.
    if (words > 50) c.sl_record_flag(record, "long_text", 2.0);
    c.sl_record_set_int(record, "word_count", words);
    // A deliberate crash, to show what the host reports.
    if (std.mem.eql(u8, text, "crash")) {
        c.sl_panic_at("adapter.zig", @intCast(@src().line), "asked to crash on '%s'", found);
    }

    var len: usize = 0;
    const json = c.sl_record_finish(record, &len);
    ret.ptr = @ptrCast(json);
    ret.len = len;
    return true;
}
