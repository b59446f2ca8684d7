// The fused descent kernel: one workgroup descends a new token through all
// T recursion steps in one dispatch (a prompt is one dispatch per token, all
// in one submission: lavapipe caps an invocation at 65535 loop iterations in
// total, which a whole prompt in one invocation exceeds), reading the
// earlier tokens' cached keys. Per level t it writes E(t), the step logits and
// the projected state; it stores k(t) for later tokens.

var<workgroup> g: array<f32, D>;
var<workgroup> gout: array<f32, D>;
var<workgroup> gradv: array<f32, D>;
var<workgroup> gff: array<f32, D>;
var<workgroup> q: array<f32, HD>;
var<workgroup> ctx: array<f32, HD>;
// alpha_h p_AA q_h: the self term of a mask with the diagonal (zero without)
var<workgroup> own: array<f32, HD>;
var<workgroup> energy_now: f32;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) tid: u32) {
    let a = job.start;
    let tok = tokens[job.first];
    // x(0) = token embedding + position embedding
    for (var j = tid; j < D; j += WG) {
        io[IO_X + j] = w_at(W_TOK + tok * D + j) + w_at(W_POS + a * D + j);
    }
    sync();
    var prev = 0.0;
    // `done` rather than `break` keeps every barrier in plain uniform control flow
    var done = false;
    for (var t = 0u; t < LEVELS; t++) {
        if (done) {
            continue;
        }
        norm_into(tid, IO_X, F_GAMMA, false);
        if (NORM_BIAS) {
            // the bare block norm: g = xh + bias
            for (var j = tid; j < D; j += WG) {
                g[j] += fvec[F_NBIAS + j];
            }
            workgroupBarrier();
        }
        // q = Wq g; k = Wk g goes to the cache
        for (var i = tid; i < HD; i += WG) {
            var sq = 0.0;
            var sk = 0.0;
            for (var j = 0u; j < D; j++) {
                sq += w_at(W_Q + i * D + j) * g[j];
                sk += w_at(W_K + i * D + j) * g[j];
            }
            q[i] = sq;
            kcache[(t * BLOCK + a) * HD + i] = sk;
        }
        sync();
        let e_at = attn_energy(tid, a, t);
        let e_ff = ff_energy(tid);
        readout(tid, t);
        if (tid == 0u) {
            energy_now = e_at + fvec[F_FFSCALE] * e_ff;
            io[IO_E + t] = energy_now;
        }
        let e = workgroupUniformLoad(&energy_now);
        let settled = job.tol > 0.0 && t > 0u && abs(e - prev) < job.tol;
        if (t + 1u == LEVELS || settled) {
            // later levels read this settled state's keys
            for (var t2 = t + 1u; t2 < LEVELS; t2++) {
                for (var i = tid; i < HD; i += WG) {
                    kcache[(t2 * BLOCK + a) * HD + i] = kcache[(t * BLOCK + a) * HD + i];
                }
            }
            if (tid == 0u) {
                io[IO_STEPS] = f32(t);
            }
            sync();
            done = true;
        } else {
            prev = e;
            update_x(tid);
        }
    }
}
