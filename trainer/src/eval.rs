//! Loss estimates: over random batches during training (as nanoGPT), and over
//! the whole validation split for `trainer eval`.

use anyhow::{bail, Result};
use candle_core::{Device, Tensor};
use nrgpt_core::model::cross_entropy;
use nrgpt_core::rng::Rng64;
use nrgpt_core::{ForwardOpts, Model};

use crate::data::{all_windows, random_batch};
use crate::net::{Net, Thinking};

/// The noise stream of an EBT's evaluation candidates (fixed, so estimates are comparable).
const STREAM_EBT_EVAL: u64 = 0xEB7_E7A1;

/// Mean loss over `iters` random batches drawn from a fixed stream `seed`.
pub fn estimate_loss(model: &Net, data: &[u32], batch: usize, iters: usize, seed: u64) -> Result<f64> {
    let block = model.cfg().block_size;
    let mut total = 0.0;
    for i in 0..iters {
        let mut rng = Rng64::derive(seed, i as u64);
        let (x, y) = random_batch(data, batch, block, &mut rng, model.device())?;
        let logits = model.logits(&x, Thinking::default(), STREAM_EBT_EVAL ^ i as u64)?;
        total += cross_entropy(&logits, &y)?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
    }
    Ok(total / iters as f64)
}

/// Loss over every non-overlapping block-sized window of `data` (nats/char),
/// with `think.steps` recursion (or thinking) steps if given. Calls `progress(done, total)`.
pub fn full_loss(model: &Net, data: &[u32], batch: usize, think: Thinking, progress: &mut dyn FnMut(usize, usize)) -> Result<f64> {
    let block = model.cfg().block_size;
    let windows = all_windows(data, block);
    if windows.is_empty() {
        bail!("{} characters hold no full window: a loss needs at least the block size + 1 = {}", data.len(), block + 1);
    }
    let mut total = 0.0;
    for (done, chunk) in windows.chunks(batch).enumerate() {
        let x: Vec<u32> = chunk.iter().flat_map(|(x, _)| x.iter().copied()).collect();
        let y: Vec<u32> = chunk.iter().flat_map(|(_, y)| y.iter().copied()).collect();
        let x = Tensor::from_vec(x, (chunk.len(), block), &Device::Cpu)?;
        let y = Tensor::from_vec(y, (chunk.len(), block), &Device::Cpu)?;
        let logits = model.logits(&x, think, STREAM_EBT_EVAL ^ done as u64)?;
        let l = cross_entropy(&logits, &y)?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        total += l * chunk.len() as f64;
        progress((done + 1) * batch.min(chunk.len()), windows.len());
    }
    Ok(total / windows.len() as f64)
}

/// How many tokens descend monotonically once the transient is over.
pub struct Monotone {
    pub fraction: f64,
    pub tokens: usize,
    pub steps: usize,
}

/// Over `windows` evenly spaced validation windows: the fraction of tokens A
/// whose E_A(t) never rises for t >= `skip` (tolerance 1e-5 relative, for f32
/// rounding). Early tokens are included: their energy also sees the context move.
pub fn monotone_fraction(model: &Model, data: &[u32], windows: usize, steps: Option<usize>, skip: usize) -> Result<Monotone> {
    let all = all_windows(data, model.cfg.block_size);
    let stride = (all.len() / windows.max(1)).max(1);
    let picked: Vec<u32> = all.iter().step_by(stride).take(windows).flat_map(|(x, _)| x.iter().copied()).collect();
    if picked.is_empty() {
        bail!("{} characters hold no full window of the block size {}", data.len(), model.cfg.block_size);
    }
    let b = picked.len() / model.cfg.block_size;
    let x = Tensor::from_vec(picked, (b, model.cfg.block_size), &Device::Cpu)?;
    let f = model.forward(&x, ForwardOpts { steps, record: true, ..Default::default() })?;
    let Some(e) = f.energies else { anyhow::bail!("{} has no energy: only NRGPT models descend an energy", model.cfg.arch.name()) };
    let e = e.to_dtype(candle_core::DType::F64)?.to_vec3::<f64>()?; // (T+1, B, n)
    let t_max = e.len() - 1;
    if skip >= t_max {
        anyhow::bail!("--skip {skip} leaves no step to judge out of {t_max}");
    }
    let (mut mono, mut total) = (0, 0);
    // Indexes e at two steps, t and t + 1, per (window, position): iterating one axis reads no clearer.
    #[allow(clippy::needless_range_loop)]
    for bi in 0..b {
        for a in 0..model.cfg.block_size {
            total += 1;
            let ok = (skip..t_max).all(|t| e[t + 1][bi][a] <= e[t][bi][a] + 1e-5 * e[t][bi][a].abs().max(1.0));
            mono += ok as usize;
        }
    }
    Ok(Monotone { fraction: mono as f64 / total as f64, tokens: total, steps: t_max })
}
