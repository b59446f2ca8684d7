//! Exact incremental EBT decoding on the CPU, in plain f32 loops: the
//! readable twin of the oracle `nrgpt_core::ebt` and `ebt_session`. The real
//! stream does not depend on the candidates, so each layer caches the real
//! tokens' keys and values: a new character costs O(L n D) once, and each
//! thinking step of each candidate reads the cache (O(L n D) as well).

use nrgpt_core::ebt::MIN_STEP;
use nrgpt_core::ebt_session::{candidate_noise, langevin_noise, think_candidate, trace_of};
use nrgpt_core::format::PackedCheckpoint;
use nrgpt_core::layout::{Body, GptIdx, WeightLayout};
use nrgpt_core::scalar::{act3, norm_row};
use nrgpt_core::session::{EbtThinkOpts, TokenTrace};
use nrgpt_core::{EbtUpdate, Error, ModelConfig, NormKind, Result};

use crate::cpu_decoder::{dot, matvec, matvec_t};

pub struct EbtDecoder {
    cfg: ModelConfig,
    lay: WeightLayout,
    layers: Vec<GptIdx>,
    /// Every weight as row-major f32, `w[i]` is parameter `i` of `lay`.
    w: Vec<Vec<f32>>,
    /// The thinking step a = max(e^{log a}, 1e-4).
    a: f32,
    /// The candidate's input map in `w` (the token embedding, or its own).
    input: usize,
    /// Query/key/value width (heads x head width).
    qd: usize,
    /// Per layer, the real tokens' keys and values at [layer][B][qd].
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    n: usize,
}

/// A normalised row and what its vector-Jacobian product needs.
struct Normed {
    xh: Vec<f32>,
    g: Vec<f32>,
    rs: f32,
}

fn normed(x: &[f32], gamma: &[f32], kind: NormKind, eps: f32) -> Normed {
    let (mut xh, mut g) = (vec![0f32; x.len()], vec![0f32; x.len()]);
    let rs = norm_row(kind, x, gamma, eps, &mut xh, &mut g);
    Normed { xh, g, rs }
}

/// v^T dN/dx for g = gamma * xh: (u - mean u - xh mean(u xh)) / scale with u = gamma v (RMSNorm: no mean u).
fn norm_vjp(kind: NormKind, n: &Normed, gamma: &[f32], v: &[f32]) -> Vec<f32> {
    let d = v.len() as f32;
    let u: Vec<f32> = v.iter().zip(gamma).map(|(a, b)| a * b).collect();
    let mean_uxh = u.iter().zip(&n.xh).map(|(a, b)| a * b).sum::<f32>() / d;
    let mean_u = match kind {
        NormKind::LayerNorm => u.iter().sum::<f32>() / d,
        NormKind::RmsNorm => 0.0,
    };
    u.iter().zip(&n.xh).map(|(ui, xi)| (ui - mean_u - xi * mean_uxh) * n.rs).collect()
}

