//! Does thinking help? An EBT's loss on a text against thinking steps S and
//! candidates N (kept per character by self-verification), and how well a
//! character's final energy predicts its loss. One pass per window batch
//! thinks the largest N candidates for the largest S steps; every smaller
//! (S, N) is read off the same trajectories (the first N candidates' step S).

use anyhow::{ensure, Result};
use nrgpt_core::ebt::Verify;
use nrgpt_core::model::Weights;
use nrgpt_core::rng::Rng64;
use nrgpt_core::ModelConfig;

use crate::data::all_windows;
use crate::fast::ebt::think::initial_logits;
use crate::fast::ebt::FastEbt;
use crate::fast::math::char_losses;
use crate::fast::num_threads;

/// The noise stream of the table's candidates (fixed: reruns agree).
const STREAM_TABLE: u64 = 0x7AB1E;

pub struct TableSpec {
    pub steps: Vec<usize>,
    pub samples: Vec<usize>,
    pub verify: Verify,
    pub batch: usize,
    /// Langevin noise std added to z before every thinking step (0 = none).
    pub langevin: f64,
}

/// Loss (nats/char) at `steps` thinking steps with the best of `samples` candidates.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cell {
    pub steps: usize,
    pub samples: usize,
    pub loss: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TextTable {
    pub chars: usize,
    pub cells: Vec<Cell>,
    /// Pearson correlation of a character's final energy with its loss
    /// (one candidate, the trained step count).
    pub energy_loss_corr: f64,
    /// Up to 2,000 (energy, loss) pairs of that correlation, for a plot.
    #[serde(skip)]
    pub points: Vec<(f64, f64)>,
}

/// One candidate's rows: its energies at step 0, and per step of interest its
/// characters' losses and energies.
type Candidate = (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>);

fn widen(e: &[f32]) -> Vec<f64> {
    e.iter().map(|&x| x as f64).collect()
}

pub fn pearson(xs: &[(f64, f64)]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().map(|p| p.0).sum::<f64>() / n, xs.iter().map(|p| p.1).sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    sxy / (sxx * syy).sqrt()
}

/// The table of `spec` over every non-overlapping window of `data`;
/// `progress(done, total)` after each window batch.
pub fn thinking_table(cfg: &ModelConfig, weights: &Weights, data: &[u32], spec: &TableSpec, progress: &mut dyn FnMut(usize, usize)) -> Result<TextTable> {
    ensure!(!spec.steps.is_empty() && !spec.samples.is_empty(), "give at least one step count and one candidate count");
    ensure!(spec.samples.iter().all(|&n| n >= 1), "a candidate count is at least 1");
    ensure!(spec.batch >= 1, "--batch is at least 1");
    let (block, v) = (cfg.block_size, cfg.vocab_size);
    let windows = all_windows(data, block);
    ensure!(!windows.is_empty(), "the text has no full window of {} characters", block + 1);
    let (s_max, n_max) = (*spec.steps.iter().max().unwrap(), *spec.samples.iter().max().unwrap());
    let trained = cfg.steps;
    let mut sums = vec![0.0; spec.steps.len() * spec.samples.len()];
    let mut pairs = Vec::new();
    let mut count = 0usize;
    let mut fast: Option<FastEbt> = None;
    for (done, chunk) in windows.chunks(spec.batch).enumerate() {
        let b = chunk.len();
        if fast.as_ref().is_none_or(|f| f.batch != b) {
            fast = Some(FastEbt::new(cfg, weights, b, num_threads())?);
        }
        let fast = fast.as_mut().expect("built above");
        let x: Vec<u32> = chunk.iter().flat_map(|(x, _)| x.iter().copied()).collect();
        let y: Vec<u32> = chunk.iter().flat_map(|(_, y)| y.iter().copied()).collect();
        let mut rng = Rng64::derive(STREAM_TABLE, done as u64);
        // per candidate, per step of interest: (char losses, energies); and E at step 0
        let mut cand: Vec<Candidate> = Vec::with_capacity(n_max);
        for c in 0..n_max {
            let z0 = initial_logits(cfg, b * block, &mut rng);
            let steps = s_max.max(trained);
            let noise: Vec<Vec<f32>> = if spec.langevin > 0.0 {
                (0..steps).map(|_| (0..z0.len()).map(|_| (rng.normal() * spec.langevin) as f32).collect()).collect()
            } else {
                Vec::new()
            };
            let th = fast.think(&x, &z0, steps, &noise)?;
            let losses = spec.steps.iter().map(|&s| char_losses(&th.logits[s], &y, v)).collect::<Vec<_>>();
            let energies = spec.steps.iter().map(|&s| widen(&th.energies[s])).collect::<Vec<_>>();
            if c == 0 {
                let (l, e) = (char_losses(&th.logits[trained], &y, v), widen(&th.energies[trained]));
                pairs.extend(e.into_iter().zip(l));
            }
            cand.push((widen(&th.energies[0]), losses, energies));
        }
        for (si, _) in spec.steps.iter().enumerate() {
            for (ni, &n) in spec.samples.iter().enumerate() {
                for pos in 0..b * block {
                    // self-verification: per character, the lowest final energy or the largest drop
                    let score = |c: usize| spec.verify.score(cand[c].0[pos] as f32, cand[c].2[si][pos] as f32);
                    let best = (1..n).fold(0, |best, c| if score(c) < score(best) { c } else { best });
                    sums[si * spec.samples.len() + ni] += cand[best].1[si][pos];
                }
            }
        }
        count += b * block;
        progress(done * spec.batch + b, windows.len());
    }
    let mut cells = Vec::new();
    for (si, &steps) in spec.steps.iter().enumerate() {
        for (ni, &samples) in spec.samples.iter().enumerate() {
            cells.push(Cell { steps, samples, loss: sums[si * spec.samples.len() + ni] / count as f64 });
        }
    }
    let energy_loss_corr = pearson(&pairs);
    let stride = (pairs.len() / 2000).max(1);
    let points = pairs.into_iter().step_by(stride).collect();
    Ok(TextTable { chars: count, cells, energy_loss_corr, points })
}

