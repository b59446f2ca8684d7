// Bindings of the fused descent kernel (its helpers: reduce.wgsl).
// The constants (sizes, offsets, flags) are generated per checkpoint by
// crates/engine/src/gpu_decoder.rs and prepended to this file.

// One token per dispatch.
struct Job {
    // the token's position
    start: u32,
    // its index in `tokens`
    first: u32,
    // early-exit tolerance on |E(t) - E(t-1)|; 0 disables it
    tol: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> job: Job;
// every matrix, packed (f32 bits, or int8/int4 codes), see weights_*.wgsl
@group(0) @binding(1) var<storage, read> words: array<u32>;
// block scales, vectors (gamma, biases, alpha, ...) and the projection plane
@group(0) @binding(2) var<storage, read> fvec: array<f32>;
// k_B(t) = Wk g_B(t) for every level t and position B: [LEVELS][BLOCK][HD]
@group(0) @binding(3) var<storage, read_write> kcache: array<f32>;
// the state x, scratch vectors and the trace read back after each dispatch
@group(0) @binding(4) var<storage, read_write> io: array<f32>;
@group(0) @binding(5) var<storage, read> tokens: array<u32>;
