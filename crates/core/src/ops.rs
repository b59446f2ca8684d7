//! Tensor ops the NRGPT energies, the GPT baselines and the loss share:
//! the activation with its derivative, causal masks, a differentiable
//! softmax, head splitting.

use candle_core::{DType, Device, Result, Tensor, D};

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