/// The table as Markdown: one row per candidate count, one column per step count.
pub fn markdown(name: &str, t: &TextTable, spec: &TableSpec) -> String {
    let mut out = format!("{name} ({} characters; energy-loss correlation {:.3})\n\n| N \\ S |", t.chars, t.energy_loss_corr);
    for s in &spec.steps {
        out += &format!(" {s} |");
    }
    out += "\n|---|";
    out += &"---|".repeat(spec.steps.len());
    for &n in &spec.samples {
        out += &format!("\n| {n} |");
        for &s in &spec.steps {
            let c = t.cells.iter().find(|c| c.steps == s && c.samples == n).expect("every cell is computed");
            out += &format!(" {:.4} |", c.loss);
        }
    }
    out + "\n"
}

/// A scatter plot of (energy, loss) per character, as a standalone SVG.
pub fn scatter_svg(title: &str, points: &[(f64, f64)]) -> String {
    let (w, h, m) = (480.0, 320.0, 48.0);
    let range = |f: fn(&(f64, f64)) -> f64| {
        let (lo, hi) = points.iter().map(f).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
        if hi > lo {
            (lo, hi)
        } else {
            (lo - 1.0, lo + 1.0)
        }
    };
    let ((x0, x1), (y0, y1)) = (range(|p| p.0), range(|p| p.1));
    let sx = |x: f64| m + (x - x0) / (x1 - x0) * (w - 2.0 * m);
    let sy = |y: f64| h - m - (y - y0) / (y1 - y0) * (h - 2.0 * m);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"{m}\" y=\"20\" font-size=\"13\">{title}</text>\
         <line x1=\"{m}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{b}\" stroke=\"black\"/>\
         <text x=\"{cx}\" y=\"{h2}\" text-anchor=\"middle\">final energy ({x0:.2} .. {x1:.2})</text>\
         <text x=\"14\" y=\"{cy}\" transform=\"rotate(-90 14 {cy})\" text-anchor=\"middle\">loss, nats ({y0:.2} .. {y1:.2})</text>",
        b = h - m,
        r = w - m,
        cx = w / 2.0,
        h2 = h - 12.0,
        cy = h / 2.0
    );
    for &(x, y) in points {
        s += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.5\" fill=\"#3366cc\" fill-opacity=\"0.4\"/>", sx(x), sy(y));
    }
    s + "</svg>\n"
}
