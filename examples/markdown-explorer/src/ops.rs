//! Variant ops: deterministic text mutations named by a catalog spec's
//! `ops` list. Each op is either a bare name (`"strip_headings"`) or an
//! object `{"op": NAME, ...parameters}`:
//!
//! | op | parameters | effect |
//! |---|---|---|
//! | `truncate` | `fraction` (0..=1, default 0.5) | keep the first fraction of the bytes |
//! | `nest_lists` | `depth` (1..=32, default 4) | re-indent list items into a staircase `depth` levels deep (appends one if the document has no list) |
//! | `break_fences` | `count` (optional) | drop the closing line of the first `count` (default: every) fenced code block |
//! | `strip_headings` | — | turn ATX and setext headings into plain lines |
//! | `duplicate` | `times` (1..=16, default 2) | repeat the whole document |
//! | `inject_html` | `html` (optional) | insert a raw HTML block after the first line and an inline tag at the end |

use sandloop_guest::{Error, Value};

/// Largest variant text an op may produce.
pub const MAX_VARIANT_BYTES: usize = 4 << 20;

const DEFAULT_HTML: &str =
    "<div class=\"sandloop-injected\">\n<script>alert('injected')</script>\n</div>";

/// One parsed op.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Keep the first `fraction` of the bytes.
    Truncate(f64),
    /// Staircase list nesting, `depth` levels.
    NestLists(usize),
    /// Drop closing fences (all when `None`).
    BreakFences(Option<usize>),
    /// Remove heading markers.
    StripHeadings,
    /// Repeat the document `times` times.
    Duplicate(usize),
    /// Insert raw HTML.
    InjectHtml(String),
}

fn number(op: &serde_json::Map<String, Value>, key: &str) -> Result<Option<f64>, Error> {
    match op.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| Error::invalid_spec(format!("op parameter `{key}` must be a number"))),
    }
}

fn count_in(
    op: &serde_json::Map<String, Value>,
    key: &str,
    default: usize,
    max: usize,
) -> Result<usize, Error> {
    match number(op, key)? {
        None => Ok(default),
        Some(n) if n.fract() == 0.0 && n >= 1.0 && n <= max as f64 => Ok(n as usize),
        Some(n) => Err(Error::invalid_spec(format!(
            "op parameter `{key}` must be an integer in 1..={max}, got {n}"
        ))),
    }
}

impl Op {
    /// Parse one entry of a spec's `ops`.
    pub fn parse(value: &Value) -> Result<Op, Error> {
        let empty = serde_json::Map::new();
        let (name, params) = match value {
            Value::String(name) => (name.as_str(), &empty),
            Value::Object(map) => match map.get("op").and_then(Value::as_str) {
                Some(name) => (name, map),
                None => return Err(Error::invalid_spec("op object needs a string `op` field")),
            },
            _ => return Err(Error::invalid_spec("an op is a name or an object")),
        };
        Ok(match name {
            "truncate" => {
                let fraction = number(params, "fraction")?.unwrap_or(0.5);
                if !(0.0..=1.0).contains(&fraction) {
                    return Err(Error::invalid_spec(
                        "truncate fraction must be within 0..=1",
                    ));
                }
                Op::Truncate(fraction)
            }
            "nest_lists" => Op::NestLists(count_in(params, "depth", 4, 32)?),
            "break_fences" => Op::BreakFences(match params.get("count") {
                None | Some(Value::Null) => None,
                Some(_) => Some(count_in(params, "count", 1, usize::MAX >> 1)?),
            }),
            "strip_headings" => Op::StripHeadings,
            "duplicate" => Op::Duplicate(count_in(params, "times", 2, 16)?),
            "inject_html" => {
                let html = match params.get("html") {
                    None | Some(Value::Null) => DEFAULT_HTML.to_owned(),
                    Some(Value::String(html)) if html.len() <= 4096 => html.clone(),
                    Some(_) => {
                        return Err(Error::invalid_spec(
                            "inject_html `html` must be a string of at most 4096 bytes",
                        ));
                    }
                };
                Op::InjectHtml(html)
            }
            other => return Err(Error::invalid_spec(format!("unknown op `{other}`"))),
        })
    }

    /// Parse a spec's whole `ops` list (an empty list is allowed: the
    /// variant then re-runs the seed under its own key prefix).
    pub fn parse_all(ops: &[Value]) -> Result<Vec<Op>, Error> {
        ops.iter().map(Op::parse).collect()
    }

