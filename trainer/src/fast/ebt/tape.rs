//! One chunk's preallocated buffers for EBT: the real stream's layer tapes,
//! and per prediction-stream layer three tapes for the current thinking step
//! (its primal values, their tangents along the loss's direction, and the
//! adjoints of the input-gradient pass), reused by every step.

use nrgpt_core::ModelConfig;

use crate::fast::workspace::{Dims, LayerTape};

/// What one prediction-stream layer's forward keeps.
pub struct PrimalTape {
    /// The layer's input, (r, d).
    pub p: Vec<f32>,
    /// First norm: xh, 1/scale, n1 = ln1 * xh.
    pub xh1: Vec<f32>,
    pub rstd1: Vec<f32>,
    pub n1: Vec<f32>,
    /// Query, self key and self value, (r, hd).
    pub q: Vec<f32>,
    pub ks: Vec<f32>,
    pub vs: Vec<f32>,
    /// Attention weights on the real tokens (nb, h, n, n), zero where masked,
    /// and on the prediction itself (nb, h, n).
    pub pr: Vec<f32>,
    pub ps: Vec<f32>,
    /// Merged heads' attention output, (r, hd).
    pub att: Vec<f32>,
    /// Second norm (of the input plus attention).
    pub xh2: Vec<f32>,
    pub rstd2: Vec<f32>,
    pub n2: Vec<f32>,
    /// s(u), s'(u), s''(u), u = n2 W1^T + b1, (r, m).
    pub s: Vec<f32>,
    pub ds: Vec<f32>,
    pub dds: Vec<f32>,
}

/// The tangents of the primal values along the candidate direction u (a dot
/// over a value: d/dt of it at z + t u).
pub struct TangentTape {
    pub p: Vec<f32>,
    pub xh1: Vec<f32>,
    pub n1: Vec<f32>,
    pub q: Vec<f32>,
    pub ks: Vec<f32>,
    pub vs: Vec<f32>,
    /// Scores on the real tokens (nb, h, n, n) and on itself (nb, h, n).
    pub sr: Vec<f32>,
    pub ss: Vec<f32>,
    pub pr: Vec<f32>,
    pub ps: Vec<f32>,
    pub att: Vec<f32>,
    /// The input plus attention, (r, d).
    pub p1: Vec<f32>,
    pub xh2: Vec<f32>,
    pub n2: Vec<f32>,
    /// u and s(u), (r, m).
    pub u: Vec<f32>,
    pub s: Vec<f32>,
}

/// dE/d(value) of the input-gradient pass: they are also the adjoints of the
/// tangents in the second-order pass, which reads them.
pub struct AdjointTape {
    /// At the layer's output and at the input plus attention, (r, d).
    pub out: Vec<f32>,
    pub p1: Vec<f32>,
    /// At s(u) (r, m), at n2 (r, d), at the attention output (r, hd).
    pub s: Vec<f32>,
    pub n2: Vec<f32>,
    pub att: Vec<f32>,
    /// At the attention weights (nb, h, n, n) and (nb, h, n), then at the scores.
    pub pr: Vec<f32>,
    pub ps: Vec<f32>,
    pub sr: Vec<f32>,
    pub ss: Vec<f32>,
    /// At q, the self key and value (r, hd), and at n1 (r, d).
    pub q: Vec<f32>,
    pub ks: Vec<f32>,
    pub vs: Vec<f32>,
    pub n1: Vec<f32>,
}

fn z(len: usize) -> Vec<f32> {
    vec![0f32; len]
}

impl PrimalTape {
    fn new(dm: &Dims) -> Self {
        let (r, d, hd, m, blocks) = (dm.r, dm.d, dm.hd, dm.m, dm.nb * dm.h);
        Self {
            p: z(r * d),
            xh1: z(r * d),
            rstd1: z(r),
            n1: z(r * d),
            q: z(r * hd),
            ks: z(r * hd),
            vs: z(r * hd),
            pr: z(blocks * dm.n * dm.n),
            ps: z(blocks * dm.n),
            att: z(r * hd),
            xh2: z(r * d),
            rstd2: z(r),
            n2: z(r * d),
            s: z(r * m),
            ds: z(r * m),
            dds: z(r * m),
        }
    }
}

impl TangentTape {
    fn new(dm: &Dims) -> Self {
        let (r, d, hd, m, blocks) = (dm.r, dm.d, dm.hd, dm.m, dm.nb * dm.h);
        Self {
            p: z(r * d),
            xh1: z(r * d),
            n1: z(r * d),
            q: z(r * hd),
            ks: z(r * hd),
            vs: z(r * hd),
            sr: z(blocks * dm.n * dm.n),
            ss: z(blocks * dm.n),
            pr: z(blocks * dm.n * dm.n),
            ps: z(blocks * dm.n),
            att: z(r * hd),
            p1: z(r * d),
            xh2: z(r * d),
            n2: z(r * d),
            u: z(r * m),
            s: z(r * m),
        }
    }
}

