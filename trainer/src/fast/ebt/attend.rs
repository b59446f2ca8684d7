//! The prediction stream's attention weights on one (sequence, head) block:
//! query A attends to the real tokens B <= A (`pr`, an n x n block, zero
//! where masked) and to its own key (`ps`, n). The softmax over those n + 1
//! scores, its vector-Jacobian product, its Jacobian-vector product, and the
//! adjoint of that JVP with respect to the weights (the second-order term).
//! Every loop stops at the causal limit; what a masked entry holds is only
//! ever read by `vjp`, which zeroes it, before a gemm reads the block.

/// Scores in, weights out: row a is the softmax of `pr[a, ..=a]` and `ps[a]`.
pub fn softmax(pr: &mut [f32], ps: &mut [f32], n: usize) {
    for a in 0..n {
        let row = &mut pr[a * n..(a + 1) * n];
        let (allowed, masked) = row.split_at_mut(a + 1);
        masked.fill(0.0);
        let mx = allowed.iter().copied().fold(ps[a], f32::max);
        let es = nrgpt_core::scalar::exp(ps[a] - mx);
        let mut sum = es;
        for e in allowed.iter_mut() {
            *e = nrgpt_core::scalar::exp(*e - mx);
            sum += *e;
        }
        let inv = 1.0 / sum;
        allowed.iter_mut().for_each(|e| *e *= inv);
        ps[a] = es * inv;
    }
}

/// sum over the allowed keys of P * x, self included.
#[inline(always)]
fn pdot(pr: &[f32], ps: f32, xr: &[f32], xs: f32) -> f32 {
    pr.iter().zip(xr).map(|(p, x)| p * x).sum::<f32>() + ps * xs
}

/// VJP in place: (wr, ws) = dL/dP in, dL/dscores out: P * (w - <P, w>),
/// zero on the masked keys (whatever `wr` held there).
pub fn vjp(pr: &[f32], ps: &[f32], wr: &mut [f32], ws: &mut [f32], n: usize) {
    for a in 0..n {
        let (w, masked) = wr[a * n..(a + 1) * n].split_at_mut(a + 1);
        let p = &pr[a * n..a * n + a + 1];
        let dot = pdot(p, ps[a], w, ws[a]);
        w.iter_mut().zip(p).for_each(|(w, p)| *w = p * (*w - dot));
        masked.fill(0.0);
        ws[a] = ps[a] * (ws[a] - dot);
    }
}

/// JVP: score tangents (sr, ss) to weight tangents (out_r, out_s): P * (s' - <P, s'>).
pub fn jvp(pr: &[f32], ps: &[f32], sr: &[f32], ss: &[f32], out_r: &mut [f32], out_s: &mut [f32], n: usize) {
    for a in 0..n {
        let (p, s) = (&pr[a * n..a * n + a + 1], &sr[a * n..a * n + a + 1]);
        let c = pdot(p, ps[a], s, ss[a]);
        out_r[a * n..(a + 1) * n].fill(0.0);
        out_r[a * n..a * n + a + 1].iter_mut().zip(p.iter().zip(s)).for_each(|(o, (p, s))| *o = p * (s - c));
        out_s[a] = ps[a] * (ss[a] - c);
    }
}

/// The JVP's adjoint with respect to P at fixed score tangents (sr, ss): with
/// (wr, ws) = dL/d(weight tangents) and c = <P, s'>, P' = P (s' - c) gives
/// dL/dP_j += w_j (s'_j - c) - <P, w> s'_j, accumulated into (gr, gs).
#[allow(clippy::too_many_arguments)]
pub fn jvp_adjoint(pr: &[f32], ps: &[f32], sr: &[f32], ss: &[f32], wr: &[f32], ws: &[f32], gr: &mut [f32], gs: &mut [f32], n: usize) {
    for a in 0..n {
        let lim = a * n..a * n + a + 1;
        let (p, s, w) = (&pr[lim.clone()], &sr[lim.clone()], &wr[lim.clone()]);
        let c = pdot(p, ps[a], s, ss[a]);
        let pw = pdot(p, ps[a], w, ws[a]);
        gr[lim].iter_mut().zip(s.iter().zip(w)).for_each(|(g, (s, w))| *g += w * (s - c) - pw * s);
        gs[a] += ws[a] * (ss[a] - c) - pw * ss[a];
    }
}

/// out[a] = scale * (x_a . y_a) over one head's rows (row stride `ld`, width `dh`), accumulated when `acc`.
#[allow(clippy::too_many_arguments)]
pub fn row_dots(x: &[f32], y: &[f32], n: usize, dh: usize, ld: usize, scale: f32, acc: bool, out: &mut [f32]) {
    for a in 0..n {
        let d: f32 = x[a * ld..a * ld + dh].iter().zip(&y[a * ld..a * ld + dh]).map(|(p, q)| p * q).sum();
        out[a] = if acc { out[a] } else { 0.0 } + scale * d;
    }
}

