//! The GPT baselines (gpt: L layers; gpt-rec: one layer applied T times) on
//! the fast backend: forward and hand-derived backward of one chunk, the same
//! function as crates/core/src/gpt.rs + `Model::forward` + `cross_entropy`. Each layer is
//!   x' = x + m1 * Attn(N1(x)),  x'' = x' + m2 * MLP(N2(x'))
//! (the parallel block: x'' = x + m1 * Attn(N1(x)) + m2 * MLP(N2(x)))
//! with dropout masks m1, m2 on the residual branches (as in crates/core/src/gpt.rs).

use nrgpt_core::{GptBlock, ModelConfig};

use super::backward::{embed_bwd, readout_bwd};
use super::forward::{embed, readout};
use super::gemm::{mm, mm_ld, View};
use nrgpt_core::scalar::act3;
use super::math::{col_sum_into, dropped_probs, norm_bwd, norm_fwd, softmax_causal, softmax_vjp};
use nrgpt_core::layout::{GptIdx, WeightLayout};
use super::workspace::{Dims, LayerTape, Workspace};

/// Dropout masks of one applied layer: the attention and MLP residual
/// branches (r x d each), the attention probabilities (nb x h x n x n).
pub type LayerMasks<'a> = (Option<&'a [f32]>, Option<&'a [f32]>, Option<&'a [f32]>);

/// The masks of applied layer `i`: its two residual masks (after the
/// embedding's) and its attention-probability mask.
fn layer_masks<'a>(masks: Option<&[&'a [f32]]>, attn_masks: Option<&[&'a [f32]]>, i: usize) -> LayerMasks<'a> {
    let (m1, m2) = match masks {
        Some(mk) => (Some(mk[1 + 2 * i]), Some(mk[2 + 2 * i])),
        None => (None, None),
    };
    (m1, m2, attn_masks.map(|mk| mk[i]))
}

/// out += mask * branch
fn add_masked(out: &mut [f32], branch: &[f32], mask: Option<&[f32]>) {
    match mask {
        Some(mk) => (0..out.len()).for_each(|i| out[i] += branch[i] * mk[i]),
        None => (0..out.len()).for_each(|i| out[i] += branch[i]),
    }
}

/// out = d * mask (the gradient reaching a masked residual branch)
fn masked(out: &mut [f32], d: &[f32], mask: Option<&[f32]>) {
    match mask {
        Some(mk) => (0..out.len()).for_each(|i| out[i] = d[i] * mk[i]),
        None => out.copy_from_slice(d),
    }
}

/// Forward of the chunk; see `forward::forward` for the arguments. `masks`:
/// 1 + 2 T dropout masks (embedding, then attention and MLP of each layer);
/// `attn_masks`: T masks of the attention probabilities.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cfg: &ModelConfig,
    lay: &WeightLayout,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    ws: &mut Workspace,
    ids: &[u32],
    tgt: &[u32],
    masks: Option<&[&[f32]]>,
    attn_masks: Option<&[&[f32]]>,
    total_tokens: usize,
) {
    let Dims { n, d, steps, .. } = ws.dims;
    let dims = ws.dims;
    let layers = lay.gpt().expect("a GPT pass on an NRGPT layout");
    let Workspace { layers: tape, x_out, tmp_d, nn, .. } = ws;
    embed(lay, p, ids, n, d, masks.map(|mk| mk[0]), &mut tape[0].x);
    for i in 0..steps {
        let (head, tail) = tape.split_at_mut(i + 1);
        let x_next: &mut Vec<f32> = if i + 1 < steps { &mut tail[0].x } else { &mut *x_out };
        layer_forward(cfg, &layers[i.min(layers.len() - 1)], p, pt, &dims, &mut head[i], x_next, (tmp_d, nn), layer_masks(masks, attn_masks, i));
    }
    readout(cfg, lay, p, pt, ws, tgt, total_tokens);
}