    /// The op's name.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Truncate(_) => "truncate",
            Op::NestLists(_) => "nest_lists",
            Op::BreakFences(_) => "break_fences",
            Op::StripHeadings => "strip_headings",
            Op::Duplicate(_) => "duplicate",
            Op::InjectHtml(_) => "inject_html",
        }
    }

    /// Apply the op to `text`.
    pub fn apply(&self, text: &str) -> Result<String, Error> {
        let out = match self {
            Op::Truncate(fraction) => truncate(text, *fraction),
            Op::NestLists(depth) => nest_lists(text, *depth),
            Op::BreakFences(count) => break_fences(text, *count),
            Op::StripHeadings => strip_headings(text),
            Op::Duplicate(times) => {
                if text.len().saturating_mul(*times) > MAX_VARIANT_BYTES {
                    return Err(too_large());
                }
                let mut body = text.to_owned();
                if !body.ends_with('\n') {
                    body.push('\n');
                }
                vec![body; *times].join("\n")
            }
            Op::InjectHtml(html) => inject_html(text, html),
        };
        if out.len() > MAX_VARIANT_BYTES {
            return Err(too_large());
        }
        Ok(out)
    }
}

fn too_large() -> Error {
    Error::new(
        "variant-too-large",
        format!("variant text would exceed {MAX_VARIANT_BYTES} bytes"),
    )
}

/// Apply every op in order.
pub fn apply_all(ops: &[Op], text: &str) -> Result<String, Error> {
    let mut current = text.to_owned();
    for op in ops {
        current = op.apply(&current)?;
    }
    Ok(current)
}

fn truncate(text: &str, fraction: f64) -> String {
    let mut end = ((text.len() as f64) * fraction).floor() as usize;
    end = end.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Tracks fenced code blocks line by line (CommonMark's rule, simplified:
/// any indentation, blockquote markers ignored).
#[derive(Default)]
struct Fences {
    open: Option<(char, usize)>,
}

enum FenceLine {
    Open,
    Close,
    Inside,
    Outside,
}

impl Fences {
    fn classify(&mut self, line: &str) -> FenceLine {
        let body = line.trim_start();
        let first = body.chars().next();
        let run = |c: char| body.chars().take_while(|x| *x == c).count();
        match self.open {
            Some((fence, width)) => {
                if first == Some(fence)
                    && run(fence) >= width
                    && body.trim_end().chars().all(|c| c == fence)
                {
                    self.open = None;
                    FenceLine::Close
                } else {
                    FenceLine::Inside
                }
            }
            None => match first {
                Some(fence @ ('`' | '~')) if run(fence) >= 3 => {
                    let info = &body[run(fence)..];
                    if fence == '`' && info.contains('`') {
                        return FenceLine::Outside;
                    }
                    self.open = Some((fence, run(fence)));
                    FenceLine::Open
                }
                _ => FenceLine::Outside,
            },
        }
    }
}

fn break_fences(text: &str, count: Option<usize>) -> String {
    let mut fences = Fences::default();
    let mut dropped = 0usize;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if let FenceLine::Close = fences.classify(line)
            && count.is_none_or(|limit| dropped < limit)
        {
            dropped += 1;
            continue;
        }
        out.push_str(line);
    }
    out
}

/// `(marker, rest)` of a list item line (thematic breaks excluded).
fn list_item(line: &str) -> Option<(&str, &str)> {
    let body = line.trim_start();
    if body
        .trim_end()
        .chars()
        .all(|c| matches!(c, '*' | '-' | '_' | ' ' | '\t'))
    {
        return None;
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = body.strip_prefix(bullet) {
            return Some((&bullet[..1], rest));
        }
    }
    let digits = body.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let rest = &body[digits..];
        for delim in [". ", ") "] {
            if let Some(rest) = rest.strip_prefix(delim) {
                return Some((&body[..digits + 1], rest));
            }
        }
    }
    None
}

fn nest_lists(text: &str, depth: usize) -> String {
    let mut fences = Fences::default();
    let mut out = String::with_capacity(text.len() * 2);
    let mut run = 0usize; // position of the item within its list run
    let mut any = false;
    for line in text.split_inclusive('\n') {
        let inside = matches!(
            fences.classify(line),
            FenceLine::Open | FenceLine::Close | FenceLine::Inside
        );
        match (inside, list_item(line)) {
            (false, Some((marker, rest))) => {
                any = true;
                let level = run.min(depth);
                out.push_str(&" ".repeat(4 * level));
                out.push_str(marker);
                out.push(' ');
                out.push_str(rest);
                run += 1;
            }
            _ => {
                if !inside && !line.trim().is_empty() && !line.starts_with([' ', '\t']) {
                    run = 0;
                }
                out.push_str(line);
            }
        }
    }
    if !any {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        for level in 0..=depth {
            out.push_str(&" ".repeat(4 * level));
            out.push_str(&format!("- level {level}\n"));
        }
    }
    out
}

