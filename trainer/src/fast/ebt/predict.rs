//! The prediction stream at the current candidates z (crates/core/src/ebt.rs
//! `energy_grad`): its forward, keeping a [`PrimalTape`] per layer, and the
//! input-gradient pass dE/dz, keeping an [`AdjointTape`] per layer. Neither
//! touches the parameter gradients: the loss reaches the parameters only
//! through dE/dz, which the second-order pass (second.rs) differentiates.

use nrgpt_core::layout::{EbtIdx, GptIdx, WeightLayout};
use nrgpt_core::scalar::softmax_row;
use nrgpt_core::{EbtUpdate, ModelConfig};

use super::attend;
use super::tape::{AdjointTape, EbtWorkspace, PrimalTape};
use crate::fast::gemm::{mm, mm_ld, View};
use crate::fast::math::{act_with_derivatives, norm_bwd, norm_fwd};
use crate::fast::workspace::{Dims, LayerTape};

/// y = softmax(z) per row of width v.
pub fn softmax_rows(z: &[f32], v: usize, y: &mut [f32]) {
    z.chunks_exact(v).zip(y.chunks_exact_mut(v)).for_each(|(zr, yr)| softmax_row(zr, yr));
}

/// The forward at `ws.z`: e = softmax(z) Emb + pos, the layers, the output norm.
pub fn forward(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], pt: &[Vec<f32>], ws: &mut EbtWorkspace) {
    softmax_rows(&ws.z, ws.dims.v, &mut ws.y);
    forward_at_y(cfg, lay, ix, p, pt, ws);
}

/// The forward at the probabilities `ws.y` (a one-hot truth, say).
pub fn forward_at_y(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], pt: &[Vec<f32>], ws: &mut EbtWorkspace) {
    let Dims { n, r, d, v, .. } = ws.dims;
    let dims = ws.dims;
    let EbtWorkspace { real, pri, top, y, tmp_d, .. } = ws;
    mm(&mut pri[0].p, View::rm(y, r, v), View::rm(&p[ix.input], v, d), false, 1.0);
    for (row, x) in pri[0].p.chunks_exact_mut(d).enumerate() {
        x.iter_mut().zip(&p[lay.pos][(row % n) * d..]).for_each(|(x, e)| *x += e);
    }
    let layers = ix.layers.len();
    for l in 0..layers {
        let (head, tail) = pri.split_at_mut(l + 1);
        let out: &mut [f32] = if l + 1 < layers { &mut tail[0].p } else { &mut top.p };
        layer(cfg, &ix.layers[l], p, pt, &dims, &mut head[l], &real[l], out);
    }
    norm_fwd(cfg.norm, &top.p, &p[lay.out_gamma], cfg.eps as f32, d, &mut top.xh, &mut top.rstd, tmp_d);
}

/// E = w_E . N_out + b_E per row, from the last forward (it leaves N_out in `ws.tmp_d`).
pub fn energies(lay: &WeightLayout, p: &[Vec<f32>], ws: &EbtWorkspace) -> Vec<f32> {
    let d = ws.dims.d;
    ws.tmp_d.chunks_exact(d).map(|g| g.iter().zip(&p[lay.head_w]).map(|(x, w)| x * w).sum::<f32>() + p[lay.head_b][0]).collect()
}

/// One pre-norm layer: attention over the real tokens B <= A and the prediction itself, then the MLP.
#[allow(clippy::too_many_arguments)]
fn layer(cfg: &ModelConfig, ix: &GptIdx, p: &[Vec<f32>], pt: &[Vec<f32>], dims: &Dims, st: &mut PrimalTape, real: &LayerTape, out: &mut [f32]) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let eps = cfg.eps as f32;
    let beta = 1.0 / (dh as f32).sqrt();
    norm_fwd(cfg.norm, &st.p, &p[ix.ln1], eps, d, &mut st.xh1, &mut st.rstd1, &mut st.n1);
    let nv = View::rm(&st.n1, r, d);
    mm(&mut st.q, nv, View::rm(&pt[ix.wq], d, hd), false, 1.0);
    mm(&mut st.ks, nv, View::rm(&pt[ix.wk], d, hd), false, 1.0);
    mm(&mut st.vs, nv, View::rm(&pt[ix.wv], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let blk = b * h + hh;
            let (pr, ps) = (&mut st.pr[blk * n * n..(blk + 1) * n * n], &mut st.ps[blk * n..(blk + 1) * n]);
            // scores beta q k^T on the real keys, beta q . k_self on itself
            mm(pr, View::strided(&st.q[off..], n, dh, hd), View::strided(&real.k[off..], n, dh, hd).t(), false, beta);
            attend::row_dots(&st.q[off..], &st.ks[off..], n, dh, hd, beta, false, ps);
            attend::softmax(pr, ps, n);
            // att = P_real V + p_self v_self
            mm_ld(&mut st.att[off..], hd, View::rm(pr, n, n), View::strided(&real.v[off..], n, dh, hd), false, 1.0);
            attend::row_scale(ps, &st.vs[off..], n, dh, hd, 1.0, true, &mut st.att[off..]);
        }
    }
    // p1 = p + att Wo^T, held in out
    out.copy_from_slice(&st.p);
    mm(out, View::rm(&st.att, r, hd), View::rm(&pt[ix.wo], hd, d), true, 1.0);
    norm_fwd(cfg.norm, out, &p[ix.ln2], eps, d, &mut st.xh2, &mut st.rstd2, &mut st.n2);
    mm(&mut st.s, View::rm(&st.n2, r, d), View::rm(&pt[ix.w1], d, m), false, 1.0);
    act_with_derivatives(cfg.activation, &p[ix.b1], m, &mut st.s, &mut st.ds, &mut st.dds);
    // p2 = p1 + s W2^T + b2
    mm(out, View::rm(&st.s, r, m), View::rm(&pt[ix.w2], m, d), true, 1.0);
    for row in out.chunks_exact_mut(d) {
        row.iter_mut().zip(&p[ix.b2]).for_each(|(o, b)| *o += b);
    }
}

