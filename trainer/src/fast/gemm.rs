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
