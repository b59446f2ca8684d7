// The WGSL copy of nrgpt_core::scalar::norm_row and the EBT decoder's
// norm_vjp (crates/engine/src/ebt_decoder.rs), on rows of `scr`.

// xh = (x - mean) * rs, rs = 1 / sqrt(var + eps), g = gamma * xh (RMSNorm: mean 0).
fn norm_fwd(tid: u32, src: u32, gamma: u32, xh: u32, rs_at: u32, g: u32) {
    var part = 0.0;
    for (var j = tid; j < D; j += WG) {
        part += scr[src + j];
    }
    var mean = 0.0;
    if (LAYER_NORM) {
        mean = wg_sum(tid, part) / f32(D);
    }
    part = 0.0;
    for (var j = tid; j < D; j += WG) {
        let c = scr[src + j] - mean;
        part += c * c;
    }
    let rs = 1.0 / sqrt(wg_sum(tid, part) / f32(D) + EPS);
    for (var j = tid; j < D; j += WG) {
        let x = (scr[src + j] - mean) * rs;
        scr[xh + j] = x;
        scr[g + j] = fvec[gamma + j] * x;
    }
    if (tid == 0u) {
        scr[rs_at] = rs;
    }
    sync();
}

// out += v^T dN/dx = (u - mean u - xh mean(u xh)) * rs with u = gamma v (RMSNorm: no mean u).
fn norm_vjp(tid: u32, xh: u32, rs_at: u32, gamma: u32, v: u32, out: u32) {
    var pu = 0.0;
    var puxh = 0.0;
    for (var j = tid; j < D; j += WG) {
        let u = fvec[gamma + j] * scr[v + j];
        pu += u;
        puxh += u * scr[xh + j];
    }
    let mean_uxh = wg_sum(tid, puxh) / f32(D);
    var mean_u = 0.0;
    if (LAYER_NORM) {
        mean_u = wg_sum(tid, pu) / f32(D);
    }
    let rs = scr[rs_at];
    for (var j = tid; j < D; j += WG) {
        let u = fvec[gamma + j] * scr[v + j];
        scr[out + j] += (u - mean_u - scr[xh + j] * mean_uxh) * rs;
    }
    sync();
}
