//! The matrix view both gemm paths take (`gemm.rs` and `kernel512.rs`); its
//! own module so the kernel does not import from the wrapper that calls it.

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
    /// Panics unless every element lies inside `data`: the kernels read
    /// through raw pointers and rely on it.
    pub(super) fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            assert!((self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len(), "gemm view out of bounds");
        }
    }
}
