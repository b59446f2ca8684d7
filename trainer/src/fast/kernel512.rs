//! A small AVX-512 f32 gemm (BLIS-style: packed panels, a 12 x 32 register
//! tile). The `gemm` crate only uses AVX-512 with its nightly feature, so on
//! stable it runs 8-wide AVX2 kernels; on CPUs with AVX-512 this one is used
//! instead (see `gemm::mm_ld`). Checked against a naive product in the tests
//! of `gemm.rs` and, through every gradient, in tests/fast_backend.rs.
//!
//! Kept because it pays end to end: 1.2-1.4x the trainer's tokens/s on a
//! 2-core AVX-512 machine (`NRGPT_NO_AVX512=1` turns it off; the measurement:
//! docs/figures.md, "The AVX-512 gemm").

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::view::View;

/// Register tile: MR rows x NR columns (2 zmm) = 24 accumulators.
const MR: usize = 12;
const NR: usize = 32;
/// Cache blocks: a KC x NR panel of B (32 KiB) stays in L1 while MC x KC of A sits in L2.
const KC: usize = 256;
const MC: usize = 96;
const NC: usize = 512;
// Whole panels fit the pack buffers, zero padding included.
const _: () = assert!(MC.is_multiple_of(MR) && NC.is_multiple_of(NR));

/// Whether this CPU can run `gemm`.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

thread_local! {
    static PACK: RefCell<(Vec<f32>, Vec<f32>)> = RefCell::new((vec![0.0; MC * KC], vec![0.0; KC * NC]));
}

/// C (m x n, row stride ldc, at `c`) = [C +] alpha * A B.
///
/// # Safety
/// - AVX-512F is available (`available()`).
/// - `a.cols == b.rows > 0` (with k = 0, C is left as it is even without
///   `accumulate`), and both views pass `View::check`.
/// - `c` is valid for reads and writes of the `a.rows x b.cols` block with row
///   stride `ldc`, and overlaps neither view's data.
#[target_feature(enable = "avx512f")]
pub unsafe fn gemm(c: *mut f32, ldc: usize, a: View, b: View, accumulate: bool, alpha: f32) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    PACK.with(|bufs| {
        let (pa, pb) = &mut *bufs.borrow_mut();
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                let acc = accumulate || pc > 0;
                pack_b(pb, b, pc, kc, jc, nc);
                // A with contiguous rows is read in place by the kernel (no packing);
                // other layouts are packed into MR-tall panels.
                let direct = a.cs == 1;
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    if !direct {
                        pack_a(pa, a, ic, mc, pc, kc);
                    } else if mc % MR != 0 {
                        // In place, only the last partial panel is packed (zero-padded), once per block.
                        let last = mc - mc % MR;
                        pack_a(pa, a, ic + last, mc - last, pc, kc);
                    }
                    for jr in (0..nc).step_by(NR) {
                        let nr = NR.min(nc - jr);
                        let bp = pb[jr * kc..].as_ptr();
                        for ir in (0..mc).step_by(MR) {
                            let mr = MR.min(mc - ir);
                            // Row and column offsets < (m, n): inside C by the contract.
                            let c_off = (ic + ir) * ldc + jc + jr;
                            // In place, A's tile starts at row ic + ir, column pc (inside `a.data`).
                            let a_in_place = || a.data[(ic + ir) * a.rs + pc..].as_ptr();
                            if mr == MR && nr == NR {
                                // SAFETY: AVX-512F by the contract; the A rows (lda = a.rs) or packed
                                // panel and the B panel hold kc columns; the full tile lies in C.
                                unsafe {
                                    let cp = c.add(c_off);
                                    if direct {
                                        kernel::<true>(kc, a_in_place(), a.rs, bp, cp, ldc, acc, alpha);
                                    } else {
                                        kernel::<false>(kc, pa[ir * kc..].as_ptr(), 0, bp, cp, ldc, acc, alpha);
                                    }
                                }
                                continue;
                            }
                            // Edge tile: compute the full tile aside (B and the partial A
                            // panel are zero-padded), then write back the valid part.
                            let mut tmp = [0f32; MR * NR];
                            // SAFETY: as above, but into `tmp`, one whole MR x NR tile; an in-place
                            // A is only read for a full MR rows, else its packed panel is.
                            unsafe {
                                if direct && mr == MR {
                                    kernel::<true>(kc, a_in_place(), a.rs, bp, tmp.as_mut_ptr(), NR, false, alpha);
                                } else {
                                    // in place, the one partial panel was packed at the start of `pa`
                                    let ap = if direct { pa.as_ptr() } else { pa[ir * kc..].as_ptr() };
                                    kernel::<false>(kc, ap, 0, bp, tmp.as_mut_ptr(), NR, false, alpha);
                                }
                            }
                            // SAFETY: the mr x nr corner at c_off lies inside C (mr, nr within m, n).
                            unsafe { write_back(c.add(c_off), ldc, &tmp, mr, nr, acc) };
                        }
                    }
                }
            }
        }
    });
}

