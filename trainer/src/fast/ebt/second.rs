//! The parameter gradient of one thinking step's loss, exactly. The step's
//! loss reads the parameters only through g = dE/dz at the (detached) z, so
//! with u = dL/dg (= -a s dL/dz(s+1), per position) it is the gradient of
//!   F(theta) = sum_A u_A . dE_A/dz_A = d/dt E(z + t u)|_{t=0},
//! a directional derivative: [`tangent`] runs the tangents of the prediction
//! stream along u (forward mode), and [`backward`] the reverse of that
//! forward-mode pass. The reverse of a tangent is the input-gradient pass
//! already kept in the [`AdjointTape`]s; what is new here are the primal
//! adjoints, which pick up the second-order terms (s'', the softmaxes' and
//! the norms' second derivatives), and every parameter's gradient
//! (W += primal adjoint^T primal + tangent adjoint^T tangent). The real
//! stream's keys and values have no tangent; their gradients collect in
//! `ws.kbar`, `ws.vbar` for the real stream's one backward per batch.

use nrgpt_core::layout::{EbtIdx, GptIdx, WeightLayout};
use nrgpt_core::{EbtUpdate, ModelConfig};

use super::attend;
use super::norm_tangent;
use super::tape::{AdjointTape, EbtWorkspace, PrimalTape, TangentTape};
use crate::fast::gemm::{mm, mm_ld, View};
use crate::fast::math::{col_sum_into, norm_bwd};
use crate::fast::workspace::{Dims, LayerTape};

/// The tangents along `ws.u` (a direction in z), from y' = (diag y - y y^T) u
/// (or y' = u when the step moves the probabilities) up to N_out.
pub fn tangent(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], pt: &[Vec<f32>], ws: &mut EbtWorkspace) {
    let Dims { r, d, v, .. } = ws.dims;
    let dims = ws.dims;
    let EbtWorkspace { real, pri, tan, top, y, y_dot, u, .. } = ws;
    match cfg.ebt_update {
        EbtUpdate::Probs => y_dot.copy_from_slice(u),
        EbtUpdate::Logits => {
            for ((o, yr), ur) in y_dot.chunks_exact_mut(v).zip(y.chunks_exact(v)).zip(u.chunks_exact(v)) {
                let dot: f32 = yr.iter().zip(ur).map(|(a, b)| a * b).sum();
                o.iter_mut().zip(yr.iter().zip(ur)).for_each(|(o, (y, u))| *o = y * (u - dot));
            }
        }
    }
    mm(&mut tan[0].p, View::rm(y_dot, r, v), View::rm(&p[ix.input], v, d), false, 1.0);
    let layers = ix.layers.len();
    for l in 0..layers {
        let (head, tail) = tan.split_at_mut(l + 1);
        let out: &mut [f32] = if l + 1 < layers { &mut tail[0].p } else { &mut top.p_dot };
        layer_tangent(cfg, &ix.layers[l], p, pt, &dims, &pri[l], &real[l], &mut head[l], out);
    }
    norm_tangent::tangent(cfg.norm, &top.xh, &top.rstd, &p[lay.out_gamma], &top.p_dot, d, &mut top.xh_dot, &mut top.n_dot);
}

