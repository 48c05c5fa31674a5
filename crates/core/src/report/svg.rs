//! Hand-written inline SVG charts: lines over a numeric x axis, grouped or
//! stacked vertical bars, horizontal grouped bars. Every mark is a `<path>`
//! and every text is escaped, so adapter-provided labels are safe.

use std::fmt::Write;

use super::escape::escape;

/// Width of every chart, px.
pub const WIDTH: f64 = 760.0;
/// Plot margins: left, right, top, bottom, px.
const MARGIN: (f64, f64, f64, f64) = (64.0, 16.0, 28.0, 40.0);

/// Series colours, in order (colour-blind safe).
pub const COLORS: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

/// A named series of values.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label (escaped when drawn).
    pub label: String,
    /// Stroke or fill colour.
    pub color: &'static str,
    /// `(x, y)` points for a line chart; for bar charts only `y` is read,
    /// one per category.
    pub points: Vec<(f64, f64)>,
}

/// A short number: integers plainly, others with 3 significant digits,
/// tiny and huge ones in exponent form.
pub fn short_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".to_owned();
    }
    let a = x.abs();
    if x.fract() == 0.0 && a < 1e9 {
        return format!("{x:.0}");
    }
    if !(1e-3..1e6).contains(&a) {
        return format!("{x:.2e}");
    }
    let digits = (2 - a.log10().floor() as i32).max(0) as usize;
    let text = format!("{x:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A chart's value axis: its label, and whether it counts things (its
/// ticks are then whole numbers, never `0.5` records).
#[derive(Clone, Copy, Debug)]
pub struct Axis<'a> {
    /// The axis label (escaped when drawn).
    pub label: &'a str,
    /// True when the values are counts.
    pub counts: bool,
}

impl<'a> Axis<'a> {
    /// An axis of measured values (minutes, value): ticks at quarters.
    pub fn values(label: &'a str) -> Self {
        Axis {
            label,
            counts: false,
        }
    }

    /// An axis of counts (records, families): whole-number ticks.
    pub fn counts(label: &'a str) -> Self {
        Axis {
            label,
            counts: true,
        }
    }

    /// The top of the axis and its tick values (0 first) for data up to
    /// `max`: a top of 1, 2 or 5 times a power of ten cut in quarters; for
    /// counts, a whole step of 1, 2 or 5 times a power of ten, at most 5
    /// ticks above 0.
    fn scale(self, max: f64) -> (f64, Vec<f64>) {
        if !self.counts {
            let top = nice_max(max);
            return (top, (0..=4).map(|i| top * f64::from(i) / 4.0).collect());
        }
        let max = if max.is_finite() {
            max.max(1.0).ceil()
        } else {
            1.0
        };
        let step = nice_max(max / 5.0).max(1.0);
        let steps = (max / step).ceil().max(1.0) as u32;
        let top = step * f64::from(steps);
        (top, (0..=steps).map(|i| step * f64::from(i)).collect())
    }
}

/// Round `max` up to 1, 2 or 5 times a power of ten (at least `max`, >0).
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&v| v >= max * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

struct Frame {
    height: f64,
    x0: f64,
    x1: f64,
    y_max: f64,
    y_ticks: Vec<f64>,
}

impl Frame {
    /// A frame `height` px high over `x0..=x1`, its value axis scaled by
    /// `axis` to hold `y_max`.
    fn new(height: f64, (x0, x1): (f64, f64), axis: Axis, y_max: f64) -> Self {
        let (y_max, y_ticks) = axis.scale(y_max);
        Frame {
            height,
            x0,
            x1,
            y_max,
            y_ticks,
        }
    }
}

impl Frame {
    fn plot_left(&self) -> f64 {
        MARGIN.0
    }
    fn plot_right(&self) -> f64 {
        WIDTH - MARGIN.1
    }
    fn plot_top(&self) -> f64 {
        MARGIN.2
    }
    fn plot_bottom(&self) -> f64 {
        self.height - MARGIN.3
    }
    fn x(&self, x: f64) -> f64 {
        let span = if self.x1 > self.x0 {
            self.x1 - self.x0
        } else {
            1.0
        };
        self.plot_left() + (x - self.x0) / span * (self.plot_right() - self.plot_left())
    }
    fn y(&self, y: f64) -> f64 {
        self.plot_bottom() - y / self.y_max * (self.plot_bottom() - self.plot_top())
    }
}

