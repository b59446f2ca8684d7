//! Full-precision checkpoints: safetensors with the config, the vocabulary and
//! any training state in the header metadata. Read from bytes (no filesystem),
//! so the same code runs in the browser.

use std::collections::{BTreeMap, HashMap};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};
use safetensors::SafeTensors;

use crate::model::{param_specs, Weights};
use crate::{Error, Model, ModelConfig, Result, Vocab};

pub const FORMAT_KEY: &str = "format";
pub const FORMAT_F32: &str = "nrgpt-web/f32/v1";
const RESERVED: [&str; 3] = [FORMAT_KEY, "config", "vocab"];

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

impl Checkpoint {
    pub fn model(&self) -> Result<Model> {
        Model::new(&self.config, &self.weights)
    }

    /// Serialises every tensor as f32.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.vocab.len() != self.config.vocab_size {
            return Err(Error::Checkpoint(format!(
                "vocabulary has {} characters but the config says {}",
                self.vocab.len(),
                self.config.vocab_size
            )));
        }
        let mut md: HashMap<String, String> = HashMap::new();
        for (k, v) in &self.meta {
            if RESERVED.contains(&k.as_str()) {
                return Err(Error::Checkpoint(format!("metadata key `{k}` is reserved")));
            }
            md.insert(k.clone(), v.clone());
        }
        md.insert(FORMAT_KEY.into(), FORMAT_F32.into());
        md.insert("config".into(), serde_json::to_string(&self.config)?);
        md.insert("vocab".into(), self.vocab.to_json());
        let mut tensors = Vec::new();
        for (name, t) in self.weights.iter().chain(self.extra.iter()) {
            tensors.push((name.clone(), t.to_dtype(DType::F32)?.contiguous()?));
        }
        Ok(safetensors::serialize(tensors, Some(md))?)
    }

    /// Parses a checkpoint, converting weights to `dtype` on `dev`.
    pub fn from_bytes(bytes: &[u8], dtype: DType, dev: &Device) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| Error::Checkpoint(format!("not a safetensors file ({e})")))?;
        let (_, header) = SafeTensors::read_metadata(bytes)?;
        let md = header.metadata().clone().unwrap_or_default();
        let field = |k: &str| md.get(k).ok_or_else(|| Error::Checkpoint(format!("metadata has no `{k}` entry")));
        let format = field(FORMAT_KEY)?;
        if format != FORMAT_F32 {
            return Err(Error::Checkpoint(format!("format `{format}` is not `{FORMAT_F32}`")));
        }
        let config: ModelConfig = serde_json::from_str(field("config")?)
            .map_err(|e| Error::Checkpoint(format!("config metadata does not parse: {e}")))?;
        config.validate()?;
        let vocab = Vocab::from_json(field("vocab")?)?;
        if vocab.len() != config.vocab_size {
            return Err(Error::Checkpoint(format!(
                "vocabulary has {} characters but the config says {}",
                vocab.len(),
                config.vocab_size
            )));
        }
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
        let meta = md.into_iter().filter(|(k, _)| !RESERVED.contains(&k.as_str())).collect();
        let ck = Self { config, vocab, weights, extra, meta };
        ck.model()?; // every weight present with the right shape
        Ok(ck)
    }
}
