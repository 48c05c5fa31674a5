//! Escaping text for the report's HTML and its inline SVG: every string an
//! adapter or a run's files provide goes through [`escape`] before it is
//! written into the page.

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, safe in element content
/// and in quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
