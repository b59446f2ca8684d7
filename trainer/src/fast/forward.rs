//! Forward pass of one chunk of sequences, saving what the backward needs,
//! ending in the cross-entropy and dL/dlogits. Same function as
//! `Model::forward` + `cross_entropy` in the core crate (crates/core/src/: model.rs,
//! nrgpt.rs, energy.rs, norm.rs).

use nrgpt_core::{Arch, EtaKind, ModelConfig};

use super::gemm::{mm, mm_ld, View};
use super::math::{cross_entropy_rows, dropped_probs, ff1_act, ff2w_act, norm_fwd, softmax_causal, softmax_strict};
use nrgpt_core::layout::WeightLayout;
use super::workspace::{Dims, Workspace};

/// out[row, h*dh + j] = alpha_h * c[row, h*dh + j]
pub fn scale_heads(c: &[f32], alpha: &[f32], dh: usize, out: &mut [f32]) {
    let hd = alpha.len() * dh;
    for (o, ci) in out.chunks_exact_mut(hd).zip(c.chunks_exact(hd)) {
        for (hh, a) in alpha.iter().enumerate() {
            for j in hh * dh..(hh + 1) * dh {
                o[j] = a * ci[j];
            }
        }
    }
}

/// The attention's self term with the diagonal in the mask:
/// out[row, h*dh + j] = alpha_h p^h_AA q[row, h*dh + j] (A = the row's position),
/// `p` the (nb, h, n, n) probabilities, times the attention dropout mask
/// `drop` (same shape) if any. dE_AT/dg gains -(this) Wk.
#[allow(clippy::too_many_arguments)]
pub fn self_term(q: &[f32], p: &[f32], drop: Option<&[f32]>, alpha: &[f32], nb: usize, n: usize, dh: usize, out: &mut [f32]) {
    let h = alpha.len();
    let hd = h * dh;
    for b in 0..nb {
        for i in 0..n {
            let row = (b * n + i) * hd;
            for (hh, a) in alpha.iter().enumerate() {
                let at = (b * h + hh) * n * n + i * n + i;
                let paa = p[at] * drop.map_or(1.0, |m| m[at]);
                for j in hh * dh..(hh + 1) * dh {
                    out[row + j] = a * paa * q[row + j];
                }
            }
        }
    }
}

/// x(0) = tok_emb[id] + pos_emb[position], then the embedding dropout mask.
pub fn embed(lay: &WeightLayout, p: &[Vec<f32>], ids: &[u32], n: usize, d: usize, mask: Option<&[f32]>, x0: &mut [f32]) {
    let (tok, pos) = (&p[lay.tok], &p[lay.pos]);
    for (row, &id) in ids.iter().enumerate() {
        let (t, ps) = (id as usize, row % n);
        for i in 0..d {
            x0[row * d + i] = tok[t * d + i] + pos[ps * d + i];
        }
    }
    if let Some(mk) = mask {
        x0.iter_mut().zip(mk).for_each(|(x, k)| *x *= k);
    }
}

/// The readout of the final state `ws.x_out`: leaves `ws.loss_sum` and, in
/// `ws.probs`, dL/dlogits for a loss averaged over `total_tokens`.
pub fn readout(cfg: &ModelConfig, lay: &WeightLayout, p: &[Vec<f32>], pt: &[Vec<f32>], ws: &mut Workspace, tgt: &[u32], total_tokens: usize) {
    let Dims { r, d, v, .. } = ws.dims;
    let Workspace { x_out, xh_out, rstd_out, g_out, probs, loss_sum, .. } = ws;
    // logits = W_out N_out(x(T)) + b
    norm_fwd(cfg.norm, x_out, &p[lay.out_gamma], cfg.eps as f32, d, xh_out, rstd_out, g_out);
    mm(probs, View::rm(g_out, r, d), View::rm(&pt[lay.head_w], d, v), false, 1.0);
    // loss = sum(lse(logits) - logit[target]); dL/dlogits = (softmax - onehot) / N
    *loss_sum = cross_entropy_rows(probs, &p[lay.head_b], tgt, v, total_tokens, 0.0);
}