/// Opens the `<svg>` with its accessible title, the y grid and labels.
fn open(out: &mut String, frame: &Frame, title: &str, y_label: &str) {
    let _ = write!(
        out,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img"><title>{t}</title>"#,
        h = frame.height,
        t = escape(title),
    );
    for &value in &frame.y_ticks {
        let y = frame.y(value);
        let _ = write!(
            out,
            r##"<path class="grid" d="M{:.1} {y:.1}H{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
            frame.plot_left(),
            frame.plot_right(),
            frame.plot_left() - 6.0,
            y + 4.0,
            short_number(value),
        );
    }
    let _ = write!(
        out,
        r#"<text x="12" y="{:.1}" class="axis" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"#,
        (frame.plot_top() + frame.plot_bottom()) / 2.0,
        (frame.plot_top() + frame.plot_bottom()) / 2.0,
        escape(y_label),
    );
}

/// Legend entries along the top: a swatch per bar series.
fn legend(out: &mut String, series: &[(&str, &str)]) {
    let mut x = MARGIN.0;
    for (label, color) in series {
        let _ = write!(
            out,
            r#"<path d="M{x:.1} 8h10v10h-10Z" fill="{color}"/><text x="{:.1}" y="17" class="legend">{}</text>"#,
            x + 14.0,
            escape(label),
        );
        x += legend_width(label);
    }
}

/// The room a legend entry takes, px.
fn legend_width(label: &str) -> f64 {
    30.0 + 6.5 * label.chars().count().min(40) as f64
}

/// Dash patterns of line series, in order (the first solid).
const DASHES: [&str; 4] = ["", "7 3", "2 3", "9 3 2 3"];

/// The `d` of a point mark of the `k`-th series centred at `(x, y)`,
/// `r` px in radius: circle, square, triangle, diamond, plus, cross, in
/// turn, so lines of one colour family or in grey print are still told
/// apart.
fn mark(k: usize, x: f64, y: f64, r: f64) -> String {
    match k % 6 {
        0 => format!(
            "M{:.1} {y:.1}a{r} {r} 0 1 0 {:.1} 0a{r} {r} 0 1 0 {:.1} 0Z",
            x - r,
            2.0 * r,
            -2.0 * r
        ),
        1 => format!(
            "M{:.1} {:.1}h{:.1}v{:.1}h{:.1}Z",
            x - r,
            y - r,
            2.0 * r,
            2.0 * r,
            -2.0 * r
        ),
        2 => format!(
            "M{x:.1} {:.1}L{:.1} {:.1}H{:.1}Z",
            y - r - 0.5,
            x + r + 0.5,
            y + r,
            x - r - 0.5
        ),
        3 => format!(
            "M{x:.1} {:.1}L{:.1} {y:.1}L{x:.1} {:.1}L{:.1} {y:.1}Z",
            y - r - 1.0,
            x + r + 1.0,
            y + r + 1.0,
            x - r - 1.0
        ),
        4 => format!(
            "M{:.1} {y:.1}h{:.1}M{x:.1} {:.1}v{:.1}",
            x - r - 1.0,
            2.0 * r + 2.0,
            y - r - 1.0,
            2.0 * r + 2.0
        ),
        _ => format!(
            "M{:.1} {:.1}l{:.1} {:.1}m0 {:.1}l{:.1} {:.1}",
            x - r,
            y - r,
            2.0 * r,
            2.0 * r,
            -2.0 * r,
            -2.0 * r,
            2.0 * r
        ),
    }
}

