//! The trainer's commands checked against the native memory budget
//! (`nrgpt_core::bounds::memory`) before they allocate: the estimate for
//! what the command will run, with the figures named as its user can change
//! them (`--batch`, the prompt, a stored setting).

use anyhow::{Context, Result};
use nrgpt_core::bounds::memory::{self, Figure, NATIVE};
use nrgpt_core::{Arch, ModelConfig};

/// A training run of batches of `batch` windows; `name` says where the batch
/// came from (`--batch`, or the stored setting on `--resume`).
pub fn train(cfg: &ModelConfig, batch: usize, name: &'static str, dropout: bool) -> Result<()> {
    memory::train(cfg, Figure::new(name, batch), dropout)
        .check(NATIVE)
        .context("refusing to train: lower --batch or --block (or --d-model, --heads, --head-dim)")
}

/// Evaluating `windows` windows of `block_size` characters `batch` at a
/// time (`eval`, `think`, `energy`); an EBT thinks `steps` (default: as
/// trained) on `samples` candidates.
pub fn evaluate(cfg: &ModelConfig, batch: usize, windows: usize, steps: Option<usize>, samples: usize) -> Result<()> {
    let b = Figure::new("--batch", batch.min(windows).max(1));
    let n = Figure::new("block_size", cfg.block_size);
    let e = match cfg.arch {
        Arch::Ebt => memory::think(cfg, b, n, steps.unwrap_or(cfg.steps), samples),
        _ => memory::forward(cfg, b, n),
    };
    e.check(NATIVE).context("refusing to evaluate: lower --batch")
}

/// `sample`: the window grows to the prompt and the text written after it,
/// at most `block_size` characters, and is recomputed for every character.
pub fn sample(cfg: &ModelConfig, prompt_chars: usize, len: usize, steps: Option<usize>, samples: usize) -> Result<()> {
    let chars = prompt_chars.saturating_add(len);
    let n = if chars < cfg.block_size { Figure::new("the prompt + --len", chars) } else { Figure::new("block_size", cfg.block_size) };
    let b = Figure::new("one sequence", 1);
    let e = match cfg.arch {
        Arch::Ebt => memory::think(cfg, b, n, steps.unwrap_or(cfg.steps), samples),
        _ => memory::forward(cfg, b, n),
    };
    e.check(NATIVE).context("refusing to sample: shorten the prompt or --len")
}
