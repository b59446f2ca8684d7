//! Hand-derived backward of one chunk: from dL/dlogits (left by the forward)
//! back through the readout, the T descent steps (through the analytic energy
//! gradients, so second-order terms such as s''(u) appear) and the embedding.
//! Accumulates into `ws.grads` (which the caller zeroes).
//!
//! Per step, with D := dL/dx(t+1) and G := dL/d(dE/dg):
//!   x(t+1) = x(t) - mask * eta(dE/dg(g)),  g = N(x(t))
//!   => dL/dx(t) = D + J_N^T dL/dg, and dL/dg collects every path of g below.

use nrgpt_core::{Arch, EtaKind, ModelConfig};

use super::forward::{scale_heads, self_term};
use super::gemm::{mm, mm_ld, View};
use super::math::{col_sum_into, dropped_probs, ff2w_act_bwd, norm_bwd, softmax_vjp, stable_eta_bwd};
use nrgpt_core::layout::WeightLayout;
use super::workspace::{Dims, Workspace};

/// Test-only sabotage of one backward term, to show the gradient check
/// catches it (feature `fault-injection`, which only the tests turn on; without
/// it the backward is always called with `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Leave out the s''(u) (second-order activation) term.
    NoSecondOrder,
    /// Leave out the softmax path dL/dP of the attention.
    NoSoftmaxPath,
    /// With the diagonal in the mask, leave out the self term's path into q.
    NoSelfQuery,
}

/// Whether the test's sabotage `f` is on; constant false without the
/// feature, so the release backward carries no hook.
#[cfg(feature = "fault-injection")]
fn faulty(fault: Option<Fault>, f: Fault) -> bool {
    fault == Some(f)
}

#[cfg(not(feature = "fault-injection"))]
fn faulty(_: Option<Fault>, _: Fault) -> bool {
    false
}

/// Readout: logits = g_out W^T + b, from dL/dlogits in `ws.probs`:
/// dW_out = dlogits^T g_out, db = sum dlogits, and `ws.dx` = dL/dx_out.
pub fn readout_bwd(cfg: &ModelConfig, lay: &WeightLayout, p: &[Vec<f32>], ws: &mut Workspace) {
    let Dims { r, d, v, .. } = ws.dims;
    let Workspace { xh_out, rstd_out, g_out, probs, dx, tmp_d, grads, .. } = ws;
    let dl = View::rm(probs, r, v);
    mm(&mut grads[lay.head_w], dl.t(), View::rm(g_out, r, d), true, 1.0);
    col_sum_into(probs, v, &mut grads[lay.head_b], 1.0);
    mm(tmp_d, dl, View::rm(&p[lay.head_w], v, d), false, 1.0);
    dx.fill(0.0);
    norm_bwd(cfg.norm, tmp_d, xh_out, rstd_out, &p[lay.out_gamma], d, dx, &mut grads[lay.out_gamma]);
}

/// x(0) = mask * (tok_emb[id] + pos_emb[pos]): scatters dL/dx(0) (`dx`, masked here) into the embeddings.
pub fn embed_bwd(lay: &WeightLayout, ids: &[u32], n: usize, d: usize, mask: Option<&[f32]>, dx: &mut [f32], grads: &mut [Vec<f32>]) {
    if let Some(mk) = mask {
        dx.iter_mut().zip(mk).for_each(|(x, k)| *x *= k);
    }
    for (row, &id) in ids.iter().enumerate() {
        let (t, ps) = (id as usize, row % n);
        let src = &dx[row * d..(row + 1) * d];
        grads[lay.tok][t * d..(t + 1) * d].iter_mut().zip(src).for_each(|(g, s)| *g += s);
        grads[lay.pos][ps * d..(ps + 1) * d].iter_mut().zip(src).for_each(|(g, s)| *g += s);
    }
}

