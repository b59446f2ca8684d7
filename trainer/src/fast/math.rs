//! Element-wise kernels on f32 slices, batched over rows: the activations with
//! their first and second derivatives, the norms and their vector-Jacobian
//! products, the masked softmaxes. The per-element formulas (exp, erf/GELU, a
//! norm row) are nrgpt_core::scalar's, shared with the CPU decoder.

use nrgpt_core::scalar::{act3, exp, norm_row};
use nrgpt_core::{Activation, NormKind};

/// Runs `$body` compiled for AVX2 + FMA when the CPU has them (the default
/// x86-64 target only assumes SSE2), else as is. `$body` must be safe code.
macro_rules! with_avx2 {
    ($body:block) => {{
        #[cfg(target_arch = "x86_64")]
        {
            /// # Safety
            /// The CPU has AVX2 and FMA.
            #[target_feature(enable = "avx2,fma")]
            unsafe fn fast<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: the features were detected at run time.
                return unsafe { fast(|| $body) };
            }
        }
        $body
    }};
}

/// g = gamma * xh per row of width d; LayerNorm xh = (x - mean) / sqrt(var + eps),
/// RMSNorm xh = x / sqrt(mean x^2 + eps). Keeps xh and 1/scale for the backward.
// A row kernel: each slice is one operand or output, named as in the math above.
#[allow(clippy::too_many_arguments)]
pub fn norm_fwd(kind: NormKind, x: &[f32], gamma: &[f32], eps: f32, d: usize, xh: &mut [f32], rstd: &mut [f32], g: &mut [f32]) {
    with_avx2!({
        for (r, xr) in x.chunks_exact(d).enumerate() {
            rstd[r] = norm_row(kind, xr, gamma, eps, &mut xh[r * d..(r + 1) * d], &mut g[r * d..(r + 1) * d]);
        }
    })
}

/// dx += J_N^T dg and dgamma += dg * xh. With u = gamma * dg:
/// LayerNorm J^T dg = (u - mean u - xh mean(u xh)) / s; RMSNorm (u - xh mean(u xh)) / r.
// A row kernel: each slice is one operand or output, named as in the math above.
#[allow(clippy::too_many_arguments)]
pub fn norm_bwd(kind: NormKind, dg: &[f32], xh: &[f32], rstd: &[f32], gamma: &[f32], d: usize, dx: &mut [f32], dgamma: &mut [f32]) {
    with_avx2!({
        for (r, dgr) in dg.chunks_exact(d).enumerate() {
            let xhr = &xh[r * d..(r + 1) * d];
            let (mut su, mut sux) = (0.0f32, 0.0f32);
            for i in 0..d {
                let u = gamma[i] * dgr[i];
                su += u;
                sux += u * xhr[i];
                dgamma[i] += dgr[i] * xhr[i];
            }
            let mu = if kind == NormKind::LayerNorm { su / d as f32 } else { 0.0 };
            let mux = sux / d as f32;
            let dxr = &mut dx[r * d..(r + 1) * d];
            for i in 0..d {
                dxr[i] += rstd[r] * (gamma[i] * dgr[i] - mu - xhr[i] * mux);
            }
        }
    })
}

/// out[j] += sum over rows of m (rows x cols).
pub fn col_sum_into(m: &[f32], cols: usize, out: &mut [f32], scale: f32) {
    for row in m.chunks_exact(cols) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o += scale * v;
        }
    }
}

/// The ff2w activations in place: `s` holds u - b1 on entry; leaves s(u),
/// s'(u), s''(u) and z = s'(u) * v, row width m.
// A row kernel: each slice is one operand or output, named as in the math above.
#[allow(clippy::too_many_arguments)]
pub fn ff2w_act(act: Activation, b1: &[f32], m: usize, s: &mut [f32], ds: &mut [f32], dds: &mut [f32], v: &[f32], z: &mut [f32]) {
    fn run<const GELU: bool>(b1: &[f32], m: usize, s: &mut [f32], ds: &mut [f32], dds: &mut [f32], v: &[f32], z: &mut [f32]) {
        with_avx2!({
            let rows = s.chunks_exact_mut(m).zip(ds.chunks_exact_mut(m)).zip(dds.chunks_exact_mut(m)).zip(v.chunks_exact(m)).zip(z.chunks_exact_mut(m));
            for ((((s, ds), dds), v), z) in rows {
                for j in 0..m {
                    let (a0, a1, a2) = act3(if GELU { Activation::Gelu } else { Activation::Relu }, s[j] + b1[j]);
                    s[j] = a0;
                    ds[j] = a1;
                    dds[j] = a2;
                    // z = s'(u) * (W2^T g)
                    z[j] = a1 * v[j];
                }
            }
        })
    }
    match act {
        Activation::Gelu => run::<true>(b1, m, s, ds, dds, v, z),
        Activation::Relu => run::<false>(b1, m, s, ds, dds, v, z),
    }
}

