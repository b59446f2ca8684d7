//! The model's parameters as plain f32 slices, indexed by the core's weight
//! layout, for the incremental decoders (CPU and GPU read the same [`DecodeParams`]).

use nrgpt_core::format::PackedCheckpoint;
use nrgpt_core::layout::{NrgptIdx, WeightLayout};
use nrgpt_core::projection::top2_directions;
use nrgpt_core::{Error, ModelConfig, Result};

/// Every weight as row-major f32 (`w[i]` is parameter `i` of `lay`), plus the fixed 2-D projection plane.
#[derive(Clone)]
pub struct DecodeParams {
    pub cfg: ModelConfig,
    pub lay: WeightLayout,
    pub w: Vec<Vec<f32>>,
    pub dirs: [Vec<f32>; 2],
    /// The block norm's gain (the learned gamma, or ones for the bare norm)
    /// and bias (the bare norm's, or zeros): `g = gain * xh + bias`.
    pub gain: Vec<f32>,
    pub norm_bias: Vec<f32>,
}

impl DecodeParams {
    pub fn from_packed(file: &PackedCheckpoint) -> Result<Self> {
        let cfg = file.config.clone();
        if !cfg.arch.is_nrgpt() {
            return Err(Error::Config(format!("the incremental engine runs NRGPT models; `{}` runs on the CPU reference", cfg.arch.name())));
        }
        let w: Vec<Vec<f32>> = (0..file.tensors.len()).map(|i| file.values(i)).collect();
        let lay = file.layout.clone();
        let dirs = top2_directions(&w[lay.head_w], cfg.vocab_size, cfg.d_model);
        let ix = lay.nrgpt().expect("an NRGPT config has an NRGPT layout");
        let d = cfg.d_model;
        let gain = ix.gamma.map_or_else(|| vec![1.0; d], |i| w[i].clone());
        let norm_bias = ix.norm_bias.map_or_else(|| vec![0.0; d], |i| w[i].clone());
        Ok(Self { cfg, lay, w, dirs, gain, norm_bias })
    }

    /// The shared block's indices (`from_packed` admits NRGPT layouts only).
    pub fn block(&self) -> &NrgptIdx {
        self.lay.nrgpt().expect("DecodeParams holds an NRGPT model")
    }

    pub fn hd(&self) -> usize {
        self.cfg.n_head * self.cfg.head_dim
    }
}
