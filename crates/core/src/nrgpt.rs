//! NRGPT: one shared energy block applied recurrently. Each step every token
//! descends its own energy, `x_A <- x_A - eta * dE_A/dg_A` with `g = N(x)`.

use candle_core::{Result, Tensor};

use crate::energy::{AttnEnergy, StateGrad, FfEnergy};
use crate::linear::linear;
use crate::norm::norm;
use crate::{Activation, NormKind};

/// The step-size map from energy gradient to state update.
pub enum Eta {
    /// `eta = c * diag(gamma)`, `c = exp(log_c) > 0`.
    Stable { log_c: Tensor },
    /// A learned D x D matrix applied as `eta @ grad`.
    Free { w: Tensor },
}

pub struct NrgptBlock {
    pub norm: NormKind,
    pub eps: f64,
    /// The block norm's gain: learned, or a constant 1 for the bare norm
    /// (then also the stable step's `diag(gamma)` = I).
    pub gamma: Tensor,
    /// The bare norm's learnable bias: `g = xh + bias`.
    pub norm_bias: Option<Tensor>,
    pub attn: AttnEnergy,
    pub ff: FfEnergy,
    /// Weight of the feed-forward energy (the reference's `scale_ff`).
    pub ff_scale: Tensor,
    pub eta: Eta,
    pub act: Activation,
}

/// One step's result for all tokens.
pub struct StepOut {
    pub x_next: Tensor,
    /// The normalised state the step read: g_A(t).
    pub g: Tensor,
    /// E_A(t) at the state the step started from, (B, n), when asked.
    pub energy: Option<Tensor>,
}

impl NrgptBlock {
    /// E_A = E_AT(A) + ff_scale * E_FF(A) and its gradient w.r.t. g_A.
    pub fn energy_grad(&self, g: &Tensor, want_energy: bool) -> Result<StateGrad> {
        self.energy_grad_dropped(g, want_energy, None)
    }

    /// `energy_grad` with the attention probabilities dropped by `attn_drop` (training only).
    fn energy_grad_dropped(&self, g: &Tensor, want_energy: bool, attn_drop: Option<&Tensor>) -> Result<StateGrad> {
        let a = self.attn.energy_grad_dropped(g, want_energy, attn_drop)?;
        let f = self.ff.energy_grad(self.act, g, want_energy)?;
        let grad = (a.grad + f.grad.broadcast_mul(&self.ff_scale)?)?;
        let energy = match (a.energy, f.energy) {
            (Some(ea), Some(ef)) => Some((ea + ef.broadcast_mul(&self.ff_scale)?)?),
            _ => None,
        };
        Ok(StateGrad { grad, energy })
    }

    /// `eta * grad` for the configured step-size map.
    pub fn apply_eta(&self, grad: &Tensor) -> Result<Tensor> {
        match &self.eta {
            Eta::Stable { log_c } => grad.broadcast_mul(&self.gamma)?.broadcast_mul(&log_c.exp()?),
            Eta::Free { w } => linear(grad, w, None),
        }
    }

    pub fn normed(&self, x: &Tensor) -> Result<Tensor> {
        let g = norm(self.norm, x, &self.gamma, self.eps)?.g;
        match &self.norm_bias {
            // g = gamma * xh + bias (the bias leaves J_N, hence the descent, unchanged)
            Some(b) => g.broadcast_add(b),
            None => Ok(g),
        }
    }

    /// x(t+1) = x(t) - eta * dE/dg(t); `dropout` (if any) masks the update,
    /// `attn_drop` (if any) the attention probabilities inside dE/dg.
    pub fn step(&self, x: &Tensor, want_energy: bool, dropout: Option<&Tensor>, attn_drop: Option<&Tensor>) -> Result<StepOut> {
        let g = self.normed(x)?;
        let eg = self.energy_grad_dropped(&g, want_energy, attn_drop)?;
        let mut update = self.apply_eta(&eg.grad)?;
        if let Some(mask) = dropout {
            update = (update * mask)?;
        }
        Ok(StepOut { x_next: (x - update)?, g, energy: eg.energy })
    }
}
