// The prediction stream's backward through one layer: DELTA = dE/dP after
// the layer becomes dE/dP before it, from the activations layer_fwd kept.
// The twin of the loop in EbtDecoder::energy_grad (crates/engine/src/ebt_decoder.rs).

fn layer_bwd(tid: u32, l: u32, a: u32) {
    let lo = layer_base(l);
    let fo = l * F_LAYER;
    let wo = l * W_LAYER;
    // MLP branch: dh1 = s'(u) * W2^T delta
    for (var i = tid; i < M; i += WG) {
        var o = 0.0;
        for (var j = 0u; j < D; j++) {
            o += w_at(W_2 + wo + j * M + i) * scr[sb + S_DELTA + j];
        }
        scr[sb + S_DH1 + i] = o * scr[lo + L_DS + i];
    }
    sync();
    // d1 = delta + N2^T(W1^T dh1)
    for (var j = tid; j < D; j += WG) {
        var o = 0.0;
        for (var i = 0u; i < M; i++) {
            o += w_at(W_1 + wo + i * D + j) * scr[sb + S_DH1 + i];
        }
        scr[sb + S_TMP + j] = o;
        scr[sb + S_D1 + j] = scr[sb + S_DELTA + j];
    }
    sync();
    norm_vjp(tid, lo + L_N2_XH, lo + L_N2_RS, F_LN2 + fo, sb + S_TMP, sb + S_D1);
    // attention branch: da = Wo^T d1
    for (var i = tid; i < QD; i += WG) {
        var o = 0.0;
        for (var j = 0u; j < D; j++) {
            o += w_at(W_O + wo + j * QD + i) * scr[sb + S_D1 + j];
        }
        scr[sb + S_DA + i] = o;
    }
    sync();
    let nk = a + 2u;
    // dp_hb = da_h . v_b
    for (var i = tid; i < H * nk; i += WG) {
        let h = i / nk;
        let b = i % nk;
        var o = 0.0;
        for (var t = 0u; t < DH; t++) {
            o += scr[sb + S_DA + h * DH + t] * value_at(l, lo, a, b, h * DH + t);
        }
        scr[sb + S_DSB + h * PR_ROW + b] = o;
    }
    sync();
    // softmax VJP over the real keys and the self key together: ds = p (dp - p.dp) / sqrt(dh)
    for (var h = tid; h < H; h += WG) {
        let r = lo + L_PR + h * PR_ROW;
        let r2 = sb + S_DSB + h * PR_ROW;
        var mean = 0.0;
        for (var b = 0u; b < nk; b++) {
            mean += scr[r + b] * scr[r2 + b];
        }
        for (var b = 0u; b < nk; b++) {
            scr[r2 + b] = scr[r + b] * (scr[r2 + b] - mean) * SCALE;
        }
    }
    sync();
    // dq = sum_b ds_b k_b; dk_self = ds_self q; dv_self = p_self da
    for (var i = tid; i < QD; i += WG) {
        let h = i / DH;
        let r2 = sb + S_DSB + h * PR_ROW;
        var dq = 0.0;
        for (var b = 0u; b < nk; b++) {
            dq += scr[r2 + b] * key_at(l, lo, a, b, i);
        }
        scr[sb + S_DQ + i] = dq;
        scr[sb + S_DK + i] = scr[r2 + a + 1u] * scr[lo + L_Q + i];
        scr[sb + S_DV + i] = scr[lo + L_PR + h * PR_ROW + a + 1u] * scr[sb + S_DA + i];
    }
    sync();
    // du = Wq^T dq + Wk^T dk + Wv^T dv
    for (var j = tid; j < D; j += WG) {
        var o = 0.0;
        for (var i = 0u; i < QD; i++) {
            o += w_at(W_Q + wo + i * D + j) * scr[sb + S_DQ + i];
            o += w_at(W_K + wo + i * D + j) * scr[sb + S_DK + i];
            o += w_at(W_V + wo + i * D + j) * scr[sb + S_DV + i];
        }
        scr[sb + S_TMP + j] = o;
    }
    sync();
    norm_vjp(tid, lo + L_N1_XH, lo + L_N1_RS, F_LN1 + fo, sb + S_TMP, sb + S_D1);
    for (var j = tid; j < D; j += WG) {
        scr[sb + S_DELTA + j] = scr[sb + S_D1 + j];
    }
    sync();
}