/// C[..mr, ..nr] = [C +] the top-left mr x nr of the MR x NR tile `tmp`.
///
/// # Safety
/// `c` is valid for reads and writes of mr rows of nr values, row stride `ldc`.
unsafe fn write_back(c: *mut f32, ldc: usize, tmp: &[f32; MR * NR], mr: usize, nr: usize, accumulate: bool) {
    for i in 0..mr {
        for j in 0..nr {
            // SAFETY: i < mr, j < nr: inside the block the caller promised.
            let d = unsafe { &mut *c.add(i * ldc + j) };
            *d = if accumulate { *d + tmp[i * NR + j] } else { tmp[i * NR + j] };
        }
    }
}

/// B[pc..pc+kc, jc..jc+nc] as NR-wide panels, each kc rows of NR values (zero-padded).
/// Safe indexing: packing is a small share of the work, so the bounds checks cost little.
fn pack_b(dst: &mut [f32], b: View, pc: usize, kc: usize, jc: usize, nc: usize) {
    for jr in (0..nc).step_by(NR) {
        let nr = NR.min(nc - jr);
        let (rows, _) = dst[jr * kc..(jr + NR) * kc].as_chunks_mut::<NR>();
        for (p, out) in rows.iter_mut().enumerate() {
            let row = (pc + p) * b.rs + (jc + jr) * b.cs;
            if b.cs == 1 && nr == NR {
                // fixed-size copy: vector moves, not a memcpy call
                *out = b.data[row..row + NR].try_into().unwrap();
            } else {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = if j < nr { b.data[row + j * b.cs] } else { 0.0 };
                }
            }
        }
    }
}

/// A[ic..ic+mc, pc..pc+kc] as MR-tall panels, each kc columns of MR values (zero-padded).
fn pack_a(dst: &mut [f32], a: View, ic: usize, mc: usize, pc: usize, kc: usize) {
    for ir in (0..mc).step_by(MR) {
        let mr = MR.min(mc - ir);
        let (cols, _) = dst[ir * kc..(ir + MR) * kc].as_chunks_mut::<MR>();
        for (p, out) in cols.iter_mut().enumerate() {
            let col = (ic + ir) * a.rs + (pc + p) * a.cs;
            if a.rs == 1 && mr == MR {
                // Columns contiguous (a transposed row-major matrix): MR values at a time.
                *out = a.data[col..col + MR].try_into().unwrap();
            } else {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = if i < mr { a.data[col + i * a.rs] } else { 0.0 };
                }
            }
        }
    }
}

/// The 12 x 32 tile: C (+)= alpha * sum_p A[:, p] (12 values) x b[p] (32 values).
/// A packed (DIRECT = false): A[i, p] at a[p*MR + i]; in place (DIRECT): at a[i*lda + p].
///
/// # Safety
/// AVX-512F is available; for every p < k and i < MR, A[i, p] (as laid out
/// above) and b[p*NR .. p*NR + NR] are readable; `c` is valid for writes of MR
/// rows of NR values with row stride `ldc`, and for reads too if `accumulate`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel<const DIRECT: bool>(k: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool, alpha: f32) {
    let (ars, aps) = if DIRECT { (lda, 1) } else { (1, MR) };
    macro_rules! tile {
        ($($i:literal)*) => {{
            let z = _mm512_setzero_ps();
            let mut acc = [[z; 2]; MR];
            for p in 0..k {
                // SAFETY: p < k: row p of the B panel and column p of A are readable.
                let (b0, b1, ap) = unsafe { (_mm512_loadu_ps(b.add(p * NR)), _mm512_loadu_ps(b.add(p * NR + 16)), a.add(p * aps)) };
                $(
                    // SAFETY: A[$i, p] with $i < MR, readable by the contract.
                    let ai = _mm512_set1_ps(unsafe { *ap.add($i * ars) });
                    acc[$i][0] = _mm512_fmadd_ps(ai, b0, acc[$i][0]);
                    acc[$i][1] = _mm512_fmadd_ps(ai, b1, acc[$i][1]);
                )*
            }
            let al = _mm512_set1_ps(alpha);
            $(
                // SAFETY: row $i < MR of the C tile, NR values: writable (readable if accumulating).
                unsafe {
                    let cp = c.add($i * ldc);
                    let mut v0 = _mm512_mul_ps(acc[$i][0], al);
                    let mut v1 = _mm512_mul_ps(acc[$i][1], al);
                    if accumulate {
                        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cp));
                        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cp.add(16)));
                    }
                    _mm512_storeu_ps(cp, v0);
                    _mm512_storeu_ps(cp.add(16), v1);
                }
            )*
        }};
    }
    tile!(0 1 2 3 4 5 6 7 8 9 10 11);
}