/// The activation with its derivatives in place: `s` holds u - b1 on entry;
/// leaves s(u), s'(u), s''(u), row width m (EBT's prediction stream).
pub fn act_with_derivatives(act: Activation, b1: &[f32], m: usize, s: &mut [f32], ds: &mut [f32], dds: &mut [f32]) {
    fn run<const GELU: bool>(b1: &[f32], m: usize, s: &mut [f32], ds: &mut [f32], dds: &mut [f32]) {
        with_avx2!({
            for ((s, ds), dds) in s.chunks_exact_mut(m).zip(ds.chunks_exact_mut(m)).zip(dds.chunks_exact_mut(m)) {
                for j in 0..m {
                    (s[j], ds[j], dds[j]) = act3(if GELU { Activation::Gelu } else { Activation::Relu }, s[j] + b1[j]);
                }
            }
        })
    }
    match act {
        Activation::Gelu => run::<true>(b1, m, s, ds, dds),
        Activation::Relu => run::<false>(b1, m, s, ds, dds),
    }
}

/// The ff1 activations in place: `w` holds u - b1 on entry; leaves w = s s'
/// and h = (s s')' = s'^2 + s s'', row width m.
pub fn ff1_act(act: Activation, b1: &[f32], m: usize, w: &mut [f32], h: &mut [f32]) {
    fn run<const GELU: bool>(b1: &[f32], m: usize, w: &mut [f32], h: &mut [f32]) {
        with_avx2!({
            for (w, hc) in w.chunks_exact_mut(m).zip(h.chunks_exact_mut(m)) {
                for j in 0..m {
                    let (s, ds, dds) = act3(if GELU { Activation::Gelu } else { Activation::Relu }, w[j] + b1[j]);
                    w[j] = s * ds;
                    hc[j] = ds * ds + s * dds;
                }
            }
        })
    }
    match act {
        Activation::Gelu => run::<true>(b1, m, w, h),
        Activation::Relu => run::<false>(b1, m, w, h),
    }
}

/// Softmax over the allowed keys of each row of an n x n score block under
/// the strict causal mask (key j < query a); row 0 attends to nothing (all zero).
pub fn softmax_strict(s: &mut [f32], n: usize) {
    softmax_causal_rows(s, n, 0)
}

/// Softmax under GPT's causal mask, which includes the diagonal (key j <= query a).
pub fn softmax_causal(s: &mut [f32], n: usize) {
    softmax_causal_rows(s, n, 1)
}

/// Row a keeps its first a + `diag` entries (softmax over them) and zeroes the rest.
fn softmax_causal_rows(s: &mut [f32], n: usize, diag: usize) {
    with_avx2!({
        for a in 0..n {
            let row = &mut s[a * n..(a + 1) * n];
            let (allowed, masked) = row.split_at_mut(a + diag);
            masked.fill(0.0);
            if allowed.is_empty() {
                continue;
            }
            let mx = allowed.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut z = 0.0;
            for e in allowed.iter_mut() {
                *e = exp(*e - mx);
                z += *e;
            }
            let inv = 1.0 / z;
            allowed.iter_mut().for_each(|e| *e *= inv);
        }
    })
}

