//! The NRGPT energies and their exact, analytic gradients with respect to the
//! normalised states `g` (shape (B, n, D)). All are plain tensor ops, so one
//! pass of candle's autograd trains through them; none relies on autograd
//! of autograd (candle 0.11 gets the gradient of a gradient silently wrong).

use candle_core::{Result, Tensor, D};

use crate::linear::linear;
use crate::ops::{activation, causal_masks, merge_heads, softmax_lse, split_heads};
use crate::Activation;

/// Attention energy parameters: `J_h = Wk_h^T Wq_h`, weight `alpha_h`, inverse
/// temperature `beta` (`ModelConfig::beta`), mask strict (B < A) or with the
/// diagonal (B <= A).
pub struct AttnEnergy {
    pub wq: Tensor,    // (H*dh, D)
    pub wk: Tensor,    // (H*dh, D)
    pub alpha: Tensor, // (H)
    pub n_head: usize,
    pub beta: f64,
    /// The mask includes B = A.
    pub diag: bool,
}

/// The energy's gradient with respect to the state g (B, n, D) and, when
/// asked, the per-token energy (B, n). (EBT's `ebt::EnergyGrad` is the other
/// way round: the energy always, the gradient when asked.)
pub struct StateGrad {
    pub grad: Tensor,
    pub energy: Option<Tensor>,
}

impl AttnEnergy {
    /// E_AT(A) = - sum_h (alpha_h/beta) log sum_{B<A} exp(beta g_B^T J_h g_A);
    /// dE_AT/dg_A = - sum_h alpha_h J_h^T sum_{B<A} p^h_AB g_B = - sum_h alpha_h Wq_h^T sum_B p^h_AB k_B.
    /// With the diagonal (B <= A) g_A is also the key of the B = A term, so
    /// the exact gradient gains - sum_h alpha_h p^h_AA J_h g_A = - sum_h alpha_h p^h_AA Wk_h^T q_A
    /// (the reference drops it: its update is then not a gradient of E_A).
    pub fn energy_grad(&self, g: &Tensor, want_energy: bool) -> Result<StateGrad> {
        self.energy_grad_dropped(g, want_energy, None)
    }

    /// `energy_grad` with training's attention dropout: the probabilities in
    /// the gradient become p * mask (mask (B, H, n, n), inverted dropout), as
    /// the reference drops its `wei`. The update is then no longer the
    /// gradient of E_A (training only); the energy itself is unchanged.
    pub fn energy_grad_dropped(&self, g: &Tensor, want_energy: bool, drop: Option<&Tensor>) -> Result<StateGrad> {
        let (b, n, _) = g.dims3()?;
        let h = self.n_head;
        let beta = self.beta;
        let q = split_heads(&linear(g, &self.wq, None)?, h)?; // (B,H,n,dh)
        let k = split_heads(&linear(g, &self.wk, None)?, h)?;
        let (mask, rows) = causal_masks(n, !self.diag, g.dtype(), g.device())?;
        let s = (q.matmul(&k.t()?)? * beta)?.broadcast_add(&mask)?; // (B,H,A,B)
        let (p, lse) = softmax_lse(&s)?;
        let p = p.broadcast_mul(&rows)?; // under the strict mask the first token attends to nothing
        let p = match drop {
            Some(m) => (p * m)?,
            None => p,
        };
        let alpha = self.alpha.reshape((1, h, 1, 1))?;
        let ctx = p.matmul(&k)?.broadcast_mul(&alpha)?; // alpha_h sum_B p_AB k_B
        let mut grad = linear(&merge_heads(&ctx)?, &self.wq.t()?, None)?;
        if self.diag {
            // p_AA: the diagonal of each (A, B) block, (B, H, n, 1)
            let eye = Tensor::eye(n, g.dtype(), g.device())?;
            let p_self = p.broadcast_mul(&eye)?.sum_keepdim(3)?;
            // alpha_h p_AA q_A, then - Wk^T of it
            let own = q.broadcast_mul(&p_self)?.broadcast_mul(&alpha)?;
            grad = (grad + linear(&merge_heads(&own)?, &self.wk.t()?, None)?)?;
        }
        let grad = grad.neg()?;
        let energy = if want_energy {
            let rows = rows.reshape((1, 1, n))?;
            let e = lse.broadcast_mul(&rows)?.broadcast_mul(&(alpha.reshape((1, h, 1))? / -beta)?)?;
            Some(e.sum(1)?.reshape((b, n))?)
        } else {
            None
        };
        Ok(StateGrad { grad, energy })
    }
}

/// Dense-Associative-Memory feed-forward energies.
pub enum FfEnergy {
    /// E = -|| s(W g + b) ||^2
    Ff1 { w: Tensor, b: Tensor },
    /// E = -g^T (W2 s(W1 g + b1) + b2)
    Ff2w { w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor },
}

impl FfEnergy {
    pub fn energy_grad(&self, act: Activation, g: &Tensor, want_energy: bool) -> Result<StateGrad> {
        match self {
            FfEnergy::Ff1 { w, b } => {
                let u = linear(g, w, Some(b))?;
                let (s, ds) = activation(act, &u)?;
                // dE/dg = -2 W^T (s(u) * s'(u))
                let grad = (linear(&(&s * &ds)?, &w.t()?, None)? * -2.0)?;
                let energy = if want_energy { Some(s.sqr()?.sum(D::Minus1)?.neg()?) } else { None };
                Ok(StateGrad { grad, energy })
            }
            FfEnergy::Ff2w { w1, b1, w2, b2 } => {
                let u = linear(g, w1, Some(b1))?;
                let (s, ds) = activation(act, &u)?;
                // out = W2 s(u) + b2; dE/dg = -(W2 s(u) + b2) - W1^T (s'(u) * (W2^T g))
                let out = linear(&s, w2, Some(b2))?;
                let back = linear(&(ds * linear(g, &w2.t()?, None)?)?, &w1.t()?, None)?;
                let grad = (&out + back)?.neg()?;
                let energy = if want_energy { Some((g * &out)?.sum(D::Minus1)?.neg()?) } else { None };
                Ok(StateGrad { grad, energy })
            }
        }
    }
}
