// One pre-norm layer forward on the stream row P, shared by the real stream
// (append) and the prediction stream (think):
// P <- P + Wo attn(N1(P)); P <- P + W2 s(W1 N2(P) + b1) + b2.
// The real stream attends the cached keys B <= A (its own key is cached
// first); the prediction attends them plus its own key (index A + 1), kept
// in the layer's scratch. Every activation the backward reads is kept there.

// Key (value: +QD) coordinate i of attention index b: the cache for b <= a, else the layer's own.
fn key_at(l: u32, lo: u32, a: u32, b: u32, i: u32) -> f32 {
    if (b <= a) {
        return kv[kv_at(l, b) + i];
    }
    return scr[lo + L_KS + i];
}

fn value_at(l: u32, lo: u32, a: u32, b: u32, i: u32) -> f32 {
    if (b <= a) {
        return kv[kv_at(l, b) + QD + i];
    }
    return scr[lo + L_VS + i];
}

// The scratch base of layer l's kept activations.
fn layer_base(l: u32) -> u32 {
    return sb + S_LAYERS + l * S_LAYER;
}

fn layer_fwd(tid: u32, l: u32, a: u32, predict: bool) {
    let lo = layer_base(l);
    let fo = l * F_LAYER;
    let wo = l * W_LAYER;
    norm_fwd(tid, sb + S_P, F_LN1 + fo, lo + L_N1_XH, lo + L_N1_RS, lo + L_N1_G);
    // q, k, v = Wq g, Wk g, Wv g, one thread per coordinate
    for (var i = tid; i < QD; i += WG) {
        var sq = 0.0;
        var sk = 0.0;
        var sv = 0.0;
        for (var j = 0u; j < D; j++) {
            let gj = scr[lo + L_N1_G + j];
            sq += w_at(W_Q + wo + i * D + j) * gj;
            sk += w_at(W_K + wo + i * D + j) * gj;
            sv += w_at(W_V + wo + i * D + j) * gj;
        }
        scr[lo + L_Q + i] = sq;
        if (predict) {
            scr[lo + L_KS + i] = sk;
            scr[lo + L_VS + i] = sv;
        } else {
            kv[kv_at(l, a) + i] = sk;
            kv[kv_at(l, a) + QD + i] = sv;
        }
    }
    sync();
    let nk = a + 1u + select(0u, 1u, predict);
    // scores s_hb = q_h . k_b / sqrt(dh), one thread per (head, key)
    for (var i = tid; i < H * nk; i += WG) {
        let h = i / nk;
        let b = i % nk;
        var s = 0.0;
        for (var t = 0u; t < DH; t++) {
            s += scr[lo + L_Q + h * DH + t] * key_at(l, lo, a, b, h * DH + t);
        }
        scr[lo + L_PR + h * PR_ROW + b] = SCALE * s;
    }
    sync();
    // softmax per head, in the CPU decoder's order
    for (var h = tid; h < H; h += WG) {
        let r = lo + L_PR + h * PR_ROW;
        var m = -3.0e38;
        for (var b = 0u; b < nk; b++) {
            m = max(m, scr[r + b]);
        }
        var z = 0.0;
        for (var b = 0u; b < nk; b++) {
            let e = exp(scr[r + b] - m);
            scr[r + b] = e;
            z += e;
        }
        for (var b = 0u; b < nk; b++) {
            scr[r + b] = scr[r + b] / z;
        }
    }
    sync();
    // att_h = sum_b p_hb v_b
    for (var i = tid; i < QD; i += WG) {
        let r = lo + L_PR + (i / DH) * PR_ROW;
        var o = 0.0;
        for (var b = 0u; b < nk; b++) {
            o += scr[r + b] * value_at(l, lo, a, b, i);
        }
        scr[sb + S_ATT + i] = o;
    }
    sync();
    for (var j = tid; j < D; j += WG) {
        var o = 0.0;
        for (var i = 0u; i < QD; i++) {
            o += w_at(W_O + wo + j * QD + i) * scr[sb + S_ATT + i];
        }
        scr[sb + S_P + j] += o;
    }
    sync();
    norm_fwd(tid, sb + S_P, F_LN2 + fo, lo + L_N2_XH, lo + L_N2_RS, lo + L_N2_G);
    // s = act(W1 g2 + b1), s' kept for the backward
    for (var i = tid; i < M; i += WG) {
        var u = fvec[F_B1 + fo + i];
        for (var j = 0u; j < D; j++) {
            u += w_at(W_1 + wo + i * D + j) * scr[lo + L_N2_G + j];
        }
        let sd = act(u);
        scr[sb + S_SV + i] = sd.x;
        scr[lo + L_DS + i] = sd.y;
    }
    sync();
    for (var j = tid; j < D; j += WG) {
        var o = fvec[F_B2 + fo + j];
        for (var i = 0u; i < M; i++) {
            o += w_at(W_2 + wo + j * M + i) * scr[sb + S_SV + i];
        }
        scr[sb + S_P + j] += o;
    }
    sync();
}