/// The step's gradient into `ws.g`, dE/dz (or dE/dy when the step moves the
/// probabilities), for E = w_E . N_out(p_L) + b_E per position, keeping every
/// layer's adjoints; `ws.e_bar` = dE/de.
pub fn input_grad(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], ws: &mut EbtWorkspace) {
    let Dims { r, d, v, .. } = ws.dims;
    let dims = ws.dims;
    let EbtWorkspace { real, pri, adj, top, y, g, e_bar, head_rows, ta, gamma_sink, .. } = ws;
    for row in head_rows.chunks_exact_mut(d) {
        row.copy_from_slice(&p[lay.head_w]);
    }
    let layers = ix.layers.len();
    let out = &mut adj[layers - 1].out;
    out.fill(0.0);
    norm_bwd(cfg.norm, head_rows, &top.xh, &top.rstd, &p[lay.out_gamma], d, out, gamma_sink);
    for l in (0..layers).rev() {
        let (head, tail) = adj.split_at_mut(l);
        let below: &mut [f32] = if l > 0 { &mut head[l - 1].out } else { e_bar };
        layer_vjp(cfg, &ix.layers[l], p, &dims, &pri[l], &real[l], &mut tail[0], below, ta, gamma_sink);
    }
    // dE/dy = Emb dE/de
    mm(g, View::rm(e_bar, r, d), View::rm(&p[ix.input], v, d).t(), false, 1.0);
    if cfg.ebt_update == EbtUpdate::Probs {
        return;
    }
    // dE/dz = (diag(y) - y y^T) dE/dy
    for (gr, yr) in g.chunks_exact_mut(v).zip(y.chunks_exact(v)) {
        let dot: f32 = gr.iter().zip(yr).map(|(a, b)| a * b).sum();
        gr.iter_mut().zip(yr).for_each(|(a, y)| *a = y * (*a - dot));
    }
}

/// dE/d(layer input) into `below` from `at.out` = dE/d(layer output), filling `at`.
#[allow(clippy::too_many_arguments)]
fn layer_vjp(
    cfg: &ModelConfig,
    ix: &GptIdx,
    p: &[Vec<f32>],
    dims: &Dims,
    st: &PrimalTape,
    real: &LayerTape,
    at: &mut AdjointTape,
    below: &mut [f32],
    ta: &mut [f32],
    gamma_sink: &mut [f32],
) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let beta = 1.0 / (dh as f32).sqrt();
    // MLP: p2 = p1 + W2 s(W1 n2 + b1) + b2
    mm(&mut at.s, View::rm(&at.out, r, d), View::rm(&p[ix.w2], d, m), false, 1.0);
    ta.iter_mut().zip(at.s.iter().zip(&st.ds)).for_each(|(t, (s, ds))| *t = s * ds);
    mm(&mut at.n2, View::rm(ta, r, m), View::rm(&p[ix.w1], m, d), false, 1.0);
    at.p1.copy_from_slice(&at.out);
    norm_bwd(cfg.norm, &at.n2, &st.xh2, &st.rstd2, &p[ix.ln2], d, &mut at.p1, gamma_sink);
    // attention: p1 = p + Wo att, att = P_real V + p_self v_self
    mm(&mut at.att, View::rm(&at.p1, r, d), View::rm(&p[ix.wo], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let (bn, bv) = ((b * h + hh) * n * n..(b * h + hh + 1) * n * n, (b * h + hh) * n..(b * h + hh + 1) * n);
            let av = View::strided(&at.att[off..], n, dh, hd);
            mm(&mut at.pr[bn.clone()], av, View::strided(&real.v[off..], n, dh, hd).t(), false, 1.0);
            attend::row_dots(&at.att[off..], &st.vs[off..], n, dh, hd, 1.0, false, &mut at.ps[bv.clone()]);
            attend::row_scale(&st.ps[bv.clone()], &at.att[off..], n, dh, hd, 1.0, false, &mut at.vs[off..]);
            at.sr[bn.clone()].copy_from_slice(&at.pr[bn.clone()]);
            at.ss[bv.clone()].copy_from_slice(&at.ps[bv.clone()]);
            attend::vjp(&st.pr[bn.clone()], &st.ps[bv.clone()], &mut at.sr[bn.clone()], &mut at.ss[bv.clone()], n);
            // scores beta q K^T and beta q . k_self
            mm_ld(&mut at.q[off..], hd, View::rm(&at.sr[bn], n, n), View::strided(&real.k[off..], n, dh, hd), false, beta);
            attend::row_scale(&at.ss[bv.clone()], &st.ks[off..], n, dh, hd, beta, true, &mut at.q[off..]);
            attend::row_scale(&at.ss[bv], &st.q[off..], n, dh, hd, beta, false, &mut at.ks[off..]);
        }
    }
    mm(&mut at.n1, View::rm(&at.q, r, hd), View::rm(&p[ix.wq], hd, d), false, 1.0);
    mm(&mut at.n1, View::rm(&at.ks, r, hd), View::rm(&p[ix.wk], hd, d), true, 1.0);
    mm(&mut at.n1, View::rm(&at.vs, r, hd), View::rm(&p[ix.wv], hd, d), true, 1.0);
    below.copy_from_slice(&at.p1);
    norm_bwd(cfg.norm, &at.n1, &st.xh1, &st.rstd1, &p[ix.ln1], d, below, gamma_sink);
}
