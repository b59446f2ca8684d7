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
}

impl DecodeParams {
    pub fn from_packed(file: &PackedCheckpoint) -> Result<Self> {
        let cfg = file.config.clone();
        if !cfg.arch.is_nrgpt() {
            return Err(Error::Config(format!(
                "the incremental engine runs NRGPT models; `{}` runs on the CPU reference",
                cfg.arch.name()
            )));
        }
        let w: Vec<Vec<f32>> = (0..file.tensors.len()).map(|i| file.values(i)).collect();
        let lay = file.layout.clone();
        let dirs = top2_directions(&w[lay.head_w], cfg.vocab_size, cfg.d_model);
        Ok(Self { cfg, lay, w, dirs })
    }

    /// The shared block's indices (`from_packed` admits NRGPT layouts only).
    pub fn block(&self) -> &NrgptIdx {
        self.lay.nrgpt().expect("DecodeParams holds an NRGPT model")
    }

    pub fn hd(&self) -> usize {
        self.cfg.n_head * self.cfg.head_dim
    }
}