fn add(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

/// What one prediction-stream layer keeps for its backward.
struct Saved {
    n1: Normed,
    q: Vec<f32>,
    k_self: Vec<f32>,
    v_self: Vec<f32>,
    /// Per head: attention on the real tokens 0..n and on itself (last).
    probs: Vec<Vec<f32>>,
    n2: Normed,
    ds: Vec<f32>,
}

impl EbtDecoder {
    pub fn new(file: &PackedCheckpoint) -> Result<Self> {
        let cfg = file.config.clone();
        let lay = file.layout.clone();
        let Body::Ebt(ix) = &lay.body else {
            return Err(Error::Config(format!("`{}` is not an EBT", cfg.arch.name())));
        };
        let w: Vec<Vec<f32>> = (0..file.tensors.len()).map(|i| file.values(i)).collect();
        let a = w[ix.log_a][0].exp().max(MIN_STEP as f32);
        let layers = ix.layers.clone();
        let qd = layers.first().map_or(0, |l| w[l.wq].len() / cfg.d_model);
        let cache = vec![Vec::new(); layers.len()];
        let input = ix.input;
        Ok(Self { cfg, lay, layers, w, a, input, qd, keys: cache.clone(), values: cache, n: 0 })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Forgets the window (positions restart at 0).
    pub fn reset(&mut self) {
        self.n = 0;
        self.keys.iter_mut().chain(self.values.iter_mut()).for_each(Vec::clear);
    }

    fn head_width(&self) -> usize {
        self.qd / self.cfg.n_head
    }

    /// Runs the real stream for `token` at the next position and caches each layer's key and value.
    pub fn append(&mut self, token: u32) {
        let (d, a) = (self.cfg.d_model, self.n);
        assert!(a < self.cfg.block_size, "the window is full; the decoder slides it before appending");
        let eps = self.cfg.eps as f32;
        let (tok, pos) = (&self.w[self.lay.tok], &self.w[self.lay.pos]);
        // x = token embedding + position embedding
        let mut x: Vec<f32> = (0..d).map(|j| tok[token as usize * d + j] + pos[a * d + j]).collect();
        let (h, dh, qd) = (self.cfg.n_head, self.head_width(), self.qd);
        let scale = 1.0 / (dh as f32).sqrt();
        for (l, ix) in self.layers.iter().enumerate() {
            let w = &self.w;
            let g = normed(&x, &w[ix.ln1], self.cfg.norm, eps).g;
            let q = matvec(&w[ix.wq], &g, None);
            self.keys[l].extend(matvec(&w[ix.wk], &g, None));
            self.values[l].extend(matvec(&w[ix.wv], &g, None));
            // causal attention over B <= A
            let mut att = vec![0f32; qd];
            for hh in 0..h {
                let r = hh * dh..(hh + 1) * dh;
                let s: Vec<f32> = (0..=a).map(|b| scale * dot(&q[r.clone()], &self.keys[l][b * qd + r.start..b * qd + r.end])).collect();
                let p = softmax(&s);
                for (b, pb) in p.iter().enumerate() {
                    for (o, v) in att[r.clone()].iter_mut().zip(&self.values[l][b * qd + r.start..b * qd + r.end]) {
                        *o += pb * v;
                    }
                }
            }
            add(&mut x, &matvec(&w[ix.wo], &att, None));
            let g2 = normed(&x, &w[ix.ln2], self.cfg.norm, eps).g;
            let s: Vec<f32> = matvec(&w[ix.w1], &g2, Some(&w[ix.b1])).into_iter().map(|u| act3(self.cfg.activation, u).0).collect();
            add(&mut x, &matvec(&w[ix.w2], &s, Some(&w[ix.b2])));
        }
        self.n += 1;
    }

    /// E(z) for the prediction at the last position, and dE/dz when asked.
    pub fn energy_grad(&self, z: &[f32], want_grad: bool) -> (f32, Option<Vec<f32>>) {
        let (d, a, eps, kind) = (self.cfg.d_model, self.n - 1, self.cfg.eps as f32, self.cfg.norm);
        let (h, dh, qd) = (self.cfg.n_head, self.head_width(), self.qd);
        let scale = 1.0 / (dh as f32).sqrt();
        let w = &self.w;
        // e = softmax(z)^T Emb + pos_A
        let y = softmax(z);
        let mut p = matvec_t(&w[self.input], &y, d);
        add(&mut p, &w[self.lay.pos][a * d..(a + 1) * d]);
        let mut saved = Vec::with_capacity(self.layers.len());
        for (l, ix) in self.layers.iter().enumerate() {
            let n1 = normed(&p, &w[ix.ln1], kind, eps);
            let q = matvec(&w[ix.wq], &n1.g, None);
            let k_self = matvec(&w[ix.wk], &n1.g, None);
            let v_self = matvec(&w[ix.wv], &n1.g, None);
            let (mut att, mut probs) = (vec![0f32; qd], Vec::with_capacity(h));
            for hh in 0..h {
                let r = hh * dh..(hh + 1) * dh;
                // scores on the real tokens B <= A, then on itself
                let mut s: Vec<f32> = (0..=a).map(|b| scale * dot(&q[r.clone()], &self.keys[l][b * qd + r.start..b * qd + r.end])).collect();
                s.push(scale * dot(&q[r.clone()], &k_self[r.clone()]));
                let pr = softmax(&s);
                for (b, pb) in pr.iter().enumerate() {
                    let v = if b <= a { &self.values[l][b * qd + r.start..b * qd + r.end] } else { &v_self[r.clone()] };
                    for (o, vv) in att[r.clone()].iter_mut().zip(v) {
                        *o += pb * vv;
                    }
                }
                probs.push(pr);
            }
            add(&mut p, &matvec(&w[ix.wo], &att, None));
            let n2 = normed(&p, &w[ix.ln2], kind, eps);
            let (s, ds): (Vec<f32>, Vec<f32>) =
                matvec(&w[ix.w1], &n2.g, Some(&w[ix.b1])).into_iter().map(|u| act3(self.cfg.activation, u)).map(|(s, ds, _)| (s, ds)).unzip();
            add(&mut p, &matvec(&w[ix.w2], &s, Some(&w[ix.b2])));
            saved.push(Saved { n1, q, k_self, v_self, probs, n2, ds });
        }
        let no = normed(&p, &w[self.lay.out_gamma], kind, eps);
        // E = w_E . N_out(p) + b_E
        let energy = dot(&w[self.lay.head_w], &no.g) + w[self.lay.head_b][0];
        if !want_grad {
            return (energy, None);
        }
        let mut delta = norm_vjp(kind, &no, &w[self.lay.out_gamma], &w[self.lay.head_w]);
        for (l, ix) in self.layers.iter().enumerate().rev() {
            let s = &saved[l];
            // MLP branch: p2 = p1 + W2 s(W1 N2(p1) + b1) + b2
            let dh1: Vec<f32> = matvec_t(&w[ix.w2], &delta, s.ds.len()).iter().zip(&s.ds).map(|(a, b)| a * b).collect();
            let mut d1 = delta.clone();
            add(&mut d1, &norm_vjp(kind, &s.n2, &w[ix.ln2], &matvec_t(&w[ix.w1], &dh1, d)));
            // attention branch: p1 = p + Wo att
            let da = matvec_t(&w[ix.wo], &d1, qd);
            let (mut dq, mut dk_self, mut dv_self) = (vec![0f32; qd], vec![0f32; qd], vec![0f32; qd]);
            for hh in 0..h {
                let r = hh * dh..(hh + 1) * dh;
                let pr = &s.probs[hh];
                let value = |b: usize| if b <= a { &self.values[l][b * qd + r.start..b * qd + r.end] } else { &s.v_self[r.clone()] };
                let key = |b: usize| if b <= a { &self.keys[l][b * qd + r.start..b * qd + r.end] } else { &s.k_self[r.clone()] };
                let dp: Vec<f32> = (0..=a + 1).map(|b| dot(&da[r.clone()], value(b))).collect();
                // softmax VJP over the real keys and the self key together
                let mean = dot(pr, &dp);
                for b in 0..=a + 1 {
                    let dsb = pr[b] * (dp[b] - mean) * scale;
                    for (o, k) in dq[r.clone()].iter_mut().zip(key(b)) {
                        *o += dsb * k;
                    }
                    if b == a + 1 {
                        for (o, qq) in dk_self[r.clone()].iter_mut().zip(&s.q[r.clone()]) {
                            *o += dsb * qq;
                        }
                    }
                }
                let p_self = pr[a + 1];
                for (o, g) in dv_self[r.clone()].iter_mut().zip(&da[r.clone()]) {
                    *o += p_self * g;
                }
            }
            let mut du = matvec_t(&w[ix.wq], &dq, d);
            add(&mut du, &matvec_t(&w[ix.wk], &dk_self, d));
            add(&mut du, &matvec_t(&w[ix.wv], &dv_self, d));
            add(&mut d1, &norm_vjp(kind, &s.n1, &w[ix.ln1], &du));
            delta = d1;
        }
        // dE/dy = Emb dE/de
        let g = matvec(&w[self.input], &delta, None);
        match self.cfg.ebt_update {
            EbtUpdate::Probs => (energy, Some(g)),
            // dE/dz = (diag(y) - y y^T) dE/dy
            EbtUpdate::Logits => {
                let yg = dot(&y, &g);
                (energy, Some(y.iter().zip(&g).map(|(yi, gi)| yi * (gi - yg)).collect()))
            }
        }
    }

    /// The candidates for the character after the window, the `index`-th of
    /// its sequence (which seeds their noise), thought and verified.
    pub fn think(&self, index: u64, steps: usize, tol: Option<f32>, opts: &EbtThinkOpts) -> Result<TokenTrace> {
        if self.n == 0 {
            return Err(Error::Vocab("nothing to think about: the window is empty".into()));
        }
        let v = self.cfg.vocab_size;
        let noise = langevin_noise(opts.seed, index, opts.samples, steps, v, opts.langevin);
        let thoughts = candidate_noise(opts.seed, index, opts.samples, v, self.cfg.ebt_noise)
            .iter()
            .zip(&noise)
            .map(|(z0, ld)| {
                think_candidate(z0, steps, tol, opts.accept_lower, (self.cfg.ebt_update, self.a, self.cfg.ebt_grad_bound(self.a)), ld, |z, want| {
                    Ok(self.energy_grad(z, want))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(trace_of(thoughts, opts.verify))
    }
}

fn softmax(s: &[f32]) -> Vec<f32> {
    let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = s.iter().map(|v| (v - m).exp()).collect();
    let z: f32 = e.iter().sum();
    e.iter().map(|v| v / z).collect()
}
