//! The sweep's figure: test accuracy against parameter count (log scale),
//! one line per model, the 80% threshold dashed and the paper's transition
//! points marked on it.

use std::fmt::Write;

use crate::listops_sweep::{Point, Transition, LEARNED};

const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
const W: f64 = 560.0;
const H: f64 = 340.0;
/// Margins: left, right, top, bottom.
const M: (f64, f64, f64, f64) = (52.0, 170.0, 30.0, 44.0);

/// The SVG figure; `caption` lines (command, machine) go underneath.
pub fn accuracy_svg(points: &[Point], trans: &[Transition], caption: &[String]) -> String {
    let (l, r, t, b) = M;
    let params = points.iter().map(|p| p.params as f64).chain(trans.iter().filter_map(|t| t.paper));
    let (lo, hi) = params.fold((f64::MAX, f64::MIN), |(a, z), p| (a.min(p), z.max(p)));
    let (lo, hi) = if lo < hi { (lo.log10().floor(), hi.log10().ceil()) } else { (3.0, 5.0) };
    let px = |p: f64| l + (p.log10() - lo) / (hi - lo) * (W - l - r);
    let py = |a: f64| t + (1.0 - a) * (H - t - b);
    let total_h = H + 16.0 * caption.len() as f64 + 8.0;
    // wide enough for the longest caption line (about 6.2 px per character at 11 px)
    let total_w = caption.iter().map(|c| 16.0 + 6.2 * c.chars().count() as f64).fold(W, f64::max).ceil();
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" font-family="sans-serif" font-size="11">"#);
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="white"/><text x="{l}" y="18" font-size="13" font-weight="bold">ListOps: held-out accuracy vs parameters</text>"##
    );
    let _ = writeln!(s, r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#999"/>"##, W - l - r, H - t - b);
    for k in 0..=5 {
        let a = k as f64 / 5.0;
        let _ = writeln!(s, r##"<text x="{}" y="{}" text-anchor="end" fill="#555">{a:.1}</text>"##, l - 4.0, py(a) + 4.0);
    }
    for e in lo as i32..=hi as i32 {
        let x = px(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{t}" x2="{x}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle" fill="#555">1e{e}</text>"##,
            H - b,
            H - b + 14.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">parameters (log scale); accuracy of the answer digit</text>"##,
        l + (W - l - r) / 2.0,
        H - 10.0
    );
    let _ = writeln!(s, r##"<line x1="{l}" y1="{y}" x2="{}" y2="{y}" stroke="#888" stroke-dasharray="4 3"/>"##, W - r, y = py(LEARNED));
    for (i, tr) in trans.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let mut ps: Vec<&Point> = points.iter().filter(|p| p.model == tr.model).collect();
        ps.sort_by_key(|p| p.params);
        let line: Vec<String> = ps.iter().map(|p| format!("{:.1},{:.1}", px(p.params as f64), py(p.accuracy))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{}"/>"#, line.join(" "));
        for p in &ps {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, px(p.params as f64), py(p.accuracy));
        }
        if let Some(paper) = tr.paper {
            // the paper's transition: a hollow diamond on the threshold
            let (x, y) = (px(paper), py(LEARNED));
            let _ = writeln!(s, r#"<path d="M{x:.1},{:.1} l5,6 l-5,6 l-5,-6 z" fill="white" stroke="{c}" stroke-width="1.6"/>"#, y - 6.0);
        }
        let ly = t + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{c}" stroke-width="2"/><text x="{}" y="{ly}">{}</text>"#,
            W - r + 10.0,
            ly - 4.0,
            W - r + 28.0,
            ly - 4.0,
            W - r + 32.0,
            tr.model
        );
    }
    let ly = t + 14.0 + 16.0 * trans.len() as f64;
    let _ = writeln!(
        s,
        r##"<path d="M{x:.1},{:.1} l5,6 l-5,6 l-5,-6 z" fill="white" stroke="#555"/><text x="{}" y="{ly}">paper's transition</text>"##,
        ly - 10.0,
        W - r + 32.0,
        x = W - r + 19.0
    );
    for (i, line) in caption.iter().enumerate() {
        let esc = line.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let _ = writeln!(s, r##"<text x="8" y="{}" fill="#444">{esc}</text>"##, H + 12.0 + 16.0 * i as f64);
    }
    s.push_str("</svg>\n");
    s
}
