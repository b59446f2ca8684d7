//! Element-wise math on f32 written once for every f32 path: the CPU decoder
//! (crates/engine) and the fast trainer (trainer/src/fast) call these. The
//! WGSL copies (`shaders/act.wgsl: act, erf_approx` of `act3` and
//! `erf_with_exp`; `shaders/norm.wgsl` and `shaders/ebt_norm.wgsl` of
//! `norm_row`) name this module, and the engine parity tests hold them to it;
//! WGSL has its own `exp`. Plain loops without branches,
//! `#[inline(always)]`, so LLVM vectorises them inside the callers' loops.

use crate::{Activation, NormKind};

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 * 2^23: adding it rounds to the nearest integer, held in the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
const INV_SQRT_2PI: f32 = 0.398_942_3;
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

/// e^x to ~1 ulp for x in [-87, 88] (clamped outside): x = k ln2 + r,
/// |r| <= ln2/2, e^r by its degree-7 Taylor polynomial, 2^k from the exponent bits.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // (plain mul + add: `mul_add` is a libm call on targets without FMA)
    let t = x * LOG2E + ROUND;
    let kf = t - ROUND;
    let k = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    // e^r = sum_{i<=7} r^i / i!  (Horner)
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    p * f32::from_bits(((k + 127) << 23) as u32)
}

/// y = softmax(z) over one row (max-shifted, with [`exp`]).
pub fn softmax_row(z: &[f32], y: &mut [f32]) {
    let mx = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for (o, &x) in y.iter_mut().zip(z) {
        *o = exp(x - mx);
        sum += *o;
    }
    let inv = 1.0 / sum;
    y.iter_mut().for_each(|o| *o *= inv);
}

/// erf(z) given e = exp(-z^2): Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
/// (WGSL has no erf, so the kernel uses the same polynomial).
#[inline(always)]
pub fn erf_with_exp(z: f32, e: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let erf_abs = 1.0 - poly * e;
    if z < 0.0 {
        -erf_abs
    } else {
        erf_abs
    }
}

/// (s(u), s'(u), s''(u)) for the activation.
/// GELU(u) = u Phi(u); GELU' = Phi + u phi; GELU'' = phi (2 - u^2),
/// Phi via erf, sharing exp(-u^2/2) with phi.
#[inline(always)]
pub fn act3(act: Activation, u: f32) -> (f32, f32, f32) {
    match act {
        Activation::Gelu => {
            let e = exp(-0.5 * u * u); // exp(-z^2), z = u / sqrt 2
            let phi = e * INV_SQRT_2PI;
            let cdf = 0.5 * (1.0 + erf_with_exp(u * FRAC_1_SQRT_2, e));
            (u * cdf, cdf + u * phi, phi * (2.0 - u * u))
        }
        // ReLU: s = max(u, 0), s' = [u > 0], s'' = 0
        Activation::Relu => {
            let on = if u > 0.0 { 1.0 } else { 0.0 };
            (u * on, on, 0.0)
        }
    }
}

/// One row: xh = (x - mean) / sqrt(var + eps) (LayerNorm) or x / sqrt(mean x^2 + eps)
/// (RMSNorm), g = gamma * xh; returns 1 / the scale (kept for the backward).
#[inline(always)]
pub fn norm_row(kind: NormKind, x: &[f32], gamma: &[f32], eps: f32, xh: &mut [f32], g: &mut [f32]) -> f32 {
    let d = x.len();
    let mean = match kind {
        NormKind::LayerNorm => x.iter().sum::<f32>() / d as f32,
        NormKind::RmsNorm => 0.0,
    };
    let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
    let rs = 1.0 / (var + eps).sqrt();
    for i in 0..d {
        xh[i] = (x[i] - mean) * rs;
        g[i] = xh[i] * gamma[i];
    }
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_gelu_match_std() {
        for i in -800..=800 {
            let x = i as f32 / 20.0;
            let rel = (exp(x) - x.exp()).abs() / x.exp();
            assert!(rel < 4e-7, "exp({x}): {rel}");
            // GELU against u Phi(u) with libm's exp, and its derivative by central differences
            let (s, ds, dds) = act3(Activation::Gelu, x);
            let h = 1e-2f64;
            let gelu = |u: f64| u * 0.5 * (1.0 + erf_with_exp((u / 2f64.sqrt()) as f32, (-u * u / 2.0).exp() as f32) as f64);
            let xd = x as f64;
            assert!((s as f64 - gelu(xd)).abs() < 1e-5 * (1.0 + xd.abs()), "gelu({x})");
            assert!((ds as f64 - (gelu(xd + h) - gelu(xd - h)) / (2.0 * h)).abs() < 1e-3, "gelu'({x})");
            let (_, d1p, _) = act3(Activation::Gelu, x + 1e-2);
            let (_, d1m, _) = act3(Activation::Gelu, x - 1e-2);
            assert!((dds - (d1p - d1m) / 2e-2).abs() < 2e-3, "gelu''({x})");
        }
        assert!((erf_with_exp(1.0, (-1f32).exp()) - 0.842_700_8).abs() < 2e-7);
    }

    #[test]
    fn norms_centre_and_scale() {
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let gamma = [1.0, 2.0, 1.0, 1.0];
        let (mut xh, mut g) = ([0f32; 4], [0f32; 4]);
        norm_row(NormKind::LayerNorm, &x, &gamma, 0.0, &mut xh, &mut g);
        assert!(xh.iter().sum::<f32>().abs() < 1e-6);
        assert!((xh.iter().map(|v| v * v).sum::<f32>() / 4.0 - 1.0).abs() < 1e-5);
        assert_eq!(g[1], 2.0 * xh[1]);
        let rs = norm_row(NormKind::RmsNorm, &x, &gamma, 0.0, &mut xh, &mut g);
        assert!((rs - 1.0 / (50f32 / 4.0).sqrt()).abs() < 1e-6);
    }
}
