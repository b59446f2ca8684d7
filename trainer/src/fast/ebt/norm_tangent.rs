//! The norm's tangent (its Jacobian-vector product) and the adjoint of the
//! norm with its tangent together, which adds the norm's second derivative.
//! Per row, with r = 1/scale, xc the centred input (LayerNorm; RMSNorm does
//! not centre) and xh = r xc:
//!   xh' = r (xc' - xh mean(xh xc')),  g' = gamma xh'.

use nrgpt_core::NormKind;

/// The input tangent `xd` to xh' (`xhd`) and g' (`gd`), rows of width d.
#[allow(clippy::too_many_arguments)]
pub fn tangent(kind: NormKind, xh: &[f32], rstd: &[f32], gamma: &[f32], xd: &[f32], d: usize, xhd: &mut [f32], gd: &mut [f32]) {
    for (row, r) in rstd.iter().enumerate() {
        let span = row * d..(row + 1) * d;
        let (xh, xd) = (&xh[span.clone()], &xd[span.clone()]);
        let mu = if kind == NormKind::LayerNorm { xd.iter().sum::<f32>() / d as f32 } else { 0.0 };
        let m = xh.iter().zip(xd).map(|(h, x)| h * (x - mu)).sum::<f32>() / d as f32;
        let (xhd, gd) = (&mut xhd[span.clone()], &mut gd[span]);
        for i in 0..d {
            xhd[i] = r * (xd[i] - mu - xh[i] * m);
            gd[i] = gamma[i] * xhd[i];
        }
    }
}

/// Adjoint of (g, g') = (N(x), J_N(x) x') with respect to x, given `ab` =
/// dL/dg (None: zero) and `tb` = dL/dg': accumulates the primal part
/// J_N^T (gamma ab) plus the second-order part that g' sends through xh and r
/// into `dx`, and ab xh + tb xh' into `dgamma`. (The adjoint of x' is
/// J_N^T (gamma tb), the first-order VJP, computed elsewhere.)
#[allow(clippy::too_many_arguments)]
pub fn second_bwd(
    kind: NormKind,
    xh: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    ab: Option<&[f32]>,
    tb: &[f32],
    xd: &[f32],
    xhd: &[f32],
    d: usize,
    dx: &mut [f32],
    dgamma: &mut [f32],
) {
    let ln = kind == NormKind::LayerNorm;
    let inv_d = 1.0 / d as f32;
    let mut xc_bar = vec![0f32; d];
    for (row, &r) in rstd.iter().enumerate() {
        let span = row * d..(row + 1) * d;
        let (xh, xd, xhd, tb) = (&xh[span.clone()], &xd[span.clone()], &xhd[span.clone()], &tb[span.clone()]);
        let ab = ab.map(|a| &a[span.clone()]);
        let mu = if ln { xd.iter().sum::<f32>() * inv_d } else { 0.0 };
        // m = mean(xh xc'), mu_w = mean(w xh) with w = gamma tb, w.xh' = r * rbar
        let (mut m, mut mu_w, mut w_xhd) = (0f32, 0f32, 0f32);
        for i in 0..d {
            let w = gamma[i] * tb[i];
            m += xh[i] * (xd[i] - mu);
            mu_w += w * xh[i];
            w_xhd += w * xhd[i];
        }
        m *= inv_d;
        mu_w *= inv_d;
        // dL/dxh = gamma ab - r m w - r mu_w xc'; then S = dL/dxh . xh
        let mut s = 0f32;
        for i in 0..d {
            let w = gamma[i] * tb[i];
            let primal = ab.map_or(0.0, |a| gamma[i] * a[i]);
            xc_bar[i] = primal - r * m * w - r * mu_w * (xd[i] - mu);
            s += xc_bar[i] * xh[i];
            dgamma[i] += ab.map_or(0.0, |a| a[i] * xh[i]) + tb[i] * xhd[i];
        }
        // xh = r xc, r = (mean xc^2 + eps)^-1/2: dL/dxc = r (dL/dxh - xh (S + r rbar) / d)
        let k = (s + w_xhd) * inv_d;
        let mut mean = 0f32;
        for i in 0..d {
            xc_bar[i] = r * (xc_bar[i] - xh[i] * k);
            mean += xc_bar[i];
        }
        let mean = if ln { mean * inv_d } else { 0.0 };
        dx[span].iter_mut().zip(&xc_bar).for_each(|(o, c)| *o += c - mean);
    }
}
