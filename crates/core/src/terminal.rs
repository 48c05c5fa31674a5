//! Text for a terminal. Strings that an adapter, a workflow plugin, a model
//! or a remote coordinator supplied may hold escape sequences that set the
//! window title, clear the screen or paint fake output
//! (`ESC]0;…BEL`, `ESC[2J`, `ESC[31m`). Everything the CLI prints goes
//! through [`for_terminal`] (or [`one_line`] for a table cell), which
//! writes such characters as visible `\uXXXX` escapes. Files keep the exact
//! text.
//!
//! The escape is JSON's own (`\u001b`), so a JSON document passed through
//! [`for_terminal`] stays valid JSON with the same value: its strings can
//! hold raw DEL, C1 and bidirectional controls (serde_json escapes only
//! C0), and those are the only characters changed there.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as it is: C0 controls (but
/// newline and tab when `keep_layout`), DEL, C1 controls (U+0080–U+009F,
/// which include the one-byte CSI), and the bidirectional formatting
/// characters that reorder what is shown (U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069).
fn unsafe_for_terminal(c: char, keep_layout: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_layout,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn escape(text: &str, keep_layout: bool) -> Cow<'_, str> {
    let Some(first) = text
        .char_indices()
        .find(|(_, c)| unsafe_for_terminal(*c, keep_layout))
        .map(|(at, _)| at)
    else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if unsafe_for_terminal(c, keep_layout) {
            // Every such character is in the Basic Multilingual Plane.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` safe to print: every control character except newline and tab,
/// and every bidirectional formatting character, written as `\uXXXX`.
/// Borrowed when nothing needed escaping.
///
/// ```
/// use sandloop_core::terminal::for_terminal;
/// assert_eq!(for_terminal("ok\n\u{1b}[2J"), "ok\n\\u001b[2J");
/// ```
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// `text` safe to print as one cell of a line: as [`for_terminal`], and
/// newlines and tabs escaped too, so a multi-line reply cannot start a line
/// of its own.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_obeyed() {
        let reply = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mFAKE: all tests passed\r\n";
        let shown = for_terminal(reply);
        assert!(!shown.contains('\u{1b}') && !shown.contains('\u{7}') && !shown.contains('\r'));
        assert_eq!(
            shown,
            "\\u001b]0;owned\\u0007\\u001b[2J\\u001b[31mFAKE: all tests passed\\u000d\n"
        );
        assert_eq!(
            one_line("a\nb\tc"),
            "a\\u000ab\\u0009c",
            "a cell keeps to its line"
        );
    }

    #[test]
    fn c1_del_and_bidi_controls_are_escaped_and_plain_text_is_borrowed() {
        assert_eq!(
            for_terminal("x\u{9b}2Jy\u{7f}\u{202e}z"),
            "x\\u009b2Jy\\u007f\\u202ez"
        );
        assert!(matches!(for_terminal("héllo\twörld ✓\n"), Cow::Borrowed(_)));
        assert!(matches!(one_line("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_through_the_filter_stays_the_same_json() {
        let value = serde_json::json!({"text": "a\u{1b}[2J\u{9b}b\u{202e}c\n", "n": 1});
        let printed = serde_json::to_string_pretty(&value).unwrap();
        let shown = for_terminal(&printed);
        assert!(!shown.contains('\u{9b}') && !shown.contains('\u{202e}'));
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }
}
