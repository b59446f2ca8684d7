//! Thin wrapper over the `gemm` crate (the kernel candle's CPU matmul uses):
//! row-major f32 matrices, optional transposes, overwrite or accumulate.
//! Single-threaded: the fast backend parallelises over sequence chunks instead,
//! so no two thread pools fight over the cores.

use gemm::Parallelism;

/// A read-only matrix view: `rows x cols`, element (i, j) at `i*rs + j*cs`.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// A contiguous row-major `rows x cols` matrix.
    pub fn rm(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, rs: cols, cs: 1 }
    }
    /// A `rows x cols` block of a row-major matrix with row stride `ld`.
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        Self { data, rows, cols, rs: ld, cs: 1 }
    }
    /// The transpose (no copy: swaps the strides).
    pub fn t(self) -> Self {
        Self { data: self.data, rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs }
    }
    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            assert!((self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len(), "gemm view out of bounds");
        }
    }
}

/// Our AVX-512 kernel when the CPU has it (NRGPT_NO_AVX512 set: never).
#[cfg(target_arch = "x86_64")]
fn use_avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::kernel512::available() && std::env::var_os("NRGPT_NO_AVX512").is_none())
}

/// `dst (a.rows x b.cols, row stride ld) = [dst +] scale * a @ b`.
pub fn mm_ld(dst: &mut [f32], ld: usize, a: View, b: View, accumulate: bool, scale: f32) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "gemm inner dimensions differ");
    a.check();
    b.check();
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ld + n <= dst.len(), "gemm destination out of bounds");
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|i| dst[i * ld..i * ld + n].fill(0.0));
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512F detected; bounds checked above; `dst` is borrowed
        // mutably, so it cannot alias `a` or `b`.
        unsafe { super::kernel512::gemm(dst.as_mut_ptr(), ld, a, b, accumulate, scale) };
        return;
    }
    // SAFETY: every index the kernel touches lies inside the slices (checked above);
    // `dst` is borrowed mutably, so it cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// Contiguous destination: `dst (m x n) = [dst +] scale * a @ b`.
pub fn mm(dst: &mut [f32], a: View, b: View, accumulate: bool, scale: f32) {
    let n = b.cols;
    mm_ld(dst, n, a, b, accumulate, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transpose combination and awkward sizes (edge tiles, several
    /// K and M blocks) against a naive f64 product.
    #[test]
    fn matches_naive_product() {
        let mut seed = 1u64;
        let mut rnd = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for &(m, k, n) in &[(1, 1, 1), (13, 7, 33), (64, 32, 64), (130, 300, 45), (200, 520, 600), (12, 256, 32)] {
            let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect(); // (k, m) row-major
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect(); // (n, k) row-major
            let want: Vec<f64> = (0..m * n)
                .map(|ij| (0..k).map(|p| a[(ij / n) * k + p] as f64 * b[p * n + ij % n] as f64).sum::<f64>())
                .collect();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let av = if ta { View::rm(&at, k, m).t() } else { View::rm(&a, m, k) };
                let bv = if tb { View::rm(&bt, n, k).t() } else { View::rm(&b, k, n) };
                let mut c = vec![1.0f32; m * n];
                mm(&mut c, av, bv, true, 2.0);
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    assert!((got as f64 - (1.0 + 2.0 * w)).abs() < 1e-4 * (1.0 + w.abs() * k as f64), "{m}x{k}x{n} {ta} {tb} at {i}: {got} vs {}", 1.0 + 2.0 * w);
                }
                mm(&mut c, av, bv, false, 1.0);
                for (&got, &w) in c.iter().zip(&want) {
                    assert!((got as f64 - w).abs() < 1e-4 * (1.0 + w.abs() * k as f64));
                }
            }
        }
    }
}
