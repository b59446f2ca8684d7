//! A dependency-free SVG line plot (loss against iteration or against
//! parameters), panels side by side, so BENCH.md's figures are regenerated
//! by the bench.

use std::fmt::Write;

pub struct Series {
    pub label: String,
    /// (iteration, loss) points in order.
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    pub colour: &'static str,
}

pub struct Panel {
    pub title: String,
    /// Under the x axis (it also names the y axis's unit).
    pub x_label: String,
    pub series: Vec<Series>,
}

pub const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

const W: f64 = 460.0;
const H: f64 = 300.0;
const M: (f64, f64, f64, f64) = (52.0, 16.0, 30.0, 40.0); // left, right, top, bottom

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Panels side by side, a caption (command, machine) underneath.
pub fn svg(panels: &[Panel], caption: &[String]) -> String {
    let total_w = W * panels.len().max(1) as f64;
    let total_h = H + 18.0 * caption.len() as f64 + 8.0;
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" font-family="sans-serif" font-size="11">"#);
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, p) in panels.iter().enumerate() {
        panel(&mut s, p, W * i as f64);
    }
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(s, r##"<text x="8" y="{}" fill="#444">{}</text>"##, H + 14.0 + 18.0 * i as f64, esc(line));
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, p: &Panel, x0: f64) {
    let pts = p.series.iter().flat_map(|se| se.points.iter().copied());
    let (mut xmax, mut ymin, mut ymax) = (1.0f64, f64::MAX, f64::MIN);
    for (x, y) in pts {
        xmax = xmax.max(x);
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    if ymin > ymax {
        (ymin, ymax) = (0.0, 1.0);
    }
    // the first evaluations (~4.2 nats) would flatten everything else
    let ymax = ymax.min(ymin + 1.6).max(ymin + 0.1);
    let (l, r, t, b) = M;
    let px = |x: f64| x0 + l + x / xmax * (W - l - r);
    let py = |y: f64| t + (ymax - y.clamp(ymin, ymax)) / (ymax - ymin) * (H - t - b);
    let _ = writeln!(s, r#"<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>"#, x0 + l, esc(&p.title));
    let _ = writeln!(s, r##"<rect x="{}" y="{t}" width="{}" height="{}" fill="none" stroke="#999"/>"##, x0 + l, W - l - r, H - t - b);
    for k in 0..=4 {
        let y = ymin + (ymax - ymin) * k as f64 / 4.0;
        let _ = writeln!(s, r##"<text x="{}" y="{}" text-anchor="end" fill="#555">{y:.2}</text>"##, x0 + l - 4.0, py(y) + 4.0);
        let x = xmax * k as f64 / 4.0;
        // the last tick ends at the frame's edge, so a long number stays inside the figure
        let anchor = if k == 4 { "end" } else { "middle" };
        let _ = writeln!(s, r##"<text x="{}" y="{}" text-anchor="{anchor}" fill="#555">{x:.0}</text>"##, px(x), H - b + 14.0);
    }
    let _ = writeln!(s, r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">{}</text>"##, x0 + W / 2.0, H - 6.0, esc(&p.x_label));
    // wide enough for the longest label (about 6 px a character at this size), never wider than the frame
    let longest = p.series.iter().map(|se| se.label.chars().count()).max().unwrap_or(0) as f64;
    let legend_x = x0 + W - r - (26.0 + 6.0 * longest).clamp(190.0, W - l - r - 8.0);
    let mut legend_rows = 0.0;
    for se in &p.series {
        let path: Vec<String> = se.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let dash = if se.dashed { r#" stroke-dasharray="4 3""# } else { "" };
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{}" stroke-width="1.6"{dash} points="{}"/>"#, se.colour, path.join(" "));
        if path.len() <= 4 {
            // a few measured points (one draws no line at all): mark each
            for pt in &path {
                let _ = writeln!(s, r#"<circle r="3" fill="{}" cx="{}"/>"#, se.colour, pt.replace(',', "\" cy=\""));
            }
        }
        if se.label.is_empty() {
            continue;
        }
        let ly = t + 14.0 + 14.0 * legend_rows;
        legend_rows += 1.0;
        let _ = writeln!(
            s,
            r#"<line x1="{legend_x}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{dash}/>"#,
            ly - 4.0,
            legend_x + 18.0,
            ly - 4.0,
            se.colour
        );
        let _ = writeln!(s, r#"<text x="{}" y="{ly}">{}</text>"#, legend_x + 22.0, esc(&se.label));
    }
}
