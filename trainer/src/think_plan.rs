//! EBT's training regularisers, as in the reference (alexiglad/EBT): Langevin
//! noise, a per-token step size drawn in [a/2, 2a], a random step count and
//! a replay buffer of final candidates. They are drawn here, once per batch,
//! into a [`ThinkPlan`] that every training path reads the same way.

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};
use nrgpt_core::ebt::{EnergyLoss, ThinkPlan, MIN_STEP};
use nrgpt_core::rng::Rng64;
use nrgpt_core::ModelConfig;
use serde::{Deserialize, Serialize};

/// The regularisers' settings; all off by default (`step_lr_mult` 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EbtRegularisers {
    /// Std of the Langevin noise added to z after every step.
    pub langevin: f64,
    /// Draw each token's step size log-uniformly in [a/2, 2a].
    pub step_jitter: bool,
    /// Each batch thinks S + U{0..=extra_steps} steps.
    pub extra_steps: usize,
    /// Fraction of each batch's sequences that start from the replay buffer.
    pub replay: f64,
    /// The step size's learning rate as a multiple of the model's.
    pub step_lr_mult: f64,
    /// The loss is the last step's alone (the reference's `truncate_mcmc`).
    #[serde(default)]
    pub truncate: bool,
    /// The step size a fresh run starts from (None: the layout's e^4.6).
    #[serde(default)]
    pub step_size: Option<f64>,
    /// Coefficient of the contrastive energy loss (0: off).
    #[serde(default)]
    pub contrastive: f64,
    /// Coefficient of minus the energy-loss correlation per sequence (0: off).
    #[serde(default)]
    pub calibrate: f64,
    /// The first step's label smoothing, falling to 0 on the last (0: off).
    #[serde(default)]
    pub soften: f64,
}

impl Default for EbtRegularisers {
    fn default() -> Self {
        Self {
            langevin: 0.0,
            step_jitter: false,
            extra_steps: 0,
            replay: 0.0,
            step_lr_mult: 1.0,
            truncate: false,
            step_size: None,
            contrastive: 0.0,
            calibrate: 0.0,
            soften: 0.0,
        }
    }
}

impl EbtRegularisers {
    pub fn check(&self) -> Result<()> {
        ensure!(self.langevin.is_finite() && self.langevin >= 0.0, "--ebt-langevin must be a finite std >= 0, not {}", self.langevin);
        ensure!((0.0..=1.0).contains(&self.replay), "--ebt-replay is a fraction in [0, 1], not {}", self.replay);
        ensure!(self.step_lr_mult.is_finite() && self.step_lr_mult >= 0.0, "--ebt-step-lr-mult must be finite and >= 0, not {}", self.step_lr_mult);
        ensure!(self.extra_steps <= 64, "--ebt-extra-steps is at most 64, not {}", self.extra_steps);
        for (flag, c) in [("--ebt-contrastive", self.contrastive), ("--ebt-calibrate", self.calibrate)] {
            ensure!(c.is_finite() && (0.0..=1e3).contains(&c), "{flag} is a coefficient in [0, 1000], not {c}");
        }
        ensure!((0.0..=1.0).contains(&self.soften), "--ebt-soften is a label smoothing in [0, 1], not {}", self.soften);
        ensure!(
            self.soften == 0.0 || !self.truncate,
            "--ebt-soften smooths the steps before the last, which --ebt-truncate leaves out of the loss: it would do nothing"
        );
        if let Some(a) = self.step_size {
            ensure!(a.is_finite() && (MIN_STEP..=1e6).contains(&a), "--ebt-step-size is in [{MIN_STEP}, 1e6], not {a}");
        }
        Ok(())
    }
}

/// A FIFO of final candidates, one (n, V) block per sequence, so part of a
/// batch starts where earlier thinking ended. Saved with the checkpoint.
#[derive(Debug, Clone, Default)]
pub struct ReplayBuffer {
    /// Flat rows of `row_len` floats, oldest first.
    pub rows: Vec<f32>,
    pub row_len: usize,
    pub capacity: usize,
}

impl ReplayBuffer {
    pub fn new(row_len: usize, capacity: usize) -> Self {
        Self { rows: Vec::new(), row_len, capacity }
    }

    pub fn len(&self) -> usize {
        self.rows.len() / self.row_len.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the batch's final candidates (B, n, V, flat), dropping the oldest beyond capacity.
    pub fn push(&mut self, z: &[f32]) {
        self.rows.extend_from_slice(z);
        let excess = self.len().saturating_sub(self.capacity);
        self.rows.drain(..excess * self.row_len);
    }

    /// The buffer as a (len, n, V) tensor, for the checkpoint.
    pub fn to_tensor(&self, n: usize, v: usize) -> Result<Tensor> {
        Ok(Tensor::from_vec(self.rows.clone(), (self.len(), n, v), &Device::Cpu)?)
    }

    pub fn load(&mut self, t: &Tensor) -> Result<()> {
        let rows = t.flatten_all()?.to_vec1::<f32>()?;
        ensure!(rows.len() % self.row_len.max(1) == 0, "the checkpoint's replay buffer does not hold whole (n, V) rows");
        self.rows = rows;
        Ok(())
    }
}

/// Draws one batch's plan (the loss on every step, or the last with
/// `truncate`): z(0) from N(0, ebt_noise^2) (or, for the first
/// `replay` fraction of sequences, from random buffer rows), the step count,
/// the per-token step sizes and the Langevin noise, all from `rng`.
pub fn draw(reg: &EbtRegularisers, cfg: &ModelConfig, b: usize, rng: &mut Rng64, buffer: &ReplayBuffer) -> Result<ThinkPlan> {
    let (n, v) = (cfg.block_size, cfg.vocab_size);
    let row = n * v;
    let mut z0: Vec<f32> = (0..b * row).map(|_| (rng.normal() * cfg.ebt_noise) as f32).collect();
    if !buffer.is_empty() {
        let from_buffer = (reg.replay * b as f64).round() as usize;
        for seq in 0..from_buffer.min(b) {
            let k = (rng.uniform() * buffer.len() as f64) as usize % buffer.len();
            z0[seq * row..(seq + 1) * row].copy_from_slice(&buffer.rows[k * row..(k + 1) * row]);
        }
    }
    let steps = cfg.steps + if reg.extra_steps > 0 { (rng.uniform() * (reg.extra_steps + 1) as f64) as usize % (reg.extra_steps + 1) } else { 0 };
    let step_scale = if reg.step_jitter {
        // log-uniform in [1/2, 2]
        let s: Vec<f32> = (0..b * n).map(|_| (2f64.ln() * (2.0 * rng.uniform() - 1.0)).exp() as f32).collect();
        Some(Tensor::from_vec(s, (b, n, 1), &Device::Cpu)?)
    } else {
        None
    };
    let langevin = if reg.langevin > 0.0 {
        (0..steps)
            .map(|_| {
                let e: Vec<f32> = (0..b * row).map(|_| (rng.normal() * reg.langevin) as f32).collect();
                Ok(Tensor::from_vec(e, (b, n, v), &Device::Cpu)?)
            })
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    Ok(ThinkPlan {
        z0: Tensor::from_vec(z0, (b, n, v), &Device::Cpu)?,
        steps,
        step_scale,
        langevin,
        final_only: reg.truncate,
        soften: reg.soften,
        energy_loss: EnergyLoss { contrastive: reg.contrastive, calibrate: reg.calibrate },
    })
}
