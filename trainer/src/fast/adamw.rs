//! AdamW in place on the flat f32 buffers, the same update as
//! `optim::AdamW` (beta 0.9/0.99, eps 1e-8, decoupled decay on rank >= 2
//! tensors only), with its moments saved under the same checkpoint names.

use anyhow::Result;
use nrgpt_core::model::Weights;

use super::buffers::Buffers;
use nrgpt_core::layout::WeightLayout;
use crate::optim::AdamHyper;

pub struct FastAdamW {
    pub m: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    pub step: u64,
    pub hp: AdamHyper,
    /// Per-parameter multiple of the learning rate (EBT's step size has its own).
    pub lr_mult: Vec<f64>,
}

impl FastAdamW {
    pub fn new(lay: &WeightLayout, weight_decay: f64) -> Self {
        Self { m: lay.zeros(), v: lay.zeros(), step: 0, hp: AdamHyper::new(weight_decay), lr_mult: vec![1.0; lay.specs.len()] }
    }

    /// One update at learning rate `lr` with gradients scaled by `clip`.
    pub fn step(&mut self, lay: &WeightLayout, params: &mut [Vec<f32>], grads: &[Vec<f32>], lr: f64, clip: f64) {
        self.step += 1;
        let hp = self.hp;
        let (bc1, bc2) = hp.bias_corrections(self.step);
        let (b1, b2, eps, clip) = (hp.beta1 as f32, hp.beta2 as f32, hp.eps as f32, clip as f32);
        let (ib1, ib2) = ((1.0 - hp.beta1) as f32, (1.0 - hp.beta2) as f32);
        let (ibc1, ibc2) = ((1.0 / bc1) as f32, (1.0 / bc2) as f32);
        for i in 0..params.len() {
            let decay = if lay.specs[i].shape.len() >= 2 { hp.weight_decay } else { 0.0 };
            let lr = lr * self.lr_mult[i];
            let keep = (1.0 - lr * decay) as f32;
            let lr = lr as f32;
            let (p, g, m, v) = (&mut params[i], &grads[i], &mut self.m[i], &mut self.v[i]);
            for j in 0..p.len() {
                let g = g[j] * clip;
                // m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
                m[j] = m[j] * b1 + g * ib1;
                v[j] = v[j] * b2 + g * g * ib2;
                // theta = theta (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)
                let upd = (m[j] * ibc1) / ((v[j] * ibc2).sqrt() + eps);
                p[j] = p[j] * keep - upd * lr;
            }
        }
    }

    /// `opt.m.NAME` / `opt.v.NAME`, as `optim::AdamW::state`.
    pub fn state(&self, lay: &WeightLayout) -> Result<Weights> {
        let mut w = lay.to_weights(&self.m, "opt.m.")?;
        w.extend(lay.to_weights(&self.v, "opt.v.")?);
        Ok(w)
    }

    pub fn load_state(&mut self, lay: &WeightLayout, extra: &Weights, step: u64) -> Result<()> {
        self.m = lay.from_weights(extra, "opt.m.")?;
        self.v = lay.from_weights(extra, "opt.v.")?;
        self.step = step;
        Ok(())
    }
}