/// A point mark, filled (or stroked, for the open shapes) in `color`.
fn mark_path(k: usize, x: f64, y: f64, r: f64, color: &str) -> String {
    let open = k % 6 >= 4;
    format!(
        r#"<path class="point" d="{}" {}"#,
        mark(k, x, y, r),
        if open {
            format!(r#"fill="none" stroke="{color}" stroke-width="2""#)
        } else {
            format!(r#"fill="{color}""#)
        }
    )
}

/// At most this many point marks per line; a longer series gets them at
/// evenly spaced points (its shape still says which line is which).
const MAX_MARKS: usize = 60;

/// A line chart of `series` over a numeric x axis labelled `x_label`,
/// with dashed vertical markers at `markers` (e.g. the epochs in which
/// variants entered), labelled `marker_label`. Series are told apart by
/// colour, dash pattern and point shape together.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_axis: Axis,
    series: &[Series],
    markers: &[f64],
    marker_label: &str,
) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x0 = xs.clone().fold(f64::INFINITY, f64::min);
    let x1 = xs.fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = if x0.is_finite() { (x0, x1) } else { (0.0, 1.0) };
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let frame = Frame::new(280.0, (x0, x1), y_axis, y_max);
    let mut out = String::new();
    open(&mut out, &frame, title, y_axis.label);
    x_axis_numeric(&mut out, &frame, x_label);
    for &marker in markers {
        let x = frame.x(marker);
        let _ = write!(
            out,
            r##"<path class="marker" d="M{x:.1} {:.1}V{:.1}" stroke="#d55e00" stroke-width="1.5" stroke-dasharray="5 3"><title>{}</title></path>"##,
            frame.plot_top(),
            frame.plot_bottom(),
            escape(&format!("{marker_label} {}", short_number(marker))),
        );
    }
    // Earlier series are drawn wider, so a later one drawn over the same
    // values leaves them showing on both sides.
    let under = |k: usize| 1.5 * (series.len() - 1 - k).min(2) as f64;
    for (k, s) in series.iter().enumerate() {
        let mut d = String::new();
        for (i, (x, y)) in s.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if i == 0 { "M" } else { "L" },
                frame.x(*x),
                frame.y(*y)
            );
        }
        if s.points.len() == 1 {
            d.push_str("h2");
        }
        let dash = DASHES[k % DASHES.len()];
        let dash = if dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{dash}""#)
        };
        let _ = write!(
            out,
            r#"<path class="series" d="{d}" fill="none" stroke="{}" stroke-width="{}"{dash}/>"#,
            s.color,
            2.0 + under(k),
        );
        let every = s.points.len().div_ceil(MAX_MARKS).max(1);
        let last = s.points.len().saturating_sub(1);
        for (i, (x, y)) in s.points.iter().enumerate() {
            if i % every != 0 && i != last {
                continue;
            }
            let _ = write!(
                out,
                "{}><title>{}</title></path>",
                mark_path(k, frame.x(*x), frame.y(*y), 3.5 + under(k), s.color),
                escape(&format!(
                    "{}: {} at {} {}",
                    s.label,
                    short_number(*y),
                    x_label,
                    short_number(*x)
                )),
            );
        }
    }
    let mut x = MARGIN.0;
    for (k, s) in series.iter().enumerate() {
        let dash = DASHES[k % DASHES.len()];
        let _ = write!(
            out,
            r#"<path d="M{x:.1} 13h18" stroke="{}" stroke-width="2" stroke-dasharray="{dash}"/>{}/><text x="{:.1}" y="17" class="legend">{}</text>"#,
            s.color,
            mark_path(k, x + 9.0, 13.0, 3.5, s.color),
            x + 22.0,
            escape(&s.label),
        );
        x += legend_width(&s.label) + 8.0;
    }
    if !markers.is_empty() {
        let _ = write!(
            out,
            r##"<path d="M{x:.1} 13h18" stroke="#d55e00" stroke-width="1.5" stroke-dasharray="5 3"/><text x="{:.1}" y="17" class="legend">{}</text>"##,
            x + 22.0,
            escape(marker_label),
        );
    }
    out.push_str("</svg>");
    out
}

/// The x axis's tick values: for whole ends (epochs, records) the
/// multiples of a whole step of 1, 2 or 5 times a power of ten (at most
/// about 10 ticks), led by `x0` unless a multiple is within half a step of
/// it; else 6 evenly spaced values.
fn x_ticks(x0: f64, x1: f64) -> Vec<f64> {
    if x1 <= x0 {
        return vec![x0];
    }
    if x0.fract() == 0.0 && x1.fract() == 0.0 {
        let step = nice_max((x1 - x0) / 10.0).max(1.0);
        let first = (x0 / step).ceil() * step;
        let mut ticks = Vec::new();
        if first - x0 >= step / 2.0 {
            ticks.push(x0);
        }
        let mut tick = first;
        while tick <= x1 {
            ticks.push(tick);
            tick += step;
        }
        return ticks;
    }
    (0..=5).map(|i| x0 + (x1 - x0) * i as f64 / 5.0).collect()
}

