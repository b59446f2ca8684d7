//! The parameters as flat f32 buffers, one per entry of the core's
//! [`WeightLayout`], and the conversions to and from candle `Weights` (so
//! checkpoints, init and evaluation stay those of the core crate).

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use nrgpt_core::layout::{ParamSpec, WeightLayout};
use nrgpt_core::model::Weights;

/// What the fast backend does with a layout's buffers.
pub trait Buffers {
    fn zeros(&self) -> Vec<Vec<f32>>;
    fn transposes(&self, params: &[Vec<f32>], out: &mut Vec<Vec<f32>>);
    // `self` is the layout that orders the buffers, not what they are made from.
    #[allow(clippy::wrong_self_convention)]
    fn from_weights(&self, w: &Weights, prefix: &str) -> Result<Vec<Vec<f32>>>;
    fn to_weights(&self, bufs: &[Vec<f32>], prefix: &str) -> Result<Weights>;
}

impl Buffers for WeightLayout {
    /// Zeroed buffers of every parameter's size.
    fn zeros(&self) -> Vec<Vec<f32>> {
        self.specs.iter().map(|s| vec![0.0; s.numel()]).collect()
    }

    /// `out[i]` = the transpose of every weight matrix the gemms read as `W^T`
    /// (all rank-2 parameters but the embeddings), so every gemm's right-hand
    /// side is row-major and packs with plain copies; empty for the others.
    fn transposes(&self, params: &[Vec<f32>], out: &mut Vec<Vec<f32>>) {
        out.resize(params.len(), Vec::new());
        for (i, (p, spec)) in params.iter().zip(&self.specs).enumerate() {
            let shape = &spec.shape;
            if shape.len() != 2 || i == self.tok || i == self.pos {
                continue;
            }
            let (rows, cols) = (shape[0], shape[1]);
            let o = &mut out[i];
            o.resize(rows * cols, 0.0);
            for r in 0..rows {
                for c in 0..cols {
                    o[c * rows + r] = p[r * cols + c];
                }
            }
        }
    }

    /// Reads `prefix + name` for every parameter from `w` (any float dtype) as f32.
    fn from_weights(&self, w: &Weights, prefix: &str) -> Result<Vec<Vec<f32>>> {
        self.specs
            .iter()
            .map(|ParamSpec { name, shape, .. }| {
                let key = format!("{prefix}{name}");
                let t = w.get(&key).with_context(|| format!("missing tensor `{key}`"))?;
                if t.dims() != shape.as_slice() {
                    bail!("`{key}` has shape {:?}, expected {shape:?}", t.dims());
                }
                Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
            })
            .collect()
    }

    /// The buffers as f32 tensors named `prefix + name`.
    fn to_weights(&self, bufs: &[Vec<f32>], prefix: &str) -> Result<Weights> {
        let mut w = Weights::new();
        for (ParamSpec { name, shape, .. }, b) in self.specs.iter().zip(bufs) {
            w.insert(format!("{prefix}{name}"), Tensor::from_slice(b, shape.as_slice(), &Device::Cpu)?);
        }
        Ok(w)
    }
}
