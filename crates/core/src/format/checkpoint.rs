//! Full-precision checkpoints: safetensors with the config, the vocabulary and
//! any training state in the header metadata. Read from bytes (no filesystem),
//! so the same code runs in the browser. Quantized files load through the
//! same entry point, dequantized, so every f32 consumer runs them unchanged.

use std::collections::BTreeMap;

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};

use super::codec::Scheme;
use super::digest::{seal, Integrity};
use super::header::{is_reserved, model_meta, open, FORMAT_F32};
use super::packed::PackedCheckpoint;
use crate::model::Weights;
use crate::{Error, Model, ModelConfig, Result, Vocab};

pub struct Checkpoint {
    pub config: ModelConfig,
    pub vocab: Vocab,
    /// The model parameters (names from [`crate::layout::WeightLayout`]).
    pub weights: Weights,
    /// Any other tensors, e.g. the optimizer moments `opt.m.*`, `opt.v.*`.
    pub extra: Weights,
    /// Free-form metadata, e.g. `train_state` (JSON).
    pub meta: BTreeMap<String, String>,
    /// Whether the file matched its digest, or predates digests (the trainer prints [`Integrity::note`]).
    pub integrity: Integrity,
}

impl Checkpoint {
    pub fn model(&self) -> Result<Model> {
        Model::new(&self.config, &self.weights)
    }

    /// Serialises every tensor as f32, with the digest of every tensor and metadata entry.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut md = model_meta(FORMAT_F32, &self.config, &self.vocab)?;
        for (k, v) in &self.meta {
            if is_reserved(k) {
                return Err(Error::Checkpoint(format!("metadata key `{k}` is reserved")));
            }
            md.insert(k.clone(), v.clone());
        }
        let mut tensors = Vec::new();
        for (name, t) in self.weights.iter().chain(self.extra.iter()) {
            tensors.push((name.clone(), t.to_dtype(DType::F32)?.contiguous()?));
        }
        seal(&mut md, &tensors)?;
        let bytes = safetensors::serialize(tensors, Some(md))?;
        // never write what the reader would refuse (e.g. weights grown past the bounds)
        PackedCheckpoint::from_bytes(&bytes)?;
        Ok(bytes)
    }

    /// An inference file: the model weights at `scheme` with the config and
    /// vocabulary, without optimizer state or training metadata (`F32` writes
    /// the f32 format, the others the quantized one).
    pub fn to_quant_bytes(&self, scheme: Scheme) -> Result<Vec<u8>> {
        PackedCheckpoint::pack(&self.config, &self.vocab, &self.weights, scheme)?.to_bytes()
    }

    /// Parses a checkpoint, f32 or quantized, converting weights to `dtype` on `dev`.
    pub fn from_bytes(bytes: &[u8], dtype: DType, dev: &Device) -> Result<Self> {
        let (st, md) = open(bytes)?;
        let p = PackedCheckpoint::from_parsed(&st, &md)?;
        let mut weights = Weights::new();
        for (i, spec) in p.layout.specs.iter().enumerate() {
            weights.insert(spec.name.clone(), Tensor::from_vec(p.values(i), spec.shape.as_slice(), dev)?.to_dtype(dtype)?);
        }
        // only an f32 file may carry more: the optimizer moments, which the
        // reader checked (F32, shapes, values) like the weights
        let mut extra = Weights::new();
        for (name, view) in st.tensors() {
            if p.scheme == Scheme::F32 && !weights.contains_key(&name) {
                extra.insert(name, view.load(dev)?.to_dtype(dtype)?);
            }
        }
        let meta = md.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
        Ok(Self { config: p.config, vocab: p.vocab, weights, extra, meta, integrity: p.integrity })
    }
}