impl AdjointTape {
    fn new(dm: &Dims) -> Self {
        let (r, d, hd, m, blocks) = (dm.r, dm.d, dm.hd, dm.m, dm.nb * dm.h);
        Self {
            out: z(r * d),
            p1: z(r * d),
            s: z(r * m),
            n2: z(r * d),
            att: z(r * hd),
            pr: z(blocks * dm.n * dm.n),
            ps: z(blocks * dm.n),
            sr: z(blocks * dm.n * dm.n),
            ss: z(blocks * dm.n),
            q: z(r * hd),
            ks: z(r * hd),
            vs: z(r * hd),
            n1: z(r * d),
        }
    }
}

/// The energy head's input, the last layer's output: primal, tangent and the norm's saved values.
pub struct TopTape {
    pub p: Vec<f32>,
    pub xh: Vec<f32>,
    pub rstd: Vec<f32>,
    pub p_dot: Vec<f32>,
    pub xh_dot: Vec<f32>,
    pub n_dot: Vec<f32>,
}

pub struct EbtWorkspace {
    pub dims: Dims,
    /// The real stream: one tape per layer (its k, v are what predictions
    /// read; of the last layer only the first norm, k and v are filled).
    pub real: Vec<LayerTape>,
    /// dL/d(real keys, values) per layer, summed over the thinking steps, (r, hd).
    pub kbar: Vec<Vec<f32>>,
    pub vbar: Vec<Vec<f32>>,
    pub pri: Vec<PrimalTape>,
    pub tan: Vec<TangentTape>,
    pub adj: Vec<AdjointTape>,
    pub top: TopTape,
    /// Candidates z(s), z(s+1) (r, v); y = softmax(z(s)) and its tangent; dE/dz;
    /// dL/dz(s+1), then the tangent direction u.
    pub z: Vec<f32>,
    pub z_next: Vec<f32>,
    pub y: Vec<f32>,
    pub y_dot: Vec<f32>,
    pub g: Vec<f32>,
    pub u: Vec<f32>,
    /// dE/de (the input-gradient pass at the embedding) and the second-order pass's adjoint, (r, d).
    pub e_bar: Vec<f32>,
    pub a: Vec<f32>,
    /// The energy head's weights repeated on every row, (r, d).
    pub head_rows: Vec<f32>,
    /// Scratch.
    pub dx: Vec<f32>,
    pub dg: Vec<f32>,
    pub tmp_d: Vec<f32>,
    pub tmp_hd: Vec<f32>,
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub ta: Vec<f32>,
    pub tb: Vec<f32>,
    pub nn: Vec<f32>,
    pub nv: Vec<f32>,
    pub zero_v: Vec<f32>,
    pub gamma_sink: Vec<f32>,
    /// This chunk's parameter gradients.
    pub grads: Vec<Vec<f32>>,
    /// Sum over the chunk's tokens of the step-averaged cross-entropy.
    pub loss_sum: f64,
}

impl EbtWorkspace {
    pub fn new(cfg: &ModelConfig, nb: usize, grads: Vec<Vec<f32>>) -> Self {
        let dm = Dims::new(cfg, nb);
        let (r, d, hd, m, v, n) = (dm.r, dm.d, dm.hd, dm.m, dm.v, dm.n);
        let layers = cfg.layers;
        Self {
            dims: dm,
            real: (0..layers).map(|_| LayerTape::new(&dm)).collect(),
            kbar: (0..layers).map(|_| z(r * hd)).collect(),
            vbar: (0..layers).map(|_| z(r * hd)).collect(),
            pri: (0..layers).map(|_| PrimalTape::new(&dm)).collect(),
            tan: (0..layers).map(|_| TangentTape::new(&dm)).collect(),
            adj: (0..layers).map(|_| AdjointTape::new(&dm)).collect(),
            top: TopTape { p: z(r * d), xh: z(r * d), rstd: z(r), p_dot: z(r * d), xh_dot: z(r * d), n_dot: z(r * d) },
            z: z(r * v),
            z_next: z(r * v),
            y: z(r * v),
            y_dot: z(r * v),
            g: z(r * v),
            u: z(r * v),
            e_bar: z(r * d),
            a: z(r * d),
            head_rows: z(r * d),
            dx: z(r * d),
            dg: z(r * d),
            tmp_d: z(r * d),
            tmp_hd: z(r * hd),
            dq: z(r * hd),
            dk: z(r * hd),
            dv: z(r * hd),
            ta: z(r * m),
            tb: z(r * m),
            nn: z(n * n),
            nv: z(n),
            zero_v: z(v),
            gamma_sink: z(d),
            grads,
            loss_sum: 0.0,
        }
    }
}