/// out_a (+)= scale * w[a] * x_a over one head's rows.
#[allow(clippy::too_many_arguments)]
pub fn row_scale(w: &[f32], x: &[f32], n: usize, dh: usize, ld: usize, scale: f32, acc: bool, out: &mut [f32]) {
    for a in 0..n {
        let (o, xr) = (&mut out[a * ld..a * ld + dh], &x[a * ld..a * ld + dh]);
        let k = scale * w[a];
        if acc {
            o.iter_mut().zip(xr).for_each(|(o, x)| *o += k * x);
        } else {
            o.iter_mut().zip(xr).for_each(|(o, x)| *o = k * x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JVP and its adjoint against central differences of the softmax in f64-free f32 (small n).
    #[test]
    fn jvp_and_adjoint_match_finite_differences() {
        let n = 3;
        let sr0: Vec<f32> = (0..n * n).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.4).collect();
        let ss0: Vec<f32> = (0..n).map(|i| i as f32 * 0.3 - 0.2).collect();
        let (tr, ts): (Vec<f32>, Vec<f32>) = ((0..n * n).map(|i| (i % 3) as f32 * 0.5 - 0.4).collect(), vec![0.3, -0.2, 0.7]);
        let weights = |sr: &[f32], ss: &[f32]| {
            let (mut pr, mut ps) = (sr.to_vec(), ss.to_vec());
            softmax(&mut pr, &mut ps, n);
            (pr, ps)
        };
        let (pr, ps) = weights(&sr0, &ss0);
        for a in 0..n {
            let s: f32 = pr[a * n..(a + 1) * n].iter().sum::<f32>() + ps[a];
            assert!((s - 1.0).abs() < 1e-6 && pr[a * n + a + 1..(a + 1) * n].iter().all(|&p| p == 0.0));
        }
        let (mut jr, mut js) = (vec![0.0; n * n], vec![0.0; n]);
        jvp(&pr, &ps, &tr, &ts, &mut jr, &mut js, n);
        let h = 1e-3;
        let shift = |t: f32| {
            let sr: Vec<f32> = sr0.iter().zip(&tr).map(|(s, d)| s + t * d).collect();
            let ss: Vec<f32> = ss0.iter().zip(&ts).map(|(s, d)| s + t * d).collect();
            weights(&sr, &ss)
        };
        let ((pp, psp), (pm, psm)) = (shift(h), shift(-h));
        for i in 0..n * n {
            assert!((jr[i] - (pp[i] - pm[i]) / (2.0 * h)).abs() < 1e-3, "jvp {i}");
        }
        for a in 0..n {
            assert!((js[a] - (psp[a] - psm[a]) / (2.0 * h)).abs() < 1e-3);
        }
        // <w, J(P) t> is linear in P through the JVP's formula; its P-gradient, pushed through
        // the softmax VJP, must be the score-gradient of <w, jvp(scores)> by differences.
        let (wr, ws): (Vec<f32>, Vec<f32>) = ((0..n * n).map(|i| (i % 4) as f32 * 0.3 - 0.5).collect(), vec![-0.4, 0.2, 0.9]);
        let f = |sr: &[f32], ss: &[f32]| {
            let (pr, ps) = weights(sr, ss);
            let (mut jr, mut js) = (vec![0.0; n * n], vec![0.0; n]);
            jvp(&pr, &ps, &tr, &ts, &mut jr, &mut js, n);
            (0..n).map(|a| (0..=a).map(|j| wr[a * n + j] * jr[a * n + j]).sum::<f32>() + ws[a] * js[a]).sum::<f32>()
        };
        let (mut gr, mut gs) = (vec![0.0; n * n], vec![0.0; n]);
        jvp_adjoint(&pr, &ps, &tr, &ts, &wr, &ws, &mut gr, &mut gs, n);
        vjp(&pr, &ps, &mut gr, &mut gs, n);
        for a in 0..n {
            for j in 0..=a {
                let mut sp = sr0.clone();
                sp[a * n + j] += h;
                let mut sm = sr0.clone();
                sm[a * n + j] -= h;
                let fd = (f(&sp, &ss0) - f(&sm, &ss0)) / (2.0 * h);
                assert!((gr[a * n + j] - fd).abs() < 2e-3, "adjoint ({a},{j}): {} vs {fd}", gr[a * n + j]);
            }
            let (mut sp, mut sm) = (ss0.clone(), ss0.clone());
            sp[a] += h;
            sm[a] -= h;
            let fd = (f(&sr0, &sp) - f(&sr0, &sm)) / (2.0 * h);
            assert!((gs[a] - fd).abs() < 2e-3, "self adjoint {a}: {} vs {fd}", gs[a]);
        }
    }
}