/// Ticks and label of a numeric x axis.
fn x_axis_numeric(out: &mut String, frame: &Frame, x_label: &str) {
    for value in x_ticks(frame.x0, frame.x1) {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"#,
            frame.x(value),
            frame.plot_bottom() + 16.0,
            short_number(value),
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text>"#,
        (frame.plot_left() + frame.plot_right()) / 2.0,
        frame.height - 6.0,
        escape(x_label),
    );
}

/// Vertical bars, one slot per `categories` entry: the series side by side
/// (`stacked = false`) or on top of each other. Category labels are thinned
/// to at most 10.
pub fn bar_chart(
    title: &str,
    y_axis: Axis,
    categories: &[String],
    series: &[Series],
    stacked: bool,
) -> String {
    let value = |s: &Series, i: usize| s.points.get(i).map_or(0.0, |p| p.1.max(0.0));
    let y_max = (0..categories.len())
        .map(|i| {
            let values = series.iter().map(|s| value(s, i));
            if stacked {
                values.sum()
            } else {
                values.fold(0.0, f64::max)
            }
        })
        .fold(0.0, f64::max);
    let frame = Frame::new(280.0, (0.0, categories.len().max(1) as f64), y_axis, y_max);
    let mut out = String::new();
    open(&mut out, &frame, title, y_axis.label);
    let slot = (frame.plot_right() - frame.plot_left()) / categories.len().max(1) as f64;
    let every = categories.len().div_ceil(10).max(1);
    for (i, category) in categories.iter().enumerate() {
        let left = frame.x(i as f64) + slot * 0.1;
        let width = slot * 0.8;
        let mut base = 0.0;
        for (k, s) in series.iter().enumerate() {
            let v = value(s, i);
            let (x, w, bottom) = if stacked {
                (left, width, base)
            } else {
                let w = width / series.len().max(1) as f64;
                (left + w * k as f64, w, 0.0)
            };
            let (top, low) = (frame.y(bottom + v), frame.y(bottom));
            if v > 0.0 {
                let _ = write!(
                    out,
                    r#"<path class="bar" d="M{x:.1} {low:.1}V{top:.1}h{w:.1}V{low:.1}Z" fill="{}"><title>{}</title></path>"#,
                    s.color,
                    escape(&format!("{category} {}: {}", s.label, short_number(v))),
                );
            }
            if stacked {
                base += v;
            }
        }
        if i % every == 0 {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"#,
                left + width / 2.0,
                frame.plot_bottom() + 16.0,
                escape(&shorten(category, 14)),
            );
        }
    }
    let entries: Vec<(&str, &str)> = series.iter().map(|s| (s.label.as_str(), s.color)).collect();
    legend(&mut out, &entries);
    out.push_str("</svg>");
    out
}

/// Horizontal grouped bars, one row per `rows` entry (label at the left,
/// shortened), one bar per series: suits long labels such as families.
pub fn hbar_chart(title: &str, rows: &[String], series: &[Series]) -> String {
    let row_height = 10.0 * series.len().max(1) as f64 + 8.0;
    let label_width = 180.0;
    let top = 28.0;
    let height = top + row_height * rows.len() as f64 + 24.0;
    let value = |s: &Series, i: usize| s.points.get(i).map_or(0.0, |p| p.1.max(0.0));
    let max = nice_max(
        series
            .iter()
            .flat_map(|s| (0..rows.len()).map(move |i| value(s, i)))
            .fold(0.0, f64::max),
    );
    let (left, right) = (label_width, WIDTH - MARGIN.1 - 40.0);
    let scale = |v: f64| (right - left) * v / max;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img"><title>{}</title>"#,
        escape(title),
    );
    for (i, row) in rows.iter().enumerate() {
        let y = top + row_height * i as f64;
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"#,
            left - 6.0,
            y + row_height / 2.0 + 3.0,
            escape(&shorten(row, 28)),
        );
        for (k, s) in series.iter().enumerate() {
            let v = value(s, i);
            let by = y + 4.0 + 10.0 * k as f64;
            let _ = write!(
                out,
                r#"<path class="bar" d="M{left:.1} {by:.1}h{:.1}v9h{:.1}Z" fill="{}"><title>{}</title></path><text x="{:.1}" y="{:.1}" class="tick">{}</text>"#,
                scale(v).max(1.0),
                -scale(v).max(1.0),
                s.color,
                escape(&format!("{row} {}: {}", s.label, short_number(v))),
                left + scale(v).max(1.0) + 4.0,
                by + 8.0,
                short_number(v),
            );
        }
    }
    let entries: Vec<(&str, &str)> = series.iter().map(|s| (s.label.as_str(), s.color)).collect();
    legend(&mut out, &entries);
    out.push_str("</svg>");
    out
}

