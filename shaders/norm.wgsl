// The WGSL copy of nrgpt_core::scalar::norm_row (crates/core/src/scalar.rs).
// g = gamma * (x - mean) / s (LayerNorm) or gamma * x / r (RMSNorm), from
// io[src..src+D] into the workgroup vector `g` (to_out = false) or `gout`.
// (WGSL cannot pass workgroup pointers to functions, hence the flag.)
fn norm_into(tid: u32, src: u32, gamma: u32, to_out: bool) {
    var part = 0.0;
    for (var j = tid; j < D; j += WG) {
        part += io[src + j];
    }
    var mean = 0.0;
    if (LAYER_NORM) {
        mean = wg_sum(tid, part) / f32(D);
    }
    part = 0.0;
    for (var j = tid; j < D; j += WG) {
        let c = io[src + j] - mean;
        part += c * c;
    }
    let s = sqrt(wg_sum(tid, part) / f32(D) + EPS);
    for (var j = tid; j < D; j += WG) {
        let v = fvec[gamma + j] * (io[src + j] - mean) / s;
        if (to_out) {
            gout[j] = v;
        } else {
            g[j] = v;
        }
    }
    workgroupBarrier();
}
