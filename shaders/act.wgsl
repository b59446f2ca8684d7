// The activation s(u) and s'(u), shared by the NRGPT and EBT kernels.
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
