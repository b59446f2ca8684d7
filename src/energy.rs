//! The NRGPT energies and their exact, analytic gradients with respect to the
//! normalised states `g` (shape (B, n, D)). All are plain tensor ops, so one
//! pass of candle's autograd trains through them; none relies on autograd
//! of autograd (wrong on candle 0.11, see notes/energy-models.md).

use candle_core::{DType, Device, Result, Tensor, D};

use crate::linear::linear;
use crate::Activation;

/// Additive score for masked-out pairs: finite (not -inf) so a row with no
/// allowed entry (the first token under a strict mask) stays NaN-free.
const MASKED: f64 = -1e30;

/// `(s(u), s'(u))` for the activation, both exact.
pub fn activation(act: Activation, u: &Tensor) -> Result<(Tensor, Tensor)> {
    match act {
        Activation::Gelu => {
            // GELU(u) = u Phi(u), GELU'(u) = Phi(u) + u phi(u)
            let cdf = ((u / std::f64::consts::SQRT_2)?.erf()? + 1.0)? * 0.5;
            let cdf = cdf?;
            let pdf = (u.sqr()? * -0.5)?.exp()? * (1.0 / (2.0 * std::f64::consts::PI).sqrt());
            let pdf = pdf?;
            let s = (u * &cdf)?;
            let ds = (cdf + (u * pdf)?)?;
            Ok((s, ds))
        }
        Activation::Relu => {
            let s = u.relu()?;
            let ds = u.gt(0.0)?.to_dtype(u.dtype())?;
            Ok((s, ds))
        }
    }
}

/// Causal masks for a length-n sequence: additive score mask (0 where allowed)
/// and a 0/1 row mask zeroing rows that have no allowed key.
pub fn causal_masks(n: usize, strict: bool, dtype: DType, dev: &Device) -> Result<(Tensor, Tensor)> {
    let mut add = vec![0f32; n * n];
    for a in 0..n {
        for b in 0..n {
            let allowed = if strict { b < a } else { b <= a };
            if !allowed {
                add[a * n + b] = MASKED as f32;
            }
        }
    }
    let rows: Vec<f32> = (0..n).map(|a| if strict && a == 0 { 0.0 } else { 1.0 }).collect();
    let add = Tensor::from_vec(add, (n, n), dev)?.to_dtype(dtype)?;
    let rows = Tensor::from_vec(rows, (n, 1), dev)?.to_dtype(dtype)?;
    Ok((add, rows))
}

/// Softmax and log-sum-exp over the last dim, written with differentiable ops
/// (candle-nn's fused softmax has no backward).
pub fn softmax_lse(s: &Tensor) -> Result<(Tensor, Tensor)> {
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    let z = e.sum_keepdim(D::Minus1)?;
    let p = e.broadcast_div(&z)?;
    let lse = (z.log()? + m)?;
    Ok((p, lse.squeeze(D::Minus1)?))
}

/// Splits (B, n, H*dh) into (B, H, n, dh).
pub fn split_heads(t: &Tensor, n_head: usize) -> Result<Tensor> {
    let (b, n, hd) = t.dims3()?;
    t.reshape((b, n, n_head, hd / n_head))?.transpose(1, 2)?.contiguous()
}

/// Merges (B, H, n, dh) back into (B, n, H*dh).
pub fn merge_heads(t: &Tensor) -> Result<Tensor> {
    let (b, h, n, dh) = t.dims4()?;
    t.transpose(1, 2)?.reshape((b, n, h * dh))
}

/// Attention energy parameters: `J_h = Wk_h^T Wq_h`, weight `alpha_h`, inverse
/// temperature `beta = 1/sqrt(head_dim)`.
pub struct AttnEnergy {
    pub wq: Tensor,    // (H*dh, D)
    pub wk: Tensor,    // (H*dh, D)
    pub alpha: Tensor, // (H)
    pub n_head: usize,
}

/// Energy gradient (B, n, D) and, when asked, per-token energy (B, n).
pub struct EnergyGrad {
    pub grad: Tensor,
    pub energy: Option<Tensor>,
}

impl AttnEnergy {
    pub fn beta(&self) -> Result<f64> {
        Ok(1.0 / ((self.wq.dim(0)? / self.n_head) as f64).sqrt())
    }

    /// E_AT(A) = - sum_h (alpha_h/beta) log sum_{B<A} exp(beta g_B^T J_h g_A);
    /// dE_AT/dg_A = - sum_h alpha_h J_h^T sum_{B<A} p^h_AB g_B = - sum_h alpha_h Wq_h^T sum_B p^h_AB k_B.
    pub fn energy_grad(&self, g: &Tensor, want_energy: bool) -> Result<EnergyGrad> {
        let (b, n, _) = g.dims3()?;
        let h = self.n_head;
        let beta = self.beta()?;
        let q = split_heads(&linear(g, &self.wq, None)?, h)?; // (B,H,n,dh)
        let k = split_heads(&linear(g, &self.wk, None)?, h)?;
        let (mask, rows) = causal_masks(n, true, g.dtype(), g.device())?;
        let s = (q.matmul(&k.t()?)? * beta)?.broadcast_add(&mask)?; // (B,H,A,B)
        let (p, lse) = softmax_lse(&s)?;
        let p = p.broadcast_mul(&rows)?; // the first token attends to nothing
        let alpha = self.alpha.reshape((1, h, 1, 1))?;
        let ctx = p.matmul(&k)?.broadcast_mul(&alpha)?; // alpha_h sum_B p_AB k_B
        let grad = linear(&merge_heads(&ctx)?, &self.wq.t()?, None)?.neg()?;
        let energy = if want_energy {
            let rows = rows.reshape((1, 1, n))?;
            let e = lse.broadcast_mul(&rows)?.broadcast_mul(&(alpha.reshape((1, h, 1))? / -beta)?)?;
            Some(e.sum(1)?.reshape((b, n))?)
        } else {
            None
        };
        Ok(EnergyGrad { grad, energy })
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
    pub fn energy_grad(&self, act: Activation, g: &Tensor, want_energy: bool) -> Result<EnergyGrad> {
        match self {
            FfEnergy::Ff1 { w, b } => {
                let u = linear(g, w, Some(b))?;
                let (s, ds) = activation(act, &u)?;
                // dE/dg = -2 W^T (s(u) * s'(u))
                let grad = (linear(&(&s * &ds)?, &w.t()?, None)? * -2.0)?;
                let energy = if want_energy { Some(s.sqr()?.sum(D::Minus1)?.neg()?) } else { None };
                Ok(EnergyGrad { grad, energy })
            }
            FfEnergy::Ff2w { w1, b1, w2, b2 } => {
                let u = linear(g, w1, Some(b1))?;
                let (s, ds) = activation(act, &u)?;
                let out = linear(&s, w2, Some(b2))?; // W2 s(u) + b2
                // dE/dg = -(W2 s(u) + b2) - W1^T (s'(u) * (W2^T g))
                let back = linear(&(ds * linear(g, &w2.t()?, None)?)?, &w1.t()?, None)?;
                let grad = (&out + back)?.neg()?;
                let energy = if want_energy { Some((g * &out)?.sum(D::Minus1)?.neg()?) } else { None };
                Ok(EnergyGrad { grad, energy })
            }
        }
    }
}
