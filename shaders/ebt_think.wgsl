// The thinking kernel: workgroup c takes candidate c's step s (one dispatch
// per step, all steps in one submission: lavapipe caps an invocation at
// 65535 loop iterations, which a whole thought in one invocation exceeds).
// Before a step it adds the step's Langevin noise to z_s in place (the
// candidate's region after its verdict; zeros when off), so the recorded z_s
// is the point evaluated, as in think_candidate. It evaluates E(z_s) on the prediction stream, applies the shared rule of
// nrgpt_core::ebt_session::think_candidate (stop on a non-finite E; with
// accept-only-lower refuse a rise beyond RISE_TOL relative; stop at S or
// once |E(s) - E(s-1)| < tol) and otherwise writes z_{s+1} = z_s - a dE/dz,
// or with PROBS z_{s+1} = y_s - a dE/dy (nrgpt_core::EbtUpdate::step_row).
// A candidate that stopped skips the later steps.

var<workgroup> flag: u32;

// True when x is NaN or infinite (WGSL has no isnan): all exponent bits set.
fn non_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
}

@compute @workgroup_size(WG)
fn think(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    sb = wid.x * SCR_LEN;
    let cb = wid.x * job.cand_len;
    let s = job.step;
    let a = job.pos;
    let levels = job.steps + 1u;
    let zs = cb + s * V;
    let eb = cb + levels * V;
    let verdict = eb + levels;
    if (tid == 0u) {
        flag = u32(cand[verdict] > 0.5);
    }
    if (workgroupUniformLoad(&flag) != 0u) {
        return;
    }
    if (s < job.steps) {
        let nb = verdict + VERDICT + s * V;
        for (var v = tid; v < V; v += WG) {
            cand[zs + v] += cand[nb + v];
        }
    }
    // y = softmax(z)
    var m = -3.0e38;
    for (var v = tid; v < V; v += WG) {
        m = max(m, cand[zs + v]);
    }
    m = wg_max(tid, m);
    var part = 0.0;
    for (var v = tid; v < V; v += WG) {
        part += exp(cand[zs + v] - m);
    }
    let zsum = wg_sum(tid, part);
    for (var v = tid; v < V; v += WG) {
        scr[sb + S_Y + v] = exp(cand[zs + v] - m) / zsum;
    }
    sync();
    // e = y^T Emb (or W_in) + pos_A
    for (var j = tid; j < D; j += WG) {
        var p = w_at(W_POS + a * D + j);
        for (var v = 0u; v < V; v++) {
            p += scr[sb + S_Y + v] * w_at(W_IN + v * D + j);
        }
        scr[sb + S_P + j] = p;
    }
    sync();
    for (var l = 0u; l < L; l++) {
        layer_fwd(tid, l, a, true);
    }
    norm_fwd(tid, sb + S_P, F_OUTGAMMA, sb + S_NO_XH, sb + S_NO_RS, sb + S_NO_G);
    // E = w_E . N_out(p) + b_E
    part = 0.0;
    for (var j = tid; j < D; j += WG) {
        part += w_at(W_HEAD + j) * scr[sb + S_NO_G + j];
    }
    let e = wg_sum(tid, part) + fvec[F_HEADB];
    if (tid == 0u) {
        var stop = false;
        var keep = true;
        let prev = cand[eb + max(s, 1u) - 1u];
        if (non_finite(e)) {
            cand[eb + s] = e;
            cand[verdict + 2u] = 1.0;
            stop = true;
            keep = false;
        } else if (job.accept_lower != 0u && s > 0u && e > prev + RISE_TOL * max(abs(prev), 1.0)) {
            stop = true;
            keep = false;
        }
        if (keep) {
            cand[eb + s] = e;
            cand[verdict + 1u] = f32(s + 1u);
            stop = s == job.steps || (s > 0u && abs(e - prev) < job.tol);
        }
        if (stop) {
            cand[verdict] = 1.0;
        }
        flag = u32(stop);
    }
    if (workgroupUniformLoad(&flag) != 0u) {
        return;
    }
    // delta = dE/dP through the output norm, then back through the layers
    for (var j = tid; j < D; j += WG) {
        scr[sb + S_TMP + j] = w_at(W_HEAD + j);
        scr[sb + S_DELTA + j] = 0.0;
    }
    sync();
    norm_vjp(tid, sb + S_NO_XH, sb + S_NO_RS, F_OUTGAMMA, sb + S_TMP, sb + S_DELTA);
    for (var k = 0u; k < L; k++) {
        layer_bwd(tid, L - 1u - k, a);
    }
    // dE/dy = Emb dE/de; dE/dz = (diag(y) - y y^T) dE/dy
    part = 0.0;
    for (var v = tid; v < V; v += WG) {
        var gv = 0.0;
        for (var j = 0u; j < D; j++) {
            gv += w_at(W_IN + v * D + j) * scr[sb + S_DELTA + j];
        }
        scr[sb + S_G + v] = gv;
        part += scr[sb + S_Y + v] * gv;
    }
    let yg = wg_sum(tid, part);
    // z <- z - a dE/dz, or z <- y - a dE/dy, the gradient clamped to
    // ±CLAMP / a when CLAMP > 0 (ModelConfig::ebt_grad_bound)
    let rate = fvec[F_A];
    let bound = select(3.4e38, CLAMP / rate, CLAMP > 0.0);
    for (var v = tid; v < V; v += WG) {
        let y = scr[sb + S_Y + v];
        if (PROBS) {
            cand[zs + V + v] = y - rate * clamp(scr[sb + S_G + v], -bound, bound);
        } else {
            cand[zs + V + v] = cand[zs + v] - rate * clamp(y * (scr[sb + S_G + v] - yg), -bound, bound);
        }
    }
}
