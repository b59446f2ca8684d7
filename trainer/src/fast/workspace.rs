//! Preallocated buffers for one chunk of sequences: what the forward keeps
//! for the backward (the "tape": one set per NRGPT descent step or applied GPT layer) and the backward's
//! scratch space. Allocated once; a training step allocates nothing.

use nrgpt_core::{Arch, ModelConfig};

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

/// What one applied GPT layer saves (crates/core/src/gpt.rs: x + Attn(N1(x)), then + MLP(N2(.))).
pub struct LayerTape {
    /// The layer's input, (r, d).
    pub x: Vec<f32>,
    /// First norm: xh, 1/scale, g1 = ln1 * xh.
    pub xh1: Vec<f32>,
    pub rstd1: Vec<f32>,
    pub g1: Vec<f32>,
    /// q, k, v = g1 W^T, (r, hd).
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Attention probabilities per (sequence, head), (nb, h, n, n); zero where masked.
    pub p: Vec<f32>,
    /// o = P v, merged heads (r, hd).
    pub o: Vec<f32>,
    /// Second norm (of x + attention).
    pub xh2: Vec<f32>,
    pub rstd2: Vec<f32>,
    pub g2: Vec<f32>,
    /// s(u) and s'(u), u = g2 W1^T + b1, (r, m).
    pub s: Vec<f32>,
    pub ds: Vec<f32>,
}

impl LayerTape {
    pub fn new(dm: &Dims) -> Self {
        let (r, d, hd, m) = (dm.r, dm.d, dm.hd, dm.m);
        let z = |len: usize| vec![0f32; len];
        Self {
            x: z(r * d),
            xh1: z(r * d),
            rstd1: z(r),
            g1: z(r * d),
            q: z(r * hd),
            k: z(r * hd),
            v: z(r * hd),
            p: z(dm.nb * dm.h * dm.n * dm.n),
            o: z(r * hd),
            xh2: z(r * d),
            rstd2: z(r),
            g2: z(r * d),
            s: z(r * m),
            ds: z(r * m),
        }
    }
}

pub struct Workspace {
    pub dims: Dims,
    /// NRGPT: one per descent step (empty for GPT).
    pub tape: Vec<StepTape>,
    /// GPT: one per applied layer (empty for NRGPT).
    pub layers: Vec<LayerTape>,
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
    pub dv: Vec<f32>,
    pub ta: Vec<f32>,
    pub tb: Vec<f32>,
    pub nn: Vec<f32>,
    /// The bare block norm's fixed gain (ones, width d), and where the
    /// backward's d(gain) goes when the gain is no parameter (discarded).
    pub ones: Vec<f32>,
    pub gain_sink: Vec<f32>,
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
        let nrgpt = cfg.arch.is_nrgpt();
        let tape = (0..if nrgpt { dm.steps } else { 0 })
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
        let layers = (0..if nrgpt { 0 } else { dm.steps }).map(|_| LayerTape::new(&dm)).collect();
        Self {
            dims: dm,
            tape,
            layers,
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
            dv: z(r * hd),
            ta: z(r * m),
            tb: z(r * m),
            nn: z(dm.n * dm.n),
            ones: vec![1.0; d],
            gain_sink: z(d),
            grads,
            loss_sum: 0.0,
        }
    }
}
