//! Cutting text for display: the first characters of a message, a line of
//! guest output or a table cell, with `…` where the rest was left out.

use std::borrow::Cow;

/// `text`'s first `max` characters (not bytes), followed by `…` when it
/// had more; `text` itself when it fits.
pub fn cut_chars(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_count_never_inside_a_character() {
        assert_eq!(cut_chars("short", 5), "short");
        assert_eq!(cut_chars("longer", 5), "longe…");
        assert_eq!(cut_chars("ééééé", 2), "éé…");
        assert_eq!(cut_chars("", 0), "");
        assert_eq!(cut_chars("x", 0), "…");
    }
}
