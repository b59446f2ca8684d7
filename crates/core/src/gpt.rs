//! The baselines NRGPT is measured against: a standard pre-norm GPT layer
//! (used L times with distinct weights, or one layer T times for gpt-rec).

use candle_core::{Result, Tensor};

use crate::layout::GptIdx;
use crate::linear::linear;
use crate::norm::norm;
use crate::ops::{activation, causal_masks, merge_heads, softmax_lse, split_heads};
use crate::{Activation, GptBlock, ModelConfig, NormKind};

/// Training's dropout masks for one application of a layer: the attention
/// and MLP residual branches (B, n, D), the attention probabilities (B, H, n, n).
#[derive(Default, Clone, Copy)]
pub struct LayerDrops<'a> {
    pub attn: Option<&'a Tensor>,
    pub mlp: Option<&'a Tensor>,
    pub probs: Option<&'a Tensor>,
}

pub struct GptLayer {
    pub norm: NormKind,
    pub eps: f64,
    pub n_head: usize,
    pub ln1: Tensor,
    pub wq: Tensor, // (H*dh, D)
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor, // (D, H*dh)
    pub ln2: Tensor,
    pub w1: Tensor, // (M, D)
    pub b1: Tensor,
    pub w2: Tensor, // (D, M)
    pub b2: Tensor,
    pub act: Activation,
    /// Both branches read the layer's input (the reference's `Block_parallel`).
    pub parallel: bool,
}

impl GptLayer {
    /// The layer at `ix`, its tensors taken by layout index from `get`.
    pub fn from_layout(cfg: &ModelConfig, ix: &GptIdx, get: impl Fn(usize) -> Tensor) -> Self {
        Self {
            norm: cfg.norm,
            eps: cfg.eps,
            n_head: cfg.n_head,
            ln1: get(ix.ln1),
            wq: get(ix.wq),
            wk: get(ix.wk),
            wv: get(ix.wv),
            wo: get(ix.wo),
            ln2: get(ix.ln2),
            w1: get(ix.w1),
            b1: get(ix.b1),
            w2: get(ix.w2),
            b2: get(ix.b2),
            act: cfg.activation,
            parallel: cfg.gpt_block == GptBlock::Parallel,
        }
    }

    /// Causal self-attention (keys B <= A), softmax(q k^T / sqrt(dh)) v, then Wo;
    /// `drop` (training's attention dropout, (B, H, n, n)) masks the probabilities.
    fn attention(&self, h: &Tensor, drop: Option<&Tensor>) -> Result<Tensor> {
        let n = h.dim(1)?;
        let q = split_heads(&linear(h, &self.wq, None)?, self.n_head)?;
        let k = split_heads(&linear(h, &self.wk, None)?, self.n_head)?;
        let v = split_heads(&linear(h, &self.wv, None)?, self.n_head)?;
        let scale = 1.0 / (q.dim(3)? as f64).sqrt();
        let (mask, _) = causal_masks(n, false, h.dtype(), h.device())?;
        let (p, _) = softmax_lse(&(q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?)?;
        let p = match drop {
            Some(m) => (p * m)?,
            None => p,
        };
        linear(&merge_heads(&p.matmul(&v)?)?, &self.wo, None)
    }

    fn mlp(&self, h: &Tensor) -> Result<Tensor> {
        let (s, _) = activation(self.act, &linear(h, &self.w1, Some(&self.b1))?)?;
        linear(&s, &self.w2, Some(&self.b2))
    }

    /// x' = x + Attn(N1(x)), then x' + MLP(N2(x')); parallel: x + Attn(N1(x)) + MLP(N2(x)).
    /// The dropout masks (if any) mask each residual branch and the attention probabilities.
    pub fn forward(&self, x: &Tensor, drops: LayerDrops) -> Result<Tensor> {
        let LayerDrops { attn: drop_attn, mlp: drop_mlp, probs } = drops;
        let masked = |t: Tensor, m: Option<&Tensor>| match m {
            Some(m) => t * m,
            None => Ok(t),
        };
        let a = self.attention(&norm(self.norm, x, &self.ln1, self.eps)?.g, probs)?;
        let after_attn = (x + masked(a, drop_attn)?)?;
        let mlp_in = if self.parallel { x } else { &after_attn };
        let f = self.mlp(&norm(self.norm, mlp_in, &self.ln2, self.eps)?.g)?;
        &after_attn + masked(f, drop_mlp)?
    }
}
