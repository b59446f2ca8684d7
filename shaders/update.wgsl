// x <- x - eta * dE/dg with dE/dg = -Wq^T ctx (- Wk^T own with DIAG) + ff_scale * gff; eta is
// c * diag(gamma) (stable) or a learned D x D matrix (free).
fn update_x(tid: u32) {
    let ffs = fvec[F_FFSCALE];
    for (var j = tid; j < D; j += WG) {
        var at = 0.0;
        for (var i = 0u; i < HD; i++) {
            at += w_at(W_Q + i * D + j) * ctx[i];
        }
        if (DIAG) {
            for (var i = 0u; i < HD; i++) {
                at += w_at(W_K + i * D + j) * own[i];
            }
        }
        gradv[j] = -at + ffs * gff[j];
    }
    workgroupBarrier();
    if (FREE_ETA) {
        for (var i = tid; i < D; i += WG) {
            var u = 0.0;
            for (var j = 0u; j < D; j++) {
                u += w_at(W_ETA + i * D + j) * gradv[j];
            }
            io[IO_X + i] -= u;
        }
    } else {
        let c = exp(fvec[F_LOGC]);
        for (var j = tid; j < D; j += WG) {
            io[IO_X + j] -= c * fvec[F_GAMMA + j] * gradv[j];
        }
    }
    sync();
}
