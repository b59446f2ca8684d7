//! Loss estimates: over random batches during training (as nanoGPT), and over
//! the whole validation split for `trainer eval`.

use anyhow::Result;
use candle_core::{Device, Tensor};
use nrgpt_web::model::cross_entropy;
use nrgpt_web::rng::Rng64;
use nrgpt_web::{ForwardOpts, Model};

use crate::data::{all_windows, random_batch};

/// Mean loss over `iters` random batches drawn from a fixed stream `seed`.
pub fn estimate_loss(model: &Model, data: &[u32], batch: usize, iters: usize, seed: u64) -> Result<f64> {
    let block = model.cfg.block_size;
    let mut total = 0.0;
    for i in 0..iters {
        let mut rng = Rng64::derive(seed, i as u64);
        let (x, y) = random_batch(data, batch, block, &mut rng, model.device())?;
        let logits = model.forward(&x, ForwardOpts::default())?.logits;
        total += cross_entropy(&logits, &y)?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
    }
    Ok(total / iters as f64)
}

/// Loss over every non-overlapping block-sized window of `data` (nats/char),
/// with `steps` recursion steps if given. Calls `progress(done, total)`.
pub fn full_loss(model: &Model, data: &[u32], batch: usize, steps: Option<usize>, progress: &mut dyn FnMut(usize, usize)) -> Result<f64> {
    let block = model.cfg.block_size;
    let windows = all_windows(data, block);
    let mut total = 0.0;
    for (done, chunk) in windows.chunks(batch).enumerate() {
        let x: Vec<u32> = chunk.iter().flat_map(|(x, _)| x.iter().copied()).collect();
        let y: Vec<u32> = chunk.iter().flat_map(|(_, y)| y.iter().copied()).collect();
        let x = Tensor::from_vec(x, (chunk.len(), block), &Device::Cpu)?;
        let y = Tensor::from_vec(y, (chunk.len(), block), &Device::Cpu)?;
        let logits = model.forward(&x, ForwardOpts { steps, ..Default::default() })?.logits;
        let l = cross_entropy(&logits, &y)?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        total += l * chunk.len() as f64;
        progress((done + 1) * batch.min(chunk.len()), windows.len());
    }
    Ok(total / windows.len() as f64)
}
