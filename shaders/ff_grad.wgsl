// Feed-forward (Dense Associative Memory) energy at g and its gradient into
// `gff`. FF2W: E = -g.(W2 s(u) + b2), dE/dg = -(W2 s(u) + b2) - W1^T (s'(u) * W2^T g).
// FF1:  E = -|s(u)|^2, dE/dg = -2 W1^T (s(u) s'(u)); u = W1 g + b1.
fn act(u: f32) -> vec2<f32> {
    if (GELU) {
        // GELU(u) = u Phi(u), GELU'(u) = Phi(u) + u phi(u)
        let cdf = 0.5 * (1.0 + erf_approx(u * 0.70710678118654752));
        let pdf = exp(-0.5 * u * u) * 0.3989422804014327;
        return vec2<f32>(u * cdf, cdf + u * pdf);
    }
    if (u > 0.0) {
        return vec2<f32>(u, 1.0);
    }
    return vec2<f32>(0.0, 0.0);
}

// erf, |error| < 1.5e-7 (Abramowitz & Stegun 7.1.26): WGSL has no erf. The WGSL copy
// of nrgpt_core::scalar::{erf_with_exp, act3}; tests/engine.rs holds them together.
fn erf_approx(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.0614054 * t - 1.4531521) * t) + 1.4214137) * t - 0.28449674) * t + 0.2548296) * t * exp(-x * x);
    return select(-y, y, x >= 0.0);
}

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
