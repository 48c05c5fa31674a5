//! The building blocks of the report's pages, shared by the page
//! skeletons (`html.rs`) and their sections (`html_sections.rs`): section
//! headings, tables, number and time cells, and the bar charts of
//! per-category values.

use std::fmt::Write;

use serde_json::Value;

use super::escape::escape;
use super::svg::{Axis, COLORS, Series, bar_chart, hbar_chart, short_number};

/// A section heading with its one-line explanation.
pub(super) fn section(out: &mut String, id: &str, title: &str, explain: &str) {
    let _ = writeln!(
        out,
        "<h2 id=\"{id}\">{}</h2><p class=\"explain\">{}</p>",
        escape(title),
        escape(explain)
    );
}

/// A table: header cells (a leading `#` marks a numeric column) and rows
/// of already-escaped cells.
pub(super) fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    out.push_str("<table><tr>");
    let numeric: Vec<bool> = header.iter().map(|h| h.starts_with('#')).collect();
    for h in header {
        let (class, text) = match h.strip_prefix('#') {
            Some(text) => (" class=\"n\"", text),
            None => ("", *h),
        };
        let _ = write!(out, "<th{class}>{}</th>", escape(text));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if numeric.get(i).copied().unwrap_or(false) {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{cell}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A table of `items`, one row each made by `row`, or the sentence `empty`
/// when there are none.
pub(super) fn table_of<T>(
    out: &mut String,
    items: &[T],
    empty: &str,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) {
    if items.is_empty() {
        none(out, empty);
    } else {
        table(out, header, &items.iter().map(row).collect::<Vec<_>>());
    }
}

/// A paragraph saying there is nothing to show.
pub(super) fn none(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p class=\"none\">{}</p>", escape(text));
}

/// A number cell.
pub(super) fn num(x: f64) -> String {
    short_number(x)
}

/// The unit a page gives times in: seconds for a run shorter than a
/// minute (so it never reads "0 min"), else minutes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimeUnit {
    /// Seconds.
    Seconds,
    /// Minutes, as the run's files hold them.
    Minutes,
}

impl TimeUnit {
    /// Seconds when `minutes` (the longest time to show) is under one.
    pub(super) fn for_minutes(minutes: f64) -> Self {
        if minutes < 1.0 {
            TimeUnit::Seconds
        } else {
            TimeUnit::Minutes
        }
    }

    /// `minutes` in this unit.
    pub(super) fn of(self, minutes: f64) -> f64 {
        match self {
            TimeUnit::Seconds => minutes * 60.0,
            TimeUnit::Minutes => minutes,
        }
    }

    /// The unit's symbol in column headers: `s` or `min`.
    pub(super) fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Minutes => "min",
        }
    }

    /// The unit's name on a chart axis.
    pub(super) fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Minutes => "minutes",
        }
    }

    /// `minutes` written in this unit with its symbol, e.g. `4.27 s`.
    pub(super) fn text(self, minutes: f64) -> String {
        format!("{} {}", num(self.of(minutes)), self.symbol())
    }
}

/// A duration given in minutes, in seconds when under a minute; 0 (the run
/// files keep minutes to 3 places) reads `under 0.06 s`.
pub(super) fn duration(minutes: f64) -> String {
    if minutes <= 0.0 {
        return "under 0.06 s".to_owned();
    }
    TimeUnit::for_minutes(minutes).text(minutes)
}

/// A JSON value as escaped text (strings without quotes).
pub(super) fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

/// `hbar_chart` of raw and novel value per label.
pub(super) fn raw_novel_bars(
    title: &str,
    labels: &[String],
    raw: Vec<f64>,
    novel: Vec<f64>,
) -> String {
    let series = |label: &str, color, values: Vec<f64>| Series {
        label: label.to_owned(),
        color,
        points: values.into_iter().map(|v| (0.0, v)).collect(),
    };
    hbar_chart(
        title,
        labels,
        &[
            series("raw value", COLORS[1], raw),
            series("novel value", COLORS[0], novel),
        ],
    )
}

/// `bar_chart` of named per-category values.
pub(super) fn bars(
    title: &str,
    y_axis: Axis,
    categories: &[String],
    series: Vec<(&str, Vec<f64>)>,
    stacked: bool,
) -> String {
    let series: Vec<Series> = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, values))| Series {
            label: label.to_owned(),
            color: COLORS[i % COLORS.len()],
            points: values.into_iter().map(|v| (0.0, v)).collect(),
        })
        .collect();
    bar_chart(title, y_axis, categories, &series, stacked)
}