fn strip_headings(text: &str) -> String {
    let mut fences = Fences::default();
    let mut out = String::with_capacity(text.len());
    let mut previous_text = false;
    for line in text.split_inclusive('\n') {
        let kind = fences.classify(line);
        if !matches!(kind, FenceLine::Outside) {
            out.push_str(line);
            previous_text = false;
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = line.trim();
        let hashes = body.chars().take_while(|c| *c == '#').count();
        let newline = if line.ends_with('\n') { "\n" } else { "" };
        if indent <= 3
            && (1..=6).contains(&hashes)
            && (body.len() == hashes || body[hashes..].starts_with([' ', '\t']))
        {
            let content = body[hashes..].trim().trim_end_matches('#').trim_end();
            out.push_str(content);
            out.push_str(newline);
            previous_text = !content.is_empty();
            continue;
        }
        let setext = indent <= 3
            && !body.is_empty()
            && (body.chars().all(|c| c == '=')
                || (body.len() >= 2 && body.chars().all(|c| c == '-')));
        if setext && previous_text {
            previous_text = false;
            continue;
        }
        previous_text = !body.is_empty() && list_item(line).is_none();
        out.push_str(line);
    }
    out
}

fn inject_html(text: &str, html: &str) -> String {
    let (first, rest) = match text.find('\n') {
        Some(at) => text.split_at(at + 1),
        None => (text, ""),
    };
    let mut out = String::with_capacity(text.len() + html.len() + 64);
    out.push_str(first);
    if !first.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(html);
    out.push_str("\n\n");
    out.push_str(rest);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("\nInjected <span data-sandloop=\"inline\">inline html</span>.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use sandloop_guest::json;

    #[test]
    fn parsing() {
        assert_eq!(
            Op::parse(&json!("strip_headings")).unwrap(),
            Op::StripHeadings
        );
        assert_eq!(
            Op::parse(&json!({"op": "truncate", "fraction": 0.25})).unwrap(),
            Op::Truncate(0.25)
        );
        assert_eq!(
            Op::parse(&json!({"op": "duplicate"})).unwrap(),
            Op::Duplicate(2)
        );
        assert_eq!(
            Op::parse(&json!({"op": "break_fences"})).unwrap(),
            Op::BreakFences(None)
        );
        for bad in [
            json!({"op": "explode"}),
            json!({"op": "truncate", "fraction": 2}),
            json!({"op": "duplicate", "times": 1000}),
            json!({"op": "nest_lists", "depth": 1.5}),
            json!(7),
            json!({"fraction": 1}),
        ] {
            assert_eq!(Op::parse(&bad).unwrap_err().kind, "invalid-spec", "{bad}");
        }
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("héllo", 0.3), "h");
        assert_eq!(truncate("abcd", 0.5), "ab");
        assert_eq!(truncate("abcd", 1.0), "abcd");
    }

    #[test]
    fn break_fences_unclose_blocks() {
        let text = "# T\n\n```rust\nx\n```\n\ntext\n";
        let broken = break_fences(text, None);
        assert_eq!(broken, "# T\n\n```rust\nx\n\ntext\n");
        assert!(Analysis::of(&broken).anomalies.contains("unclosed_fence"));
        let two = "```\na\n```\n\n```\nb\n```\n";
        assert_eq!(break_fences(two, Some(1)).matches("```").count(), 3);
    }

    #[test]
    fn strip_headings_removes_all_headings() {
        let text = "# A #\n\nSetext\n======\n\n```\n# not a heading\n```\n\n## B\ntext\n";
        let stripped = strip_headings(text);
        assert!(stripped.contains("# not a heading"));
        let analysis = Analysis::of(&stripped);
        assert!(!analysis.elements.contains_key("heading"), "{stripped}");
    }

    #[test]
    fn nest_lists_builds_a_staircase() {
        let nested = nest_lists("# T\n\n- a\n- b\n- c\n- d\n\npara\n\n1. x\n2. y\n", 2);
        assert!(nested.contains("\n        - c\n        - d\n"), "{nested}");
        assert!(nested.contains("\n1. x\n    2. y\n"), "{nested}");
        assert_eq!(Analysis::of(&nested).max_list_depth, 3);
        let appended = nest_lists("# T\n", 4);
        assert_eq!(Analysis::of(&appended).max_list_depth, 5);
        assert!(
            Analysis::of(&appended)
                .anomalies
                .contains("deep_list_nesting")
        );
    }

    #[test]
    fn duplicate_and_inject() {
        let doubled = Op::Duplicate(2).apply("# A\n").unwrap();
        assert!(
            Analysis::of(&doubled)
                .anomalies
                .contains("duplicate_heading")
        );
        let big = "x".repeat(MAX_VARIANT_BYTES / 2 + 1);
        assert_eq!(
            Op::Duplicate(2).apply(&big).unwrap_err().kind,
            "variant-too-large"
        );
        let injected = inject_html("# A\ntext\n", DEFAULT_HTML);
        let analysis = Analysis::of(&injected);
        assert!(analysis.anomalies.contains("raw_html"));
        assert!(analysis.elements.contains_key("heading"));
    }
}
