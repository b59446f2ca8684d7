// Matrix element i (global element index) stored as raw f32 bits.
fn w_at(i: u32) -> f32 {
    return bitcast<f32>(words[i]);
}
