// Matrix element i: byte (i % 4) of word i/4, two's complement, times the
// scale of its block of 32 (WGSL has no 8-bit storage type).
fn w_at(i: u32) -> f32 {
    let byte = (words[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
    let q = i32(byte << 24u) >> 24u;
    return f32(q) * fvec[F_SCALES + (i >> 5u)];
}
