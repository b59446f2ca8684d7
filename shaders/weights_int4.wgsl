// Matrix element i: nibble (i % 8) of word i/8, two's complement, times the
// scale of its block of 32.
fn w_at(i: u32) -> f32 {
    let nib = (words[i >> 3u] >> ((i & 7u) * 4u)) & 0xfu;
    let q = i32(nib << 28u) >> 28u;
    return f32(q) * fvec[F_SCALES + (i >> 5u)];
}
