//! Exact incremental NRGPT decoding on the CPU, in plain f32 loops: the
//! readable twin of `shaders/descend.wgsl` and the engine's fallback when no
//! GPU adapter exists. Each token keeps its keys `k_B(t) = Wk g_B(t)` for
//! every level t = 0..=T; a new token reads them, so it costs O(T n D).

use nrgpt_core::projection::project;
use nrgpt_core::scalar::{act3, norm_row};
use nrgpt_core::NormKind;

use crate::decode_params::DecodeParams;
use crate::Trace;

pub struct CpuDecoder {
    p: DecodeParams,
    levels: usize,
    /// k_B(t) at [t][B][HD]
    kcache: Vec<f32>,
    n: usize,
}

/// Lanes of [`dot`]'s partial sums: one wasm simd128 (or SSE) register pair.
const LANES: usize = 8;

/// `sum_i a[i] b[i]` in LANES interleaved partial sums: a single running sum
/// is a chain the compiler may not reorder, so it never vectorises; this
/// one does (wasm simd128, x86 SSE).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    let mut acc = [0f32; LANES];
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y[i] = sum_j W[i][j] x[j] (+ b[i])` for row-major W (rows x x.len()).
pub(crate) fn matvec(w: &[f32], x: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    let cols = x.len();
    (0..w.len() / cols).map(|i| dot(&w[i * cols..(i + 1) * cols], x) + b.map_or(0.0, |b| b[i])).collect()
}

/// `y[j] = sum_i W[i][j] x[i]`: the transposed product.
pub(crate) fn matvec_t(w: &[f32], x: &[f32], cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; cols];
    for (i, xi) in x.iter().enumerate() {
        for (yj, wij) in y.iter_mut().zip(&w[i * cols..(i + 1) * cols]) {
            *yj += wij * xi;
        }
    }
    y
}

/// LayerNorm `gamma (x - mean)/s` or RMSNorm `gamma x / r`.
fn norm(x: &[f32], gamma: &[f32], kind: NormKind, eps: f32) -> Vec<f32> {
    let (mut xh, mut g) = (vec![0f32; x.len()], vec![0f32; x.len()]);
    norm_row(kind, x, gamma, eps, &mut xh, &mut g);
    g
}

impl CpuDecoder {
    pub fn new(p: DecodeParams, steps: usize) -> Self {
        let levels = steps + 1;
        let kcache = vec![0.0; levels * p.cfg.block_size * p.hd()];
        Self { p, levels, kcache, n: 0 }
    }

    pub fn params(&self) -> &DecodeParams {
        &self.p
    }

    pub fn reset(&mut self) {
        self.n = 0;
    }

    /// Descends the token at position n with the earlier tokens' cached keys.
    /// `tol`: stop once |E(t) - E(t-1)| < tol.
    pub fn push(&mut self, token: u32, tol: Option<f32>) -> Trace {
        let p = &self.p;
        let cfg = &p.cfg;
        let (d, h, dh, hd, v) = (cfg.d_model, cfg.n_head, cfg.head_dim, p.hd(), cfg.vocab_size);
        let (a, block, steps) = (self.n, cfg.block_size, self.levels - 1);
        assert!(a < block, "the window is full; the engine slides it before pushing");
        let eps = cfg.eps as f32;
        let beta = cfg.beta() as f32;
        // keys B < A, or B <= A when the mask includes the diagonal
        let keys = a + usize::from(cfg.attn_diag);
        // x_A(0) = token embedding + position embedding
        let (tok, pos) = (&p.w[p.lay.tok], &p.w[p.lay.pos]);
        let mut x: Vec<f32> = (0..d).map(|j| tok[token as usize * d + j] + pos[a * d + j]).collect();
        let ix = p.block();
        let (gamma, wq, wk, alpha) = (&p.gain, &p.w[ix.wq], &p.w[ix.wk], &p.w[ix.alpha]);
        let (w1, b1) = (&p.w[ix.w1], &p.w[ix.b1]);
        let ff_scale = p.w[ix.ff_scale][0];
        let mut tr = Trace::default();
        for t in 0..=steps {
            // g = gain * xh + bias (the bias is the bare norm's, else zero)
            let mut g = norm(&x, gamma, cfg.norm, eps);
            g.iter_mut().zip(&p.norm_bias).for_each(|(gi, b)| *gi += b);
            let q = matvec(wq, &g, None);
            let k = matvec(wk, &g, None);
            self.kcache[(t * block + a) * hd..(t * block + a + 1) * hd].copy_from_slice(&k);
            // attention: dE_AT/dg = -sum_h alpha_h Wq_h^T sum_{B<A} p_AB k_B ; E_AT = -sum_h alpha_h/beta lse_h
            // with the diagonal, also - sum_h alpha_h p_AA Wk_h^T q_h: `own` = alpha_h p_AA q_h
            let mut ctx = vec![0f32; hd];
            let mut own = vec![0f32; hd];
            let mut e_at = 0.0;
            if keys > 0 {
                for hh in 0..h {
                    let qh = &q[hh * dh..(hh + 1) * dh];
                    let kb = |b: usize| &self.kcache[(t * block + b) * hd + hh * dh..(t * block + b) * hd + (hh + 1) * dh];
                    let s: Vec<f32> = (0..keys).map(|b| beta * kb(b).iter().zip(qh).map(|(x, y)| x * y).sum::<f32>()).collect();
                    let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    let z: f32 = s.iter().map(|v| (v - m).exp()).sum();
                    e_at -= alpha[hh] / beta * (z.ln() + m);
                    for (b, sb) in s.iter().enumerate() {
                        let pb = (sb - m).exp() / z;
                        for (c, kv) in ctx[hh * dh..(hh + 1) * dh].iter_mut().zip(kb(b)) {
                            *c += alpha[hh] * pb * kv;
                        }
                        if b == a {
                            for (o, qv) in own[hh * dh..(hh + 1) * dh].iter_mut().zip(qh) {
                                *o = alpha[hh] * pb * qv;
                            }
                        }
                    }
                }
            }
            let mut grad_at = matvec_t(wq, &ctx, d);
            if cfg.attn_diag {
                grad_at.iter_mut().zip(matvec_t(wk, &own, d)).for_each(|(g, o)| *g += o);
            }
            // feed-forward energy and its gradient
            let u = matvec(w1, &g, Some(b1));
            let (sig, dsig): (Vec<f32>, Vec<f32>) = u.iter().map(|&ui| act3(cfg.activation, ui)).map(|(s, ds, _)| (s, ds)).unzip();
            let (e_ff, grad_ff) = if let (Some(w2), Some(b2)) = (ix.w2, ix.b2) {
                let (w2, b2) = (&p.w[w2], &p.w[b2]);
                // E = -g.(W2 s + b2); dE/dg = -(W2 s + b2) - W1^T (s' * W2^T g)
                let out = matvec(w2, &sig, Some(b2));
                let w2g = matvec_t(w2, &g, sig.len());
                let inner: Vec<f32> = dsig.iter().zip(&w2g).map(|(a, b)| a * b).collect();
                let back = matvec_t(w1, &inner, d);
                let e = -g.iter().zip(&out).map(|(a, b)| a * b).sum::<f32>();
                (e, out.iter().zip(&back).map(|(o, b)| -(o + b)).collect::<Vec<_>>())
            } else {
                // E = -|s|^2; dE/dg = -2 W1^T (s * s')
                let inner: Vec<f32> = sig.iter().zip(&dsig).map(|(a, b)| a * b).collect();
                let e = -sig.iter().map(|v| v * v).sum::<f32>();
                (e, matvec_t(w1, &inner, d).iter().map(|v| -2.0 * v).collect())
            };
            let energy = e_at + ff_scale * e_ff;
            tr.energies.push(energy);
            tr.step_logits.push(self.readout(&x));
            tr.proj.push(project(&x, &p.dirs));
            let settled = t > 0 && tol.is_some_and(|tol| (energy - tr.energies[t - 1]).abs() < tol);
            if t == steps || settled {
                // later levels read this settled state's keys
                for t2 in t + 1..=steps {
                    self.kcache.copy_within((t * block + a) * hd..(t * block + a + 1) * hd, (t2 * block + a) * hd);
                }
                tr.steps_used = t;
                break;
            }
            // x <- x - eta * dE/dg
            let grad: Vec<f32> = (0..d).map(|j| -grad_at[j] + ff_scale * grad_ff[j]).collect();
            let upd = if let Some(eta_w) = ix.eta_w {
                matvec(&p.w[eta_w], &grad, None)
            } else {
                let c = p.w[ix.log_c.expect("a stable step has log c")][0].exp();
                grad.iter().zip(gamma).map(|(g, ga)| c * ga * g).collect()
            };
            x.iter_mut().zip(&upd).for_each(|(xi, ui)| *xi -= ui);
        }
        tr.logits = tr.step_logits.last().cloned().unwrap_or_default();
        debug_assert_eq!(tr.logits.len(), v);
        self.n += 1;
        tr
    }

    /// logits = W_out N_out(x) + b
    fn readout(&self, x: &[f32]) -> Vec<f32> {
        let p = &self.p;
        let g = norm(x, &p.w[p.lay.out_gamma], p.cfg.norm, p.cfg.eps as f32);
        matvec(&p.w[p.lay.head_w], &g, Some(&p.w[p.lay.head_b]))
    }
}