/// Cross-entropy rows: `logits` (rows x v, bias not yet added) becomes
/// dL/dlogits = (softmax - onehot) / total; returns sum of lse - logit[target].
pub fn cross_entropy_rows(logits: &mut [f32], bias: &[f32], tgt: &[u32], v: usize, total: usize, smooth: f32) -> f64 {
    with_avx2!({
        let inv_n = 1.0 / total as f32;
        let mut loss = 0.0f64;
        for (row, lg) in logits.chunks_exact_mut(v).enumerate() {
            lg.iter_mut().zip(bias).for_each(|(l, b)| *l += b);
            let mx = lg.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let y = tgt[row] as usize;
            // the smoothed target's logit: (1 - ls) logit[target] + ls mean(logits)
            let picked = if smooth == 0.0 { lg[y] } else { (1.0 - smooth) * lg[y] + smooth * lg.iter().sum::<f32>() / v as f32 };
            let mut z = 0.0f32;
            for l in lg.iter_mut() {
                *l = exp(*l - mx);
                z += *l;
            }
            // loss = lse(logits) - logit[target]
            loss += (mx + z.ln() - picked) as f64;
            // dL/dlogit = (softmax - target) / n
            let s = inv_n / z;
            lg.iter_mut().for_each(|l| *l = *l * s - smooth * inv_n / v as f32);
            lg[y] -= (1.0 - smooth) * inv_n;
        }
        loss
    })
}

/// The ff2w backward element-wise pass (see backward.rs): on entry ta = F' W2,
/// tb = F' W1^T; leaves ta = dL/du = -(ta s' + tb v s''), tb = dL/dv = -tb s'.
pub fn ff2w_act_bwd(ta: &mut [f32], tb: &mut [f32], ds: &[f32], dds: &[f32], v: &[f32], second_order: bool) {
    with_avx2!({
        let w = if second_order { 1.0 } else { 0.0 };
        for i in 0..ta.len() {
            let second = w * tb[i] * v[i] * dds[i];
            ta[i] = -(ta[i] * ds[i] + second);
            tb[i] = -tb[i] * ds[i];
        }
    })
}

/// Softmax VJP on an n x n block, times beta: dS = beta P * (dP - sum_j P dP)
/// per row (`dp` in, dS out; zero wherever P is, i.e. masked and row 0).
pub fn softmax_vjp(p: &[f32], dp: &mut [f32], n: usize, beta: f32) {
    with_avx2!({
        for (pr, dr) in p.chunks_exact(n).zip(dp.chunks_exact_mut(n)) {
            let dot: f32 = pr.iter().zip(dr.iter()).map(|(x, y)| x * y).sum();
            dr.iter_mut().zip(pr).for_each(|(y, x)| *y = beta * x * (*y - dot));
        }
    })
}

/// Stable eta backward, update = c gamma dE/dg: with dU = dL/d(update),
/// G = c gamma dU (into `g_out`), dgamma += c dU dE/dg; returns dL/dlog_c = sum dU * update.
pub fn stable_eta_bwd(c: f32, gamma: &[f32], du: &[f32], grad: &[f32], d: usize, g_out: &mut [f32], dgamma: &mut [f32]) -> f64 {
    with_avx2!({
        let mut dlogc = 0.0f64;
        for ((gr_out, dur), gr) in g_out.chunks_exact_mut(d).zip(du.chunks_exact(d)).zip(grad.chunks_exact(d)) {
            let mut acc = 0.0f32;
            for i in 0..d {
                gr_out[i] = c * gamma[i] * dur[i];
                dgamma[i] += c * dur[i] * gr[i];
                acc += dur[i] * gr[i] * gamma[i];
            }
            dlogc += (acc * c) as f64;
        }
        dlogc
    })
}

/// P' = P * mask (the mask's block at `at`) into `scratch` under attention dropout, else P itself.
pub fn dropped_probs<'a>(pb: &'a [f32], mask: Option<&[f32]>, at: usize, scratch: &'a mut [f32]) -> &'a [f32] {
    match mask {
        Some(mk) => {
            scratch.iter_mut().zip(pb.iter().zip(&mk[at..at + pb.len()])).for_each(|(o, (p, m))| *o = p * m);
            scratch
        }
        None => pb,
    }
}

/// Per-row cross-entropy of softmax(z) (rows of `v`) against `y`: lse(z) - z_y.
pub fn char_losses(z: &[f32], y: &[u32], v: usize) -> Vec<f64> {
    z.chunks_exact(v)
        .zip(y)
        .map(|(row, &t)| {
            let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = mx + row.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
            lse - row[t as usize] as f64
        })
        .collect()
}
