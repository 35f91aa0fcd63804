//! A small hand-written SVG line chart of the fan-out curve: total milliseconds against the
//! number of namespaces (median and min–max bar per size), with milliseconds per namespace
//! as labels.

use std::fmt::Write;

use super::stats::Summary;

const W: f64 = 560.0;
const H: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Renders `points` (namespaces, time summary) as an SVG document.
#[must_use]
pub fn fanout_chart(points: &[(usize, Summary)], caption: &str) -> String {
    #[allow(clippy::cast_precision_loss)] // namespace counts are small
    let xs: Vec<f64> = points.iter().map(|(n, _)| *n as f64).collect();
    let x_max = xs.iter().copied().fold(1.0, f64::max);
    let y_max = nice(points.iter().map(|(_, s)| s.max).fold(1.0, f64::max));
    let px = |x: f64| LEFT + x / x_max * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - y / y_max * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">GHCR reassertion fan-out: total time vs namespaces</text>"#,
        W / 2.0
    );
    // Axes and grid.
    let (x0, y0) = (px(0.0), py(0.0));
    let _ = writeln!(
        s,
        r#"<line x1="{x0}" y1="{y0}" x2="{}" y2="{y0}" stroke="black"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{}" stroke="black"/>"#,
        W - RIGHT,
        TOP
    );
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let y = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            W - RIGHT,
            x0 - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">ms (median, min–max)</text>"#,
        H / 2.0,
        H / 2.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">namespaces</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 10.0
    );
    // Curve, bars, labels.
    let line: Vec<String> = points
        .iter()
        .zip(&xs)
        .map(|((_, st), x)| format!("{:.1},{:.1}", px(*x), py(st.median)))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        line.join(" ")
    );
    for ((n, st), x) in points.iter().zip(&xs) {
        let (cx, cy) = (px(*x), py(st.median));
        #[allow(clippy::cast_precision_loss)] // namespace counts are small
        let per = st.median / (*n).max(1) as f64;
        let _ = writeln!(
            s,
            r##"<line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="#1f77b4"/><circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="#1f77b4"/>"##,
            py(st.min),
            py(st.max)
        );
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{n}: {:.0} ms ({per:.2} ms/ns)</text>"#,
            cy - 10.0,
            st.median
        );
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{n}</text>"#,
            y0 + 16.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" font-size="10" fill="#555">{}</text>"##,
        W - RIGHT,
        TOP - 6.0,
        escape(caption)
    );
    s.push_str("</svg>\n");
    s
}

/// A round axis maximum at or above `v`.
fn nice(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_is_one_svg_document_with_a_point_per_size() {
        let pts = vec![
            (10, Summary::of(&[20.0])),
            (100, Summary::of(&[190.0, 210.0])),
        ];
        let svg = fanout_chart(&pts, "2 cores <loaded>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("&lt;loaded&gt;"));
    }

    #[test]
    fn axis_maximum_is_round_and_not_below_the_data() {
        assert!((nice(180.0) - 200.0).abs() < 1e-9);
        assert!((nice(2600.0) - 5000.0).abs() < 1e-9);
    }
}