#[allow(clippy::too_many_arguments)]
fn layer_tangent(
    cfg: &ModelConfig,
    ix: &GptIdx,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    dims: &Dims,
    st: &PrimalTape,
    real: &LayerTape,
    tn: &mut TangentTape,
    out: &mut [f32],
) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let beta = 1.0 / (dh as f32).sqrt();
    norm_tangent::tangent(cfg.norm, &st.xh1, &st.rstd1, &p[ix.ln1], &tn.p, d, &mut tn.xh1, &mut tn.n1);
    let nv = View::rm(&tn.n1, r, d);
    mm(&mut tn.q, nv, View::rm(&pt[ix.wq], d, hd), false, 1.0);
    mm(&mut tn.ks, nv, View::rm(&pt[ix.wk], d, hd), false, 1.0);
    mm(&mut tn.vs, nv, View::rm(&pt[ix.wv], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let (bn, bv) = ((b * h + hh) * n * n..(b * h + hh + 1) * n * n, (b * h + hh) * n..(b * h + hh + 1) * n);
            // s' = beta q' K^T; self: beta (q' . k_self + q . k_self')
            mm(&mut tn.sr[bn.clone()], View::strided(&tn.q[off..], n, dh, hd), View::strided(&real.k[off..], n, dh, hd).t(), false, beta);
            attend::row_dots(&tn.q[off..], &st.ks[off..], n, dh, hd, beta, false, &mut tn.ss[bv.clone()]);
            attend::row_dots(&st.q[off..], &tn.ks[off..], n, dh, hd, beta, true, &mut tn.ss[bv.clone()]);
            attend::jvp(&st.pr[bn.clone()], &st.ps[bv.clone()], &tn.sr[bn.clone()], &tn.ss[bv.clone()], &mut tn.pr[bn.clone()], &mut tn.ps[bv.clone()], n);
            // att' = P' V + p_self' v_self + p_self v_self'
            mm_ld(&mut tn.att[off..], hd, View::rm(&tn.pr[bn], n, n), View::strided(&real.v[off..], n, dh, hd), false, 1.0);
            attend::row_scale(&tn.ps[bv.clone()], &st.vs[off..], n, dh, hd, 1.0, true, &mut tn.att[off..]);
            attend::row_scale(&st.ps[bv], &tn.vs[off..], n, dh, hd, 1.0, true, &mut tn.att[off..]);
        }
    }
    tn.p1.copy_from_slice(&tn.p);
    mm(&mut tn.p1, View::rm(&tn.att, r, hd), View::rm(&pt[ix.wo], hd, d), true, 1.0);
    norm_tangent::tangent(cfg.norm, &st.xh2, &st.rstd2, &p[ix.ln2], &tn.p1, d, &mut tn.xh2, &mut tn.n2);
    mm(&mut tn.u, View::rm(&tn.n2, r, d), View::rm(&pt[ix.w1], d, m), false, 1.0);
    tn.s.iter_mut().zip(tn.u.iter().zip(&st.ds)).for_each(|(s, (u, ds))| *s = ds * u);
    out.copy_from_slice(&tn.p1);
    mm(out, View::rm(&tn.s, r, m), View::rm(&pt[ix.w2], m, d), true, 1.0);
}

/// The reverse of `tangent`, seeded with dF/dN_out' = w_E: accumulates every
/// parameter's gradient of F into `ws.grads` and the real keys' and values'
/// into `ws.kbar`, `ws.vbar`.
pub fn backward(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], ws: &mut EbtWorkspace) {
    let d = ws.dims.d;
    let EbtWorkspace { top, a, head_rows, grads, .. } = ws;
    // F = sum_A w_E . N_out'(A)
    col_sum_into(&top.n_dot, d, &mut grads[lay.head_w], 1.0);
    a.fill(0.0);
    norm_tangent::second_bwd(cfg.norm, &top.xh, &top.rstd, &p[lay.out_gamma], None, head_rows, &top.p_dot, &top.xh_dot, d, a, &mut grads[lay.out_gamma]);
    through_layers(cfg, lay, ix, p, ws);
}

/// The parameter gradient of sum_A c_A E_A at the last forward (the primal
/// tapes), accumulated into `ws.grads` (and the real keys' and values' into
/// `ws.kbar`, `ws.vbar`): `backward`'s reverse with every tangent zero, so
/// that only its first-order terms remain, seeded at the head with c_A w_E.
/// The thinking loss reaches the energy only through its gradient; this is
/// for the losses on the energy's own level (contrastive, calibration).
pub fn energy_backward(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], ws: &mut EbtWorkspace, c: &[f32]) {
    let d = ws.dims.d;
    let EbtWorkspace { tan, top, y_dot, a, tmp_d, grads, .. } = ws;
    for t in tan.iter_mut() {
        let TangentTape { p, xh1, n1, q, ks, vs, sr, ss, pr, ps, att, p1, xh2, n2, u, s } = t;
        for buf in [p, xh1, n1, q, ks, vs, sr, ss, pr, ps, att, p1, xh2, n2, u, s] {
            buf.fill(0.0);
        }
    }
    y_dot.fill(0.0);
    // E = w_E . (gamma xh) + b_E per row
    let gamma = &p[lay.out_gamma];
    for ((xh, &ci), seed) in top.xh.chunks_exact(d).zip(c).zip(tmp_d.chunks_exact_mut(d)) {
        for i in 0..d {
            grads[lay.head_w][i] += ci * gamma[i] * xh[i];
            seed[i] = ci * p[lay.head_w][i];
        }
        grads[lay.head_b][0] += ci;
    }
    a.fill(0.0);
    norm_bwd(cfg.norm, tmp_d, &top.xh, &top.rstd, gamma, d, a, &mut grads[lay.out_gamma]);
    through_layers(cfg, lay, ix, p, ws);
}

