// Attention energy of token a at level t over the cached keys of B < a
// (B <= a when DIAG: the mask includes the diagonal; a's own key is cached
// before this runs):
// E_AT = -sum_h (alpha_h/beta) log sum_B exp(beta k_B . q_h), and
// ctx_h = alpha_h sum_B p_AB k_B, so dE_AT/dg = -Wq^T ctx; with DIAG also
// own_h = alpha_h p_AA q_h, the exact self term -Wk^T own. Returns E_AT.
fn attn_energy(tid: u32, a: u32, t: u32) -> f32 {
    for (var i = tid; i < HD; i += WG) {
        ctx[i] = 0.0;
        own[i] = 0.0;
    }
    let keys = select(a, a + 1u, DIAG);
    if (keys == 0u) {
        workgroupBarrier();
        return 0.0;
    }
    let base = t * BLOCK * HD;
    // scores, one thread per (head, key)
    for (var i = tid; i < H * keys; i += WG) {
        let h = i / keys;
        let b = i % keys;
        var s = 0.0;
        for (var j = 0u; j < DH; j++) {
            s += kcache[base + b * HD + h * DH + j] * q[h * DH + j];
        }
        io[IO_S + h * BLOCK + b] = BETA * s;
    }
    sync();
    var e = 0.0;
    for (var h = 0u; h < H; h++) {
        var m = -3.0e38;
        for (var b = tid; b < keys; b += WG) {
            m = max(m, io[IO_S + h * BLOCK + b]);
        }
        m = wg_max(tid, m);
        var z = 0.0;
        for (var b = tid; b < keys; b += WG) {
            z += exp(io[IO_S + h * BLOCK + b] - m);
        }
        z = wg_sum(tid, z);
        let alpha = fvec[F_ALPHA + h];
        e -= alpha / BETA * (log(z) + m);
        for (var b = tid; b < keys; b += WG) {
            io[IO_S + h * BLOCK + b] = alpha * exp(io[IO_S + h * BLOCK + b] - m) / z;
        }
    }
    sync();
    // ctx (and own), one thread per output coordinate
    for (var i = tid; i < HD; i += WG) {
        let h = i / DH;
        var c = 0.0;
        for (var b = 0u; b < keys; b++) {
            c += io[IO_S + h * BLOCK + b] * kcache[base + b * HD + i];
        }
        ctx[i] = c;
        if (DIAG) {
            // io[IO_S + h * BLOCK + a] holds alpha_h p_AA
            own[i] = io[IO_S + h * BLOCK + a] * q[i];
        }
    }
    workgroupBarrier();
    return e;
}
