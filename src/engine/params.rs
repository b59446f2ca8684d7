//! The model's parameters as plain f32 slices, laid out for the incremental
//! decoders (CPU and GPU read the same [`DecodeParams`]).

use std::collections::BTreeMap;

use candle_core::DType;

use crate::projection::top2_directions;
use crate::{Activation, Arch, Checkpoint, Error, EtaKind, ModelConfig, NormKind, Result};

/// Every weight as row-major f32, plus the fixed 2-D projection plane.
#[derive(Clone)]
pub struct DecodeParams {
    pub cfg: ModelConfig,
    pub w: BTreeMap<String, Vec<f32>>,
    pub dirs: [Vec<f32>; 2],
}

impl DecodeParams {
    pub fn from_checkpoint(ck: &Checkpoint) -> Result<Self> {
        let cfg = ck.config.clone();
        if !cfg.arch.is_nrgpt() {
            return Err(Error::Config(format!(
                "the incremental engine runs NRGPT models; `{}` runs on the CPU reference",
                cfg.arch.name()
            )));
        }
        let mut w = BTreeMap::new();
        for (name, t) in &ck.weights {
            w.insert(name.clone(), t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
        }
        let dirs = top2_directions(&w["head.w"], cfg.vocab_size, cfg.d_model);
        Ok(Self { cfg, w, dirs })
    }

    pub fn get(&self, name: &str) -> &[f32] {
        &self.w[name]
    }

    pub fn hd(&self) -> usize {
        self.cfg.n_head * self.cfg.head_dim
    }

    pub fn is_ff2w(&self) -> bool {
        self.cfg.arch == Arch::NrgptFf2w
    }

    pub fn layer_norm(&self) -> bool {
        self.cfg.norm == NormKind::LayerNorm
    }

    pub fn gelu(&self) -> bool {
        self.cfg.activation == Activation::Gelu
    }

    pub fn free_eta(&self) -> bool {
        self.cfg.eta == EtaKind::Free
    }
}
