//! A small AVX-512 f32 gemm (BLIS-style: packed panels, a 12 x 32 register
//! tile). The `gemm` crate only uses AVX-512 with its nightly feature, so on
//! stable it runs 8-wide AVX2 kernels; on CPUs with AVX-512 this one is used
//! instead (see `gemm::mm_ld`). Checked against a naive product in the tests
//! of `gemm.rs` and, through every gradient, in tests/fast_backend.rs.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::gemm::View;

/// Register tile: MR rows x NR columns (2 zmm) = 24 accumulators.
const MR: usize = 12;
const NR: usize = 32;
/// Cache blocks: a KC x NR panel of B (32 KiB) stays in L1 while MC x KC of A sits in L2.
const KC: usize = 256;
const MC: usize = 96;
const NC: usize = 512;

pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

thread_local! {
    static PACK: RefCell<(Vec<f32>, Vec<f32>)> = RefCell::new((vec![0.0; MC * KC], vec![0.0; KC * NC]));
}

/// C (m x n, row stride ldc, at `c`) = [C +] alpha * A B. Caller checked the bounds.
/// # Safety
/// AVX-512F must be available; `c` must be valid for the m x n block with row stride ldc.
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
                        let bp = pb.as_ptr().add(jr * kc);
                        for ir in (0..mc).step_by(MR) {
                            let mr = MR.min(mc - ir);
                            let cp = c.add((ic + ir) * ldc + jc + jr);
                            if mr == MR && nr == NR {
                                if direct {
                                    kernel::<true>(kc, a.data.as_ptr().add((ic + ir) * a.rs + pc), a.rs, bp, cp, ldc, acc, alpha);
                                } else {
                                    kernel::<false>(kc, pa.as_ptr().add(ir * kc), 0, bp, cp, ldc, acc, alpha);
                                }
                                continue;
                            }
                            // Edge tile: compute the full tile aside (B and the partial A
                            // panel are zero-padded), then write back the valid part.
                            let mut tmp = [0f32; MR * NR];
                            if direct && mr == MR {
                                kernel::<true>(kc, a.data.as_ptr().add((ic + ir) * a.rs + pc), a.rs, bp, tmp.as_mut_ptr(), NR, false, alpha);
                            } else {
                                // in place, the one partial panel was packed at the start of `pa`
                                let ap = if direct { pa.as_ptr() } else { pa.as_ptr().add(ir * kc) };
                                kernel::<false>(kc, ap, 0, bp, tmp.as_mut_ptr(), NR, false, alpha);
                            }
                            for i in 0..mr {
                                for j in 0..nr {
                                    let d = cp.add(i * ldc + j);
                                    *d = if acc { *d + tmp[i * NR + j] } else { tmp[i * NR + j] };
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

/// B[pc..pc+kc, jc..jc+nc] as NR-wide panels, each kc rows of NR values (zero-padded).
unsafe fn pack_b(dst: &mut [f32], b: View, pc: usize, kc: usize, jc: usize, nc: usize) {
    let d = dst.as_mut_ptr();
    let s = b.data.as_ptr();
    for jr in (0..nc).step_by(NR) {
        let nr = NR.min(nc - jr);
        let panel = d.add(jr * kc);
        for p in 0..kc {
            let row = s.add((pc + p) * b.rs + (jc + jr) * b.cs);
            let out = panel.add(p * NR);
            if b.cs == 1 && nr == NR {
                // fixed-size copy: vector moves, not a memmove call
                *(out as *mut [f32; NR]) = *(row as *const [f32; NR]);
            } else if b.cs == 1 {
                std::ptr::copy_nonoverlapping(row, out, nr);
            } else {
                for j in 0..nr {
                    *out.add(j) = *row.add(j * b.cs);
                }
            }
            for j in nr..NR {
                *out.add(j) = 0.0;
            }
        }
    }
}

/// A[ic..ic+mc, pc..pc+kc] as MR-tall panels, each kc columns of MR values (zero-padded).
unsafe fn pack_a(dst: &mut [f32], a: View, ic: usize, mc: usize, pc: usize, kc: usize) {
    let d = dst.as_mut_ptr();
    let s = a.data.as_ptr();
    for ir in (0..mc).step_by(MR) {
        let mr = MR.min(mc - ir);
        let panel = d.add(ir * kc);
        if a.rs == 1 {
            // Columns contiguous (a transposed row-major matrix): copy MR at a time.
            for p in 0..kc {
                let col = s.add((ic + ir) + (pc + p) * a.cs);
                if mr == MR {
                    *(panel.add(p * MR) as *mut [f32; MR]) = *(col as *const [f32; MR]);
                } else {
                    for i in 0..MR {
                        *panel.add(p * MR + i) = if i < mr { *col.add(i) } else { 0.0 };
                    }
                }
            }
        } else {
            for i in 0..MR {
                if i < mr {
                    let row = s.add((ic + ir + i) * a.rs + pc * a.cs);
                    for p in 0..kc {
                        *panel.add(p * MR + i) = *row.add(p * a.cs);
                    }
                } else {
                    for p in 0..kc {
                        *panel.add(p * MR + i) = 0.0;
                    }
                }
            }
        }
    }
}

/// The 12 x 32 tile: C (+)= alpha * sum_p A[:, p] (12 values) x b[p] (32 values).
/// A packed (DIRECT = false): A[i, p] at a[p*MR + i]; in place (DIRECT): at a[i*lda + p].
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel<const DIRECT: bool>(k: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool, alpha: f32) {
    let (ars, aps) = if DIRECT { (lda, 1) } else { (1, MR) };
    macro_rules! tile {
        ($($i:literal)*) => {{
            let z = _mm512_setzero_ps();
            let mut acc = [[z; 2]; MR];
            for p in 0..k {
                let b0 = _mm512_loadu_ps(b.add(p * NR));
                let b1 = _mm512_loadu_ps(b.add(p * NR + 16));
                let ap = a.add(p * aps);
                $(
                    let ai = _mm512_set1_ps(*ap.add($i * ars));
                    acc[$i][0] = _mm512_fmadd_ps(ai, b0, acc[$i][0]);
                    acc[$i][1] = _mm512_fmadd_ps(ai, b1, acc[$i][1]);
                )*
            }
            let al = _mm512_set1_ps(alpha);
            $(
                let cp = c.add($i * ldc);
                let mut v0 = _mm512_mul_ps(acc[$i][0], al);
                let mut v1 = _mm512_mul_ps(acc[$i][1], al);
                if accumulate {
                    v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cp));
                    v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cp.add(16)));
                }
                _mm512_storeu_ps(cp, v0);
                _mm512_storeu_ps(cp.add(16), v1);
            )*
        }};
    }
    tile!(0 1 2 3 4 5 6 7 8 9 10 11);
}
