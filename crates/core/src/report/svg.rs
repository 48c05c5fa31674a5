//! Hand-written inline SVG charts: lines over a numeric x axis, grouped or
//! stacked vertical bars, horizontal grouped bars. Every mark is a `<path>`
//! and every text is escaped, so adapter-provided labels are safe.

use std::fmt::Write;

use super::html::escape;

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
    for i in 0..=4 {
        let value = frame.y_max * f64::from(i) / 4.0;
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

/// Legend entries along the top.
fn legend(out: &mut String, series: &[(&str, &str)]) {
    let mut x = MARGIN.0;
    for (label, color) in series {
        let _ = write!(
            out,
            r#"<path d="M{x:.1} 8h10v10h-10Z" fill="{color}"/><text x="{:.1}" y="17" class="legend">{}</text>"#,
            x + 14.0,
            escape(label),
        );
        x += 24.0 + 7.0 * label.chars().count().min(40) as f64;
    }
}

/// A line chart of `series` over a numeric x axis labelled `x_label`,
/// with dashed vertical markers at `markers` (e.g. the epochs in which
/// variants entered), labelled `marker_label`.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
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
    let frame = Frame {
        height: 280.0,
        x0,
        x1,
        y_max: nice_max(y_max),
    };
    let mut out = String::new();
    open(&mut out, &frame, title, y_label);
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
    for s in series {
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
        let _ = write!(
            out,
            r#"<path class="series" d="{d}" fill="none" stroke="{}" stroke-width="2"/>"#,
            s.color
        );
        for (x, y) in &s.points {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"><title>{}</title></circle>"#,
                frame.x(*x),
                frame.y(*y),
                s.color,
                escape(&format!(
                    "{}: {} at {}",
                    s.label,
                    short_number(*y),
                    short_number(*x)
                )),
            );
        }
    }
    let mut entries: Vec<(&str, &str)> =
        series.iter().map(|s| (s.label.as_str(), s.color)).collect();
    if !markers.is_empty() {
        entries.push((marker_label, "#d55e00"));
    }
    legend(&mut out, &entries);
    out.push_str("</svg>");
    out
}

/// The x axis's tick values: whole numbers (at most about 10) when both
/// ends are whole, such as epochs; else 6 evenly spaced values.
fn x_ticks(x0: f64, x1: f64) -> Vec<f64> {
    if x1 <= x0 {
        return vec![x0];
    }
    if x0.fract() == 0.0 && x1.fract() == 0.0 {
        let step = ((x1 - x0) / 10.0).ceil().max(1.0);
        let count = ((x1 - x0) / step).floor() as usize;
        return (0..=count).map(|i| x0 + step * i as f64).collect();
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
    y_label: &str,
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
    let frame = Frame {
        height: 280.0,
        x0: 0.0,
        x1: categories.len().max(1) as f64,
        y_max: nice_max(y_max),
    };
    let mut out = String::new();
    open(&mut out, &frame, title, y_label);
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
            [1.0, 6.0, 11.0, 16.0, 21.0, 26.0, 31.0, 36.0, 41.0, 46.0]
        );
        assert_eq!(x_ticks(0.0, 0.5).len(), 6);
        assert_eq!(x_ticks(3.0, 3.0), [3.0]);
        assert_eq!(nice_max(0.052), 0.1);
        assert_eq!(nice_max(307.5), 500.0);
        assert_eq!(nice_max(0.0), 1.0);
    }

    #[test]
    fn bars_are_paths_and_at_most_ten_category_labels_are_written() {
        let categories: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
        let series = Series {
            label: "n".into(),
            color: COLORS[0],
            points: (0..16).map(|i| (0.0, f64::from(i))).collect(),
        };
        let svg = bar_chart("t", "y", &categories, &[series], false);
        // Category 0 has value 0: no bar; the other 15 are drawn.
        assert_eq!(svg.matches("<path class=\"bar\" d=\"M").count(), 15);
        assert!(svg.contains(">c0<") && svg.contains(">c2<") && svg.contains(">c14<"));
        assert!(!svg.contains(">c1<") && !svg.contains(">c15<"));
    }
}
