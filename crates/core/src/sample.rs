//! Sampling the next character and the plain (full recompute) generation loop.

use std::ops::ControlFlow;

use candle_core::{DType, Tensor};

use crate::rng::Rng64;
use crate::session::{slide_window, window_after};
use crate::{Error, ForwardOpts, Model, Result, Vocab};

#[derive(Debug, Clone)]
pub struct SampleOpts {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep the k most likely characters; `None` and `Some(0)` keep all
    /// (one meaning for the CLI and the page).
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub seed: u64,
}

impl Default for SampleOpts {
    fn default() -> Self {
        Self { temperature: 0.8, top_k: None, top_p: None, seed: 1337 }
    }
}

impl SampleOpts {
    /// A finite temperature >= 0 and a top-p in (0, 1]: a NaN would turn
    /// every probability into NaN and the draw into the last character.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::Config(format!("temperature {} must be finite and >= 0", self.temperature)));
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(Error::Config(format!("top-p {p} must be in (0, 1]")));
        }
        Ok(())
    }
}

/// Probabilities of the next character after temperature, top-k and top-p.
pub fn filtered_probs(logits: &[f32], opts: &SampleOpts) -> Vec<f32> {
    let n = logits.len();
    if opts.temperature <= 0.0 {
        let best = argmax(logits);
        return (0..n).map(|i| if i == best { 1.0 } else { 0.0 }).collect();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let keep_k = match opts.top_k {
        Some(k) if k > 0 => k.min(n),
        _ => n,
    };
    let max = logits[order[0]];
    let mut p = vec![0f32; n];
    for &i in &order[..keep_k] {
        p[i] = ((logits[i] - max) / opts.temperature).exp();
    }
    let z: f32 = p.iter().sum();
    p.iter_mut().for_each(|x| *x /= z);
    if let Some(top_p) = opts.top_p {
        // keep the smallest prefix (by probability) whose mass reaches top_p
        let mut acc = 0.0;
        let mut cut = keep_k;
        for (j, &i) in order[..keep_k].iter().enumerate() {
            acc += p[i];
            if acc >= top_p {
                cut = j + 1;
                break;
            }
        }
        for &i in &order[cut..] {
            p[i] = 0.0;
        }
        let z: f32 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= z);
    }
    p
}

pub fn argmax(xs: &[f32]) -> usize {
    xs.iter().enumerate().fold(0, |best, (i, &x)| if x > xs[best] { i } else { best })
}

/// Draws an index from `probs` with one uniform number.
pub fn draw(probs: &[f32], rng: &mut Rng64) -> usize {
    let u = rng.uniform() as f32;
    let mut acc = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    // rounding left u past the total: take the last character with mass
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

/// Generates `n_chars` after `prompt` by recomputing the window (the shared
/// [`slide_window`] policy) for every character: the simple reference the
/// engine's cached decoding and the page must match.
pub fn generate(model: &Model, vocab: &Vocab, prompt: &str, n_chars: usize, opts: &SampleOpts) -> Result<String> {
    generate_streamed(model, vocab, prompt, n_chars, opts, &mut |_| ControlFlow::Continue(()))
}

/// [`generate`], handing each character to `emit` as soon as it is drawn (a
/// long run shows, and keeps, what it wrote so far); `emit` breaking stops
/// the run, which returns the text up to there.
pub fn generate_streamed(
    model: &Model,
    vocab: &Vocab,
    prompt: &str,
    n_chars: usize,
    opts: &SampleOpts,
    emit: &mut dyn FnMut(&str) -> ControlFlow<()>,
) -> Result<String> {
    opts.validate()?;
    let prompt_ids = vocab.encode(prompt)?;
    if prompt_ids.is_empty() {
        return Err(Error::Vocab("the prompt is empty".into()));
    }
    let mut rng = Rng64::new(opts.seed);
    let block = model.cfg.block_size;
    let (mut ids, _) = window_after(&[], &prompt_ids, block);
    let mut out = Vec::with_capacity(n_chars);
    for _ in 0..n_chars {
        let ctx = &ids[..];
        let t = Tensor::from_slice(ctx, (1, ctx.len()), model.device())?;
        let logits = model.forward(&t, ForwardOpts::default())?.logits;
        let last: Vec<f32> = logits.get(0)?.get(ctx.len() - 1)?.to_dtype(DType::F32)?.to_vec1()?;
        let next = draw(&filtered_probs(&last, opts), &mut rng) as u32;
        slide_window(&mut ids, block);
        ids.push(next);
        out.push(next);
        if emit(&vocab.decode(&[next])).is_break() {
            break;
        }
    }
    Ok(vocab.decode(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [3.0, 2.0, 1.0, 0.0];
        let p = filtered_probs(&logits, &SampleOpts { temperature: 1.0, top_k: Some(2), ..Default::default() });
        assert!(p[2] == 0.0 && p[3] == 0.0 && (p[0] + p[1] - 1.0).abs() < 1e-6 && p[0] > p[1]);
        let p = filtered_probs(&logits, &SampleOpts { temperature: 1.0, top_p: Some(0.5), ..Default::default() });
        assert_eq!(p, vec![1.0, 0.0, 0.0, 0.0]);
        let g = filtered_probs(&logits, &SampleOpts { temperature: 0.0, ..Default::default() });
        assert_eq!(g, vec![1.0, 0.0, 0.0, 0.0]);
        // top-k 0 keeps every character, as on the page (it used to mean greedy here)
        let all = filtered_probs(&logits, &SampleOpts { temperature: 1.0, top_k: Some(0), ..Default::default() });
        assert_eq!(all, filtered_probs(&logits, &SampleOpts { temperature: 1.0, ..Default::default() }));
        assert!(all.iter().all(|&p| p > 0.0), "{all:?}");
    }

    #[test]
    fn nan_temperature_and_bad_top_p_are_errors() {
        for opts in [
            SampleOpts { temperature: f32::NAN, ..Default::default() },
            SampleOpts { temperature: f32::INFINITY, ..Default::default() },
            SampleOpts { temperature: -1.0, ..Default::default() },
            SampleOpts { top_p: Some(0.0), ..Default::default() },
            SampleOpts { top_p: Some(f32::NAN), ..Default::default() },
        ] {
            assert!(opts.validate().is_err(), "{opts:?}");
        }
        SampleOpts::default().validate().unwrap();
    }

    #[test]
    fn draw_is_deterministic_and_follows_probs() {
        let probs = [0.1, 0.0, 0.9];
        let mut counts = [0usize; 3];
        let mut rng = Rng64::new(7);
        for _ in 0..10_000 {
            counts[draw(&probs, &mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((counts[2] as f64 / 10_000.0 - 0.9).abs() < 0.02, "{counts:?}");
        let a: Vec<usize> = (0..20).scan(Rng64::new(3), |r, _| Some(draw(&probs, r))).collect();
        let b: Vec<usize> = (0..20).scan(Rng64::new(3), |r, _| Some(draw(&probs, r))).collect();
        assert_eq!(a, b);
    }
}