/// One layer from `st.x` into `x_next`, saving what `layer_backward` needs in `st`
/// (`scratch`: r x d and n x n; `masks`: the layer's dropout masks).
#[allow(clippy::too_many_arguments)]
pub fn layer_forward(
    cfg: &ModelConfig,
    ix: &GptIdx,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    dims: &Dims,
    st: &mut LayerTape,
    x_next: &mut [f32],
    scratch: (&mut [f32], &mut [f32]),
    masks: LayerMasks,
) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let eps = cfg.eps as f32;
    // 1/sqrt(head_dim), the attention scale
    let beta = 1.0 / (dh as f32).sqrt();
    let (m1, m2, probs) = masks;
    let (tmp_d, nn) = scratch;
    // g1 = N1(x); q, k, v = g1 W^T
    norm_fwd(cfg.norm, &st.x, &p[ix.ln1], eps, d, &mut st.xh1, &mut st.rstd1, &mut st.g1);
    let gv = View::rm(&st.g1, r, d);
    mm(&mut st.q, gv, View::rm(&pt[ix.wq], d, hd), false, 1.0);
    mm(&mut st.k, gv, View::rm(&pt[ix.wk], d, hd), false, 1.0);
    mm(&mut st.v, gv, View::rm(&pt[ix.wv], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let pb = &mut st.p[(b * h + hh) * n * n..(b * h + hh + 1) * n * n];
            // P = softmax(q k^T / sqrt(dh)) over keys B <= A
            mm(pb, View::strided(&st.q[off..], n, dh, hd), View::strided(&st.k[off..], n, dh, hd).t(), false, beta);
            softmax_causal(pb, n);
            // o_h = P_h v_h, with P_h * mask under attention dropout
            let used = dropped_probs(pb, probs, (b * h + hh) * n * n, nn);
            mm_ld(&mut st.o[off..], hd, View::rm(used, n, n), View::strided(&st.v[off..], n, dh, hd), false, 1.0);
        }
    }
    // x' = x + m1 * (o Wo^T), held in x_next
    mm(tmp_d, View::rm(&st.o, r, hd), View::rm(&pt[ix.wo], hd, d), false, 1.0);
    x_next.copy_from_slice(&st.x);
    add_masked(x_next, tmp_d, m1);

    // g2 = N2(x') (parallel: N2(x)); s = act(g2 W1^T + b1)
    let mlp_in: &[f32] = if cfg.gpt_block == GptBlock::Parallel { &st.x } else { x_next };
    norm_fwd(cfg.norm, mlp_in, &p[ix.ln2], eps, d, &mut st.xh2, &mut st.rstd2, &mut st.g2);
    mm(&mut st.s, View::rm(&st.g2, r, d), View::rm(&pt[ix.w1], d, m), false, 1.0);
    let b1 = &p[ix.b1];
    for (sr, dr) in st.s.chunks_exact_mut(m).zip(st.ds.chunks_exact_mut(m)) {
        for j in 0..m {
            let (a, da, _) = act3(cfg.activation, sr[j] + b1[j]);
            sr[j] = a;
            dr[j] = da;
        }
    }
    // x'' = x' + m2 * (s W2^T + b2)
    mm(tmp_d, View::rm(&st.s, r, m), View::rm(&pt[ix.w2], m, d), false, 1.0);
    for row in tmp_d.chunks_exact_mut(d) {
        row.iter_mut().zip(&p[ix.b2]).for_each(|(o, b)| *o += b);
    }
    add_masked(x_next, tmp_d, m2);
}

/// Backward of the chunk from dL/dlogits (left by `forward` in `ws.probs`);
/// accumulates into `ws.grads`.
pub fn backward(
    cfg: &ModelConfig,
    lay: &WeightLayout,
    p: &[Vec<f32>],
    ws: &mut Workspace,
    ids: &[u32],
    masks: Option<&[&[f32]]>,
    attn_masks: Option<&[&[f32]]>,
) {
    let Dims { n, d, steps, .. } = ws.dims;
    let dims = ws.dims;
    let layers = lay.gpt().expect("a GPT pass on an NRGPT layout");
    readout_bwd(cfg, lay, p, ws);
    let Workspace { layers: tape, dx, dg, tmp_d, tmp_hd, dq, dk, dv, ta, nn, grads, .. } = ws;
    let mut sc = LayerScratch { dx, dg, tmp_d, tmp_hd, dq, dk, dv, ta, nn };
    for i in (0..steps).rev() {
        layer_backward(cfg, &layers[i.min(layers.len() - 1)], p, &dims, &tape[i], &mut sc, grads, layer_masks(masks, attn_masks, i), None);
    }
    embed_bwd(lay, ids, n, d, masks.map(|mk| mk[0]), sc.dx, grads);
}

/// The backward's scratch, lent by the chunk's workspace: `dx` holds dL/d(layer
/// output) on entry and dL/d(layer input) on return; the rest is overwritten.
pub struct LayerScratch<'a> {
    pub dx: &'a mut [f32],
    pub dg: &'a mut [f32],
    pub tmp_d: &'a mut [f32],
    pub tmp_hd: &'a mut [f32],
    pub dq: &'a mut [f32],
    pub dk: &'a mut [f32],
    pub dv: &'a mut [f32],
    pub ta: &'a mut [f32],
    pub nn: &'a mut [f32],
}

