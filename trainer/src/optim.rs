//! AdamW with its moments held as named tensors, so they go into the
//! checkpoint and a resumed run continues exactly.

use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use nrgpt_core::model::Weights;

/// AdamW's settings, one value for both backends (candle here, `fast::adamw`)
/// so a run resumed on the other backend continues the same optimiser.
#[derive(Debug, Clone, Copy)]
pub struct AdamHyper {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled, on matrices only (as nanoGPT).
    pub weight_decay: f64,
}

impl AdamHyper {
    pub fn new(weight_decay: f64) -> Self {
        Self { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay }
    }

    /// Bias corrections `(1 - b1^t, 1 - b2^t)` at update number `step`.
    pub fn bias_corrections(&self, step: u64) -> (f64, f64) {
        let t = step as i32;
        (1.0 - self.beta1.powi(t), 1.0 - self.beta2.powi(t))
    }
}

/// The factor that scales a gradient of global norm `norm` down to `max_norm`
/// (1 when it is within, or when clipping is off: `max_norm <= 0`).
pub fn clip_factor(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / norm
    } else {
        1.0
    }
}

pub struct CandleAdamW {
    pub vars: Vec<(String, Var)>,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub step: u64,
    pub hp: AdamHyper,
    /// Per-variable multiple of the learning rate (EBT's step size has its own).
    pub lr_mult: Vec<f64>,
}

impl CandleAdamW {
    pub fn new(vars: Vec<(String, Var)>, weight_decay: f64) -> Result<Self> {
        let m = vars.iter().map(|(_, v)| v.zeros_like()).collect::<candle_core::Result<Vec<_>>>()?;
        let v = m.clone();
        let lr_mult = vec![1.0; vars.len()];
        Ok(Self { vars, m, v, step: 0, hp: AdamHyper::new(weight_decay), lr_mult })
    }

    /// Trains the variable `name` at `mult` times the learning rate.
    pub fn set_lr_mult(&mut self, name: &str, mult: f64) {
        for (i, (n, _)) in self.vars.iter().enumerate() {
            if n == name {
                self.lr_mult[i] = mult;
            }
        }
    }

    /// Global gradient norm, and the factor that clips it to `max_norm`.
    pub fn clip_factor(&self, grads: &GradStore, max_norm: f64) -> Result<(f64, f64)> {
        let mut sq = 0.0;
        for (_, var) in &self.vars {
            if let Some(g) = grads.get(var) {
                sq += g.sqr()?.sum_all()?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
            }
        }
        let norm = sq.sqrt();
        Ok((norm, clip_factor(norm, max_norm)))
    }

    /// One AdamW update at learning rate `lr`; gradients scaled by `clip`.
    /// Decoupled weight decay on matrices only (as nanoGPT).
    pub fn step(&mut self, grads: &GradStore, lr: f64, clip: f64) -> Result<()> {
        self.step += 1;
        let hp = self.hp;
        let (bc1, bc2) = hp.bias_corrections(self.step);
        for (i, (_, var)) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(var) else { continue };
            let g = (g * clip)?;
            let lr = lr * self.lr_mult[i];
            // m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
            self.m[i] = ((&self.m[i] * hp.beta1)? + (&g * (1.0 - hp.beta1))?)?;
            self.v[i] = ((&self.v[i] * hp.beta2)? + (g.sqr()? * (1.0 - hp.beta2))?)?;
            // theta -= lr (m_hat / (sqrt(v_hat) + eps) + wd theta)
            let upd = ((&self.m[i] / bc1)? / ((&self.v[i] / bc2)?.sqrt()? + hp.eps)?)?;
            let decay = if var.rank() >= 2 { hp.weight_decay } else { 0.0 };
            let new = ((var.as_tensor() * (1.0 - lr * decay))? - (upd * lr)?)?;
            var.set(&new)?;
        }
        Ok(())
    }

    /// The moments as `opt.m.NAME` / `opt.v.NAME` tensors for the checkpoint.
    pub fn state(&self) -> Weights {
        let mut w = Weights::new();
        for (i, (name, _)) in self.vars.iter().enumerate() {
            w.insert(format!("opt.m.{name}"), self.m[i].clone());
            w.insert(format!("opt.v.{name}"), self.v[i].clone());
        }
        w
    }

    pub fn load_state(&mut self, extra: &Weights, step: u64) -> Result<()> {
        for (i, (name, _)) in self.vars.iter().enumerate() {
            let get = |k: String| extra.get(&k).cloned().ok_or_else(|| anyhow::anyhow!("checkpoint lacks optimizer state `{k}`"));
            self.m[i] = get(format!("opt.m.{name}"))?;
            self.v[i] = get(format!("opt.v.{name}"))?;
        }
        self.step = step;
        Ok(())
    }
}

/// Linear warmup then cosine decay to `min_lr` at `iters`.
pub fn lr_at(iter: usize, lr: f64, min_lr: f64, warmup: usize, iters: usize) -> f64 {
    if iter < warmup {
        return lr * (iter + 1) as f64 / warmup as f64;
    }
    if iter >= iters {
        return min_lr;
    }
    let ratio = (iter - warmup) as f64 / (iters - warmup).max(1) as f64;
    min_lr + 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos()) * (lr - min_lr)
}