/// `text` cut to `max` characters with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_ticks_fall_on_whole_epochs() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(12.0), "12");
        assert_eq!(short_number(0.052339), "0.0523");
        assert_eq!(short_number(1234.5678), "1235");
        assert_eq!(short_number(0.00002), "2.00e-5");
        assert_eq!(x_ticks(1.0, 8.0), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(
            x_ticks(1.0, 50.0),
            [
                1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0
            ]
        );
        assert_eq!(x_ticks(1.0, 2.0), [1.0, 2.0]);
        assert_eq!(
            x_ticks(0.0, 1234.0),
            [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0, 1200.0]
        );
        assert_eq!(x_ticks(0.0, 0.5).len(), 6);
        assert_eq!(x_ticks(3.0, 3.0), [3.0]);
        assert_eq!(nice_max(0.052), 0.1);
        assert_eq!(nice_max(307.5), 500.0);
        assert_eq!(nice_max(0.0), 1.0);
    }

    #[test]
    fn a_count_axis_ticks_whole_numbers_and_a_value_axis_quarters() {
        let (top, ticks) = Axis::counts("records").scale(2.0);
        assert_eq!((top, ticks), (2.0, vec![0.0, 1.0, 2.0]));
        let (top, ticks) = Axis::counts("records").scale(0.0);
        assert_eq!((top, ticks), (1.0, vec![0.0, 1.0]));
        let (top, ticks) = Axis::counts("records").scale(7.0);
        assert_eq!((top, ticks), (8.0, vec![0.0, 2.0, 4.0, 6.0, 8.0]));
        let (top, ticks) = Axis::counts("records").scale(1234.0);
        assert_eq!(top, 1500.0);
        assert!(ticks.iter().all(|t| t.fract() == 0.0), "{ticks:?}");
        let (top, ticks) = Axis::values("minutes").scale(2.0);
        assert_eq!((top, ticks), (2.0, vec![0.0, 0.5, 1.0, 1.5, 2.0]));
    }

    #[test]
    fn lines_differ_in_dash_and_point_shape_as_well_as_colour() {
        let line = |k: usize| Series {
            label: format!("arm {k}"),
            color: COLORS[0],
            points: vec![(1.0, 1.0), (2.0, 2.0)],
        };
        let svg = line_chart(
            "t",
            "epoch",
            Axis::values("v"),
            &[line(0), line(1), line(2)],
            &[],
            "",
        );
        assert_eq!(svg.matches("<path class=\"series\"").count(), 3);
        assert_eq!(
            svg.matches("stroke-dasharray=\"7 3\"").count(),
            2,
            "line and legend of the second"
        );
        let shapes: std::collections::BTreeSet<String> = (0..6)
            .map(|k| {
                mark(k, 0.0, 0.0, 3.5)
                    .chars()
                    .filter(|c| c.is_alphabetic())
                    .collect()
            })
            .collect();
        assert_eq!(shapes.len(), 6, "six distinct shapes: {shapes:?}");
    }

    #[test]
    fn bars_are_paths_and_at_most_ten_category_labels_are_written() {
        let categories: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
        let series = Series {
            label: "n".into(),
            color: COLORS[0],
            points: (0..16).map(|i| (0.0, f64::from(i))).collect(),
        };
        let svg = bar_chart("t", Axis::counts("y"), &categories, &[series], false);
        // Category 0 has value 0: no bar; the other 15 are drawn.
        assert_eq!(svg.matches("<path class=\"bar\" d=\"M").count(), 15);
        assert!(svg.contains(">c0<") && svg.contains(">c2<") && svg.contains(">c14<"));
        assert!(!svg.contains(">c1<") && !svg.contains(">c15<"));
    }
}