/// One layer's backward (see `layer_forward`), accumulating into `grads`.
/// `kv_extra`: gradients that other readers of this layer's keys and values
/// send them (EBT's prediction stream), (r, hd) each.
#[allow(clippy::too_many_arguments)]
pub fn layer_backward(
    cfg: &ModelConfig,
    ix: &GptIdx,
    p: &[Vec<f32>],
    dims: &Dims,
    st: &LayerTape,
    sc: &mut LayerScratch,
    grads: &mut [Vec<f32>],
    masks: LayerMasks,
    kv_extra: Option<(&[f32], &[f32])>,
) {
    let Dims { nb, n, r, d, h, dh, hd, m, .. } = *dims;
    let beta = 1.0 / (dh as f32).sqrt();
    let (m1, m2, probs) = masks;
    let LayerScratch { dx, dg, tmp_d, tmp_hd, dq, dk, dv, ta, nn } = sc;
    // the parallel block's attention branch hangs off x'' directly: it takes
    // dL/dx'' as it came in, before the MLP's path into x is added
    let upstream: Option<Vec<f32>> = (cfg.gpt_block == GptBlock::Parallel).then(|| dx.to_vec());

    // ---- MLP: f = s W2^T + b2, s = act(u), u = g2 W1^T + b1 ----
    masked(tmp_d, dx, m2);
    let dfv = View::rm(tmp_d, r, d);
    // dW2 += df^T s, db2 += sum df
    mm(&mut grads[ix.w2], dfv.t(), View::rm(&st.s, r, m), true, 1.0);
    col_sum_into(tmp_d, d, &mut grads[ix.b2], 1.0);
    // du = (df W2) * s'(u)
    mm(ta, dfv, View::rm(&p[ix.w2], d, m), false, 1.0);
    ta.iter_mut().zip(&st.ds).for_each(|(a, s)| *a *= s);
    let duv = View::rm(ta, r, m);
    // dW1 += du^T g2, db1 += sum du, dg2 = du W1
    mm(&mut grads[ix.w1], duv.t(), View::rm(&st.g2, r, d), true, 1.0);
    col_sum_into(ta, m, &mut grads[ix.b1], 1.0);
    mm(dg, duv, View::rm(&p[ix.w1], m, d), false, 1.0);
    // dL/dx' = dx + J_N2^T dg2 (parallel: the MLP's share of dL/dx)
    norm_bwd(cfg.norm, dg, &st.xh2, &st.rstd2, &p[ix.ln2], d, dx, &mut grads[ix.ln2]);

    // ---- attention: a = o Wo^T, o_h = P_h v_h, P_h = softmax(beta q_h k_h^T) ----
    masked(tmp_d, upstream.as_deref().unwrap_or(dx), m1);
    let dav = View::rm(tmp_d, r, d);
    // dWo += da^T o, do = da Wo (into tmp_hd)
    mm(&mut grads[ix.wo], dav.t(), View::rm(&st.o, r, hd), true, 1.0);
    mm(tmp_hd, dav, View::rm(&p[ix.wo], d, hd), false, 1.0);
    for b in 0..nb {
        for hh in 0..h {
            let off = b * n * hd + hh * dh;
            let pb = &st.p[(b * h + hh) * n * n..(b * h + hh + 1) * n * n];
            let (qv, kv, vv) = (View::strided(&st.q[off..], n, dh, hd), View::strided(&st.k[off..], n, dh, hd), View::strided(&st.v[off..], n, dh, hd));
            let dov = View::strided(&tmp_hd[off..], n, dh, hd);
            // dv = P'^T do (P' = P * mask under attention dropout), dP' = do v^T, dP = dP' * mask
            let at = (b * h + hh) * n * n;
            let used = dropped_probs(pb, probs, at, nn);
            mm_ld(&mut dv[off..], hd, View::rm(used, n, n).t(), dov, false, 1.0);
            mm(nn, dov, vv.t(), false, 1.0);
            if let Some(mk) = probs {
                nn.iter_mut().zip(&mk[at..at + n * n]).for_each(|(g, m)| *g *= m);
            }
            // dS = beta P * (dP - sum_j P dP)
            softmax_vjp(pb, nn, n, beta);
            // S = q k^T: dq = dS k, dk = dS^T q
            let dsv = View::rm(nn, n, n);
            mm_ld(&mut dq[off..], hd, dsv, kv, false, 1.0);
            mm_ld(&mut dk[off..], hd, dsv.t(), qv, false, 1.0);
        }
    }
    if let Some((ek, ev)) = kv_extra {
        dk.iter_mut().zip(ek).for_each(|(a, b)| *a += b);
        dv.iter_mut().zip(ev).for_each(|(a, b)| *a += b);
    }
    // q, k, v = g1 W^T: dg1 = dq Wq + dk Wk + dv Wv, dW += d^T g1
    let gv = View::rm(&st.g1, r, d);
    for (j, (dbuf, w)) in [(&**dq, ix.wq), (&**dk, ix.wk), (&**dv, ix.wv)].into_iter().enumerate() {
        let dbv = View::rm(dbuf, r, hd);
        mm(dg, dbv, View::rm(&p[w], hd, d), j > 0, 1.0);
        mm(&mut grads[w], dbv.t(), gv, true, 1.0);
    }
    // dL/dx = dL/dx' + J_N1^T dg1
    norm_bwd(cfg.norm, dg, &st.xh1, &st.rstd1, &p[ix.ln1], d, dx, &mut grads[ix.ln1]);
}
