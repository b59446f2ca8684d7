//! Thin wrapper over the `gemm` crate (the kernel candle's CPU matmul uses):
//! row-major f32 matrices, optional transposes, overwrite or accumulate.
//! On CPUs with AVX-512F it runs our kernel (`kernel512.rs`) instead, unless
//! NRGPT_NO_AVX512 is set; the tests run both paths (`mm_ld_with`).
//! Single-threaded: the fast backend parallelises over sequence chunks instead,
//! so no two thread pools fight over the cores.

use std::sync::atomic::{AtomicU8, Ordering};

use gemm::Parallelism;

pub use super::view::View;

/// Which implementation multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kernel {
    /// Ours, `kernel512.rs`: the `gemm` crate has no AVX-512 kernels on stable.
    Avx512 = 1,
    GemmCrate = 2,
}

impl Kernel {
    /// Whether this CPU can run it.
    pub fn available(self) -> bool {
        match self {
            Kernel::GemmCrate => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => super::kernel512::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512 => false,
        }
    }

    /// What `mm_ld` uses: AVX-512 when the CPU has it and NRGPT_NO_AVX512 is unset.
    pub fn default_for_cpu() -> Kernel {
        // 0: not decided yet. Cached because the env lookup costs more than a small gemm;
        // a race only computes the same answer twice.
        static CHOSEN: AtomicU8 = AtomicU8::new(0);
        match CHOSEN.load(Ordering::Relaxed) {
            1 => Kernel::Avx512,
            2 => Kernel::GemmCrate,
            _ => {
                let k = if Kernel::Avx512.available() && std::env::var_os("NRGPT_NO_AVX512").is_none() { Kernel::Avx512 } else { Kernel::GemmCrate };
                CHOSEN.store(k as u8, Ordering::Relaxed);
                k
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    /// The kernel the last `mm_ld_with` on this thread ran, so the tests can
    /// tell that the path they asked for is the one they checked.
    static RAN: std::cell::Cell<Option<Kernel>> = const { std::cell::Cell::new(None) };
}

/// `dst (a.rows x b.cols, row stride ld) = [dst +] scale * a @ b`.
pub fn mm_ld(dst: &mut [f32], ld: usize, a: View, b: View, accumulate: bool, scale: f32) {
    mm_ld_with(Kernel::default_for_cpu(), dst, ld, a, b, accumulate, scale)
}

/// `mm_ld` on a chosen kernel (the tests run both). Panics if the CPU cannot run it.
pub(crate) fn mm_ld_with(kernel: Kernel, dst: &mut [f32], ld: usize, a: View, b: View, accumulate: bool, scale: f32) {
    assert!(kernel.available(), "{kernel:?} gemm kernel: this CPU cannot run it");
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
    #[cfg(test)]
    RAN.set(Some(kernel));
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 {
        // SAFETY: AVX-512F asserted available; views and `dst` bounds checked above,
        // k > 0; `dst` is borrowed mutably, so it cannot alias `a` or `b`.
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
    /// K and M blocks) against a naive f64 product, on each kernel this CPU
    /// runs (with AVX-512, both: the default path alone would skip the other).
    #[test]
    fn matches_naive_product() {
        let kernels: Vec<Kernel> = [Kernel::GemmCrate, Kernel::Avx512].into_iter().filter(|k| k.available()).collect();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(kernels.contains(&Kernel::Avx512), std::arch::is_x86_feature_detected!("avx512f"));
        for kernel in kernels {
            check_kernel(kernel);
        }
        let (a, b, mut c) = ([1.0f32, 2.0], [3.0f32, 4.0], [0.0f32]);
        super::mm(&mut c, View::rm(&a, 1, 2), View::rm(&b, 2, 1), false, 1.0);
        assert_eq!((c[0], RAN.get()), (11.0, Some(Kernel::default_for_cpu())));
    }

    fn check_kernel(kernel: Kernel) {
        let mm = |c: &mut [f32], a: View, b: View, accumulate, scale| {
            RAN.set(None);
            mm_ld_with(kernel, c, b.cols, a, b, accumulate, scale);
            assert_eq!(RAN.get(), Some(kernel), "the {kernel:?} path did not run");
        };
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
            let want: Vec<f64> = (0..m * n).map(|ij| (0..k).map(|p| a[(ij / n) * k + p] as f64 * b[p * n + ij % n] as f64).sum::<f64>()).collect();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let av = if ta { View::rm(&at, k, m).t() } else { View::rm(&a, m, k) };
                let bv = if tb { View::rm(&bt, n, k).t() } else { View::rm(&b, k, n) };
                let mut c = vec![1.0f32; m * n];
                mm(&mut c, av, bv, true, 2.0);
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - (1.0 + 2.0 * w)).abs() < 1e-4 * (1.0 + w.abs() * k as f64),
                        "{kernel:?} {m}x{k}x{n} {ta} {tb} at {i}: {got} vs {}",
                        1.0 + 2.0 * w
                    );
                }
                mm(&mut c, av, bv, false, 1.0);
                for (&got, &w) in c.iter().zip(&want) {
                    assert!((got as f64 - w).abs() < 1e-4 * (1.0 + w.abs() * k as f64), "{kernel:?} {m}x{k}x{n} {ta} {tb}");
                }
            }
        }
    }
}
