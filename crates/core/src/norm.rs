//! The norm layer `g = N(x)` (LayerNorm or RMSNorm, learnable scale gamma, no
//! bias) and its vector-Jacobian product, which the descent never needs but
//! the stability argument does (`J_N = diag(gamma) M`, M symmetric PSD).

use candle_core::{Result, Tensor, D};

use crate::NormKind;

/// `g = gamma * xh`, with what the VJP needs: `xh` and the per-row scale
/// (`s = sqrt(var + eps)` for LayerNorm, `r = sqrt(mean x^2 + eps)` for RMSNorm).
pub struct Normed {
    pub g: Tensor,
    pub xh: Tensor,
    pub scale: Tensor,
}

pub fn norm(kind: NormKind, x: &Tensor, gamma: &Tensor, eps: f64) -> Result<Normed> {
    let (centred, var) = match kind {
        // LayerNorm: xh = (x - mean x) / s, s = sqrt(var x + eps)
        NormKind::LayerNorm => {
            let xc = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
            let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
            (xc, var)
        }
        // RMSNorm: xh = x / r, r = sqrt(mean(x^2) + eps)
        NormKind::RmsNorm => (x.clone(), x.sqr()?.mean_keepdim(D::Minus1)?),
    };
    let scale = (var + eps)?.sqrt()?;
    let xh = centred.broadcast_div(&scale)?;
    let g = xh.broadcast_mul(gamma)?;
    Ok(Normed { g, xh, scale })
}

/// `J_N^T v` at the point `n` was computed at, with `u = gamma * v`:
/// LayerNorm `(u - mean(u) - xh * mean(u * xh)) / s`, RMSNorm `(u - xh * mean(u * xh)) / r`.
pub fn norm_vjp(kind: NormKind, n: &Normed, gamma: &Tensor, v: &Tensor) -> Result<Tensor> {
    let u = v.broadcast_mul(gamma)?;
    let proj = n.xh.broadcast_mul(&(&u * &n.xh)?.mean_keepdim(D::Minus1)?)?;
    let r = match kind {
        NormKind::LayerNorm => (u.broadcast_sub(&u.mean_keepdim(D::Minus1)?)? - proj)?,
        NormKind::RmsNorm => (u - proj)?,
    };
    r.broadcast_div(&n.scale)
}
