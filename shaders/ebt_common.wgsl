// Bindings of the EBT kernels (ebt_append.wgsl, ebt_think.wgsl; helpers:
// reduce.wgsl). The constants (sizes, weight and scratch offsets, flags) are
// generated per checkpoint by crates/engine/src/gpu_ebt_decoder.rs.

// One dispatch: an append of a real token, or one thinking step of every candidate.
struct Job {
    // append: the token's position; think: the last real position A
    pos: u32,
    // append: the token
    token: u32,
    // think: this step s (0 = the start) and the step budget S
    step: u32,
    steps: u32,
    // early exit on |E(s) - E(s-1)| < tol; 0 disables it
    tol: f32,
    // 1: refuse a step that raises E (beyond RISE_TOL relative)
    accept_lower: u32,
    // floats per candidate in `cand`: Z [S+1][V], E [S+1], then DONE, KEPT, BAD
    cand_len: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> job: Job;
// every matrix, packed (f32 bits, or int8/int4 codes), see weights_*.wgsl
@group(0) @binding(1) var<storage, read> words: array<u32>;
// block scales, then the vectors (norm gains, biases, head bias, the step a)
@group(0) @binding(2) var<storage, read> fvec: array<f32>;
// the real tokens' keys and values per layer, written by the append kernel
@group(0) @binding(3) var<storage, read_write> kv: array<f32>;
// per candidate: its z at every step, its energies and its verdict (read back)
@group(0) @binding(4) var<storage, read_write> cand: array<f32>;
// per workgroup: the prediction stream's activations kept for the backward
@group(0) @binding(5) var<storage, read_write> scr: array<f32>;

// This workgroup's scratch base (workgroup c thinks candidate c).
var<private> sb: u32;

// Offset of position b's key in layer l of `kv` ([L][BLOCK][key QD, value QD]); its value is QD further.
fn kv_at(l: u32, b: u32) -> u32 {
    return (l * BLOCK + b) * 2u * QD;
}