/// Runs the chunk (`pt`: the transposed weight matrices, see `Buffers::transposes`): `ids`/`tgt` its (nb * n) tokens and targets, `masks` its
/// T+1 dropout masks (embedding, then each step) if dropout is on, `attn_masks`
/// its T attention-dropout masks ((nb, h, n, n) each) if that is on.
/// Leaves `ws.loss_sum` and, in `ws.probs`, dL/dlogits for a loss averaged over `total_tokens`.
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
    let Dims { nb, n, r, d, h, dh, hd, m, steps, .. } = ws.dims;
    let eps = cfg.eps as f32;
    let ix = lay.nrgpt().expect("an NRGPT pass on a GPT layout");
    // the attention inverse temperature (1/sqrt(head_dim) unless the config fixes it)
    let beta = cfg.beta() as f32;
    let Workspace { tape, x_out, tmp_d, tmp_hd, ones, nn, .. } = ws;
    // the block norm's gain: learned, or fixed at 1 (the bare norm)
    let gamma: &[f32] = ix.gamma.map_or(&ones[..], |i| &p[i]);
    let (wq, alpha, w1, b1) = (&p[ix.wq], &p[ix.alpha], &p[ix.w1], &p[ix.b1]);
    let ff_scale = p[ix.ff_scale][0];

    embed(lay, p, ids, n, d, masks.map(|mk| mk[0]), &mut tape[0].x);

    for t in 0..steps {
        let (head, tail) = tape.split_at_mut(t + 1);
        let st = &mut head[t];
        let x_next: &mut Vec<f32> = if t + 1 < steps { &mut tail[0].x } else { &mut *x_out };
        let attn_drop = attn_masks.map(|mk| mk[t]);
        // g = N(x)
        norm_fwd(cfg.norm, &st.x, gamma, eps, d, &mut st.xh, &mut st.rstd, &mut st.g);
        if let Some(bi) = ix.norm_bias {
            // the bare norm: g = xh + bias
            for row in st.g.chunks_exact_mut(d) {
                row.iter_mut().zip(&p[bi]).for_each(|(g, b)| *g += b);
            }
        }
        let gv = View::rm(&st.g, r, d);
        // q = g Wq^T, k = g Wk^T
        mm(&mut st.q, gv, View::rm(&pt[ix.wq], d, hd), false, 1.0);
        mm(&mut st.k, gv, View::rm(&pt[ix.wk], d, hd), false, 1.0);
        for b in 0..nb {
            for hh in 0..h {
                let off = b * n * hd + hh * dh;
                let pb = &mut st.p[(b * h + hh) * n * n..(b * h + hh + 1) * n * n];
                let kv = View::strided(&st.k[off..], n, dh, hd);
                // S = beta q k^T, P = softmax over keys B < A (B <= A with the diagonal)
                mm(pb, View::strided(&st.q[off..], n, dh, hd), kv.t(), false, beta);
                if cfg.attn_diag {
                    softmax_causal(pb, n);
                } else {
                    softmax_strict(pb, n);
                }
                // C_h = P_h k_h, with P_h * mask under attention dropout
                let used = dropped_probs(pb, attn_drop, (b * h + hh) * n * n, nn);
                mm_ld(&mut st.c[off..], hd, View::rm(used, n, n), kv, false, 1.0);
            }
        }
        // dE_AT/dg = - sum_h alpha_h Wq_h^T (P_h k_h) = -(alpha C) Wq
        scale_heads(&st.c, alpha, dh, tmp_hd);
        mm(&mut st.grad, View::rm(tmp_hd, r, hd), View::rm(wq, hd, d), false, -1.0);
        if cfg.attn_diag {
            // with the diagonal: dE_AT/dg -= sum_h alpha_h p_AA Wk_h^T q_h = (alpha p_AA q) Wk
            self_term(&st.q, &st.p, attn_drop, alpha, nb, n, dh, tmp_hd);
            mm(&mut st.grad, View::rm(tmp_hd, r, hd), View::rm(&p[ix.wk], hd, d), true, -1.0);
        }

        match cfg.arch {
            Arch::NrgptFf2w => {
                let (w2, b2) = (&p[ix.w2.unwrap()], &p[ix.b2.unwrap()]);
                let [fs, fds, fdds, fv, fz] = &mut st.f;
                // u = W1 g + b1 (bias added below), v = W2^T g
                mm(fs, gv, View::rm(&pt[ix.w1], d, m), false, 1.0);
                mm(fv, gv, View::rm(w2, d, m), false, 1.0);
                ff2w_act(cfg.activation, b1, m, fs, fds, fdds, fv, fz);
                // dE_FF/dg = -(W2 s(u) + b2) - W1^T (s'(u) * W2^T g)
                mm(&mut st.gff, View::rm(fs, r, m), View::rm(&pt[ix.w2.unwrap()], m, d), false, -1.0);
                mm(&mut st.gff, View::rm(fz, r, m), View::rm(w1, m, d), true, -1.0);
                for row in st.gff.chunks_exact_mut(d) {
                    row.iter_mut().zip(b2.iter()).for_each(|(o, b)| *o -= b);
                }
            }
            Arch::NrgptFf1 => {
                let [fw, fh, ..] = &mut st.f;
                mm(fw, gv, View::rm(&pt[ix.w1], d, m), false, 1.0);
                // w = s s', and its derivative (s s')' = s'^2 + s s''
                ff1_act(cfg.activation, b1, m, fw, fh);
                // dE_FF/dg = -2 W^T (s(u) s'(u))
                mm(&mut st.gff, View::rm(fw, r, m), View::rm(w1, m, d), false, -2.0);
            }
            _ => unreachable!("fast backend runs NRGPT only"),
        }
        // dE/dg = dE_AT/dg + ff_scale dE_FF/dg
        st.grad.iter_mut().zip(&st.gff).for_each(|(g, f)| *g += ff_scale * f);

        let mask = masks.map(|mk| mk[t + 1]);
        let upd: &[f32] = match cfg.eta {
            EtaKind::Stable => {
                // eta dE/dg = c * gamma * dE/dg, c = exp(log_c)
                let c = (p[ix.log_c.unwrap()][0] as f64).exp() as f32;
                for (o, gr) in tmp_d.chunks_exact_mut(d).zip(st.grad.chunks_exact(d)) {
                    for i in 0..d {
                        o[i] = gr[i] * gamma[i] * c;
                    }
                }
                tmp_d
            }
            EtaKind::Free => {
                // eta dE/dg = dE/dg W_eta^T (`linear`)
                mm(tmp_d, View::rm(&st.grad, r, d), View::rm(&pt[ix.eta_w.unwrap()], d, d), false, 1.0);
                tmp_d
            }
        };
        // x(t+1) = x(t) - mask * eta dE/dg
        match mask {
            Some(mk) => (0..r * d).for_each(|i| x_next[i] = st.x[i] - upd[i] * mk[i]),
            None => (0..r * d).for_each(|i| x_next[i] = st.x[i] - upd[i]),
        }
    }

    readout(cfg, lay, p, pt, ws, tgt, total_tokens);
}