/// From `ws.a` = the adjoint at the top layer's output down through every
/// layer to the candidate's input map and the position embedding.
fn through_layers(cfg: &ModelConfig, lay: &WeightLayout, ix: &EbtIdx, p: &[Vec<f32>], ws: &mut EbtWorkspace) {
    let Dims { n, r, d, v, .. } = ws.dims;
    let dims = ws.dims;
    let EbtWorkspace { real, kbar, vbar, pri, tan, adj, y, y_dot, e_bar, a, tmp_d, tmp_hd, dq, dk, dv, ta, tb, nn, nv, grads, .. } = ws;
    let mut sc = Scratch { tmp_d, tmp_hd, qb: dq, kb: dk, vb: dv, ta, tb, nn, nv };
    for l in (0..ix.layers.len()).rev() {
        let kv = (&mut kbar[l][..], &mut vbar[l][..]);
        layer_backward(cfg, &ix.layers[l], p, &dims, &pri[l], &tan[l], &adj[l], &real[l], a, kv, &mut sc, grads);
    }
    // e = y Emb + pos, e' = y' Emb
    mm(&mut grads[ix.input], View::rm(y, r, v).t(), View::rm(a, r, d), true, 1.0);
    mm(&mut grads[ix.input], View::rm(y_dot, r, v).t(), View::rm(e_bar, r, d), true, 1.0);
    for (row, ar) in a.chunks_exact(d).enumerate() {
        grads[lay.pos][(row % n) * d..(row % n + 1) * d].iter_mut().zip(ar).for_each(|(g, x)| *g += x);
    }
}

struct Scratch<'a> {
    tmp_d: &'a mut [f32],
    tmp_hd: &'a mut [f32],
    qb: &'a mut [f32],
    kb: &'a mut [f32],
    vb: &'a mut [f32],
    ta: &'a mut [f32],
    tb: &'a mut [f32],
    nn: &'a mut [f32],
    nv: &'a mut [f32],
}

