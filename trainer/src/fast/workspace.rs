//! Preallocated buffers for one chunk of sequences: what the forward keeps
//! for the backward (the "tape", one set per descent step) and the backward's
//! scratch space. Allocated once; a training step allocates nothing.

use nrgpt_web::{Arch, ModelConfig};

/// Sizes of one chunk: `nb` sequences of `n` tokens, `r = nb * n` rows.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub nb: usize,
    pub n: usize,
    pub r: usize,
    pub d: usize,
    pub h: usize,
    pub dh: usize,
    pub hd: usize,
    pub m: usize,
    pub v: usize,
    pub steps: usize,
}

impl Dims {
    pub fn new(cfg: &ModelConfig, nb: usize) -> Self {
        let n = cfg.block_size;
        Self {
            nb,
            n,
            r: nb * n,
            d: cfg.d_model,
            h: cfg.n_head,
            dh: cfg.head_dim,
            hd: cfg.n_head * cfg.head_dim,
            m: cfg.ff_hidden(),
            v: cfg.vocab_size,
            steps: cfg.steps,
        }
    }
}

/// What one descent step saves.
pub struct StepTape {
    /// x(t), the state the step reads, (r, d).
    pub x: Vec<f32>,
    /// xh and 1/scale of the norm, g = gamma * xh.
    pub xh: Vec<f32>,
    pub rstd: Vec<f32>,
    pub g: Vec<f32>,
    /// q = g Wq^T, k = g Wk^T, (r, hd).
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    /// Attention probabilities per (sequence, head), (nb, h, n, n); zero where masked.
    pub p: Vec<f32>,
    /// C_h = P_h k_h, merged heads (r, hd) (without alpha).
    pub c: Vec<f32>,
    /// Feed-forward activations (r, m). ff2w: s, s', s'', v = g W2, z = s' * v.
    /// ff1: w = s s' in f[0], (s s')' = s'^2 + s s'' in f[1].
    pub f: [Vec<f32>; 5],
    /// dE/dg (before eta) and its feed-forward part dE_FF/dg, (r, d).
    pub grad: Vec<f32>,
    pub gff: Vec<f32>,
}

pub struct Workspace {
    pub dims: Dims,
    pub tape: Vec<StepTape>,
    /// x(T) and the output norm.
    pub x_out: Vec<f32>,
    pub xh_out: Vec<f32>,
    pub rstd_out: Vec<f32>,
    pub g_out: Vec<f32>,
    /// Logits, then softmax, then dL/dlogits, (r, v).
    pub probs: Vec<f32>,
    /// Backward scratch.
    pub dx: Vec<f32>,
    pub dg: Vec<f32>,
    pub gd: Vec<f32>,
    pub fd: Vec<f32>,
    pub tmp_d: Vec<f32>,
    pub tmp_hd: Vec<f32>,
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub ta: Vec<f32>,
    pub tb: Vec<f32>,
    pub nn: Vec<f32>,
    /// This chunk's parameter gradients (summed over its rows, already / total tokens).
    pub grads: Vec<Vec<f32>>,
    /// Sum over the chunk's tokens of -log p(target).
    pub loss_sum: f64,
}

impl Workspace {
    pub fn new(cfg: &ModelConfig, nb: usize, grads: Vec<Vec<f32>>) -> Self {
        let dm = Dims::new(cfg, nb);
        let (r, d, hd, m) = (dm.r, dm.d, dm.hd, dm.m);
        let z = |len: usize| vec![0f32; len];
        let nf = if cfg.arch == Arch::NrgptFf2w { 5 } else { 2 };
        let tape = (0..dm.steps)
            .map(|_| StepTape {
                x: z(r * d),
                xh: z(r * d),
                rstd: z(r),
                g: z(r * d),
                q: z(r * hd),
                k: z(r * hd),
                p: z(nb * dm.h * dm.n * dm.n),
                c: z(r * hd),
                f: std::array::from_fn(|i| if i < nf { z(r * m) } else { Vec::new() }),
                grad: z(r * d),
                gff: z(r * d),
            })
            .collect();
        Self {
            dims: dm,
            tape,
            x_out: z(r * d),
            xh_out: z(r * d),
            rstd_out: z(r),
            g_out: z(r * d),
            probs: z(r * dm.v),
            dx: z(r * d),
            dg: z(r * d),
            gd: z(r * d),
            fd: z(r * d),
            tmp_d: z(r * d),
            tmp_hd: z(r * hd),
            dq: z(r * hd),
            dk: z(r * hd),
            ta: z(r * m),
            tb: z(r * m),
            nn: z(dm.n * dm.n),
            grads,
            loss_sum: 0.0,
        }
    }
}
