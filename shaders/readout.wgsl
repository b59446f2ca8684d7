// Step-t outputs for the page: logits = W_out N_out(x) + b, and x projected
// on the checkpoint's fixed plane.
fn readout(tid: u32, t: u32) {
    norm_into(tid, IO_X, F_OUTGAMMA, true);
    for (var v = tid; v < V; v += WG) {
        var l = fvec[F_HEADB + v];
        for (var j = 0u; j < D; j++) {
            l += w_at(W_HEAD + v * D + j) * gout[j];
        }
        io[IO_SL + t * V + v] = l;
    }
    var p0 = 0.0;
    var p1 = 0.0;
    for (var j = tid; j < D; j += WG) {
        p0 += fvec[F_DIR0 + j] * io[IO_X + j];
        p1 += fvec[F_DIR1 + j] * io[IO_X + j];
    }
    p0 = wg_sum(tid, p0);
    p1 = wg_sum(tid, p1);
    if (tid == 0u) {
        io[IO_PROJ + 2u * t] = p0;
        io[IO_PROJ + 2u * t + 1u] = p1;
    }
}