/// `a`: dF/d(layer output) in, dF/d(layer input) out (primal adjoints).
#[allow(clippy::too_many_arguments)]
fn layer_backward(
    cfg: &ModelConfig,
    ix: &GptIdx,
    p: &[Vec<f32>],
    dims: &Dims,
    st: &PrimalTape,
    tn: &TangentTape,
    at: &AdjointTape,
    real: &LayerTape,
    a: &mut [f32],
    kv: (&mut [f32], &mut [f32]),
    sc: &mut Scratch,
    grads: &mut [Vec<f32>],
) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let beta = 1.0 / (dh as f32).sqrt();
    let Scratch { tmp_d, tmp_hd, qb, kb, vb, ta, tb, nn, nv } = sc;
    let (kbar, vbar) = kv;
    // ---- MLP: p2 = p1 + s W2^T + b2, p2' = p1' + s' W2^T; s = act(u), s' = act'(u) u' ----
    col_sum_into(a, d, &mut grads[ix.b2], 1.0);
    mm(&mut grads[ix.w2], View::rm(a, r, d).t(), View::rm(&st.s, r, m), true, 1.0);
    mm(&mut grads[ix.w2], View::rm(&at.out, r, d).t(), View::rm(&tn.s, r, m), true, 1.0);
    mm(ta, View::rm(a, r, d), View::rm(&p[ix.w2], d, m), false, 1.0);
    // du = act' dL/ds + act'' u' dL/ds'; du' = act' dL/ds'
    for j in 0..r * m {
        ta[j] = st.ds[j] * ta[j] + st.dds[j] * tn.u[j] * at.s[j];
        tb[j] = st.ds[j] * at.s[j];
    }
    col_sum_into(ta, m, &mut grads[ix.b1], 1.0);
    mm(&mut grads[ix.w1], View::rm(ta, r, m).t(), View::rm(&st.n2, r, d), true, 1.0);
    mm(&mut grads[ix.w1], View::rm(tb, r, m).t(), View::rm(&tn.n2, r, d), true, 1.0);
    mm(tmp_d, View::rm(ta, r, m), View::rm(&p[ix.w1], m, d), false, 1.0);
    norm_tangent::second_bwd(cfg.norm, &st.xh2, &st.rstd2, &p[ix.ln2], Some(tmp_d), &at.n2, &tn.p1, &tn.xh2, d, a, &mut grads[ix.ln2]);

    // ---- attention: p1 = p + att Wo^T, p1' = p' + att' Wo^T ----
    mm(&mut grads[ix.wo], View::rm(a, r, d).t(), View::rm(&st.att, r, hd), true, 1.0);
    mm(&mut grads[ix.wo], View::rm(&at.p1, r, d).t(), View::rm(&tn.att, r, hd), true, 1.0);
    mm(tmp_hd, View::rm(a, r, d), View::rm(&p[ix.wo], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let (bn, bv) = ((b * h + hh) * n * n..(b * h + hh + 1) * n * n, (b * h + hh) * n..(b * h + hh + 1) * n);
            let (abv, tbv) = (View::strided(&tmp_hd[off..], n, dh, hd), View::strided(&at.att[off..], n, dh, hd));
            let (kr, vr) = (View::strided(&real.k[off..], n, dh, hd), View::strided(&real.v[off..], n, dh, hd));
            // att = P V + p_s v_s; att' = P' V + p_s' v_s + p_s v_s'
            mm(nn, abv, vr.t(), false, 1.0);
            attend::row_dots(&tmp_hd[off..], &st.vs[off..], n, dh, hd, 1.0, false, nv);
            attend::row_dots(&at.att[off..], &tn.vs[off..], n, dh, hd, 1.0, true, nv);
            attend::row_scale(&st.ps[bv.clone()], &tmp_hd[off..], n, dh, hd, 1.0, false, &mut vb[off..]);
            attend::row_scale(&tn.ps[bv.clone()], &at.att[off..], n, dh, hd, 1.0, true, &mut vb[off..]);
            mm_ld(&mut vbar[off..], hd, View::rm(&st.pr[bn.clone()], n, n).t(), abv, true, 1.0);
            mm_ld(&mut vbar[off..], hd, View::rm(&tn.pr[bn.clone()], n, n).t(), tbv, true, 1.0);
            // through P' = JVP(P; s'), then P = softmax(s)
            attend::jvp_adjoint(
                &st.pr[bn.clone()],
                &st.ps[bv.clone()],
                &tn.sr[bn.clone()],
                &tn.ss[bv.clone()],
                &at.pr[bn.clone()],
                &at.ps[bv.clone()],
                nn,
                nv,
                n,
            );
            attend::vjp(&st.pr[bn.clone()], &st.ps[bv.clone()], nn, nv, n);
            // s = beta q K^T, s_s = beta q . k_s; s' = beta q' K^T, s_s' = beta (q' . k_s + q . k_s')
            let nnv = View::rm(nn, n, n);
            mm_ld(&mut qb[off..], hd, nnv, kr, false, beta);
            attend::row_scale(nv, &st.ks[off..], n, dh, hd, beta, true, &mut qb[off..]);
            attend::row_scale(&at.ss[bv.clone()], &tn.ks[off..], n, dh, hd, beta, true, &mut qb[off..]);
            attend::row_scale(nv, &st.q[off..], n, dh, hd, beta, false, &mut kb[off..]);
            attend::row_scale(&at.ss[bv], &tn.q[off..], n, dh, hd, beta, true, &mut kb[off..]);
            mm_ld(&mut kbar[off..], hd, nnv.t(), View::strided(&st.q[off..], n, dh, hd), true, beta);
            mm_ld(&mut kbar[off..], hd, View::rm(&at.sr[bn], n, n).t(), View::strided(&tn.q[off..], n, dh, hd), true, beta);
        }
    }
    let (n1, n1d) = (View::rm(&st.n1, r, d), View::rm(&tn.n1, r, d));
    for (j, (pb, tbuf, w)) in [(&**qb, &at.q, ix.wq), (&**kb, &at.ks, ix.wk), (&**vb, &at.vs, ix.wv)].into_iter().enumerate() {
        mm(&mut grads[w], View::rm(pb, r, hd).t(), n1, true, 1.0);
        mm(&mut grads[w], View::rm(tbuf, r, hd).t(), n1d, true, 1.0);
        mm(tmp_d, View::rm(pb, r, hd), View::rm(&p[w], hd, d), j > 0, 1.0);
    }
    norm_tangent::second_bwd(cfg.norm, &st.xh1, &st.rstd1, &p[ix.ln1], Some(tmp_d), &at.n1, &tn.p, &tn.xh1, d, a, &mut grads[ix.ln1]);
}
