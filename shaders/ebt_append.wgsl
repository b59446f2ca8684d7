// The append kernel: one workgroup runs the real stream for the token at
// position A (x = Emb[token] + pos_A through the L layers) and caches each
// layer's key and value for every later character's thinking.

@compute @workgroup_size(WG)
fn append(@builtin(local_invocation_index) tid: u32) {
    sb = 0u;
    let a = job.pos;
    for (var j = tid; j < D; j += WG) {
        scr[S_P + j] = w_at(W_TOK + job.token * D + j) + w_at(W_POS + a * D + j);
    }
    sync();
    for (var l = 0u; l < L; l++) {
        layer_fwd(tid, l, a, false);
    }
}