#[allow(clippy::too_many_arguments)]
pub fn backward(
    cfg: &ModelConfig,
    lay: &WeightLayout,
    p: &[Vec<f32>],
    pt: &[Vec<f32>],
    ws: &mut Workspace,
    ids: &[u32],
    masks: Option<&[&[f32]]>,
    attn_masks: Option<&[&[f32]]>,
    fault: Option<Fault>,
) {
    let Dims { nb, n, r, d, h, dh, hd, m, steps, .. } = ws.dims;
    let beta = cfg.beta() as f32;
    let ix = lay.nrgpt().expect("an NRGPT pass on a GPT layout");
    let (wq, wk, alpha, w1) = (&p[ix.wq], &p[ix.wk], &p[ix.alpha], &p[ix.w1]);
    let ff_scale = p[ix.ff_scale][0];

    readout_bwd(cfg, lay, p, ws);
    let Workspace { tape, dx, dg, gd, fd, tmp_d, tmp_hd, dq, dk, dv, ta, tb, nn, grads, ones, gain_sink, .. } = ws;
    // the block norm's gain: learned, or fixed at 1 (the bare norm, whose d(gain) is discarded)
    let gamma: &[f32] = ix.gamma.map_or(&ones[..], |i| &p[i]);

    for t in (0..steps).rev() {
        let st = &tape[t];
        let mask = masks.map(|mk| mk[t + 1]);
        // attention dropout: the forward used P' = P * drop in C and in the self term
        let attn_drop = attn_masks.map(|mk| mk[t]);
        // dL/d(update) = -D * mask   (x(t+1) = x(t) - mask * update); into tmp_d
        match mask {
            Some(mk) => (0..r * d).for_each(|i| tmp_d[i] = -dx[i] * mk[i]),
            None => (0..r * d).for_each(|i| tmp_d[i] = -dx[i]),
        }
        // G = dL/d(dE/dg)
        match cfg.eta {
            EtaKind::Stable => {
                // update = c gamma dE/dg: G = c gamma dU, dgamma += c dU dE/dg, dlog_c = sum dU * update
                let c = (p[ix.log_c.unwrap()][0] as f64).exp() as f32;
                let dgain = match ix.gamma {
                    Some(i) => &mut grads[i][..],
                    None => &mut gain_sink[..],
                };
                let dlogc = stable_eta_bwd(c, gamma, tmp_d, &st.grad, d, gd, dgain);
                grads[ix.log_c.unwrap()][0] += dlogc as f32;
            }
            EtaKind::Free => {
                // update = dE/dg W^T: G = dU W, dW += dU^T dE/dg
                let ew = ix.eta_w.unwrap();
                mm(gd, View::rm(tmp_d, r, d), View::rm(&p[ew], d, d), false, 1.0);
                mm(&mut grads[ew], View::rm(tmp_d, r, d).t(), View::rm(&st.grad, r, d), true, 1.0);
            }
        }
        // dE/dg = A + ff_scale F: d ff_scale = sum G * F, dL/dF = ff_scale G (into fd)
        let mut dfs = 0.0f64;
        for (gr, fr) in gd.chunks_exact(d).zip(st.gff.chunks_exact(d)) {
            dfs += gr.iter().zip(fr).map(|(a, b)| a * b).sum::<f32>() as f64;
        }
        grads[ix.ff_scale][0] += dfs as f32;
        fd.iter_mut().zip(gd.iter()).for_each(|(f, g)| *f = ff_scale * g);

        // ---- attention: A = -(alpha C) Wq, C_h = P_h k_h, P_h = softmax(beta q_h k_h^T) ----
        let gdv = View::rm(gd, r, d);
        // dWq += -(alpha C)^T G
        scale_heads(&st.c, alpha, dh, tmp_hd);
        mm(&mut grads[ix.wq], View::rm(tmp_hd, r, hd).t(), gdv, true, -1.0);
        // d(alpha C) = -G Wq^T (into tmp_hd); dalpha_h = sum d(alpha C)_h * C_h; dC = alpha d(alpha C)
        mm(tmp_hd, gdv, View::rm(&pt[ix.wq], d, hd), false, -1.0);
        let dal = &mut grads[ix.alpha];
        for (dr, cr) in tmp_hd.chunks_exact_mut(hd).zip(st.c.chunks_exact(hd)) {
            for hh in 0..h {
                let mut acc = 0.0f32;
                for j in hh * dh..(hh + 1) * dh {
                    acc += dr[j] * cr[j];
                    dr[j] *= alpha[hh];
                }
                dal[hh] += acc;
            }
        }
        if cfg.attn_diag {
            // self term -(alpha p_AA q) Wk (dq is scratch until the head loop writes it):
            // dWk += -(alpha p_AA q)^T G; e := d(alpha p_AA q) = -G Wk^T (into dv)
            self_term(&st.q, &st.p, attn_drop, alpha, nb, n, dh, dq);
            mm(&mut grads[ix.wk], View::rm(dq, r, hd).t(), gdv, true, -1.0);
            mm(dv, gdv, View::rm(&pt[ix.wk], d, hd), false, -1.0);
        }
        for b in 0..nb {
            for hh in 0..h {
                let off = b * n * hd + hh * dh;
                let pb = &st.p[(b * h + hh) * n * n..(b * h + hh + 1) * n * n];
                let (qv, kv) = (View::strided(&st.q[off..], n, dh, hd), View::strided(&st.k[off..], n, dh, hd));
                let dcv = View::strided(&tmp_hd[off..], n, dh, hd);
                let at = (b * h + hh) * n * n;
                let mb = attn_drop.map(|mk| &mk[at..at + n * n]);
                // dk = P'^T dC (P' = P * drop: what C was made of; nn is scratch until dP)
                let used = dropped_probs(pb, attn_drop, at, nn);
                mm_ld(&mut dk[off..], hd, View::rm(used, n, n).t(), dcv, false, 1.0);
                if faulty(fault, Fault::NoSoftmaxPath) {
                    nn.fill(0.0);
                } else {
                    // dP = dC k^T
                    mm(nn, dcv, kv.t(), false, 1.0);
                }
                if cfg.attn_diag {
                    // the self term alpha_h p_AA q_A: with eq = e_A . q_A over the head,
                    // dP_AA += alpha_h eq, dalpha_h += p_AA eq
                    for i in 0..n {
                        let row = (b * n + i) * hd + hh * dh;
                        let eq: f32 = (0..dh).map(|j| dv[row + j] * st.q[row + j]).sum();
                        nn[i * n + i] += alpha[hh] * eq;
                        grads[ix.alpha][hh] += pb[i * n + i] * mb.map_or(1.0, |m| m[i * n + i]) * eq;
                    }
                }
                if let Some(mk) = mb {
                    // dP = dP' * drop
                    nn.iter_mut().zip(mk).for_each(|(g, m)| *g *= m);
                }
                // dS = beta P * (dP - sum_j P dP), softmax VJP (zero where masked and in row 0)
                softmax_vjp(pb, nn, n, beta);
                // S = q k^T (beta folded above): dq = dS k, dk += dS^T q
                let dsv = View::rm(nn, n, n);
                mm_ld(&mut dq[off..], hd, dsv, kv, false, 1.0);
                mm_ld(&mut dk[off..], hd, dsv.t(), qv, true, 1.0);
                if cfg.attn_diag && !faulty(fault, Fault::NoSelfQuery) {
                    // and dq_A += alpha_h p_AA e_A
                    for i in 0..n {
                        let (row, paa) = ((b * n + i) * hd + hh * dh, pb[i * n + i] * mb.map_or(1.0, |m| m[i * n + i]));
                        (0..dh).for_each(|j| dq[row + j] += alpha[hh] * paa * dv[row + j]);
                    }
                }
            }
        }
        let gv = View::rm(&st.g, r, d);
        // q = g Wq^T, k = g Wk^T: dg = dq Wq + dk Wk, dWq += dq^T g, dWk += dk^T g
        mm(dg, View::rm(dq, r, hd), View::rm(wq, hd, d), false, 1.0);
        mm(dg, View::rm(dk, r, hd), View::rm(wk, hd, d), true, 1.0);
        mm(&mut grads[ix.wq], View::rm(dq, r, hd).t(), gv, true, 1.0);
        mm(&mut grads[ix.wk], View::rm(dk, r, hd).t(), gv, true, 1.0);

        // ---- feed-forward, with F' := dL/d(dE_FF/dg) in fd ----
        let fdv = View::rm(fd, r, d);
        let no2 = faulty(fault, Fault::NoSecondOrder);
        match cfg.arch {
            Arch::NrgptFf2w => {
                let (w2, b2) = (ix.w2.unwrap(), ix.b2.unwrap());
                let [fs, fds, fdds, fv, fz] = &st.f;
                // dE_FF/dg = -(W2 s + b2) - W1^T z, z = s' * v, v = W2^T g, u = W1 g + b1
                // ta = F' W2 (= -dL/ds), tb = F' W1^T (= -dL/dz)
                mm(ta, fdv, View::rm(&p[w2], d, m), false, 1.0);
                mm(tb, fdv, View::rm(&pt[ix.w1], d, m), false, 1.0);
                // dL/dv = -tb s'  (into tb);  dL/du = -(ta s' + tb v s'')  (into ta)
                ff2w_act_bwd(ta, tb, fds, fdds, fv, !no2);
                let (tav, tbv) = (View::rm(ta, r, m), View::rm(tb, r, m));
                // dg += dL/dv W2^T + dL/du W1
                mm(dg, tbv, View::rm(&pt[w2], m, d), true, 1.0);
                mm(dg, tav, View::rm(w1, m, d), true, 1.0);
                // dW2 += -F'^T s + g^T dL/dv ; db2 += -sum F'
                mm(&mut grads[w2], fdv.t(), View::rm(fs, r, m), true, -1.0);
                mm(&mut grads[w2], gv.t(), tbv, true, 1.0);
                col_sum_into(fd, d, &mut grads[b2], -1.0);
                // dW1 += -z^T F' + dL/du^T g ; db1 += sum dL/du
                mm(&mut grads[ix.w1], View::rm(fz, r, m).t(), fdv, true, -1.0);
                mm(&mut grads[ix.w1], tav.t(), gv, true, 1.0);
                col_sum_into(ta, m, &mut grads[ix.b1], 1.0);
            }
            Arch::NrgptFf1 => {
                let [fw, fh, ..] = &st.f;
                // dE_FF/dg = -2 W^T w, w = s s': dL/dw = -2 F' W^T, dW += -2 w^T F'
                mm(ta, fdv, View::rm(&pt[ix.w1], d, m), false, -2.0);
                mm(&mut grads[ix.w1], View::rm(fw, r, m).t(), fdv, true, -2.0);
                // dL/du = dL/dw (s'^2 + s s'')
                ta.iter_mut().zip(fh.iter()).for_each(|(a, hc)| *a *= hc);
                let tav = View::rm(ta, r, m);
                // u = W g + b: dg += dL/du W, dW += dL/du^T g, db += sum dL/du
                mm(dg, tav, View::rm(w1, m, d), true, 1.0);
                mm(&mut grads[ix.w1], tav.t(), gv, true, 1.0);
                col_sum_into(ta, m, &mut grads[ix.b1], 1.0);
            }
            _ => unreachable!("fast backend runs NRGPT only"),
        }
        // g = N(x): dx(t) = D + J_N^T dg, dgamma += dg * xh
        if let Some(bi) = ix.norm_bias {
            // the bare norm, g = xh + bias: dbias += sum over rows of dL/dg
            col_sum_into(dg, d, &mut grads[bi], 1.0);
        }
        let dgain = match ix.gamma {
            Some(i) => &mut grads[i][..],
            None => &mut gain_sink[..],
        };
        norm_bwd(cfg.norm, dg, &st.xh, &st.rstd, gamma, d, dx, dgain);
    }

    embed_bwd(lay, ids, n, d, masks.map(|mk| mk[0]), dx, grads);
}
