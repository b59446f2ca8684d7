// Feed-forward (Dense Associative Memory) energy at g and its gradient into
// `gff`. FF2W: E = -g.(W2 s(u) + b2), dE/dg = -(W2 s(u) + b2) - W1^T (s'(u) * W2^T g).
// FF1:  E = -|s(u)|^2, dE/dg = -2 W1^T (s(u) s'(u)); u = W1 g + b1.
fn ff_energy(tid: u32) -> f32 {
    // u = W1 g + b1, one thread per hidden unit
    for (var i = tid; i < M; i += WG) {
        var u = fvec[F_B1 + i];
        for (var j = 0u; j < D; j++) {
            u += w_at(W_1 + i * D + j) * g[j];
        }
        let sd = act(u);
        io[IO_SIG + i] = sd.x;
        io[IO_DSIG + i] = sd.y;
    }
    sync();
    var part = 0.0;
    if (FF2W) {
        // inner = s'(u) * (W2^T g), W2 is D x M
        for (var i = tid; i < M; i += WG) {
            var w2g = 0.0;
            for (var j = 0u; j < D; j++) {
                w2g += w_at(W_2 + j * M + i) * g[j];
            }
            io[IO_INNER + i] = io[IO_DSIG + i] * w2g;
        }
        sync();
        for (var j = tid; j < D; j += WG) {
            var out = fvec[F_B2 + j];
            for (var i = 0u; i < M; i++) {
                out += w_at(W_2 + j * M + i) * io[IO_SIG + i];
            }
            var back = 0.0;
            for (var i = 0u; i < M; i++) {
                back += w_at(W_1 + i * D + j) * io[IO_INNER + i];
            }
            gff[j] = -(out + back);
            part -= g[j] * out;
        }
    } else {
        for (var i = tid; i < M; i += WG) {
            let s = io[IO_SIG + i];
            io[IO_INNER + i] = s * io[IO_DSIG + i];
            part -= s * s;
        }
        sync();
        for (var j = tid; j < D; j += WG) {
            var back = 0.0;
            for (var i = 0u; i < M; i++) {
                back += w_at(W_1 + i * D + j) * io[IO_INNER + i];
            }
            gff[j] = -2.0 * back;
        }
    }
    let e = wg_sum(tid, part);
    return e;
}
