//! Full-precision checkpoints: safetensors with the config, the vocabulary and
//! any training state in the header metadata. Read from bytes (no filesystem),
//! so the same code runs in the browser. Quantized files (see [`crate::quant`])
//! load through the same entry point, dequantized, so every f32 consumer runs
//! them unchanged.

use std::collections::{BTreeMap, HashMap};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};
use safetensors::SafeTensors;

use crate::model::{param_specs, Weights};
use crate::quant::{PackedCheckpoint, Scheme, FORMAT_QUANT, QUANT_RESERVED};
use crate::{Error, Model, ModelConfig, Result, Vocab};

pub const FORMAT_KEY: &str = "format";
pub const FORMAT_F32: &str = "nrgpt-web/f32/v1";
const RESERVED: [&str; 3] = [FORMAT_KEY, "config", "vocab"];

/// Header metadata as safetensors stores it.
pub(crate) type Metadata = HashMap<String, String>;

pub struct Checkpoint {
    pub config: ModelConfig,
    pub vocab: Vocab,
    /// The model parameters (names from `param_specs`).
    pub weights: Weights,
    /// Any other tensors, e.g. the optimizer moments `opt.m.*`, `opt.v.*`.
    pub extra: Weights,
    /// Free-form metadata, e.g. `train_state` (JSON).
    pub meta: BTreeMap<String, String>,
}

/// Parses the safetensors header of `bytes` and returns its tensors and metadata.
pub(crate) fn open(bytes: &[u8]) -> Result<(SafeTensors<'_>, Metadata)> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Checkpoint(format!("not a safetensors file ({e})")))?;
    let (_, header) = SafeTensors::read_metadata(bytes)?;
    Ok((st, header.metadata().clone().unwrap_or_default()))
}

pub(crate) fn meta_field<'a>(md: &'a Metadata, key: &str) -> Result<&'a str> {
    md.get(key).map(String::as_str).ok_or_else(|| Error::Checkpoint(format!("metadata has no `{key}` entry")))
}

/// The config and vocabulary every checkpoint format carries, checked against each other.
pub(crate) fn read_model_meta(md: &Metadata) -> Result<(ModelConfig, Vocab)> {
    let config: ModelConfig = serde_json::from_str(meta_field(md, "config")?)
        .map_err(|e| Error::Checkpoint(format!("config metadata does not parse: {e}")))?;
    config.validate()?;
    let vocab = Vocab::from_json(meta_field(md, "vocab")?)?;
    check_vocab(&config, &vocab)?;
    Ok((config, vocab))
}

/// The metadata entries every checkpoint format writes: format, config, vocabulary.
pub(crate) fn model_meta(format: &str, config: &ModelConfig, vocab: &Vocab) -> Result<Metadata> {
    check_vocab(config, vocab)?;
    let mut md = Metadata::new();
    md.insert(FORMAT_KEY.into(), format.into());
    md.insert("config".into(), serde_json::to_string(config)?);
    md.insert("vocab".into(), vocab.to_json());
    Ok(md)
}

fn check_vocab(config: &ModelConfig, vocab: &Vocab) -> Result<()> {
    if vocab.len() != config.vocab_size {
        return Err(Error::Checkpoint(format!(
            "vocabulary has {} characters but the config says {}",
            vocab.len(),
            config.vocab_size
        )));
    }
    Ok(())
}

fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key) || QUANT_RESERVED.contains(&key)
}

impl Checkpoint {
    pub fn model(&self) -> Result<Model> {
        Model::new(&self.config, &self.weights)
    }

    /// Serialises every tensor as f32.
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
        Ok(safetensors::serialize(tensors, Some(md))?)
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
        let format = meta_field(&md, FORMAT_KEY)?;
        if format == FORMAT_QUANT {
            let meta = md.iter().filter(|(k, _)| !is_reserved(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            return Self::from_packed(&PackedCheckpoint::from_bytes(bytes)?, meta, dtype, dev);
        }
        if format != FORMAT_F32 {
            return Err(Error::Checkpoint(format!("format `{format}` is neither `{FORMAT_F32}` nor `{FORMAT_QUANT}`")));
        }
        let (config, vocab) = read_model_meta(&md)?;
        let names: std::collections::HashSet<String> = param_specs(&config).into_iter().map(|(n, _, _)| n).collect();
        let (mut weights, mut extra) = (Weights::new(), Weights::new());
        for (name, view) in st.tensors() {
            let t: Tensor = view.load(dev)?.to_dtype(dtype)?;
            if names.contains(&name) {
                weights.insert(name, t);
            } else {
                extra.insert(name, t);
            }
        }
        let meta = md.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
        let ck = Self { config, vocab, weights, extra, meta };
        ck.model()?; // every weight present with the right shape
        Ok(ck)
    }

    /// Dequantizes a packed checkpoint into ordinary weights.
    fn from_packed(p: &PackedCheckpoint, meta: BTreeMap<String, String>, dtype: DType, dev: &Device) -> Result<Self> {
        let mut weights = Weights::new();
        for (name, shape, _) in param_specs(&p.config) {
            let packed = p.tensors.get(&name).ok_or_else(|| Error::MissingWeight(name.clone()))?;
            let data = packed.to_f32(p.scheme);
            weights.insert(name, Tensor::from_vec(data, shape, dev)?.to_dtype(dtype)?);
        }
        let ck = Self { config: p.config.clone(), vocab: p.vocab.clone(), weights, extra: Weights::new(), meta };
        ck.model()?;
        Ok(ck)
    }
}
